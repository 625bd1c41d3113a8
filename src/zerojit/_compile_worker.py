"""A compile worker process: compiles Triton kernels into the shared disk cache for a warm-up.

:mod:`zerojit.precompile` forks it from the warm-up's process (:func:`fork_workers`, Linux: a copy
with everything imported, see its docstring), or starts it as ``python <this file>`` (a plain
script, so that importing it does not import the ``zerojit`` package first); what follows is
about the latter, and the protocol is both's. It imports only what compiling needs: Triton
and the modules that define the ``@triton.jit`` functions. ``torch`` is replaced by a stand-in
module that imports the real one on first attribute use, so kernel modules that merely
``import torch`` (and use it inside functions) do not pay its 1.5 s import; one that really uses
it at import time (a call, an annotation such as ``torch.Tensor | None`` evaluated when a
function is defined, an ``isinstance`` check) gets the real module, only more slowly. A module
may bind the kernel's name to its ``@triton.autotune`` / ``@triton.heuristics`` object: the
worker compiles the ``triton.jit`` function underneath. The worker never touches a GPU: its
Triton driver is zerojit's compile-only driver for the parent's exact target, and the parent
starts it with ``CUDA_VISIBLE_DEVICES=""``.

Protocol: the parent writes requests to stdin, the worker answers on its original stdout (then
points its fd 1 at stderr, so stray prints cannot corrupt the stream). Each message is a 4-byte
little-endian length and a pickle. The first request is the set-up (``sys.path``, cache folder,
target, the modules that define the kernels), sent at start; the worker answers it with its
ready message once booted (a set-up's ``nice`` is added to the worker's niceness first: a
warm-up's :func:`zerojit.precompile.worker_nice`, 0 unless asked; serving's background
workers' 19). Then come ``launcher`` requests (Triton 3.6 only: a launcher module needs no
build key; 3.7 builds none), ``{"triton_key": ...}`` (the parent's Triton build key, unanswered: sent once the parent has it, before the first ``compile`` request), and ``compile``
requests; each request is answered by one dict (before it, ``{"lock_wait": True}`` and
``{"lock_wait": False}`` around a wait for another process's lock on the entry); ``None`` ends
the worker, as does the end of the owner process the set-up names (``owner_pid``: even one
killed with SIGKILL, :func:`_die_with_owner`). A worker runs in its own process group (a spawned one in its own session), with the
``ptxas`` and C compiler it runs: the warm-up watches the group's CPU time and kills the group
of a hung compile (:mod:`zerojit.watchdog`).

A compile runs under the entry's file lock, so workers of several warm-ups (several processes on
one host) compile each entry once; Triton's ``compile`` re-checks the disk cache inside the lock
(:func:`entry_locked`: the same ``flock`` as the parent's ``filelock``, without its import).

Triton's private surfaces are reached through :mod:`zerojit.triton_compat`, imported (like
:mod:`zerojit.compile_only`) once the set-up has put the parent's ``sys.path`` in place.
"""

import time

STARTED_AT = time.time()  # the process's start, for the parent's timeline

import os
import sys

import contextlib
import importlib
import io
import pickle
import struct
import types

_LEN = struct.Struct("<I")


def _read_exactly(stream, n: int) -> bytes:
    """``n`` bytes from ``stream`` (a raw pipe returns what is there: read until all came)."""
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def read_message(stream):
    head = _read_exactly(stream, _LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("stream closed")
    (n,) = _LEN.unpack(head)
    body = _read_exactly(stream, n)
    if len(body) < n:
        raise EOFError("stream closed mid-message")
    return pickle.loads(body)


def write_message(stream, obj) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(body)) + body)
    stream.flush()


