"""Parallel warm-up (``workers=N``): worker processes compile, the parent loads; same result as serial.

Everything is checked against Triton's own artefacts: its in-process cache keys, the
specializations its binder returns, the entries it wrote to the disk cache and its compilation
listener (compiles vs disk loads), not against zerojit's bookkeeping alone.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
import time
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs

from _kernels import ramp_kernel
from zerojit import precompile, triton_compat
from zerojit.compile_only import compile_only
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.registry import JitWarmupRegistry, WarmupError
from zerojit.runner.config import load_config
from zerojit.runner.model import register_model
from zerojit.specialization import WarmupTensor

ENTRY = re.compile(r"^[A-Z2-7]+$")


@pytest.fixture(autouse=True)
def co():
    with compile_only("cuda:90") as drv:
        yield drv


def use_cache(monkeypatch, path) -> str:
    monkeypatch.setattr(knobs.cache, "dir", str(path))
    return str(path)


def dsv4_registry():
    config = load_config("dsv4-like")
    return register_model(config), config


def forget_in_process(registry, config=None) -> None:
    """Drop Triton's in-process caches of every registered kernel (the disk cache stays)."""
    for kernel in registry.warmup_keys(config)[0]:
        kernel.kernel.device_caches.clear()


def entries(folder) -> set[str]:
    """Complete Triton cache entries in ``folder`` (a folder with its __grp__ file)."""
    return {e for e in os.listdir(folder) if ENTRY.match(e)
            and any(f.startswith("__grp__") for f in os.listdir(os.path.join(folder, e)))}


def variants(report):
    return [(v.kernel, v.key, v.triton_key, v.specialization, v.param_names) for v in report.variants]


PARALLEL = (2, "spawn")  # the fixture's keys: two forked workers (the default on Linux), two spawned ones


@pytest.fixture(scope="module")
def serial_and_parallel(tmp_path_factory):
    """The DSv4-like key space warmed cold: serially (key 1), with two forked worker processes
    (key 2) and with two spawned ones (key "spawn")."""
    out = {}
    for name, workers in ((1, 1), (2, 2), ("spawn", 2)):
        folder = tmp_path_factory.mktemp(f"cache-w{name}")
        with pytest.MonkeyPatch.context() as mp, compile_only("cuda:90"):
            if name == "spawn":
                mp.setenv(precompile.WORKER_START_ENV, "spawn")
                mp.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)  # every key to the workers, however slow their boot
            mp.setattr(knobs.cache, "dir", str(folder))
            registry, config = dsv4_registry()
            forget_in_process(registry, config)
            events = []
            mp.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
            report = registry.warmup(config, workers=workers, progress=False, target="cuda:90", generic=False)
            out[name] = (report, list(events), entries(folder), str(folder))
    return out


@pytest.mark.parametrize("mode", PARALLEL)
def test_workers_give_exactly_the_serial_result(serial_and_parallel, mode):
    serial, s_events, s_entries, _ = serial_and_parallel[1]
    parallel, p_events, p_entries, _ = serial_and_parallel[mode]
    assert serial.ok and parallel.ok and serial.num_keys == parallel.num_keys == 21
    assert serial.keys_by_kernel() == parallel.keys_by_kernel()
    assert variants(serial) == variants(parallel)  # Triton keys and specializations, in order
    assert s_entries == p_entries and len(s_entries) == 21  # the workers wrote the entries serial writes
    for s, p in zip(serial.variants, parallel.variants):  # the loaded kernels are Triton's, field for field
        a, b = s.compiled, p.compiled
        assert (a.hash, a.name, a.kernel, a.packed_metadata) == (b.hash, b.name, b.kernel, b.packed_metadata)
        assert a.metadata == b.metadata and dict(a.asm) == dict(b.asm) and set(vars(a)) == set(vars(b))
        assert (a.src.signature, a.src.constants, a.src.attrs) == (b.src.signature, b.src.constants, b.src.attrs)


@pytest.mark.parametrize("mode", PARALLEL)
def test_workers_compile_and_the_parent_only_loads(serial_and_parallel, mode):
    serial, s_events, _, _ = serial_and_parallel[1]
    parallel, p_events, _, _ = serial_and_parallel[mode]
    assert s_events == [False] * 21  # Triton's listener: 21 compiles in-process
    # the parent neither compiles nor runs Triton's lookup: it loads the workers' entries into the
    # keys Triton's hook asked for (zerojit.precompile._ShippedLoader)
    assert p_events == []
    s = parallel.stats
    assert (s.worker_compiled, s.compiled, s.disk_loads, s.workers, s.recovered) == (21, 0, 21, 2, ())
    assert serial.stats.compiled == 21 and serial.stats.workers == 0
    assert "worker processes' included" in parallel.summary() and "worker processes'" not in serial.summary()


