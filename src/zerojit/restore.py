"""Warm start: a warmed key space's variants restored from the disk cache without Triton's lookup.

A warm-up over a warm disk cache still runs every key through a fake launch: zerojit's checks,
Triton's binder and specialization, the cache-key hashes, the group-file lookup, a
``CompiledKernel`` that reads every IR file of the entry and builds a fresh ``namedtuple`` class,
and a launcher whose C source is generated and hashed again. That is about 3 ms per key on the
H200 machine, where the goal is 1 ms.

After a warm-up, zerojit writes a *restore index* next to Triton's cache
(``<cache>/.zerojit/restore-<plan>-<target>-triton<version>.json``): for each key, the entry Triton
produced (its folder, files, ``ASTSource`` arguments) and the in-process cache key Triton filed it
under. The next warm-up of the same key space, when the index's fingerprint still matches, puts each
variant straight into the kernel's in-process cache:

* the ``CompiledKernel`` is built from the metadata JSON and the cubin only (the IR files load
  when ``asm`` is read), with one metadata ``namedtuple`` class per field set; the entry's group
  file and each file are checked as they are read (:mod:`zerojit.integrity`: a damaged one is
  named once and its key goes through the normal warm-up, which compiles it again);
* on a GPU, the module and function load as before (:func:`zerojit.triton_compat.load_compiled`), and
  kernels with the same signature and launch metadata share one launcher object instead of each
  importing the launcher module again.

The pairing of an in-process key with its entry comes from Triton itself, so a restored variant
is exactly what Triton would have loaded for that key. The fingerprint (:data:`FINGERPRINT_FIELDS`)
guards the rest: the index format, Triton's version and build key, Python's version, zerojit's
version, the target, Triton's cache-invalidating environment variables and (Triton 3.7+) a
stages-inspection hook's pipeline; then each kernel class's module source (a SHA-256 of the
file: its ``warmup_inputs`` decides which in-process key a compile key reaches) and each
``triton.jit`` function's source hash (Triton's ``cache_key``, over its dependencies too). An
index whose fingerprint differs is refused whole, with a ``WarmupStats.recovered`` line naming
the first field that differs (an index moved from another Triton version names
``triton_version``); a missing file or a kernel the index does not cover sends that key through
the normal warm-up. Nothing is ever half-restored (a variant enters the cache only once it is
fully loaded).

The index is JSON, never pickle: reading one runs no code, whoever wrote it. Values go through
:func:`zerojit.manifest.encode_exact` (constexprs, specializations; a key holding a value with no
exact JSON form, such as an infinite float constexpr, is not indexed and takes the normal warm-up).
Format 8 keeps each entry's nested fields (``src``, ``specialization``, ``key_memo``) as that JSON's
text, read by :func:`zerojit.manifest.decode_exact_text` (as strict, and stricter on non-finite
numbers), and its files as one folder and their names: on the CI machine, reading the 217 entries of
the 111-key matrix's two indexes went from 9.3 to 4.2 ms, and the warm start's net new objects from
~51,000 to ~26,500 (74 to 38 young collections of Python's collector). A full collection (75-89 ms
on the H100 host) still fell inside every warm call measured there: it comes due with what the
process allocated before the call. The file is a header line holding the SHA-256 of the rest, then
the body; it is written atomically (a temporary file in the same folder, flushed and fsynced, then
renamed). The digest detects damage (a cut file, a flipped bit), not tampering: whoever can write
the index can write a matching digest, which is why a cache folder that other users can write to is
warned about (:func:`cache_folder_warnings`). An index that cannot be used (any failure to read or
parse it, a digest that does not match, a field missing or of the wrong type anywhere in it) is not
used at all: one ``WarmupStats.recovered`` line names the file and what is wrong, the warm-up runs
normally and rewrites it. An index of an older zerojit (``restore-*.pkl``) is never read.

On the H200 machine restoring costs ~0.6 ms a key (lookup, module and function load, launcher)
for a 111-key space. The same records (the index's body, as JSON values) travel between the ranks
of a process group, which restore each other's keys (:mod:`zerojit.distributed`).

``ZEROJIT_RESTORE=0`` turns the index off (no restore, no index written): every key then goes
through Triton's own disk-cache lookup, as with plain Triton.

Not restored (normal warm-up instead): kernels with ``fast_path`` (their warm-up launch records
arguments for the fast launcher), kernels that are not ``TritonJitKernel`` and a custom Triton
cache manager. The ``CompiledKernel`` fields differ between Triton versions
(:func:`zerojit.triton_compat.new_compiled_kernel` sets each version's).
"""

from __future__ import annotations

