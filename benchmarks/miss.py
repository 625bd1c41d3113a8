"""What a miss after warm-up costs on the request path: Triton's inline compile vs zerojit's
fallback (issue 29), on a GPU.

The kernel is the example ``scale_add`` (``zerojit.examples.scale_add``: ``period`` is an int
Triton specializes: 1, divisible by 16, other). It is warmed for periods 64 and 1 only, so the
"other" class has no specialized variant; zerojit's warm-up also loads the group's generic
variant (every int unspecialized, every pointer without the alignment assumption). Then, under
the monitor, three launches, each followed by ``torch.cuda.synchronize()`` and timed in wall
time until it returned:

1. period 64 (warmed): the process's first launch, which pays the first use of the tensors and
   of the launch path whatever the mode (not compared);
2. period 1 (warmed, first launch of its variant): the reference, **warmed first**; it pays
   CUDA's lazy loading of its function, as the next does;
3. period 7 (the missing class): **miss first**. Mode ``triton``: the monitor in warn mode, the
   miss compiles inline (Triton's own path). Mode ``fallback``: ``JitMonitor("fallback",
   fallback=FallbackOptions(swap="immediate"))``: the generic variant launches at once, the key
   compiles in a background worker; **swap** is the time from that launch's start until
   ``zerojit.serving.wait_idle`` says it was compiled, loaded and swapped in.

Both outputs are checked against PyTorch (the fallback launch's, and the swapped-in variant's).
Each measured first launch needs a new process (a kernel's first launch happens once per
process), with an empty Triton cache folder (a cold compile, the warm-up inside the child):
``--rounds`` rounds alternate the two modes' order. Printed: medians and spread (min-max) over
rounds, and the ratio miss first / warmed first of each round. Goal: the fallback's first launch
<= 1.1x a warmed key's first launch.

``--device cpu`` runs the same under compile-only (``cuda:90``: the warm-up and the background
compile really compile, launches are dry: Triton's binder and cache lookup, nothing executes, so
no output is checked and no CUDA loading is paid): the request-path figures of the compile-only
path, where Triton's inline compile is a real compile too.

Usage: ``PYTHONPATH=src python benchmarks/miss.py [--device cuda|cpu] [--rounds 5] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("triton", "fallback")
WARMED = (64, 1)  # period classes warmed: divisible by 16, and 1
MISSED = 7  # the class not warmed ("other")
SWAP_DEADLINE_S = 120.0


def child(mode: str, device: str) -> dict:
    import contextlib

    from zerojit.compile_only import compile_only

    with (compile_only("cuda:90") if device == "cpu" else contextlib.nullcontext()):
        return _measure(mode, device)


def _measure(mode: str, device: str) -> dict:
    import torch

    from zerojit import JitMonitor, JitWarmupRegistry
    from zerojit.examples.scale_add import scale_add

    gpu = device == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    n = 1 << 20
    x = torch.randn(n, device=device)
    bias = torch.randn(64, device=device)
    out = torch.empty_like(x)
    sync()
    t0 = time.perf_counter()
    registry = JitWarmupRegistry()
    with registry.activate():
        scale_add.register_warmup(periods=WARMED)
    report = registry.warmup(progress=False)  # generic variants: the registry's default
    warmup_ms = (time.perf_counter() - t0) * 1e3

    def launch(period: int) -> float:
        t = time.perf_counter()
        scale_add(x=x, bias=bias, out=out, period=period, scale=1.5)
        sync()
        return (time.perf_counter() - t) * 1e3

    def check(period: int, what: str) -> None:
        if not gpu:  # a dry launch computes nothing
            return
        expected = x * 1.5 + bias[torch.arange(n, device=device) % period]
        # Triton fuses the multiply-add (one rounding), torch rounds twice: 1 ulp apart at most
        if not torch.allclose(out, expected, rtol=2e-7, atol=1e-6):
            raise SystemExit(f"{mode}: {what}: wrong result (max error {(out - expected).abs().max().item()})")

    if mode == "fallback":
        from zerojit import serving

        monitor = JitMonitor("fallback", fallback=serving.FallbackOptions(swap="immediate"))
    else:
        monitor = JitMonitor("warn")
    swap_ms = None
    with monitor:
        process_first = launch(WARMED[0])
        warmed_first = launch(WARMED[1])
        check(WARMED[1], "warmed key")
        t_miss = time.perf_counter()
        miss_first = launch(MISSED)
        check(MISSED, "first launch of the missing class")
        if mode == "fallback":
            if not serving.wait_idle(SWAP_DEADLINE_S):
                raise SystemExit(f"fallback: no swap within {SWAP_DEADLINE_S:.0f} s")
            swap_ms = (time.perf_counter() - t_miss) * 1e3
            out.zero_()
            launch(MISSED)  # now the specialized variant
            check(MISSED, "the swapped-in variant")
        counts = monitor.counts()
    served = {k: getattr(counts, k, None) for k in ("request_path_compiles", "fallback_launches",
                                                    "background_compiles", "swaps")}
    return {"mode": mode, "device": device, "warmup_ms": warmup_ms, "keys": report.num_keys,
            "generic_variants": getattr(report, "generic_variants", None), "process_first_ms": process_first,
            "warmed_first_ms": warmed_first, "miss_first_ms": miss_first, "swap_ms": swap_ms,
            "runtime_compiles": counts.runtime_compiles, **served}


def run_child(mode: str, device: str, timeout: float) -> dict:
    """One fresh process with an empty Triton cache folder (and Triton home: nothing remembered)."""
    with tempfile.TemporaryDirectory(prefix="miss-") as folder:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(folder, "cache"), TRITON_HOME=folder)
        env.pop("ZEROJIT_JIT_MONITOR", None)
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", mode, "--device", device], env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"mode": mode, "error": f"no result after {timeout:.0f} s"}
    if proc.returncode:
        return {"mode": mode, "error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def spread(values: list[float], fmt: str = ".3f") -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: compile-only cuda:90, dry launches (no output checked)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each one fresh process per mode")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds one process may take")
    parser.add_argument("--json", help="also write every round and the summary here")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.device)))
        return
    if args.rounds < 1:  # each refused before the first process, not after every round failed
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("miss.py: --device cuda needs a CUDA GPU (none is visible); --device cpu runs the same "
                  "compile-only", file=sys.stderr)
            sys.exit(2)
    rows = []
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            row = run_child(mode, args.device, args.timeout)
            row["round"] = r
            rows.append(row)
            print(f"round {r} {mode:<8}: " + (row.get("error") or
                  f"warmed first {row['warmed_first_ms']:.3f} ms, miss first {row['miss_first_ms']:.3f} ms"
                  + (f", swap {row['swap_ms']:.0f} ms" if row["swap_ms"] is not None else "")), flush=True)

    where = "cuda" if args.device == "cuda" else "cpu, compile-only cuda:90 (dry launches)"
    print(f"\nfirst launch of a class not warmed (scale_add, period {MISSED}; warmed: periods {WARMED}) on {where}, "
          f"{args.rounds} rounds, ms, median (min-max)")
    print(f"{'mode':<10}{'warm-up':>24}{'warmed first':>24}{'miss first':>28}{'miss/warmed':>28}{'swap':>24}"
          f"  counts (request-path, fallback, background, swaps)")
    summary = {}
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode and "error" not in r]
        if not mine:
            print(f"{mode:<10}every round failed: {[r['error'] for r in rows if r['mode'] == mode][:1]}")
            continue
        ratio = [r["miss_first_ms"] / r["warmed_first_ms"] for r in mine]
        counts = sorted({(r["request_path_compiles"], r["fallback_launches"], r["background_compiles"], r["swaps"])
                         for r in mine}, key=str)
        swaps = [r["swap_ms"] for r in mine if r["swap_ms"] is not None]
        print(f"{mode:<10}{spread([r['warmup_ms'] for r in mine], '.0f'):>24}"
              f"{spread([r['warmed_first_ms'] for r in mine]):>24}{spread([r['miss_first_ms'] for r in mine]):>28}"
              f"{spread(ratio, '.2f'):>28}{spread(swaps, '.0f') if swaps else '':>24}  {counts}")
        summary[mode] = {"ratio": ratio, "swap_ms": swaps, "counts": counts}
    if "fallback" in summary:
        med = statistics.median(summary["fallback"]["ratio"])
        print(f"goal: fallback first launch <= 1.1x a warmed key's first launch: {med:.2f}x, "
              + ("met" if med <= 1.1 else "NOT met"))
    if args.json:
        write_output(args.json, json.dumps({"summary": summary, "rounds": rows}, indent=2))
    sys.exit(1 if any("error" in r for r in rows) else 0)  # a round that gave no result fails the benchmark


if __name__ == "__main__":
    main()