@pytest.mark.parametrize("mode", PARALLEL)
def test_the_timeline_shows_each_workers_boot_then_its_requests(serial_and_parallel, mode):
    parallel = serial_and_parallel[mode][0]
    s, seconds = parallel.stats, parallel.seconds
    by_worker: dict[int, list] = {}
    for what, worker, start, end in s.timeline:
        assert 0 <= start <= end <= seconds, (what, start, end)
        by_worker.setdefault(worker, []).append((start, what))
    assert sorted(by_worker) == list(range(s.workers))
    compiles = [what for what, *_ in s.timeline if what.startswith("compile ")]
    # one span per request a worker answered: every compile the workers made, by its function
    assert len(compiles) == s.worker_compiled == 21
    assert {c.split(" ", 1)[1] for c in compiles} >= {"zerojit.kernels.mla.index:_convert_req_index_to_global_index_kernel"}
    for spans in by_worker.values():
        names = [what for _, what in sorted(spans)]
        boot = [n for n in names if not n.startswith(("compile ", "launcher "))]
        if mode == "spawn":
            assert boot[:2] == ["python", "imports"] and boot[-1] == "set-up"  # "preload" only while it waited
        else:  # a copy of this process: nothing to import, no throwaway compile
            assert boot == ["fork", "set-up"]
        assert names[:len(boot)] == boot  # requests only once the worker is ready
    phases = dict(s.phases)
    assert list(phases)[:3] == ["restore", "fork", "start"] if mode == 2 else list(phases)[:2] == ["restore", "start"]
    assert 0 < s.worker_cpu_seconds  # the requests' CPU time (ptxas included)


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_a_known_build_key_reaches_the_workers_before_any_request(monkeypatch, tmp_path, mode):
    """The key goes to every worker as soon as this process has it, not with the first compile
    request (a forked worker: with its fork): a worker that has it when its imports end compiles
    no throwaway kernel, even when the sweep is slow to hand out work (here: held back 2 s)."""
    from zerojit.cache import use_fast_triton_key

    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    use_cache(monkeypatch, tmp_path)
    use_fast_triton_key()  # a known install: the key is there at once
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    sweep = precompile.WarmupSession._sweep

    def slow_sweep(self, *args, **kwargs):
        time.sleep(2)
        return sweep(self, *args, **kwargs)

    monkeypatch.setattr(precompile.WarmupSession, "_sweep", slow_sweep)
    report = registry.warmup(config, workers=2, progress=False, target="cuda:90")
    boot = [what for what, *_ in report.stats.timeline if what in ("python", "imports", "preload", "set-up", "fork")]
    assert report.stats.worker_compiled == 21 and boot.count("imports" if mode == "spawn" else "fork") == 2
    assert "preload" not in boot


def test_compile_stages_are_tritons_own_times(serial_and_parallel):
    s = serial_and_parallel[2][0].stats
    stages = dict(s.worker_stages)
    assert list(stages)[:1] == ["ir"] and {"ttir", "ttgir", "llir", "ptx", "cubin"} <= set(stages)
    assert all(v > 0 for k, v in stages.items() if k != "store")
    assert sum(stages.values()) <= s.worker_seconds  # parts of the workers' request time
    assert serial_and_parallel[1][0].stats.worker_stages == ()  # no workers, no worker stages


def warm_start(serial_and_parallel, monkeypatch):
    """A warm-up with two workers over the cache the parallel cold warm-up left."""
    use_cache(monkeypatch, serial_and_parallel[2][3])
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    return registry.warmup(config, workers=2, progress=False, target="cuda:90")


def test_warm_start_starts_no_worker_and_compiles_nothing(serial_and_parallel, monkeypatch):
    report = warm_start(serial_and_parallel, monkeypatch)
    s = report.stats
    assert (s.compiled, s.worker_compiled, s.disk_loads, s.workers, s.restored) == (0, 0, 0, 0, 21)
    assert variants(report) == variants(serial_and_parallel[1][0])


def test_workers_started_early_serve_the_next_warm_up(serial_and_parallel, monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path)
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    assert registry.start_workers(config, workers=2, target="cuda:90") == 2
    pool = registry._prestarted
    report = registry.warmup(config, workers=2, progress=False, target="cuda:90")
    s = report.stats
    assert (s.worker_compiled, s.compiled, s.workers, s.recovered) == (21, 0, 2, ())  # no other worker started
    assert len(pool.seen) == 21 and pool.started == 2  # every request went to the early workers
    assert variants(report) == variants(serial_and_parallel[1][0])
    assert registry._prestarted is None and not any(t.is_alive() for t in pool.threads)  # taken, then stopped
    # the key space is warm in this cache folder now: a warm start needs no worker
    assert registry.start_workers(config, workers=2, target="cuda:90") == 0


def test_workers_started_for_another_cache_folder_are_stopped(serial_and_parallel, monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path / "first")
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    registry.start_workers(config, workers=2, target="cuda:90")
    pool = registry._prestarted
    use_cache(monkeypatch, tmp_path / "second")
    report = registry.warmup(config, workers=2, progress=False, target="cuda:90")
    assert not any(t.is_alive() for t in pool.threads)  # stopped, not used
    assert pool.seen == set()  # no request went to them
    s = report.stats
    assert (s.worker_compiled, s.workers) == (21, 2)  # the 2 this warm-up started; the stopped ones not counted
    assert s.recovered == ("2 worker processes that start_workers started stopped unused: they compile for another "
                           "target or cache folder than this warm-up",)
    assert variants(report) == variants(serial_and_parallel[1][0])
    assert entries(tmp_path / "second") and not os.path.exists(tmp_path / "first" / ".zerojit")


def test_stop_workers_and_a_serial_warm_up_stop_early_workers(monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path)
    registry, config = dsv4_registry()
    registry.start_workers(config, workers=2, target="cuda:90")
    pool = registry._prestarted
    registry.stop_workers()
    assert registry._prestarted is None and not any(t.is_alive() for t in pool.threads)
    registry.start_workers(config, workers=2, target="cuda:90")
    pool = registry._prestarted
    forget_in_process(registry, config)
    report = registry.warmup(config, workers=1, progress=False, target="cuda:90")  # serial: no use for them
    assert not any(t.is_alive() for t in pool.threads) and report.stats.compiled == 21
    assert report.stats.workers == 0 and report.stats.recovered == (
        "2 worker processes that start_workers started stopped unused: this warm-up compiles in-process (workers=1)",)
    # the serial warm-up left a restore index: the next start is warm, so none is started
    assert registry.start_workers(config, workers=2, target="cuda:90") == 0