@contextlib.contextmanager
def entry_locked(path: str, waiting=None):
    """Hold the lock file ``path`` exclusively, excluding the ``filelock.FileLock`` that
    :func:`zerojit.cache.entry_lock` and :func:`zerojit.cache.launcher_lock` take on it in other
    processes. ``waiting(True)`` is called before it waits for another process's lock, and
    ``waiting(False)`` once it holds it (the warm-up does not count that wait as time without
    CPU: the other process's compile is watched by its own warm-up).

    filelock's Unix lock is ``fcntl.flock`` on the lock file, which stays in place; this takes
    the same ``flock`` (tests/test_parallel_warmup.py checks both ways against filelock), blocking
    like filelock's default (no timeout), and the OS drops it if the worker dies. A worker does
    not import filelock: on the H200 host that import is ~0.11 s of a worker's ~0.3 s of imports
    (recent filelock releases pull in asyncio and sqlite3), and every worker's boot is on a cold
    warm-up's critical path. Where ``flock`` cannot be used (a file system without it, a lock
    file this user cannot open), it falls back to filelock, which has its own answers there.
    """
    import fcntl

    fd = None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held by another process
            if waiting is not None:
                waiting(True)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if waiting is not None:
                waiting(False)
    except OSError:
        if fd is not None:
            os.close(fd)
        from filelock import FileLock

        with FileLock(path):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # releases the flock


class _ImportOnUse(types.ModuleType):
    """A stand-in for a heavy module: the real one is imported when something really uses it.

    An attribute read (``torch.cuda``, ``from torch import Tensor``) gives a :class:`_LazyAttr`,
    so module-level aliases do not import it; using the attribute (calling it, reading from it)
    or reading a dunder (``__path__`` for a submodule import) does.
    """

    def _zerojit_real(self):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            return getattr(self._zerojit_real(), attr)
        return _LazyAttr(self, attr)


class _LazyAttr:
    """``module.attr`` of an :class:`_ImportOnUse` module, resolved on first use."""

    __slots__ = ("_owner", "_attr")

    def __init__(self, owner, attr):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_attr", attr)

    def _zerojit_value(self):
        return getattr(object.__getattribute__(self, "_owner")._zerojit_real(), object.__getattribute__(self, "_attr"))

    def __getattr__(self, attr):
        return getattr(self._zerojit_value(), attr)

    def __call__(self, *args, **kwargs):
        return self._zerojit_value()(*args, **kwargs)

    # Module-level uses of a torch name that are not attribute reads or calls. An annotation
    # evaluated at definition time (``x: torch.Tensor | None``, ``torch.Tensor[...]``) stays
    # deferred (nothing reads it in a worker); an isinstance/issubclass check resolves the real
    # value (importing torch), then does what it would do.
    def __or__(self, other):
        return _Deferred(lambda: self._zerojit_value() | _real(other))

    def __ror__(self, other):
        return _Deferred(lambda: _real(other) | self._zerojit_value())

    def __getitem__(self, item):
        return _Deferred(lambda: self._zerojit_value()[item])

    def __instancecheck__(self, obj):
        return isinstance(obj, self._zerojit_value())

    def __subclasscheck__(self, cls):
        return issubclass(cls, self._zerojit_value())

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_owner').__name__}.{object.__getattribute__(self, '_attr')}, not imported>"


class _Deferred(_LazyAttr):
    """An expression over an :class:`_LazyAttr` (``torch.Tensor | None``), evaluated on first use."""

    __slots__ = ()

    def __init__(self, thunk):
        object.__setattr__(self, "_owner", thunk)
        object.__setattr__(self, "_attr", None)

    def _zerojit_value(self):
        return object.__getattribute__(self, "_owner")()

    def __repr__(self):
        return "<an expression over a module not imported yet>"


def _real(value):
    return value._zerojit_value() if isinstance(value, _LazyAttr) else value


def install_lazy(name: str = "torch") -> None:
    """Put an :class:`_ImportOnUse` stand-in for module ``name`` in ``sys.modules`` (if not imported)."""
    if name not in sys.modules:
        sys.modules[name] = _ImportOnUse(name)


def lazy_still(name: str = "torch") -> bool:
    """True while module ``name`` is still the stand-in (nothing used it for real)."""
    return isinstance(sys.modules.get(name), _ImportOnUse)


