"""Background compiles: the specialized keys the fallback served, compiled in worker processes.

While a generic variant serves a missing key (:mod:`.fallback`), the key's own specialized
variant is compiled here, never on the serving thread and never holding this process's GIL for
the compile: by ``FallbackOptions.workers`` (default 1) worker processes at niceness
``FallbackOptions.nice`` (default 19: the serving process's threads come first).

The workers are zerojit's compile workers (``python -S zerojit/_compile_worker.py``, the wire
protocol and set-up of :mod:`zerojit.precompile`'s spawned workers: one ``compile`` request per
key with the ``triton.jit`` function as ``module:qualname``, the pickled ``(signature,
constants, attrs)``, the compile options and the entry's lock file; on a GPU with Triton 3.6 a
``launcher`` request first when the signature's launcher module is missing, so that this process
only loads). They are spawned as new interpreters, never forked: a serving process runs threads
and holds a CUDA context, which a fork does not copy safely. The fallback starts one when it is
installed (:meth:`BackgroundCompiler.start`: it boots while the engine serves, so neither the
first miss nor its swap waits for a Python start), else a worker starts at its first request;
either is kept for the next ones.

One thread per worker writes a request and waits for its reply (a blocking pipe read: the GIL
is free meanwhile). Every wait has a deadline, :mod:`zerojit.watchdog`'s rule (no CPU time in
the worker's process group for ``ZEROJIT_COMPILE_STALL_S`` seconds, or past the wall limit). A
worker that dies or is killed as hung mid-compile is replaced by a fresh one and the request
tried once more; a second loss, or a compile that fails (an error in the kernel for that key),
is reported (:class:`BackgroundFailure`: kernel, key, error; one warning on the
``"zerojit.serving"`` logger) and the generic variant keeps serving the key.

When a worker says the entry is on disk, the ``CompiledKernel`` is built from the disk cache
(``triton.compile`` finds the entry: a read, no compile; done inside
:func:`zerojit.context.allow_compiles`, so the monitor does not count it), loaded on a GPU
(:func:`zerojit.triton_compat.load_compiled`, waiting while a CUDA-graph capture is open:
:mod:`.capture`; never on compile-only, where nothing loads) and handed on (the swap): by this
thread for ``swap="immediate"``; for ``"between-requests"`` by the engine's thread when it calls
``between_requests()`` (``defer_build``), so that no step shares the GIL with a build (on the
2-core CI machine a build held it for ~1-3 ms, which a step waiting for it paid).
"""

from __future__ import annotations

import functools
import io
import logging
import os
import pickle
import queue
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from .. import _compile_worker as _wire
from .. import script_kernels as _script
from .. import triton_compat as _tc
from .. import watchdog as _watchdog
from ..cache import (cache_dir, entry_lock_path, entry_name, install_remembered_launcher, launcher_lock_path,
                     remember_launcher, use_fast_triton_key)
from ..compile_only import active_compile_only
from ..context import allow_compiles
from .. import capture as _capture

__all__ = ["CompileJob", "BackgroundFailure", "BackgroundCompiler", "WORKER_SCRIPT", "LOAD_WAIT_S"]

logger = logging.getLogger("zerojit.serving")

#: The compile worker script (spawned as ``python -S <it>``, as :mod:`zerojit.precompile` does).
WORKER_SCRIPT = os.path.abspath(_wire.__file__)
#: Seconds a ready variant waits for an open CUDA-graph capture to end before its load is given
#: up (reported as a failure; the generic variant keeps serving).
LOAD_WAIT_S = 600.0


@dataclass(frozen=True)
class CompileJob:
    """One specialized key to compile: what Triton's ``_do_compile`` was asked at the miss.

    Attributes:
        jit_fn: the ``triton.jit`` function. key: Triton's in-process key. device: its device.
        signature / constants / attrs: the ``ASTSource`` arguments. options: the compile options
        (:func:`zerojit.triton_compat.miss_compile_options`). target: the device's ``GPUTarget``.
        kernel: the kernel's name, for messages.
    """

    jit_fn: Any
    key: str
    device: Any
    signature: dict
    constants: dict
    attrs: dict
    options: dict
    target: Any
    kernel: str = ""


