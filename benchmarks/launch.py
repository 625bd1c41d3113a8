"""Host cost of one launch: raw Triton vs zerojit's normal path vs zerojit's fast path.

One kernel with 8 arguments (4 pointers, 4 ints: ``n`` is ``do_not_specialize``, the strides
and the period are specialized) plus a ``BLOCK`` constexpr, launched through:

* ``triton kernel[grid]``: raw Triton, ``kernel[grid](a, b, c, out, n, 1, 2, 64, BLOCK=256)``;
* ``triton compiled[grid]``: Triton's own direct call of the compiled kernel (reference only);
* ``zerojit normal``: ``launch8(a=..., ...)`` with ``fast_path`` off, monitor off and in error mode;
* ``zerojit fast``: the same call with ``fast_path`` on, monitor off and in error mode.

The zerojit ``__call__`` does what the raw call site does (the grid from ``n``, the constexpr) and
no input validation, so the difference is zerojit's launch machinery. Every mode runs
``--launches`` launches per round without synchronizing (one sync before and one at the end,
inside the timed interval), rounds interleave the modes (each round starting at the next mode),
and the median over rounds is printed, in microseconds of host time per launch, with its ratio
to raw Triton, all in the same run. Each round also gives each mode's ratio to that round's raw
(and direct) time; the goals (issue #21) are checked on the median of those per-round ratios
(the ``rounds`` column), monitor off and in error mode alike: the normal path at most 1.05x raw;
the fast path at most 0.5x raw and at most 0.9x the direct compiled call. The choice: on a
shared host whose speed drifts by 1.5x between rounds (the H200 host did, 2026-12-02), a ratio
of medians mixes rounds timed at different speeds; a round's modes run within a second.

On a machine without CUDA (or with ``--stub``) the kernel is compiled for ``cuda:90`` without a
GPU and launched through a stub of the parts only a GPU has, each taking the route it takes on a
GPU: the device from ``torch.cuda.current_device()`` (its Python frames; only its C leaf answers
the compile-only device), the stream from a C function, Triton's own ``CudaLauncher`` whose
``__call__`` runs where Triton calls it, and a C entry that calls the launch hooks it is given, as
the real one does, and nothing else. So the numbers are the host's Python cost of every mode,
without the C entry's own work and the driver's (the launch, and per tensor a ``data_ptr()`` call
and a device query, which the fast path skips for CUDA tensors). The output says so.

Usage: ``PYTHONPATH=src python benchmarks/launch.py [--launches 5000] [--rounds 15] [--stub] [--json OUT]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit import JitWarmupRegistry
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import trace_dispatch
from zerojit import monitor as zmonitor
from zerojit.monitor import JitMonitor
from zerojit.outputs import output_problem, write_output
from zerojit.specialization import WarmupTensor, scalar_rep

BLOCK = 256
N, STRIDE_A, STRIDE_B, PERIOD = 1000, 1, 2, 64  # classes: n unspecialized, 1, other, divisible by 16


@triton.jit(do_not_specialize=["n"])
def _launch8_kernel(a_ptr, b_ptr, c_ptr, out_ptr, n, stride_a, stride_b, period, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(a_ptr + offs * stride_a, mask=mask) + tl.load(b_ptr + offs * stride_b, mask=mask)
    tl.store(out_ptr + offs, x + tl.load(c_ptr + offs % period, mask=mask), mask=mask)


class Launch8(TritonJitKernel["Launch8.CompileKey"]):
    """``out[i] = a[i*sa] + b[i*sb] + c[i % period]``: 8 arguments, the launch-cost probe."""

    kernel = _launch8_kernel
    fast_path = True

    @dataclass(frozen=True)
    class CompileKey:
        stride_a: int  # scalar_rep of each specialized int: its class
        stride_b: int
        period: int

    def dispatch(self, *, stride_a: int, stride_b: int, period: int) -> "Launch8.CompileKey":
        return self.CompileKey(scalar_rep(stride_a), scalar_rep(stride_b), scalar_rep(period))

    def get_warmup_keys(self, *, stride_a: int, stride_b: int, period: int) -> list["Launch8.CompileKey"]:
        return trace_dispatch(self.dispatch)(stride_a=stride_a, stride_b=stride_b, period=period)

    def warmup_inputs(self, key: "Launch8.CompileKey") -> dict:
        t = WarmupTensor(torch.float32, (64,))
        return dict(a=t, b=t, c=t, out=t, n=scalar_rep(N, specialize=False), stride_a=key.stride_a,
                    stride_b=key.stride_b, period=key.period)

    @kernel_launcher
    def __call__(self, *, a, b, c, out, n: int, stride_a: int, stride_b: int, period: int) -> LaunchSpec:
        return LaunchSpec(grid=((n + BLOCK - 1) // BLOCK,), kwargs={"BLOCK": BLOCK}, returns=out)


launch8 = Launch8()


class _StubLaunchDriver:
    """Stands in for Triton's CUDA driver after a compile-only warm-up, asking what it asks the way it
    asks it: the device from ``torch.cuda.current_device`` (its Python frames as on a GPU, see
    :func:`_stub_torch_cuda`), the stream from a C function of the device (as
    ``torch._C._cuda_getCurrentRawStream``), the launcher class Triton's (``CudaLauncher``)."""

    def __init__(self, compile_only_driver) -> None:
        from triton.backends.nvidia.driver import CudaLauncher

        self._co = compile_only_driver
        self.get_current_device = torch.cuda.current_device
        self.get_current_stream = {compile_only_driver.device: 0}.__getitem__  # a C call, like the GPU's
        self.launcher_cls = CudaLauncher

    def get_current_target(self):
        return self._co.target

    def __getattr__(self, name):
        return getattr(self._co, name)