def test_early_workers_follow_the_warm_ups_count(serial_and_parallel, monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path)
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    assert registry.start_workers(config, workers=64, target="cuda:90") == 21  # at most one per key
    registry.stop_workers()
    assert registry.start_workers(config, workers=3, target="cuda:90") == 3
    report = registry.warmup(config, workers=2, progress=False, target="cuda:90")
    s = report.stats
    assert s.worker_compiled == 21 and variants(report) == variants(serial_and_parallel[1][0])
    serving = {worker for what, worker, *_ in s.timeline if what.startswith("compile ")}
    assert len(serving) == 2  # the third stopped before its first request


@pytest.mark.parametrize("workers", [0, -1, True, 2.5, "4", None])
def test_start_workers_wants_a_whole_number(workers):
    registry, config = dsv4_registry()
    with pytest.raises(ValueError, match=r"start_workers\(workers=.*whole number >= 1"):
        registry.start_workers(config, workers=workers, target="cuda:90")
    assert registry._prestarted is None
    assert registry.start_workers(config, workers=1, target="cuda:90") == 0  # one: the warm-up compiles in-process


def test_warm_start_without_the_restore_index_loads_from_disk(serial_and_parallel, monkeypatch):
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    report = warm_start(serial_and_parallel, monkeypatch)
    s = report.stats
    assert (s.compiled, s.worker_compiled, s.disk_loads, s.workers, s.restored) == (0, 0, 21, 0, 0)
    assert variants(report) == variants(serial_and_parallel[1][0])


def built_here(folder) -> None:
    """Point the group files of a copied cache folder at its own files, as those of a cache built
    in that folder (an image's) are: a copy's still name the original's, which zerojit refuses."""
    import glob
    import json

    for group in glob.glob(os.path.join(folder, "*", "__grp__*")):
        with open(group) as f:
            body = json.load(f)
        here = os.path.dirname(group)
        body["child_paths"] = {n: os.path.join(here, os.path.basename(p)) for n, p in body["child_paths"].items()}
        with open(group, "w") as f:
            json.dump(body, f)


def test_a_read_only_warm_cache_without_zerojits_files_starts_no_worker(serial_and_parallel, monkeypatch, tmp_path):
    """A warm cache shipped read-only (say, in an image) without zerojit's marker and restore index:
    no worker is started (none could write an entry); every key loads from disk. Read-only is
    simulated, so this also holds as root."""
    import shutil

    folder = tmp_path / "ro"
    shutil.copytree(serial_and_parallel[2][3], folder, ignore=shutil.ignore_patterns(".zerojit"))
    built_here(folder)
    use_cache(monkeypatch, folder)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: mode != os.W_OK and real_access(p, mode) if str(p) == str(folder)
                        else real_access(p, mode))
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    assert registry.start_workers(config, workers=2, target="cuda:90") == 0
    report = registry.warmup(config, workers=2, progress=False, target="cuda:90")
    s = report.stats
    assert (s.compiled, s.worker_compiled, s.workers, s.disk_loads) == (0, 0, 0, 21) and s.recovered == ()


# --- failures, and what workers cannot do -----------------------------------------------------


class Ramp(TritonJitKernel["Ramp.CompileKey"]):
    """Over the shared ``ramp_kernel`` (module ``_kernels``, which workers import): BLOCK 48 fails."""

    kernel = ramp_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def get_warmup_keys(self, *, blocks=(16, 48, 32)) -> list:
        return trace_dispatch(self.CompileKey)(block=choices(*blocks))

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (key.block,)), value=0.5, block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, out, value: float, block: int = 16) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=block), returns=out)


def warm_ramp_with_two_workers():
    """A two-worker warm-up of Ramp's two keys, none in Triton's in-process cache; its report."""
    ramp = Ramp()
    ramp.kernel.device_caches.clear()
    registry = JitWarmupRegistry()
    with registry.activate():
        ramp.register_warmup(blocks=(16, 32))
    return registry.warmup(workers=2, progress=False, generic=False)


def failures_of(workers: int, kernel, **request) -> tuple:
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup(**request)
    kernel.kernel.device_caches.clear()
    with pytest.raises(WarmupError) as info:
        registry.warmup(workers=workers, progress=False)
    report = info.value.report
    return report, {(f.kernel, f.key, f.error) for f in report.failures}


def test_while_the_build_key_is_hashed_each_missing_launcher_is_queued_once_and_nothing_compiles(monkeypatch, tmp_path):
    """A new Triton install: while the build key is hashed, the session runs the warm-up launches
    only as far as Triton's signature and queues one launcher build per signature (a launcher
    needs no build key). Checked against the signatures Triton's own hook reports in a serial
    warm-up afterwards; the pass itself compiled, cached and wrote nothing."""
    use_cache(monkeypatch, tmp_path)
    registry, config = dsv4_registry()
    forget_in_process(registry, config)
    plan, _ = registry.warmup_keys(config)
    jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
    queued: list = []

    class Pool:  # stands in for the worker pool: records what it is asked to build
        def submit_launcher(self, types, key, lock_path):
            queued.append(types)

    with precompile.WarmupSession(workers=2) as session:
        session._need_launchers, session._pool = True, Pool()  # as on a GPU, with workers booting
        session._launchers_while_hashing(jobs, lambda: False)  # the key is there: nothing to do
        assert queued == []
        session._launchers_while_hashing(jobs, lambda: True)
        session._pool = None
        assert session.counts.compiled == 0
    assert os.listdir(tmp_path) == [] or not entries(tmp_path)
    assert all(not fn.kernel.device_caches or not any(c[0] for c in fn.kernel.device_caches.values()) for fn in plan)

    seen: set = set()
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kw: seen.add(tuple(kw["compile"]["signature"].values())))
    for kernel, key in jobs:
        kernel.compile(key)
    if not triton_compat.BUILDS_LAUNCHERS:  # Triton 3.7 and later: no launcher modules to build
        assert queued == [] and len(seen) >= 5
        return
    assert len(queued) == len(set(queued)) and set(queued) == seen and len(seen) >= 5


