"""How :meth:`~zerojit.registry.JitWarmupRegistry.warmup` compiles: worker processes, file locks.

Triton's compile front end holds the GIL, so compile threads barely scale; worker *processes* do.
A warm-up runs its keys through a :class:`WarmupSession`, in two sweeps over the code path a
serial warm-up uses (``kernel.compile(key)``: a fake launch through the kernel's launcher):

1. Each key's warm-up launch misses Triton's in-process cache; the session's ``jit_cache_hook``
   (chained on top of any other) notes the compile request, and Triton's ``compile`` then looks
   the entry up on disk through the session's cache manager (Triton's own, subclassed for the
   session's jobs only). A hit goes through untouched. A miss, when ``workers > 1``, is shipped
   to a worker process (the ``triton.jit`` function's module and name, signature, constexprs,
   attributes and options) and this launch is aborted before anything is cached. On a GPU with
   Triton 3.6 the kernel's launcher module (a C extension Triton builds per signature with a C
   compiler, at load time) is shipped too when it is missing, so its build also runs in a worker
   (launcher builds first: they are the longest requests and many keys wait for each). A
   launcher needs no build key, so on a new Triton install they are queued while the key is
   still hashed (:meth:`WarmupSession._launchers_while_hashing`); one remembered for this install
   (:func:`zerojit.cache.remembered_launcher`) is copied into the cache folder instead. From
   Triton 3.7 on there are no launcher modules to build
   (:data:`zerojit.triton_compat.BUILDS_LAUNCHERS`): none of this runs.
2. As soon as the workers have written a deferred key's entry (and its launcher), this process
   loads it into the in-process cache under the key Triton's hook asked for
   (:class:`_ShippedLoader`: the ``CompiledKernel`` Triton's disk lookup would build, the
   specialization from Triton's binder on the warm-up launch's own arguments), while the
   workers go on. A key that cannot be loaded that way runs its warm-up launch again, which
   finds the entry on disk, exactly as a serial warm-up does over a warm disk cache.

The results equal a serial warm-up's: the same Triton keys, specializations and compiled
kernels, field for field (tests compare them). Worker processes (``_compile_worker.py``) compile
for the parent's exact target with zerojit's compile-only driver (never touching a GPU), into the
parent's cache folder. On Linux they are forked from this process (:func:`worker_start_method`):
ready in milliseconds, with Triton and the kernels' modules imported, all of them at once as one
tree (this process forks one, which forks the others: :func:`zerojit._compile_worker.fork_workers`);
else (or with ``ZEROJIT_WORKER_START=spawn``, or once forking got slow: a large process) new
interpreters that import only Triton and the kernels' modules (no torch unless a module needs
it). They start with the warm-up, before its sweep, unless a marker file says this key space was
warmed into this cache folder before (a warm start then starts none), booting while this process
hashes Triton's build for its cache keys (:func:`_prepare_while_hashing`); or earlier, by :func:`start_worker_pool`
(:meth:`~zerojit.registry.JitWarmupRegistry.start_workers`), while the engine does other work.
Requests go out launchers first, then longest first (:class:`_TaskQueue`: on what each entry took
in an earlier warm-up on this install, else on its kernel's mean so far).
``WarmupStats.timeline`` records each worker's boot and requests.

Across processes: every compile of a missing entry (in a worker or in-process) holds the entry's
file lock (:func:`zerojit.cache.entry_lock`), and the entry is looked up again inside it, so N
processes warming one key space into one cache folder compile each entry once; the others wait
and load it. Triton writes each file atomically and an entry's group file last, so no reader
ever sees a partial entry.

A function of the program's ``__main__`` rebuilt from a manifest's ``program_source``
(:mod:`zerojit.script_kernels`) is sent with it, and the worker rebuilds it. Anything a worker
cannot do (another function defined in ``__main__`` or in a function, an argument
that does not pickle, a crash, a compile error) is done again in-process by the second sweep, so
a failing key fails with the same error as in a serial warm-up; ``WarmupStats.recovered`` says
what happened. But for a compile that stops answering (:mod:`zerojit.watchdog`): its worker is
killed with its process group and the request tried once more in another worker; hung again,
its keys fail, never compiled in this process (:meth:`_WorkerPool._hung`).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import hashlib
import io
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import _compile_worker as _wire
from . import script_kernels as _script
from . import triton_compat as _tc
from . import watchdog as _watchdog
from .cache import (cache_dir, entry_lock, entry_lock_path, hold_lock, install_remembered_launcher, known_triton_key,
                    launcher_lock_path, lock_holder_hint, remember_compile_seconds, remember_launcher,
                    remembered_compile_seconds, use_fast_triton_key)
from .compile_only import active_compile_only, warm_target
from .integrity import checked_manager_class, read_group_file
from .kernel import _DEVICE_CACHE_LOCK, _WARMUP_SINK, CompiledVariant, TritonJitKernel
from .reports import WarmupStats, count
from .restore import index_path, install, shared_launchers
from .specialization import bind, spec_classes

__all__ = ["WarmupSession", "JobOutcome", "start_worker_pool"]

_SESSION: contextvars.ContextVar["WarmupSession | None"] = contextvars.ContextVar("zerojit_warmup_session", default=None)
_JOB: contextvars.ContextVar["_JobState | None"] = contextvars.ContextVar("zerojit_warmup_job", default=None)
_WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compile_worker.py")


class _Deferred(BaseException):
    """Raised by the session's hook to abort a warm-up launch whose compile went to a worker.

    A BaseException, so a kernel's ``except Exception`` cannot swallow it."""


class _SignatureSeen(BaseException):
    """Raised by the session's hook to end a warm-up launch of :meth:`WarmupSession._launchers_while_hashing`
    once Triton has told it the signature (before any cache key, so before Triton's build key)."""


_SIGNATURE_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("zerojit_signature_only", default=False)


@dataclass
class _JobState:
    locks: list = field(default_factory=list)  # entry locks held until the key is done
    entries: list = field(default_factory=list)  # entries sent to workers
    pending: Any = None  # (jit function, compile request, Triton key) of the in-process miss being looked up
    launcher: Any = None  # (signature types, launcher key) when its launcher is missing
    shipped: Any = None  # _Shipped: what loading a worker's result needs
    kernel: str = ""  # the zerojit kernel's name (for what the report says about a worker)
    key: Any = None  # the key (for what a wait for another process's lock says)
    expected: Any = None  # the token of watchdog.expected_seconds, set for an in-process compile


def _manager_class(session: "WarmupSession", base: type) -> type:
    """Triton's cache manager class, with ``get_group`` (Triton's disk lookup in ``compile``)
    reporting to ``session`` for its own warm-up jobs; everything else is ``base``'s (a
    :func:`zerojit.integrity.checked_manager_class`: a damaged entry is a miss)."""
    class ZerojitCacheManager(base):  # type: ignore[misc, valid-type]
        _zerojit_base = base  # the manager it stands in for (zerojit.restore checks it)

        def __init__(self, key: str, *args: Any, **kwargs: Any) -> None:
            super().__init__(key, *args, **kwargs)
            self._zerojit_key = key  # the entry's folder name

        def get_group(self, filename: str) -> Any:
            group = super().get_group(filename)
            if _SESSION.get() is session and not session._closed:
                job = _JOB.get()
                if job is not None and job.pending is not None and filename == _tc.metadata_file_name(job.pending[0]):
                    return session._on_lookup(self, base, filename, group, job)
            return group

    return ZerojitCacheManager


@dataclass(frozen=True)
class _Shipped:
    """A deferred key's compile as Triton asked for it: enough to load the worker's result into
    the in-process cache without running the key's warm-up launch again."""
    jit_fn: Any
    triton_key: str  # the key of Triton's in-process cache
    group_file: str  # the entry's group file, which the worker writes last
    src: tuple  # ASTSource's (signature, constants, attrs)
    launch: list  # the warm-up launch's [(None, arguments by parameter name)] (kernel._warmup_launch)


@dataclass(frozen=True)
class JobOutcome:
    """One key's result: its compiled variant, or the error it raised, and the seconds spent on it
    (in this process and in workers)."""
    variant: Any
    seconds: float
    error: BaseException | None


@dataclass(frozen=True)
class _Request:
    function: str  # "module:qualname" of the triton.jit function
    entry: str  # Triton's cache entry folder
    payload: bytes | None  # pickle of (signature, constexprs, attrs); None: cannot be shipped
    options: dict
    target: Any
    kernel: str = ""  # the zerojit kernel's name
    script: dict | None = None  # a __main__ kernel's program_source, which the worker rebuilds it from