@dataclass(frozen=True)
class BackgroundFailure:
    """A background compile that did not give a variant; the generic variant keeps serving.

    Attributes: kernel (its name), key (Triton's in-process key), error (what went wrong)."""

    kernel: str
    key: str
    error: str

    def __str__(self) -> str:
        return (f"background compile of kernel {self.kernel!r} key {self.key} failed: {self.error}; its generic "
                "variant keeps serving it")


class _WorkerLost(Exception):
    """Worker ``pid`` died or was killed as hung; ``why`` says which."""

    def __init__(self, why: str, pid: int) -> None:
        super().__init__(why)
        self.why, self.pid = why, pid


def _modules_of(jit_fn: Any) -> list[str]:
    """What a compile worker imports while it boots for ``jit_fn``: its module, or, for a function
    rebuilt from a ``program_source``, the modules its globals come from."""
    if _script.program_source_of(jit_fn) is not None:
        return sorted(_script.imported_modules(jit_fn))
    return [jit_fn.fn.__module__]


class _Worker:
    """One spawned compile worker and its pipes; :meth:`boot` waits for its ready message."""

    def __init__(self, setup: dict, triton_key: str) -> None:
        # a bad ZEROJIT_COMPILE_STALL_S / _WALL_S fails here, before a process is started
        self.stall_s = _watchdog.stall_seconds()
        _watchdog.wall_floor_seconds()  # (read again at each wait)
        env = dict(os.environ, TRITON_CACHE_DIR=setup["cache_dir"], CUDA_VISIBLE_DEVICES="")
        if _tc.backends_in_tree():  # Triton's own switch: no entry-point scan when its backends are in tree
            env.setdefault("TRITON_BACKENDS_IN_TREE", "1")
        self.stderr = tempfile.TemporaryFile()
        self.setup = setup
        # -S: no site (see _compile_worker.preload); its own session: a hung worker's group dies whole
        self.proc = subprocess.Popen([sys.executable, "-S", WORKER_SCRIPT], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env, close_fds=True,
                                     start_new_session=True)
        self.pid = self.proc.pid
        self.reader = io.FileIO(self.proc.stdout.fileno(), "rb", closefd=False)  # unbuffered: select sees each reply
        self.ready = False
        self.triton_key = triton_key

    def boot(self) -> None:
        """Send the set-up and Triton's build key, and wait for the ready message (raises
        :class:`_WorkerLost`; the caller kills it)."""
        try:
            _wire.write_message(self.proc.stdin, self.setup)
            _wire.write_message(self.proc.stdin, {"triton_key": self.triton_key})
        except OSError as e:
            raise _WorkerLost(self._died(f": {e}"), self.pid) from None
        ready = self._reply(_watchdog.wall_limit(None))
        if not ready.get("ok"):
            raise _WorkerLost(ready.get("error", "its set-up failed"), self.pid)
        self.ready = True

    def ask(self, task: dict, wall_s: float) -> dict:
        """Send ``task``, return its reply (raises :class:`_WorkerLost`)."""
        try:
            _wire.write_message(self.proc.stdin, task)
        except OSError as e:
            raise _WorkerLost(self._died(f": {e}"), self.pid) from None
        return self._reply(wall_s)

    def _reply(self, wall_s: float) -> dict:
        watch = _watchdog.Watch(self.pid, stall_s=self.stall_s, wall_s=wall_s)
        while True:
            if not select.select([self.reader], [], [], watch.poll_s)[0]:
                why = watch.hung()
                if why is not None:
                    _watchdog.kill_group(self.pid)  # its ptxas too
                    raise _WorkerLost(f"stopped answering ({why}; {watch.waited:.1f} s waited) and was killed",
                                      self.pid)
                continue
            try:
                message = _wire.read_message(self.reader)
            except (EOFError, OSError, ValueError, pickle.PickleError) as e:  # its pipe closed (EOF): how a death shows
                detail = "" if isinstance(e, EOFError) else f": {type(e).__name__}: {e}"
                raise _WorkerLost(self._died(detail), self.pid) from None
            if message.keys() == {"lock_wait"}:  # waiting for another process's lock on the entry: not hung
                if message["lock_wait"]:
                    watch.pause()
                else:
                    watch.resume()
                continue
            return message

    def _died(self, detail: str) -> str:
        try:
            code = self.proc.wait(timeout=1)
            status = f" (exit status {code})" if code >= 0 else f" (killed by signal {-code})"
        except subprocess.TimeoutExpired:
            status = ""
        self.stderr.seek(0)
        tail = self.stderr.read()[-1000:].decode(errors="replace").strip()
        return f"died{status}{detail}" + (f"\n{tail}" if tail else "")

    def stop(self) -> None:
        """Ask it to end (a ``None`` request), close the pipes, and reap it on a thread (killed
        after 30 s). Only from the thread that feeds it."""
        try:
            _wire.write_message(self.proc.stdin, None)
        except (OSError, ValueError):
            pass
        self.reader.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr.close()
        threading.Thread(target=_watchdog.reap, args=(self.proc,), name="zerojit-background-reaper", daemon=True).start()

    def kill(self) -> None:
        """SIGKILL its process group (its ptxas too); from any thread: the feeding thread then
        reads the end of its pipe and stops it."""
        _watchdog.kill_group(self.pid)