def test_workers_started_at_the_first_miss_compile_it(monkeypatch, tmp_path):
    """A warm-up expected warm (or one whose cache folder did not exist yet) starts its workers at
    the first entry missing from the disk cache, from inside Triton's lookup. The pool shares the
    session's lock, so the build key is handed to it outside the lock (inside, this deadlocked)."""
    import threading

    use_cache(monkeypatch, tmp_path / "cache")  # not created yet: no workers before the first miss
    ramp = Ramp()
    ramp.kernel.device_caches.clear()
    jobs = [(ramp, key) for key in ramp.get_warmup_keys(blocks=(16, 32))]
    result: list = []

    def warm_up() -> None:
        with precompile.WarmupSession(workers=2) as session:
            result.extend((session.run(jobs, expect_warm=True), session.counts))

    thread = threading.Thread(target=warm_up, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the warm-up hung"
    outcomes, counts = result
    assert all(o.error is None for o in outcomes) and counts.worker_compiled == 2 and counts.compiled == 0


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_a_failing_key_fails_the_same_way_with_workers(monkeypatch, tmp_path, mode):
    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    monkeypatch.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)  # the failing key goes to a worker
    use_cache(monkeypatch, tmp_path / "serial")
    serial, serial_failures = failures_of(1, Ramp())
    use_cache(monkeypatch, tmp_path / "parallel")
    parallel, parallel_failures = failures_of(2, Ramp())
    assert serial_failures == parallel_failures and len(parallel_failures) == 1
    ((kernel, key, error),) = parallel_failures
    assert kernel == "ramp" and key == Ramp.CompileKey(48) and "power of 2" in error
    assert [k.block for k in parallel.keys_by_kernel()["ramp"]] == [16, 32]  # the others still warmed
    assert variants(serial) == variants(parallel)
    assert parallel.stats.worker_compiled == 2
    (line,) = [r for r in parallel.stats.recovered if "failed in a worker" in r]  # one line, one key
    assert line.startswith(f"kernel 'ramp' ({ramp_kernel.fn.__module__}:ramp_kernel) failed in a worker (")
    assert line.endswith("); compiled again in this process") and "power of 2" in line


def test_a_warm_up_whose_every_key_failed_says_so():
    report, failures = failures_of(1, Ramp(), blocks=(48, 24))
    assert len(failures) == 2 and report.num_keys == 0
    head, origin = report.summary().splitlines()[:2]
    assert head.startswith("warm-up: 0 of 2 keys over 1 kernel in ") and head.endswith(", 2 failures")
    assert origin.strip() == "nothing compiled or loaded"


def test_request_outcomes_name_the_timeline_spans():
    compile_task, launcher_task = {"kind": "compile"}, {"kind": "launcher"}
    assert precompile._outcome(compile_task, {"ok": True, "compiled": True}) == "compile"
    assert precompile._outcome(compile_task, {"ok": True, "compiled": False}) == "cached"
    assert precompile._outcome(compile_task, {"ok": False, "error": "x"}) == "failed"
    assert precompile._outcome(launcher_task, {"ok": True}) == "launcher"


RAMP_SOURCE = """
import triton
import triton.language as tl


@triton.jit
def _module_kernel(out_ptr, value, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value)
"""


def ramp_from_module(monkeypatch, tmp_path, name: str, prelude: str) -> type:
    """A :class:`Ramp` whose Triton function lives in a new module ``name`` (on ``sys.path``)
    that runs ``prelude`` first."""
    import importlib

    folder = tmp_path / "mods"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(prelude + RAMP_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    return type(name, (Ramp,), {"kernel": importlib.import_module(name)._module_kernel})


def test_a_module_workers_cannot_import_is_tried_once_per_worker_and_reported_once(monkeypatch, tmp_path):
    monkeypatch.setenv(precompile.WORKER_START_ENV, "spawn")  # a forked worker has this process's modules
    monkeypatch.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)
    use_cache(monkeypatch, tmp_path / "cache")
    attempts = tmp_path / "attempts"
    monkeypatch.setenv("ATTEMPTS", str(attempts))
    flaky = ramp_from_module(monkeypatch, tmp_path, "worker_flaky_kernels", (
        "import os, sys\n"
        "with open(os.environ['ATTEMPTS'], 'a') as f:\n"
        "    f.write('x')\n"
        "if sys.flags.no_site:  # a compile worker (python -S); this process imports it fine\n"
        "    raise ImportError('only in workers')\n"))
    registry = JitWarmupRegistry()
    with registry.activate():
        flaky().register_warmup(blocks=(16, 32, 64, 128, 256, 512))
    report = registry.warmup(workers=2, progress=False, generic=False)
    assert report.ok and report.num_keys == 6 and report.stats.compiled == 6
    assert report.stats.recovered == (
        "kernel 'module' (worker_flaky_kernels:_module_kernel) cannot be loaded in a worker (ImportError: only in workers); "
        "compiled in this process instead [6 keys]",)
    # this process once; each worker at its boot (twice: then with site) and at its first request
    assert len(attempts.read_text()) <= 1 + 2 * 3


@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_a_kernel_module_that_needs_torch_at_import_is_reported(monkeypatch, tmp_path, mode):
    """A spawned worker must import torch for such a module (said once); a forked one has it."""
    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    monkeypatch.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)
    use_cache(monkeypatch, tmp_path / "cache")
    torchy = ramp_from_module(monkeypatch, tmp_path, f"torchy_kernels_{mode}", (
        "import torch\n\n\n"
        "class Marked(torch.Tensor):  # uses torch at import time: a worker must import the real one\n"
        "    pass\n"))
    registry = JitWarmupRegistry()
    with registry.activate():
        torchy().register_warmup(blocks=(16, 32))
    report = registry.warmup(workers=2, progress=False)
    assert report.ok and report.stats.worker_compiled == 2  # still compiled by the workers
    assert [r for r in report.stats.recovered if "torch" in r] == ([
        "a compile worker had to import torch: a kernels' module uses it at import time (e.g. subclasses "
        "torch.Tensor), which adds torch's import (~1.5 s) to every worker's boot"] if mode == "spawn" else [])