@dataclass
class _Counts:
    """The session's running tally of :class:`~zerojit.registry.WarmupStats`' fields (mutable,
    touched under the session's lock); :meth:`stats` freezes it."""
    compiled: int = 0
    worker_compiled: int = 0
    disk_loads: int = 0
    lock_waits: int = 0
    workers: int = 0
    worker_launchers: int = 0
    launchers_remembered: int = 0
    recovered: list = field(default_factory=list)
    restored: int = 0  # restored from other ranks' records (zerojit.distributed)
    phases: dict = field(default_factory=dict)  # phase -> seconds (summed over runs)
    worker_seconds: float = 0.0
    worker_cpu_seconds: float = 0.0
    worker_stages: dict = field(default_factory=dict)  # Triton's compile stage -> seconds, over the workers
    timeline: list = field(default_factory=list)  # (what, worker, start, end), perf_counter seconds
    origin: float = field(default_factory=time.perf_counter)  # the timeline's zero: the session's start

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def stats(self, *, phases: dict | None = None, **more: Any) -> WarmupStats:
        """These counts as a :class:`WarmupStats`; ``more``: its fields a session does not count;
        ``phases``: every phase's seconds, in order (default: the session's own)."""
        fields = {**dataclasses.asdict(self), "recovered": _tally(self.recovered), **more}
        del fields["origin"]
        fields["worker_stages"] = tuple((stage, round(s, 6)) for stage, s in self.worker_stages.items())
        fields["timeline"] = tuple((what, worker, round(start - self.origin, 6), round(end - self.origin, 6))
                                   for what, worker, start, end in sorted(self.timeline, key=lambda t: t[2]))
        fields["phases"] = tuple((name, round(s, 6)) for name, s in (self.phases if phases is None else phases).items())
        return WarmupStats(**fields)


def _tally(messages: Sequence[str]) -> tuple[str, ...]:
    """``messages`` in first-seen order, each once, with how many keys repeated it."""
    seen: dict[str, int] = {}
    for m in messages:
        seen[m] = seen.get(m, 0) + 1
    return tuple(m if n == 1 else f"{m} [{n} keys]" for m, n in seen.items())


def plan_digest(jobs: Sequence[tuple[Any, Any]]) -> str:
    """A digest of a warm-up's jobs (kernel names and keys, in order)."""
    h = hashlib.sha256()
    for kernel, key in jobs:
        h.update(f"{kernel.name}\0{key!r}\n".encode())
    return h.hexdigest()


def _marker(jobs: Sequence[tuple[Any, Any]], target: Any) -> str:
    """The file that says this key space was warmed into this cache folder before (by this Triton
    version: several versions sharing a cache folder each warm their own entries)."""
    return os.path.join(cache_dir(), ".zerojit",
                        f"warmed-{plan_digest(jobs)[:32]}-{target.backend}-{target.arch}-triton{_tc.TRITON_VERSION}")


