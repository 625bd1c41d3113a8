"""Triton's disk cache as zerojit uses it: fingerprints, per-entry locks, cache bundles.

Triton keeps each compiled variant in its disk cache (``TRITON_CACHE_DIR``) as one *entry*: a
folder named by the variant's cache key, holding the IR stages, the binary (``.cubin``), a
metadata ``.json`` and a ``__grp__<name>.json`` that lists the others (by absolute path) and is
written last, so an entry without it is incomplete and Triton treats it as a miss.

The cache key hashes Triton's own build (:func:`triton.runtime.cache.triton_key`: every compiler
source and ``libtriton``), the kernel source, the target, the compile options, ``ptxas``'s
version and the environment variables that change code generation. A cache is therefore valid
only for the same Triton build, target and ``ptxas`` (and a launcher, for the same Python).

This module provides:

* :func:`fingerprint`: those facts for this machine, the fields a bundle's manifest records;
* :func:`use_fast_triton_key`: Triton hashes its whole build (a 400 MB ``libtriton.so``) once per
  process, about 0.4 s; the result is remembered in the cache folder, keyed by the size, time
  and inode of every file it hashes, so a warm start does not pay it again (each remembered file
  records the digest of its content: a stray edit is not believed, :func:`take_damaged_notes`);
* :func:`entry_lock`: a file lock per entry, so processes sharing a cache folder compile each
  entry once (the others wait, then load it);
* remembered launchers (:func:`remembered_launcher`, :func:`install_remembered_launcher`): the
  CUDA launcher modules a warm-up's workers built (Triton 3.6; later versions build none), kept
  per Triton install, so a cold warm-up into a new cache folder on that install copies them
  instead of building them again;
* bundles: :func:`export_bundle` writes the entries of a warm-up as one archive with a manifest
  (never an entry that fails its check: :mod:`zerojit.integrity`), :func:`import_bundle`
  verifies everything (manifest fields, every file's SHA-256, each file's structure) before
  installing anything, then moves whole entries into the cache folder, their digests recorded.

A bundle is a ``tar.gz``: ``manifest.json`` first, then ``entries/<entry>/<file>``. The manifest
(:class:`BundleManifest`) names the Triton version and build, Python, target, ``ptxas``, the
cache-relevant environment, every kernel with its keys, and every file with its SHA-256.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import errno
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from . import _version
from . import autotune as _autotune
from . import integrity
from . import triton_compat as _tc
from . import watchdog as _watchdog
from ._primer import primer
from .compile_only import active_compile_only, current_target_name, target_name
from .context import allow_compiles
from .outputs import HOST, atomic_output, remove_stale
from .reports import NoTargetError, count

__all__ = [
    "cache_dir",
    "entry_name",
    "entry_lock",
    "entry_lock_path",
    "hold_lock",
    "LOCK_NOTICE_S",
    "remembered_compile_seconds",
    "remember_compile_seconds",
    "launcher_lock",
    "launcher_lock_path",
    "use_fast_triton_key",
    "known_triton_key",
    "take_damaged_notes",
    "triton_build_hash",
    "current_target_name",
    "target_name",
    "fingerprint",
    "check_fingerprint",
    "FINGERPRINT_FIELDS",
    "BundleError",
    "BundleCacheDirError",
    "CacheFolderError",
    "check_cache_folder",
    "BundleMismatchError",
    "BundleCorruptError",
    "BundleReadError",
    "BundleLockError",
    "BundleManifest",
    "BundleImport",
    "export_bundle",
    "read_manifest",
    "verify_bundle",
    "import_bundle",
    "entries_of",
    "pack_entries",
    "read_entries",
    "install_entries",
    "tuning_files",
    "remove_leftovers",
]

BUNDLE_FORMAT = "zerojit-bundle"
BUNDLE_VERSION = 1
MANIFEST_NAME = "manifest.json"
_LOCK_DIR = ".zerojit-locks"
_STATE_DIR = ".zerojit"
# Triton names entries by the base32 of a SHA-256; a file is named, never '.' or '..'
_MEMBER_RE = re.compile(r"^entries/([A-Z2-7]+)/(?!\.\.?$)([^/\\]+)$")
_TUNING_RE = re.compile(r"^tuning/([A-Za-z0-9_.-]+\.json)$")  # zerojit.autotune's tuning files
_ENTRY_RE = re.compile(r"^[A-Z2-7]+$")
_STAGING_PREFIX = ".zerojit-import-"  # install_entries' staging folders: .zerojit-import-<host>-<random>
_TRITON_TMP_PREFIX = "tmp.pid_"  # Triton's FileCacheManager.put: <entry>/tmp.pid_<pid>_<uuid>/<file>


# ---------------------------------------------------------------------------------------------
# The cache folder and its entries
# ---------------------------------------------------------------------------------------------


def cache_dir() -> str:
    """Triton's disk-cache folder for this process (``TRITON_CACHE_DIR`` / ``knobs.cache.dir``)."""
    return _tc.cache_dir()


def entry_name(cache_hash: str) -> str:
    """The folder name of the entry of Triton cache key ``cache_hash`` (a SHA-256 hex digest)."""
    return base64.b32encode(bytes.fromhex(cache_hash)).decode("ascii").rstrip("=")


_LOCK_ROOTS: set[str] = set()  # lock folders made by this process (a warm-up asks once per key)


def _lock_path(name: str, folder: str | None = None) -> str:
    root = os.path.join(folder or cache_dir(), _LOCK_DIR)
    if root not in _LOCK_ROOTS or not os.path.isdir(root):
        _make_lock_folder(root)
        _LOCK_ROOTS.add(root)
    return os.path.join(root, f"{name}.lock")


def _make_lock_folder(root: str) -> None:
    """Make zerojit's lock folder ``root`` (``<cache>/.zerojit-locks``). Whatever is there and is
    not a folder (a plain file, a FIFO, a link to no folder) is replaced by one, as the digests
    folder is (:func:`zerojit.integrity.record`): it holds nothing to keep (a lock lives while a
    process holds its file open), and the link or node itself is removed, never what it points to.

    Raises:
        NotADirectoryError: it is not a folder and cannot be replaced (named, with why).
        OSError: the folder cannot be made.
    """
    try:
        os.makedirs(root, exist_ok=True)
        return
    except FileExistsError:  # something other than a folder is there
        pass
    try:
        with contextlib.suppress(FileNotFoundError):  # (another process replaced it meanwhile)
            if not os.path.isdir(root):
                os.unlink(root)
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise NotADirectoryError(errno.ENOTDIR, f"zerojit's lock folder is not a folder and cannot be replaced by one "
                                 f"({e.strerror or e}): remove it", root) from None


def entry_lock_path(entry: str, folder: str | None = None) -> str:
    """The lock file of cache entry ``entry`` (its folder name) in the cache folder (its lock folder
    made if missing): what :func:`entry_lock` locks, and what a compile worker locks by path."""
    return _lock_path(entry, folder)


def entry_lock(entry: str, folder: str | None = None):
    """A ``filelock.FileLock`` for cache entry ``entry`` (its folder name), shared by every process
    using the cache folder. The OS releases it if its holder dies."""
    from filelock import FileLock

    return FileLock(_lock_path(entry, folder))


#: Seconds a wait for another process's lock on a cache entry goes on before it is said (once;
#: sooner when ``ZEROJIT_COMPILE_STALL_S`` is shorter).
LOCK_NOTICE_S = 5.0

_lock_logger = logging.getLogger("zerojit.locks")


