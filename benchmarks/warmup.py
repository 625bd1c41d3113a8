"""Start-up: cold and warm warm-up of a whole key space, plain Triton vs zerojit, in one run.

The key space is the sparse-MLA kernels' (``zerojit.kernels.mla``) as a serving image for a
*deployment matrix* registers it: ``--space matrix`` (default) is the union of the keys of the
shipped ``dsv4-like`` and ``deepseek-v3.2`` configs x block size {64, 128, 256} x decode-context
parallelism {1, 2 (interleave 1 and 2), 4, 8} x speculative tokens {0, 1} (48 valid configs,
111 keys of 7 kernels); ``--space dsv4-like`` is the one shipped config (21 keys). Each config
is built the way the runner builds it (model, then a packed KV cache bound to it, under a
registry), so the keys are the ones serving would launch.

Modes, each in a fresh process with a fresh, empty ``TRITON_CACHE_DIR`` (cold), in the order
listed, with one fresh ``TRITON_HOME`` per repeat, and without ``ZEROJIT_WORKER_START`` or
``ZEROJIT_WORKER_NICE`` unless the mode names it (an exported value is not passed on):

* ``triton-serial``: Triton's own ``warmup()`` (``JITFunction.run(..., warmup=True)``) for every
  key, one after the other, through the kernel's launcher with its ``warmup_inputs(key)``;
* ``triton-threads``: the same inside Triton's ``AsyncCompileMode`` with a thread pool of
  ``--workers`` threads (Triton's own parallel compile);
* ``zerojit-new-install``: ``JitWarmupRegistry.warmup(workers=--workers)`` (worker processes;
  then module loads and launchers on a GPU, which Triton's ``warmup()`` leaves to the first
  launch), the first zerojit warm-up on this Triton install: it hashes Triton's build (~0.6 s of
  SHA-256 over ``libtriton.so``, as every plain Triton process does) and remembers the hash in
  ``TRITON_HOME`` (``zerojit.cache.use_fast_triton_key``);
* ``zerojit``: the same with a new empty cache folder on that install: every kernel compiles; the
  build hash and the CUDA launcher modules (one per kernel signature, not per kernel variant)
  that the ``zerojit-new-install`` run's workers built are remembered per install
  (``zerojit.cache.remembered_launcher``) and copied, not built again. This is the cold start of
  a server whose configs changed on an image it ran before (a brand-new image without those
  files is ``zerojit-new-install``; a changed kernel signature builds its launcher again);
* ``zerojit-nice5``: the same as ``zerojit`` with ``ZEROJIT_WORKER_NICE=5``: the workers 5 below
  the warm-up's priority instead of at it (``zerojit.precompile.worker_nice``); the A/B of that
  setting, per round (``zerojit-nice5`` / ``zerojit`` seconds, and the keys' pass efficiency);
* ``zerojit-spawn``: the same as ``zerojit`` with ``ZEROJIT_WORKER_START=spawn``: workers
  started as new interpreters (each imports Triton and the kernels' modules) instead of forked
  from the warm-up's process (the default on Linux, ``zerojit.precompile.worker_start_method``);
* ``zerojit-prestarted``: the same as ``zerojit``, with the workers started by ``registry.start_workers()``
  ``--overlap`` seconds (default 1) before the timed call: the driver's start, then a sleep
  standing for the rest of an engine's start-up (loading its weights), none of it timed; the
  workers boot meanwhile. Not a cold warm-up on its own: it shows what an engine that starts its
  workers early pays.

Then warm starts, in fresh processes over the cache the ``zerojit`` run left:

* ``triton-warm``: Triton's ``warmup()`` for every key (disk-cache hits; nothing loaded);
* ``zerojit-warm``: ``JitWarmupRegistry.warmup()`` (the restore index the cold run wrote: every
  key's variant, module, function and launcher; then the launch path's first launch, once per
  process; see ``zerojit.restore``). Its call is split into a fixed and a per-key part by a
  line through two sizes measured in the same run: the whole key space and its first fifth
  (``zerojit-warm-part``: the same warm call over the first ``keys // 5`` keys, in its own fresh
  processes, interleaved with the whole one; an untimed warm-up of that part writes its restore
  index first).

Not timed, in every mode: imports, building the configs and registering, and the Triton driver's
start (on a GPU: CUDA's context and Triton's ``cuda_utils`` build, printed apart; a serving
process has its context before warm-up, since the weights live in it). Timed: the warm-up call.
Printed: seconds, ms per key, compiles (Triton's listener, plus zerojit's workers), disk loads
(variants loaded from Triton's disk cache: Triton's listener, or zerojit's own count, which
includes the workers' results it loads without Triton's lookup), and the ratios to
``triton-serial`` (cold) and ``triton-warm`` (warm), all measured in this run; for zerojit's
cold modes, its phases, its workers' timeline (boot, then requests: ``WarmupStats.timeline``)
and Triton's compile stages summed over the workers (``WarmupStats.worker_stages``).

Without a GPU (or with ``--target``), every mode compiles for ``--target`` (default ``cuda:90``)
with zerojit's compile-only driver: real cubins, nothing loaded; the output says so.

Usage::

    PYTHONPATH=src python benchmarks/warmup.py [--workers N] [--space matrix|dsv4-like]
        [--target cuda:90] [--repeat 1] [--modes triton-serial,zerojit,...] [--json OUT]
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

COLD = ("triton-serial", "triton-threads", "zerojit-new-install", "zerojit", "zerojit-nice5", "zerojit-spawn",
        "zerojit-prestarted")
WARM = ("triton-warm", "zerojit-warm")
PART = "zerojit-warm-part"  # zerojit-warm over the first keys // 5 keys: the fixed / per-key split

MATRIX_BASES = ("dsv4-like", "deepseek-v3.2")
MATRIX_BLOCK_SIZES = (64, 128, 256)
MATRIX_DCP = ((1, 1), (2, 1), (2, 2), (4, 1), (8, 1))  # (dcp_size, dcp_interleave)
MATRIX_SPEC = (0, 1)


def matrix_configs(space: str) -> list:
    """The configs of ``space`` (invalid combinations, e.g. an interleave that does not divide a
    compressed block, are skipped the way ``ModelConfig`` rejects them)."""
    from zerojit.kernels.mla.config import ConfigError
    from zerojit.runner.config import load_config

    if space != "matrix":
        return [load_config(space)]
    out = []
    for base in MATRIX_BASES:
        for bs in MATRIX_BLOCK_SIZES:
            for dcp, il in MATRIX_DCP:
                for spec in MATRIX_SPEC:
                    try:
                        out.append(load_config(base, block_size=bs, dcp_size=dcp, dcp_rank=dcp - 1, dcp_interleave=il,
                                               num_speculative_tokens=spec))
                    except ConfigError:
                        pass
    return out


def key_space(space: str, subset: int = 0):
    """A registry whose key space is the union of every config's (first-seen order); with
    ``subset``, only its first ``subset`` keys."""
    from zerojit.registry import JitWarmupRegistry
    from zerojit.runner.model import register_model

    union: dict = {}
    for config in matrix_configs(space):
        registry = register_model(config)
        plan, failures = registry.warmup_keys(config)
        if failures:
            sys.exit(f"listing keys failed for {config.name}: {failures}")
        for kernel, keys in plan.items():
            mine = union.setdefault(kernel, {})
            for key in keys:
                mine.setdefault(key, None)
    if subset:
        jobs = [(kernel, key) for kernel, keys in union.items() for key in keys][:subset]
        union = {}
        for kernel, key in jobs:
            union.setdefault(kernel, {})[key] = None

    class MatrixRegistry(JitWarmupRegistry):
        """The union key space of several configs, warmed as one."""

        def warmup_keys(self, config=None):
            return {k: list(v) for k, v in union.items()}, []

    return MatrixRegistry()


def triton_warmup(registry, *, threads: int = 0) -> int:
    """Triton's own ``warmup()`` of every key (compile only), optionally in its thread mode."""
    from zerojit.kernel import _WARMUP_SINK

    plan, _ = registry.warmup_keys()
    jobs = [(k, key) for k, keys in plan.items() for key in keys]

    def run_all():
        for kernel, key in jobs:
            sink: list = []
            token = _WARMUP_SINK.set(sink)  # the kernel's launch becomes kernel.run(grid, warmup=True, ...)
            try:
                kernel(**kernel.warmup_inputs(key))
            finally:
                _WARMUP_SINK.reset(token)

    if threads:
        from concurrent.futures import ThreadPoolExecutor

        from triton.runtime._async_compile import AsyncCompileMode

        with ThreadPoolExecutor(threads) as pool, AsyncCompileMode(pool):
            run_all()  # leaving the mode waits for every compile
    else:
        run_all()
    return len(jobs)


