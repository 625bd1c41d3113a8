"""First real launch after warm-up vs the steady state, on a GPU.

Each mode runs in several fresh processes with an empty Triton cache directory, the modes interleaved:

* ``zerojit``: ``JitWarmupRegistry.warmup()`` (compile + module load + launcher build, then each
  warmed key's launch path run dry: :mod:`zerojit.launch_priming`);
* ``zerojit-unprimed``: the same with ``ZEROJIT_PRIME_KERNELS=0`` (no such priming): its A/B;
* ``triton-warmup``: Triton's own ``JITFunction.warmup(...)`` for the same key (compiles only);
* ``none``: no warm-up at all (plain JIT on the first launch).

Two keys of one kernel are warmed (A and B). The process's first launch (key A) is timed apart:
it also pays for the first use of the tensors and of the launch path, whatever the warm-up. Then
key B's first launch is timed, and 200 more launches of it (the steady state: median), each with
a ``torch.cuda.synchronize()``. Printed: milliseconds and the ratio key-first / steady for each
mode, all measured in the same run.

Each mode runs in ``--repeat`` processes (default 5; medians printed). Without a GPU it exits 2
with one line (real launches are what it times).

Usage: ``PYTHONPATH=src python benchmarks/first_launch.py [--repeat 5] [--json OUT]``
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

MODES = ("zerojit", "zerojit-unprimed", "triton-warmup", "none")
PRIME_ENV = "ZEROJIT_PRIME_KERNELS"  # zerojit.launch_priming.PRIME_ENV (not imported: the parent stays light)
NO_GPU = 2  # a child's exit status when no CUDA GPU is visible (the parent exits with it too)


def child(mode: str) -> dict:
    import torch

    if not torch.cuda.is_available():  # real launches are what is timed: no compile-only stand-in
        print("first_launch.py needs a CUDA GPU (none is visible); benchmarks/autotune.py measures "
              "the primed vs unprimed first launch under compile-only", file=sys.stderr)
        sys.exit(NO_GPU)
    from zerojit import JitWarmupRegistry
    from zerojit.examples.scale_add import _scale_add_kernel, scale_add

    n = 1 << 20
    x = torch.randn(n, device="cuda")
    bias = torch.randn(64, device="cuda")
    out = torch.empty_like(x)
    periods = (64, 7)  # key A (divisible by 16) and key B (other): two variants of one kernel
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if mode in ("zerojit", "zerojit-unprimed"):
        registry = JitWarmupRegistry()
        with registry.activate():
            scale_add.register_warmup(periods=periods)
        registry.warmup(progress=False)
    elif mode == "triton-warmup":
        for period in periods:
            _scale_add_kernel.warmup(x, bias, out, n, period, 1.5, BLOCK=256, grid=(1,))
    warmup_s = time.perf_counter() - t0

    def launch(period: int) -> float:
        t = time.perf_counter()
        scale_add(x=x, bias=bias, out=out, period=period, scale=1.5)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    # The process's first launch (key A) also pays for first use of these tensors and of the launch
    # path, whatever the warm-up; key B's first launch is the per-key cost that warm-up must remove.
    process_first = launch(periods[0])
    first = launch(periods[1])
    steady = sorted(launch(periods[1]) for _ in range(200))[100]
    expected = x * 1.5 + bias[torch.arange(n, device="cuda") % periods[1]]
    assert torch.allclose(out, expected, rtol=1e-5, atol=1e-5), "wrong result"
    return {"mode": mode, "warmup_ms": warmup_s * 1e3, "process_first_ms": process_first * 1e3,
            "first_ms": first * 1e3, "steady_ms": steady * 1e3}


def run_child(mode: str) -> dict:
    """One fresh process with an empty Triton cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=cache)
        if mode == "zerojit-unprimed":
            env[PRIME_ENV] = "0"
        try:
            proc = subprocess.run([sys.executable, __file__, "--child", mode], env=env, capture_output=True, text=True,
                                  timeout=600)
        except subprocess.TimeoutExpired:  # a hung child ends the benchmark, it does not wait forever
            sys.exit(f"{mode}: no result after 600 s")
    if proc.returncode == NO_GPU:
        print(proc.stderr.strip(), file=sys.stderr)
        sys.exit(NO_GPU)
    if proc.returncode:
        sys.exit(f"{mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per mode (medians reported)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    from zerojit.outputs import output_problem, write_output

    if args.json and (problem := output_problem(args.json)):  # not after every process ran
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    if args.child:
        print(json.dumps(child(args.child)))
        return
    rows = [run_child(mode) for _ in range(args.repeat) for mode in MODES]  # interleaved: drift hits every mode
    print(f"{'mode':<18}{'warm-up ms':>12}{'process 1st ms':>16}{'key 1st ms':>12}{'steady ms':>12}{'key 1st/steady':>16}"
          f"   (medians of {args.repeat} processes)")
    summary = []
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        med = {f: statistics.median(r[f] for r in mine) for f in ("warmup_ms", "process_first_ms", "first_ms", "steady_ms")}
        ratios = [r["first_ms"] / r["steady_ms"] for r in mine]
        med["ratio"], med["ratio_spread"] = statistics.median(ratios), (min(ratios), max(ratios))
        summary.append({"mode": mode, **med, "runs": mine})
        print(f"{mode:<18}{med['warmup_ms']:>12.1f}{med['process_first_ms']:>16.3f}{med['first_ms']:>12.3f}"
              f"{med['steady_ms']:>12.3f}{med['ratio']:>15.2f}x  (spread {min(ratios):.2f}-{max(ratios):.2f}x)")
    rows = summary
    if args.json:
        write_output(args.json, json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
