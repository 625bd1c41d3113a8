"""The learned-keys file: every key that missed after warm-up, warmed at the next start-up.

A key space is never complete: a new batch size, a new block-table width, an argument in a class
the warm-up never produced. Each such *miss* (a runtime compile the monitor sees in warn or error
mode, or a launch the serving fallback serves) is appended by :func:`record_miss` to one file
beside Triton's cache::

    <triton cache dir>/.zerojit/learned-<target>-triton<version>.jsonl     (learned_path)

(``learned-cuda90-triton3.6.0.jsonl``: one file per compile target and Triton version, since the
keys are that Triton's for that target). It holds JSON lines, one record per distinct key, in the
manifest's key format (docs/manifest.md, "The learned-keys file"): the function's identity
(module, qualified name, Triton's source hash, parameters, constexprs), Triton's
``(type, attr)`` pair of each parameter, a representative value of each int, float and bool
argument's class, the launch options passed, the zerojit kernel's name, and for a contract
kernel the :class:`CompileKey` the launch dispatched (``compile_key``; null where it has no exact
JSON form or none could be found), plus the Triton version and target.

The next warm-up of the same process kind (``JitWarmupRegistry.warmup(learned=True)``, the
default; ``zerojit run``, ``warmup --manifest`` and ``exec``, with ``--no-learned`` to skip)
warms the learned keys of the kernels registered or recorded in that process (:func:`plan`): a
contract kernel's key through its ``CompileKey`` where the record has one (``kernel.compile``:
the lint's dispatch check applies), else as a recorded key (a
:class:`~zerojit.manifest.RecordedKernel`, as a manifest's). ``zerojit learned show | clear |
merge -o M`` lists, clears or merges the file into a manifest.

Faults are never fatal: appends take a file lock (``filelock``, at most :data:`LOCK_TIMEOUT_S`:
an ``O_APPEND`` write is atomic neither past 4 KiB nor on NFS), a file or folder that cannot be
written gives one ``logging`` warning (logger ``"zerojit.learned"``) and serving goes on; a
corrupted line, or a record of another Triton, target or kernel source, is skipped and named
when the file is read (:func:`read_learned`), and a learned key that fails to compile at warm-up
is skipped and named too (:meth:`LearnedPlan.failed`), never a failure of the warm-up. Each
kernel holds at most its key budget of records (the kernel class's ``key_budget``, else
:data:`~zerojit.keyspace.DEFAULT_KEY_BUDGET`); past it, one warning and no more appends.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import inspect
import json
import logging
import os
import queue
import stat
import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from . import lint
from . import triton_compat as _tc
from .compile_only import current_target_name
from .integrity import NotRegularFileError, open_regular, read_regular
from .kernel import KernelDefinitionError, TritonJitKernel
from .keyspace import DEFAULT_KEY_BUDGET
from .manifest import (KernelRecord, Manifest, RecordedKernel, RecordedKey, RecordedSpecialization, decode_exact,
                       encode_exact, encode_value, read_manifest, recorded_kernel, write_manifest)
from .manifest import _hashable  # the manifest's frozen forms of JSON values: learned keys equal recorded ones
from .manifest import _INT_OPTIONS  # the launch options whose value is an int, checked as a manifest's
from .reports import LEARNED_SUFFIX
from .specialization import SpecClass
from .switches import switch
from .watchdog import CompileHung

__all__ = ["ENV_VAR", "VERSION", "LOCK_TIMEOUT_S", "LearnedError", "LearnedRecord", "LearnedSkip", "LearnedPlan",
           "learned_path", "enabled", "record_miss", "read_learned", "clear", "merged_manifest",
           "merge_into_manifest", "plan", "forget"]

#: The environment variable that turns recording off (``ZEROJIT_LEARN=0``); warming learned keys
#: is turned off per warm-up (``learned=False``, ``--no-learned``).
ENV_VAR = "ZEROJIT_LEARN"
#: The record format's version (each line's ``version`` field); another is skipped when read.
VERSION = 1
#: The most seconds an append or a clear waits for the file's lock (a miss is on the request
#: path): past it, one warning and the record is dropped.
LOCK_TIMEOUT_S = 2.0

_ENTRY_PREFIX = "<zerojit launch entry of"  # kernel._make_entry's code file name
_INT_TYPES = ("i32", "i64", "u64")
_INT_REPS = {"D": {"i32": 16, "i64": 2**32, "u64": 2**63}, "": {"i32": 17, "i64": 2**32 + 1, "u64": 2**63 + 1}}
_FLOAT_REP = 0.5  # specialization.scalar_rep's float: every finite float is one class

logger = logging.getLogger("zerojit.learned")


class LearnedError(ValueError):
    """The learned-keys file cannot be named (no compile target) or a merge base is unusable."""


@dataclass(frozen=True)
class LearnedSkip:
    """A line of a learned-keys file that was not used, and why.

    Attributes:
        where: ``"<file>:<line>"``.
        kernel: the record's kernel (``module.qualname``), or None for a line that is no record.
        reason: what differs or is wrong, in words.
    """

    where: str
    kernel: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kernel + ': ' if self.kernel else ''}{self.reason}"


@dataclass(frozen=True)
class LearnedRecord:
    """One learned key (a line of the file), as read.

    Attributes:
        kernel: the zerojit kernel's name (a contract kernel's ``name``; else the function's name).
        module, qualname, source_hash, parameters, constexprs: the ``triton.jit`` function, as a
            manifest names it (:class:`~zerojit.manifest.KernelRecord`).
        specialization: Triton's ``(type, attr)`` pair per parameter, constexpr values through
            :func:`~zerojit.manifest.encode_value`, hashable.
        values: a representative of each int, float and bool argument's class, by parameter.
        options: the launch options passed, in the order passed.
        compile_key: a contract kernel's ``CompileKey`` fields (name -> value, decoded), or None.
        triton_version, target: what the key was learned with (``"3.6.0"``, ``"cuda:90"``).
        line: the line number in the file (1-based).
    """

    kernel: str
    module: str
    qualname: str
    source_hash: str
    parameters: tuple[str, ...]
    constexprs: tuple[str, ...]
    specialization: tuple[tuple[str, Any], ...]
    values: tuple[tuple[str, Any], ...]
    options: tuple[tuple[str, Any], ...]
    compile_key: dict[str, Any] | None
    triton_version: str
    target: str
    line: int = 0

    @property
    def function(self) -> str:
        """``module.qualname``: the function's name in messages."""
        return f"{self.module}.{self.qualname}"

    @property
    def key(self) -> RecordedKey:
        """The key as a manifest kernel's: Triton's pairs and the options."""
        return RecordedKey(self.specialization, self.options)

    def recorded(self) -> RecordedSpecialization:
        """The key as a manifest specialization (no launch counted: it was learned, not recorded)."""
        return RecordedSpecialization(self.specialization, tuple(sorted(self.values)), self.options, 0)