import contextlib
import functools
import grp
import hashlib
import json
import os
import pwd
import stat
import sys
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from . import triton_compat as _tc
from .cache import cache_dir, use_fast_triton_key
from .switches import switch
from .integrity import (NotRegularFileError, digests_of, plain_manager_class, read_checked, read_group_file,
                        read_regular, remove_irregular)
from ._version import __version__
from .kernel import _DEVICE_CACHE_LOCK, CompiledVariant, TritonJitKernel
from .manifest import decode_exact_text, encode_exact_text
from .outputs import write_output
from .reports import count
from .specialization import SpecClass

__all__ = ["restore_variants", "restore_records", "records", "save_index", "index_path", "build_compiled_kernel",
           "install", "shared_launchers", "fingerprint_mismatch", "FINGERPRINT_FIELDS", "cache_folder_warnings"]

_FORMAT = 8  # 7: JSON (a header line with the body's SHA-256, then the body), no pickle; 8: compact entries
_HEADER = "zerojit-restore-index"  # the header line's "format"

#: The fields of an index's fingerprint, in the order they are checked (the first that differs is
#: named when an index is refused).
FINGERPRINT_FIELDS = ("format", "triton_version", "triton_build", "python", "zerojit_version", "target", "cache_env",
                      "custom_pipeline")


@dataclass(frozen=True)
class _Entry:
    """One key's restore record, as read back (:func:`_parse_entry`)."""

    function: str  # "module:qualname" of the triton.jit function
    triton_key: str  # the key of Triton's in-process cache (specialization + options)
    group: tuple[tuple[str, str], ...]  # (file name, path relative to the cache folder)
    src: tuple  # ASTSource's (signature, constants, attrs)
    specialization: tuple[SpecClass, ...]
    param_names: tuple[str, ...]
    key_memo: tuple = ()  # Triton's (specialization, options) -> triton_key memo entries of this variant


def index_path(digest: str, target: Any, kind: str = "restore") -> str:
    """The restore index of the key space with plan digest ``digest`` for Triton ``target``, by
    this Triton version (several versions sharing a cache folder keep one index each).
    ``kind``: the file's first word, ``"generic"`` for the index of a warm-up's generic variants
    (:mod:`zerojit.generic`), which is kept apart from its keys'."""
    return os.path.join(cache_dir(), ".zerojit",
                        f"{kind}-{digest[:32]}-{target.backend}-{target.arch}-triton{_tc.TRITON_VERSION}.json")


def _supported() -> bool:
    manager = plain_manager_class(_tc.cache_manager_class())  # zerojit's managers wrap Triton's
    return (switch("ZEROJIT_RESTORE") and not _tc.interpreting()
            and manager in (None, _tc.default_cache_manager))  # None: Triton's default, the file cache


def _global_fingerprint(target: Any) -> dict:
    """What an index is valid for (:data:`FINGERPRINT_FIELDS`), as JSON values (lists, not
    tuples: compared with an index's as read)."""
    return {
        "format": _FORMAT,
        "triton_version": _tc.TRITON_VERSION,
        "triton_build": hashlib.sha256(use_fast_triton_key().encode()).hexdigest(),
        "python": list(sys.version_info[:2]),
        "zerojit_version": __version__,
        "target": [target.backend, target.arch, target.warp_size],
        "cache_env": [[k, v] for k, v in sorted(_tc.cache_invalidating_env().items())],
        "custom_pipeline": _tc.stages_hook_fingerprint(),  # Triton 3.7+: part of its keys
    }


def fingerprint_mismatch(found: Any, target: Any) -> str | None:
    """Why an index whose fingerprint is ``found`` cannot serve this process for ``target``: the
    first field of :data:`FINGERPRINT_FIELDS` that differs, with both values; None when it matches.
    """
    ours = _global_fingerprint(target)
    if not isinstance(found, dict):
        found = {}  # an index from a zerojit before named fields: its format differs
    for name in FINGERPRINT_FIELDS:
        theirs = found.get(name, "<missing>")
        if theirs != ours[name]:
            return f"field {name!r} differs: the index has {_short(theirs)}, this process {_short(ours[name])}"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@functools.lru_cache(maxsize=None)
def _module_stamp(path: str) -> str:
    # the source's content, not its mtime: a fresh checkout or reinstall of the same code still
    # restores (about 20 us a module, once per process)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _class_stamp(kernel: Any) -> tuple:
    module = sys.modules.get(type(kernel).__module__)
    path = getattr(module, "__file__", None)
    return (type(kernel).__qualname__, _module_stamp(path) if path else None)


def _class_file(kernel: Any) -> str:
    return getattr(sys.modules.get(type(kernel).__module__), "__file__", None) or type(kernel).__module__


