"""An autotuned kernel after warm-up: zerojit vs plain Triton autotune, measured in the same run.

Kernel: ``zerojit.examples.tuned_scale`` (heuristics over a 6-config autotuner, pruned per row
length). Each mode runs in fresh processes with an empty Triton cache folder, the modes
interleaved over several rounds; printed: the median and the spread (min-max) over the rounds.

* ``zerojit``: ``registry.warmup()`` compiles every surviving config of the key space and, on a
  GPU, benchmarks the declared tuning keys (``tuning_inputs``: row lengths ``SIZES``); then, each
  launch timed with ``torch.cuda.synchronize()``:

  - the kernel's *first launch* after warm-up, at a tuned key (timed apart, as
    ``benchmarks/first_launch.py`` times a process's first launch: it also pays for the first
    use of the tensors and of this kernel's launch path, whatever the tuning);
  - the *first launch at a new tuning key*: ``NEW_KEYS`` row lengths never tuned, each launched
    once (the ``nearest`` policy decides, once per tuning key: pruning evaluated, the nearest
    surviving tuned key looked up, the choice put in the autotuner's cache); per process, the
    first of them (``NEW_N``) and the median of all;
  - the steady state: the median of 200 launches at ``NEW_N``;
  - on a GPU, each of those split into the host's part (until the call returns) and the wait in
    ``torch.cuda.synchronize()`` (where a new tuning key's extra time goes: the host's decision,
    or the GPU).
* ``triton``: plain ``tuned_scale_kernel[grid](...)``: its first call at ``NEW_N`` benchmarks every
  surviving config (what zerojit moves to warm-up), then the steady state.
* ``zerojit-unprimed``: ``zerojit`` with ``ZEROJIT_PRIME_KERNELS=0`` (the warm-up does not run each
  warmed key's launch path dry, :mod:`zerojit.launch_priming`): the A/B of that priming, printed
  as first launch / steady, primed vs unprimed (each the median and spread over the rounds);
* warm-up seconds of the ``zerojit`` mode with tuning: serial (``workers=1``) vs ``--workers N``.

Goal: zerojit's first launch at a new tuning key <= 2x its steady state. Ratios are against
launches measured here.

Without a GPU the script still runs, labelled ``compile-only (no GPU)``: warm-up under
``compile_only("cuda:90")`` (every config compiles; the tuning table comes from a tuning file
written before the warm-up, as a GPU warm-up would leave it, choosing a config for each of
``SIZES``), and the "launches" are dry launches (binder and cache lookup, nothing executes);
plain Triton's first call cannot run there and is reported as n/a.

``--probe`` (a GPU): is any cost of a new tuning key on the GPU side? A tuning file chooses
BLOCK 64 / 2 warps at 4096 and BLOCK 1024 / 4 warps at 2**20, so no benchmark runs and neither
variant has run before its first launch; then, each launch synchronized: the kernel's first
launch (4096: variant A's first real launch), 20 launches at 4096, the first launch at ``NEW_N``
(a new tuning key and variant B's first real launch), the first launch at ``NEW_N + 1000`` (a new
tuning key, variant B launched before) and the steady state at ``NEW_N``; once with
``CUDA_MODULE_LOADING=LAZY`` and once with ``EAGER``. Printed: each time, "B's first real
launch" (new key with B new minus new key with B launched) and "new key / steady".

Usage: ``PYTHONPATH=src python benchmarks/autotune.py [--rounds 3] [--workers 4] [--json OUT] [--probe]``
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

PRIME_ENV = "ZEROJIT_PRIME_KERNELS"  # zerojit.launch_priming.PRIME_ENV (not imported: the parent stays light)
SIZES = (4096, 1 << 20)  # the tuning keys warm-up benchmarks (row lengths)
NEW_N = 100_000  # a row length never tuned: a new tuning key at serving time
NEW_KEYS = 20  # row lengths never tuned, from NEW_N up, each launched once
STEADY = 200


def child(mode: str, workers: int) -> dict:
    import torch
    import triton

    gpu = torch.cuda.is_available()
    from zerojit import JitWarmupRegistry
    from zerojit.autotune import save_tuning_file
    from zerojit.compile_only import compile_only
    from zerojit.examples.tuned_scale import TunedScale, tuned_scale_kernel

    device = "cuda" if gpu else "cpu"
    new_ns = [NEW_N + 1000 * i for i in range(NEW_KEYS)]
    x = torch.randn(max(SIZES[-1], new_ns[-1]), device=device)
    out = torch.empty_like(x)
    views = {n: (x[:n], out[:n]) for n in (SIZES[0], *new_ns)}  # made before any timing
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    kernel = TunedScale()
    result: dict = {"mode": mode, "gpu": gpu}

    host: dict[str, list[float]] = {}  # of the launches below: seconds until the call returned (the rest: sync)

    def timed(fn, part: str | None = None) -> float:
        t = time.perf_counter()
        fn()
        returned = time.perf_counter()
        sync()
        if part is not None:
            host.setdefault(part, []).append(returned - t)
        return time.perf_counter() - t

    def run() -> None:
        if mode == "triton":
            xn, on = views[NEW_N]
            result["first_s"] = timed(lambda: tuned_scale_kernel[lambda m: (triton.cdiv(NEW_N, m["BLOCK"]),)](
                xn, on, NEW_N, 2.0))
            result["steady_s"] = statistics.median(
                timed(lambda: tuned_scale_kernel[lambda m: (triton.cdiv(NEW_N, m["BLOCK"]),)](xn, on, NEW_N, 2.0))
                for _ in range(STEADY))
            return
        if not gpu:  # what a GPU warm-up would have tuned: BLOCK 1024 / 4 warps at each size
            configs = kernel._wrapping.configs
            best = next(i for i, c in enumerate(configs) if c.kwargs["BLOCK"] == 1024 and c.num_warps == 4)
            save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), configs,
                             [((n, "torch.float32", "torch.float32"), best, None) for n in SIZES])
        t0 = time.perf_counter()
        registry = JitWarmupRegistry()
        with registry.activate():
            kernel.register_warmup(sizes=SIZES)
        registry.warmup(progress=False, workers=workers)
        result["warmup_s"] = time.perf_counter() - t0
        result["tuned"] = len(type(kernel)._tuning_table)

        def launch(n: int, part: str) -> float:
            xn, on = views[n]
            return timed(lambda: kernel(x=xn, out=on, scale=2.0), part)

        result["first_tuned_s"] = launch(SIZES[0], "first_tuned")
        firsts = [launch(n, "new") for n in new_ns]
        result["first_s"] = firsts[0]
        result["first_median_s"] = statistics.median(firsts)
        result["steady_s"] = statistics.median(launch(NEW_N, "steady") for _ in range(STEADY))
        result["host_s"] = {"first_tuned": host["first_tuned"][0], "first": host["new"][0],
                            "first_median": statistics.median(host["new"]), "steady": statistics.median(host["steady"])}

    if gpu:
        run()
    elif mode == "triton":
        result["first_s"] = result["steady_s"] = None  # a real launch: needs a GPU
    else:
        with compile_only("cuda:90"):
            run()
    return result


def probe_child() -> dict:
    import torch

    from zerojit import JitWarmupRegistry
    from zerojit.autotune import save_tuning_file
    from zerojit.examples.tuned_scale import TunedScale

    kernel = TunedScale()
    configs = kernel._wrapping.configs
    pick = {n: next(i for i, c in enumerate(configs) if (c.kwargs["BLOCK"], c.num_warps) == bw)
            for n, bw in ((SIZES[0], (64, 2)), (SIZES[1], (1024, 4)))}
    save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), configs,
                     [((n, "torch.float32", "torch.float32"), i, None) for n, i in pick.items()])
    x = torch.randn(SIZES[1], device="cuda")
    out = torch.empty_like(x)
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup(sizes=SIZES)
    registry.warmup(progress=False, workers=1)

    def launch(n: int) -> float:
        xn, on = x[:n], out[:n]
        torch.cuda.synchronize()
        t = time.perf_counter()
        kernel(x=xn, out=on, scale=2.0)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    result = {"loading": os.environ.get("CUDA_MODULE_LOADING", "default"), "kernel_first_s": launch(SIZES[0])}
    result["tuned_steady_s"] = statistics.median(launch(SIZES[0]) for _ in range(20))
    result["new_key_new_variant_s"] = launch(NEW_N)
    result["new_key_s"] = launch(NEW_N + 1000)
    result["steady_s"] = statistics.median(launch(NEW_N) for _ in range(STEADY))
    return result


def probe() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("--probe times real launches: it needs a GPU")
    for loading in ("LAZY", "EAGER"):
        r = run_child("probe", 1, {"CUDA_MODULE_LOADING": loading})
        ms = {k: v * 1e3 for k, v in r.items() if k.endswith("_s")}
        print(f"CUDA_MODULE_LOADING={loading}: kernel's first {ms['kernel_first_s']:.3f} ms, steady at 4096 "
              f"{ms['tuned_steady_s']:.3f}; new key + B's first real launch {ms['new_key_new_variant_s']:.3f}, "
              f"new key {ms['new_key_s']:.3f}, steady {ms['steady_s']:.3f} ms; B's first real launch "
              f"{ms['new_key_new_variant_s'] - ms['new_key_s']:+.3f} ms; new key / steady "
              f"{ms['new_key_s'] / ms['steady_s']:.2f}x")


def run_child(mode: str, workers: int, extra_env: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="zerojit-bench-autotune-") as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache, ZEROJIT_JIT_MONITOR="off", **(extra_env or {}))
        p = subprocess.run([sys.executable, __file__, "--child", mode, "--workers", str(workers)], env=env,
                           capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _summary(values: list) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "n/a"
    return f"{statistics.median(vals) * 1e3:9.3f} ms  (spread {min(vals) * 1e3:.3f}-{max(vals) * 1e3:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, each a fresh process per mode")
    parser.add_argument("--workers", type=int, default=4, help="compile worker processes of the timed parallel warm-up")
    parser.add_argument("--json", help="also write every run here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true",
                        help="GPU: the first real launch of a variant vs a new tuning key")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(probe_child() if args.child == "probe" else child(args.child, args.workers)))
        return
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):  # not after minutes of measuring
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.probe:
        probe()
        return
    runs: dict[str, list[dict]] = {"zerojit": [], "zerojit-unprimed": [], "zerojit-workers": [], "triton": []}
    for _ in range(args.rounds):  # interleaved: drift hits every mode alike
        runs["zerojit"].append(run_child("zerojit", 1))
        runs["zerojit-unprimed"].append(run_child("zerojit", 1, {PRIME_ENV: "0"}))
        runs["zerojit-workers"].append(run_child("zerojit", args.workers))
        runs["triton"].append(run_child("triton", 1))
    gpu = runs["zerojit"][0]["gpu"]
    label = "GPU" if gpu else "compile-only (no GPU): dry launches, tuning file, no plain-Triton launch"
    print(f"autotuned kernel after warm-up, {args.rounds} rounds, {label}")
    zj = runs["zerojit"]
    for name, key in (("zerojit kernel's first launch (tuned key)", "first_tuned_s"),
                      ("zerojit first launch, new tuning key", "first_s"),
                      (f"  median over {NEW_KEYS} new tuning keys", "first_median_s"),
                      ("zerojit steady state", "steady_s")):
        print(f"  {name:<42} {_summary([r[key] for r in zj])}")
    for name, key in (("triton autotune first call (benchmarks)", "first_s"), ("triton steady state", "steady_s")):
        print(f"  {name:<42} {_summary([r[key] for r in runs['triton']])}")
    steady = statistics.median(r["steady_s"] for r in zj)
    first = statistics.median(r["first_s"] for r in zj)
    ratios = [r["first_median_s"] / r["steady_s"] for r in zj]
    print(f"  zerojit new tuning key / steady: {first / steady:.2f}x first, {statistics.median(ratios):.2f}x median of "
          f"{NEW_KEYS} (spread {min(ratios):.2f}-{max(ratios):.2f}; goal <= 2x)")
    kernel_first = statistics.median(r["first_tuned_s"] for r in zj)
    print(f"  zerojit kernel's first launch / steady: {kernel_first / steady:.2f}x")
    if gpu:  # where each launch's time goes: until the call returned, then the wait in synchronize
        parts = []
        for name, key, total in (("kernel's first", "first_tuned", "first_tuned_s"), ("new key's first", "first", "first_s"),
                                 ("new key, median", "first_median", "first_median_s"), ("steady", "steady", "steady_s")):
            h = statistics.median(r["host_s"][key] for r in zj) * 1e6
            parts.append(f"{name} {h:.1f} + {statistics.median(r[total] for r in zj) * 1e6 - h:.1f}")
        print(f"  zerojit host + synchronize, us (medians over the rounds): {'; '.join(parts)}")
    if zj[0]["first_s"] is not None:  # the warm-up's launch-path priming, A/B (each round's pair)
        for name, key in (("kernel's first launch", "first_tuned_s"), ("first launch at a new tuning key", "first_s")):
            on = [r[key] / r["steady_s"] for r in zj]
            off = [r[key] / r["steady_s"] for r in runs["zerojit-unprimed"]]
            print(f"  {name} / steady, primed vs {PRIME_ENV}=0: {statistics.median(on):.2f}x "
                  f"(spread {min(on):.2f}-{max(on):.2f}) vs {statistics.median(off):.2f}x "
                  f"(spread {min(off):.2f}-{max(off):.2f})")
    tfirst = [r["first_s"] for r in runs["triton"] if r["first_s"] is not None]
    if tfirst:
        print(f"  triton first / zerojit first at a new tuning key: {statistics.median(tfirst) / first:.1f}x")
    print(f"  warm-up with tuning, serial        {_summary([r['warmup_s'] for r in runs['zerojit']])}")
    print(f"  warm-up with tuning, {args.workers} workers     {_summary([r['warmup_s'] for r in runs['zerojit-workers']])}")
    if args.json:
        write_output(args.json, json.dumps({"gpu": gpu, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