# ---------------------------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------------------------


def learned_path(cache_dir: str | None = None, target: str | None = None) -> str:
    """The learned-keys file: ``<cache_dir>/.zerojit/learned-<target>-triton<version>.jsonl``.

    Args:
        cache_dir: Triton's cache folder (default: this process's, ``TRITON_CACHE_DIR``).
        target: a target name (``"cuda:90"``; default: the compile-only target, else the GPU's);
            written without its colon (``cuda90``).

    Raises:
        LearnedError: no target given and none active (no GPU, no compile-only block), or no
            cache folder.
    """
    folder = cache_dir if cache_dir is not None else _tc.cache_dir()
    if not folder:
        raise LearnedError("Triton's cache folder is not set (TRITON_CACHE_DIR is empty): there is no learned-keys "
                           "file")
    target = target if target is not None else current_target_name()
    if target is None:
        raise LearnedError("no GPU is visible and no compile-only target is active: name the target (e.g. cuda:90)")
    slug = target.replace(":", "")
    return os.path.join(folder, ".zerojit", f"learned-{slug}-triton{_tc.TRITON_VERSION}.jsonl")


def enabled() -> bool:
    """Whether misses are recorded: unless ``ZEROJIT_LEARN`` is off (``0``, ``false``, ``no``,
    ``off``: :func:`zerojit.switches.switch`).

    Raises:
        zerojit.switches.SwitchSettingError: it holds another value (a warm-up checks it first).
    """
    return switch(ENV_VAR)


# ---------------------------------------------------------------------------------------------
# Recording a miss
# ---------------------------------------------------------------------------------------------


class _FileState:
    """What this process knows of one learned-keys file: every key in it (read up to ``offset``,
    of the file with inode ``inode``) and each kernel's record count."""

    def __init__(self) -> None:
        self.inode: int | None = None
        self.offset = 0
        self.keys: set[str] = set()
        self.counts: dict[tuple[str, str], int] = {}
        self.capped: set[tuple[str, str]] = set()  # kernels whose budget was met (warned once)
        self.warned = False  # one warning per file for an unwritable file or a lock timeout
        self.torn = False  # the file's last line has no newline (a writer died mid-line)


_STATE_LOCK = threading.Lock()  # the table below, briefly
_APPEND_LOCK = threading.Lock()  # an append (file lock, read, write): at most LOCK_TIMEOUT_S of waiting
_FILES: dict[str, _FileState] = {}


def forget() -> None:
    """Forget what this process knows of learned-keys files (tests; a file cleared by hand)."""
    with _STATE_LOCK:
        _FILES.clear()


def _identity(module: str, qualname: str, source_hash: str, specialization: Any, options: Any) -> str:
    # JSON-native values (as written and as read back) give the same text: one key, one identity
    return json.dumps([module, qualname, source_hash, specialization, options], separators=(",", ":"))


def _pair(entry: Any) -> tuple[str, Any]:
    if isinstance(entry, SpecClass):
        return entry.type, entry.attr
    ty, attr = entry
    return str(ty), attr


def _representative(ty: str, attr: Any) -> Any:
    """A value of the class ``(ty, attr)`` (what :func:`zerojit.specialization.scalar_rep` gives a
    value of that class: the warm-up passes it)."""
    if ty == "u1":
        return False
    if ty == "fp32":
        return _FLOAT_REP
    if attr == 1:  # an annotated int equal to one
        return 1
    return _INT_REPS["" if attr is None else attr][ty]