def _function_name(jit_fn: Any) -> str:
    return f"{jit_fn.fn.__module__}:{jit_fn.fn.__qualname__}"


def _restorable(kernel: Any) -> bool:
    return isinstance(kernel, TritonJitKernel) and not kernel.fast_path


def _key_memo(jit_fn: Any, device: Any, triton_key: str) -> Any:
    """The entries of Triton's per-device ``kernel_key_cache`` (``(specialization, options)`` ->
    in-process key, filled by ``compute_cache_key`` at a launch) that lead to ``triton_key``:
    restored with the variant, so the first request does not recompute them (~0.1 ms a kernel
    in ``replace_callables``). As :func:`zerojit.manifest.encode_exact_text` writes them; none when
    one has no exact JSON form."""
    with _DEVICE_CACHE_LOCK:
        memo = _tc.key_memo(jit_fn, device)
    try:
        return encode_exact_text(tuple(k for k, v in list(memo.items()) if v == triton_key))
    except TypeError:  # e.g. a constexpr function in the specialization
        return encode_exact_text(())


def _entry(job: int, variant: CompiledVariant, root: str, device: Any) -> dict | None:
    """The restore record of job ``job``'s warmed variant, as JSON values (read back by
    :func:`_parse_entry`); None where it cannot be restored, or holds a value with no exact JSON
    form (:func:`zerojit.manifest.encode_exact`: an infinite float, ...): that key then takes
    the normal warm-up."""
    compiled = variant.compiled
    source = _tc.source_of(compiled)
    if source is None or not variant.triton_key:
        return None
    fn, signature, constants, attrs = source
    files = _tc.compiled_files(compiled)  # absolute paths (Triton's group file), all in the entry's folder
    folders = {os.path.dirname(path) for path in files.values()}
    folder = os.path.relpath(folders.pop(), root) if len(folders) == 1 else ".."
    if not _is_name(folder) or any(not _is_name(n) or os.path.basename(p) != n for n, p in files.items()):
        return None  # (the reader's rule: one name in the cache folder, then file names)
    try:
        src = encode_exact_text((signature, constants, attrs))
        specialization = encode_exact_text(tuple((s.type, s.attr) for s in variant.specialization))
    except TypeError:
        return None
    return {"job": job, "function": _function_name(fn), "triton_key": variant.triton_key, "folder": folder,
            "files": list(files), "src": src, "specialization": specialization,
            "param_names": list(variant.param_names), "key_memo": _key_memo(fn, device, variant.triton_key)}


def _plan_names(state: Any) -> list[list[str]]:
    # the LaunchSpec.kwargs name sets of the kernel class's argument plans; only identifiers, as
    # the reader demands (they name keyword arguments in generated code)
    return [list(names) for names in (state.plans if state is not None else ())
            if all(type(n) is str and n.isidentifier() for n in names)]


def records(jobs: Sequence[tuple[Any, Any]], variants: dict[int, CompiledVariant], target: Any) -> dict | None:
    """The restore records of ``variants`` (job index -> its warmed variant), as JSON values:
    what a restore index holds, and what ranks of a process group send each other
    (:mod:`zerojit.distributed`). None when nothing of it can be restored."""
    if not _supported():
        return None
    root = cache_dir()
    device = _tc.current_device()
    entries: list[dict] = []
    stamps: dict[str, list] = {}
    sources: dict[str, str] = {}
    plans: dict[str, list] = {}
    for i, variant in sorted(variants.items()):
        kernel = jobs[i][0]
        entry = _entry(i, variant, root, device) if variant is not None and _restorable(kernel) else None
        if entry is not None:
            entries.append(entry)
            stamps[kernel.name] = list(_class_stamp(kernel))
            sources[entry["function"]] = _tc.source_hash(kernel.kernel)
            plans[kernel.name] = _plan_names(type(kernel)._launch_state)
    if not entries:
        return None
    return {"fingerprint": _global_fingerprint(target), "keys": len(jobs), "classes": stamps, "functions": sources,
            "plans": plans, "entries": entries}


