"""The warm-up registry: kernels register where the model is built, warm-up compiles it all.

Model construction and KV-cache binding call ``kernel.register_warmup(**request)`` wherever the
facts that fix a kernel's keys become known (the configuration, the cache's block stride). Those
calls reach the registry activated with :meth:`JitWarmupRegistry.activate` (a ContextVar, so
nested activations and concurrent threads each see their own), and do nothing outside one.
:meth:`JitWarmupRegistry.warmup` then asks each kernel for its keys, compiles every key, loads
modules and launchers, and returns a :class:`WarmupReport`.

Start-up (docs/start-up.md): ``warmup(workers=N)`` compiles in N worker processes and loads here
(:mod:`zerojit.precompile`); ``warmup(bundle=FILE)`` installs a cache bundle first
(:mod:`zerojit.cache`); ``warmup(group=...)`` shards the compiles across ``torch.distributed``
ranks (:mod:`zerojit.distributed`); and processes sharing a cache folder compile each entry once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import inspect
import operator
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .compile_only import active_compile_only, current_target_name, is_target_name, warm_target
from .context import active_sink, registering_into
from .context import register as register  # the sink's entry, as before
from .triton_compat import config_cannot_run, current_device, import_launch_path_modules

# precompile, restore and distributed are imported when a warm-up runs, not with this module:
# `import zerojit` imports the registry, and every compile worker pays that import when its
# kernels' modules import zerojit.kernel (the three cost 17 ms of a worker's ~0.4 s boot on the
# 2-core CI machine). None of them imports the registry, so these imports close no cycle.
from . import integrity, launch_priming, learned as _learned, loading
from .cache import cache_dir, check_cache_folder, import_bundle, remove_leftovers, take_damaged_notes
from .autotune import HEURISTIC_ATTRIBUTE, TunedKey
from .generic import file_variants, plan as generic_plan
from .kernel import TritonJitKernel
from .manifest import RecordedKernel, read_manifest, warmup_plan
from .switches import check_switches
from .warmup_store import StoreOutcome, WarmupStore, open_store
from .reports import (KernelWarmup, NoTargetError, WarmupError, WarmupFailure, WarmupReport, WarmupStats,
                      count as count)

__all__ = [
    "JitWarmupRegistry",
    "WarmupReport",
    "KernelWarmup",
    "WarmupFailure",
    "WarmupError",
    "NoTargetError",
    "WarmupStats",
    "active_registry",
    "add_warmup_listener",
    "register",
    "warmup_reports",
    "KEYS_PER_WORKER",
    "MIN_CORES_FOR_WORKERS",
    "WorkerChoice",
    "choose_workers",
    "usable_cores",
    "capped_workers",
]

# The process's completed warm-ups and who wants to hear of the next one: the registry owns this
# callback so that the observation layer (monitor, audit) can listen without being imported here.
_LISTENERS_LOCK = threading.Lock()
_LISTENERS: list[Callable[[WarmupReport], Any]] = []
_COMPLETED: list[WarmupReport] = []


def add_warmup_listener(listener: Callable[[WarmupReport], Any]) -> None:
    """Call ``listener(report)`` at the end of every later :meth:`JitWarmupRegistry.warmup` of this
    process (also one that fails: before its :class:`WarmupError` is raised), in the order the
    listeners were added. The runtime monitor and the audit listen this way. A listener added
    twice is called once."""
    with _LISTENERS_LOCK:
        if listener not in _LISTENERS:
            _LISTENERS.append(listener)


def warmup_reports() -> tuple[WarmupReport, ...]:
    """Every warm-up report this process has completed, oldest first (what a
    :class:`~zerojit.monitor.JitMonitor` built without ``report=`` starts from)."""
    with _LISTENERS_LOCK:
        return tuple(_COMPLETED)


def _warmup_complete(report: WarmupReport) -> None:
    with _LISTENERS_LOCK:
        _COMPLETED.append(report)
        listeners = list(_LISTENERS)
    for listener in listeners:
        listener(report)


def active_registry() -> "JitWarmupRegistry | None":
    """The registry activated in this context (:meth:`JitWarmupRegistry.activate`), or None."""
    sink = active_sink()
    return sink if isinstance(sink, JitWarmupRegistry) else None


def _freeze(value: Any, where: str) -> Any:
    """A hashable value-identity for a request value: tensors by dtype, shape, strides, alignment."""
    if hasattr(value, "data_ptr") and hasattr(value, "dtype") and hasattr(value, "stride"):
        return ("tensor", str(value.dtype), tuple(value.shape), tuple(value.stride()), value.data_ptr() % 16 == 0)
    if isinstance(value, (bool, int, float)):
        return (type(value).__name__, value)  # 1 == 1.0 == True in Python, three classes to Triton
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, where) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v, where)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"{where}: a {type(value).__name__} cannot be compared by value; pass a hashable value") from None
    return value


def _check_target(target: str, *, compiles: bool, caller: str = "warmup") -> None:
    """Refuse a warm-up that cannot compile, or whose ``target`` argument is not what it compiles for.
    ``compiles``: the registry has Triton kernels (others compile their own way); ``caller``: the
    method the messages name.

    Raises:
        NoTargetError: Triton has no active driver (no GPU, no :func:`zerojit.compile_only.compile_only`).
        ValueError: ``target`` is neither ``"device"`` nor this process's target name.
    """
    current = current_target_name()
    if current is None and not compiles:
        return
    if current is None:
        example = target if is_target_name(target) else "cuda:90"
        given = (f" ({caller}(target={target!r}) checks the target, it does not select one)" if target != "device"
                 else "")
        raise NoTargetError(
            f"zerojit {'warm-up' if caller == 'warmup' else caller}: no GPU is visible and no compile-only target is "
            f"active, so Triton cannot compile{given}. On a machine without a GPU, warm up inside "
            f"`with zerojit.compile_only.compile_only(\"{example}\"):` (real cubins for that target, nothing loaded).")
    if target != "device" and target != current:
        how = "compile-only" if active_compile_only() is not None else "its GPU"
        inside = f", or warm up inside compile_only({target!r})" if is_target_name(target) else ""
        raise ValueError(
            f"{caller}(target={target!r}): this process compiles for {current!r} ({how}); target names what the "
            f"report records and what a bundle must be built for, so it must match: pass target=\"device\" or "
            f"{current!r}{inside}")


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity mask (what a container or ``taskset``
    grants), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform (macOS, Windows)
        return os.cpu_count() or 1


#: The fewest keys a compile worker is given when the warm-up chooses how many to start. A
#: worker's boot (Python, Triton's import, the kernels' modules: ~0.4 s on the 16-core H200
#: host, 0.5-1.6 s on a loaded 2-core machine) costs what compiling 2-8 keys does (0.1-0.25 s
#: each), so a worker with fewer keys finishes no sooner than this process would alone.
KEYS_PER_WORKER = 4
#: The fewest usable cores with which the warm-up chooses worker processes. On the 2-core CI
#: machine (loaded by other jobs) 2 workers took 2.5-2.9 s for the 21 keys of ``dsv4-like``
#: against 1.9-2.1 s in this process, and 15.9 s against 18.9 s for the 111-key matrix of
#: ``benchmarks/warmup.py``: this process competes with its workers for the two cores.
MIN_CORES_FOR_WORKERS = 2


@dataclass(frozen=True)
class WorkerChoice:
    """How many compile worker processes a warm-up may start, and why, in words.

    Attributes:
        workers: the most worker processes the warm-up starts (1: none, it compiles in this
            process). They start at the first key missing from Triton's disk cache (at once
            when the key space was never warmed into this cache folder), so a warm-up whose
            keys are all on disk starts none (``WarmupStats.workers`` says how many started).
        why: e.g. ``"4 workers (4 cores, 111 keys to compile)"``, ``"in this process (all 111
            keys restored)"``, ``"2 workers (as asked)"``.
    """

    workers: int
    why: str

    def __str__(self) -> str:
        return self.why


def capped_workers(asked: int | None, cores: int) -> "int | WorkerChoice | None":
    """``asked`` workers at most one per core: ``asked`` itself when it fits (or None), else a
    :class:`WorkerChoice` of ``cores`` workers whose words say it was capped (more compile
    workers than cores only compete for them: 64 on 2 cores ran 4x slower than 2)."""
    if asked is None or asked <= cores:
        return asked
    workers = f"{count(cores, 'worker')}" if cores > 1 else "in this process"
    return WorkerChoice(cores, f"{workers} ({asked} asked, capped to the {count(cores, 'core')})")


def choose_workers(asked: int | None, *, cores: int, to_compile: int, restored: int = 0,
                   sharded: bool = False, pulled: int = 0) -> WorkerChoice:
    """The compile workers of a warm-up: ``asked`` when given (``workers=N`` means N), else chosen.

    Chosen: none (this process compiles) when no key is left to compile (every key restored
    from the disk cache by zerojit's restore index), with a process group (the ranks already
    share the compiles; pass ``workers`` for workers as well) or with fewer than
    :data:`MIN_CORES_FOR_WORKERS` usable cores; otherwise one worker per core, at most one per
    :data:`KEYS_PER_WORKER` keys to compile (so never more workers than keys), and none when
    that leaves fewer than 2.

    Args:
        asked: the caller's ``workers`` (None: choose).
        cores: the cores this process may use (:func:`usable_cores`).
        to_compile: the keys the restore index did not cover (compiled, or loaded from Triton's
            disk cache when it has them).
        restored: the keys the restore index covered.
        pulled: the keys whose entries a fleet store gave (not among ``to_compile``).
        sharded: the warm-up runs with a ``torch.distributed`` process group.
    """
    if asked is not None:
        return WorkerChoice(asked, f"{count(asked, 'worker')} (as asked)" if asked > 1 else "in this process (as asked)")
    if to_compile == 0:
        if pulled:
            return WorkerChoice(1, f"in this process (nothing to compile: {pulled} pulled from the store"
                                + (f", {restored} restored)" if restored else ")"))
        return WorkerChoice(1, f"in this process (all {count(restored, 'key')} restored)" if restored
                            else "in this process (no keys)")
    if sharded:
        return WorkerChoice(1, "in this process (the process group's ranks share the compiles)")
    if cores < MIN_CORES_FOR_WORKERS:
        return WorkerChoice(1, f"in this process ({count(cores, 'core')})")
    workers = min(cores, to_compile // KEYS_PER_WORKER)
    if workers < 2:
        return WorkerChoice(1, f"in this process (only {count(to_compile, 'key')} to compile)")
    return WorkerChoice(workers, f"{count(workers, 'worker')} ({count(cores, 'core')}, {count(to_compile, 'key')} "
                        "to compile)")


def _cache_hint(error: BaseException) -> str:
    """What to do when a compile failed writing into Triton's cache folder (read-only: an unusable
    folder was refused before any key, :func:`zerojit.cache.check_cache_folder`; full: Triton's
    write error names no file, so a full disk is told by its errno), else ''."""
    folder = os.path.abspath(cache_dir())
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free there now"
        except OSError:
            free = "its free space unknown"
        return (f" (the disk or quota of Triton's cache folder {cache_dir()!r} is full, {free}: free space, or "
                "point TRITON_CACHE_DIR at another disk; a rerun compiles what failed)")
    filename = getattr(error, "filename", None)
    if not (isinstance(error, OSError) and isinstance(filename, str) and os.path.abspath(filename).startswith(folder)):
        return ""
    return f" (Triton's cache folder {cache_dir()!r} cannot be used: point TRITON_CACHE_DIR at a writable folder)"


def _inputs_hint(error: BaseException) -> str:
    """Which heuristic raised (a wrapped kernel's :data:`zerojit.autotune.HEURISTIC_ATTRIBUTE`) and,
    when the error says a meta tensor was read, the rule: a warm-up launches with ``WarmupTensor``
    inputs on the ``meta`` device, which hold no data; else ''."""
    heuristic = getattr(error, HEURISTIC_ATTRIBUTE, None)
    who = f"heuristic {heuristic!r}" if heuristic is not None else None
    if "meta tensor" in str(error):  # torch: "... cannot be called on meta tensors", "Cannot copy out of meta tensor"
        return (f" ({who or 'the launch path (a check, heuristic or prune function)'} read tensor data: a warm-up "
                "launches with meta tensors (WarmupTensor), which hold none; derive it from shape, dtype or strides)")
    return f" (raised by {who} on the warm-up's inputs)" if who else ""


def _failure_text(error: BaseException) -> str:
    """A failure's text in the report: the error, then what to do about it (:func:`_cache_hint`,
    :func:`_inputs_hint`), for a key, a key listing or a kernel's tuning alike."""
    return f"{type(error).__name__}: {error}{_cache_hint(error)}{_inputs_hint(error)}"