def _entry_frame(jit_fn: Any) -> Any:
    """The frame of the zerojit launch entry (``kernel._make_entry``'s ``__call__``) of a kernel
    of ``jit_fn`` below this call, or None."""
    frame = sys._getframe(2)
    for _ in range(64):  # the entry is a few frames below Triton's _do_compile; a raw launch has none
        if frame is None:
            return None
        if frame.f_code.co_filename.startswith(_ENTRY_PREFIX):
            kernel = frame.f_locals.get("self")
            if isinstance(kernel, TritonJitKernel) and _tc.unwrap_jit_function(type(kernel).kernel) is jit_fn:
                return frame
        frame = frame.f_back
    return None


def _dispatched(kernel: Any, frame: Any) -> Any:
    """The CompileKey of the launch in entry ``frame``: ``key_for`` of its inputs (a checked
    kernel); else the key its launcher's ``dispatch`` returned, found as the warm-up's dispatch
    check finds it (the launcher method run again under a :class:`~zerojit.lint.WarmupKeyCheck`:
    it computes a LaunchSpec, launches nothing); else ``dispatch`` of the inputs it names, where
    it names no other. None when none answers."""
    entry = type(kernel).__call__
    inputs = {n: frame.f_locals[n] for n, _ in entry._zerojit_inputs if n in frame.f_locals}
    key_for = getattr(kernel, "key_for", None)
    if key_for is not None:
        return key_for(**inputs)
    check = lint.WarmupKeyCheck(None, inputs)
    token = lint.WARMUP_CHECK.set(check)
    try:
        entry._zerojit_method(kernel, **inputs)
    finally:
        lint.WARMUP_CHECK.reset(token)
    if check.dispatched:
        return check.dispatched[-1]
    params = inspect.signature(kernel.dispatch).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kernel.dispatch(**inputs)
    return kernel.dispatch(**{n: v for n, v in inputs.items() if n in params})


def _encode_compile_key(key: Any) -> dict[str, Any] | None:
    """``key``'s fields as exact JSON (:func:`~zerojit.manifest.encode_exact`) when it is a
    dataclass they rebuild exactly, else None."""
    if not dataclasses.is_dataclass(key) or isinstance(key, type):
        return None
    fields = {f.name: getattr(key, f.name) for f in dataclasses.fields(key)}
    try:
        encoded = {n: encode_exact(v) for n, v in fields.items()}
        if {n: decode_exact(v, n) for n, v in json.loads(json.dumps(encoded)).items()} != fields:
            return None
    except (TypeError, ValueError):
        return None
    return encoded


def record_miss(jit_fn: Any, spec: Sequence[Any], options: dict, *, kernel_name: str, compile_key: Any = None,
                key_budget: int | None = None, background: bool = False) -> bool:
    """Append the key of a miss of ``jit_fn`` to this process's learned-keys file
    (:func:`learned_path`), once: a key already in the file is not appended again.

    Called by the monitor for each runtime miss it sees (warn and error mode) and by the serving
    fallback for each miss it serves. Never raises into a launch: an unwritable file or folder,
    a lock held longer than :data:`LOCK_TIMEOUT_S`, or any other fault gives one warning per file
    (logger ``"zerojit.learned"``) and records nothing.

    Args:
        jit_fn: the ``triton.jit`` function that missed.
        spec: Triton's class of each parameter: :class:`~zerojit.specialization.SpecClass` values
            or Triton's ``(type, attr)`` pairs (constexprs by value).
        options: the launch options the launch passed (:func:`~zerojit.triton_compat.run_options_removed`
            of Triton's), in the order passed.
        kernel_name: the zerojit kernel's name (what reports call it); the launching kernel's
            own where the launch entry is found (several kernel classes may share a function).
        compile_key: a contract kernel's CompileKey for this launch; None: found from the launch
            entry below this call where there is one (best effort: ``key_for`` or ``dispatch`` of
            its inputs), kept only when its fields have an exact JSON form.
        key_budget: the most records this kernel may hold in the file; None: its class's
            ``key_budget``, else :data:`~zerojit.keyspace.DEFAULT_KEY_BUDGET`.

        background: build the record here (the launch's frames are here), append it in this
            process's writer thread (:func:`flush` waits for it): what a launch does, since the
            file lock, the read of other processes' appends and the write cost ~3 ms a miss
            (measured on the 2-core CI machine), paid by the request otherwise.

    Returns:
        True when a record was appended (``background``: queued).
    """
    try:
        return _record_miss(jit_fn, spec, options, kernel_name, compile_key, key_budget, background)
    except Exception as e:  # (a bug of ours must not fail the launch either)
        logger.warning("zerojit: a miss of %s was not learned: %s: %s", kernel_name, type(e).__name__, e)
        return False