def save_index(jobs: Sequence[tuple[Any, Any]], variants: Sequence[CompiledVariant | None], digest: str,
               target: Any, kind: str = "restore", notes: list[str] | None = None) -> str | None:
    """Write the restore index of ``jobs`` (``variants[i]``: job i's result, None if it failed).

    The file is a header line (``{"format": "zerojit-restore-index", "sha256": ...}``: the
    SHA-256 of the rest) and the :func:`records` body as JSON. Written atomically (a temporary
    file in the same folder, flushed and fsynced, then renamed over the old one), so a reader
    sees the old index or the new one, whole. Returns the path, or None when nothing here can be
    restored (or the folder is not writable: the index only speeds up the next warm start).
    Whatever is at the index's path and is not a regular file (a folder, a FIFO, a device, a
    symbolic link: never read, :func:`_read_index`) is removed first, the link or node itself.
    ``kind``: as for :func:`index_path`. ``notes``: where :func:`restore_variants` said this index
    was not used; that line then ends with whether it was written again (", and the index
    rewritten", or "; the index could not be rewritten: <why>").
    """
    body = records(jobs, {i: v for i, v in enumerate(variants) if v is not None}, target)
    if body is None:
        return None
    data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    header = json.dumps({"format": _HEADER, "sha256": hashlib.sha256(data).hexdigest()}).encode()
    path = index_path(digest, target, kind)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        remove_irregular(path)  # a folder, FIFO, device or link there (never read: _read_index) is replaced
        write_output(path, header + b"\n" + data)
    except OSError as e:
        _said(notes, path, f"; the index could not be rewritten: {e.strerror or e}")
        return None
    _said(notes, path, ", and the index rewritten")
    return path


def _said(notes: list[str] | None, path: str, outcome: str) -> None:
    """End the line of ``notes`` saying that the index at ``path`` was not used (it ends with
    :data:`_INSTEAD`) with ``outcome``: whether it was written again."""
    for i, line in enumerate(notes or ()):
        if line.startswith((f"restore index {path} is unreadable (", f"restore index {path} refused: ")) and \
                line.endswith(_INSTEAD):
            notes[i] = line + outcome


class _Unusable(ValueError):
    """An index or a body of records that cannot be used (damaged, cut, not zerojit's, or a field
    of the wrong type); the message says what is wrong."""


def _read_index(path: str) -> Any:
    """The body of the index at ``path``, parsed but not yet checked (:func:`_parse_records`);
    None when there is none.

    Only a regular file is read (:func:`zerojit.integrity.read_regular`): a FIFO there cannot
    block the warm-up, a device (``/dev/zero``) is never read, and a symbolic link is not followed
    (zerojit writes the index itself, never a link, as with every file of the cache it reads).

    Raises:
        _Unusable: not a regular file, no header line, another format, or a SHA-256 that does not
            match the body.
        Exception: whatever reading or parsing raised (OSError, UnicodeDecodeError, ...).
    """
    try:
        data = read_regular(path)
    except FileNotFoundError:
        return None
    except NotRegularFileError as e:  # replaced when the index is written again (save_index)
        raise _Unusable(f"it is {e.what}, not a regular file") from None
    head, newline, rest = data.partition(b"\n")
    header = json.loads(head) if newline else None
    if type(header) is not dict or header.get("format") != _HEADER:
        raise _Unusable("no zerojit restore index header line")
    if header.get("sha256") != hashlib.sha256(rest).hexdigest():
        raise _Unusable("its body does not match the SHA-256 in its header: damaged, a cut file or a flipped bit")
    return json.loads(rest)


def _field(data: dict, name: str, kind: type, where: str) -> Any:
    if name not in data:
        raise _Unusable(f"{where}: field {name!r} is missing")
    value = data[name]
    if type(value) is not kind:
        article = "an" if kind.__name__[0] in "aeiou" else "a"
        raise _Unusable(f"{where}: field {name!r} must be {article} {kind.__name__}, not {type(value).__name__}")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if type(value) is not list or any(type(v) is not str for v in value):
        raise _Unusable(f"{where} must be a list of strings")
    return tuple(value)


def _decoded(text: str, where: str) -> Any:
    try:
        return decode_exact_text(text, where)
    except ValueError as e:
        raise _Unusable(str(e)) from None


def _is_name(text: Any) -> bool:
    # one component of a path inside the cache folder: no separator, not "", "." or ".." (nor hidden)
    return type(text) is str and bool(text) and "/" not in text and not text.startswith(".") and "\0" not in text