@dataclass(frozen=True)
class _Start:
    """A queue item: start a worker for ``target`` before any request (:meth:`BackgroundCompiler.start`)."""

    target: Any


class BackgroundCompiler:
    """Compiles :class:`CompileJob`\\ s in worker processes, one thread per worker.

    Args:
        workers: worker processes (each started at a request when the others are busy; the
            first one by :meth:`start`, or at the first request).
        nice: their niceness (0-19; 0: the serving process's).
        on_ready: ``on_ready(job, compiled)`` with the key's ``CompiledKernel`` (built from the
            disk cache; loaded on a GPU), called from the worker's thread.
        build: False: only compile into the disk cache (``swap="never"``: nothing would use the
            variant in this process), no ``CompiledKernel`` is built and ``on_ready`` is not called.
        defer_build: hand ``on_ready`` a *builder* instead (``builder()``: the ``CompiledKernel``,
            built and loaded by whoever calls it, or None when that failed, reported as a
            failure): ``swap="between-requests"`` builds between requests, on the engine's
            thread, so no step shares the GIL with a build (Python reading the entry, ~1-3 ms)
            or waits on a module load.

    Attributes:
        compiled: jobs a worker made ready, compiled or found on disk (``background_compiles``).
        failures: every :class:`BackgroundFailure`, in order (each also logged once, as a
            warning); the key's generic variant keeps serving it.
        notes: what went wrong and was recovered from (a worker replaced), in order.
    """

    def __init__(self, *, workers: int = 1, nice: int = 19, on_ready: Callable[[CompileJob, Any], None],
                 build: bool = True, defer_build: bool = False) -> None:
        self.size, self.nice = workers, nice
        self.on_ready, self.build, self.defer_build = on_ready, build, defer_build
        self._queue: queue.Queue[CompileJob | _Start | None] = queue.Queue()
        self._idle = threading.Condition()
        self._outstanding = 0
        self._threads: list[threading.Thread] = []
        self._workers: set[_Worker] = set()  # running now (close() stops them)
        self._closed = False
        self.compiled = 0
        self.failures: list[BackgroundFailure] = []
        self.notes: list[str] = []
        self._triton_key: str | None = None

    def submit(self, job: CompileJob) -> None:
        """Queue ``job`` (returns at once); another worker thread (and process) starts when every
        running one is busy and fewer than ``workers`` run.

        Raises:
            RuntimeError: the compiler was closed.
        """
        with self._idle:
            if self._closed:
                raise RuntimeError("zerojit: the background compiler was closed")
            self._outstanding += 1
            if len(self._threads) < min(self.size, self._outstanding):  # another worker only while all are busy
                t = threading.Thread(target=self._serve, name=f"zerojit-background-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        self._queue.put(job)

    def start(self, target: Any) -> None:
        """Start one worker for ``target`` (a ``GPUTarget``) and the current cache folder now,
        on its thread, before any request (a failure to start is noted and left to the first
        request to retry)."""
        with self._idle:
            if self._closed or self._threads:
                return
            t = threading.Thread(target=self._serve, name="zerojit-background-0", daemon=True)
            self._threads.append(t)
            t.start()
        self._queue.put(_Start(target))

    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the workers running now."""
        with self._idle:
            return tuple(w.pid for w in self._workers)

    def outstanding(self) -> int:
        """Jobs submitted and not finished."""
        return self._outstanding

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every submitted job has finished (ready, or failed), at most ``timeout``
        seconds; True when none is left."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._outstanding:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop: jobs still queued are dropped, each worker is asked to end (killed with its
        process group when its thread has not ended within ``timeout`` seconds)."""
        with self._idle:
            self._closed = True
            threads = list(self._threads)
        while True:  # queued jobs will not run
            try:
                if isinstance(self._queue.get_nowait(), CompileJob):
                    self._done()
            except queue.Empty:
                break
        for _ in threads:
            self._queue.put(None)
        with self._idle:
            booting = [w for w in self._workers if not w.ready]
        for worker in booting:  # not needed any more: not waited for
            worker.kill()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        with self._idle:
            left = list(self._workers)
        for worker in left:  # a thread still waiting on a compile: its worker goes
            worker.kill()

    # -- one worker thread -----------------------------------------------------------------------

    def _done(self) -> None:
        with self._idle:
            self._outstanding -= 1
            self._idle.notify_all()

    def _serve(self) -> None:
        worker: _Worker | None = None
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                if isinstance(job, _Start):
                    worker = self._started(job.target, worker)
                    continue
                try:
                    worker = self._run(job, worker)
                except Exception as e:  # a bug here must not end the thread: report the job failed
                    self._fail(job, f"{type(e).__name__}: {e}")
                finally:
                    self._done()
        finally:
            if worker is not None:
                self._forget(worker)
                worker.stop()

    def _forget(self, worker: _Worker) -> None:
        with self._idle:
            self._workers.discard(worker)

    def _setup(self, target: Any, modules: list[str]) -> dict:
        return {
            "sys_path": [p if p else os.getcwd() for p in sys.path],
            "cache_dir": cache_dir(),
            "target": (target.backend, target.arch, target.warp_size),
            "triton_file": os.path.abspath(sys.modules["triton"].__file__),
            "modules": modules,  # imported while it boots
            "nice": self.nice,
            "owner_pid": os.getpid(),  # it kills its group once this process has ended, even by SIGKILL
        }

    def _new_worker(self, setup: dict) -> _Worker:
        """A worker spawned with ``setup`` and booted (raises :class:`_WorkerLost`, ``OSError``:
        it is killed)."""
        if self._triton_key is None:
            self._triton_key = use_fast_triton_key()  # (the first worker only; remembered per Triton install)
        worker = _Worker(setup, self._triton_key)
        with self._idle:
            self._workers.add(worker)  # from now on close() sees it
        try:
            worker.boot()
        except BaseException:
            self._forget(worker)
            worker.kill()
            worker.stop()
            raise
        return worker

    def _started(self, target: Any, worker: _Worker | None) -> _Worker | None:
        """A worker for ``target`` started ahead of requests (``worker``, when one runs already)."""
        if worker is not None:
            return worker
        try:
            return self._new_worker(self._setup(target, []))
        except (_WorkerLost, OSError) as e:
            if not self._closed:
                note = (f"a background compile worker could not be started ahead of requests ({e}); the first "
                        "request starts one")
                with self._idle:
                    self.notes.append(note)
                logger.warning("zerojit: %s", note)
            return None

    def _task(self, job: CompileJob) -> tuple[dict, dict | None, str]:
        """The compile request, the launcher request (or None) and the entry's disk hash."""
        fn = job.jit_fn.fn
        script = _script.program_source_of(job.jit_fn)  # a __main__ kernel of zerojit exec: rebuilt from its source
        if script is None and (fn.__module__ == "__main__" or "<locals>" in fn.__qualname__):
            where = "in __main__" if fn.__module__ == "__main__" else "inside a function"
            raise ValueError(f"{fn.__module__}:{fn.__qualname__} is defined {where}, where a compile worker cannot "
                             "import it")
        src = _tc.ast_source(job.jit_fn, job.signature, job.constants, job.attrs)
        digest = _tc.disk_cache_hash(src, job.target, job.options)
        payload = pickle.dumps((job.signature, job.constants, job.attrs), protocol=pickle.HIGHEST_PROTOCOL)
        task = {"kind": "compile", "name": entry_name(digest), "function": f"{fn.__module__}:{fn.__qualname__}",
                "payload": payload, "options": job.options, "lock": entry_lock_path(entry_name(digest)),
                "kernel": job.kernel, **({"script": script} if script is not None else {})}
        launcher = None
        if active_compile_only() is None and _tc.cuda_launchers_in_use():  # Triton 3.6 on a GPU
            types = tuple(job.signature.values())
            key = _tc.launcher_key(types)
            if key is not None and _tc.cache_manager(key).get_file(_tc.launcher_file()) is None \
                    and not install_remembered_launcher(key):
                launcher = {"kind": "launcher", "name": f"launcher:{key}", "key": key, "signature": types,
                            "lock": launcher_lock_path(key)}
        return task, launcher, digest

    def _run(self, job: CompileJob, worker: _Worker | None) -> _Worker | None:
        """Compile ``job`` in ``worker`` (a new one when None or set up for another target or
        cache folder; replaced once if it is lost); returns the worker to keep."""
        try:
            task, launcher, digest = self._task(job)
        except Exception as e:
            self._fail(job, f"{type(e).__name__}: {e}")
            return worker
        setup = self._setup(job.target, _modules_of(job.jit_fn))
        reply: dict = {}
        for attempt in (1, 2):
            try:
                if worker is not None and (worker.setup["cache_dir"], worker.setup["target"]) != (
                        setup["cache_dir"], setup["target"]):
                    self._forget(worker)
                    worker.stop()
                    worker = None
                if worker is None:
                    worker = self._new_worker(setup)
                if launcher is not None:
                    answer = worker.ask(launcher, _watchdog.wall_limit(None))
                    if not answer.get("ok"):
                        self._fail(job, f"its launcher module failed to build: {answer.get('error')}")
                        return worker
                    remember_launcher(launcher["key"])
                    launcher = None
                reply = worker.ask(task, _watchdog.wall_limit(None))
                break
            except _WorkerLost as lost:
                if worker is not None:  # (one that failed to boot is stopped already)
                    self._forget(worker)
                    worker.kill()
                    worker.stop()
                worker = None
                if self._closed:
                    return None
                what = f"background compile worker {lost.pid} {lost.why}"
                if attempt == 2:
                    self._fail(job, f"{what}, twice (its request was tried in a second worker)")
                    return None
                note = (f"{what} while compiling kernel {job.kernel!r} ({job.key}); replaced, and the request "
                        "tried again")
                with self._idle:
                    self.notes.append(note)
                logger.warning("zerojit: %s", note)
        if not reply.get("ok"):
            self._fail(job, reply.get("error", "the compile worker gave no reason"))
            return worker
        if not self.build:
            with self._idle:
                self.compiled += 1
            return worker
        if self.defer_build:
            with self._idle:
                self.compiled += 1
            self.on_ready(job, functools.partial(self.build_or_fail, job, digest))
            return worker
        compiled = self.build_or_fail(job, digest)
        if compiled is None:
            return worker
        with self._idle:
            self.compiled += 1
        self.on_ready(job, compiled)
        return worker

    def build_or_fail(self, job: CompileJob, digest: str) -> Any | None:
        """:meth:`_build`, or None with the failure reported (the generic variant keeps serving)."""
        try:
            return self._build(job, digest)
        except Exception as e:
            self._fail(job, f"{type(e).__name__}: {e}")
            return None

    def _build(self, job: CompileJob, digest: str) -> Any:
        """The key's ``CompiledKernel`` from the disk cache, loaded on a GPU (after any open
        capture ends).

        Raises:
            FileNotFoundError: the worker's entry is not on disk (it would compile here).
            TimeoutError: a capture stayed open for :data:`LOAD_WAIT_S` seconds.
        """
        group = _tc.cache_manager(digest).get_group(_tc.metadata_file_name(job.jit_fn))
        if not group:
            raise FileNotFoundError(f"the compile worker's entry {entry_name(digest)} is not in the cache folder "
                                    f"{cache_dir()}")
        src = _tc.ast_source(job.jit_fn, job.signature, job.constants, job.attrs)
        with allow_compiles():  # a disk read this layer asked for: no runtime compile
            compiled = _tc.compile_source(src, job.target, job.options)
        if active_compile_only() is None:
            drv = _tc.active_driver()
            before = drv.get_current_device()
            drv.set_current_device(job.device)  # the key's device (the engine's thread: put back below)
            try:
                with _capture.no_capture(LOAD_WAIT_S):  # a capture that begins meanwhile waits for the load
                    _tc.load_compiled(compiled)
            finally:
                drv.set_current_device(before)
        return compiled

    def _fail(self, job: CompileJob, error: str) -> None:
        failure = BackgroundFailure(job.kernel, job.key, error)
        with self._idle:
            self.failures.append(failure)
        logger.warning("zerojit: %s", failure)
