"""Where a warm start's time goes: ``warmup.py``'s ``zerojit-warm`` call, timed part by part.

One cold warm-up of ``benchmarks/warmup.py``'s 111-key matrix (``--child zerojit``) fills a fresh
``TRITON_CACHE_DIR`` and writes the restore indexes; then ``--runs`` fresh processes each make the
warm call (``registry.warmup()``) with timers wrapped around the functions it spends its time in
(zerojit's and, on a GPU, Triton's and the driver's loading calls), the garbage collector's time
from ``gc.callbacks``. Printed: the warm call, the report's phases and each timer (milliseconds in
all, calls), the median and the spread over the runs. The timers cost a few microseconds a call
(about 1,000 calls: 2-5 ms in all), so the parts are a diagnosis, not a figure to compare with
``warmup.py``'s warm call. Nothing here is a goal: ``warmup.py`` measures the warm start.

Timed: ``restore_records`` (each index's restore), ``build_compiled_kernel`` (a ``CompiledKernel``
from the entry's checked files), ``triton_compat.load_compiled`` (on a GPU: ``_init_handles``,
within it the launcher's ``__init__`` and ``load_binary``, then ``cuFuncLoad``), ``_parse_records``
and ``_read_index`` (the indexes), ``source_hash`` (Triton's ``cache_key``, checked against the
index), ``_prepare_launches`` (key memos and argument plans), the generic pass's ``plan`` and
``file_variants``, ``import_launch_path_modules`` and ``prime_kernel``.

Without a GPU it runs under ``compile_only("cuda:90")`` (nothing loads: the GPU-only timers stay
empty). ``--env NAME=VALUE`` (repeatable) sets a variable for the warm runs only (e.g.
``CUDA_MODULE_LOADING=EAGER``, ``ZEROJIT_PRIME_KERNELS=0``).

Usage: ``PYTHONPATH=src python benchmarks/warm_call_parts.py [--runs 4] [--env NAME=VALUE] [--json OUT]``
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The timers, in the order printed (indented: within the line above)
ORDER = ("read index", "restore_records (keys', generic index)", "  parse index", "  build_compiled_kernel",
         "  load_compiled", "    _init_handles", "      CudaLauncher.__init__",
         "      load_binary (cuModuleLoadData, ...)", "    cuFuncLoad",
         "  prepare_launches", "source_hash (cache_key: restore, generic plan)", "import_launch_path_modules",
         "generic plan", "generic file_variants", "prime_kernel")


def _timers() -> dict:
    """Wrap the warm call's functions with timers; returns ``{label: [seconds, calls]}``."""
    import torch

    import zerojit.launch_priming as priming
    import zerojit.registry as registry
    import zerojit.restore as restore
    import zerojit.triton_compat as tc

    spent: dict[str, list] = {}

    def add(label: str, seconds: float) -> None:
        s = spent.setdefault(label, [0.0, 0])
        s[0] += seconds
        s[1] += 1

    def wrap(owner, name: str, label: str) -> None:
        f = getattr(owner, name)

        @functools.wraps(f)
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                add(label, time.perf_counter() - t)

        setattr(owner, name, timed)

    for owner, name, label in [
        (restore, "restore_records", "restore_records (keys', generic index)"),
        (restore, "build_compiled_kernel", "  build_compiled_kernel"),
        (restore, "_parse_records", "  parse index"), (restore, "_read_index", "read index"),
        (restore, "_prepare_launches", "  prepare_launches"),
        (tc, "source_hash", "source_hash (cache_key: restore, generic plan)"),
        (tc, "load_compiled", "  load_compiled"), (priming, "prime_kernel", "prime_kernel"),
        (registry, "generic_plan", "generic plan"), (registry, "file_variants", "generic file_variants"),
        (registry, "import_launch_path_modules", "import_launch_path_modules"),
    ]:
        wrap(owner, name, label)
    if torch.cuda.is_available():
        from triton.backends.nvidia.driver import CudaLauncher
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.driver import driver

        wrap(CompiledKernel, "_init_handles", "    _init_handles")
        wrap(CudaLauncher, "__init__", "      CudaLauncher.__init__")
        wrap(driver.active.utils, "load_binary", "      load_binary (cuModuleLoadData, ...)")
        func_load = tc._cu_func_load()
        if func_load is not None:
            def timed_func_load(pointer, _f=func_load):
                t = time.perf_counter()
                rc = _f(pointer)
                add("    cuFuncLoad", time.perf_counter() - t)
                return rc

            tc._cu_func_load = lambda: timed_func_load
    return spent