def test_a_kernel_defined_in_a_function_compiles_in_process(monkeypatch, tmp_path):
    use_cache(monkeypatch, tmp_path)

    @triton.jit
    def _local_kernel(out_ptr, value, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value)

    class Local(Ramp):
        kernel = _local_kernel

    registry = JitWarmupRegistry()
    with registry.activate():
        Local().register_warmup(blocks=(16, 32))
    report = registry.warmup(workers=2, progress=False)
    assert report.ok and report.num_keys == 2
    # no worker could import it, so none is started; one line says why, for both keys
    assert (report.stats.compiled, report.stats.worker_compiled, report.stats.workers) == (2, 0, 0)
    assert report.stats.recovered == (
        f"{__name__}:test_a_kernel_defined_in_a_function_compiles_in_process.<locals>._local_kernel is defined "
        "inside a function, where a worker cannot import it; compiled in this process [2 keys]",)


@pytest.mark.parametrize("death, said", [("import sys; sys.exit(3)", "(exit status 3)"),
                                         ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "(killed by SIGKILL)")])
@pytest.mark.parametrize("mode", ["fork", "spawn"])
def test_dead_workers_are_recovered_from(monkeypatch, tmp_path, death, said, mode):
    """Workers that die at once: the parent compiles everything itself, same keys as serial; how
    they died is in the notes, which the report's summary shows."""
    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    use_cache(monkeypatch, tmp_path / "cache")
    if mode == "spawn":
        script = tmp_path / "dies.py"
        script.write_text(death + "\n")
        monkeypatch.setattr(precompile, "_WORKER_SCRIPT", str(script))
    else:  # the forked copy runs this process's serve(): make it die there
        from zerojit import _compile_worker

        monkeypatch.setattr(_compile_worker, "serve", lambda *a, **k: exec(death))
    registry = JitWarmupRegistry()
    with registry.activate():
        Ramp().register_warmup(blocks=(16, 32))
    Ramp.kernel.device_caches.clear()
    report = registry.warmup(workers=2, progress=False)
    assert report.ok and [k.block for k in report.keys_by_kernel()["ramp"]] == [16, 32]
    assert report.stats.compiled == 2 and report.stats.worker_compiled == 0
    died = [r for r in report.stats.recovered if " died " in r]
    told = [r for r in died if f"died {said} while starting, before its first request" in r]
    # A forked tree's second worker is the first one's child: killed, it is reaped by that worker,
    # which tells how it ended unless it was killed first itself (then it is said to be unknown).
    unknown = [r for r in died if r.startswith("a compile worker died (forked by a worker that ended first: its pid "
                                               "and exit status are unknown) while starting, before its first request")]
    assert told and len(told) + len(unknown) == len(died) == 2 and (mode == "fork" or not unknown)
    assert all(f"  note: {r}" in report.summary() for r in died)


def test_compile_workers_import_no_torch():
    """A worker imports the kernels' modules with torch stubbed out until something really uses
    it; if a module of zerojit or of the MLA kernels used torch at import time, every worker would
    pay torch's whole import (1.5 s) before its first compile."""
    import subprocess
    import sys
    from pathlib import Path

    modules = ["zerojit.compile_only", "zerojit.examples.scale_add"] + [
        f"zerojit.kernels.mla.{m}" for m in ("slot_mapping", "index", "swa", "combine", "prefill", "decode")]
    src = str(Path(precompile.__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, precompile._WORKER_SCRIPT, "--probe", *modules], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=src), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "torch not imported"


PRELOAD = r"""
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import _compile_worker as w
read, write = os.pipe()
if sys.argv[2] == "key-waiting":
    os.write(write, b"x")  # a message is waiting: the parent had the key before the imports ended
setup = {"sys_path": json.loads(sys.argv[3]), "target": ("cuda", 90, 32), "modules": ["zerojit.kernels.mla.index"]}
times = w.preload(setup, os.fdopen(read, "rb", buffering=0))
print(json.dumps({"times": sorted(times), "imported": "zerojit.kernels.mla.index" in sys.modules,
                  "site": "site" in sys.modules, "filelock": "filelock" in sys.modules}))
"""


def run_python(*args: str) -> str:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("key", ["key-waiting", "no-key-yet"])
def test_a_worker_compiles_a_throwaway_kernel_only_while_the_key_is_not_there(key):
    import json
    import sys

    out = json.loads(run_python("-S", "-c", PRELOAD, precompile._WORKER_SCRIPT, key, json.dumps(sys.path)))
    expected = ["imported_at", "started_at"] + (["preloaded_at"] if key == "no-key-yet" else [])
    assert out["times"] == sorted(expected)
    assert out["imported"]  # the kernels' modules are imported during the boot
    assert not out["site"]  # python -S on the parent's sys.path: site was not needed
    assert not out["filelock"]  # its import is ~0.11 s a worker on the H200 host; the worker takes the flock itself


def _blocks(lock_a, lock_b) -> bool:
    """True when ``lock_b`` cannot be taken (on another thread) while ``lock_a`` is held, and is
    taken once ``lock_a`` is released."""
    import threading

    taken = threading.Event()

    def take():
        with lock_b():
            taken.set()

    with lock_a():
        t = threading.Thread(target=take, daemon=True)
        t.start()
        blocked = not taken.wait(0.3)
    t.join(5)
    return blocked and taken.is_set()


