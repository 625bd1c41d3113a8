"""An unmodified Liger-Kernel program on a GPU: first request without warm-up vs after
``zerojit exec --manifest``, and a manifest's warm-up with workers vs serial.

The program (``--program``) is plain library use: Liger's RMSNorm forward
(``liger_kernel.ops.rms_norm.LigerRMSNormFunction``) over a realistic shape spread, token counts
1 to 8192, hidden sizes 2048 and 4096, bf16 (each shape a "request"). For each shape it times the
first call and the median of 20 more (steady state), synchronizing after each, and prints one
JSON line. zerojit never appears in it.

The benchmark, each step in a fresh process and, where it compiles, an empty Triton cache:

1. ``zerojit record -o M -- python manifest.py --program``: the manifest of what it launched;
2. ``python manifest.py --program``: no warm-up (every new specialization compiles in its first
   request);
3. ``zerojit exec --manifest M -- python manifest.py --program``: the manifest warmed (workers),
   then the same program, monitor in error mode;
4. ``zerojit warmup --manifest M`` with ``--workers 16`` and ``--workers 1`` (serial: Triton's
   compiles one after the other in the process), alternating over ``--rounds``.

Printed: per mode the first request's latency as a ratio to steady state (median and range over
shapes), and the warm-up seconds (median and range over rounds). Needs a CUDA GPU; without one it
says so and exits 0.

Usage: ``PYTHONPATH=src python benchmarks/manifest.py [--rounds 3] [--workers 16] [--json OUT]``
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

SHAPES = [(t, h) for h in (2048, 4096) for t in (1, 7, 16, 100, 1024, 3000, 8192)]


def program() -> None:
    """The unmodified program: Liger RMSNorm over the shape spread, timing each shape."""
    import torch
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    for tokens, hidden in SHAPES:
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(hidden, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        LigerRMSNormFunction.apply(x, w, 1e-6)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        steady = []
        for _ in range(20):
            t0 = time.perf_counter()
            LigerRMSNormFunction.apply(x, w, 1e-6)
            torch.cuda.synchronize()
            steady.append(time.perf_counter() - t0)
        print(json.dumps({"tokens": tokens, "hidden": hidden, "first_ms": first * 1e3,
                          "steady_ms": statistics.median(steady) * 1e3}), flush=True)


def _run(cmd: list[str], cache: str, home: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, TRITON_HOME=home, PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out, took


def _ratios(stdout: str) -> list[float]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [r["first_ms"] / r["steady_ms"] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", action="store_true", help="run the unmodified program itself")
    parser.add_argument("--rounds", type=int, default=3, help="warm-up rounds per mode, alternating")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args()
    if opts.program:
        return program()
    import torch

    if not torch.cuda.is_available():
        print("benchmarks/manifest.py needs a CUDA GPU (it measures real first launches); nothing measured")
        return
    py, me = sys.executable, os.path.abspath(__file__)
    zj = [py, "-m", "zerojit"]
    with tempfile.TemporaryDirectory() as tmp:
        def fresh(name: str) -> tuple[str, str]:
            return os.path.join(tmp, name, "cache"), os.path.join(tmp, name, "home")

        manifest = os.path.join(tmp, "m.json")
        _run([*zj, "record", "-o", manifest, "--", py, me, "--program"], *fresh("record"))
        plain, _ = _run([py, me, "--program"], *fresh("plain"))
        warmed, _ = _run([*zj, "exec", "--manifest", manifest, "--workers", str(opts.workers), "--", py, me,
                          "--program"], *fresh("exec"))
        seconds: dict[str, list[float]] = {f"workers {opts.workers}": [], "serial (workers 1)": []}
        for r in range(opts.rounds):
            for name, n in ((f"workers {opts.workers}", opts.workers), ("serial (workers 1)", 1)):
                _, took = _run([*zj, "warmup", "--manifest", manifest, "--workers", str(n)], *fresh(f"w{r}-{n}"))
                seconds[name].append(took)
    specs = sum(len(k.get("specializations", [])) for k in json.load(open(manifest)).get("kernels", [])) \
        if os.path.exists(manifest) else None
    results = {"gpu": torch.cuda.get_device_name(), "shapes": len(SHAPES), "specializations": specs}
    print(f"unmodified Liger RMSNorm program, {len(SHAPES)} shapes (tokens 1-8192, hidden 2048/4096, bf16); "
          f"GPU {results['gpu']}")
    print("  first request / steady state, per shape: median (min-max)")
    for name, out in (("no warm-up", plain), ("zerojit exec --manifest", warmed)):
        r = _ratios(out.stdout)
        results[name] = {"median": statistics.median(r), "min": min(r), "max": max(r), "ratios": r}
        print(f"    {name:<26} {statistics.median(r):8.2f}x  ({min(r):.2f}-{max(r):.2f}x)")
    print(f"  manifest warm-up, whole process (seconds), {opts.rounds} alternating rounds: median (min-max)")
    for name, s in seconds.items():
        results[name] = s
        print(f"    {name:<26} {statistics.median(s):8.2f} s ({min(s):.2f}-{max(s):.2f})")
    serial, par = statistics.median(seconds["serial (workers 1)"]), statistics.median(seconds[f"workers {opts.workers}"])
    print(f"    serial / workers: {serial / par:.2f}x")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