def _parse_entry(data: Any, where: str) -> _Entry:
    """A record of :func:`_entry`, checked field by field.

    Raises:
        _Unusable: a field missing or of the wrong type, a file path outside the cache folder.
    """
    if type(data) is not dict:
        raise _Unusable(f"{where} must be an object, not {type(data).__name__}")
    folder = _field(data, "folder", str, where)
    if not _is_name(folder):
        raise _Unusable(f"{where}: 'folder' {_short(folder)} is no folder of the cache folder")
    group = []
    for name in _field(data, "files", list, where):
        if not _is_name(name):
            raise _Unusable(f"{where}: 'files' entry {_short(name)} is no file name")
        group.append((name, f"{folder}/{name}"))
    src = _decoded(_field(data, "src", str, where), f"{where}: 'src'")
    if (type(src) is not tuple or len(src) != 3 or any(type(d) is not dict for d in src)
            or any(type(k) is not str for k in src[0])):
        raise _Unusable(f"{where}: 'src' is no (signature, constants, attrs) of an ASTSource")
    specialization = []
    pairs = _decoded(_field(data, "specialization", str, where), f"{where}: 'specialization'")
    if type(pairs) is not tuple:
        raise _Unusable(f"{where}: 'specialization' must be a tuple of (type, attr) pairs")
    for pair in pairs:
        if type(pair) is not tuple or len(pair) != 2 or type(pair[0]) is not str:
            raise _Unusable(f"{where}: 'specialization' entry {_short(pair)} is no (type, attr) pair")
        specialization.append(SpecClass(*pair))
    memo = _decoded(_field(data, "key_memo", str, where), f"{where}: 'key_memo'")
    if type(memo) is not tuple:
        raise _Unusable(f"{where}: 'key_memo' must be a tuple")
    try:
        hash(memo)  # dict keys of Triton's memo
    except TypeError:
        raise _Unusable(f"{where}: 'key_memo' holds a list") from None
    return _Entry(function=_field(data, "function", str, where), triton_key=_field(data, "triton_key", str, where),
                  group=tuple(group), src=src, specialization=tuple(specialization),
                  param_names=_strings(_field(data, "param_names", list, where), f"{where}: 'param_names'"),
                  key_memo=memo)


@dataclass(frozen=True)
class _Records:
    """A body of :func:`records`, checked (:func:`_parse_records`)."""

    classes: dict[str, tuple]  # kernel name -> _class_stamp
    functions: dict[str, str]  # "module:qualname" -> Triton's source hash
    plans: dict[str, tuple[tuple[str, ...], ...]]  # kernel name -> LaunchSpec.kwargs name sets
    entries: dict[int, _Entry]  # job index -> its record


def _parse_records(body: dict, num_jobs: int) -> _Records:
    """The fields of ``body`` (a :func:`records` body whose fingerprint matched) past the
    fingerprint, checked: every type, every job index within ``num_jobs`` and given once.

    Raises:
        _Unusable: naming the first field that is wrong.
    """
    keys = _field(body, "keys", int, "the body")
    if keys != num_jobs:
        raise _Unusable(f"field 'keys' is {keys}, this key space has {num_jobs}")
    classes = {}
    for name, stamp in _field(body, "classes", dict, "the body").items():
        if (type(stamp) is not list or len(stamp) != 2 or type(stamp[0]) is not str
                or stamp[1] is not None and type(stamp[1]) is not str):
            raise _Unusable(f"'classes' entry {name!r} is no (class name, module SHA-256) pair")
        classes[name] = tuple(stamp)
    functions = {}
    for name, source_hash in _field(body, "functions", dict, "the body").items():
        if type(source_hash) is not str:
            raise _Unusable(f"'functions' entry {name!r} must be a str, not {type(source_hash).__name__}")
        functions[name] = source_hash
    plans = {}
    for name, sets in _field(body, "plans", dict, "the body").items():
        if type(sets) is not list:
            raise _Unusable(f"'plans' entry {name!r} must be a list, not {type(sets).__name__}")
        plans[name] = tuple(_strings(s, f"'plans' entry {name!r}") for s in sets)
        if not all(n.isidentifier() for names in plans[name] for n in names):  # they name kwargs in generated code
            raise _Unusable(f"'plans' entry {name!r} holds a name that is no identifier")
    entries: dict[int, _Entry] = {}
    for n, data in enumerate(_field(body, "entries", list, "the body")):
        job = _field(data, "job", int, f"entry {n}") if type(data) is dict else None
        if job is None or not 0 <= job < num_jobs or job in entries:
            raise _Unusable(f"entry {n}: 'job' is no job index of this key space, or one given twice")
        entries[job] = _parse_entry(data, f"entry {n} (job {job})")
    return _Records(classes, functions, plans, entries)


def _why(error: Exception) -> str:
    text = str(error) if isinstance(error, _Unusable) else f"{type(error).__name__}: {error}"
    return text if len(text) <= 200 else text[:197] + "..."