def _stub_torch_cuda(device: str) -> dict:
    """Make ``torch.cuda.current_device()`` answer the compile-only ``device`` on a CPU build by the
    GPU's route: its ``_lazy_init`` / ``is_initialized`` frames run as on an initialized GPU, and
    only their C leaves (``torch._C._cuda_getDevice``, the bad-fork check) are C stand-ins.
    Returns what to put back."""
    saved = {"_initialized": torch.cuda._initialized, "_is_in_bad_fork": torch.cuda._is_in_bad_fork,
             "_cuda_getDevice": getattr(torch._C, "_cuda_getDevice", None)}
    torch.cuda._initialized = True
    torch.cuda._is_in_bad_fork = bool  # bool() is False, a C call like torch._C._cuda_isInBadFork
    torch._C._cuda_getDevice = device.__str__  # returns the device string itself, a C call
    return saved


def _restore_torch_cuda(saved: dict) -> None:
    torch.cuda._initialized = saved["_initialized"]
    torch.cuda._is_in_bad_fork = saved["_is_in_bad_fork"]
    if saved["_cuda_getDevice"] is None:
        del torch._C._cuda_getDevice
    else:
        torch._C._cuda_getDevice = saved["_cuda_getDevice"]


def _c_entry_model(launch_metadata, enter_hook, exit_hook) -> None:
    """What a launcher's C entry (Triton 3.6-3.9) calls in Python: the launch hooks it is given
    (Triton's run gives its ``HookChain`` objects, empty or not), around the launch. Not modelled:
    its argument parsing and ``data_ptr()`` per tensor (C, paid alike by every mode that passes
    tensors), and the driver calls."""
    if enter_hook is not None:
        enter_hook(launch_metadata)
    if exit_hook is not None:
        exit_hook(launch_metadata)


if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):  # the C entry's signature
    def _stub_c_entry(gx, gy, gz, stream, function, cooperative, pdl, scratch, profile_scratch, metadata,
                      launch_metadata, enter_hook, exit_hook, *args):
        _c_entry_model(launch_metadata, enter_hook, exit_hook)
else:
    def _stub_c_entry(gx, gy, gz, stream, function, cooperative, pdl, metadata, launch_metadata, enter_hook,
                      exit_hook, scratch, profile_scratch, annotations, signature, args):
        _c_entry_model(launch_metadata, enter_hook, exit_hook)


