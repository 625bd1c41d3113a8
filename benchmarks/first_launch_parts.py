"""Where a warmed variant's first launch goes, on a GPU, and whether warm-up could prepay it; a
diagnosis, no goal (issue 33's first-launch rows).

Two kernels, each warmed by zerojit in fresh processes (one shared Triton cache folder, filled by
an untimed first round; modes interleaved per round):

* ``scale_add``, keys A (period 64) and B (period 7): A launched once, then B's first launch, its
  second, and the steady state (median of 200), each split into the host's part (until the call
  returns) and the wait in ``torch.cuda.synchronize()``;
* ``tuned_scale`` with ``autotune.py --probe``'s tuning file (4096: BLOCK 64 / 2 warps; 2**20:
  BLOCK 1024 / 4 warps, nothing benchmarks): its first launch at 4096, then 20 new tuning keys
  (100,000 + 1,000 i) and the steady state at 100,000.

Modes: what the warm-up could do more per loaded function (``CompiledKernel.function``), each
a driver call through ``ctypes``:

* ``base``: the warm-up as it is (module, function and launcher loaded, ``cuFuncLoad``, the
  launch path primed dry: :mod:`zerojit.launch_priming`);
* ``occ``: ``cuOccupancyMaxActiveBlocksPerMultiprocessor``; ``attrs``: ``cuFuncGetAttribute``
  0-9; ``param``: ``cuFuncGetParamInfo`` per parameter (CUDA 12.4+); ``grid0``:
  ``cuLaunchKernel`` with a grid of 0 blocks (refused: nothing runs);
* ``eager``: ``CUDA_MODULE_LOADING=EAGER``;
* ``realB``: B launched for real once before it is timed (what no warm-up may do: a real launch
  writes memory): the floor, its "first" is a second launch;
* ``cdirect``: after A's launch, each variant's launcher (``CompiledKernel.run``, the C entry and
  the driver's ``cuLaunchKernel``) called directly three times with a one-block grid, each call
  timed: is a function's first ``cuLaunchKernel`` dearer than its next?

2026-12-07 (stop 49), **H100** (driver 580.159.04, torch 2.11, Triton 3.6.0, Python 3.12), 3
rounds, a host drifting 1.5x between processes (steady host time 19-30 us):

====== ================================== ====================== ==========================
mode   scale_add B first / steady          B second, host+wait us  tuned: new key 1st / steady
====== ================================== ====================== ==========================
base   2.12x (1.93-2.33), 62.0+16.2 us     49.0+14.2               2.40x (2.16-2.49)
occ    1.94x (1.32-1.98)                   31.1+9.4                2.76x (2.40-4.02)
attrs  2.13x (1.99-2.78)                   52.6+11.0               2.50x (2.43-2.69)
param  2.15x (1.88-2.87)                   41.5+13.3               2.42x (2.33-3.82)
grid0  1.92x (1.81-2.10)                   42.9+16.7               2.44x (2.37-3.53)
eager  2.05x (1.99-2.32)                   48.4+10.9               2.48x (2.26-2.67)
realB  1.63x (1.54-1.65)                   29.0+9.1                (not applied)
====== ================================== ====================== ==========================

``cdirect``, per process, microseconds of the direct launcher calls (1st, 2nd, 3rd) for A (its
second real launch and on) and B (its first): [17.8, 13.5, 9.5] / [10.5, 8.4, 7.9];
[12.1, 9.5, 6.8] / [7.7, 5.3, 4.8]; [16.2, 11.0, 8.4] / [11.6, 7.3, 7.6].

What it says: a function's first ``cuLaunchKernel`` costs no more than its second (B's first
direct call is cheaper than A's second), no driver query prepays anything beyond the spread, and
eager module loading changes nothing: nothing per variant is left for a warm-up to load. What
is left is the host warming up: B's *second* launch is still 1.6x steady (49+14 vs 30+10 us), and
the direct calls get cheaper call after call for an already-launched variant too. The steady
state is a hot loop of one launch; a first launch comes after other work (here the previous
launch's synchronize and the timing code), with the launch path's code and data out of the CPU's
caches. A real engine step launches many kernels back to back through the same path, which keeps
it warm.

Usage: ``PYTHONPATH=src python benchmarks/first_launch_parts.py [--rounds 3] [--modes base,occ]
[--json OUT]``; ``--cpu-check`` runs the flow on a CPU (compile-only, dry launches, no driver
calls: the figures are not the GPU's).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("base", "occ", "attrs", "param", "grid0", "eager", "realB", "cdirect")
PERIODS = (64, 7)  # scale_add's keys A (divisible by 16) and B
TUNED = {4096: (64, 2), 1 << 20: (1024, 4)}  # tuned_scale's tuning file: row length -> (BLOCK, warps)
NEW_NS = [100_000 + 1000 * i for i in range(20)]
STEADY = 200


def child(mode: str, cpu: bool) -> dict:
    import torch

    from zerojit.compile_only import compile_only

    with compile_only("cuda:90") if cpu else contextlib.nullcontext():
        return _measure(mode, cpu, torch)


def _prepay(mode: str, jit_fn, device, found: list) -> list:
    """``mode``'s driver calls on every loaded variant of ``jit_fn``; their return codes go in
    ``found``. Returns the variants (``CompiledKernel``)."""
    compiled = list(jit_fn.device_caches[device][0].values())
    lib = ctypes.CDLL("libcuda.so.1")
    for k in compiled:
        f = ctypes.c_void_p(k.function)
        threads = k.metadata.num_warps * 32
        if mode == "occ":
            blocks = ctypes.c_int()
            found.append(lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(blocks), f, threads,
                                                                         ctypes.c_size_t(k.metadata.shared)))
        elif mode == "attrs":
            for attribute in range(10):
                value = ctypes.c_int()
                found.append(lib.cuFuncGetAttribute(ctypes.byref(value), attribute, f))
        elif mode == "param":
            if not hasattr(lib, "cuFuncGetParamInfo"):
                found.append("no cuFuncGetParamInfo")
                continue
            for i in range(64):  # until the driver says there is no such parameter
                offset, size = ctypes.c_size_t(), ctypes.c_size_t()
                rc = lib.cuFuncGetParamInfo(f, ctypes.c_size_t(i), ctypes.byref(offset), ctypes.byref(size))
                found.append(rc)
                if rc:
                    break
        elif mode == "grid0":
            lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
            found.append(lib.cuLaunchKernel(f, 0, 1, 1, threads, 1, 1, k.metadata.shared, None, None, None))
    return compiled


def _measure(mode: str, cpu: bool, torch) -> dict:
    from zerojit import JitWarmupRegistry
    from zerojit.examples.scale_add import _scale_add_kernel, scale_add

    device = "cpu" if cpu else "cuda"
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    n = 1 << 20
    x, bias = torch.randn(n, device=device), torch.randn(64, device=device)
    out = torch.empty_like(x)
    registry = JitWarmupRegistry()
    with registry.activate():
        scale_add.register_warmup(periods=PERIODS)
    registry.warmup(progress=False, workers=1)
    sync()
    codes: list = []
    prepay = (lambda jit_fn: []) if cpu else (lambda jit_fn: _prepay(mode, jit_fn, torch.cuda.current_device(), codes))
    compiled = prepay(_scale_add_kernel)

    def timed(fn) -> tuple[float, float]:
        t = time.perf_counter()
        fn()
        returned = time.perf_counter()
        sync()
        return (returned - t) * 1e6, (time.perf_counter() - returned) * 1e6

    def launch(period: int) -> tuple[float, float]:
        return timed(lambda: scale_add(x=x, bias=bias, out=out, period=period, scale=1.5))

    result: dict = {"mode": mode, "a_first": launch(PERIODS[0])}
    if mode == "cdirect" and not cpu:
        stream = torch.cuda.current_stream().cuda_stream
        result["direct"] = [[timed(lambda: k.run(1, 1, 1, stream, k.function, k.packed_metadata, None, None, None,
                                                 x, bias, out, n, PERIODS[0], 1.5, 256))[0] for _ in range(3)]
                            for k in compiled]
    if mode == "realB":
        launch(PERIODS[1])
    result["b_first"], result["b_second"] = launch(PERIODS[1]), launch(PERIODS[1])
    steady = [launch(PERIODS[1]) for _ in range(STEADY)]
    result["steady"] = (statistics.median(h for h, _ in steady), statistics.median(w for _, w in steady))
    result["tuned"] = _tuned(torch, device, timed, prepay)
    result["codes"] = sorted({str(c) for c in codes})
    return result


def _tuned(torch, device: str, timed, prepay) -> dict:
    from zerojit import JitWarmupRegistry
    from zerojit.autotune import save_tuning_file
    from zerojit.examples.tuned_scale import TunedScale

    kernel = TunedScale()
    configs = kernel._wrapping.configs
    pick = {n: next(i for i, c in enumerate(configs) if (c.kwargs["BLOCK"], c.num_warps) == bw)
            for n, bw in TUNED.items()}
    save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), configs,
                     [((n, "torch.float32", "torch.float32"), i, None) for n, i in pick.items()])
    x = torch.randn(1 << 21, device=device)
    out = torch.empty_like(x)
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup(sizes=tuple(TUNED))
    registry.warmup(progress=False, workers=1)
    prepay(kernel._wrapping.base)
    views = {n: (x[:n], out[:n]) for n in [*TUNED, *NEW_NS]}

    def launch(n: int) -> tuple[float, float]:
        xn, on = views[n]
        return timed(lambda: kernel(x=xn, out=on, scale=2.0))

    first = launch(next(iter(TUNED)))
    new = [launch(n) for n in NEW_NS]
    steady = [launch(NEW_NS[0]) for _ in range(STEADY)]
    return {"first": first, "new1": new[0], "new2": new[1], "new_median": statistics.median(h + w for h, w in new),
            "steady": (statistics.median(h for h, _ in steady), statistics.median(w for _, w in steady))}


def _total(pair) -> float:
    return pair[0] + pair[1]


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def report(rows: list[dict], modes: list[str]) -> None:
    med = statistics.median
    print(f"{'mode':<8}{'B first host+wait us':>22}{'B 2nd':>14}{'steady':>14}   B first/steady (median, min-max)")
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        if not mine:
            continue

        def part(field: str) -> str:
            return f"{med(r[field][0] for r in mine):.1f}+{med(r[field][1] for r in mine):.1f}"

        ratios = [_total(r["b_first"]) / _total(r["steady"]) for r in mine]
        print(f"{mode:<8}{part('b_first'):>22}{part('b_second'):>14}{part('steady'):>14}   {_spread(ratios)}"
              f"   A first {part('a_first')}; driver codes {mine[0]['codes']}")
        tuned = [r["tuned"] for r in mine]
        steady = [_total(t["steady"]) for t in tuned]
        print(f"{'':<8}tuned_scale: new key 1st {med(_total(t['new1']) for t in tuned):.1f} us, 2nd "
              f"{med(_total(t['new2']) for t in tuned):.1f}, median new {med(t['new_median'] for t in tuned):.1f}, "
              f"steady {med(steady):.1f}; 1st new / steady "
              f"{_spread([_total(t['new1']) / s for t, s in zip(tuned, steady)])}; the kernel's first "
              f"{_spread([_total(t['first']) / s for t, s in zip(tuned, steady)])}")
        for r in mine:
            if r.get("direct"):
                print(f"{'':<8}direct launcher calls, us (1st, 2nd, 3rd) per variant:",
                      [[round(t, 1) for t in calls] for calls in r["direct"]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (after an untimed one)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {','.join(MODES)}")
    parser.add_argument("--json", help="also write every process's figures here")
    parser.add_argument("--cpu-check", action="store_true", help="run the flow on a CPU (compile-only, dry)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.cpu_check)))
        return
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.json and not os.access(os.path.dirname(os.path.abspath(args.json)), os.W_OK):
        parser.error(f"--json {args.json}: cannot write there")  # before minutes of measuring, not after
    if not args.cpu_check:
        import torch

        if not torch.cuda.is_available():  # else every child fails with torch's traceback
            print("first_launch_parts.py needs a CUDA GPU (none is visible); --cpu-check runs the flow "
                  "compile-only with dry launches", file=sys.stderr)
            sys.exit(2)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zerojit-bench-parts-") as cache:
        for round_ in range(args.rounds + 1):  # round 0 fills the cache, untimed
            for mode in modes:
                env = dict(os.environ, TRITON_CACHE_DIR=cache)
                if mode == "eager":
                    env["CUDA_MODULE_LOADING"] = "EAGER"
                argv = [sys.executable, __file__, "--child", mode] + (["--cpu-check"] if args.cpu_check else [])
                p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
                if p.returncode:
                    sys.exit(f"{mode} failed:\n{p.stderr[-3000:]}")
                if round_:
                    rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    if args.cpu_check:
        print("compile-only (no GPU): dry launches, no driver calls; not the GPU's figures")
    report(rows, modes)
    if args.json:
        from zerojit.outputs import write_output

        write_output(args.json, json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