def cache_folder_warnings() -> list[str]:
    """One warning line (none when all is well) when Triton's cache folder, or zerojit's
    ``.zerojit`` folder in it, can be written by other users: their restore index and digests
    decide which compiled code a warm-up loads, so whoever can write there chooses the code.

    The rule (mode bits only, of those two folders, not of the folders above them): writable
    by others (``S_IWOTH``, sticky bit or not: the sticky bit keeps others from replacing a file,
    not from adding one), or writable by the group when that group is not the user's private
    group (a group named as the user, with no other member). Only a warning (the index is still
    used): a JSON index never runs code, and every file it names is checked as any other entry.
    """
    root = cache_dir()
    shared = []
    for folder in (root, os.path.join(root, ".zerojit")):
        try:
            st = os.stat(folder)
        except OSError:  # none yet (created with this user's umask)
            continue
        if st.st_mode & stat.S_IWOTH or st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid):
            who = "every user" if st.st_mode & stat.S_IWOTH else f"group {_group_name(st.st_gid)}"
            shared.append(f"{folder} (mode {stat.S_IMODE(st.st_mode):o}: {who})")
    if not shared:
        return []
    return [f"WARNING: other users can write to {' and '.join(shared)}: the restore index and digests there decide "
            "which compiled code is loaded; make it writable by you only (chmod go-w)"]


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _private_group(gid: int) -> bool:
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:  # a user or group with no name here (a container's numeric ids)
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


@functools.lru_cache(maxsize=None)
def _metadata_class(fields: tuple[str, ...]) -> type:
    # Triton builds this namedtuple class afresh for every CompiledKernel (~0.3 ms each)
    return namedtuple("KernelMetadata", fields)


def _lazy_asm_class() -> type:
    class LazyAsm(_tc.AsmDict):
        """``CompiledKernel.asm`` whose IR texts are read from the cache entry on first use."""

        def __init__(self, files: dict[str, str], binary_ext: str) -> None:
            super().__init__()
            self._files = files  # IR name ("ptx", "cubin", ...) -> path
            self._binary_ext = binary_ext

        def _read(self, ext: str) -> Any:
            data = read_checked(self._files[ext])  # zerojit.integrity: its digest, else its structure
            return data if ext == self._binary_ext else data.decode("utf-8")

        def _load_all(self) -> None:
            for ext in self._files:
                if not dict.__contains__(self, ext):
                    dict.__setitem__(self, ext, self._read(ext))

        def __missing__(self, key: str) -> Any:
            if key in self._files:
                value = self._read(key)
                self[key] = value
                return value
            return super().__missing__(key)

        def __contains__(self, key: object) -> bool:
            return key in self._files or dict.__contains__(self, key)

        def get(self, key: str, default: Any = None) -> Any:
            return self[key] if key in self else default

        def __iter__(self):
            self._load_all()
            return dict.__iter__(self)

        def __len__(self) -> int:
            self._load_all()
            return dict.__len__(self)

        def keys(self):
            self._load_all()
            return dict.keys(self)

        def values(self):
            self._load_all()
            return dict.values(self)

        def items(self):
            self._load_all()
            return dict.items(self)

        def __reduce__(self):
            self._load_all()
            return (dict, (dict(dict.items(self)),))

    return LazyAsm


_LazyAsm = None


def build_compiled_kernel(jit_fn: Any, group: dict[str, str], src: tuple, backends: dict) -> Any:
    """The ``CompiledKernel`` Triton's ``compile`` returns on a disk-cache hit of the entry whose
    files are ``group`` (file name -> path), for ``src`` = ``(signature, constants, attrs)`` of
    its ``ASTSource``: Triton's ``CompiledKernel.__init__`` (each version's fields:
    :func:`zerojit.triton_compat.new_compiled_kernel`), minus the IR reads (``asm`` reads them on
    use) and the per-kernel namedtuple class. ``backends``: a cache of Triton backends by target,
    shared across calls.

    The entry's group file, metadata and binary are checked as they are read
    (:mod:`zerojit.integrity`), IR files when ``asm`` reads them.

    Raises:
        zerojit.integrity.DamagedFileError: a file of the entry fails its check (named once in the
            warm-up report; the entry is dropped, so Triton compiles it again).
        OSError: a file of the entry is gone.
        ValueError: its group file lists other files than ``group`` (the entry was stored again).
        StopIteration: the group has no metadata file.
    """
    global _LazyAsm
    if _LazyAsm is None:
        _LazyAsm = _lazy_asm_class()
    meta_name, meta_path = next((name, p) for name, p in group.items()
                                if name.endswith(".json") and not name.startswith("__grp__"))
    folder = os.path.dirname(meta_path)
    if set(read_group_file(os.path.join(folder, _tc.group_file_name(meta_name)))) != set(group):
        raise ValueError(f"the group file of cache entry {folder} lists other files")
    digests = digests_of(folder)
    metadata = json.loads(read_checked(meta_path, digests))
    t = metadata["target"]
    metadata["target"] = _tc.gpu_target(t["backend"], t["arch"], t["warp_size"])
    md = _metadata_class(tuple(sorted(metadata)))(**metadata)
    backend = _tc.backend_for(md.target, backends)
    files = {os.path.splitext(p)[1][1:]: p for name, p in group.items() if not name.endswith(".json")}
    asm = _LazyAsm(files, backend.binary_ext)
    asm[backend.binary_ext] = read_checked(files[backend.binary_ext], digests)
    return _tc.new_compiled_kernel(jit_fn=jit_fn, src=src, metadata=md, metadata_group=group, asm=asm,
                                   backend=backend)