def _stub_launcher():
    """Triton's own ``CudaLauncher`` for a kernel without scratch memory, its C entry the model above:
    Triton's ``__call__`` runs where Triton calls it, and zerojit's fast path calls the entry as on a GPU."""
    from triton.backends.nvidia.driver import CudaLauncher

    launcher = object.__new__(CudaLauncher)  # its __init__ builds a C module and needs libcuda
    launcher.launch = _stub_c_entry
    launcher.num_ctas = 1
    launcher.global_scratch_size = launcher.profile_scratch_size = 0
    launcher.global_scratch_align = launcher.profile_scratch_align = 1
    launcher.launch_cooperative_grid = launcher.launch_pdl = False
    launcher.arg_annotations, launcher.kernel_signature, launcher.gsan_enabled = (), b"", False  # 3.7+
    return launcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=5_000, help="launches per mode per round")
    parser.add_argument("--rounds", type=int, default=15,
                        help="interleaved rounds (median reported; 7 or more for a figure, 1 for a plumbing check)")
    parser.add_argument("--stub", action="store_true", help="stub launcher even where CUDA exists")
    parser.add_argument("--json", help="also write the results here")
    opts = parser.parse_args()
    for flag, value in (("--launches", opts.launches), ("--rounds", opts.rounds)):
        if value < 1:  # --launches 0 ended in a ZeroDivisionError
            parser.error(f"{flag} must be >= 1, got {value}")
    if opts.json and (problem := output_problem(opts.json)):  # not after every round
        parser.error(f"--json {opts.json}: cannot write there: {problem}")

    stub = opts.stub or not torch.cuda.is_available()
    zmonitor.configure("off")  # no process monitor from ZEROJIT_JIT_MONITOR: the modes below choose
    registry = JitWarmupRegistry()
    with registry.activate():
        launch8.register_warmup(stride_a=STRIDE_A, stride_b=STRIDE_B, period=PERIOD)

    if stub:
        from triton.runtime.driver import driver

        from zerojit.compile_only import compile_only

        with compile_only("cuda:90") as co:
            report = registry.warmup(progress=False, target="cuda:90")
        for v in report.variants:  # a loaded-looking kernel whose launcher's C entry does nothing
            v.compiled.module, v.compiled.function, v.compiled._run = object(), 0, _stub_launcher()
        previous_driver = driver._active
        saved_torch = _stub_torch_cuda(co.device)
        driver.set_active(_StubLaunchDriver(co))
        device = "cpu"
        sync = lambda: None  # noqa: E731
    else:
        report = registry.warmup(progress=False)
        device = "cuda"
        sync = torch.cuda.synchronize

    a = torch.randn(N * STRIDE_A, device=device)
    b = torch.randn(N * STRIDE_B, device=device)
    c = torch.randn(PERIOD, device=device)
    out = torch.zeros(N, device=device)
    kernel = _launch8_kernel
    compiled = report.variants[0].compiled
    grid0 = ((N + BLOCK - 1) // BLOCK, 1, 1)
    kernel[grid0[:1]](a, b, c, out, N, STRIDE_A, STRIDE_B, PERIOD, BLOCK=BLOCK)  # same Triton entry: a hit
    if not stub:
        sync()
        want = a[: N * STRIDE_A : STRIDE_A] + b[: N * STRIDE_B : STRIDE_B] + c[torch.arange(N, device=device) % PERIOD]
        for fast in (False, True):
            out.zero_()
            launch8.fast_path = fast
            launch8(a=a, b=b, c=c, out=out, n=N, stride_a=STRIDE_A, stride_b=STRIDE_B, period=PERIOD)
            sync()
            assert torch.allclose(out, want), f"wrong result with fast_path={fast}"
    assert launch8.select_variant(a=a, b=b, c=c, out=out, n=N, stride_a=STRIDE_A, stride_b=STRIDE_B,
                                  period=PERIOD) is not None, "the fast path does not select the warmed variant"

    def raw(count: int) -> None:
        for _ in range(count):
            kernel[((N + BLOCK - 1) // BLOCK,)](a, b, c, out, N, STRIDE_A, STRIDE_B, PERIOD, BLOCK=BLOCK)

    def direct(count: int) -> None:
        for _ in range(count):
            compiled[((N + BLOCK - 1) // BLOCK, 1, 1)](a, b, c, out, N, STRIDE_A, STRIDE_B, PERIOD, BLOCK)

    def zerojit(count: int) -> None:
        for _ in range(count):
            launch8(a=a, b=b, c=c, out=out, n=N, stride_a=STRIDE_A, stride_b=STRIDE_B, period=PERIOD)

    body = Launch8.__call__._zerojit_method

    def call_body(count: int) -> None:  # the declarative __call__ alone: grid + LaunchSpec, no launch
        for _ in range(count):
            body(launch8, a=a, b=b, c=c, out=out, n=N, stride_a=STRIDE_A, stride_b=STRIDE_B, period=PERIOD)

    monitor = JitMonitor("error", report=report)
    modes = {
        "triton kernel[grid] (raw)": (raw, None, None),
        "triton compiled[grid] (direct)": (direct, None, None),
        "zerojit normal, monitor off": (zerojit, False, False),
        "zerojit normal, monitor error": (zerojit, False, True),
        "zerojit fast, monitor off": (zerojit, True, False),
        "zerojit fast, monitor error": (zerojit, True, True),
        "(zerojit __call__ body alone)": (call_body, None, None),
    }
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu_times: dict[str, list[float]] = {m: [] for m in modes}
    for fn, fast, _ in modes.values():  # warm every path once (first-run effects)
        launch8.fast_path = bool(fast)
        fn(100)
    sync()
    order = list(modes.items())
    for r in range(opts.rounds):
        # each round starts at another mode: a host whose speed drifts within a round (a busy
        # one does) favours no mode, and each round's ratios compare modes timed moments apart
        for name, (fn, fast, monitored) in order[r % len(order):] + order[:r % len(order)]:
            launch8.fast_path = bool(fast)
            if monitored:
                monitor.install()
            gc.collect()
            gc.disable()
            sync()
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(opts.launches)
            sync()
            elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
            gc.enable()
            if monitored:
                monitor.uninstall()
            times[name].append(elapsed / opts.launches * 1e6)
            cpu_times[name].append(cpu / opts.launches * 1e6)
    counts = monitor.counts()
    expected_hits = 2 * (opts.rounds * opts.launches)

    raw_us = statistics.median(times["triton kernel[grid] (raw)"])
    raw_cpu = statistics.median(cpu_times["triton kernel[grid] (raw)"])
    kind = ("STUB LAUNCHER (compile-only cuda:90, no GPU launch: host overhead only, not a GPU result)"
            if stub else f"GPU: {torch.cuda.get_device_name()}")
    print(f"launch cost per call, {opts.launches} launches x {opts.rounds} rounds, median; {kind}")
    print(f"  Triton {triton.__version__}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    print("  wall: time.perf_counter over the launches and a final sync; cpu: this thread's CPU time")
    print("  vs raw: median time over the median raw time; per round: the median of each round's time over that")
    print("  round's raw time (what the goals check), spread: the least and most of those per-round ratios")
    print(f"  {'mode':<34} {'wall us':>9} {'vs raw':>7} {'per round':>9} {'spread (min-max)':>17} {'cpu us':>9} {'vs raw':>7}")
    results = {}
    for name in modes:
        us, cpu = statistics.median(times[name]), statistics.median(cpu_times[name])
        results[name] = {"us_per_launch": round(us, 3), "ratio_vs_raw": round(us / raw_us, 3),
                         "cpu_us_per_launch": round(cpu, 3), "cpu_ratio_vs_raw": round(cpu / raw_cpu, 3),
                         "rounds_us": [round(t, 3) for t in times[name]]}
        # each round's time against the same round's raw time (interleaved): the ratio the goals
        # check is their median, its spread their range
        ratios = [t / r for t, r in zip(times[name], times["triton kernel[grid] (raw)"])]
        results[name]["round_ratios"] = [round(r, 3) for r in ratios]
        results[name]["median_round_ratio"] = round(statistics.median(ratios), 3)
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}x"
        print(f"  {name:<34} {us:>9.2f} {us / raw_us:>6.2f}x {statistics.median(ratios):>8.2f}x "
              f"{spread:>17} {cpu:>9.2f} {cpu / raw_cpu:>6.2f}x")
    goals = []
    direct_rounds = times["triton compiled[grid] (direct)"]
    for monitor_mode in ("off", "error"):
        normal = results[f"zerojit normal, monitor {monitor_mode}"]["median_round_ratio"]
        fast_name = f"zerojit fast, monitor {monitor_mode}"
        fast = results[fast_name]["median_round_ratio"]
        vs_direct = statistics.median(t / d for t, d in zip(times[fast_name], direct_rounds))
        results[fast_name]["median_round_ratio_vs_direct"] = round(vs_direct, 3)
        goals += [(f"normal, monitor {monitor_mode} <= 1.05x raw", normal, normal <= 1.05),
                  (f"fast, monitor {monitor_mode} <= 0.50x raw", fast, fast <= 0.5),
                  (f"fast, monitor {monitor_mode} <= 0.90x direct", vs_direct, vs_direct <= 0.9)]
    print("  goals (issue #21), on the per-round medians (each round's modes timed moments apart):")
    for name, x, ok in goals:
        print(f"    {name:<36} {x:>6.3f}x  {'met' if ok else 'NOT met'}")
    body_us = results["(zerojit __call__ body alone)"]["us_per_launch"]
    print(f"  of zerojit's cost, {body_us:.2f} us is the declarative __call__ body itself (grid, LaunchSpec), "
          "which the raw call site does not run")
    if stub:
        print("  (stub: every Python step of each mode runs as on a GPU with Triton's CUDA driver -- "
              "torch.cuda.current_device's frames, CudaLauncher.__call__, the launch hooks the C entry calls -- "
              "but not the C entry's own work: argument parsing, the launch, and per tensor data_ptr() and a "
              "driver query, which the fast path skips for CUDA tensors (for which it reads is_cuda of each: "
              "here the first CPU tensor ends that test); with them every ratio moves toward 1, the fast "
              "path's less)")
    print(f"  monitor (error mode): {counts.launches} launches counted of {expected_hits}, "
          f"{counts.runtime_compiles} runtime compiles")
    if opts.json:
        write_output(opts.json, json.dumps({
            "mode": "stub" if stub else "gpu", "launches": opts.launches, "rounds": opts.rounds,
            "results": results, "goals": {name: {"ratio": round(x, 3), "met": ok} for name, x, ok in goals},
            "monitor_launches": counts.launches, "monitor_runtime_compiles": counts.runtime_compiles}, indent=2))
    if stub:
        driver._active = previous_driver
        _restore_torch_cuda(saved_torch)


if __name__ == "__main__":
    main()