class Worker:
    def __init__(self, setup: dict) -> None:
        sys.path[:] = setup["sys_path"]
        install_lazy("torch")  # (done by preload() already, unless it is a test calling Worker)
        import triton

        # Importable only now (sys.path came with the set-up); the worker is a plain script so
        # that its boot imports no more of zerojit than compiling needs.
        from zerojit import triton_compat
        from zerojit.compile_only import CompileOnlyDriver
        from zerojit.integrity import checked_manager_class

        self.tc = triton_compat
        triton_compat.set_cache_dir(setup["cache_dir"])
        self.same_triton = os.path.abspath(triton.__file__) == setup.get("triton_file")
        self.target = triton_compat.gpu_target(*setup["target"])
        # the parent's exact target (warp size included), checked there: not asked of ptxas again
        drv = CompileOnlyDriver(f"{self.target.backend}:{self.target.arch}", gpu_target=self.target)
        # the machine view: a kernel's module imports as in a program run here (FLA asks Triton's
        # driver for the GPU at import); compile_source compiles for the target
        triton_compat.set_driver(drv, machine_view=True)
        # digests of what it stores, written before each entry's group file; a damaged entry is a miss
        triton_compat.set_cache_manager_class(
            checked_manager_class(triton_compat.cache_manager_class() or triton_compat.default_cache_manager))
        self.functions: dict = {}
        self.scripts = None  # a zerojit.script_kernels.Rebuilder, made at the first __main__ kernel
        self.waiting = None  # called with True/False around a wait for another process's entry lock (serve)
        self.hit: list = []  # the current compile's cache hits, from Triton's listener
        self.stages: list = []  # and its (stage, seconds)
        previous = triton_compat.get_compile_listener()

        def listener(*, src, metadata, metadata_group, times, cache_hit, **kw):
            self.hit.append(cache_hit)
            self.stages = [("ir", times.ir_initialization / 1e6), *((k, v / 1e6) for k, v in times.lowering_stages),
                           ("store", times.store_results / 1e6)]
            if previous is not None:
                previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit, **kw)

        triton_compat.set_compile_listener(listener)

    def use_triton_key(self, key: str | None) -> None:
        """Use the parent's Triton build key (same installation: no need to hash it again)."""
        if key and self.same_triton:
            self.tc.set_build_key_function(lambda: key)

    def function(self, qualified: str):
        """The ``triton.jit`` function ``"module:qualname"`` (a failed import is remembered and
        raised again, not retried for every key)."""
        fn = self.functions.get(qualified)
        if isinstance(fn, BaseException):
            raise fn
        if fn is None:
            try:
                fn = self.functions[qualified] = self._import(qualified)
            except Exception as e:
                self.functions[qualified] = e
                raise
        return fn

    def _import(self, qualified: str):
        module_name, _, qualname = qualified.partition(":")
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        while self.tc.is_autotuner(obj) or self.tc.is_heuristics(obj):  # the module binds the decorated object
            obj = self.tc.wrapped_function(obj)
        if not isinstance(obj, self.tc.JITFunction):
            raise TypeError(f"{qualified} is a {type(obj).__name__}, not a triton.jit function")
        return obj

    def script_function(self, qualified: str, data: dict):
        """The ``triton.jit`` function a ``__main__`` kernel's recorded ``program_source`` builds
        (:mod:`zerojit.script_kernels`, all in one namespace as in the parent; remembered like an
        import). Its ``cache_key`` is the parent's to check: an entry under another key is
        another entry, which the parent then misses and compiles itself."""
        fn = self.functions.get(qualified)
        if isinstance(fn, BaseException):
            raise fn
        if fn is None:
            from zerojit.script_kernels import Rebuilder

            try:
                self.scripts = self.scripts or Rebuilder()
                fn = self.functions[qualified] = self.scripts.function(data)
            except Exception as e:
                self.functions[qualified] = e
                raise
        return fn

    def compile(self, task: dict) -> dict:
        try:
            script = task.get("script")
            fn = self.script_function(task["function"], script) if script else self.function(task["function"])
            signature, constants, attrs = pickle.loads(task["payload"])
        except Exception as e:
            return {"ok": False, "unavailable": True, "error": f"{type(e).__name__}: {e}"}
        start = time.perf_counter()
        try:
            with entry_locked(task["lock"], self.waiting):
                self.hit, self.stages = [], []
                compiled = self.tc.compile_source(self.tc.ast_source(fn, signature, constants, attrs), self.target,
                                                  task["options"])
        except Exception as e:
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - start}
        return {"ok": True, "hash": compiled.hash, "compiled": self.hit == [False], "stages": self.stages,
                "seconds": time.perf_counter() - start}

    def launcher(self, task: dict) -> dict:
        """Build (and cache) the CUDA launcher module of a signature, as Triton 3.6's
        ``CudaLauncher`` would at the kernel's first load (3.7 and later ask for none)."""
        start = time.perf_counter()
        try:
            with entry_locked(task["lock"], self.waiting):
                self.tc.build_launcher(tuple(task["signature"]))
        except Exception as e:
            return {"ok": False, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - start}
        return {"ok": True, "seconds": time.perf_counter() - start}