def install(jit_fn: Any, device: Any, triton_key: str, group: dict[str, str], src: tuple, backends: dict, *,
            load: bool) -> Any:
    """The ``CompiledKernel`` filed under ``triton_key`` in ``jit_fn``'s in-process cache for
    ``device``: the one already there, else one built from the entry's files (see
    :func:`build_compiled_kernel`); loaded (module, function, launcher) when ``load``.

    Raises:
        Exception: whatever building or loading raised; nothing is filed then.
    """
    with _DEVICE_CACHE_LOCK:
        kernel_cache = _tc.device_cache(jit_fn, device).kernel_cache
    compiled = kernel_cache.get(triton_key)
    fresh = compiled is None
    if fresh:
        compiled = build_compiled_kernel(jit_fn, group, src, backends)
    else:  # Triton 3.7+: a user's async compile of this key may have filed its future there
        compiled = _tc.resolved(compiled)
    if load:
        _tc.load_compiled(compiled)
    # an entry filed meanwhile (another thread) wins and ours is dropped: never replace one
    return _tc.file_compiled(kernel_cache, triton_key, compiled) if fresh else compiled


def _prepare_launches(kernel: Any, device: Any, entry: _Entry, plans: tuple, planned: set[str]) -> None:
    """What a warm-up launch leaves behind besides the compiled kernel, so the first request's
    launch costs what later ones do: Triton's key memo entries of the variant, and (once per
    kernel class) zerojit's argument plans for the ``LaunchSpec.kwargs`` name sets the warm-up
    used (each generated code, ~0.3 ms; see :mod:`zerojit._launch`)."""
    if entry.key_memo:
        with _DEVICE_CACHE_LOCK:
            memo = _tc.device_cache(kernel.kernel, device).key_memo
        for k in entry.key_memo:
            memo.setdefault(k, entry.triton_key)
    if kernel.name not in planned:
        planned.add(kernel.name)
        state = type(kernel)._launch_state
        if state is not None:
            for names in plans:
                state.plan(names)