def test_a_workers_entry_lock_and_the_parents_filelock_exclude_each_other(tmp_path):
    """flock locks belong to an open file, so two opens of the lock file in one process exclude
    each other just as two processes do."""
    from filelock import FileLock

    from zerojit import _compile_worker as w
    from zerojit.cache import entry_lock

    parent = entry_lock("ENTRY", str(tmp_path))
    path = parent.lock_file
    assert _blocks(lambda: FileLock(path), lambda: w.entry_locked(path))
    assert _blocks(lambda: w.entry_locked(path), lambda: FileLock(path))
    assert _blocks(lambda: w.entry_locked(path), lambda: w.entry_locked(path))


def test_a_workers_entry_lock_falls_back_to_filelock_where_flock_fails(tmp_path, monkeypatch):
    import errno
    import fcntl

    from filelock import FileLock, Timeout

    from zerojit import _compile_worker as w

    real, calls = fcntl.flock, []

    def flock_fails_once(fd, op):  # the worker's own flock fails (as on a file system without it)
        calls.append(op)
        if len(calls) == 1:
            raise OSError(errno.ENOLCK, "No locks available")
        return real(fd, op)

    path = str(tmp_path / "x.lock")
    monkeypatch.setattr(fcntl, "flock", flock_fails_once)
    with w.entry_locked(path):  # held through filelock now
        assert len(calls) > 1
        with pytest.raises(Timeout):
            FileLock(path, timeout=0.1).acquire()
    with FileLock(path, timeout=0.1):  # and released
        pass


def test_a_worker_without_site_runs_it_when_an_import_needs_it():
    """``python -S`` leaves out what ``site`` adds (here: the environment's site-packages, as an
    editable install's import hook would be); the worker then runs ``site.main()`` and retries."""
    code = ("import importlib.util, os, sys; sys.path.insert(0, os.path.dirname(sys.argv[1])); import _compile_worker as w; "
            "before = importlib.util.find_spec('filelock') is not None; w._import_with_site_fallback('filelock'); "
            "print(before, 'filelock' in sys.modules, 'site' in sys.modules)")
    assert run_python("-S", "-c", code, precompile._WORKER_SCRIPT) == "False True True"


def test_workers_skip_the_entry_point_scan_only_with_tritons_own_backends(monkeypatch):
    import triton.backends as tb

    assert triton_compat.backends_in_tree.__wrapped__()  # this Triton: nvidia and amd, shipped inside it
    plugin = type("PluginBackend", (), {"__module__": "some_plugin.compiler"})
    monkeypatch.setitem(tb.backends, "plugin", type(tb.backends["nvidia"])(compiler=plugin, driver=object))
    assert not triton_compat.backends_in_tree.__wrapped__()  # a plugin backend: Triton's entry points find it