def _as_pairs(stats: dict) -> dict:
    """``WarmupStats.to_dict()`` with its labelled lists as the tuples this script reads."""
    return dict(stats, phases=[(p["phase"], p["seconds"]) for p in stats["phases"]],
                worker_stages=[(w["stage"], w["seconds"]) for w in stats["worker_stages"]],
                timeline=[(t["what"], t["worker"], t["start"], t["end"]) for t in stats["timeline"]])


class _CollectorTime:
    """Milliseconds Python's cyclic garbage collector ran from now until :meth:`stop`, and how
    many of its collections were of the oldest generation (a walk over every tracked object of the
    process: ~40 ms with torch and CUDA initialised on the H100 host). Allocation counts decide
    when one comes, so it falls in a warm-up or, if not, in a later request; printed apart."""

    def __init__(self) -> None:
        import gc

        self.ms, self.full, self._start = 0.0, 0, 0.0
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.ms += 1e3 * (time.perf_counter() - self._start)
            self.full += info["generation"] == 2

    def stop(self) -> tuple[float, int]:
        import gc

        gc.callbacks.remove(self._on)
        return self.ms, self.full


def child(mode: str, args: argparse.Namespace) -> dict:
    import contextlib

    import torch
    from triton import knobs

    from zerojit.compile_only import compile_only

    gpu = torch.cuda.is_available() and not args.target
    target = None if gpu else (args.target or "cuda:90")
    t0 = time.perf_counter()
    registry = key_space(args.space, args.subset)
    setup_s = time.perf_counter() - t0
    events = {"compiled": 0, "disk": 0}

    def listener(*, cache_hit, **_):
        events["disk" if cache_hit else "compiled"] += 1

    with (compile_only(target) if target else contextlib.nullcontext()):
        t0 = time.perf_counter()
        if mode == "zerojit-prestarted":
            registry.start_workers(workers=args.workers, target=target or "device")
        from triton.runtime.driver import driver

        driver.active.get_current_device()  # the driver's start: not warm-up (on a GPU: CUDA, cuda_utils)
        if gpu:
            torch.empty(1, device="cuda")  # CUDA's context
        driver_s = time.perf_counter() - t0
        if mode == "zerojit-prestarted":
            time.sleep(max(args.overlap - driver_s, 0.0))  # the engine's other start-up work: loading weights
        knobs.compilation.listener = listener
        collector = _CollectorTime()
        t0 = time.perf_counter()
        stats = None
        if mode in ("triton-serial", "triton-warm"):
            keys = triton_warmup(registry)
        elif mode == "triton-threads":
            keys = triton_warmup(registry, threads=args.workers)
        else:
            report = registry.warmup(workers=args.workers, progress=False, target=target or "device")
            keys, stats = report.num_keys, _as_pairs(report.to_dict()["stats"])
            stats["generic_worker_seconds"] = report.generic_stats.worker_seconds if report.generic_stats else 0.0
        seconds = time.perf_counter() - t0
        gc_ms, full_collections = collector.stop()
        knobs.compilation.listener = None
        steady = None
        if mode in WARM:  # again, in-process caches emptied: the per-key cost without one-time costs
            device = driver.active.get_current_device()  # (Triton's first-launch imports, binders, ...)
            for kernel in registry.warmup_keys()[0]:
                kernel.kernel.device_caches[device][0].clear()
            t0 = time.perf_counter()
            if mode == "triton-warm":
                triton_warmup(registry)
            else:
                registry.warmup(workers=args.workers, progress=False, target=target or "device")
            steady = 1e3 * (time.perf_counter() - t0) / keys
    return {"mode": mode, "seconds": seconds, "keys": keys, "ms_per_key": 1e3 * seconds / keys, "steady_ms_per_key": steady,
            "compiled": events["compiled"] + (stats["worker_compiled"] if stats else 0),
            "disk_loads": stats["disk_loads"] if stats else events["disk"], "setup_s": setup_s, "driver_s": driver_s,
            "target": target or "device", "stats": stats, "cpus": os.cpu_count(), "gc_ms": gc_ms,
            "full_collections": full_collections}