def probe(modules) -> None:
    """``python _compile_worker.py --probe MODULE...``: import the modules as a worker would and print
    whether torch had to be imported for real (a regression guard: a module that uses torch at
    import time costs every worker torch's whole import)."""
    install_lazy("torch")
    for m in modules:
        importlib.import_module(m)
    print("torch imported" if not lazy_still("torch") else "torch not imported")


def preload(setup: dict, requests) -> dict:
    """Get the compiler going before the first request.

    Imports Triton's compiler (torch gets its stand-in first), zerojit's compile-only driver and
    the modules that define the kernels to compile (``setup["modules"]``). Then, only while no
    message waits (the parent is still hashing Triton's build for its key on a new Triton
    install, ~0.5 s, and has no launcher to build either), compiles a tiny kernel for the
    parent's target into a throwaway cache folder, so that the first real compile does not pay
    the compiler's first-use costs (its code generator's first run, LLVM's target set-up, the
    first ptxas run) on top. With the key or a launcher request there, a real compile pays them
    and nothing is thrown away (measured on the H200: the throwaway costs ~0.2 s a worker, the
    first real compile ~0.15 s more than the others).
    Nothing of it reaches the shared cache; a failure here changes nothing (a request that needs
    what failed reports it). Returns when (``time.time()``) each step ended, for the parent's
    timeline.

    The worker runs without ``site`` (``python -S``: the ``.pth`` files of a large environment
    cost ~50 ms a process) on the parent's ``sys.path``; an import that fails that way is
    retried once after ``site.main()``, for what a ``.pth`` file's import hook provides (e.g. an
    editable install's finder).
    """
    install_lazy("torch")
    sys.path[:] = setup["sys_path"]
    times = {"started_at": STARTED_AT}
    try:
        _import_with_site_fallback("triton.backends.nvidia.compiler", "triton.compiler.compiler",
                                   "zerojit.triton_compat", "zerojit.compile_only", *setup.get("modules", ()))
        times["imported_at"] = time.time()
        if not _readable(requests):
            _compile_throwaway(*setup["target"])
            times["preloaded_at"] = time.time()
    except Exception:
        pass
    return times