def hold_lock(lock: Any, *, wall: Any, notice: Any) -> float | None:
    """Acquire ``lock`` (a ``filelock.FileLock``, such as :func:`entry_lock`'s), waiting for
    another process's hold of it no longer than a compile's wall-time limit: a lock held forever
    (its holder stopped with Ctrl-Z, SIGSTOP or a debugger) is not waited for forever. Returns
    None once held (the caller releases it), else the seconds waited when it gave up.

    ``wall()`` gives that limit in seconds (:func:`zerojit.watchdog.wall_limit`); ``notice(limit)``
    the words logged once (a warning on the ``zerojit.locks`` logger, on stderr where logging is
    not configured) after :data:`LOCK_NOTICE_S` seconds of waiting, or ``ZEROJIT_COMPILE_STALL_S``
    if shorter. Both are only called when another process holds the lock. The waits are
    filelock's own (``acquire(timeout=...)``), so Ctrl-C ends them.
    """
    from filelock import Timeout

    try:
        lock.acquire(timeout=0)
        return None
    except Timeout:  # held by another process
        pass
    start = time.monotonic()
    wall_s = wall()
    try:
        lock.acquire(timeout=min(LOCK_NOTICE_S, _watchdog.stall_seconds(), wall_s))
        return None
    except Timeout:
        pass
    _lock_logger.warning("%s", notice(wall_s))
    try:
        lock.acquire(timeout=max(wall_s - (time.monotonic() - start), 0.0))
        return None
    except Timeout:
        return time.monotonic() - start


def lock_holder_hint(path: str) -> str:
    """What to do about another process holding lock file ``path`` for too long, in words."""
    return (f"another warm-up or bundle import is compiling or installing that entry, or one was stopped (Ctrl-Z, "
            f"SIGSTOP, a debugger) while it held the lock: resume or end that process (`fuser {path}` names it)")


def launcher_lock_path(launcher_key: str, folder: str | None = None) -> str:
    """The lock file of the launcher module of cache key ``launcher_key`` (see :func:`launcher_lock`)."""
    return _lock_path(f"launcher-{entry_name(launcher_key)}", folder)


def launcher_lock(launcher_key: str, folder: str | None = None):
    """A ``filelock.FileLock`` for the launcher module of cache key ``launcher_key``."""
    from filelock import FileLock

    return FileLock(launcher_lock_path(launcher_key, folder))


# ---------------------------------------------------------------------------------------------
# Triton's build fingerprint, remembered
# ---------------------------------------------------------------------------------------------


def _triton_root() -> str:
    import triton

    return os.path.dirname(os.path.abspath(triton.__file__))


def _libtriton_path(root: str) -> str:
    import sysconfig

    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    return os.path.join(root, "_C", f"libtriton.{ext}")