def child() -> dict:
    """One warm call, timed part by part (this process's cache folder is warm)."""
    import contextlib

    sys.path.insert(0, HERE)
    import torch
    import warmup  # benchmarks/warmup.py: its key space

    from zerojit.compile_only import compile_only

    gpu = torch.cuda.is_available()
    registry = warmup.key_space("matrix")
    with (contextlib.nullcontext() if gpu else compile_only("cuda:90")):
        from triton.runtime.driver import driver

        driver.active.get_current_device()  # the driver's start: not warm-up (as warmup.py)
        if gpu:
            torch.empty(1, device="cuda")
        spent = _timers()
        collector = warmup._CollectorTime()
        t0 = time.perf_counter()
        report = registry.warmup(progress=False, target="device" if gpu else "cuda:90")
        total = time.perf_counter() - t0
        gc_ms, full_collections = collector.stop()
    return {"total_ms": 1e3 * total, "keys": report.num_keys, "restored": report.stats.restored,
            "gc_ms": gc_ms, "full_collections": full_collections, "gpu": gpu,
            "phases_ms": {name: 1e3 * s for name, s in report.stats.phases},
            "timers": {label: [1e3 * s, n] for label, (s, n) in spent.items()}}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f}  ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="warm calls, each in a fresh process")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set for the warm runs only (repeatable)")
    parser.add_argument("--json", help="also write every run's figures here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child()))
        return
    if opts.runs < 1:
        parser.error(f"--runs {opts.runs}: at least 1")
    extra = {}
    for item in opts.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--env {item!r}: write NAME=VALUE")
        extra[name] = value
    if opts.json and (os.path.isdir(opts.json) or not os.access(os.path.dirname(os.path.abspath(opts.json)), os.W_OK)):
        parser.error(f"--json {opts.json}: cannot write there")
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(folder, "cache"), TRITON_HOME=os.path.join(folder, "home"))
        sys.path.insert(0, HERE)
        import warmup  # benchmarks/warmup.py: its cold child fills the cache folder and writes the indexes

        warmup.run_child("zerojit", env["TRITON_CACHE_DIR"], env["TRITON_HOME"], argparse.Namespace(
            workers=os.cpu_count() or 1, space="matrix", overlap=0.0, target=None))
        runs = []
        for _ in range(opts.runs):
            try:
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=dict(env, **extra),
                                      capture_output=True, text=True, timeout=warmup.CHILD_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                sys.exit(f"a warm call gave no result after {warmup.CHILD_TIMEOUT_S} s")
            if proc.returncode:  # its last line says why (a setting in --env, ...)
                sys.exit(f"a warm call failed: {(proc.stderr.strip().splitlines() or ['(no output)'])[-1]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first = runs[0]
    print(f"warm call of warmup.py's matrix, {first['keys']} keys ({first['restored']} restored), {len(runs)} fresh "
          f"processes, {'GPU' if first['gpu'] else 'compile-only cuda:90 (nothing loads)'}"
          + (f", {' '.join(opts.env)}" if opts.env else "") + "; ms: median (spread)")
    print(f"  {'warm call':50s}{_spread([r['total_ms'] for r in runs])}")
    print(f"  {'garbage collector':50s}{_spread([r['gc_ms'] for r in runs])}  "
          f"full collections: {[r['full_collections'] for r in runs]}")
    for name in first["phases_ms"]:
        print(f"  {'phase ' + name:50s}{_spread([r['phases_ms'].get(name, 0.0) for r in runs])}")
    print(f"  {'the rest (the warm call less its phases)':50s}"
          f"{_spread([r['total_ms'] - sum(r['phases_ms'].values()) for r in runs])}")
    print("  timers (indented: within the line above; restore_records runs in phase restore for the keys' index and "
          "in phase generic for the generic variants' index):")
    for label in ORDER:  # (indented: inside the line above)
        if label in first["timers"]:
            values = [r["timers"].get(label, [0.0, 0])[0] for r in runs]
            calls = first["timers"][label][1]
            print(f"  {label:50s}{_spread(values)}  {calls} call{'s' if calls != 1 else ''}")
    if opts.json:
        from zerojit.outputs import write_output

        write_output(opts.json, json.dumps({"env": opts.env, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