def _import_with_site_fallback(*modules: str) -> None:
    """Import ``modules``; on an ImportError, run ``site`` once and retry those. What still fails
    is left to the set-up (Triton, zerojit) or to the request that needs it (a kernel module) to
    report."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            failed.append(name)
        except Exception:
            pass
    if failed and "site" not in sys.modules:
        import site

        site.main()
        for name in failed:
            try:
                importlib.import_module(name)
            except Exception:
                pass


def _readable(stream) -> bool:
    """True when a message is waiting on ``stream`` (an unbuffered pipe)."""
    import select

    return bool(select.select([stream], [], [], 0)[0])


def _compile_throwaway(backend: str, arch: int, warp_size: int) -> None:
    import tempfile

    import triton
    import triton.language as tl

    from zerojit import triton_compat as tc  # after the set-up's sys.path, like compile_only

    @triton.jit
    def _preload_kernel(x_ptr, n):
        offs = tl.arange(0, 128)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    real_key, real_dir = tc.build_key_function(), tc.cache_dir()
    with tempfile.TemporaryDirectory(prefix="zerojit-preload-") as tmp:
        tc.set_cache_dir(tmp)
        tc.set_build_key_function(lambda: "zerojit-worker-preload")  # not the real build key: never shared
        try:
            tc.compile_source(tc.ast_source(_preload_kernel, {"x_ptr": "*i32", "n": "i32"}),
                              tc.gpu_target(backend, arch, warp_size))
        finally:
            tc.set_build_key_function(real_key)
            tc.set_cache_dir(real_dir)


def serve(setup: dict, boot: dict, requests, replies, *, forked: bool = False) -> None:
    """Set the worker up, send the ready message (``boot``: when its boot steps ended), then
    answer requests until ``None`` or the end of ``requests``. ``forked``: this process is a copy
    of the parent (:func:`fork_workers`), whose Triton state it first puts back to plain."""
    try:
        if forked:
            _plain_triton_state()
        worker = Worker(setup)
    except Exception as e:
        write_message(replies, {"ok": False, "fatal": True, "error": f"worker set-up failed: {type(e).__name__}: {e}"})
        return
    if forked:  # no throwaway compile: the parent's imports (its compiler's included) are its own already
        worker.use_triton_key(setup.get("triton_key"))
    # between a request and its answer: the worker waits for another process's lock on the entry
    worker.waiting = lambda waiting: write_message(replies, {"lock_wait": waiting})
    write_message(replies, {"ok": True, "ready": True, **boot, "ready_at": time.time(), "pid": os.getpid(),
                            "forked": forked, "torch_imported": not forked and not lazy_still("torch")})
    while True:
        try:
            task = read_message(requests)
        except EOFError:  # the parent needs no more workers
            return
        if task is None:
            return
        if "triton_key" in task:
            worker.use_triton_key(task["triton_key"])
            continue
        cpu = _cpu_seconds()
        reply = worker.compile(task) if task["kind"] == "compile" else worker.launcher(task)
        reply["cpu"] = _cpu_seconds() - cpu
        reply["torch_imported"] = not forked and not lazy_still("torch")
        write_message(replies, reply)


def _die_with_owner(owner: "int | None") -> None:
    """Kill this worker's process group, its ``ptxas`` included, as soon as the process that owns
    the worker (``owner``: the warm-up's or the server's) has ended. An owner that ends normally or
    by an exception closes its workers itself; this is for one that ran no code at its end
    (SIGKILL, the OOM killer): the worker would finish its compile first, and a hung ``ptxas``
    would stay for ever. Watched on a thread through a pidfd of the owner (Linux 5.3+: it cannot
    name another process that reused the pid); where there is none, nothing is watched and the
    worker ends at its request pipe's end, as before."""
    if not owner or os.getpgrp() != os.getpid():  # not its own group's leader: the group may be the owner's
        return
    import select
    import signal
    import threading

    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:  # it ended before this worker could watch it
        os.killpg(os.getpgrp(), signal.SIGKILL)
        return
    except (AttributeError, OSError):  # no pidfd on this system
        return

    def watch() -> None:
        select.select([fd], [], [])  # readable once the owner has ended
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="zerojit-owner-watch", daemon=True).start()