def _record_miss(jit_fn: Any, spec: Sequence[Any], options: dict, kernel_name: str, compile_key: Any,
                 key_budget: int | None, background: bool) -> bool:
    if not enabled():
        return False
    path = learned_path()
    module, qualname = _tc.jit_identity(jit_fn)
    source_hash = _tc.source_hash(jit_fn)
    params = _tc.parameter_names(jit_fn)
    pairs = [_pair(e) for e in spec][:len(params)]
    specialization = [[ty, encode_value(attr) if ty == "constexpr" else attr] for ty, attr in pairs]
    if any(isinstance(attr, dict) and "repr" in attr for _, attr in specialization):
        return False  # a constexpr a manifest cannot reproduce (a function): nothing a warm-up could warm
    passed = _tc.run_options_removed(dict(options))
    ident = _identity(module, qualname, source_hash, specialization, passed)
    with _STATE_LOCK:
        state = _FILES.setdefault(path, _FileState())
        if ident in state.keys or (module, qualname) in state.capped:
            return False
    kernel = None
    if compile_key is None or key_budget is None:
        frame = _entry_frame(jit_fn)
        if frame is not None:
            kernel = frame.f_locals["self"]
            kernel_name = kernel.name  # (the launching kernel's: classes may share one function)
            if compile_key is None and not isinstance(kernel, RecordedKernel):
                try:
                    compile_key = _dispatched(kernel, frame)
                except Exception:  # best effort: the record is still a recorded key
                    compile_key = None
            del frame
    budget = key_budget if key_budget is not None else getattr(type(kernel), "key_budget", DEFAULT_KEY_BUDGET)
    record = {
        "version": VERSION, "kernel": kernel_name, "module": module, "qualname": qualname,
        "source_hash": source_hash, "parameters": list(params),
        "constexprs": list(_tc.ordered_constexpr_parameters(jit_fn)), "specialization": specialization,
        "values": {n: _representative(ty, attr) for n, (ty, attr) in zip(params, pairs)
                   if ty in _INT_TYPES or ty in ("fp32", "u1")},
        "options": passed,
        "compile_key": _encode_compile_key(compile_key) if compile_key is not None else None,
        "triton_version": _tc.TRITON_VERSION, "target": current_target_name(),
    }
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    if background:
        _WRITER.put((path, ident, (module, qualname), budget, line, kernel_name))
        return True
    return _append(path, ident, (module, qualname), budget, line, kernel_name)