CHILD_TIMEOUT_S = 1800  # one mode's process (the serial cold matrix takes 15-20 s on an H100, minutes on 2 cores)


def run_child(mode: str, cache: str, home: str, args: argparse.Namespace, subset: int = 0) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, TRITON_HOME=home)
    for name in ("ZEROJIT_WORKER_START", "ZEROJIT_WORKER_NICE"):  # each mode sets its own: an exported one
        env.pop(name, None)  # would make 'zerojit' (fork, niceness 0) the same run as its A/B partner
    if mode == "zerojit-spawn":
        env["ZEROJIT_WORKER_START"] = "spawn"
    if mode == "zerojit-nice5":
        env["ZEROJIT_WORKER_NICE"] = "5"
    child_mode = "zerojit-warm" if mode == PART else mode
    cmd = [sys.executable, os.path.abspath(__file__), "--child", child_mode, "--workers", str(args.workers),
           "--space", args.space, "--overlap", str(args.overlap), "--subset", str(subset)] + (
               ["--target", args.target] if args.target else [])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a hung child ends the benchmark, it does not wait forever
        sys.exit(f"{mode}: no result after {CHILD_TIMEOUT_S} s")
    if proc.returncode:
        sys.exit(f"{mode} failed:\n{proc.stdout}\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), mode=mode)


def seconds(text: str) -> float:
    """An argparse type: a number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=positive, default=os.cpu_count(), help="zerojit worker processes and Triton "
                        "compile threads (default: os.cpu_count())")
    parser.add_argument("--space", default="matrix", help="matrix (48 configs, 111 keys) or a shipped config name")
    parser.add_argument("--target", default=None, help="compile-only target (default: the GPU, or cuda:90 without one)")
    parser.add_argument("--repeat", type=positive, default=1, help="runs per mode (medians printed)")
    parser.add_argument("--overlap", type=seconds, default=1.0,
                        help="zerojit-prestarted: seconds from start_workers to the warm-up call, the driver's "
                             "start included (default 1)")
    parser.add_argument("--modes", default=",".join(COLD + WARM),
                        help="comma-separated modes to run (default: all; a warm mode needs 'zerojit')")
    parser.add_argument("--json", help="also write every run here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--subset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(COLD + WARM))
    if not modes:
        parser.error(f"--modes: no mode given; choose from {', '.join(COLD + WARM)}")
    if unknown:
        parser.error(f"--modes: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(COLD + WARM)}")
    if set(modes) & set(WARM) and "zerojit" not in modes:
        parser.error("--modes: a warm mode runs over the cache the 'zerojit' mode leaves; add 'zerojit'")
    from zerojit.compile_only import parse_target
    from zerojit.kernels.mla.config import ConfigError
    from zerojit.outputs import output_problem

    try:  # each child would fail on these with its traceback, or the last write after every run
        matrix_configs(args.space)
        if args.target:
            parse_target(args.target)
    except (ConfigError, ValueError) as e:
        parser.error(str(e))
    if args.json and (problem := output_problem(args.json)):
        parser.error(f"--json {args.json}: cannot write there: {problem}")
    cold, warm = [m for m in COLD if m in modes], [m for m in WARM if m in modes]
    rows = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="zerojit-bench-") as root:
            home = os.path.join(root, "home")  # Triton's home: where zerojit remembers the build hash, launchers
            if "zerojit-new-install" not in cold:  # the modes after it expect a known install: make one, untimed
                run_child("zerojit-new-install", os.path.join(root, "install-cache"), home, args)
            for mode in cold:
                rows.append(run_child(mode, os.path.join(root, mode), home, args))
            for mode in warm:  # over the cache the zerojit cold run left
                rows.append(run_child(mode, os.path.join(root, "zerojit"), home, args))
                if mode == "zerojit-warm" and rows[-1]["keys"] >= 5:  # its fixed / per-key split: a fifth of it
                    part = rows[-1]["keys"] // 5
                    run_child(PART, os.path.join(root, "zerojit"), home, args, subset=part)  # its index, untimed
                    rows.append(run_child(PART, os.path.join(root, "zerojit"), home, args, subset=part))
    report(rows, cold, warm, args)


def timeline_summary(stats: dict, seconds: float) -> str:
    """Where a cold zerojit warm-up's wall time went, from its workers' timeline."""
    events = stats["timeline"]
    work = [(what, start, end) for what, _, start, end in events
            if what.startswith(("compile ", "cached ", "failed ", "launcher "))]
    ready = sorted(end for what, _, _, end in events if what == "set-up")
    if not ready or not work:
        return "no worker timeline"
    boot = {}
    for what, _, start, end in events:
        if what in ("fork", "python", "imports", "preload", "set-up"):
            boot[what] = boot.get(what, 0.0) + end - start
    first, last = min(s for _, s, _ in work), max(e for _, _, e in work)
    busy = sum(e - s for _, s, e in work)
    launchers = [e - s for what, s, e in work if what.startswith("launcher ")]
    per_worker = ", ".join(f"{what} {seconds / len(ready):.3f} s" for what, seconds in boot.items())
    cpu = stats.get("worker_cpu_seconds")
    return (f"{len(ready)} workers ready at {ready[0]:.2f} to {ready[-1]:.2f} s (a worker's boot: {per_worker}); "
            f"first request at {first:.2f} s, last reply at {last:.2f} s; from first to last they were "
            f"{100 * busy / (len(ready) * (last - first)):.0f}% busy "
            f"({busy:.1f} s: {sum(w.startswith('compile ') for w, _, _ in work)} compiles"
            + (f", {len(launchers)} launchers of {statistics.median(launchers):.2f} s median" if launchers else "")
            + (f"; CPU {cpu:.1f} s of it, {100 * cpu / busy:.0f}%: below 100% a request waited for a core"
               if cpu else "")
            + f"); call returned {seconds:.2f} s")


def efficiency(stats: dict, seconds: float) -> str:
    """Parallel efficiency of the keys' pass: the workers' request seconds for the keys over
    (workers x the call's seconds less its ``generic`` phase). The generic variants (a second
    pass once the keys' variants are known, zerojit.generic) are counted apart, as issue #33
    measures; the whole call's efficiency, their requests included, follows in brackets."""
    workers = stats["workers"]
    if not workers:
        return "no workers"
    phases = dict(stats["phases"])
    keys_s = seconds - phases.get("generic", 0.0)
    ideal = stats["worker_seconds"] / workers
    whole = ""
    if "generic" in phases:
        generic = stats.get("generic_worker_seconds", 0.0)
        whole = (f"; after it, the generic variants' pass, counted apart: {phases['generic']:.2f} s, {generic:.2f} s "
                 f"of worker requests; both passes together: "
                 f"{100 * (stats['worker_seconds'] + generic) / workers / seconds:.0f}% of the whole call")
    return (f"the keys' pass: {stats['worker_seconds']:.2f} s of worker requests on {workers} workers, ideal "
            f"{ideal:.2f} s, took {keys_s:.2f} s{whole}; the keys' parallel efficiency {100 * ideal / keys_s:.0f}%")


def nice_ab(rows: list) -> None:
    """Print the per-round A/B of workers at niceness 5: ``zerojit-nice5`` over ``zerojit`` (0),
    the call's seconds and the keys' pass efficiency, median and spread."""
    a = [r for r in rows if r["mode"] == "zerojit-nice5"]
    b = [r for r in rows if r["mode"] == "zerojit"]
    if not a or len(a) != len(b):
        return
    ratios = [x["seconds"] / y["seconds"] for x, y in zip(a, b)]

    def eff(r: dict) -> float:
        s = r["stats"]
        keys_s = r["seconds"] - dict(s["phases"]).get("generic", 0.0)
        return 100 * s["worker_seconds"] / max(s["workers"], 1) / keys_s

    diffs = [eff(x) - eff(y) for x, y in zip(a, b)]
    print(f"workers at niceness 5 vs 0, per round: call seconds zerojit-nice5 / zerojit median "
          f"{statistics.median(ratios):.3f} (spread {min(ratios):.3f}-{max(ratios):.3f}); the keys' pass efficiency "
          f"{statistics.median(diffs):+.0f} points (spread {min(diffs):+.0f} to {max(diffs):+.0f})")


def warm_split(rows: list, less_gc: bool = False) -> tuple[float, float, int, int] | None:
    """The zerojit-warm call as ``fixed ms + per-key ms x keys``: the line through the medians of
    the whole key space's warm call and its part's (``PART``), with both key counts; None when
    the part was not run. ``less_gc``: each call's garbage collector time taken out first."""
    whole = [r for r in rows if r["mode"] == "zerojit-warm"]
    part = [r for r in rows if r["mode"] == PART]
    if not whole or not part:
        return None
    n, k = whole[0]["keys"], part[0]["keys"]

    def ms(r: dict) -> float:
        return 1e3 * r["seconds"] - (r.get("gc_ms", 0.0) if less_gc else 0.0)

    t_n = statistics.median(ms(r) for r in whole)
    t_k = statistics.median(ms(r) for r in part)
    per_key = (t_n - t_k) / (n - k)
    return t_n - per_key * n, per_key, n, k


def report(rows: list, cold: list, warm: list, args: argparse.Namespace) -> None:
    """Print the medians per mode, the ratios to the Triton baselines run, and zerojit's breakdown."""
    med = {m: {f: statistics.median(r[f] for r in rows if r["mode"] == m)
               for f in ("seconds", "ms_per_key", "compiled", "disk_loads", "driver_s")} for m in cold + warm}
    for m in warm:
        med[m]["steady_ms_per_key"] = statistics.median(r["steady_ms_per_key"] for r in rows if r["mode"] == m)
    first = rows[0]
    where = (f"compile-only target {first['target']} (no GPU: nothing loaded)" if first["target"] != "device"
             else "GPU (zerojit also loads modules and builds launchers)")
    print(f"key space {args.space!r}: {first['keys']} keys; {where}; {first['cpus']} CPUs, --workers {args.workers}; "
          f"medians of {args.repeat} run(s); Triton's driver start (on a GPU: CUDA's context) {first['driver_s']:.2f} s, "
          "not timed")
    steady_col = bool(warm)  # measured in the warm modes only
    print(f"{'mode':<20}{'seconds':>9}{'ms/key':>9}{'steady' if steady_col else '':>8}{'compiles':>10}{'disk loads':>12}"
          f"{'speed-up':>10}")
    for group, base in ((cold, "triton-serial"), (warm, "triton-warm")):
        for m in group:
            r = med[m]
            steady = f"{r['steady_ms_per_key']:>8.2f}" if r.get("steady_ms_per_key") is not None else f"{'':>8}"
            ratio = f"{med[base]['seconds'] / r['seconds']:>9.1f}x" if base in med else f"{'-':>10}"
            print(f"{m:<20}{r['seconds']:>9.2f}{r['ms_per_key']:>9.2f}{steady}{r['compiled']:>10.0f}"
                  f"{r['disk_loads']:>12.0f}{ratio}")
    if steady_col:
        print("steady: ms per key of a second warm pass in the same process (in-process caches emptied), i.e. "
              "without the process's one-time costs (Triton's first-launch imports, binders, source hashes)")
    if "zerojit-prestarted" in cold and args.workers > 1:
        print(f"zerojit-prestarted: its workers were started {args.overlap:g} s before the timed call "
              "(registry.start_workers) and booted meanwhile, untimed: not a cold warm-up on its own")
    for m in ("zerojit-new-install", "zerojit", "zerojit-spawn"):
        z = next((r["stats"] for r in reversed(rows) if r["mode"] == m), None)
        if z:
            launchers = (f"; {z['worker_launchers']} launchers built by workers, {z['launchers_remembered']} copied "
                         "from those remembered for this install" if first["target"] == "device" else "")
            print(f"{m} cold: {z['worker_compiled']} compiled in {z['workers']} worker processes, {z['compiled']} in "
                  f"the parent{launchers} ({z['worker_seconds']:.2f} s of worker time)"
                  + (f"; recovered: {z['recovered']}" if z["recovered"] else ""))
    for m in ("zerojit-new-install", "zerojit", "zerojit-nice5", "zerojit-spawn", "zerojit-prestarted", "zerojit-warm"):
        last = next((r for r in reversed(rows) if r["mode"] == m), None)
        if last and last["stats"]:
            stats = last["stats"]
            print(f"{m} phases: " + ", ".join(f"{name} {s:.3f} s" for name, s in stats["phases"])
                  + (f"; {stats['restored']} keys restored by the restore index" if stats["restored"] else ""))
            if stats.get("timeline"):
                print(f"{m} timeline: {timeline_summary(stats, last['seconds'])}")
                effs = [efficiency(r["stats"], r["seconds"]).rsplit(" ", 1)[-1] for r in rows if r["mode"] == m]
                print(f"{m} efficiency (last run): {efficiency(stats, last['seconds'])}; every run: {', '.join(effs)}")
                print(f"{m} compile stages (worker seconds): "
                      + ", ".join(f"{stage} {s:.1f}" for stage, s in stats["worker_stages"]))
    nice_ab(rows)
    warm_runs = [r for r in rows if r["mode"] == "zerojit-warm"]
    split = warm_split(rows)
    if split:
        fixed, per_key, n, part = split
        med["zerojit-warm"].update(fixed_ms=fixed, per_key_ms=per_key)
        print(f"zerojit-warm split: fixed {fixed:.1f} ms + {per_key:.3f} ms per key (a line through the warm call "
              f"over {n} keys and over its first {part}, {PART}, medians of {args.repeat} run(s) each, this run); "
              f"the warm call over {n} keys: {med['zerojit-warm']['ms_per_key']:.2f} ms/key")
        gc_runs = [r for r in rows if r["mode"] in ("zerojit-warm", PART)]
        if any(r["full_collections"] for r in gc_runs):
            fixed_gc, per_key_gc = warm_split(rows, less_gc=True)[:2]
            med["zerojit-warm"].update(fixed_less_gc_ms=fixed_gc, per_key_less_gc_ms=per_key_gc)
            each = "; ".join(f"{m}: " + ", ".join(f"{r['gc_ms']:.0f} ms ({r['full_collections']} full)"
                                                  for r in gc_runs if r["mode"] == m) for m in ("zerojit-warm", PART))
            print(f"zerojit-warm garbage collector, per run: {each}. A full collection walks every object of the "
                  "process, and allocation counts decide which call it falls in (or a later request); less "
                  f"it, the split is fixed {fixed_gc:.1f} ms + {per_key_gc:.3f} ms per key")
        else:
            young = statistics.median(r["gc_ms"] for r in gc_runs)
            print(f"zerojit-warm garbage collector: no full collection in the warm calls (young ones: {young:.1f} ms "
                  "median per call)")
    if warm_runs:
        restore = statistics.median(dict(r["stats"]["phases"]).get("restore", 0.0) for r in warm_runs)
        once = statistics.median(sum(dict(r["stats"]["phases"]).get(p, 0.0) for p in ("imports", "prime"))
                                 for r in warm_runs)
        print(f"zerojit-warm per key: {1e3 * restore / first['keys']:.2f} ms restoring (lookup, module and function "
              f"load, launcher); plus {1e3 * once:.0f} ms once per process for the launch path (its lazy imports and "
              "first launch)")
    if args.json:
        from zerojit.outputs import write_output

        write_output(args.json, json.dumps({"args": vars(args), "medians": med, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