GPU_WARMUP = r"""
import json, sys
from triton import knobs
from zerojit.runner.model import register_model
from zerojit.runner.config import load_config
events = []
knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)
config = load_config("dsv4-like")
report = register_model(config, None).warmup(config, workers=int(sys.argv[1]), progress=False)
print(json.dumps({"variants": [[v.kernel, repr(v.key), v.triton_key, [repr(s) for s in v.specialization], v.loaded]
                               for v in report.variants],
                  "compiled": events.count(False), "loaded": events.count(True), "stats": report.to_dict()["stats"]}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not triton_compat.BUILDS_LAUNCHERS, reason="Triton 3.7 and later build no launcher modules")
def test_on_a_gpu_workers_compile_and_build_launchers_and_the_result_is_serial(tmp_path):
    """On the GPU: serial vs 4 workers, each in a fresh process with a fresh cache (and a fresh
    Triton home). Same variants, all loaded; with workers the parent compiles nothing and the
    workers also build launchers. A third, cold warm-up into a new cache folder on the same
    install copies the launchers the workers built instead of building them again."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(precompile.__file__).resolve().parents[1])

    def run(workers: int, cache: str, home: str = "home") -> dict:
        env = dict(os.environ, PYTHONPATH=src, TRITON_CACHE_DIR=str(tmp_path / cache), TRITON_HOME=str(tmp_path / home))
        proc = subprocess.run([sys.executable, "-c", GPU_WARMUP, str(workers)], env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    serial, parallel = run(1, "serial", home="serial-home"), run(4, "parallel")
    assert serial["variants"] == parallel["variants"] and len(serial["variants"]) == 21
    assert all(v[4] for v in parallel["variants"])  # loaded: module, function, launcher
    assert parallel["compiled"] == 0 and parallel["stats"]["recovered"] == []
    assert parallel["stats"]["worker_compiled"] == 22  # 21 keys + the launch-path primer
    built = parallel["stats"]["worker_launchers"]
    assert built >= 1 and parallel["stats"]["launchers_remembered"] == 0
    # a new Triton home: the build key was hashed, and the launchers queued meanwhile took the place
    # of the workers' throwaway compiles
    throwaways = [worker for what, worker, *_ in parallel["stats"]["timeline"] if what == "preload"]
    assert len(throwaways) < parallel["stats"]["workers"]

    again = run(4, "again")  # cold again: a new cache folder, the same install
    assert again["variants"] == serial["variants"] and all(v[4] for v in again["variants"])
    assert again["compiled"] == 0 and again["stats"]["worker_compiled"] == 22
    assert (again["stats"]["launchers_remembered"], again["stats"]["worker_launchers"]) == (built, 0)
    launchers = sorted(p.read_bytes() for p in (tmp_path / "parallel").rglob("__triton_launcher*"))
    copied = sorted(p.read_bytes() for p in (tmp_path / "again").rglob("__triton_launcher*"))
    assert len(launchers) == built and copied == launchers  # the very files, byte for byte


# --- how workers start, and in which order they get requests ----------------------------------


def test_worker_start_method_is_fork_on_linux_unless_spawn_is_asked_for(monkeypatch):
    import sys

    monkeypatch.delenv(precompile.WORKER_START_ENV, raising=False)
    assert precompile.worker_start_method() == ("fork" if sys.platform.startswith("linux") else "spawn")
    monkeypatch.setenv(precompile.WORKER_START_ENV, "spawn")
    assert precompile.worker_start_method() == "spawn"
    monkeypatch.setenv(precompile.WORKER_START_ENV, "forkserver")
    with pytest.raises(ValueError, match="ZEROJIT_WORKER_START='forkserver': use 'fork' or 'spawn'"):
        precompile.worker_start_method()


def _descendants_nice() -> dict[int, int]:
    """pid -> niceness of every live process below this one (/proc: the parent pid is field 4 of
    ``stat``, the niceness field 19; a forked tree's workers are grandchildren)."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                stats[int(name)] = (int(fields[1]), int(fields[16]))  # (ppid, nice)
    below, todo = {}, [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid, (ppid, nice) in stats.items():
            if ppid == parent and pid not in below:
                below[pid] = nice
                todo.append(pid)
    return below


@pytest.mark.parametrize("mode", ["fork", "spawn"])
@pytest.mark.parametrize("asked", [None, "0", "11"])
def test_compile_workers_run_at_the_niceness_asked(monkeypatch, tmp_path, mode, asked):
    """Workers add ``worker_nice()`` to their niceness (``ZEROJIT_WORKER_NICE``; by default
    none), so an engine can put its other start-up work first."""
    monkeypatch.setenv(precompile.WORKER_START_ENV, mode)
    if asked is None:
        monkeypatch.delenv(precompile.WORKER_NICE_ENV, raising=False)
    else:
        monkeypatch.setenv(precompile.WORKER_NICE_ENV, asked)
    use_cache(monkeypatch, tmp_path)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    expected = min(own + (0 if asked is None else int(asked)), 19)
    registry, config = dsv4_registry()
    before = set(_descendants_nice())
    assert registry.start_workers(config, workers=2, target="cuda:90") == 2
    try:
        deadline = time.monotonic() + 60
        while True:  # a spawned worker renices once it has read its set-up
            workers = {pid: nice for pid, nice in _descendants_nice().items() if pid not in before}
            if len(workers) == 2 and set(workers.values()) == {expected}:
                break
            assert time.monotonic() < deadline, f"workers' niceness {workers}, expected {expected} (own {own})"
            time.sleep(0.05)
    finally:
        registry.stop_workers()


@pytest.mark.parametrize("value", ["-1", "20", "low", "2.5", "+5", "1_0", "\u0665"])
def test_a_worker_niceness_outside_0_to_19_is_refused(monkeypatch, value):
    monkeypatch.setenv(precompile.WORKER_NICE_ENV, value)
    with pytest.raises(precompile.WorkerSettingError,
                       match=re.escape(f"ZEROJIT_WORKER_NICE={value!r}: use a whole number from 0 to 19")):
        precompile.worker_nice()


def test_forking_past_its_budget_spawns_the_later_workers(monkeypatch, tmp_path):
    """Forked workers come as one tree (one fork of this process's, the others forked by the
    first worker). A large process forks slowly (fork copies its page tables): once this
    process's forks took ``_FORK_BUDGET`` seconds, workers it starts later (a pool that
    ``start_workers`` started, grown by a warm-up that asks for more) are spawned. Same result;
    one note says so."""
    monkeypatch.delenv(precompile.WORKER_START_ENV, raising=False)
    monkeypatch.setattr(precompile, "_FORK_BUDGET", 0.0)  # every fork is over it
    use_cache(monkeypatch, tmp_path)
    registry, config = dsv4_registry()
    assert registry.start_workers(config, workers=2, target="cuda:90") == 2
    forget_in_process(registry, config)
    report = registry.warmup(config, workers=3, progress=False, target="cuda:90")
    s = report.stats
    assert report.ok and s.worker_compiled == 21 and s.workers == 3
    boots = {worker: [what for what, w, *_ in s.timeline if w == worker and not what.split()[0] in ("compile", "cached")]
             for worker in range(s.workers)}
    assert boots[0] == boots[1] == ["fork", "set-up"] and boots[2][:2] == ["python", "imports"]
    (note,) = [r for r in s.recovered if "fork" in r]
    assert note.startswith("forking this process took ") and note.endswith(
        " ms for 2 workers (a large process: fork copies its page tables); the other workers are spawned")


def _running(pid: int) -> bool:
    """The process exists and is no zombie (an ended one left to a parent that has not reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone (ProcessLookupError: reaped between open and read)
        return False


def test_forked_workers_leave_no_process_or_pipe_behind(monkeypatch, tmp_path):
    from zerojit import _compile_worker

    monkeypatch.delenv(precompile.WORKER_START_ENV, raising=False)
    use_cache(monkeypatch, tmp_path)
    forked: list = []
    fork_workers = _compile_worker.fork_workers

    def recording_fork(*args):
        procs = fork_workers(*args)
        forked.extend(procs)  # a tree's second worker learns its pid from its ready message
        return procs

    monkeypatch.setattr(_compile_worker, "fork_workers", recording_fork)
    before = set(os.listdir("/proc/self/fd"))
    report = warm_ramp_with_two_workers()
    assert report.stats.worker_compiled == 2 and report.stats.workers == 2 and len(forked) == 2
    pids = [proc.pid for proc in forked]
    assert None not in pids and forked[0].child and not forked[1].child  # the second: forked by the first
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in pids):  # reaped in the background
        assert time.monotonic() < deadline, "a forked worker is still running (or was never reaped)"
        time.sleep(0.05)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_requests_go_launchers_first_then_every_kernel_once_then_longest_first():
    q = precompile._TaskQueue()
    put = lambda fn, n: q.put({"kind": "compile", "function": fn, "name": n})  # noqa: E731
    for fn, n in (("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3"), ("c", "c1"), ("b", "b2"), ("c", "c2")):
        put(fn, n)
    q.put({"kind": "launcher", "name": "L"})
    q.put_stop()
    q.put_stop(first=True)
    assert q.get() is None  # a surplus worker's stop goes before every request
    assert q.get()["name"] == "L"
    # no compile time known yet: one request of each kernel in turn, first come first served
    assert [q.get()["name"] for _ in range(3)] == ["a1", "b1", "c1"]
    q.took("a", 0.1)
    q.took("b", 0.9)
    q.took("c", 0.4)
    q.took("c", 0.6)  # c's mean: 0.5
    assert [q.get()["name"] for _ in range(4)] == ["b2", "c2", "a2", "a3"]  # longest first
    assert q.get() is None and q.drain() == []  # the stop signal after every request