def _cpu_seconds() -> float:
    """This process's CPU time and that of its ended subprocesses (``ptxas``, a C compiler)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _renice(setup: dict) -> None:
    """Lower this worker's priority by the set-up's ``nice`` (``ZEROJIT_WORKER_NICE``, or
    serving's 19), so other work comes first on a busy host (``ptxas``, which it runs, inherits it)."""
    if setup.get("nice"):
        os.nice(setup["nice"])


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # no sibling as a top-level module
    if sys.argv[1:2] == ["--probe"]:
        return probe(sys.argv[2:])
    requests = io.FileIO(0, "rb", closefd=False)  # unbuffered: select() sees every waiting message
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed from here on goes to stderr, never into the reply stream
    sys.stdout = sys.stderr
    setup = read_message(requests)  # sent at once: everything but Triton's build key
    _die_with_owner(setup.get("owner_pid"))  # before the boot: its throwaway compile runs ptxas too
    _renice(setup)
    serve(setup, preload(setup, requests), requests, replies)


# ---------------------------------------------------------------------------------------------
# Forked workers: a copy of the parent, which has Triton and the kernels' modules imported already
# ---------------------------------------------------------------------------------------------

def _ended(pid: int) -> bool:
    """Whether ``pid`` has ended but not been reaped yet (a zombie): signal 0 still reaches it.
    A killed descendant stays one until its parent reaps it, and once that parent is killed too,
    until the process that adopts it does (``init``, a container's first process or a subreaper,
    some of which reap late or never): a wait on it would take that long (an interrupted warm-up's
    kill waited 1.5 s here for each)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (macOS): as before, signal 0 decides
        return False
    return state in (b"Z", b"X")


class ForkedProcess:
    """The parent's handle on a worker made by :func:`fork_workers`: the parts of
    ``subprocess.Popen`` the pool uses (``pid``, ``stdin``, ``stdout``, ``wait``, ``kill``).

    Only the first worker of a tree is this process's child. The others are its descendants: their
    ``pid`` is None until their ready message names it (:meth:`learn_pid`), ``poll`` tells only
    whether they still run (their exit status goes to their own parent, which reaps them), and
    ``kill`` signals them by pid."""

    def __init__(self, pid: "int | None", stdin, stdout, *, child: bool = True) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.child = child
        self.returncode = None

    def read(self):
        """The worker's next message. ``EOFError`` once it ended; a worker that ends with an error
        says its exit status first (:func:`_forked_tree`), which ``poll`` then returns: a
        descendant's status would otherwise go to its own parent only."""
        message = read_message(self.stdout)
        if isinstance(message, dict) and message.keys() == {"exit", "pid"}:
            self.learn_pid(message["pid"])
            self.returncode = message["exit"]
            raise EOFError("stream closed")
        return message

    def learn_pid(self, pid: int) -> None:
        """The pid a descendant's ready message gave (a child's own is known from its fork)."""
        if self.pid is None:
            self.pid = pid

    def poll(self):
        """The exit code (negative: the signal that ended it) once it ended, else None; 0 for an
        ended descendant (its status is its own parent's)."""
        if self.returncode is None and self.pid is not None:
            if not self.child:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    self.returncode = 0
                except PermissionError:  # the pid went to another user's process: ours ended
                    self.returncode = 0
                else:
                    if _ended(self.pid):
                        self.returncode = 0
                return self.returncode
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost
                self.returncode = 0
                return 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        """Wait for it to end (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        import subprocess

        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"compile worker {self.pid}", timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None and self.pid is not None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Close the parent's ends of its pipes."""
        for f in (self.stdin, self.stdout):
            try:
                f.close()
            except OSError:
                pass


def fork_workers(setup: dict, stderr_fds: "list[int]") -> "list[ForkedProcess]":
    """Fork ``len(stderr_fds)`` compile workers (Linux; called by :mod:`zerojit.precompile`).

    This process forks once; that child forks the others as a binary tree (each process forks
    the upper half of the workers it stands for, then the upper half of the rest, and so on), so
    16 workers take 4 rounds of forks, run in parallel on other cores, instead of 16 forks in a
    row in this process. A fork of a large process costs 10-20 ms (it copies the page tables),
    and every fork makes this process copy each page it writes next (copy-on-write): one fork
    here instead of N keeps both off the warm-up's thread.

    Each child is a copy of this process, so Triton, zerojit and the kernels' modules are
    imported already: it boots in milliseconds where a new interpreter takes 0.3-0.5 s (and a
    kernels' module that imports torch, seconds). It serves the same protocol as a spawned worker
    over two pipes made here (without the set-up message: ``setup`` is in its memory), writes
    what it prints to its ``stderr_fds`` entry, and ends with ``os._exit`` (none of this
    process's exit handlers run). It never touches a GPU: its Triton driver is the compile-only
    one, as in a spawned worker.

    Forking a process whose other threads hold locks is safe for what the child runs as long as
    the child never needs those locks: it uses none of this process's objects but Triton's
    compiler, and Python re-creates its own locks at a fork. A C library's lock held by another
    thread at that moment (a compile running on another thread, inside LLVM) would block the
    child; the pool forks from the thread that runs the warm-up, before its compiles, once its
    own thread running ``ptxas --version`` has ended. A descriptor another thread had open at
    that moment (a subprocess's pipe, whose reader waits for its end) is closed in the child
    first thing (:func:`_close_all_but`). The tree's other forks happen in a child, which has one
    thread. Each worker moves to a process group of its own (:func:`_own_group`).

    Returns the workers' handles, in ``stderr_fds`` order (the first is this process's child).

    Raises:
        OSError: the fork or the pipes failed (the caller spawns workers instead).
    """
    import warnings

    pipes: list = []  # per worker: (requests_r, requests_w, replies_r, replies_w)
    try:
        for _ in stderr_fds:
            pipes.append(os.pipe() + os.pipe())
        with warnings.catch_warnings():
            # Python 3.12+ warns at every fork of a process with threads; the paragraph above is
            # why this child is safe (the warning is about children that need those threads' locks)
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            pid = os.fork()
    except OSError:
        _close(fd for p in pipes for fd in p)
        raise
    if pid == 0:
        _forked_tree(setup, pipes, list(stderr_fds))
    _own_group(pid)
    procs = []
    for i, (requests_r, requests_w, replies_r, replies_w) in enumerate(pipes):
        os.close(requests_r)
        os.close(replies_w)
        # replies unbuffered: the warm-up select()s on the pipe between messages, and a buffer
        # could hold a whole message select() does not see
        procs.append(ForkedProcess(pid if i == 0 else None, os.fdopen(requests_w, "wb"),
                                   os.fdopen(replies_r, "rb", buffering=0), child=i == 0))
    return procs


def _own_group(pid: int) -> None:
    """Put forked worker ``pid`` in a process group of its own (called in the parent and in the
    child, so neither has to wait for the other): the warm-up kills a hung worker's whole group,
    its ``ptxas`` included, and no other worker's."""
    try:
        os.setpgid(pid, pid)
    except OSError:  # the other side did it first and the child moved on (or it ended)
        pass


def _close_all_but(keep: set) -> None:
    """Close every descriptor of this (forked, single-threaded) process but ``keep``; fd 0 reads
    ``/dev/null``. A fork copies them all: a pipe another thread of the parent had open at that
    moment (a ``subprocess``'s, say ``ptxas --version``'s) would otherwise stay open here, and
    whoever waits for its end-of-file (that subprocess's caller) would wait for this worker."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    keep = set(keep) | {0, 1, 2}
    try:
        open_fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every number up to the limit
        open_fds = range(os.sysconf("SC_OPEN_MAX"))
    _close(fd for fd in open_fds if fd not in keep)


def _close(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _forked_tree(setup: dict, pipes: list, stderr_fds: list) -> None:
    """A forked child standing for every worker of ``pipes``: forks the tree's other workers
    (:func:`fork_workers`), then serves as the first. Never returns (``os._exit``)."""
    code, replies_fd, reapers = 1, None, []
    try:
        started = time.time()
        import gc

        # The parent's objects move to the permanent generation: the collector never walks them
        # (walking them writes to each one, copying the pages the child shares with the parent;
        # measured: +34% CPU time per compile without this). Done once: the tree's forks inherit it.
        gc.freeze()
        import signal

        try:
            signal.set_wakeup_fd(-1)  # not into the parent's event loop (whose descriptor closes next)
        except ValueError:
            pass
        _own_group(0)
        # Only the ends these workers use stay open: not the parent's ends of earlier workers' pipes
        # (EOF must reach those workers when the parent ends) or of these, nor anything else.
        _close_all_but({fd for p in pipes for fd in (p[0], p[3])} | set(stderr_fds))
        mine, children = list(range(len(pipes))), []
        while len(mine) > 1:
            keep, give = mine[:(len(mine) + 1) // 2], mine[(len(mine) + 1) // 2:]
            try:
                pid = os.fork()
            except OSError:  # those workers' pipes close with this process's: the parent sees them die
                pid = -1
            if pid == 0:
                _own_group(0)
                started, mine, children = time.time(), give, []
                _close(fd for i in keep for fd in (pipes[i][0], pipes[i][3]))
            else:
                if pid > 0:  # it serves as give[0]: where to say how it ended (its exit status is ours)
                    _own_group(pid)
                    children.append((pid, os.dup(pipes[give[0]][3])))
                _close(fd for i in give for fd in (pipes[i][0], pipes[i][3]))
                mine = keep
        if children:  # each is this process's to reap (never the warm-up's: it is not their parent)
            import threading

            reapers = [threading.Thread(target=_reap_child, args=child, daemon=True) for child in children]
            for reaper in reapers:
                reaper.start()
        own = mine[0]
        replies_fd = os.dup(pipes[own][3])  # its own: serve's stream may close the other on the way out
        _serve_forked(setup, started, pipes[own][0], pipes[own][3], stderr_fds[own])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        if code and replies_fd is not None:
            _say_exit(replies_fd, os.getpid(), code)
        for reaper in reapers:  # the workers it forked end with it (stopped together): reaped, no zombie left
            reaper.join(timeout=5)
        os._exit(code)


def _say_exit(replies_fd: int, pid: int, code: int) -> None:
    """A worker's last message: how it ended (read by :meth:`ForkedProcess.read`)."""
    try:
        body = pickle.dumps({"exit": code, "pid": pid})
        os.write(replies_fd, _LEN.pack(len(body)) + body)
    except BaseException:  # the parent stopped reading: nobody to tell
        pass


def _reap_child(pid: int, replies_fd: int) -> None:
    """Reap a worker this tree process forked, and tell the warm-up if it ended badly (a signal,
    too: it could not say so itself) on its reply stream, of which this holds a copy till then."""
    try:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code:
            _say_exit(replies_fd, pid, code)
    except ChildProcessError:
        pass
    finally:
        _close((replies_fd,))


def _serve_forked(setup: dict, started: float, requests_fd: int, replies_fd: int, stderr_fd: int) -> None:
    """One forked worker's life once the tree is forked: its output to ``stderr_fd``, the
    parent's signal handlers off, then the protocol on its two pipe ends."""
    os.dup2(stderr_fd, 1)  # stray output (ptxas, LLVM) goes where a spawned worker's stderr goes
    os.dup2(stderr_fd, 2)
    sys.stdout = sys.stderr = open(2, "w", closefd=False)
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)  # not the parent's handlers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _renice(setup)
    _die_with_owner(setup.get("owner_pid"))
    serve(setup, {"started_at": started}, io.FileIO(requests_fd, "rb", closefd=False),
          os.fdopen(replies_fd, "wb"), forked=True)


def _plain_triton_state() -> None:
    """In a forked child: Triton's compilation listener and cache manager as a new process has
    them (the parent's warm-up session replaced both; nothing of its bookkeeping may run here)."""
    from zerojit import triton_compat as tc

    tc.set_compile_listener(None)
    tc.unwatch_toolchain()  # the warm-up watches this worker's group whole, its ptxas included
    manager = tc.cache_manager_class()
    base = getattr(manager, "_zerojit_base", None)
    while base is not None:  # a session's manager, perhaps over another session's
        manager, base = base, getattr(base, "_zerojit_base", None)
        tc.set_cache_manager_class(manager)


if __name__ == "__main__":
    main()