def _build_stat_signature(root: str) -> str:
    """A digest of the size, mtime and inode of every file ``triton_key()`` hashes (a superset:
    every .py/.so under compiler/, backends/ and language/, runtime/cache.py, libtriton, and the
    package's ``__init__.py`` with its version)."""
    paths = [os.path.join(root, "__init__.py"), os.path.join(root, "runtime", "cache.py"), _libtriton_path(root)]
    for sub in ("compiler", "backends", "language"):
        for folder, dirs, files in os.walk(os.path.join(root, sub)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            paths += [os.path.join(folder, f) for f in sorted(files) if f.endswith((".py", ".so"))]
    h = hashlib.sha256(_python().encode())
    for p in paths:
        st = os.stat(p)
        h.update(f"{os.path.relpath(p, root)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}\n".encode())
    return h.hexdigest()


def _python() -> str:
    """This Python's executable, links resolved: ``python``, ``python3`` and ``python3.11`` of
    one environment are one interpreter (the Triton package folder tells environments apart)."""
    return os.path.realpath(sys.executable)


def _install_dir(what: str) -> str:
    """``~/.triton/zerojit/<what>-<install>`` (Triton's home, ``TRITON_HOME``, default ``~``), one
    per Triton install: this Python interpreter, this Triton package folder and its version (a
    Triton upgraded in place is another install: nothing remembered for one is used by another)."""
    install = hashlib.sha256(f"{_python()}\0{_triton_root()}\0{_tc.TRITON_VERSION}".encode()).hexdigest()[:16]
    return os.path.join(_tc.triton_home(), ".triton", "zerojit", f"{what}-{install}")


def _memo_paths() -> list[str]:
    """Where Triton's build fingerprint is remembered: the cache folder (it travels with it), then
    one file per Triton install under Triton's home (``TRITON_HOME``, default ``~``:
    ``~/.triton/zerojit/``), so a fresh cache folder on a known install does not hash the build."""
    folder = cache_dir()  # empty: no cache folder (never the working directory)
    return ([os.path.join(folder, _STATE_DIR, "triton-build.json")] if folder else []) + [
        _install_dir("triton-build") + ".json"]


# A remembered file (the build memos, the compile seconds) records the SHA-256 of its own content
# ("sha256": over the other fields as canonical JSON), so that a stray edit that still parses is
# not believed: such a file is not used, named once in the next warm-up's report, and removed (it
# is written again as if it never was). Like the cache's digests (zerojit.integrity), this
# detects damage, not tampering.
_damaged_notes: list[str] = []
_damaged_named: set[str] = set()
_damaged_lock = threading.Lock()


def _content_digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _sealed(body: dict) -> dict:
    """``body`` with the digest of its content (what a remembered file holds)."""
    return {**body, "sha256": _content_digest(body)}


def _unsealed(data: Any, path: str, what: str, instead: str) -> dict | None:
    """The fields of remembered file ``path`` (parsed: ``data``) but its digest, when the digest
    matches them; None for a file without one (an earlier zerojit's, or not one of these), and
    for one whose digest differs: that one is named once (``what`` it holds, what is done
    ``instead``: :func:`take_damaged_notes`) and removed."""
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        return None
    body = {k: v for k, v in data.items() if k != "sha256"}
    if data["sha256"] == _content_digest(body):
        return body
    with contextlib.suppress(OSError):
        os.unlink(path)
    _name_damaged(path, f"{what} {path} does not match the digest it records (a stray edit or damage): not used, "
                  f"{instead}")
    return None


def take_damaged_notes() -> list[str]:
    """The lines naming each remembered file found damaged (its digest differs) since the last
    call, once per file and process; a warm-up adds them to ``WarmupStats.recovered``."""
    with _damaged_lock:
        notes = list(_damaged_notes)
        _damaged_notes.clear()
    return notes


def _read_remembered(path: str, what: str, instead: str) -> Any:
    """The parsed JSON of remembered file ``path``; None when there is none, or it cannot be read
    or parsed. Only a regular file is read (:func:`zerojit.integrity.read_regular`): a FIFO there
    cannot block, a device (``/dev/zero``) is never read, a symbolic link is not followed; such a
    path is named once (``what`` it holds, what is done ``instead``: :func:`take_damaged_notes`)
    and replaced when the file is written again."""
    try:
        return json.loads(integrity.read_regular(path))
    except integrity.NotRegularFileError as e:
        _name_damaged(path, f"{what} {path} is {e.what}, not a regular file: not used, {instead}")
        return None
    except (OSError, ValueError, RecursionError):  # RecursionError: a deeply nested array
        return None


def _name_damaged(path: str, note: str) -> None:
    with _damaged_lock:
        if path not in _damaged_named:
            _damaged_named.add(path)
            _damaged_notes.append(note)


def _read_memo(signature: str, path: str) -> dict:
    """The values remembered at ``path`` for this Triton version and build (``signature``: the
    stat signature of its files); {} for another one (never half-used), a torn or a foreign file,
    or one whose content does not match its digest (named once, removed: :func:`_unsealed`)."""
    what, instead = "the remembered Triton build key", ("the key taken from the other memo, else Triton's build hashed "
                                                         "afresh, and the file written again")
    data = _read_remembered(path, what, instead)
    if data is None:
        return {}
    data = _unsealed(data, path, what, instead)
    if data is None or data.get("triton_version") != _tc.TRITON_VERSION:
        return {}
    values = data.get("values") if data.get("signature") == signature else None
    return values if isinstance(values, dict) and all(isinstance(v, str) for v in values.values()) else {}


def _write_memo(signature: str, values: dict, path: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(_sealed({"triton_version": _tc.TRITON_VERSION, "signature": signature, "values": values}), f)
        integrity.remove_irregular(path)  # a folder there (a rename cannot replace it), a FIFO, a link
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only folder: the memo is only an optimisation


def _remembered(name: str, compute, *, write: bool = True) -> str | None:
    """``compute()``, remembered under the stat signature of Triton's build (any change to its
    files computes it afresh); a value found in one memo is copied to the others. ``compute``
    None: only what is remembered (None if nothing is). ``write`` False: no memo is written
    (:func:`import_bundle` writes them with :func:`_remember` once the bundle is in)."""
    signature = _build_stat_signature(_triton_root())
    memos = [_read_memo(signature, p) for p in _memo_paths()]
    value = next((m[name] for m in memos if name in m), None)
    if value is None:
        if compute is None:
            return None
        value = compute()
    if write and any(memo.get(name) != value for memo in memos):
        _remember({name: value})
    return value


def _remember(values: Mapping[str, str]) -> None:
    """Write ``values`` (name -> value) into each build memo (:func:`_memo_paths`) that lacks or
    differs on any of them, under the stat signature of Triton's build."""
    signature = _build_stat_signature(_triton_root())
    for path in _memo_paths():
        memo = _read_memo(signature, path)
        if any(memo.get(k) != v for k, v in values.items()):
            _write_memo(signature, {**memo, **values}, path)


def use_fast_triton_key(*, write: bool = True) -> str:
    """Make ``triton_key()`` cost a few ``stat`` calls instead of hashing Triton's build.

    Triton computes ``triton_key()`` (SHA-256 of every compiler source and of ``libtriton.so``)
    once per process, 0.4-0.6 s. The value is remembered in ``<cache>/.zerojit/triton-build.json``
    and per Triton install in ``~/.triton/zerojit/`` (Triton's home, ``TRITON_HOME``), under a
    digest of the size, mtime and inode of every file it reads; when that digest matches,
    ``triton.runtime.cache.triton_key`` is replaced by a function returning the remembered value
    (any change to Triton's files changes the digest, and the value is computed afresh; a memo
    of another Triton version is never used). Returns the key. ``write`` False: a key computed
    now is not written to the memos (a bundle's fingerprint check: :func:`import_bundle`).
    """
    known = known_triton_key(write=write)
    if known is not None:
        return known
    current = _tc.build_key_function()
    return _remembered("triton_key", current, write=write)  # Triton's own, now cached by its lru_cache for this process


def known_triton_key(*, write: bool = True) -> str | None:
    """Triton's build key when it costs no hash: computed in this process already, or remembered
    for this build (:func:`use_fast_triton_key`, which it then sets up as that function does);
    None on a new Triton install (a compile worker forked now would have to wait for it).
    ``write`` False: a key found in one memo is not copied to the other."""
    current = _tc.build_key_function()
    if getattr(current, "_zerojit_memo", False):
        return current()
    if hasattr(current, "cache_info") and current.cache_info().currsize:
        return current()  # already computed in this process
    value = _remembered("triton_key", None, write=write)
    if value is None:
        return None

    def triton_key() -> str:
        return value

    triton_key._zerojit_memo = True  # type: ignore[attr-defined]
    triton_key.__wrapped__ = current  # type: ignore[attr-defined]
    triton_key.cache_clear = lambda: _tc.set_build_key_function(current)  # type: ignore[attr-defined]
    _tc.set_build_key_function(triton_key)
    return value


launcher_file = _tc.launcher_file


def remembered_launcher(launcher_key: str) -> str:
    """Where the launcher module of Triton's cache key ``launcher_key`` is remembered for this
    Triton install: ``~/.triton/zerojit/launchers-<install>/``.

    A launcher is the C extension Triton builds per kernel signature at a kernel's first load
    (~0.2-0.35 s of a C compiler each, 11 for the MLA kernels). Its cache key hashes only its
    generated source and the platform (Triton's ``compile_module_from_src``), not the kernels,
    so a new cache folder on the same install needs the very same file: like Triton's build hash
    (:func:`use_fast_triton_key`), it is remembered per install. The file name carries Python's
    extension suffix (:func:`launcher_file`), and the folder is per Python interpreter and
    Triton package (and version). Triton 3.6 only: 3.7 and later build no launcher modules.
    """
    return os.path.join(_install_dir("launchers"), f"{launcher_key}{launcher_file()}")


def remember_launcher(launcher_key: str) -> None:
    """Keep a copy of the launcher module of ``launcher_key`` that is in the cache folder (written
    whole: a copy, then a rename), its SHA-256 beside it (``<copy>.sha256``, written first:
    :mod:`zerojit.integrity`); nothing there, or a read-only home, is not an error (remembering
    is only an optimisation)."""
    path = remembered_launcher(launcher_key)
    built = _tc.cache_manager(launcher_key).get_file(launcher_file())
    if built is None or os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(built, "rb") as f:
            data = f.read()
        _autotune.write_atomically(f"{path}.sha256", integrity.sha256(data).encode())
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def install_remembered_launcher(launcher_key: str) -> bool:
    """Put the remembered launcher module of ``launcher_key`` into the cache folder, where Triton
    looks for it (its cache manager writes the file whole); False when none is remembered or it
    cannot be read (the caller then builds it). A copy that fails its check (its digest, or with
    none an ELF file that fits its size: :mod:`zerojit.integrity`) is named once in the warm-up
    report and deleted, so the next build is remembered again."""
    path = remembered_launcher(launcher_key)
    try:
        data = integrity.read_regular(path)  # a FIFO there cannot block
    except integrity.NotRegularFileError as e:
        integrity.note_damaged(path, e.what)
        with contextlib.suppress(OSError):
            os.unlink(path)  # the node itself, never what a link points to
        return False
    except OSError:
        return False
    try:
        with open(f"{path}.sha256", encoding="ascii") as f:
            expected = f.read().strip()
    except (OSError, ValueError):
        expected = None
    why = integrity.problem(launcher_file(), data, expected)
    if why is not None:
        integrity.note_damaged(path, why)
        for p in (path, f"{path}.sha256"):
            with contextlib.suppress(OSError):
                os.unlink(p)
        return False
    try:
        _tc.cache_manager(launcher_key).put(data, launcher_file(), binary=True)
    except OSError:
        return False
    return True


#: At most this many entries' compile seconds are remembered per install (the newest kept).
COMPILE_SECONDS_KEPT = 20_000


def _compile_seconds_path() -> str:
    return _install_dir("compile-seconds") + ".json"


def remembered_compile_seconds() -> dict[str, float]:
    """How long a worker took to compile each cache entry in earlier warm-ups on this Triton
    install: entry folder name -> seconds (:func:`remember_compile_seconds`); {} when none is
    remembered, or the file is torn or foreign, or does not match the digest it records (then
    it is named once in the warm-up's report and removed: the seconds decide the order of the
    compiles and each one's wall-time limit, :func:`zerojit.watchdog.wall_limit`).

    An entry's folder name is Triton's hash of the kernel's source, its specialization, the
    options and Triton's build, so a new cache folder on the same install has the very same
    names: a warm-up there hands out its longest compiles first on what they took before
    (:class:`zerojit.precompile._TaskQueue`) instead of on a per-kernel guess."""
    path = _compile_seconds_path()
    what, instead = "the remembered compile seconds", "compiles ordered and bounded as on a new install"
    data = _read_remembered(path, what, instead)
    if data is None:
        return {}
    data = _unsealed(data, path, what, instead)
    seconds = data.get("seconds") if data is not None else None
    if not isinstance(seconds, dict):
        return {}
    return {k: float(v) for k, v in seconds.items() if isinstance(k, str) and type(v) in (int, float)
            and math.isfinite(v) and v >= 0}


def remember_compile_seconds(seconds: Mapping[str, float]) -> None:
    """Add ``seconds`` (entry folder name -> a worker's compile seconds) to what this install
    remembers (:func:`remembered_compile_seconds`), the newest :data:`COMPILE_SECONDS_KEPT`
    kept, written whole (a temporary file, then a rename). A read-only home is not an error
    (remembering is only an optimisation); of two warm-ups writing at once, one's figures win."""
    if not seconds:
        return
    merged = remembered_compile_seconds()
    for name, value in seconds.items():
        merged.pop(name, None)  # re-inserted last: the newest
        merged[name] = round(float(value), 4)
    if len(merged) > COMPILE_SECONDS_KEPT:
        merged = dict(list(merged.items())[-COMPILE_SECONDS_KEPT:])
    path = _compile_seconds_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(_sealed({"seconds": merged}), f)
        integrity.remove_irregular(path)  # a folder there (a rename cannot replace it), a FIFO, a link
        os.replace(tmp, path)
    except OSError:
        pass


def triton_build_hash(*, write: bool = True) -> str:
    """SHA-256 of this Triton's ``libtriton`` shared library (remembered like the Triton key;
    ``write`` False: a hash computed now is not written to the memos)."""
    path = _libtriton_path(_triton_root())

    def compute() -> str:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest()

    return _remembered("libtriton_sha256", compute, write=write)


def _python_tag() -> str:
    return f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"


def _ptxas_version(target: str) -> str | None:
    if not target.startswith("cuda:"):
        return None
    try:
        return _tc.ptxas_version(int(target.split(":")[1]))
    except Exception:
        return None


#: The manifest fields a bundle must match on the importing machine, in the order checked.
FINGERPRINT_FIELDS = ("triton_version", "triton_build", "python", "target", "triton_key", "ptxas", "cache_env")


def fingerprint(target: str, *, write: bool = True) -> dict[str, Any]:
    """What a cache built here for ``target`` depends on (every field of :data:`FINGERPRINT_FIELDS`).

    ``triton_build`` is the SHA-256 of ``libtriton``; ``triton_key`` the SHA-256 of Triton's
    ``triton_key()`` (its compiler sources and ``libtriton``); ``python`` e.g. ``"cpython-3.11"``;
    ``ptxas`` the version line of the ``ptxas`` Triton runs (CUDA targets); ``cache_env`` the
    environment variables Triton hashes into its cache keys. ``write`` False: the build memos it
    computes (:func:`triton_build_hash`, :func:`use_fast_triton_key`) are not written
    (:func:`import_bundle` passes it, and writes them once the bundle is in).
    """
    return {
        "triton_version": _tc.TRITON_VERSION,
        "triton_build": triton_build_hash(write=write),
        "python": _python_tag(),
        "target": target,
        "triton_key": hashlib.sha256(use_fast_triton_key(write=write).encode()).hexdigest(),
        "ptxas": _ptxas_version(target),
        "cache_env": dict(sorted(_tc.cache_invalidating_env().items())),
    }


# ---------------------------------------------------------------------------------------------
# Bundles
# ---------------------------------------------------------------------------------------------


class CacheFolderError(RuntimeError):
    """Triton's cache folder (``TRITON_CACHE_DIR``) is empty, a file, cannot be created, or cannot
    be written where something must be written; the message names it and says what to do."""


def _folder_problem(folder: str, error: OSError | None = None) -> str | None:
    """Why ``folder`` cannot serve as a cache folder, as the end of "cache folder X ...", or None.
    Without ``error`` the folder is created if missing (an existing read-only folder passes when it
    holds entries: a warm cache can be read; an empty one could serve no key); with it, ``error``
    (what writing into it raised) is explained."""
    if not folder:
        return "is empty (TRITON_CACHE_DIR='')"
    if os.path.exists(folder) and not os.path.isdir(folder):
        return "is a file, not a folder"
    if error is None:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            error = e
        else:
            if not os.access(folder, os.W_OK) and not any(not name.startswith(".") for name in os.listdir(folder)):
                return "is read-only and holds no compiled kernel (nothing to load, and nothing can be compiled into it)"
            return None
    reason = error.strerror or str(error)
    if not os.path.exists(folder):
        return f"cannot be created ({reason})"
    if isinstance(error, PermissionError):
        return "is not writable (permission denied)"
    return f"cannot be written ({reason})"


def check_cache_folder(what: str) -> None:
    """Refuse a cache folder no key could use (before any key, else every key fails alike).

    Raises:
        CacheFolderError: ``"{what}: Triton's cache folder X is a file ..."``, with what to do.
    """
    folder = cache_dir()
    why = _folder_problem(folder)
    if why is not None:
        raise CacheFolderError(f"{what}: Triton's cache folder {folder!r} {why}: point TRITON_CACHE_DIR at a "
                               "writable folder")


class BundleError(RuntimeError):
    """A bundle cannot be written, read or installed; nothing was installed."""


class BundleMismatchError(BundleError):
    """The bundle was built for another Triton build, Python, target, ``ptxas`` or environment.

    Attributes:
        field: the first manifest field that differs (one of :data:`FINGERPRINT_FIELDS`).
        bundle: the bundle's value; local: this machine's value.
    """

    def __init__(self, path: str, field: str, bundle: Any, local: Any, *, target_given: bool = False,
                 compile_only: bool = False) -> None:
        hint = {
            "triton_version": "install the Triton the bundle was built with, or rebuild the bundle here",
            "triton_build": "the same Triton version but another build (wheel) of it: use the same wheel",
            "python": "rebuild the bundle with this Python version (Triton's cache is per build and Python)",
            "target": "rebuild the bundle for this GPU (zerojit bundle export --target ...)",
            "triton_key": "Triton's compiler sources differ from the builder's: use the same installation",
            "ptxas": "another ptxas (TRITON_PTXAS_PATH?) than the builder's: use the same one",
            "cache_env": "set the same cache-relevant environment variables as the builder",
        }[field]
        here = f"this machine has {local!r}"
        if field == "target" and target_given:  # the value came from the caller, not from this machine
            here = f"the target given (--target) is {local!r}"
            hint = f"import it with --target {bundle}, or rebuild the bundle for {local} (zerojit bundle export --target {local})"
        elif field == "target" and compile_only:  # the value came from a compile-only block: there may be no GPU
            here = f"this process compiles for {local!r} (compile-only)"
            hint = (f"warm up under compile_only({bundle!r}) to use it, or rebuild the bundle for {local} "
                    f"(zerojit bundle export --target {local})")
        super().__init__(f"bundle {path} refused: field {field!r} differs: bundle has {bundle!r}, {here}; {hint}. "
                         "Nothing was installed.")
        self.field = field
        self.bundle = bundle
        self.local = local


class BundleCorruptError(BundleError):
    """The archive is truncated, corrupted or malformed (a file missing, a SHA-256 that differs)."""


class BundleReadError(BundleError):
    """The bundle file exists but cannot be read (permissions): invalid input, not a refused
    bundle."""


class BundleCacheDirError(BundleError, CacheFolderError):
    """The cache folder a bundle is to be installed into cannot be written (read-only, not a
    folder, cannot be created, or the disk is full).

    Attributes:
        cache_dir: that folder.
    """

    def __init__(self, cache_dir: str, error: OSError, *, installed: int = 0) -> None:
        why = _folder_problem(cache_dir, error)
        done = (f"it failed after installing {count(installed, 'whole entry', 'whole entries')}; import again once "
                "fixed" if installed else "nothing was installed")
        super().__init__(f"cache folder {cache_dir!r} {why}: point TRITON_CACHE_DIR (or --cache-dir, "
                         f"import_bundle(into=...)) at a writable folder; {done}")
        self.cache_dir = cache_dir


class BundleLockError(BundleError):
    """Another process held the lock on a cache entry the import was to install for longer than
    a compile's wall-time limit (:func:`zerojit.watchdog.wall_limit`): another warm-up or import
    on that entry, or one stopped while it held the lock (Ctrl-Z). The entries before it are
    installed, whole; that one and the rest are not.

    Attributes:
        entry: the cache entry; lock_file: its lock file; seconds: how long the import waited.
    """

    def __init__(self, entry: str, lock_file: str, seconds: float, *, installed: int = 0) -> None:
        done = (f"{count(installed, 'whole entry', 'whole entries')} installed before it, the rest not"
                if installed else "nothing was installed")
        super().__init__(f"another process held the lock on cache entry {entry} for {seconds:.1f} s, the wall-time "
                         f"limit of a compile ({_watchdog.WALL_ENV}, or 10x its last compile); lock file {lock_file}; "
                         f"{lock_holder_hint(lock_file)}, then import again; {done}")
        self.entry, self.lock_file, self.seconds = entry, lock_file, seconds


def _str_map(value: Any) -> bool:
    return type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items())


def _manifest_field_problem(data: dict[str, Any]) -> str | None:
    """What is of the wrong type in a bundle manifest's fields (those :class:`BundleManifest`
    reads), in words, or None."""
    for name in ("triton_version", "triton_build", "python", "target", "triton_key", "created", "zerojit_version"):
        if name in data and type(data[name]) is not str:
            return f"field {name!r} is no string"
    if data.get("ptxas") is not None and type(data["ptxas"]) is not str:
        return "field 'ptxas' is no string"
    for name in ("cache_env", "kernels", "entries", "tuning"):
        if name in data and type(data[name]) is not dict:
            return f"field {name!r} is no object"
    for name, kernel in data.get("kernels", {}).items():
        if type(kernel) is not dict or type(kernel.get("keys")) is not list or type(kernel.get("function")) is not str:
            return f"kernel {name!r} is no {{\"function\": str, \"keys\": list}}"
    for folder, entry in data.get("entries", {}).items():
        if type(entry) is not dict or type(entry.get("kernel")) is not str or not _str_map(entry.get("files")):
            return f"entry {folder!r} is no {{\"kernel\": str, \"files\": {{file: sha256}}}}"
    if "tuning" in data and not _str_map(data["tuning"]):
        return "field 'tuning' is no {file: sha256}"
    return None


@dataclass(frozen=True)
class BundleManifest:
    """A bundle's manifest.

    Attributes:
        triton_version, triton_build, python, target, triton_key, ptxas, cache_env: see
            :func:`fingerprint`.
        kernels: per kernel name, ``{"function": "module.qualname", "keys": [key fields, ...]}``.
        entries: per cache entry (folder name), ``{"kernel": name, "files": {file: sha256}}``.
        tuning: the tuning files of the bundle's wrapped kernels (:mod:`zerojit.autotune`), file
            name -> sha256; installed into the cache folder's tuning folder.
        created: ISO-8601 UTC time of export; zerojit_version: the exporter's zerojit.
    """

    triton_version: str
    triton_build: str
    python: str
    target: str
    triton_key: str
    ptxas: str | None
    cache_env: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    entries: dict = field(default_factory=dict)
    tuning: dict = field(default_factory=dict)
    created: str = ""
    zerojit_version: str = ""

    @property
    def num_keys(self) -> int:
        return sum(len(k["keys"]) for k in self.kernels.values())

    def fingerprint(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in FINGERPRINT_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        return {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "BundleManifest":
        """Raises: BundleCorruptError: not a zerojit bundle manifest, or a field missing (the
        message says what to do; the caller prefixes the bundle's path)."""
        if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
            raise BundleCorruptError(f"not a zerojit bundle: its {MANIFEST_NAME} has no \"format\": "
                                     f"\"{BUNDLE_FORMAT}\"; give a file zerojit bundle export wrote")
        if type(data.get("version")) is not int or data["version"] != BUNDLE_VERSION:  # (not true, nor 1.0)
            raise BundleCorruptError(
                f"its format is version {data.get('version')!r}, and zerojit {_version.__version__} reads version "
                f"{BUNDLE_VERSION}: export it again with this zerojit (or import it with zerojit "
                f"{data.get('zerojit_version', 'the one that wrote it')})")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in data and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise BundleCorruptError(f"its manifest lacks the {'field' if len(missing) == 1 else 'fields'} "
                                     f"{', '.join(missing)} (edited by hand?): export it again")
        wrong = _manifest_field_problem(data)
        if wrong:
            raise BundleCorruptError(f"its manifest's {wrong} (edited by hand?): export it again")
        return cls(**{k: v for k, v in data.items() if k in names})

    def summary(self) -> str:
        lines = [f"zerojit bundle: {count(self.num_keys, 'key')} of {count(len(self.kernels), 'kernel')}, "
                 f"{count(len(self.entries), 'cache entry', 'cache entries')}",
                 f"  target {self.target}, Triton {self.triton_version} (build {self.triton_build[:12]}), "
                 f"{self.python}, created {self.created}"]
        lines += [f"  {name:<40} {len(k['keys']):>4} {'key' if len(k['keys']) == 1 else 'keys'}"
                  for name, k in self.kernels.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class BundleImport:
    """What :func:`import_bundle` did.

    Attributes:
        manifest: the bundle's manifest (its target was checked: :func:`import_bundle`).
        cache_dir: the cache folder it was installed into.
        installed: entries moved into the cache; present: entries the cache already held complete.
    """

    manifest: BundleManifest
    cache_dir: str
    installed: tuple[str, ...]
    present: tuple[str, ...]

    def summary(self) -> str:
        return (f"imported {count(len(self.installed), 'cache entry', 'cache entries')} ({len(self.present)} already "
                f"present) for {count(self.manifest.num_keys, 'key')} of {count(len(self.manifest.kernels), 'kernel')} "
                f"(target {self.manifest.target}) into {self.cache_dir}")


def _key_fields(key: Any) -> Any:
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        return dataclasses.asdict(key)
    return repr(key)


def entries_of(variants: Iterable[Any]) -> dict[str, dict[str, str]]:
    """The cache entries of compiled variants: ``{entry folder: {file name: path}}``, the
    ``__grp__`` file included.

    Raises:
        BundleError: a variant without a compiled kernel, or an entry with a missing file.
    """
    out: dict[str, dict[str, str]] = {}
    for v in variants:
        group = _tc.compiled_files(getattr(v, "compiled", None))
        if not group:
            raise BundleError(f"{v.kernel}: key {v.key} has no compiled kernel on disk to bundle")
        files = dict(group)
        folders = {os.path.dirname(p) for p in files.values()}
        if len(folders) != 1:
            raise BundleError(f"{v.kernel}: key {v.key}: its cache files span several folders: {sorted(folders)}")
        folder = folders.pop()
        meta = next(n for n in files if n.endswith(".json"))
        files[f"__grp__{meta}"] = os.path.join(folder, f"__grp__{meta}")
        for name, path in files.items():
            if not os.path.isfile(path):
                raise BundleError(f"{v.kernel}: key {v.key}: cache file {path} is missing (cache cleaned?)")
        out[os.path.basename(folder)] = files
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_bundle(report: Any, path: str | os.PathLike, *, target: str | None = None) -> BundleManifest:
    """Write the cache entries of ``report``'s variants to ``path`` as one bundle.

    Args:
        report: a :class:`~zerojit.registry.WarmupReport` (its variants hold the compiled kernels).
        path: the archive to write (``.tar.gz``); written whole or not at all
            (:func:`zerojit.outputs.atomic_output`).
        target: the target the variants were compiled for; default the report's, or this
            process's when the report says ``"device"``.

    Returns the manifest written.

    Raises:
        TypeError: ``path`` is not a path (str or os.PathLike).
        BundleError: a failed warm-up (a bundle must be complete), a missing cache file, a
            damaged one (named; its entry is dropped from the cache, so an export run again
            compiles it afresh), or no target known.
        zerojit.outputs.OutputError: ``path`` is not a regular file (it is never replaced), or
            the write failed (a full disk); ``path`` is as it was.
    """

    path = _bundle_path(path)
    if getattr(report, "failures", ()):
        raise BundleError(f"the warm-up had {count(len(report.failures), 'failure')}; a bundle must hold the whole key space")
    target = target or (report.target if report.target != "device" else current_target_name())
    if not target:
        raise BundleError("no target known for the bundle: pass target= (e.g. 'cuda:90')")
    variants = list(report.variants)
    if target.startswith("cuda:"):
        variants += _primer_variant()
    entries = entries_of(variants)
    kernels: dict[str, dict] = {}
    entry_kernel: dict[str, str] = {}
    for v in variants:
        entry_kernel[_entry_of(v.compiled)] = v.kernel
        if v.kernel == "primer":  # not the model's: in the entries only
            continue
        fn = (_tc.source_of(v.compiled) or (None,))[0]
        k = kernels.setdefault(v.kernel, {"function": f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}",
                                          "keys": []})
        k["keys"].append(_key_fields(v.key))
    generic = [v for v in getattr(report, "generic", ()) if v.compiled is not None]  # entries only: no keys
    entries.update(entries_of(generic))
    for v in generic:
        entry_kernel.setdefault(_entry_of(v.compiled), v.kernel)
    blobs = {(entry, name): data for entry, files in read_entries(entries).items() for name, data in files.items()}
    tuning = tuning_files(kernels)
    manifest = BundleManifest(
        **fingerprint(target),
        kernels=kernels,
        entries={e: {"kernel": entry_kernel.get(e, "?"),
                     "files": {n: _sha256(blobs[(e, n)]) for n in sorted(files)}} for e, files in entries.items()},
        tuning={n: _sha256(data) for n, data in tuning.items()},
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        zerojit_version=_version.__version__,
    )
    with atomic_output(path, binary=True) as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
        _add(tar, MANIFEST_NAME, json.dumps(manifest.to_dict(), indent=1).encode())
        for (entry, name), data in sorted(blobs.items()):
            _add(tar, f"entries/{entry}/{name}", data)
        for name, data in tuning.items():
            _add(tar, f"tuning/{name}", data)
    return manifest


def read_entries(entries: dict[str, dict[str, str]]) -> dict[str, dict[str, bytes]]:
    """Read entries (as :func:`entries_of` gives them) for export: ``{entry: {file: bytes}}``,
    each file checked first (:mod:`zerojit.integrity`: its recorded digest, its structure; the
    group file parsed), so a damaged entry is never exported.

    Raises:
        BundleError: a damaged file (named; its entry is dropped from the cache, so a warm-up
            run again compiles it afresh).
    """
    out: dict[str, dict[str, bytes]] = {}
    for entry, files in entries.items():
        digests = None
        blobs = out.setdefault(entry, {})
        for name, p in files.items():
            try:  # the error below names a damaged file, not a log line
                with integrity.collecting():
                    if name.startswith("__grp__"):
                        integrity.read_group_file(p)
                        blobs[name] = integrity.read_regular(p)
                    else:
                        digests = integrity.digests_of(os.path.dirname(p)) if digests is None else digests
                        blobs[name] = integrity.read_checked(p, digests)  # a regular file only
            except integrity.DamagedFileError as e:
                raise BundleError(f"{e}: not packed, and the entry was dropped from the cache; run the export again "
                                  "to compile it afresh") from None
    return out


def _primer_variant() -> list:
    """The launch-path primer (:func:`zerojit.loading.prime_launch_path`) compiled for the current
    target, so a GPU warm-up from the bundle compiles nothing at all; [] if it cannot be."""
    try:
        with allow_compiles():
            return [primer.compile(type(primer).CompileKey())]
    except Exception:
        return []


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _bundle_path(path: Any) -> str:
    """``path`` as a ``str``; a clear TypeError for anything that is not a path."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"bundle={path!r}: a bundle is the path of a bundle archive (str or os.PathLike), "
                        f"not {type(path).__name__}")
    return os.fsdecode(path)


def _open(path: str) -> tarfile.TarFile:
    if os.path.isdir(path):
        raise BundleError(f"bundle {path} is a directory, not a bundle archive (zerojit bundle export writes one file)")
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO's open would wait for a writer
        raise BundleReadError(f"bundle {path} is not a regular file (a FIFO, device or socket), not a bundle archive")
    if not os.path.isfile(path):
        raise BundleError(f"bundle {path} does not exist")
    try:  # the magic first, so an empty file or another format is said in one line
        with open(path, "rb") as f:
            magic = f.read(2)
    except OSError as e:
        raise BundleReadError(f"bundle {path} cannot be read: {e.strerror or e}; check its permissions") from None
    if not magic:
        raise BundleCorruptError(f"bundle {path} is empty (0 bytes), not a zerojit bundle: export it again")
    if magic != b"\x1f\x8b":
        raise BundleCorruptError(f"bundle {path} is not a zerojit bundle (a gzip tar archive, as zerojit bundle "
                                 "export writes): it is not gzip data")
    try:
        return tarfile.open(path, "r:gz")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise BundleCorruptError(f"bundle {path} is not a readable archive (truncated or corrupted?): {e}") from None


#: What a bundle holds, for the messages that refuse one laid out otherwise.
_LAYOUT = (f"a bundle holds {MANIFEST_NAME} first, then only files named entries/<entry>/<file> (no folder "
           "members, no './' prefix), as zerojit bundle export writes it; a bundle repacked with plain tar adds "
           f"folder members: repack it with `tar -czf BUNDLE {MANIFEST_NAME} entries/*/*` from the unpacked folder")


def _read_manifest(tar: tarfile.TarFile, path: str) -> BundleManifest:
    try:
        first = tar.next()
        if first is None or first.name != MANIFEST_NAME or not first.isfile():
            found = "nothing" if first is None else f"{'folder' if first.isdir() else 'member'} {first.name!r}"
            raise BundleCorruptError(f"bundle {path} starts with {found}, not the file {MANIFEST_NAME}: {_LAYOUT}")
        data = json.loads(tar.extractfile(first).read())
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError) as e:
        raise BundleCorruptError(f"bundle {path}: cannot read its manifest (truncated or corrupted?): {e}") from None
    except RecursionError:  # JSON nested deeper than Python's parser goes: no manifest zerojit writes
        raise BundleCorruptError(f"bundle {path}: cannot read its manifest: nested too deep (not one zerojit "
                                 "wrote); export it again") from None
    try:
        return BundleManifest.from_dict(data)
    except BundleCorruptError as e:
        raise BundleCorruptError(f"bundle {path}: {e}") from None


def read_manifest(path: str | os.PathLike) -> BundleManifest:
    """The manifest of the bundle at ``path`` (nothing is verified beyond its form).

    Raises:
        TypeError: ``path`` is not a path (str or os.PathLike).
        BundleError / BundleCorruptError: no file, not an archive, no manifest.
        BundleReadError: the file cannot be read (permissions).
    """
    path = _bundle_path(path)
    with _open(path) as tar:
        return _read_manifest(tar, path)


def verify_bundle(path: str | os.PathLike) -> BundleManifest:
    """The manifest of the bundle at ``path``, once the whole archive is verified as
    :func:`import_bundle` verifies it (read to its end, every file against its SHA-256 and the
    manifest's file list), without checking it against this machine and without installing.

    Raises:
        TypeError: ``path`` is not a path (str or os.PathLike).
        BundleError / BundleCorruptError: no file, not an archive, truncated or corrupted.
        BundleReadError: the file cannot be read (permissions).
    """
    path = _bundle_path(path)
    with _open(path) as tar:
        manifest = _read_manifest(tar, path)
        _verified_files(tar, path, manifest)
    return manifest


def check_fingerprint(manifest: BundleManifest, path: str, target: str | None, *, target_given: bool = False,
                      compile_only: bool = False, write: bool = True) -> bool:
    """Raise :class:`BundleMismatchError` on the first field that differs; returns whether the
    target was checked (it is not when ``target`` is None). ``target_given``: the target came
    from the caller (``--target``), not from this machine's GPU, and the error says so;
    ``compile_only``: it is the target of the active compile-only driver (there may be no GPU);
    ``write`` False: the build memos the check computes are not written (:func:`fingerprint`)."""
    local = fingerprint(target or manifest.target, write=write)
    for f in FINGERPRINT_FIELDS:
        if f == "target" and target is None:
            continue
        theirs = getattr(manifest, f)
        if f == "ptxas" and target is None and not manifest.target.startswith("cuda:"):
            continue
        if theirs != local[f]:
            raise BundleMismatchError(path, f, theirs, local[f], target_given=target_given, compile_only=compile_only)
    return target is not None


def _verified_files(tar: tarfile.TarFile, path: str, manifest: BundleManifest,
                    done: str = "") -> tuple[dict[str, dict[str, bytes]], dict[str, bytes]]:
    """Every entry file of the bundle ``tar`` (its manifest already read), as ``{entry: {file:
    bytes}}``, and its tuning files (``{name: bytes}``, :mod:`zerojit.autotune`), once the whole
    archive is verified: each member a file ``entries/<entry>/<file>`` or ``tuning/<name>.json``,
    the archive read to its very end (so gzip checks its CRC and length; a bundle cut short by a
    few bytes still holds every member) with nothing after the tar's end, and the files exactly
    the manifest's, each with its SHA-256. ``done``: appended to each message.

    Raises:
        BundleCorruptError: naming what is wrong.
    """
    blobs: dict[tuple[str, str], bytes] = {}
    tuning: dict[str, bytes] = {}
    try:
        for member in tar:
            if member.name == MANIFEST_NAME and member.offset == 0:  # read already
                continue
            t = _TUNING_RE.match(member.name)
            m = _MEMBER_RE.match(member.name)
            seen = (t.group(1) in tuning) if t else (m is not None and (m.group(1), m.group(2)) in blobs)
            if seen and member.isfile():  # (the last copy would win, unchecked against the first)
                raise BundleCorruptError(f"bundle {path}: {member.name!r} is in it twice; {_LAYOUT}{done}")
            if t and member.isfile():
                tuning[t.group(1)] = tar.extractfile(member).read()
                continue
            if not m or not member.isfile():
                kind = "folder" if member.isdir() else "file" if member.isfile() else "member"
                raise BundleCorruptError(f"bundle {path}: unexpected {kind} {member.name!r}; {_LAYOUT}{done}")
            blobs[(m.group(1), m.group(2))] = tar.extractfile(member).read()
        # The tar ends at its first zero block; what follows must be zeros up to gzip's end.
        while chunk := tar.fileobj.read(1 << 20):
            if chunk.count(0) != len(chunk):
                raise BundleCorruptError(f"bundle {path} has data after the archive's end (appended to it?); "
                                         f"export it again{done}")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise BundleCorruptError(f"bundle {path} is truncated or corrupted: {e}; export it again{done}") from None
    expected = {(e, n): h for e, spec in manifest.entries.items() for n, h in spec["files"].items()}
    missing = sorted(set(expected) - set(blobs))
    extra = sorted(set(blobs) - set(expected))
    if missing or extra:
        def names(keys: list) -> str:
            return ", ".join(f"{e}/{n}" for e, n in keys[:3]) + (", ..." if len(keys) > 3 else "")

        differ = "; ".join(f"{what} {names(keys)}" for what, keys in (("missing", missing), ("unexpected", extra))
                           if keys)
        raise BundleCorruptError(f"bundle {path}: files differ from its manifest ({differ}); truncated?{done}")
    for (e, n), h in expected.items():
        if _sha256(blobs[(e, n)]) != h:
            raise BundleCorruptError(f"bundle {path}: {e}/{n} is corrupted (SHA-256 differs from the manifest){done}")
    if set(tuning) != set(manifest.tuning) or any(_sha256(d) != manifest.tuning[n] for n, d in tuning.items()):
        raise BundleCorruptError(f"bundle {path}: its tuning files differ from its manifest (missing, unexpected or "
                                 f"altered){done}")
    files: dict[str, dict[str, bytes]] = {}
    for (e, n), data in blobs.items():
        files.setdefault(e, {})[n] = data
    return files, tuning


def import_bundle(path: str | os.PathLike, *, target: str | None = None, into: str | None = None) -> BundleImport:
    """Verify the bundle at ``path`` completely, then install its entries into the cache folder.

    Args:
        path: the bundle.
        target: the target it must be for; default this process's (:func:`current_target_name`:
            the compile-only block's, else the GPU's). Where there is neither (an image builder
            with no GPU), it is required: a bundle serves one target only, and the machine has
            nothing to check the bundle's target against, so the caller says which GPU the
            bundle is meant for. Checking the bundle against its own manifest instead would
            always pass, and a bundle built for the wrong GPU would be installed without a word.
        into: the cache folder; default Triton's (``TRITON_CACHE_DIR``).

    Every check happens before anything is written (a refused bundle leaves the disk as it was, no
    build memo of its fingerprint check written either): the manifest's fields against
    this machine (:data:`FINGERPRINT_FIELDS`), then every file against its SHA-256 and the file
    list. Entries are then staged in the cache folder and each moved into place whole (an entry
    the cache already holds complete is kept); a ``__grp__`` file is rewritten to the entry's
    new paths and moved last, so no process ever sees a partial entry. What killed imports and
    Triton writes left in the cache folder is removed first, once stale (:func:`install_entries`).

    Raises:
        TypeError: ``path`` is not a path (str or os.PathLike).
        BundleMismatchError: another Triton version or build, Python, target, ptxas or
            environment (names the field).
        BundleCorruptError: a truncated or corrupted archive, a file missing or altered.
        BundleCacheDirError: the cache folder cannot be written (read-only, a file, disk full).
        BundleLockError: another process held a cache entry's lock past a compile's wall-time
            limit (a warm-up stopped with Ctrl-Z while it compiled that entry).
        NoTargetError: no ``target`` where there is no GPU and no compile-only block (names the
            bundle's target to pass).
        BundleReadError: the file cannot be read (permissions).
        BundleError: no such file.
        zerojit.watchdog.StallSettingError: ``ZEROJIT_COMPILE_WALL_S`` or ``ZEROJIT_COMPILE_STALL_S``
            (a lock wait's limit and notice) is not a number of seconds above 0; nothing installed.
    """
    path = _bundle_path(path)
    _watchdog.stall_seconds()  # a bad setting fails before anything is read, not at a lock wait midway
    _watchdog.wall_floor_seconds()
    co = active_compile_only()
    co_target = co.target_name if co is not None else None
    given = bool(target) and target != co_target  # a compile-only block's target is this process's, not a --target
    target = target or current_target_name()
    with _open(path) as tar:
        manifest = _read_manifest(tar, path)
        if target is None:
            raise NoTargetError(
                f"bundle {path} is for {manifest.target}, and this machine has no GPU and no compile-only target "
                f"to check that against: pass the target it will serve on (--target {manifest.target}, "
                f"import_bundle(target={manifest.target!r})); nothing was installed")
        check_fingerprint(manifest, path, target, target_given=given,  # a refused bundle writes no build memo
                          compile_only=co_target is not None and target == co_target, write=False)
        files, tuning = _verified_files(tar, path, manifest, "; nothing was installed")
    installed, present = install_entries(files, into)
    for name, data in tuning.items():  # each whole or not at all; the kernel checks its fields when it reads it
        _autotune.write_atomically(os.path.join(into or cache_dir(), _autotune.TUNING_FOLDER, name), data)
    # The build memos its check computed, now that the bundle is in: libtriton's hash is the
    # manifest's (checked equal), and Triton's key costs no hash since the check.
    _remember({"libtriton_sha256": manifest.triton_build, "triton_key": use_fast_triton_key(write=False)})
    return BundleImport(manifest, into or cache_dir(), tuple(installed), tuple(present))


def tuning_files(kernels: Iterable[str]) -> dict[str, bytes]:
    """The tuning files (:mod:`zerojit.autotune`: ``<kernel>-<source hash>.json`` in the cache
    folder's ``zerojit-tuning``) of the kernels named ``kernels``: ``{file name: bytes}``, as a
    bundle export carries them.

    Raises:
        OSError: a tuning file that cannot be read.
    """
    tuning: dict[str, bytes] = {}
    folder = os.path.join(cache_dir(), _autotune.TUNING_FOLDER)
    if not os.path.isdir(folder):
        return tuning
    names = sorted(os.listdir(folder))
    for kernel in sorted(set(kernels)):
        for f in names:
            if f.startswith(f"{kernel}-") and _TUNING_RE.match(f"tuning/{f}"):
                with open(os.path.join(folder, f), "rb") as fh:
                    tuning[f] = fh.read()
    return tuning


def pack_entries(entries: dict[str, dict[str, str]]) -> dict[str, dict[str, bytes]]:
    """Read entries (as :func:`entries_of` gives them) into memory: ``{entry: {file: bytes}}``."""
    out: dict[str, dict[str, bytes]] = {}
    for entry, names in entries.items():
        out[entry] = {}
        for name, p in names.items():
            with open(p, "rb") as f:
                out[entry][name] = f.read()
    return out


def _entry_of(compiled: Any) -> str:
    """The disk-cache entry (folder name) ``compiled`` was loaded from."""
    return os.path.basename(os.path.dirname(next(iter(_tc.compiled_files(compiled).values()))))


def _same_file(path: str, reference: str) -> bool:
    """True when ``path`` exists and holds the bytes of ``reference`` (both small cache files)."""
    try:
        with open(path, "rb") as a, open(reference, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False


def remove_leftovers(folder: str | None = None, *, entries: bool = True) -> list[str]:
    """Remove, once stale (:func:`zerojit.outputs.is_stale`: nothing in it modified for over an
    hour), what killed or failed writers left in the cache folder (default Triton's): this
    host's bundle-import staging folders (``.zerojit-import-<host>-*``, :func:`install_entries`)
    and, with ``entries``, Triton's own ``tmp.pid_<pid>_<uuid>`` folders in entry folders (its
    ``FileCacheManager.put`` writes a file there, then renames it into the entry; a kill or a
    full disk leaves the folder). Returns the paths removed.

    Only this host's staging folders: a cache shared by containers or over NFS has live
    importers whose processes this one cannot see. Triton's names carry no host, so age alone
    decides for them, which is safe: a live ``put`` creates, writes and renames within seconds,
    so a folder untouched for an hour is dead (unless the clocks of hosts sharing the folder
    differ by more than that). ``entries`` costs a listing of every entry folder, so a warm-up
    asks for it only when it compiles (when Triton writes entries).
    """
    root = folder or cache_dir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = [os.path.join(root, n) for n in names if n.startswith(f"{_STAGING_PREFIX}{HOST}-")]
    for name in names if entries else ():
        if _ENTRY_RE.match(name):
            try:
                found += [os.path.join(root, name, n) for n in os.listdir(os.path.join(root, name))
                          if n.startswith(_TRITON_TMP_PREFIX)]
            except OSError:  # not a folder, or removed meanwhile
                pass
    return remove_stale(found)


def install_entries(files: dict[str, dict[str, bytes]], into: str | None = None) -> tuple[list[str], list[str]]:
    """Install whole cache entries (``{entry: {file: bytes}}``, each with its ``__grp__`` file).

    Stages every entry in a temporary folder inside the cache folder, rewrites each group file's
    paths to the entry's final place, then moves each entry in under its entry lock: a missing
    entry folder is renamed into place at once; an existing incomplete one, or one whose files
    differ from the bundle's (a damaged or tampered cubin: the bundle's files are verified), gets
    its files first and its group file last; one identical to the bundle's is kept. Each entry's
    digests (:mod:`zerojit.integrity`) are recorded before it is moved in. Stale leftovers of
    killed imports and Triton writes are removed first (:func:`remove_leftovers`). Returns
    ``(installed, already_present)``.

    Raises:
        BundleCorruptError: an entry without exactly one ``__grp__`` file or an unreadable one, or
            a file that fails :func:`zerojit.integrity.file_problem` (a cubin cut short, metadata
            Triton cannot use: exported damaged by an older zerojit); nothing is installed then.
        BundleCacheDirError: the cache folder cannot be created or written (read-only, a file,
            disk full); nothing was installed, or (says how many) only whole entries.
        BundleLockError: another process held an entry's lock past a compile's wall-time limit
            (:func:`hold_lock`; names the entry and its lock file); the entries before it are
            installed, whole.
    """
    root = into or cache_dir()
    root = os.path.abspath(root) if root else root  # group files name absolute paths ("": refused below)
    for entry, names in files.items():
        groups = [n for n in names if n.startswith("__grp__")]
        if len(groups) != 1:
            raise BundleCorruptError(f"cache entry {entry} has {len(groups)} __grp__ files, not 1")
        for name, data in names.items():  # exported damaged (its SHA-256 then agrees): zerojit.integrity
            why = None if name in groups else integrity.file_problem(name, data)
            if why is not None:
                raise BundleCorruptError(f"cache entry {entry}: {name} is damaged ({why}); nothing was installed")
    try:
        os.makedirs(root, exist_ok=True)
        remove_leftovers(root)
        staging = tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{HOST}-", dir=root)  # the host: remove_leftovers
    except OSError as e:
        raise BundleCacheDirError(root, e) from None
    installed: list[str] = []
    present: list[str] = []
    try:
        for entry, names in files.items():
            final = os.path.join(root, entry)
            folder = os.path.join(staging, entry)
            os.makedirs(folder)
            for name, data in names.items():
                if name.startswith("__grp__"):
                    try:
                        group = json.loads(data)
                        children = group["child_paths"]
                    except (ValueError, KeyError, TypeError):
                        raise BundleCorruptError(f"cache entry {entry}: unreadable {name}") from None
                    group["child_paths"] = {c: os.path.join(final, c) for c in children}
                    data = json.dumps(group).encode()
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(data)
        for entry, names in files.items():
            final = os.path.join(root, entry)
            folder = os.path.join(staging, entry)
            group = next(n for n in names if n.startswith("__grp__"))
            lock = entry_lock(entry, root)
            waited = hold_lock(lock, wall=lambda: _watchdog.wall_limit(remembered_compile_seconds().get(entry)),
                               notice=lambda wall: f"zerojit: bundle import: waiting for another process's lock on "
                               f"cache entry {entry} ({lock.lock_file}); the import gives up after {wall:.0f} s")
            if waited is not None:
                raise BundleLockError(entry, lock.lock_file, waited, installed=len(installed))
            try:
                # the digests first: the entry counts as stored once its group file is in place
                integrity.record(final, {n: integrity.sha256(d) for n, d in names.items() if n != group}, replace=True)
                if all(_same_file(os.path.join(final, n), os.path.join(folder, n)) for n in names):
                    present.append(entry)
                    continue
                try:
                    os.rename(folder, final)  # a missing entry appears whole
                except OSError:  # an incomplete or altered one exists: its files first, the group file last
                    os.makedirs(final, exist_ok=True)
                    for name in sorted(names, key=lambda n: n == group):
                        os.replace(os.path.join(folder, name), os.path.join(final, name))
                installed.append(entry)
            finally:
                lock.release()
    except OSError as e:
        raise BundleCacheDirError(root, e, installed=len(installed)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return installed, present