class WarmupSession:
    """Runs warm-up jobs ``(kernel, key)``: in-process loading, worker-process compiling, locks.

    Use as a context manager (it chains a ``jit_cache_hook`` and a compilation listener onto
    Triton's, for this context only) and call :meth:`run` once or more. ``counts`` accumulates
    what happened (see :class:`zerojit.registry.WarmupStats`).

    Args:
        workers: compile worker processes (and in-process threads for the sweeps); ``<= 1``
            compiles in-process, one key after the other.
        pool: workers started ahead by :func:`start_worker_pool`; the first cold :meth:`run`
            uses them when they compile for its target into its cache folder (and ``workers >
            1``), else they are stopped.
    """

    def __init__(self, *, workers: int | None = 1, pool: "_WorkerPool | None" = None) -> None:
        # a bad ZEROJIT_COMPILE_STALL_S / _WALL_S, ZEROJIT_WORKER_START or ZEROJIT_WORKER_NICE fails here,
        # before anything runs (also where no worker would start: a setting is checked where it is given)
        _watchdog.stall_seconds()
        _watchdog.wall_floor_seconds()
        worker_start_method()
        worker_nice()
        self.workers = max(int(workers or 1), 1)
        self.counts = pool.counts if pool is not None else _Counts()
        self.counts.origin = time.perf_counter()  # a prestarted pool's boot lies before: negative times
        self._lock = pool.lock if pool is not None else threading.Lock()
        self._prestarted = pool  # adopted by the first cold run() it suits, else stopped
        self._live: list[_WorkerPool] = [pool] if pool is not None else []  # killed if a run raises
        self._pool: _WorkerPool | None = None
        self._deferring = False
        self._launchers: dict[tuple, tuple[str, bool]] = {}
        self._launcher_tasks: dict[tuple, str] = {}  # signature types -> its launcher's pool task
        self._modules: list[str] = []  # the modules that define the jobs' Triton functions
        self._remembered: dict[str, float] | None = None  # remembered_compile_seconds(), at the first in-process compile

    # ------------------------------------------------------------------ hooks
    def __enter__(self) -> "WarmupSession":
        _tc.watch_toolchain()  # in-process ptxas runs: the stall rule too
        # Triton 3.6 on a GPU: launcher modules to build in workers (none from 3.7 on)
        self._need_launchers = active_compile_only() is None and self.workers > 1 and _tc.cuda_launchers_in_use()
        self._prev_hook = _tc.get_cache_hook()
        self._prev_listener = _tc.get_compile_listener()
        session = self

        def jit_cache_hook(**kw: Any) -> Any:
            result = session._prev_hook(**kw) if session._prev_hook is not None else None
            if not result and _SESSION.get() is session and not session._closed:
                session._on_miss(**kw)
            return result

        def listener(**kw: Any) -> None:
            if session._prev_listener is not None:
                session._prev_listener(**kw)
            if _SESSION.get() is session and not session._closed:
                with session._lock:
                    if kw.get("cache_hit"):
                        session.counts.disk_loads += 1
                    else:
                        session.counts.compiled += 1

        self._closed = False
        self._hook, self._listener = jit_cache_hook, listener
        self._manager = _manager_class(self, checked_manager_class(_tc.cache_manager_class()
                                                                   or _tc.default_cache_manager))
        _tc.set_cache_hook(jit_cache_hook)
        _tc.set_compile_listener(listener)
        self._restore_manager = _tc.set_cache_manager_class(self._manager)
        self._token = _SESSION.set(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _SESSION.reset(self._token)
        self._closed = True  # a hook left under another one's link becomes a pass-through
        if _tc.get_cache_hook() is self._hook:
            _tc.set_cache_hook(self._prev_hook)
        if _tc.get_compile_listener() is self._listener:
            _tc.set_compile_listener(self._prev_listener)
        self._restore_manager()  # unless another manager was set on top meanwhile
        if exc[0] is not None:  # leaving on an exception (Ctrl-C): no compile is waited for
            for pool in self._live:
                pool.kill()
        elif self._pool is not None:  # a run that raised
            self._finish(self._pool)
        if exc[0] is None and self._prestarted is not None:  # no run needed them (every key restored)
            self._drop(self._prestarted)
        self._pool = self._prestarted = None
        self._live = []

    @contextlib.contextmanager
    def counted_apart(self) -> Iterator[_Counts]:
        """Count what the session runs inside the block in a tally of its own (yielded), not in
        ``counts``: the warm-up's generic variants (:mod:`zerojit.generic`), which are no keys."""
        saved = self.counts
        self.counts = _Counts(origin=saved.origin)
        try:
            yield self.counts
        finally:
            self.counts = saved

    def _on_miss(self, *, fn: Any, compile: dict, key: Any = None, **_: Any) -> None:
        """Triton's in-process cache missed: note the request; the disk lookup that follows decides."""
        request = _tc.hook_compile_request(compile)
        if _SIGNATURE_ONLY.get():
            launcher = self._launcher_missing(request.signature)
            if launcher is not None and self._pool is not None:
                self._submit_launcher(self._pool, *launcher)
            raise _SignatureSeen()
        job = _JOB.get()
        if job is None:  # a launch outside our jobs (another thread's code, in this context)
            return
        job.pending = (_tc.hook_jit_function(fn), compile, key)
        job.launcher = None
        if self._deferring and self._need_launchers:
            job.launcher = self._launcher_missing(request.signature)

    def _on_lookup(self, manager: Any, base: type, filename: str, group: Any, job: "_JobState") -> Any:
        """Triton's ``compile`` looked up its entry on disk (``group``): defer to a worker, or lock
        the entry for an in-process compile, or let the hit through."""
        jit_fn, compile, triton_key = job.pending
        job.pending = None
        request = _tc.hook_compile_request(compile)
        present = bool(group) and filename in group
        entry = manager._zerojit_key
        if self._deferring and (not present or job.launcher is not None):
            shippable = self._shippable(jit_fn, compile, entry, job.kernel)
            pool = self._ensure_pool(shippable.target) if shippable is not None else None
            if pool is not None:
                if not present:
                    pool.submit_compile(shippable, entry_lock_path(entry))  # a path: no FileLock built per key
                    job.entries.append(entry)
                if job.launcher is not None:
                    self._submit_launcher(pool, *job.launcher)
                with self._lock:  # loading this key also waits for its launcher, whoever asked for it
                    task = self._launcher_tasks.get(tuple(request.signature.values()))
                if task is not None:
                    job.entries.append(task)

                launch = _WARMUP_SINK.get()
                if isinstance(triton_key, str) and launch:
                    job.shipped = _Shipped(jit_fn, triton_key,
                                           os.path.join(manager.cache_dir, _tc.group_file_name(filename)),
                                           (request.signature, request.constants, request.attrs), launch)
                raise _Deferred()
        if present:
            return group
        # compile in-process, holding the entry's lock until this key is done; another process
        # may have compiled it meanwhile (then this is a disk hit)
        if self._remembered is None:
            self._remembered = remembered_compile_seconds()
        lock = entry_lock(entry)
        # another process's hold is waited for as a worker waits for it: at most the wall limit
        # of this entry's compile (a holder stopped with Ctrl-Z would otherwise stop this warm-up)
        wall = _watchdog.wall_limit(self._remembered.get(entry))
        path = lock.lock_file
        waited = hold_lock(lock, wall=lambda: wall, notice=lambda wall: (
            f"zerojit: kernel {job.kernel!r} key {job.key!r}: waiting for another process's lock on its cache entry "
            f"({path}); a warm-up gives up on the key after {wall:.0f} s"))
        if waited is not None:
            raise _watchdog.CompileHung(
                f"another process held the lock on its cache entry {entry} for {waited:.1f} s, the wall-time limit "
                f"of its compile ({wall:.0f} s: {_watchdog.WALL_ENV}, or 10x its last compile); lock file {path}; "
                f"not compiled: {lock_holder_hint(path)}, then warm up again")
        job.locks.append(lock)
        token = _watchdog.expected_seconds.set(self._remembered.get(entry))  # the wall limit of its ptxas
        if job.expected is None:  # the first one: _attempt's reset of it undoes every later one too
            job.expected = token
        group = base.get_group(manager, filename)
        if group and filename in group:  # missing before the lock: another process compiled it meanwhile
            with self._lock:
                self.counts.lock_waits += 1
        return group

    def _submit_launcher(self, pool: "_WorkerPool", types: tuple, key: str) -> None:
        """Have a worker build the launcher of signature ``types``; the keys with that signature
        then wait for it before they load."""
        pool.submit_launcher(types, key, launcher_lock_path(key))
        with self._lock:
            self._launchers[types] = (key, True)  # on disk once the pool drains
            self._launcher_tasks[types] = f"launcher:{key}"

    def _launchers_while_hashing(self, jobs: Sequence[tuple[Any, Any]], hashing: Callable[[], bool]) -> None:
        """While Triton's build key is still being hashed (a new Triton install), run the jobs'
        warm-up launches only as far as Triton's signature, and queue the launchers they miss.

        A launcher's build needs no build key (its cache key hashes only its source), so the
        workers build them while the key is hashed instead of idling, and the compiles that
        follow are not queued behind them. Triton's hook learns the signature before Triton
        computes any cache key; the launch ends there, with nothing compiled or cached. Stops
        as soon as the key is there (the sweep finds the rest); errors are the sweep's to report.
        """
        if not (self._need_launchers and self._pool is not None):
            return
        token = _SIGNATURE_ONLY.set(True)
        try:
            for kernel, key in jobs:
                if not hashing():
                    return
                if isinstance(kernel, TritonJitKernel):
                    try:
                        kernel.compile(key)
                    except _SignatureSeen:
                        pass
                    except Exception:
                        pass
        finally:
            _SIGNATURE_ONLY.reset(token)

    def _shippable(self, jit_fn: Any, compile: dict, entry: str, kernel: str = "") -> "_Request | None":
        """The compile request a worker can run, or None (a closure, ``__main__``, unpicklable;
        noted once per function in ``recovered``)."""
        function = f"{jit_fn.fn.__module__}:{jit_fn.fn.__qualname__}"
        script = _script.program_source_of(jit_fn)
        if not _importable(jit_fn.fn) and script is None:
            where = "in __main__" if jit_fn.fn.__module__ == "__main__" else "inside a function"
            self._note(f"{function} is defined {where}, where a worker cannot import it; compiled in this process")
            return None
        if _tc.stages_hook_fingerprint() is not None:  # Triton 3.7+: a worker cannot run the hook
            self._note(f"{function}: a stages-inspection hook is set (its custom pipeline is part of Triton's keys, "
                       "and a worker cannot run the hook); compiled in this process")
            return None
        request = _tc.hook_compile_request(compile)
        try:
            payload = pickle.dumps((request.signature, request.constants, request.attrs),
                                   protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            self._note(f"{function}: its compile arguments do not pickle ({type(e).__name__}: {e}); compiled in this process")
            return None
        target = _tc.device_cache(jit_fn, request.device).target
        return _Request(function, entry, payload, _tc.hook_compile_options(compile), target, kernel, script)

    def _finish(self, pool: "_WorkerPool") -> dict[str, float]:
        """Stop the workers this warm-up used (``workers`` counts them); their seconds per entry.

        The launchers it was asked to build are forgotten as tasks (a later sweep of this session
        has a pool of its own, which never saw them: a key waiting for one would wait for ever)
        and as states (that sweep looks for them on disk again, and builds one that is not)."""
        seconds = pool.finish()
        with self._lock:
            self.counts.workers += pool.started
            for types in self._launcher_tasks:
                self._launchers.pop(types, None)
            self._launcher_tasks.clear()
        return seconds

    def _drop(self, pool: "_WorkerPool") -> None:
        """Stop workers :func:`start_worker_pool` started that this warm-up has no use for; they
        stay out of ``workers`` and one ``recovered`` line says why."""
        pool.finish()
        if self.workers <= 1:
            why = f"this warm-up compiles in-process (workers={self.workers})"
        elif not pool.serves(warm_target()[0]):
            why = "they compile for another target or cache folder than this warm-up"
        else:
            why = "this key space needs no compile here (a warm start)"
        with self._lock:
            self.counts.recovered.append(f"{count(pool.started, 'worker process', 'worker processes')} that "
                                         f"start_workers started stopped unused: {why}")

    def _note(self, message: str) -> None:
        with self._lock:
            self.counts.recovered.append(message)

    def _launcher_missing(self, signature: dict) -> tuple[tuple, str] | None:
        """(signature types, launcher key) of this kernel's CUDA launcher when it is not on disk
        (Triton 3.6; never from 3.7 on, which builds no launcher modules)."""
        types = tuple(signature.values())
        with self._lock:
            state = self._launchers.get(types)
        if state is None:
            key = _tc.launcher_key(types)
            if key is None:
                state = ("", True)  # none to build ahead (3.7+, or a tensor descriptor: built at load)
            else:
                on_disk = _tc.cache_manager(key).get_file(_tc.launcher_file()) is not None
                remembered = not on_disk and install_remembered_launcher(key)
                state = (key, on_disk or remembered)
                if remembered:
                    with self._lock:
                        self.counts.launchers_remembered += 1
            with self._lock:
                self._launchers[types] = state
        key, on_disk = state
        return None if on_disk else (types, key)

    def _ensure_pool(self, target: Any, *, key_later: bool = False) -> "_WorkerPool | None":
        """The session's worker pool for ``target`` (started on first use), or None when it was
        started for another target or the cache folder cannot be written. ``key_later``: the caller hands Triton's build key to the
        pool later (:meth:`_WorkerPool.set_triton_key`); workers boot meanwhile."""
        with self._lock:
            fresh = self._pool is None
            if fresh:
                if not _writable_cache():
                    return None
                self._pool = _WorkerPool(self.workers, target, self.counts, self._lock, self._modules)
                self._live.append(self._pool)
            pool = self._pool
        if fresh and not key_later:  # not under the lock: the pool shares it, and set_triton_key takes it
            pool.set_triton_key(use_fast_triton_key())
        return pool if pool.target == target else None

    # ------------------------------------------------------------------ sweeps
    def _attempt(self, kernel: Any, key: Any) -> tuple[str, Any, float, _JobState]:
        state = _JobState(kernel=getattr(kernel, "name", ""), key=key)
        token = _JOB.set(state)
        start = time.perf_counter()
        try:
            return "ok", kernel.compile(key), time.perf_counter() - start, state
        except _Deferred:
            return "deferred", None, time.perf_counter() - start, state
        except _watchdog.CompileHung as e:  # its ptxas stopped answering: say which key
            return "error", _watchdog.CompileHung(f"kernel {state.kernel!r} key {key!r}: {e}"), \
                time.perf_counter() - start, state
        except Exception as e:  # reported with the others, never hidden
            return "error", e, time.perf_counter() - start, state
        finally:
            if state.expected is not None:
                _watchdog.expected_seconds.reset(state.expected)
            _JOB.reset(token)
            for lock in state.locks:
                lock.release()

    def _sweep(self, jobs: Sequence[tuple[Any, Any]], indices: Sequence[int], done: Callable) -> None:
        """Run ``jobs[i]`` for ``i`` in ``indices``: Triton kernels one after the other in this thread
        (their compiles go to worker processes; loading is GIL-bound, threads only slow it), other
        kernels' own ``compile`` on up to ``workers`` threads meanwhile."""
        others = [i for i in indices if not isinstance(jobs[i][0], TritonJitKernel)]
        futures = []
        threads = ThreadPoolExecutor(min(self.workers, len(others))) if self.workers > 1 and len(others) > 1 else None
        try:
            for i in others if threads is not None else ():
                futures.append((i, threads.submit(contextvars.copy_context().run, self._attempt, *jobs[i])))
            for i in indices:
                if threads is None or i not in others:
                    done(i, self._attempt(*jobs[i]))
            for i, f in futures:
                done(i, f.result())
        finally:
            if threads is not None:
                threads.shutdown()

    def run(self, jobs: Sequence[tuple[Any, Any]], *, progress: bool = False, desc: str = "zerojit warm-up",
            expect_warm: bool = False) -> list[JobOutcome]:
        """Warm every ``(kernel, key)`` job; one :class:`JobOutcome` per job, in job order.

        With ``workers > 1`` the workers start at once unless this key space was warmed into
        this cache folder before (a marker file says so) or ``expect_warm``; else at the first
        entry missing from the disk cache. An exception leaving it (``KeyboardInterrupt``
        included) kills every worker it started, with its ``ptxas`` (:meth:`_WorkerPool.kill`),
        before it propagates: a worker runs in a process group of its own, which a terminal's
        Ctrl-C does not reach.
        """
        try:
            return self._run(jobs, progress=progress, desc=desc, expect_warm=expect_warm)
        except BaseException:
            with self._lock:  # (a later run, if the caller goes on, starts fresh workers)
                pools, self._live = self._live, []
                self._pool = self._prestarted = None
            for pool in pools:
                pool.kill()
            raise

    def _run(self, jobs: Sequence[tuple[Any, Any]], *, progress: bool, desc: str,
             expect_warm: bool) -> list[JobOutcome]:
        from tqdm.auto import tqdm

        outcomes: list[JobOutcome | None] = [None] * len(jobs)
        spent = [0.0] * len(jobs)
        entries: dict[int, list] = {}
        shipped: dict[int, _Shipped] = {}
        deferred: list[int] = []
        # disable=None: drawn only where stderr is a terminal (tqdm.auto's notebook bar is always drawn)
        with tqdm(total=len(jobs), desc=desc, unit="key", disable=None if progress else True) as bar:

            def done(i: int, result: tuple) -> None:
                status, value, seconds, state = result
                spent[i] += seconds
                entries.setdefault(i, []).extend(state.entries)
                if status == "deferred":
                    deferred.append(i)
                    if state.shipped is not None:
                        shipped[i] = state.shipped
                    return
                outcomes[i] = JobOutcome(value if status == "ok" else None, spent[i], value if status == "error" else None)
                bar.update()

            self._deferring = self.workers > 1
            marker = None
            triton_jobs = sum(isinstance(k, TritonJitKernel) for k, _ in jobs)
            self._modules = _kernel_modules(jobs)
            prestarted, self._prestarted = self._prestarted, None
            if self._deferring and triton_jobs and self._modules and not expect_warm:
                try:
                    target = _tc.current_target()
                except Exception:  # no GPU and no compile-only target: nothing will compile anyway
                    target = None
                marker = _marker(jobs, target) if target is not None else None
                if marker is not None and not os.path.exists(marker):  # cold: start the workers now
                    if prestarted is not None and prestarted.serves(target) and self._pool is None:
                        self._pool, prestarted = prestarted, None
                        self._pool.resize(self.workers)
                    pool = self._ensure_pool(target, key_later=True)
                    if pool is not None:
                        t0 = time.perf_counter()
                        # Every worker now, booting while this process hashes and sweeps.
                        _prestart_workers(pool, target, min(self.workers, triton_jobs))
                        if pool.start_method == "fork" or pool._fork_seconds:
                            self.counts.add_phase("fork", time.perf_counter() - t0)
            if prestarted is not None:
                self._drop(prestarted)
            t0 = time.perf_counter()
            if self._pool is not None:  # cold: the workers boot while this process gets ready
                self._pool.set_triton_key(_prepare_while_hashing(jobs, self._pool.key_source(),
                                                                 self._launchers_while_hashing))
            else:
                use_fast_triton_key()
            self.counts.add_phase("start", time.perf_counter() - t0)
            t0 = time.perf_counter()
            try:
                self._sweep(jobs, range(len(jobs)), done)
            finally:
                self._deferring = False
            t1 = time.perf_counter()
            self.counts.add_phase("sweep", t1 - t0)
            pool, self._pool = self._pool, None
            waiting, deferred[:] = sorted(deferred), []
            if pool is not None:  # load each deferred key as soon as the workers have its entries
                bar.set_postfix_str(f"{pool.started} compile workers")
                needs = {i: entries.get(i, []) for i in waiting}
                loader = _ShippedLoader(self)
                while_booting = 0
                with loader:
                    while needs:
                        t2 = time.perf_counter()
                        ready = pool.wait_ready(needs)
                        t3 = time.perf_counter()
                        self.counts.add_phase("workers", t3 - t2)
                        if not ready:  # no worker has booted yet: compile a waiting key here meanwhile
                            task = pool.take_while_booting()
                            if task is not None:
                                mine = [i for i, names in needs.items() if task["name"] in names]
                                for i in mine:
                                    del needs[i]
                                self._sweep(jobs, mine, done)
                                pool._finished(task["name"])
                                while_booting += len(mine)
                                self.counts.add_phase("compile", time.perf_counter() - t3)
                            continue
                        rest = []
                        for i in ready:
                            del needs[i]
                            hung = [pool.failed[e] for e in entries.get(i, ()) if e in pool.failed]
                            if hung:  # never compiled in this process: it fails, with the others
                                error = _watchdog.CompileHung(
                                    f"kernel {jobs[i][0].name!r} key {jobs[i][1]!r}: {hung[0]}")
                                done(i, ("error", error, 0.0, _JobState()))
                                continue
                            spent[i] += sum(pool.seconds.get(e, 0.0) for e in entries.get(i, ()) if not e.startswith("launcher:"))
                            t4 = time.perf_counter()
                            variant = loader.load(*jobs[i], shipped[i]) if i in shipped else None
                            if variant is None:
                                rest.append(i)
                            else:
                                done(i, ("ok", variant, time.perf_counter() - t4, _JobState()))
                        self._sweep(jobs, rest, done)
                        self.counts.add_phase("load", time.perf_counter() - t3)
                waiting = []
                if while_booting:
                    self._note(f"{count(while_booting, 'key')} compiled in this process while no worker had finished "
                               "its boot")
                t2 = time.perf_counter()
                self.counts.worker_seconds += sum(self._finish(pool).values())  # stops the workers
                self.counts.add_phase("workers", time.perf_counter() - t2)
            if waiting:
                t2 = time.perf_counter()
                self._sweep(jobs, waiting, done)
                self.counts.add_phase("load", time.perf_counter() - t2)
        if marker is not None and all(o is not None and o.error is None for o in outcomes):
            try:
                os.makedirs(os.path.dirname(marker), exist_ok=True)
                open(marker, "w").close()
            except OSError:
                pass
        return [o if o is not None else JobOutcome(None, spent[i], RuntimeError("zerojit: the key was deferred twice"))
                for i, o in enumerate(outcomes)]


class _ShippedLoader:
    """Loads what a worker compiled for a deferred key straight into the kernel's in-process
    cache, under the very key Triton asked the worker for (from its ``jit_cache_hook``), the way
    :mod:`zerojit.restore` does on a warm start: no second warm-up launch, no second cache-key
    hash, no IR reads. The variant equals the one a second sweep would produce (same Triton key,
    same ``CompiledKernel`` fields, the specialization from Triton's binder on the warm-up
    launch's own arguments). Anything unexpected returns None: the key then takes the second
    sweep, as every key did before.
    """

    def __init__(self, session: "WarmupSession") -> None:
        self.session = session
        self.backends: dict = {}
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> "_ShippedLoader":
        self.device = _tc.current_device()
        self.gpu = not warm_target()[1]
        if self.gpu:
            self._stack.enter_context(shared_launchers())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()

    def load(self, kernel: Any, key: Any, shipped: _Shipped) -> Any:
        if not isinstance(kernel, TritonJitKernel) or kernel.fast_path:  # its warm-up launch records
            return None
        jit_fn = shipped.jit_fn
        try:
            _, specialization, _ = bind(jit_fn, **shipped.launch[0][1])
            group = read_group_file(shipped.group_file)  # checked: a FIFO there would block a plain open
            compiled = install(jit_fn, self.device, shipped.triton_key, group, shipped.src, self.backends,
                               load=self.gpu)
        except Exception:  # a missing file, a refused load: the second sweep reports it properly
            return None
        with self.session._lock:
            self.session.counts.disk_loads += 1
        return CompiledVariant(kernel=kernel.name, key=key, triton_key=shipped.triton_key,
                               specialization=spec_classes(jit_fn, specialization),
                               param_names=tuple(p.name for p in jit_fn.params), loaded=self.gpu, compiled=compiled)


def start_worker_pool(jobs: Sequence[tuple[Any, Any]], workers: int) -> "_WorkerPool | None":
    """Start the compile workers of a later cold warm-up of ``jobs`` now (they boot, and Triton's
    build key is hashed on a thread, while the caller goes on); hand the pool to
    :class:`WarmupSession`. None when nothing would use them: ``workers <= 1``, no Triton kernel
    a worker can import, or this key space was warmed into this cache folder before (the marker
    a parallel warm-up leaves, or the restore index any warm-up leaves)."""
    triton_jobs = sum(isinstance(k, TritonJitKernel) for k, _ in jobs)
    modules = _kernel_modules(jobs)
    target = _tc.current_target()
    if not triton_jobs or workers <= 1 or not modules or not _writable_cache():
        return None
    if os.path.exists(_marker(jobs, target)) or os.path.exists(index_path(plan_digest(jobs), target)):
        return None  # warmed into this cache folder before (by workers, or serially: its restore index)
    _tc.watch_toolchain()  # the backend hash's ptxas --version too
    pool = _WorkerPool(workers, target, _Counts(), threading.Lock(), modules)
    known = known_triton_key()
    if known is not None:  # a known install: every worker starts with it
        pool.set_triton_key(known)
    else:
        pool.hash_in_background()
    _prestart_workers(pool, target, min(workers, triton_jobs))
    return pool


def _prestart_workers(pool: "_WorkerPool", target: Any, count: int) -> None:
    """Start ``count`` workers of ``pool`` now. Forked ones (one tree, one fork of this thread's)
    first get here what each would otherwise do itself: Triton's build key when it costs no hash
    (a known install: they start with it), the modules Triton's compiler imports lazily, and the
    backend's hash, which every first compile needs (``ptxas --version``, a subprocess of 10-70
    ms on the H200 host, run on a thread during those imports). The fork waits for that thread:
    a child forked while ``ptxas --version`` runs would hold that subprocess's pipes open, and
    the thread would wait for the child forever (tests/test_hangs.py; each forked worker also
    closes every descriptor it did not open). After the fork this process imports what only it
    needs before its sweep: the modules Triton's launch path imports lazily (the workers launch
    nothing). The ``ptxas`` run is bounded by the stall rule (:func:`zerojit.watchdog.run`)."""
    if pool.start_method != "fork":
        pool.prestart(count)
        return
    if pool.triton_key is None:
        known = known_triton_key()
        if known is not None:
            pool.set_triton_key(known)
    primer = threading.Thread(target=_tc.prime_backend_hash, args=(target,), name="zerojit-backend-hash", daemon=True)
    primer.start()
    _tc.import_compiler_modules()
    primer.join()  # before the fork (see above)
    pool.prestart(count)
    _tc.import_launch_path_modules()


def _writable_cache() -> bool:
    """True when this process may write into the cache folder, which is created if missing
    (Triton would at its first entry; a warm-up's workers start before that). A read-only one,
    e.g. a warm cache shipped in an image, gets no workers: they could write no entry, and what
    it lacks fails in this process with the folder named."""
    folder = cache_dir()
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _kernel_modules(jobs: Sequence[tuple[Any, Any]]) -> list[str]:
    """The modules that define the jobs' Triton functions, where a worker can import them, and
    those a ``__main__`` function rebuilt from its ``program_source`` imports its globals from
    (empty: no worker could compile any of the jobs)."""
    jit_fns = {getattr(k, "kernel", None) for k, _ in jobs if isinstance(k, TritonJitKernel)}
    modules = {fn.fn.__module__ for fn in jit_fns if fn is not None and _importable(fn.fn)}
    modules |= {module for fn in jit_fns if fn is not None for module in _script.imported_modules(fn)}
    return sorted(modules)


def _importable(fn: Any) -> bool:
    """True when a worker can import ``fn`` by module and qualified name (not in ``__main__``,
    not defined inside a function)."""
    return fn.__module__ != "__main__" and "<locals>" not in fn.__qualname__


def _prepare_while_hashing(jobs: Sequence[tuple[Any, Any]], key: Callable[[], str] = use_fast_triton_key,
                           then: Callable[[Sequence[tuple[Any, Any]], Callable[[], bool]], None] | None = None) -> str:
    """Triton's build key (:func:`~zerojit.cache.use_fast_triton_key`), computed on a thread
    while this one pays the first sweep's one-time costs; returns the key.

    On a new Triton install the key is ~0.5 s of SHA-256 over Triton's build, which releases the
    GIL; meanwhile each kernel gets its per-device cache and binder and its source hash, and the
    module Triton's specializer imports at its first tensor argument is imported. Without this
    the workers would wait for the key and then for those costs before their first request.
    ``key``: what gives the key (a prestarted pool's: the hash it already started). ``then``:
    called first with the jobs and a function telling whether the key is still being computed
    (:meth:`WarmupSession._launchers_while_hashing`: on the H200 host, run after the costs above
    it queued its first launcher only as the workers' imports ended, ~0.45 s, too late for them
    to skip their throwaway compile).
    """
    result: dict = {}

    def compute() -> None:
        try:
            result["key"] = key()
        except BaseException as e:  # re-raised below, in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=compute, name="zerojit-triton-key", daemon=True)
    thread.start()
    try:
        if then is not None:  # first: its launcher requests should reach the workers before their imports end
            then(jobs, thread.is_alive)
        _tc.import_launch_path_modules()
        device = _tc.current_device()
        seen: set[int] = set()
        for kernel, _ in jobs:
            jit_fn = getattr(kernel, "kernel", None) if isinstance(kernel, TritonJitKernel) else None
            if jit_fn is None or id(jit_fn) in seen:
                continue
            seen.add(id(jit_fn))
            with _DEVICE_CACHE_LOCK:
                _tc.device_cache(jit_fn, device)
            _tc.source_hash(jit_fn)
    finally:
        thread.join()
    if "error" in result:
        raise result["error"]
    return result["key"]


#: ``ZEROJIT_WORKER_START``: how compile workers start, ``fork`` (the default on Linux) or ``spawn``.
WORKER_START_ENV = "ZEROJIT_WORKER_START"
WORKER_NICE_ENV = "ZEROJIT_WORKER_NICE"
DEFAULT_WORKER_NICE = 0
_FORK_BUDGET = 0.25  # seconds of fork() calls after which the remaining workers are spawned
_COMPILE_WHILE_BOOTING = True  # this process compiles waiting keys while no worker has booted (tests turn it off)


class WorkerSettingError(ValueError):
    """An environment variable that sets up compile workers (``ZEROJIT_WORKER_START``,
    ``ZEROJIT_WORKER_NICE``) holds a value they cannot use; the message names it (invalid input:
    the CLI exits 2)."""


def worker_start_method() -> str:
    """How this process starts compile workers: ``"fork"`` on Linux (a copy of this process,
    booted in milliseconds: :func:`zerojit._compile_worker.fork_workers`), else ``"spawn"`` (a new
    interpreter importing Triton and the kernels' modules: 0.3-0.5 s on the H200 host, seconds when
    a kernels' module imports torch). ``ZEROJIT_WORKER_START=spawn`` chooses spawn anywhere; ``fork``
    where the platform cannot fork (not Linux) is spawn too.

    Raises:
        WorkerSettingError: ``ZEROJIT_WORKER_START`` is set to something else.
    """
    chosen = os.environ.get(WORKER_START_ENV, "").strip().lower()
    if chosen not in ("", "fork", "spawn"):
        raise WorkerSettingError(f"{WORKER_START_ENV}={os.environ[WORKER_START_ENV]!r}: use 'fork' or 'spawn'")
    can_fork = sys.platform.startswith("linux") and hasattr(os, "fork")
    return "fork" if can_fork and chosen != "spawn" else "spawn"


def worker_nice() -> int:
    """The niceness compile workers add to their own (``os.nice``) before they boot:
    ``ZEROJIT_WORKER_NICE`` (0-19), default 0 (this process's priority).

    For an engine whose warm-up compiles beside other start-up work (workers started early with
    ``start_workers`` while it loads weights), a positive value lets that work come first. Not the
    default: with workers at +5, a cold warm-up of the 111-key matrix with 16 workers took 1.36x
    as long on an H100 host (3 interleaved rounds, spread 1.13-1.38x; ``benchmarks/warmup.py``
    mode ``zerojit-nice5``): on a host with other load the workers lose their cores to it, not
    only to this process. (Serving's background compiles use 19: :mod:`zerojit.serving.background`.)

    Raises:
        WorkerSettingError: ``ZEROJIT_WORKER_NICE`` is set to something other than a whole number 0-19.
    """
    text = os.environ.get(WORKER_NICE_ENV, "").strip()
    if not text:
        return DEFAULT_WORKER_NICE
    value = int(text) if text.isascii() and text.isdigit() else -1  # plain digits: no sign, "_" or other scripts
    if not 0 <= value <= 19:
        raise WorkerSettingError(f"{WORKER_NICE_ENV}={os.environ[WORKER_NICE_ENV]!r}: use a whole number from 0 to 19")
    return value


@dataclass
class _Started:
    """A worker process just started: its handle, its stderr file, its timeline number, and when
    (``perf_counter`` and ``time.time``) it was started."""
    proc: Any  # subprocess.Popen, or _compile_worker.ForkedProcess
    stderr: Any
    index: int
    at: float
    wall: float
    forked: bool
    key_sent: bool = False  # the build key went with its set-up (forked with it)


class _TaskQueue:
    """The pool's waiting requests, handed out longest first.

    Launcher builds go first (a C compile each, needed by every key of their signature). Then
    compiles, longest first (longest-processing-time first: the last requests to start are the
    short ones, so the workers finish together). A request's length is what this install took to
    compile its entry before (``expected``: :func:`zerojit.cache.remembered_compile_seconds`), else
    its kernel's mean so far. While some kernels have neither, one of those kernels in turn (the one
    with fewest requests handed out so far), so every kernel's first compile runs early and
    measures it. Ties keep first come first served. Stop signals: ``first`` ones before any request
    (surplus workers), the others after all of them.
    """

    def __init__(self, expected: Mapping[str, float] | None = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._stops_first = 0
        self._stops = 0
        self._launchers: collections.deque = collections.deque()
        self._compiles: dict[str, collections.deque] = {}  # function -> its waiting requests
        self._handed: collections.Counter = collections.Counter()  # function -> requests handed out
        self._seconds: dict[str, list] = {}  # function -> [total seconds, compiles] measured
        self._expected = dict(expected or {})  # entry name -> seconds it took before

    def put(self, task: dict) -> None:
        with self._cond:
            if task["kind"] == "launcher":
                self._launchers.append(task)
            else:
                self._compiles.setdefault(task.get("function", ""), collections.deque()).append(task)
            self._cond.notify()

    def put_stop(self, *, first: bool = False) -> None:
        with self._cond:
            if first:
                self._stops_first += 1
            else:
                self._stops += 1
            self._cond.notify()

    def expected(self, name: str) -> float | None:
        """What request ``name``'s entry took to compile before on this install, if remembered."""
        return self._expected.get(name)

    def took(self, function: str, seconds: float) -> None:
        """A worker compiled one of ``function``'s requests in ``seconds``."""
        with self._cond:
            total = self._seconds.setdefault(function, [0.0, 0])
            total[0] += seconds
            total[1] += 1

    def get(self) -> dict | None:
        """The next request (blocking); None: stop."""
        with self._cond:
            while True:
                found, task = self._pick()
                if found:
                    return task
                self._cond.wait()

    def _length(self, function: str, task: dict) -> float | None:
        seconds = self._expected.get(task["name"])
        if seconds is None and function in self._seconds:
            total, n = self._seconds[function]
            seconds = total / n
        return seconds

    def _pick_compile(self) -> dict:
        unknown = [f for f, waiting in self._compiles.items()
                   if f not in self._seconds and not any(t["name"] in self._expected for t in waiting)]
        if unknown:
            function = min(unknown, key=lambda f: self._handed[f])  # first-seen order breaks ties
            index = 0
        else:
            function, index, longest = "", 0, -1.0
            for f, waiting in self._compiles.items():
                for i, task in enumerate(waiting):
                    length = self._length(f, task)
                    length = -0.5 if length is None else length  # in a measured kernel, never measured
                    if length > longest:
                        function, index, longest = f, i, length
        waiting = self._compiles[function]
        task = waiting[index]
        del waiting[index]
        if not waiting:
            del self._compiles[function]
        self._handed[function] += 1
        return task

    def compiles_waiting(self) -> bool:
        with self._cond:
            return bool(self._compiles)

    def take_compile(self) -> dict | None:
        """The next compile request by the same order as :meth:`get` (launchers and stop signals
        stay), or None."""
        with self._cond:
            return self._pick_compile() if self._compiles else None

    def drain(self) -> list[dict]:
        """Take every waiting request out (the stop signals stay)."""
        with self._cond:
            tasks = list(self._launchers) + [t for q in self._compiles.values() for t in q]
            self._launchers.clear()
            self._compiles.clear()
            return tasks

    def _pick(self) -> tuple[bool, dict | None]:
        if self._stops_first:
            self._stops_first -= 1
            return True, None
        if self._launchers:
            return True, self._launchers.popleft()
        if self._compiles:
            return True, self._pick_compile()
        if self._stops:
            self._stops -= 1
            return True, None
        return False, None


#: Seconds :meth:`_WorkerPool.kill` waits for the killed workers to end.
KILL_WAIT_S = 5.0


class _WorkerPool:
    """Up to ``size`` worker processes, started as requests arrive, fed from one queue.

    One thread per worker process writes a request and waits for its reply (the GIL is free while
    it waits), so the parent's sweep goes on. Requests are deduplicated by entry (or launcher).
    """

    def __init__(self, size: int, target: Any, counts: _Counts, lock: threading.Lock, modules: Sequence[str] = ()) -> None:
        self.size = size
        self.target = target
        self.counts = counts
        self.lock = lock
        self.tasks = _TaskQueue(remembered_compile_seconds())
        self.start_method = worker_start_method()
        self._fork_seconds = 0.0  # spent in fork() so far (this thread waits for each)
        self.seen: set[str] = set()
        self.done: set[str] = set()  # requests answered (or given up on)
        self._progress = threading.Condition(lock)
        self.threads: list[threading.Thread] = []
        self.seconds: dict[str, float] = {}
        self.compiled_seconds: dict[str, float] = {}  # entry -> a worker's compile (not a wait for another process's)
        self.started = 0
        self.ready_workers = 0  # workers that finished their boot
        self._forked = 0  # workers forked
        self._stopping = False  # finish() was called: a worker still booting is not waited for
        self._spawned = 0  # worker indices handed out (the timeline's worker numbers)
        self.stall_s = _watchdog.stall_seconds()
        self.hangs: dict[str, float] = {}  # request -> seconds its first worker was waited for before it was killed
        self.failed: dict[str, str] = {}  # request -> why it failed: it hung in two workers (never compiled here)
        self.setup = {
            "sys_path": [p if p else os.getcwd() for p in sys.path],
            "cache_dir": cache_dir(),
            "target": (target.backend, target.arch, target.warp_size),
            "triton_file": _triton_file(),
            "modules": list(modules),  # imported while the worker boots
            "nice": worker_nice(),
            "owner_pid": os.getpid(),  # a worker kills its group once this process has ended
        }
        self.triton_key: str | None = None  # set_triton_key
        self._links: list[_Link] = []  # the started workers' request streams
        self._key_error: BaseException | None = None
        self._key_ready = threading.Event()
        self._hashing: threading.Thread | None = None  # hash_in_background
        self._procs: list[Any] = []  # every worker started (Popen or ForkedProcess), for kill()
        self._killed = False

    def set_triton_key(self, key: str | None, error: BaseException | None = None) -> None:
        """Hand the workers Triton's build key, at once (each gets its set-up at start, and this as
        soon as it is known: a worker that has it when its imports end skips its throwaway
        compile); None with the ``error`` that prevented it: the workers stop."""
        self.triton_key, self._key_error = key, error
        self._key_ready.set()
        with self.lock:
            links = list(self._links)
        for link in links:
            try:
                self._send_key(link)
            except (OSError, ValueError):  # a worker that died or stopped: its thread reports it
                pass

    def _send_key(self, link: "_Link") -> None:
        """Write the build key to one worker, once, if it is known."""
        if self.triton_key is None:
            return
        with link.lock:
            if not link.key_sent:
                _wire.write_message(link.stdin, {"triton_key": self.triton_key})  # answered by nothing
                link.key_sent = True

    def hash_in_background(self) -> None:
        """Compute Triton's build key on a thread and hand it to the workers."""

        def compute() -> None:
            try:
                self.set_triton_key(use_fast_triton_key())
            except BaseException as e:  # re-raised by key_source() in the warm-up's thread
                self.set_triton_key(None, e)

        self._hashing = threading.Thread(target=compute, name="zerojit-triton-key", daemon=True)
        self._hashing.start()

    def key_source(self) -> Callable[[], str]:
        """What gives Triton's build key: the background hash when one runs, else a fresh lookup."""
        if self._hashing is None:
            return use_fast_triton_key

        def wait() -> str:
            self._key_ready.wait()
            if self.triton_key is None:
                raise self._key_error or RuntimeError("zerojit: Triton's build key could not be computed")
            return self.triton_key

        return wait

    def resize(self, size: int) -> None:
        """Run ``size`` workers from now on: more start as requests come; surplus ones stop
        before their first request (a stop signal ahead of every request)."""
        with self.lock:
            surplus = len(self.threads) - size
            self.size = size
            for _ in range(max(surplus, 0)):
                self.tasks.put_stop(first=True)

    def serves(self, target: Any) -> bool:
        """True when these workers compile for ``target`` into the current cache folder."""
        return self.target == target and self.setup["cache_dir"] == cache_dir()

    def prestart(self, n: int) -> None:
        """Start ``n`` workers now (they boot while the parent goes on). Forked ones come as one
        tree (:func:`zerojit._compile_worker.fork_workers`): one fork of this process's."""
        with self.lock:
            want = min(n, self.size) - len(self.threads)
            if want > 0 and self.start_method == "fork":
                for started in self._fork(want):
                    self._start_thread(started)
            while len(self.threads) < min(n, self.size):
                self._start_thread()

    def _start_thread(self, started: "_Started | None" = None) -> None:
        """Start the thread that feeds a worker: ``started`` (forked), else one forked here, in the
        caller's thread (the warm-up's: it runs no compile at this moment), or (spawn, or the fork
        failed) one the feeding thread spawns."""
        if started is None and self.start_method == "fork":
            started = next(iter(self._fork(1)), None)
        t = threading.Thread(target=self._serve, args=(started,), name=f"zerojit-compile-{len(self.threads)}",
                             daemon=True)
        self.threads.append(t)
        t.start()

    def _next_index(self) -> int:
        index = self._spawned
        self._spawned += 1
        return index

    def _fork(self, n: int) -> "list[_Started]":
        """(Called holding ``self.lock``.) Fork ``n`` workers as one tree
        (:func:`zerojit._compile_worker.fork_workers`); none when the fork failed (the feeding
        threads spawn them instead). Once this process's forks took :data:`_FORK_BUDGET` seconds in
        all (a large process: each fork copies its page tables), later workers are spawned."""
        stderrs = [tempfile.TemporaryFile() for _ in range(n)]
        indices = [self._next_index() for _ in range(n)]
        t0, wall = time.perf_counter(), time.time()
        key = self.triton_key
        try:
            procs = _wire.fork_workers(dict(self.setup, triton_key=key), [f.fileno() for f in stderrs])
        except OSError as e:
            for f in stderrs:
                f.close()
            if not any(m.startswith("cannot fork") for m in self.counts.recovered):
                self.counts.recovered.append(f"cannot fork a compile worker ({e}); spawned instead")
            return []
        took = time.perf_counter() - t0
        self._forked += n
        self._fork_seconds += took
        self.counts.timeline.append(("fork", indices[0], t0, t0 + took))
        if self._fork_seconds > _FORK_BUDGET:
            self.start_method = "spawn"
            self.counts.recovered.append(
                f"forking this process took {1e3 * self._fork_seconds:.0f} ms for {count(self._forked, 'worker')} (a "
                f"large process: fork copies its page tables); the other workers are spawned")
        self._procs.extend(procs)
        return [_Started(proc, stderr, index, t0, wall, forked=True, key_sent=key is not None)
                for proc, stderr, index in zip(procs, stderrs, indices)]

    def _submit(self, name: str, task: dict) -> None:
        with self.lock:
            if name in self.seen:
                return
            self.seen.add(name)
            self._put(task)
            if len(self.threads) < min(self.size, len(self.seen)):
                self._start_thread()

    def _put(self, task: dict | None) -> None:
        """Queue ``task`` (None: a stop signal, after every request)."""
        if task is None:
            self.tasks.put_stop()
        else:
            self.tasks.put(task)

    def _finished(self, name: str) -> None:
        with self._progress:
            self.done.add(name)
            self._progress.notify_all()

    def wait_ready(self, needs: dict[int, list[str]]) -> list[int]:
        """Block until some key of ``needs`` (key -> the requests it waits for) has every request
        answered; returns those keys. Returns every key once no worker is left to answer (the
        parent then does what is missing itself), and none while no worker has finished its boot
        but a compile request waits (the parent can take it: :meth:`take_while_booting`)."""
        with self._progress:
            while True:
                ready = [i for i, names in needs.items() if self.done.issuperset(names)]
                if ready or not any(t.is_alive() for t in self.threads):
                    return ready or list(needs)
                if self._booting_only() and self.tasks.compiles_waiting():
                    return []
                self._progress.wait(0.05)

    def take_while_booting(self) -> dict | None:
        """A waiting compile request, taken out of the queue for this process to compile itself,
        while no worker has finished its boot yet (spawned workers importing a kernels' module
        that imports torch take seconds); None once one has, or when none waits."""
        with self.lock:
            if not self._booting_only():
                return None
        return self.tasks.take_compile()

    def _booting_only(self) -> bool:
        """(Under ``self.lock``.) True while every worker is a spawned one still booting (a forked
        one is ready within milliseconds: nothing to take from it)."""
        return _COMPILE_WHILE_BOOTING and not self.ready_workers and not self._forked

    def submit_compile(self, request: _Request, lock_path: str) -> None:
        self._submit(request.entry, {"kind": "compile", "name": request.entry, "function": request.function,
                                     "payload": request.payload, "options": request.options, "lock": lock_path,
                                     "kernel": request.kernel, "script": request.script})

    def submit_launcher(self, types: tuple, key: str, lock_path: str) -> None:
        self._submit(f"launcher:{key}", {"kind": "launcher", "name": f"launcher:{key}", "key": key, "signature": types,
                                         "lock": lock_path})

    def _recovered(self, message: str) -> None:
        with self.lock:
            self.counts.recovered.append(message)

    def _note_once(self, message: str) -> None:
        with self.lock:
            if message not in self.counts.recovered:
                self.counts.recovered.append(message)

    def _spawn(self) -> "_Started | None":
        """Start a worker as a new interpreter (``python -S _compile_worker.py``); None when that
        failed (noted in ``recovered``)."""
        env = dict(os.environ, TRITON_CACHE_DIR=self.setup["cache_dir"], CUDA_VISIBLE_DEVICES="")
        # Triton's own switch: skip scanning every installed package's entry points (~50-80 ms a
        # worker in a large environment) when it finds the same backends
        if _tc.backends_in_tree():
            env.setdefault("TRITON_BACKENDS_IN_TREE", "1")
        stderr = tempfile.TemporaryFile()
        with self.lock:
            index = self._next_index()
        popened, popened_wall = time.perf_counter(), time.time()
        try:
            # -S: no site (see _compile_worker.preload)
            # its own session: a hung worker's group (it, and its ptxas) is killed whole
            proc = subprocess.Popen([sys.executable, "-S", _WORKER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=stderr, env=env, close_fds=True, start_new_session=True)
        except OSError as e:
            self._recovered(f"cannot start a compile worker: {e}")
            stderr.close()
            return None
        with self.lock:
            self._procs.append(proc)
            killed = self._killed
        if killed:  # kill() ran while it started
            _watchdog.kill_group(proc.pid)
        return _Started(proc, stderr, index, popened, popened_wall, forked=False)

    def _serve(self, started: "_Started | None") -> None:
        """Feed one worker (``started``, else one spawned here), and the spawned worker that
        replaces it each time one is killed as hung, until the pool stops."""
        while self._serve_worker(started) and not self._stopping:
            started = None  # spawned: forking is for the warm-up's thread (see _start_thread)

    def _serve_worker(self, started: "_Started | None") -> bool:
        """Feed one worker its requests; True when it was killed as hung with a request (the
        caller starts another)."""
        if started is None:
            started = self._spawn()
            if started is None:
                return False
        proc, stderr, index = started.proc, started.stderr, started.index
        # a spawned worker's replies unbuffered: select() between messages must see every one
        reader = proc.stdout if started.forked else io.FileIO(proc.stdout.fileno(), "rb", closefd=False)
        with self.lock:
            self.started += 1
        task, ready, link = None, False, _Link(proc.stdin)
        link.key_sent = started.key_sent
        try:
            if not started.forked:  # a forked worker has it in its memory
                with link.lock:
                    _wire.write_message(proc.stdin, self.setup)  # the worker boots with it
            with self.lock:
                self._links.append(link)
            self._send_key(link)  # now, if known; else set_triton_key sends it (its boot then skips the throwaway)
            # Ready first, then a request: one taken now would wait out this worker's boot while a
            # ready worker (or this process) could run it.
            status = self._await_ready(proc, reader)
            if status is None:  # the warm-up ended first
                return False
            if not status.get("ok"):
                self._recovered(status.get("error", "compile worker set-up failed"))
                return False
            ready = True
            if started.forked:
                proc.learn_pid(status.get("pid"))
            self._boot_timeline(started, status, time.perf_counter())
            with self.lock:
                self.ready_workers += 1
            if status.get("torch_imported") and not started.forked:
                self._note_once("a compile worker had to import torch: a kernels' module uses it at import time "
                                "(e.g. subclasses torch.Tensor), which adds torch's import (~1.5 s) to every "
                                "worker's boot")
            while True:
                task = self.tasks.get()
                if task is None:
                    break
                if task["kind"] == "compile" and not link.key_sent:  # launchers need no key; compiles do
                    self._key_ready.wait()
                    if self.triton_key is None:  # the hash failed: the warm-up reports it
                        with self.lock:
                            self._put(task)
                        task = None
                        return False
                    self._send_key(link)
                with link.lock:
                    _wire.write_message(proc.stdin, task)
                sent = time.perf_counter()
                reply = self._answer(proc, reader, task)
                self._timed(f"{_outcome(task, reply)} {task.get('function') or task['name']}", index, sent,
                            time.perf_counter())
                self._record(task, reply)
                task = None
        except _Hung as hung:
            _watchdog.kill_group(proc.pid)  # its ptxas or C compiler too
            self._hung(proc.pid, task, hung)
            return task is not None
        except (EOFError, OSError, pickle.PickleError) as e:
            if not ready and self._stopping:  # stopped while it booted (a tree's worker: with the fork above it)
                return False
            stderr.seek(0)
            tail = stderr.read()[-2000:].decode(errors="replace").strip()
            if not ready:
                what = " while starting, before its first request"
            else:
                what = f" while compiling {task.get('function') or task['name']}" if task else ""
            who = (f"compile worker {proc.pid} died{_exit_status(proc)}" if proc.pid is not None else
                   "a compile worker died (forked by a worker that ended first: its pid and exit status are unknown)")
            # its pipe closed (EOFError) is how a death shows, not news; anything else is said
            detail = "" if isinstance(e, EOFError) else f": {type(e).__name__}: {e}"
            self._recovered(f"{who}{what}{detail}" + (f"\n{tail}" if tail else ""))
            if task is not None:  # the parent compiles it in-process
                self._finished(task["name"])
        finally:
            if not started.forked:
                reader.close()
            with link.lock:
                if started.forked:
                    proc.close()
                else:
                    for stream in (proc.stdin, proc.stdout):
                        try:
                            stream.close()
                        except OSError:
                            pass
            if not ready:  # never used: do not wait for it to finish booting
                proc.kill()
            stderr.close()
            # Every answer is in: its exit (~0.1 s of interpreter teardown) is not the warm-up's to wait for.
            threading.Thread(target=_watchdog.reap, args=(proc,), name="zerojit-compile-reaper", daemon=True).start()
        return False

    def _await_ready(self, proc: Any, reader: Any) -> dict | None:
        """The worker's ready message, or None once the pool stops first (the worker still booting).

        Raises:
            _Hung: the worker stopped answering (:mod:`zerojit.watchdog`: no CPU time, or past
                the wall limit) before it was ready.
        """
        import select

        watch = _watchdog.Watch(proc.pid, stall_s=self.stall_s, wall_s=_watchdog.wall_limit(None))
        while not self._stopping:
            if select.select([reader], [], [], 0.05)[0]:
                return _read_reply(proc, reader)
            why = watch.hung()
            if why is not None:
                raise _Hung(why, watch.waited)
        return None

    def _answer(self, proc: Any, reader: Any, task: dict) -> dict:
        """The worker's answer to ``task``, just sent (``"lock_waited"``: True added when the
        worker waited for another process's lock on the entry).

        Raises:
            _Hung: the compile stopped answering (:mod:`zerojit.watchdog`): its worker's group
                used no CPU time for the stall seconds (a wait for another process's lock on the
                entry does not count), or it passed its wall-time limit.
            EOFError: the worker ended.
        """
        import select

        wall = _watchdog.wall_limit(self.tasks.expected(task["name"]))
        watch = _watchdog.Watch(proc.pid, stall_s=self.stall_s, wall_s=wall)
        waited = False
        while True:
            if not select.select([reader], [], [], watch.poll_s)[0]:
                why = watch.hung()
                if why is not None:
                    raise _Hung(why, watch.waited)
                continue
            message = _read_reply(proc, reader)
            if message.keys() == {"lock_wait"}:
                if message["lock_wait"]:
                    waited = True
                    watch.pause()
                else:
                    watch.resume()
                continue
            return dict(message, lock_waited=True) if waited else message

    def _hung(self, pid: int | None, task: dict | None, hung: "_Hung") -> None:
        """Worker ``pid`` was killed as hung (``task``: what it was doing; None: its boot). A
        request's first hang puts it back in the queue for another worker; its second fails it
        (never compiled in this process: the warm-up reports it failed with the others)."""
        who = f"compile worker {pid}" if pid is not None else "a compile worker"
        if task is None:
            self._recovered(f"{who} stopped answering while starting ({hung.why}; {hung.seconds:.1f} s waited); "
                            "killed with its process group")
            return
        what = task.get("function") or f"launcher {task['signature']}"
        if task.get("kernel"):
            what = f"kernel {task['kernel']!r} ({what})"
        name = task["name"]
        with self.lock:
            first = self.hangs.get(name)
            if first is None:
                self.hangs[name] = hung.seconds
                self.counts.recovered.append(
                    f"{who} stopped answering while compiling {what} ({hung.why}; {hung.seconds:.1f} s waited); killed "
                    "with its process group, and the request tried once more in another worker")
                self._put(task)
                return
            self.failed[name] = (f"its compile stopped answering in two compile workers, each killed with its process "
                                 f"group ({first:.1f} s then {hung.seconds:.1f} s waited; the second: {hung.why}); not "
                                 "compiled in this process")
            self.counts.recovered.append(f"{who} stopped answering while compiling {what} again ({hung.why}; "
                                         f"{hung.seconds:.1f} s waited): it fails")
        self._finished(name)

    def _boot_timeline(self, started: "_Started", status: dict, received: float) -> None:
        """Put a worker's boot on the timeline, from the wall-clock times its ready message gives:
        a spawned worker's ``python``, ``imports``, [``preload``], ``set-up``; a forked one's
        ``set-up``, after its ``fork`` span: the parent's own fork for a tree's first worker, else
        from that fork to the worker's start (the tree's forks above it included).

        Each time is clamped to ``received`` (this process's ``perf_counter`` when the ready
        message came): the wall clock may be slewed or stepped against ``perf_counter`` while
        the worker boots (NTP on a VM), and a boot cannot end after its ready message arrived
        nor after the first request it then got."""
        at = {k: min(started.at + max(status[k] - started.wall, 0.0), received) for k in
              ("started_at", "imported_at", "preloaded_at", "ready_at") if isinstance(status.get(k), float)}
        steps = (("set-up", "ready_at"),) if started.forked else (
            ("python", "started_at"), ("imports", "imported_at"), ("preload", "preloaded_at"), ("set-up", "ready_at"))
        previous = at.get("started_at", started.at) if started.forked else started.at
        if started.forked and not started.proc.child and "started_at" in at:  # forked by the tree, not here
            self._timed("fork", started.index, started.at, at["started_at"])
        for what, k in steps:
            if k in at:
                self._timed(what, started.index, previous, at[k])
                previous = at[k]

    def _timed(self, what: str, worker: int, start: float, end: float) -> None:
        with self.lock:
            self.counts.timeline.append((what, worker, start, end))

    def _record(self, task: dict, reply: dict) -> None:
        with self._progress:
            self.seconds[task["name"]] = reply.get("seconds", 0.0)
            self.counts.worker_cpu_seconds += reply.get("cpu", 0.0)
            self.done.add(task["name"])
            self._progress.notify_all()
            for stage, seconds in reply.get("stages", ()):
                self.counts.worker_stages[stage] = self.counts.worker_stages.get(stage, 0.0) + seconds
            if reply.get("ok"):
                if task["kind"] == "compile" and reply.get("compiled"):
                    self.counts.worker_compiled += 1
                    self.tasks.took(task["function"], reply.get("seconds", 0.0))
                    self.compiled_seconds[task["name"]] = reply.get("seconds", 0.0)
                elif task["kind"] == "compile" and task["name"] in self.hangs and not reply.get("lock_waited"):
                    # a retry that found the entry stored, with no lock to wait for: the worker killed for it
                    # stored it (it held the entry's lock from its lookup on), no other process
                    self.counts.worker_compiled += 1
                elif task["kind"] == "compile":  # missing at this warm-up's lookup: another process compiled it meanwhile
                    self.counts.lock_waits += 1
                elif task["kind"] == "launcher":
                    self.counts.worker_launchers += 1
        if reply.get("ok"):
            if task["kind"] == "launcher":
                remember_launcher(task["key"])  # for this Triton install
            return
        what = task.get("function") or f"launcher {task['signature']}"
        if task.get("kernel"):
            what = f"kernel {task['kernel']!r} ({what})"
        if reply.get("unavailable"):
            self._recovered(f"{what} cannot be loaded in a worker ({reply.get('error')}); compiled in this process instead")
        else:  # the second sweep compiles it again here: a real error fails the key the way a serial warm-up does
            self._recovered(f"{what} failed in a worker ({reply.get('error')}); compiled again in this process")

    def finish(self) -> dict[str, float]:
        """Wait for every request, stop the workers; returns worker seconds per entry."""
        self._stopping = True
        if not self._key_ready.is_set():  # never got the build key (still hashing): nothing to wait for
            self.set_triton_key(None, RuntimeError("zerojit: the workers were stopped"))
        with self.lock:
            threads = list(self.threads)
        with self.lock:
            for _ in threads:
                self._put(None)
        for t in threads:
            t.join()
        for task in self.tasks.drain():  # requests no worker took (every worker died): the second sweep does them
            self._recovered(f"{task.get('function') or task['name']}: no compile worker ran it; compiled in-process")
        remember_compile_seconds(self.compiled_seconds)  # the next cold warm-up on this install hands them out longest first
        return dict(self.seconds)

    def kill(self, timeout: float = KILL_WAIT_S) -> list[int]:
        """Kill every worker's process group (its ``ptxas`` or C compiler too) without waiting
        for a request, and reap them; returns the pids still there after ``timeout`` seconds
        (none, unless one cannot be killed: another user's, or stuck in the kernel).

        For an exception leaving a warm-up (Ctrl-C): each worker runs in a process group of its
        own, which the terminal's interrupt does not reach, so a hung ``ptxas`` would outlive the
        warm-up for ever. A forked worker whose pid is not known yet (still booting: its ready
        message names it) compiles nothing yet; it reads the end of its request pipe and exits.
        """
        self._stopping = True
        with self.lock:
            self._killed = True
            procs = list(self._procs)
        for proc in procs:
            if proc.pid is not None and proc.poll() is None:
                _watchdog.kill_group(proc.pid)
        deadline = time.monotonic() + timeout
        left = []
        for proc in procs:
            if proc.pid is None:  # a forked worker never heard from: it exits at its pipe's end
                continue
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                left.append(proc.pid)
        return left


class _Hung(Exception):
    """A worker stopped answering (:mod:`zerojit.watchdog`): ``why``, after ``seconds`` waited."""

    def __init__(self, why: str, seconds: float) -> None:
        super().__init__(why)
        self.why, self.seconds = why, seconds


def _read_reply(proc: Any, reader: Any) -> dict:
    """A worker's next message (a forked one's handle also reads how a tree worker ended)."""
    return proc.read() if isinstance(proc, _wire.ForkedProcess) else _wire.read_message(reader)


class _Link:
    """One worker's request stream, written by its thread and by ``set_triton_key`` (the lock
    keeps messages whole); ``key_sent``: the build key went out on it."""

    def __init__(self, stdin: Any) -> None:
        self.stdin = stdin
        self.lock = threading.Lock()
        self.key_sent = False


def _outcome(task: dict, reply: dict) -> str:
    """A request's timeline name: ``compile`` (a worker compiled it), ``cached`` (on disk by the
    time the worker held its lock: another process compiled it meanwhile), ``failed`` or
    ``launcher``."""
    if task["kind"] == "launcher":
        return "launcher"
    if not reply.get("ok"):
        return "failed"
    return "compile" if reply.get("compiled") else "cached"


def _exit_status(proc: subprocess.Popen) -> str:
    """`` (killed by SIGKILL)`` or `` (exit status 1)`` for a worker whose stream just ended (it
    is given 1 s to be reaped); empty when it is still running."""
    import signal

    try:
        code = proc.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return ""
    if code < 0:
        try:
            return f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f" (killed by signal {-code})"
    return f" (exit status {code})"


def _triton_file() -> str:
    import triton

    return os.path.abspath(triton.__file__)