class _Writer:
    """This process's learned-keys writer: one daemon thread appending queued records in order
    (started at the first), so a miss on the request path only builds its line."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._idle = threading.Condition()
        self._pending = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (once): its start (~1 ms) is then not paid by the first miss."""
        with self._idle:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="zerojit-learned-writer", daemon=True)
                self._thread.start()

    def put(self, item: tuple) -> None:
        self.start()
        with self._idle:
            self._pending += 1
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                _append(*item)
            except Exception as e:  # (never the serving process's problem)
                logger.warning("zerojit: a miss of %s was not learned: %s: %s", item[-1], type(e).__name__, e)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def flush(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


_WRITER = _Writer()
#: Seconds :func:`flush` waits by default: each queued append waits at most LOCK_TIMEOUT_S twice.
FLUSH_TIMEOUT_S = 10.0


def start_writer() -> None:
    """Start this process's writer thread now (serving installs call it: the first miss then
    only queues its record); a no-op when learning is off (``ZEROJIT_LEARN=0``)."""
    if enabled():
        _WRITER.start()


def flush(timeout: float = FLUSH_TIMEOUT_S) -> bool:
    """Wait until this process's queued records (``record_miss(..., background=True)``) are in
    their files, at most ``timeout`` seconds; True when none is left. A warm-up's :func:`plan`
    and :func:`read_learned` flush first, and so does the interpreter's exit."""
    return _WRITER.flush(timeout)


atexit.register(flush)


def _append(path: str, ident: str, function: tuple[str, str], budget: int, line: bytes, kernel_name: str) -> bool:
    from filelock import FileLock, Timeout

    if not _APPEND_LOCK.acquire(timeout=LOCK_TIMEOUT_S):  # one thread at a time: the file lock orders processes
        return False  # (another thread holds the file's lock that long: it warns for the file)
    try:
        with _STATE_LOCK:
            state = _FILES.setdefault(path, _FileState())
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with FileLock(path + ".lock", timeout=LOCK_TIMEOUT_S):
                _catch_up(path, state)
                if ident in state.keys:
                    return False
                if state.counts.get(function, 0) >= budget:
                    if function not in state.capped:
                        state.capped.add(function)
                        logger.warning("zerojit: %s has %d learned keys, its key budget: no more of its misses are "
                                       "learned (in %s); raise the kernel's key_budget or bound the argument that "
                                       "grows", kernel_name, budget, path)
                    return False
                fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # (a FIFO there: never waits)
                try:
                    if state.torn:  # a writer died mid-line: ours starts on a line of its own
                        line = b"\n" + line
                    view = memoryview(line)
                    while view:
                        view = view[os.write(fd, view):]
                finally:
                    os.close(fd)
                _catch_up(path, state)
                return True
        except Timeout:
            why = f"its lock {path}.lock was held for more than {LOCK_TIMEOUT_S} s"
        except OSError as e:
            where = e.filename or getattr(e, "path", None) or path
            why = f"{e.strerror or e}" + ("" if where == path else f" ({where})")
        if not state.warned:
            state.warned = True
            logger.warning("zerojit: cannot write the learned-keys file %s: %s; misses are not learned, serving goes "
                           "on", path, why)
        return False
    finally:
        _APPEND_LOCK.release()


def _catch_up(path: str, state: _FileState) -> None:
    """Read what other processes appended since this one last read ``path`` (the whole file again
    when it was cleared or replaced), under its lock."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        state.inode, state.offset, state.torn = None, 0, False
        state.keys.clear()
        state.counts.clear()
        return
    if st.st_ino != state.inode or st.st_size < state.offset:
        state.inode, state.offset = st.st_ino, 0
        state.keys.clear()
        state.counts.clear()
    if st.st_size == state.offset:
        return
    data = read_regular(path, state.offset)  # a FIFO or device there is refused: its read would wait or never end
    state.offset += len(data)
    state.torn = not data.endswith(b"\n")
    for raw in data.splitlines():
        try:
            d = json.loads(raw)
            ident = _identity(d["module"], d["qualname"], d["source_hash"], d["specialization"], d["options"])
        except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deep
            continue  # a corrupted line: named when the file is read, never a key
        if ident not in state.keys:
            state.keys.add(ident)
            function = (d["module"], d["qualname"])
            state.counts[function] = state.counts.get(function, 0) + 1


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _check(d: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in d:
        raise ValueError(f"field {name!r} is missing")
    value = d[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"field {name!r} must be a {names}, not {type(value).__name__}")
    return value


def _parse(d: Any, line: int) -> LearnedRecord:
    if not isinstance(d, dict):
        raise ValueError(f"a JSON {type(d).__name__}, not a record")
    version = _check(d, "version", int)
    if version != VERSION:
        raise ValueError(f"record version {version}; this zerojit reads version {VERSION}")
    params = tuple(_check(d, "parameters", list))
    constexprs = tuple(_check(d, "constexprs", list))
    if not all(isinstance(p, str) for p in params + constexprs):
        raise ValueError("fields 'parameters' and 'constexprs' must hold parameter names (strings)")
    entries = _check(d, "specialization", list)
    if len(entries) != len(params) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                              for e in entries):
        raise ValueError(f"field 'specialization' must hold one [type, attr] pair per parameter ({len(params)})")
    values = _check(d, "values", dict)
    if not all(v is None or isinstance(v, (bool, int, float)) for v in values.values()):
        raise ValueError("field 'values' must hold numbers and bools")
    options = _check(d, "options", dict)
    for name, value in options.items():  # an edited "four" named here, not by Triton's compiler at warm-up
        if name in _INT_OPTIONS and not (type(value) is int or value is None and _INT_OPTIONS[name]):
            raise ValueError(f"field 'options': {name!r} must be an int, not {type(value).__name__}")
    compile_key = d.get("compile_key")
    if compile_key is not None:
        if not isinstance(compile_key, dict):
            raise ValueError(f"field 'compile_key' must be an object or null, not {type(compile_key).__name__}")
        compile_key = {n: decode_exact(v, f"field 'compile_key.{n}'") for n, v in compile_key.items()}
    return LearnedRecord(
        kernel=_check(d, "kernel", str), module=_check(d, "module", str), qualname=_check(d, "qualname", str),
        source_hash=_check(d, "source_hash", str), parameters=params,
        constexprs=constexprs,
        specialization=tuple((e[0], _hashable(e[1])) for e in entries),
        values=tuple(values.items()), options=tuple((n, _hashable(v)) for n, v in options.items()),
        compile_key=compile_key, triton_version=_check(d, "triton_version", str), target=_check(d, "target", str),
        line=line)


def _importable_source(module: str, qualname: str) -> str:
    """The source hash of the ``triton.jit`` function importable as ``module.qualname``; raises
    LookupError naming what failed."""
    try:
        obj = importlib.import_module(module)
    except Exception as e:
        raise LookupError(f"module {module!r} does not import here ({type(e).__name__}: {e})") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"module {module!r} has no {qualname!r}")
    jit_fn = _tc.unwrap_jit_function(obj)
    if jit_fn is None:
        raise LookupError(f"{module}.{qualname} is a {type(obj).__name__}, not a triton.jit function")
    return _tc.source_hash(jit_fn)


def read_learned(path: str | os.PathLike, *, target: str | None = None,
                 check_source: bool = True) -> tuple[list[LearnedRecord], list[LearnedSkip]]:
    """The records of a learned-keys file (each key once, first first) and every line skipped.

    Skipped and named (file and line, what differs), never fatal: a line that is not JSON or not
    a record (a torn or edited line: field, type), a record of another Triton version, of another
    target than ``target`` (default: the target the file's name says; None when it says none),
    or, with ``check_source``, of a function whose source hash differs from the importable
    function's (its source changed since the miss; the module is imported) or that does not
    import here. A missing file has no records.

    Raises:
        OSError: the file exists but cannot be read (no permission;
            ``zerojit.integrity.NotRegularFileError``: a folder, FIFO, device or symbolic link,
            never opened: a FIFO's read would wait for a writer, a device's never end).
    """
    flush()  # this process's own queued misses first
    path = os.fspath(path)
    if target is None:
        target = _target_of(path)
    records: list[LearnedRecord] = []
    skipped: list[LearnedSkip] = []
    seen: set[str] = set()
    sources: dict[tuple[str, str], str] = {}
    try:
        data = read_regular(path)  # a FIFO or device is refused (NotRegularFileError), never waited on
    except FileNotFoundError:
        return records, skipped
    for number, raw in enumerate(data.splitlines(), start=1):
        where = f"{path}:{number}"
        if not raw.strip():
            continue
        try:
            d = json.loads(raw)
        except (ValueError, RecursionError) as e:  # (UnicodeDecodeError too) a torn or overwritten line;
            # RecursionError: JSON nested deeper than Python's parser goes
            skipped.append(LearnedSkip(where, None, f"corrupted line: not JSON ({e})"))
            continue
        try:
            record = _parse(d, number)
        except (ValueError, RecursionError) as e:  # (a value nested deep: _hashable recurses)
            skipped.append(LearnedSkip(where, None, f"corrupted line: {e}"))
            continue
        if record.triton_version != _tc.TRITON_VERSION:
            skipped.append(LearnedSkip(where, record.function, f"learned with Triton {record.triton_version}, this is "
                                       f"Triton {_tc.TRITON_VERSION}"))
            continue
        if target is not None and record.target != target:
            skipped.append(LearnedSkip(where, record.function, f"learned for target {record.target}, not {target}"))
            continue
        if check_source:
            function = (record.module, record.qualname)
            try:
                if function not in sources:
                    sources[function] = _importable_source(*function)
            except LookupError as e:
                skipped.append(LearnedSkip(where, record.function, str(e)))
                continue
            if sources[function] != record.source_hash:
                skipped.append(LearnedSkip(where, record.function, _source_differs(sources[function], record)))
                continue
        ident = _identity(record.module, record.qualname, record.source_hash, d["specialization"], d["options"])
        if ident not in seen:
            seen.add(ident)
            records.append(record)
    return records, skipped


def _source_differs(now: str, record: LearnedRecord) -> str:
    return (f"source hash {now[:12]}... differs from the learned {record.source_hash[:12]}... (its source or a "
            "function it calls changed since the miss was learned)")


def _target_of(path: str) -> str | None:
    """The target a learned-keys file's name says (``learned-cuda90-...`` -> ``"cuda:90"``)."""
    name = os.path.basename(path)
    if not name.startswith("learned-"):
        return None
    slug = name[len("learned-"):].rsplit("-triton", 1)[0]
    for backend in ("cuda", "hip"):
        if slug.startswith(backend) and len(slug) > len(backend):
            return f"{backend}:{slug[len(backend):]}"
    return None


def clear(path: str | os.PathLike) -> int:
    """Remove the learned-keys file ``path`` under its lock; returns how many lines it held
    (records, and corrupted lines; 0: there was no file).

    A FIFO, socket or symbolic link there (which stops learning: :func:`read_learned`) is
    removed without being opened (0 lines); a folder or a device is left alone, refused before
    any lock file is made beside it.

    Raises:
        OSError: it cannot be removed (``zerojit.integrity.NotRegularFileError``: a folder or a
            device is there); filelock.Timeout: its lock was held past :data:`LOCK_TIMEOUT_S`.
    """
    from filelock import FileLock

    path = os.fspath(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return 0
    if stat.S_ISDIR(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise NotRegularFileError(path, "a folder" if stat.S_ISDIR(mode) else "a device")
    with FileLock(path + ".lock", timeout=LOCK_TIMEOUT_S):
        try:
            lines = sum(1 for raw in read_regular(path).splitlines() if raw.strip())
        except NotRegularFileError:  # a FIFO, socket or link: removed, never opened
            lines = 0
        os.remove(path)
    with _STATE_LOCK:
        _FILES.pop(path, None)
    return lines


# ---------------------------------------------------------------------------------------------
# Merging into a manifest
# ---------------------------------------------------------------------------------------------


def merged_manifest(paths: Iterable[str | os.PathLike], *, base: Manifest | None = None,
                    target: str | None = None) -> tuple[Manifest, int, list[LearnedSkip]]:
    """``base`` (default: an empty manifest of this Triton) with the learned keys of ``paths``
    added to its kernels (a kernel it lacks appended), each key once; returns the manifest, the
    keys added and every record skipped (as :func:`read_learned` skips, without importing: the
    warm-up of the manifest checks the sources; a record whose function the base recorded
    with another source hash or other parameters; and one of a function of the program's
    ``__main__`` the base does not carry, whose source only the program's recorded manifest
    holds).

    Raises:
        LearnedError: ``base`` was recorded with another Triton version, or the records are for
            several targets.
        OSError: a file cannot be read.
    """
    if base is not None and base.triton_version != _tc.TRITON_VERSION:
        raise LearnedError(f"the base manifest was recorded with Triton {base.triton_version}, this is Triton "
                           f"{_tc.TRITON_VERSION}: learned keys are this Triton's")
    records: list[tuple[str, LearnedRecord]] = []
    skipped: list[LearnedSkip] = []
    for path in paths:
        found, skips = read_learned(path, target=target or (base.target if base is not None and base.kernels
                                                            else None), check_source=False)
        records += [(os.fspath(path), r) for r in found]
        skipped += skips
    targets = sorted({r.target for _, r in records})
    if len(targets) > 1:
        raise LearnedError(f"the learned keys are for several targets ({', '.join(targets)}): merge one at a time")
    kernels = {(k.module, k.qualname): k for k in (base.kernels if base is not None else ())}
    added = 0
    for path, r in records:
        k = kernels.get((r.module, r.qualname))
        where = f"{path}:{r.line}"
        if k is not None and k.source_hash != r.source_hash:
            skipped.append(LearnedSkip(where, r.function, f"the base manifest recorded source hash "
                                       f"{k.source_hash[:12]}..., the learned key {r.source_hash[:12]}..."))
            continue
        if k is not None and k.parameters != r.parameters:
            skipped.append(LearnedSkip(where, r.function, f"parameters {list(r.parameters)} differ from the base "
                                       f"manifest's {list(k.parameters)}"))
            continue
        if k is None and r.module == "__main__":  # its source travels in the program's own manifest only
            skipped.append(LearnedSkip(where, r.function, "defined in the program's __main__: a manifest warms it "
                                       "from the source the program's recording carries; merge with that manifest "
                                       "as the base (--manifest, base=)"))
            continue
        if k is None:
            k = KernelRecord(r.module, r.qualname, r.source_hash, r.parameters, r.constexprs, ())
        if any(s.specialization == r.specialization and s.options == r.options for s in k.specializations):
            continue
        kernels[(r.module, r.qualname)] = dataclasses.replace(k, specializations=(*k.specializations, r.recorded()))
        added += 1
    manifest = Manifest(
        triton_version=_tc.TRITON_VERSION,
        target=base.target if base is not None and base.kernels else (targets[0] if targets else
                                                                      (base.target if base else "device")),
        command=base.command if base is not None else ("zerojit", "learned", "merge"),
        kernels=tuple(kernels.values()), program_folder=base.program_folder if base is not None else None,
        runs=base.runs if base is not None else None)
    return manifest, added, skipped


def merge_into_manifest(paths: Iterable[str | os.PathLike], out: str | os.PathLike, *,
                        base: str | os.PathLike | None = None) -> tuple[Manifest, int, list[LearnedSkip]]:
    """:func:`merged_manifest` of ``paths`` onto the manifest file ``base`` (if any), written to
    ``out`` whole or not at all (:func:`~zerojit.manifest.write_manifest`).

    Raises:
        zerojit.manifest.ManifestError: ``base`` is no readable manifest.
        LearnedError, OSError: as :func:`merged_manifest`; zerojit.outputs.OutputError: ``out``
            cannot be written.
    """
    manifest, added, skipped = merged_manifest(paths, base=read_manifest(base) if base is not None else None)
    write_manifest(manifest, out)
    return manifest, added, skipped


# ---------------------------------------------------------------------------------------------
# Warming learned keys
# ---------------------------------------------------------------------------------------------


@dataclass
class LearnedPlan:
    """What a warm-up adds for the learned keys (:func:`plan`).

    Attributes:
        path: the file read.
        extra: contract kernel -> learned CompileKeys to warm as extra keys of it.
        kernels: learned keys warmed as recorded keys, one :class:`RecordedKernel` per function.
        twins: ``(module, qualname, recorded key)`` of each record also warmed through a CompileKey:
            the learned specialization itself, in case the CompileKey's ``warmup_inputs`` give
            another (no compile when they give the same: a hit of Triton's cache); not counted.
        skipped: records not warmed, each named (a key that failed to compile is added by
            :meth:`failed`).
        origins: ``(id(kernel), key)`` of each learned key warmed (twins included) -> the record
            it came from (the first, where several give one key): what :meth:`failed` names.
    """

    path: str
    extra: dict[Any, list[Any]]
    kernels: list[RecordedKernel]
    twins: set[tuple[str, str, RecordedKey]]
    skipped: list[LearnedSkip]
    origins: dict[tuple[int, Any], LearnedRecord] = dataclasses.field(default_factory=dict)

    def failed(self, kernel: Any, key: Any, error: BaseException, text: str) -> bool:
        """A warm-up job that failed with ``error`` (``text``: ``"Type: message"``): when it is a
        learned key, it is skipped and named (:attr:`skipped`: its file and line, how to drop
        it) and True is returned: a learned key is never fatal (a constexpr or option Triton
        refuses, a hand edit). False for any other key, for a kernel's definition error (the
        lint: its ``warmup_inputs`` dispatch another key; the kernel's code is wrong, not the
        record), and for what the machine caused, not the record (``OSError``: a full disk, a
        cache folder that cannot be written; ``CompileHung``: a stalled ptxas, another
        process's lock held past the wall limit): a failure of the warm-up, whose message says
        what to do, never advice to drop a good key."""
        record = self.origins.get((id(kernel), key))
        if record is None or isinstance(error, (KernelDefinitionError, OSError, CompileHung)):
            return False
        lines = [ln.strip() for ln in text.splitlines() if ln.strip().strip("^")]  # (a CompilationError's caret)
        self.skipped.append(LearnedSkip(
            f"{self.path}:{record.line}", record.function,
            f"failed to compile: {' '.join(lines)} (drop it: delete line {record.line} of the learned-keys file, or "
            f"clear the file: zerojit learned clear --file {self.path})"))
        return True

    def apply(self, jobs_plan: dict[Any, list[Any]]) -> set[tuple[int, Any]]:
        """Add the learned keys to a warm-up's plan (kernel -> keys), each key once (a CompileKey
        the plan holds already is not added again); returns the ``(id(kernel), key)`` of every
        learned key added (twins left out)."""
        added: set[tuple[int, Any]] = set()
        for kernel, keys in self.extra.items():
            have = jobs_plan.setdefault(kernel, [])
            for key in keys:
                if key not in have:
                    have.append(key)
                    added.add((id(kernel), key))
        for kernel in self.kernels:
            keys = kernel.get_warmup_keys()
            jobs_plan[kernel] = keys
            function = (kernel.record.module, kernel.record.qualname)
            added.update((id(kernel), key) for key in keys if (*function, key) not in self.twins)
        return added


def _gathered(records: list[LearnedRecord], group: Any) -> list[LearnedRecord]:
    """Every rank's learned records, rank by rank, each key once: the same list on every rank of
    ``group`` (a sharded warm-up needs the same key space on every rank, and ranks with cache
    folders of their own learn different misses). Unchanged without an initialised
    ``torch.distributed`` (the sharded warm-up then says what is missing)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return records
    every: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, records, group=group)
    seen: set[Any] = set()
    out = []
    for theirs in every:
        for r in theirs:
            ident = (r.module, r.qualname, r.source_hash, r.specialization, r.options)
            if ident not in seen:
                seen.add(ident)
                out.append(r)
    return out


def plan(held: dict[Any, list[Any]], *, path: str | None = None, group: Any = None) -> LearnedPlan:
    """The learned keys (of ``path``, default :func:`learned_path`) of the kernels of a warm-up's
    plan ``held`` (kernel -> its keys: the kernels registered, or recorded from a manifest):
    records of other functions are left alone (another program's, sharing the cache folder).
    For each record of a kernel's function:

    - the function's source hash or parameters differ from the record's: skipped, named;
    - a contract kernel's record with a ``compile_key`` that builds its ``CompileKey``, one its
      key space does not hold yet: an extra key of that kernel (its warm-up launch is checked
      against ``dispatch``), with the learned specialization as a twin (see :class:`LearnedPlan`);
    - otherwise (no ``compile_key``, one that no longer builds the ``CompileKey``, or one the key
      space holds: then it does not tell the class that missed) a recorded key of a
      :class:`RecordedKernel` named ``"<kernel> (learned)"`` (one per function; a manifest
      kernel's key the manifest already holds is left out).

    With a ``torch.distributed`` ``group`` (a sharded warm-up), every rank's records are
    gathered (one ``all_gather_object``), so every rank plans the same keys. A file that cannot
    be read is one skip, never an error.
    """
    flush()  # this process's own queued misses first
    try:
        path = path or learned_path()
        records, skipped = read_learned(path, target=current_target_name(), check_source=False)
    except (OSError, LearnedError, RecursionError) as e:  # (read_learned names a line nested too deep itself)
        where = path or "the learned-keys file"
        records, skipped = [], [LearnedSkip(where, None, f"cannot be read: {getattr(e, 'strerror', None) or e}")]
        path = where
    if group is not None:
        records = _gathered(records, group)
    by_function: dict[tuple[str, str], list[Any]] = {}
    for kernel in held:
        jit_fn = _tc.unwrap_jit_function(getattr(type(kernel), "kernel", None)) \
            if isinstance(kernel, TritonJitKernel) else None
        if jit_fn is not None:
            by_function.setdefault(_tc.jit_identity(jit_fn), []).append((kernel, jit_fn))
    extra: dict[Any, list[Any]] = {}
    twins: set[tuple[str, str, RecordedKey]] = set()
    origins: dict[tuple[int, Any], LearnedRecord] = {}
    recorded: dict[tuple[str, str], list[LearnedRecord]] = {}
    functions: dict[tuple[str, str], tuple[Any, str]] = {}
    for r in records:
        candidates = by_function.get((r.module, r.qualname))
        if not candidates:
            continue
        where = f"{path}:{r.line}"
        jit_fn = candidates[0][1]
        now = _tc.source_hash(jit_fn)
        if now != r.source_hash:
            skipped.append(LearnedSkip(where, r.function, _source_differs(now, r)))
            continue
        if _tc.parameter_names(jit_fn) != r.parameters:
            skipped.append(LearnedSkip(where, r.function, f"parameters {list(_tc.parameter_names(jit_fn))} differ "
                                       f"from the learned {list(r.parameters)}"))
            continue
        contract = [k for k, _ in candidates if not isinstance(k, RecordedKernel)]
        owner = next((k for k in contract if k.name == r.kernel), contract[0] if contract else None)
        if owner is not None and r.compile_key is not None:
            try:
                key = type(owner).CompileKey(**r.compile_key)
            except Exception:  # its CompileKey changed since the miss: warmed as a recorded key below
                key = None
            if key is not None and key not in held[owner]:
                extra.setdefault(owner, []).append(key)
                origins.setdefault((id(owner), key), r)
                twins.add((r.module, r.qualname, r.key))
        manifest_keys = {key for k, _ in candidates if isinstance(k, RecordedKernel) for key in k.get_warmup_keys()}
        if r.key in manifest_keys:
            continue
        recorded.setdefault((r.module, r.qualname), []).append(r)
        name = owner.name if owner is not None else next(k.name for k, _ in candidates)
        functions.setdefault((r.module, r.qualname), (jit_fn, name))
    learned_kernels = []
    for function, rs in recorded.items():
        jit_fn, name = functions[function]
        r0 = rs[0]
        record = KernelRecord(r0.module, r0.qualname, r0.source_hash, r0.parameters, r0.constexprs,
                              tuple(dict.fromkeys(r.recorded() for r in rs)))
        try:
            learned_kernels.append(recorded_kernel(record, jit_fn, name=name + LEARNED_SUFFIX))
        except KernelDefinitionError as e:
            skipped += [LearnedSkip(f"{path}:{r.line}", r.function, str(e)) for r in rs]
            continue
        for r in rs:
            origins.setdefault((id(learned_kernels[-1]), r.key), r)
    return LearnedPlan(path, extra, learned_kernels, twins, skipped, origins)