def test_requests_go_longest_first_on_what_this_install_took_before():
    """Entries compiled in an earlier warm-up on this install go out on what they took then,
    longest first, ahead of a kernel's mean; an entry never seen goes by its kernel's mean."""
    q = precompile._TaskQueue({"a1": 0.1, "a2": 0.7, "b1": 0.3})
    for fn, n in (("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2"), ("a", "a3")):
        q.put({"kind": "compile", "function": fn, "name": n})
    q.took("b", 0.5)
    q.put_stop()
    assert [q.get()["name"] for _ in range(5)] == ["a2", "b2", "b1", "a1", "a3"] and q.get() is None


def test_a_warm_up_with_workers_remembers_its_compile_seconds_for_the_next_one(monkeypatch, tmp_path):
    from zerojit import cache

    monkeypatch.delenv(precompile.WORKER_START_ENV, raising=False)
    monkeypatch.setattr(cache, "_compile_seconds_path", lambda: str(tmp_path / "home" / "compile-seconds.json"))
    use_cache(monkeypatch, tmp_path / "cache")
    report = warm_ramp_with_two_workers()
    entries = sorted(e for e in os.listdir(tmp_path / "cache") if not e.startswith("."))
    remembered = cache.remembered_compile_seconds()
    assert report.stats.worker_compiled == 2 and sorted(remembered) == entries and len(entries) == 2
    spans = {round(end - start, 4) for what, _, start, end in report.stats.timeline if what.startswith("compile ")}
    assert all(0 < s <= max(spans) + 0.01 for s in remembered.values())  # a worker's own seconds, at most its span
    memo = tmp_path / "home" / "compile-seconds.json"
    for bad in ("[1, 2", "[" * 200_000, '{"a": true, "b": Infinity, "c": -1, "d": "2"}'):  # torn, too deep, not seconds
        memo.write_text(bad)
        assert cache.remembered_compile_seconds() == {}


def test_while_spawned_workers_boot_this_process_compiles_the_waiting_keys(monkeypatch, tmp_path):
    """Spawned workers that take long to boot (a kernels' module importing torch takes seconds)
    leave the waiting keys to this process meanwhile: no key waits for a boot, none is compiled
    twice, and the result is the serial one."""
    monkeypatch.setenv(precompile.WORKER_START_ENV, "spawn")
    use_cache(monkeypatch, tmp_path / "cache")
    slow = ramp_from_module(monkeypatch, tmp_path, "slow_boot_kernels", (
        "import sys, time\n"
        "if sys.flags.no_site:  # a spawned compile worker (python -S): a slow import, here only\n"
        "    time.sleep(60)\n"))
    blocks = (16, 32, 64, 128)
    registry = JitWarmupRegistry()
    with registry.activate():
        slow().register_warmup(blocks=blocks)
    slow.kernel.device_caches.clear()
    events: list = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    started = time.monotonic()
    report = registry.warmup(workers=2, progress=False, generic=False)
    assert time.monotonic() - started < 50  # never waited for a boot (the workers were stopped still booting)
    s = report.stats
    assert report.ok and [k.block for k in report.keys_by_kernel()["module"]] == list(blocks)
    assert (s.compiled, s.worker_compiled) == (4, 0) and events == [False] * 4  # each key compiled once, here
    assert "4 keys compiled in this process while no worker had finished its boot" in s.recovered
    assert "compile" in dict(s.phases)


def test_a_later_sweep_never_waits_for_a_launcher_an_earlier_pool_was_asked_for():
    """A session's second sweep (the generic variants after the keys) starts a pool of its own. A
    launcher the first pool built must not stay listed as a pending task: a key of the second sweep
    with that signature then waited for a task its pool never got, for ever (the H200, Triton 3.6,
    a cold GPU warm-up). Once a pool is finished, its launcher tasks are forgotten and their
    signatures looked for on disk again."""

    class Pool:  # what _submit_launcher and _finish use of a _WorkerPool
        started = 2

        def __init__(self) -> None:
            self.asked: list[tuple] = []

        def submit_launcher(self, types: tuple, key: str, lock: str) -> None:
            self.asked.append(types)

        def finish(self) -> dict:
            return {}

    session = precompile.WarmupSession(workers=2)
    first = Pool()
    session._submit_launcher(first, ("*fp32", "i32"), "ab" * 32)
    assert session._launcher_tasks == {("*fp32", "i32"): "launcher:" + "ab" * 32}
    session._finish(first)
    assert session._launcher_tasks == {} and ("*fp32", "i32") not in session._launchers
    assert session.counts.workers == 2


@pytest.mark.parametrize("name, value, said", [
    ("ZEROJIT_WORKER_NICE", "high", "ZEROJIT_WORKER_NICE='high': use a whole number from 0 to 19"),
    ("ZEROJIT_WORKER_START", "forkserver", "ZEROJIT_WORKER_START='forkserver': use 'fork' or 'spawn'")])
def test_a_bad_worker_setting_exits_2_naming_it_on_the_command_line(tmp_path, monkeypatch, name, value, said):
    from typer.testing import CliRunner

    from zerojit.cli import app

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["demo"], env={name: value})
    assert result.exit_code == 2, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("zerojit ")] == [f"zerojit demo: {said}"]