def _primer_jobs(jobs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The primer kernel's warm-up job when this warm-up will load Triton kernels on a GPU and then
    prime the launch path (:func:`zerojit.loading.prime_launch_path`); otherwise none."""
    if active_compile_only() is not None or not any(isinstance(k, TritonJitKernel) for k, _ in jobs):
        return []
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        if loading.primed(torch.cuda.current_device()):
            return []
        primer = loading.primer
        return [(primer, type(primer).CompileKey())]
    except Exception:  # priming is an optimisation; prime_launch_path compiles it otherwise
        return []


def _worker_note(choice: WorkerChoice, stats: WarmupStats) -> str:
    """The choice, and when fewer workers started than it allowed, how many and why: workers
    start one per key missing from the disk cache, so "2 workers (as asked)" beside "1 compiled
    by 1 worker process" reads as a contradiction unless the line says only 1 started."""
    if choice.workers < 2 or stats.workers >= choice.workers:
        return choice.why
    if stats.workers:
        missed = stats.total_compiled + stats.lock_waits  # the keys handed to workers (or compiled here)
        if stats.workers <= missed < choice.workers:  # (prestarted workers may outnumber the keys: no "only")
            return f"{choice.why}; {stats.workers} started: only {count(missed, 'key')} to compile"
        return f"{choice.why}; {stats.workers} started"
    if not stats.compiled:
        return f"{choice.why}; none started: every key was in the disk cache"
    return f"{choice.why}; none started (see the notes)"


def _warm_generic(session: Any, jobs: list, outcomes: list, *, group: Any, progress: bool,
                  store: "WarmupStore | None" = None) -> tuple[list, WarmupStats, "StoreOutcome | None"]:
    """Make and file the generic variants of the warmed ``jobs`` (``outcomes``: their results)
    in ``session``, counted apart from the keys (:mod:`zerojit.generic`): restored from their own
    index (``generic-*.json``) where it covers them, else warm-up jobs of the session (sharded
    over ``group``'s ranks when given), the index then written. Returns the variants filed and
    their stats, and what ``store`` gave (pulled before compiling, as for the keys; None without
    a store); a group that gets none, or an index refused, is a line in those stats'
    ``recovered``."""
    from .precompile import JobOutcome, plan_digest  # see the note at the imports
    from .restore import restore_variants, save_index

    made = generic_plan(jobs, [o.variant if o.error is None else None for o in outcomes])
    gjobs = made.jobs
    target, dry = warm_target()
    digest = plan_digest(gjobs)
    with session.counted_apart() as counts:
        t0 = time.perf_counter()
        restored = {}
        if gjobs and group is None and target is not None:
            restored = restore_variants(gjobs, digest, target, load=not dry, notes=counts.recovered,
                                        kind="generic")
        counts.add_phase("restore", time.perf_counter() - t0)
        counts.restored += len(restored)
        rest = [job for i, job in enumerate(gjobs) if i not in restored]
        pulled = None
        if store is not None and rest:
            t0 = time.perf_counter()
            pulled = store.pull(rest)[0]
            counts.add_phase("store", time.perf_counter() - t0)
        if rest and group is not None:
            from .distributed import sharded_warmup

            ran = iter(sharded_warmup(session, rest, group, progress=progress))
        else:
            ran = iter(session.run(rest, progress=progress, desc="zerojit warm-up: generic variants",
                                   expect_warm=bool(restored)) if rest else [])
    done = [JobOutcome(*restored[i], None) if i in restored else next(ran) for i in range(len(gjobs))]
    if target is not None and len(restored) < len(gjobs):
        save_index(gjobs, [o.variant if o.error is None else None for o in done], digest, target, kind="generic",
                   notes=counts.recovered)
    filed, problems = [], []
    if made.jobs or made.served:  # (a warm-up with no Triton kernel may have no target at all)
        filed, problems = file_variants(made, [o.variant if o.error is None else o.error for o in done],
                                        current_device())
    counts.recovered.extend(made.notes + problems)
    return filed, counts.stats(store_entries=pulled.pulled if pulled is not None else 0), pulled


class JitWarmupRegistry:
    """Collects warm-up requests and compiles their whole key space.

    Kernels are grouped by class (every instance of a kernel class shares its Triton function);
    requests are compared by value, so a 61-layer model registering the same request 61 times
    keeps one.
    """

    def __init__(self) -> None:
        self._kernels: dict[type, Any] = {}
        self._requests: dict[type, dict[Any, dict[str, Any]]] = {}
        self._prestarted: Any = None  # start_workers' pool, for the next warmup()

    @contextlib.contextmanager
    def activate(self) -> Iterator["JitWarmupRegistry"]:
        """Make this the registry that ``register_warmup`` calls reach, inside the block."""
        with registering_into(self):
            yield self

    def register(self, kernel: Any, **request: Any) -> None:
        """Record that ``kernel`` must be warmed for ``request`` (kept once per distinct value).

        Raises:
            TypeError: a request value that cannot be compared by value (names kernel and input).
        """
        group = type(kernel)
        self._kernels.setdefault(group, kernel)
        frozen = tuple(sorted((k, _freeze(v, f"{kernel.name}: request input {k!r}")) for k, v in request.items()))
        self._requests.setdefault(group, {}).setdefault(frozen, dict(request))

    @property
    def kernels(self) -> list[Any]:
        """The registered kernels, in registration order."""
        return list(self._kernels.values())

    def requests(self, kernel: Any) -> list[dict[str, Any]]:
        """The distinct requests registered for ``kernel``'s class."""
        return list(self._requests.get(type(kernel), {}).values())

    def warmup_keys(self, config: Any = None) -> tuple[dict[Any, list[Any]], list[WarmupFailure]]:
        """Every kernel's merged, deduplicated keys (first-seen order), and listing failures.

        ``config`` goes only to ``get_warmup_keys`` methods that declare a ``config`` parameter.
        """
        plan: dict[Any, list[Any]] = {}
        failures: list[WarmupFailure] = []
        for group, kernel in self._kernels.items():
            param = inspect.signature(kernel.get_warmup_keys).parameters.get("config")
            takes_config = param is not None
            keys: dict[Any, None] = {}
            if takes_config and config is None and param.default is inspect.Parameter.empty:
                failures.append(WarmupFailure(kernel.name, None, "its get_warmup_keys needs the model configuration: "
                                              "pass it as warmup(config=...)"))
                plan[kernel] = []
                continue
            for request in self._requests[group].values():
                try:
                    found = kernel.get_warmup_keys(config=config, **request) if takes_config else kernel.get_warmup_keys(**request)
                except Exception as e:
                    failures.append(WarmupFailure(kernel.name, None, _failure_text(e)))
                    continue
                for key in found:
                    keys.setdefault(key, None)
            plan[kernel] = list(keys)
        return plan, failures

    def start_workers(self, config: Any = None, *, workers: int, target: str = "device") -> int:
        """Start the compile worker processes of the next :meth:`warmup` now, so that their boot
        overlaps what the engine does before its warm-up (loading weights, building the KV cache).

        A worker's boot (Python, Triton's import, the kernels' modules; ~0.4 s on the H200 host
        with 16 booting at once) otherwise opens every cold warm-up; so does hashing Triton's
        build on a new Triton install, which this also starts (on a thread). Call it once the key
        space is complete (after binding the KV cache): whether the warm-up will be cold is
        judged on it. The next :meth:`warmup` with more than one worker (asked, or chosen:
        :func:`choose_workers`) uses these workers when they compile for its target into its
        cache folder and its key space is cold there, growing or shrinking them to its own
        number; otherwise it stops them, says why in
        ``stats.recovered`` and leaves them out of ``stats.workers``. Calling this again stops
        the workers it started before; :meth:`stop_workers` stops them; at the latest they stop
        when this process exits (not when the registry is dropped).

        Args:
            config: the model configuration, as for :meth:`warmup` (the key space to serve).
            workers: worker processes to start, at most one per key (1: none, the warm-up will
                compile in-process).
            target: as for :meth:`warmup`: ``"device"`` or this process's target name.

        Returns:
            The number of worker processes being started (each on its own thread: they may not
            exist yet when this returns): 0 when none is needed (``workers=1``, no Triton kernel
            a worker can import, a cache folder this process cannot write (workers could write
            no entry), or this key space was warmed into this cache folder before: its marker or
            restore index is there).

        Raises:
            ValueError: ``workers`` is not a whole number >= 1, or ``target`` names another
                target than the one this process compiles for.
            NoTargetError: there is no GPU and no compile-only target.
            zerojit.cache.CacheFolderError: Triton's cache folder cannot be used.
        """
        from .precompile import start_worker_pool  # see the note at the imports

        try:
            n = operator.index(workers) if not isinstance(workers, bool) else 0
        except TypeError:
            n = 0
        if n < 1:
            raise ValueError(f"start_workers(workers={workers!r}): the number of compile worker processes to start "
                             "is a whole number >= 1")
        self.stop_workers()
        plan, _ = self.warmup_keys(config)
        jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
        compiles = any(isinstance(k, TritonJitKernel) for k in [*self._kernels.values(), *plan])
        _check_target(target, compiles=compiles, caller="start_workers")
        if not compiles:
            return 0
        check_cache_folder("zerojit start_workers")
        self._prestarted = start_worker_pool(jobs, n)
        return len(self._prestarted.threads) if self._prestarted is not None else 0

    def stop_workers(self) -> None:
        """Stop the workers :meth:`start_workers` started, if no warm-up took them (else nothing)."""
        pool, self._prestarted = self._prestarted, None
        if pool is not None:
            pool.finish()

    def warmup(
        self,
        config: Any = None,
        *,
        workers: "int | WorkerChoice | None" = None,
        progress: bool = True,
        raise_on_failure: bool = True,
        target: str = "device",
        bundle: str | os.PathLike | None = None,
        group: Any = None,
        manifest: str | os.PathLike | None = None,
        program_folder: bool = True,
        generic: bool = True,
        learned: bool = True,
        store: "str | WarmupStore | None" = None,
        push: bool = False,
    ) -> WarmupReport:
        """Compile (and on a GPU load) every key of every registered kernel.

        Args:
            config: the model configuration, passed to ``get_warmup_keys(config=...)`` where declared.
            workers: compile worker processes (1: compile in-process, key after key; None, the
                default: :func:`choose_workers` picks from the usable cores and the keys left to
                compile after the restore index, none for a warm cache; ``report.stats.worker_choice``
                says what and why). Workers compile into Triton's disk cache; this process then
                loads every key the way a serial warm-up does, so the report is the same (see
                :mod:`zerojit.precompile`). Workers :meth:`start_workers` started are used when
                they suit (more than one worker). A :class:`WorkerChoice` is taken as made (its
                count, and its words in the report): a caller that changed what it was asked
                (the CLI caps ``--workers`` to the cores) says so there.
            progress: show a tqdm progress bar on stderr where it is a terminal (as tqdm's
                ``disable=None``: a redirected stderr is a log, which a bar's redraws fill with
                carriage returns; a notebook still shows it).
            raise_on_failure: raise :class:`WarmupError` after trying every key if any failed.
            target: recorded in the report (the caller's compile target); also the target a
                ``bundle`` must be for (``"device"``: the GPU's or the compile-only target).
            bundle: a cache bundle (``zerojit bundle export``) to install first; its keys then
                load with zero compiles (:func:`zerojit.cache.import_bundle`).
            group: a ``torch.distributed`` process group: the keys are sharded across its ranks,
                each compiles its share, then every rank loads all (:mod:`zerojit.distributed`).
            manifest: a recording (``zerojit record``, :mod:`zerojit.manifest`): every recorded
                specialization of every recorded ``triton.jit`` function is warmed too, as a
                :class:`~zerojit.manifest.RecordedKernel`; a kernel that cannot be (its source
                changed, no longer importable) is skipped and listed in the
                report's ``skipped``, never failing the warm-up. One recorded with another Triton
                version is refused whole (``ManifestError``).
            program_folder: with ``manifest``, import its kernels' modules with the recorded
                program's folder first on ``sys.path`` (:func:`~zerojit.manifest.warmup_plan`);
                False when the caller has set ``sys.path`` up as the program it then runs will
                have it (``zerojit exec``), so the program's own code is what is warmed.
            generic: also compile and load one *generic* variant per group of warmed keys (same
                dtypes, constexprs, int widths and launch options): every int unspecialized
                (its width kept; a kernel's ``generic_keep`` ints keep their equal-to-one
                class), every pointer without the alignment assumption; filed in
                :mod:`zerojit.generic`'s table, where serving finds a variant for a key the
                warm-up missed. For every Triton kernel (contract, manifest, each autotune
                config, heuristics), in the same session as the keys (workers, restore index);
                a group whose warmed variant is generic already costs nothing. Counted apart
                (``report.generic_variants``; never keys). A group that gets none (its compile
                failed) is a note, not a failure. False: none.
            store: a fleet's shared store of cache entries (:mod:`zerojit.warmup_store`): a URL
                (``redis://``, ``rediss://``: :mod:`zerojit.fleet`, trusting the public keys of
                ``ZEROJIT_STORE_VERIFY_KEYS``) or an opened store. The keys (and generic variants)
                left after the restore index that the cache folder lacks are pulled from it,
                each checked whole, before anything compiles; the rest compile here.
                ``report.store`` says what was pulled, missing and refused (named); a store
                down is a line there, never a failure.
            push: with ``store``: afterwards publish every entry of this warm-up the store
                lacks, signed with ``ZEROJIT_STORE_SIGNING_KEY`` (required).
            learned: also warm the keys that missed after earlier warm-ups into this cache folder
                (the learned-keys file, :mod:`zerojit.learned`) of the kernels this warm-up has
                (registered, or recorded in ``manifest``): through a contract kernel's
                ``CompileKey`` where the miss gave one its key space lacks, else as recorded
                keys. The report counts them (``learned``) and names each record skipped
                (another source, corrupted, failed to compile: ``learned_skipped``; a learned key
                that fails to compile is never a failure). With ``group``, every rank's learned
                keys are gathered, so the ranks keep one key space. False: skip the file.

        Whatever ``workers``, ``bundle`` or ``group``, every compile of an entry missing from the
        disk cache holds that entry's file lock, so processes sharing a cache folder compile each
        entry once. Stale leftovers of killed bundle imports (and, when keys are compiled, of
        Triton writes a kill or a full disk cut short) are removed from the cache folder first
        (:func:`zerojit.cache.remove_leftovers`).

        Raises:
            ValueError: ``workers`` is not a whole number >= 1 (or None).
            WarmupError: some key failed (only after every key was tried); ``.report`` has all.
            zerojit.cache.BundleError: the bundle is for another Triton build, Python or target,
                or is truncated or corrupted (nothing installed, nothing warmed).
            NoTargetError: there is no GPU and no compile-only target: nothing can compile.
            zerojit.cache.CacheFolderError: Triton's cache folder is empty, a file, or cannot be
                created (a bundle's: also not writable).
            TypeError: ``bundle`` is not a path.
            zerojit.manifest.ManifestError: ``manifest`` is truncated, corrupted or no manifest, or
                was recorded with another Triton version; ``UntrustedManifestError``: it carries
                program source (code) and other users can write to the file.
            OSError: ``manifest`` cannot be read.
            ValueError: ``target`` names another target than the one this process compiles for;
                ``push`` without ``store``.
            zerojit.switches.SwitchSettingError: ``ZEROJIT_LEARN``, ``ZEROJIT_RESTORE`` or
                ``ZEROJIT_PRIME_KERNELS`` holds no on/off value.
            zerojit.warmup_store.UnknownStoreError: a store URL of no known scheme;
                ``zerojit.fleet``'s ``StoreError`` (a bad URL, ``redis`` missing) and
                ``SigningError`` (no trusted key; ``push`` without a signing key): all before
                anything is compiled.
        """
        made = workers if isinstance(workers, WorkerChoice) else None
        if made is not None:
            workers = made.workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"warmup(workers={workers!r}): the number of compile worker processes is a whole number "
                             ">= 1 (or None: chosen from the cores and the keys)")
        if push and store is None:
            raise ValueError("warmup(push=True) needs store=: the store to publish the warm-up's entries to")
        check_switches()  # a bad ZEROJIT_LEARN / _RESTORE / _PRIME_KERNELS fails here, before anything runs
        start = time.perf_counter()
        opened = open_store(store, push=push) if store is not None else None
        try:
            return self._warmup(config, opened, workers=workers, made=made, progress=progress,
                                raise_on_failure=raise_on_failure, target=target, bundle=bundle, group=group,
                                manifest=manifest, program_folder=program_folder, generic=generic, learned=learned,
                                start=start)
        finally:
            if opened is not None and isinstance(store, str):  # a store the caller opened stays open
                opened.close()

    def _warmup(self, config: Any, store: "WarmupStore | None", *, workers: "int | None", made: "WorkerChoice | None",
                progress: bool, raise_on_failure: bool, target: str, bundle: Any, group: Any, manifest: Any,
                program_folder: bool, generic: bool, learned: bool, start: float) -> WarmupReport:
        """:meth:`warmup`'s body, ``store`` opened."""
        from .precompile import JobOutcome, WarmupSession, plan_digest  # see the note at the imports
        from .restore import cache_folder_warnings, restore_variants, save_index

        skipped: list = []
        manifest_phases: dict[str, float] = {}
        if manifest is not None:  # reading it imports the recorded functions' modules (torch, a library...)
            t0 = time.perf_counter()
            recorded, skipped, import_seconds = warmup_plan(read_manifest(manifest, to_run=True),
                                                            where=os.fspath(manifest),
                                                            program_folder=program_folder)
            for kernel in recorded:
                self.register(kernel)
            manifest_phases = {"manifest": time.perf_counter() - t0 - import_seconds, "modules": import_seconds}
        compiles = any(isinstance(k, TritonJitKernel) for k in self._kernels.values())
        _check_target(target, compiles=compiles)
        imported = None
        if bundle is not None:
            imported = import_bundle(bundle, target=None if target == "device" else target)
        if compiles:
            check_cache_folder("zerojit warm-up")
        plan, failures = self.warmup_keys(config)
        learned_plan = _learned.plan(plan, group=group) if learned and compiles else None
        learned_jobs = learned_plan.apply(plan) if learned_plan is not None else set()
        jobs = [(kernel, key) for kernel, keys in plan.items() for key in keys]
        extra = _primer_jobs(jobs)  # on a GPU: the launch-path primer, compiled with the rest
        # Warm start: what zerojit's restore index covers skips Triton's lookup (zerojit.restore).
        # Not with a process group: every rank must run the same jobs through the sharding.
        restore_target, dry = warm_target()
        digest = plan_digest(jobs)
        restored: dict = {}
        # said in recovered: an index that is there but refused (another Triton, damaged, ...), and a
        # cache folder that other users can write to
        refused: list[str] = cache_folder_warnings() if compiles else []
        # from here on, for the process's lifetime, Triton's cache records digests and checks them
        integrity.install_checked_manager()
        with integrity.collecting() as damaged:  # each damaged cache file found, named once in recovered
            t0 = time.perf_counter()
            if group is None and restore_target is not None:
                restored = restore_variants(jobs, digest, restore_target, load=not dry, notes=refused)
                if extra and restore_variants(extra, plan_digest(extra), restore_target, load=not dry, notes=refused):
                    extra = []  # the primer has an index of its own: it is not part of every warm-up
            restore_seconds = time.perf_counter() - t0
            imports_seconds = None
            if restored:  # no warm-up launch ran: pay the launch path's lazy imports here, once per process
                t0 = time.perf_counter()
                import_launch_path_modules()
                imports_seconds = time.perf_counter() - t0
            rest = [job for i, job in enumerate(jobs) if i not in restored] + extra
            pulled: StoreOutcome | None = None
            got: set[int] = set()  # rest's jobs whose entries the store gave: loaded from disk, not compiled
            if store is not None:
                t0 = time.perf_counter()
                pulled, got = store.pull(rest) if compiles and rest else (StoreOutcome(store.name), set())
                store_seconds = time.perf_counter() - t0
            if compiles:  # killed imports' and Triton writes' stale leftovers (entry folders: only when compiling)
                remove_leftovers(entries=bool(rest))
            choice = made or choose_workers(workers, cores=usable_cores(), to_compile=len(rest) - len(got),
                                            restored=len(restored), pulled=len(got), sharded=group is not None)

            prestarted, self._prestarted = self._prestarted, None  # start_workers': used or stopped by the session
            with WarmupSession(workers=choice.workers, pool=prestarted) as session:
                session.counts.recovered.extend(refused)
                if group is not None:
                    from .distributed import sharded_warmup

                    ran = sharded_warmup(session, rest, group, progress=progress)
                elif rest:
                    ran = session.run(rest, progress=progress,
                                      expect_warm=imported is not None or bool(restored) or bool(got))
                else:
                    ran = []
                ran_iter = iter(ran)
                outcomes = [JobOutcome(*restored[i], None) if i in restored else next(ran_iter)
                            for i in range(len(jobs))]
                primer = list(ran_iter)
                # generic variants: a second sweep of this session, once the keys' variants are known
                t0 = time.perf_counter()
                generic_variants, generic_stats, generic_pulled = _warm_generic(
                    session, jobs, outcomes, group=group, progress=progress,
                    store=store if pulled is not None and not pulled.down else None) if generic else ([], None, None)
                generic_seconds = time.perf_counter() - t0 if generic else None
                if generic_pulled is not None:
                    pulled = pulled.add(generic_pulled)
        session.counts.recovered.extend(damaged)
        session.counts.recovered.extend(take_damaged_notes())  # remembered build keys, compile seconds
        if restore_target is not None:
            if len(restored) < len(jobs):
                save_index(jobs, [o.variant if o.error is None else None for o in outcomes], digest, restore_target,
                           notes=session.counts.recovered)
            if extra:
                save_index(extra, [o.variant if o.error is None else None for o in primer], plan_digest(extra),
                           restore_target, notes=session.counts.recovered)

        per_kernel: dict[Any, list] = {kernel: [] for kernel in plan}
        cannot_run: list = []  # (kernel, TunedKey, error): an autotune config that cannot run here
        for (kernel, key), outcome in zip(jobs, outcomes):
            if outcome.error is not None:
                error = outcome.error
                if isinstance(key, TunedKey) and config_cannot_run(error):
                    cannot_run.append((kernel, key, error))
                    continue
                text = _failure_text(error)
                if learned_plan is not None and learned_plan.failed(kernel, key, error, text):
                    continue  # a learned key is never fatal: skipped, named (learned_skipped)
                failures.append(WarmupFailure(kernel.name, key, text))
            else:
                per_kernel[kernel].append((key, outcome.variant, outcome.seconds))
        skipped_configs: dict[Any, list[str]] = {}
        for kernel, key, error in cannot_run:  # as Triton's autotuner skips it, where another config serves the key
            if any(isinstance(k, TunedKey) and k.key == key.key for k, _, _ in per_kernel[kernel]):
                skipped_configs.setdefault(kernel, []).append(f"{key}: {type(error).__name__}: {error}")
            else:
                failures.append(WarmupFailure(kernel.name, key, f"{type(error).__name__}: {error} (no config of "
                                              "this key compiled)"))
        tuning: dict[Any, Any] = {}  # kernel -> what its warmed keys leave untuned (a wrapped kernel's)
        for kernel, done in per_kernel.items():  # e.g. a wrapped kernel's tuning table (zerojit.autotune)
            try:
                tuning[kernel] = kernel.finish_warmup([k for k, _, _ in done])
            except Exception as e:
                failures.append(WarmupFailure(kernel.name, None, _failure_text(e), stage="finish"))
        kernels = tuple(
            KernelWarmup(
                kernel=kernel.name,
                keys=tuple(k for k, _, _ in done),
                variants=tuple(v for _, v, _ in done),
                seconds=sum(s for _, _, s in done),
                key_seconds=tuple(s for _, _, s in done),
                tuning=tuning.get(kernel),
                skipped_configs=tuple(skipped_configs.get(kernel, ())),
            )
            for kernel, done in per_kernel.items()
        )
        phases = {**manifest_phases, "restore": restore_seconds,
                  **({"imports": imports_seconds} if imports_seconds is not None else {}),
                  **({"store": store_seconds} if pulled is not None else {}), **session.counts.phases,
                  **({"generic": generic_seconds} if generic_seconds is not None else {})}
        if any(getattr(v, "loaded", False) for k in kernels for v in k.variants):
            t0 = time.perf_counter()
            loading.prime_launch_path()
            if any(isinstance(k, RecordedKernel) for k in plan):  # its program launches raw: prime that path too
                loading.prime_raw_launch_path()
            phases["prime"] = time.perf_counter() - t0
        if not launch_priming.priming_disabled():  # each warmed key's launch path, dry (after tables and memos)
            t0 = time.perf_counter()
            for kernel, done in per_kernel.items():
                if not isinstance(kernel, RecordedKernel):  # a recorded program launches raw (primed above)
                    launch_priming.prime_kernel(kernel, [k for k, _, _ in done])
            phases["prime_kernels"] = time.perf_counter() - t0
        stats = session.counts.stats(bundle_entries=len(imported.installed) if imported else 0,
                                     store_entries=pulled.pulled - (generic_pulled.pulled if generic_pulled else 0)
                                     if pulled is not None else 0,
                                     restored=len(restored) + session.counts.restored,
                                     phases=phases)
        stats = dataclasses.replace(stats, worker_choice=_worker_note(choice, stats))
        if target == "device":  # name what was really compiled for
            compile_only_driver = active_compile_only()
            target = compile_only_driver.target_name if compile_only_driver is not None else target
        warmed_learned = [(kernel, key) for kernel, done in per_kernel.items() for key, _, _ in done
                          if (id(kernel), key) in learned_jobs]
        report = WarmupReport(kernels=kernels, failures=tuple(failures), seconds=time.perf_counter() - start,
                              target=target, stats=stats, skipped=tuple(skipped), generic=tuple(generic_variants),
                              generic_stats=generic_stats, learned=len(warmed_learned),
                              learned_through_keys=sum(not isinstance(k, RecordedKernel) for k, _ in warmed_learned),
                              learned_skipped=tuple(learned_plan.skipped) if learned_plan is not None else (),
                              learned_file=learned_plan.path if learned_plan is not None else None,
                              manifest=os.fspath(manifest) if manifest is not None else None,
                              store=pulled)
        if store is not None:  # publish before the listeners hear of it: a push compiles nothing
            report = dataclasses.replace(report, store=store.push(report, pulled))

        # From here on a compile is a runtime compile: the listeners (the runtime monitor, the
        # audit) hear of this warm-up; see add_warmup_listener.
        _warmup_complete(report)

        if failures and raise_on_failure:
            raise WarmupError(report)
        return report