class _SharedLaunchers:
    """Stands in for the driver's ``launcher_cls``: kernels with one signature share one launcher
    (Triton's ``CudaLauncher`` keeps nothing per kernel beyond the signature's C launch entry and
    a few metadata fields: :func:`zerojit.triton_compat.launcher_share_key`)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.made: dict[str, Any] = {}

    def __call__(self, src: Any, metadata: Any) -> Any:
        key = _tc.launcher_share_key(src, metadata)
        if key is None:
            return self.real(src, metadata)
        launcher = self.made.get(key)
        if launcher is None:
            launcher = self.made[key] = self.real(src, metadata)
        return launcher


@contextlib.contextmanager
def shared_launchers() -> Iterator[None]:
    """Within this block, kernels loaded on the active driver share launchers by signature
    instead of each importing its launcher module again (~0.3 ms a kernel on the H200 host with
    Triton 3.6; from 3.7 on a launcher imports nothing, and sharing saves its set-up)."""
    drv = _tc.active_driver()
    shared = _SharedLaunchers(_tc.launcher_class(drv))
    _tc.set_launcher_class(drv, shared)
    try:
        yield
    finally:
        if _tc.launcher_class(drv) is shared:
            _tc.set_launcher_class(drv, shared.real)


# an index not used at all; save_index then says whether it was written again (_said)
_INSTEAD = "warmed up through Triton's lookup instead"


def restore_variants(jobs: Sequence[tuple[Any, Any]], digest: str, target: Any, *, load: bool,
                     notes: list[str] | None = None, kind: str = "restore") -> dict[int, tuple[CompiledVariant, float]]:
    """Restore what the index of ``jobs`` covers into the kernels' in-process caches.

    Args:
        jobs: the warm-up's ``(kernel, key)`` jobs, in plan order (``digest`` is their digest).
        target: the Triton target being warmed for.
        load: load modules, functions and launchers (on a GPU).
        notes: gets one line when an index is there but not used, naming the file and why:
            unreadable (any failure to read or parse it, a SHA-256 that does not match, a field
            missing or of the wrong type), or a fingerprint field that differs (named:
            ``triton_version`` for an index of another Triton). The warm-up then runs normally
            and rewrites the index; :func:`save_index`, given the same ``notes``, ends that line
            with whether it could.
        kind: as for :func:`index_path`.

    Returns:
        ``{job index: (variant, seconds)}`` for each restored job; every other job still needs a
        normal warm-up. Never raises for a stale, damaged or missing index (it restores nothing).
    """
    if not _supported():
        return {}
    path = index_path(digest, target, kind)
    try:
        body = _read_index(path)
    except Exception as e:  # whatever a damaged file makes the reader raise: never a failed warm-up
        if notes is not None:
            notes.append(f"restore index {path} is unreadable ({_why(e)}); {_INSTEAD}")
        return {}
    return restore_records(jobs, body, target, load=load, notes=notes, what=f"restore index {path}",
                           noun="generic variant" if kind == "generic" else "key")


def restore_records(jobs: Sequence[tuple[Any, Any]], body: Any, target: Any, *, load: bool,
                    notes: list[str] | None = None, what: str = "restore records",
                    noun: str = "key") -> dict[int, tuple[CompiledVariant, float]]:
    """Restore the variants of :func:`records` ``body`` (made for these very ``jobs``; None:
    there are none) that still match this process (fingerprint, kernel classes, ``triton.jit``
    source hashes, files on disk).

    Returns ``{job index: (variant, seconds)}``; never raises for a stale or broken record. A body
    not used at all gives one line in ``notes``: ``"<what> refused: field 'triton_version'
    differs: ..."`` (another fingerprint) or ``"<what> is unreadable (<why>)"`` (a field missing
    or of the wrong type, anywhere: nothing of it is used then). A kernel whose keys it skips
    because its code changed since the index was written (its kernel class's module, its
    ``triton.jit`` function or that function's ``cache_key``) gives one line naming the kernel,
    what changed and how many of its jobs (``noun``: "key", or "generic variant" for a generic
    index): they still warm up (through Triton's lookup), so the line only says why this warm
    start was slower."""
    import time

    if not _supported() or body is None:
        return {}
    try:
        fingerprint = _field(body, "fingerprint", dict, "the body") if type(body) is dict else None
        if fingerprint is None:
            raise _Unusable(f"the body is a {type(body).__name__}, not an object")
        why = fingerprint_mismatch(fingerprint, target)
        parsed = _parse_records(body, len(jobs)) if why is None else None
    except Exception as e:  # a damaged body: it may hold anything JSON can
        if notes is not None:
            notes.append(f"{what} is unreadable ({_why(e)}); {_INSTEAD}")
        return {}
    if why is not None:
        if notes is not None:
            notes.append(f"{what} refused: {why}; {_INSTEAD}")
        return {}
    root = cache_dir()
    device = _tc.current_device()
    functions_ok: dict[str, bool] = {}
    backends: dict = {}
    planned: set[str] = set()
    restored: dict[int, tuple[CompiledVariant, float]] = {}
    stale: dict[str, list] = {}  # kernel name -> [what changed since the index was written, keys]
    with shared_launchers() if load else contextlib.nullcontext():
        for i, entry in parsed.entries.items():
            start = time.perf_counter()
            kernel, key = jobs[i]
            if not _restorable(kernel):
                continue
            jit_fn = kernel.kernel
            changed = None  # the function first: an edited kernel body changes its module's stamp too
            if entry.function != _function_name(jit_fn):
                changed = f"its triton.jit function (the index has {entry.function})"
            else:
                ok = functions_ok.get(entry.function)
                if ok is None:
                    ok = functions_ok[entry.function] = parsed.functions.get(entry.function) == _tc.source_hash(jit_fn)
                if not ok:
                    changed = "its triton.jit function's source, or a function or global it uses (Triton's cache_key)"
                elif parsed.classes.get(kernel.name) != _class_stamp(kernel):  # its warmup_inputs may differ now
                    changed = f"the module of its kernel class ({_class_file(kernel)})"
            if changed is not None:
                stale.setdefault(kernel.name, [changed, 0])[1] += 1
                continue
            group = {name: os.path.join(root, rel) for name, rel in entry.group}
            try:
                compiled = install(jit_fn, device, entry.triton_key, group, entry.src, backends, load=load)
                _prepare_launches(kernel, device, entry, parsed.plans.get(kernel.name, ()), planned)
            except Exception:  # a file gone, a load refused, a plan refused: the normal warm-up says why
                continue
            variant = CompiledVariant(kernel=kernel.name, key=key, triton_key=entry.triton_key,
                                      specialization=entry.specialization, param_names=entry.param_names,
                                      loaded=load, compiled=compiled)
            restored[i] = (variant, time.perf_counter() - start)
    if notes is not None:
        notes.extend(f"{what}: {count(n, noun)} of kernel {name!r} not restored: {changed} changed since the "
                     "index was written; warmed up through Triton's lookup instead"
                     for name, (changed, n) in stale.items())
    return restored
