"""Damage in Triton's disk cache: a digest of every file zerojit stores or first sees, checked
as each file is read.

Digests detect damage (a file cut short, a flipped bit, a stray edit), not tampering: whoever
can write the cache folder can write the digests beside it too. A cache folder other users can
write to is as trusted as they are.

* **Recorded.** Each entry's files get a SHA-256 each in ``<cache>/.zerojit/digests/<entry>.json``,
  written atomically (a temporary file, then a rename) *before* the entry counts as stored: in
  :func:`checked_manager_class`'s ``put_group``, before Triton writes the group file (an entry's
  commit point), and, for a C module Triton caches alone (Triton 3.6's per-signature launcher
  ``__triton_launcher<EXT_SUFFIX>``, its ``cuda_utils``), in ``put``, before the module is renamed
  into place. The warm-up's process and its compile workers use that manager; after a warm-up
  it stays installed for the process's lifetime (:func:`install_checked_manager`), so runtime
  compiles (the monitor's warn and off modes, ``zerojit exec``) store and check the same way.
  ``bundle import`` records the digests of what it installs; zerojit's per-install copies of
  launcher modules (:func:`zerojit.cache.remember_launcher`) keep theirs beside each copy
  (``<copy>.sha256``).
* **Checked** as each file is read: every member of an entry when Triton's lookup
  (``get_group``) finds it (Triton then reads them all), the metadata and binary when zerojit's
  restore builds a kernel (IR files only when ``asm`` reads them), every file ``bundle export``
  packs. A file with no digest yet (an entry plain Triton wrote, or one from before digests)
  gets a structural check that needs none, then its digest is recorded: a binary or C module
  must be an ELF file whose headers and sections all fit in its size (which catches a cubin cut
  short), the metadata must parse to the fields Triton reads with sane values
  (:func:`zerojit.triton_compat.metadata_problem`), an IR file must be UTF-8 text.
* **A failed check is a miss.** The file is named once (in the warm-up report's
  ``WarmupStats.recovered``; outside a warm-up, one ``logging`` warning on logger
  ``"zerojit.integrity"``) and the entry's group file is removed, so every reader (Triton's
  lookup, the restore index, ``bundle export``) sees a miss until Triton compiles the entry
  again and writes it whole, with new digests. A group file that does not parse, or lists a file
  that is gone, is a miss too (Triton 3.6 raised ``JSONDecodeError`` for the former).
* **Damaged digests are damage.** A digests file that exists but cannot be read or parsed (or a
  digests path that is not a regular file: a folder, a FIFO, ``digests/`` itself a plain file)
  makes its entry damaged: the digests file is named, the entry is a miss, and its compile
  writes the digests again, whole. Only a digests file that does not exist means "first seen".
  Once zerojit has had to replace a ``digests`` path that was not a folder, every digest in it
  was lost: an entry with none is then damaged too (``digests/.replaced`` says so), never first
  seen. A digests folder that cannot be written is one line in the report (once per warm-up;
  else one logged warning): entries there are checked by structure only.
* **Only regular files are read.** Each checked read looks at the file first (``lstat``), then
  opens it ``O_NONBLOCK | O_NOFOLLOW`` and checks the descriptor (``fstat``) before reading: a
  FIFO cannot block the open, a device (``/dev/zero``) cannot be read without end. A member that
  is not a regular file (a folder, FIFO, device, socket, or a symbolic link: Triton writes none
  of these into an entry) is damaged, and it is removed (a link or node itself, never what it
  points to; a folder with what it holds), only ever inside an entry folder of Triton's cache,
  so Triton's compile can write the entry whole again (its ``os.replace`` fails onto a folder).
  Triton reads an entry's files only after these checks (``get_group`` checks first).

Checking costs one SHA-256 per file read (see docs/start-up.md for the warm start).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import struct
import sysconfig
import threading
from typing import Iterator, Mapping

from . import triton_compat as _tc

__all__ = ["DamagedFileError", "NotRegularFileError", "open_regular", "read_regular", "remove_irregular",
           "digest_path", "digests_of", "record", "sha256", "file_problem", "elf_problem",
           "problem", "note_damaged", "check_data", "read_checked", "check_files", "read_group_file", "drop_entry",
           "checked_manager_class", "install_checked_manager", "plain_manager_class", "collecting"]

logger = logging.getLogger("zerojit.integrity")

_FORMAT = 1
_MODULE_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


class DamagedFileError(OSError):
    """A cache file that fails its check: its SHA-256 differs from the digest recorded when it was
    stored, or (no digest yet) its structure is broken, or it is gone. ``path`` names it."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"cache file {path} is damaged ({why})")
        self.path = path
        self.why = why


class NotRegularFileError(OSError):
    """A path that :func:`read_regular` refuses to read: not a regular file (``what`` says which
    kind: "a folder", "a FIFO", "a symbolic link", ...)."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path} is {what}, not a regular file")
        self.path = path
        self.what = what
        self.strerror = f"it is {what}, not a regular file"  # (for "<path>: <strerror>" lines; str() is unchanged)


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def refuse_irregular(path: str | os.PathLike) -> None:
    """Refuse an input file a user named that is no regular file once a symbolic link is followed
    (a FIFO, device or socket, whose ``open`` or read can wait for ever); call it before opening
    ``path``. A link to a regular file is fine here (a user's trace or manifest often is one), as
    is a path that is not there (the caller's ``open`` says so).

    Raises:
        NotRegularFileError: ``path`` is a folder, FIFO, device or socket.
    """
    try:
        kind = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(kind):
        raise NotRegularFileError(os.fspath(path), _kind(kind))


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of ``path``, a regular file, opened with ``flags`` (``os.O_RDONLY``,
    ``os.O_WRONLY | os.O_APPEND | os.O_CREAT``, ...; ``mode`` for a file created). Never blocks:
    the path is looked at first (``lstat``, a symbolic link not followed; a path not there yet
    is fine with ``O_CREAT``), then opened ``O_NONBLOCK | O_NOFOLLOW`` (a FIFO swapped in
    meanwhile cannot block the open) and the descriptor checked (``fstat``). The caller closes it.

    Raises:
        NotRegularFileError: ``path`` is a folder, FIFO, device, socket or symbolic link.
        OSError: it cannot be opened (``FileNotFoundError``: it is not there, without ``O_CREAT``).
    """
    return _open_regular(path, flags, mode)[0]


def _open_regular(path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> tuple[int, os.stat_result]:
    try:
        kind = os.lstat(path).st_mode
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
    else:
        if not stat.S_ISREG(kind):
            raise NotRegularFileError(path, _kind(kind))
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a symbolic link swapped in since the lstat
            raise NotRegularFileError(path, "a symbolic link") from None
        if e.errno == errno.ENXIO:  # a FIFO swapped in, opened for writing with no reader
            raise NotRegularFileError(path, "a FIFO") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(path, _kind(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str, offset: int = 0) -> bytes:
    """The bytes of ``path``, a regular file, from byte ``offset`` (what was appended since a
    reader last read: :mod:`zerojit.learned`) to its end. Never blocks or reads without end: the
    path is looked at first (``lstat``, a symbolic link not followed), then opened ``O_NONBLOCK |
    O_NOFOLLOW`` (a FIFO swapped in meanwhile cannot block the open) and the descriptor checked
    (``fstat``) before anything is read.

    Raises:
        NotRegularFileError: ``path`` is a folder, FIFO, device, socket or symbolic link.
        OSError: it cannot be read (``FileNotFoundError``: it is not there).
    """
    fd, st = _open_regular(path)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        # os.read to the end, not a file object over the descriptor (~6 us less a file, 4 files a
        # restored key): one read as a rule, then the empty one that proves the end
        chunks = [os.read(fd, max(st.st_size - offset, 0) + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 20))
        return chunks[0] if len(chunks) == 2 else b"".join(chunks)
    finally:
        os.close(fd)


def remove_irregular(path: str) -> str | None:
    """Remove what is at ``path`` when it is not a regular file, so a file zerojit writes whole (a
    temporary file, then a rename) can take its place: a symbolic link, FIFO, device or socket
    itself (never what a link points to), a folder with what it holds. Only for zerojit's own
    files (the restore index, the build memo): a user's path is never removed. Returns what was
    there ("a FIFO", ...), None when it was a regular file or nothing.

    Raises:
        OSError: it could not be removed.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return _kind(mode)


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data``, hex."""
    return hashlib.sha256(data).hexdigest()


def digest_path(folder: str) -> str:
    """The digests file of the cache entry in ``folder``: ``<cache>/.zerojit/digests/<entry>.json``."""
    root, entry = os.path.split(os.path.normpath(folder))
    return os.path.join(root, ".zerojit", "digests", f"{entry}.json")


_REPLACED = ".replaced"  # in the digests folder: it was rebuilt, every digest before lost


def digests_of(folder: str) -> dict[str, str]:
    """The digests recorded for the entry in ``folder`` (file name -> SHA-256 hex); empty when its
    digests file does not exist (the entry is first seen: its files are checked by structure,
    then their digests recorded).

    Raises:
        DamagedFileError: the digests file exists but cannot be read or parsed, or is not a
            regular file, or the ``digests`` folder is not a folder, or it was rebuilt after that
            (``.replaced``) and holds none for this entry: the digests file is named once and the
            entry dropped (a miss, compiled again, its digests written again whole).
    """
    path = digest_path(folder)
    try:
        body = json.loads(read_regular(path))
    except FileNotFoundError:
        if os.path.lexists(os.path.join(os.path.dirname(path), _REPLACED)):
            raise _damaged(path, "none recorded since the digests folder was lost and made again", folder) from None
        return {}
    except NotADirectoryError:
        if os.path.isdir(os.path.dirname(os.path.dirname(path))):  # .zerojit is a folder, digests/ is not
            raise _damaged(path, "the digests folder is not a folder", folder) from None
        return {}  # .zerojit itself is no folder: nothing can be recorded (record says so)
    except NotRegularFileError as e:
        raise _damaged(path, f"the digests file is {e.what}", folder) from None
    except OSError as e:
        raise _damaged(path, f"the digests file cannot be read: {e.strerror or e}", folder) from None
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError too; RecursionError: nested too deep
        raise _damaged(path, f"the digests file does not parse: {e}", folder) from None
    files = body.get("files") if isinstance(body, dict) and body.get("format") == _FORMAT else None
    if not (isinstance(files, dict) and all(isinstance(n, str) and isinstance(h, str) for n, h in files.items())):
        raise _damaged(path, "the digests file is not a digests file of this zerojit", folder)
    return files


def record(folder: str, digests: Mapping[str, str], *, replace: bool = False) -> None:
    """Record ``digests`` (file name -> SHA-256 hex) for the entry in ``folder``, merged into those
    recorded unless ``replace`` (or those are damaged). Written atomically (a temporary file,
    then a rename), over whatever is at the digests file's path (a folder there is removed). A
    ``digests`` path that is not a folder is replaced by one, marked ``.replaced`` (see
    :func:`digests_of`). A folder that cannot be written records nothing and is no error: one
    line in the warm-up report (else one logged warning) says so, once, and its files are then
    checked by structure at each read."""
    path = digest_path(folder)
    body = dict(digests)
    if not replace:
        with contextlib.suppress(DamagedFileError):  # named as read; these replace them
            body = {**digests_of(folder), **digests}
    base = os.path.dirname(path)
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        if os.path.lexists(base) and not os.path.isdir(base) and os.path.isdir(os.path.dirname(base)):
            os.unlink(base)  # zerojit's own folder, replaced by a file: made again, its loss marked
            os.makedirs(base, exist_ok=True)
            with open(os.path.join(base, _REPLACED), "w", encoding="utf-8") as f:
                f.write("the digests folder was not a folder; every digest recorded before was lost\n")
        os.makedirs(base, exist_ok=True)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"format": _FORMAT, "files": body}, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _note_once(base, f"digests cannot be recorded in {base} ({e.strerror or e}); the cache's entries are "
                         "checked by their structure only")


# ---------------------------------------------------------------------------------------------
# Structural checks (no digest needed)
# ---------------------------------------------------------------------------------------------

_ELF_HEADER = {1: "16xHHIIIIIHHHHHH", 2: "16xHHIQQQIHHHHHH"}  # ELF32 / ELF64 (System V gABI)
_ELF_SECTION = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}  # sh_offset, sh_size: fields 4 and 5 in both
_SHT_NOBITS = 8


def elf_problem(data: bytes) -> str | None:
    """What is wrong with ``data`` as an ELF file (a cubin, a C module), or None: the header is
    valid and the program headers, the section header table (``e_shoff + e_shnum *
    e_shentsize``) and each section's extent fit in its size. A file cut short loses its section
    header table (it comes last), so a cut is caught; a flipped bit inside a section is not (a
    digest catches that)."""
    size = len(data)
    if size < 16 or data[:4] != b"\x7fELF":
        return "not an ELF file"
    cls, order, version = data[4], data[5], data[6]
    if cls not in _ELF_HEADER or order not in (1, 2) or version != 1:
        return "not an ELF file: its identification bytes are invalid"
    end = "<" if order == 1 else ">"
    header = struct.Struct(end + _ELF_HEADER[cls])
    section = struct.Struct(end + _ELF_SECTION[cls])
    if size < header.size:
        return f"cut short: {size} bytes, less than an ELF header"
    (_, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = header.unpack_from(data)
    if phnum and phoff + phnum * phentsize > size:
        return f"cut short: its program headers end at byte {phoff + phnum * phentsize}, the file has {size}"
    if not shoff:
        return None
    if shentsize < section.size:
        return f"its section headers are {shentsize} bytes, not {section.size}"
    if shnum == 0:  # more than 0xff00 sections: the count is section 0's sh_size
        if shoff + section.size > size:
            return f"cut short: its section headers start at byte {shoff}, the file has {size}"
        shnum = section.unpack_from(data, shoff)[5]
    if shoff + shnum * shentsize > size:
        return f"cut short: its section headers end at byte {shoff + shnum * shentsize}, the file has {size}"
    for i in range(shnum):
        fields = section.unpack_from(data, shoff + i * shentsize)
        if fields[1] not in (0, _SHT_NOBITS) and fields[4] + fields[5] > size:
            return f"cut short: its section {i} ends at byte {fields[4] + fields[5]}, the file has {size}"
    return None


def file_problem(name: str, data: bytes) -> str | None:
    """What is wrong with ``data``, the content of cache file ``name``, by its kind alone (no
    digest), or None: a binary or C module is an ELF file (:func:`elf_problem`); the metadata
    JSON holds what Triton reads (:func:`zerojit.triton_compat.metadata_problem`); anything else
    (IR) is UTF-8 text."""
    ext = name.rpartition(".")[2]
    if ext in _tc.BINARY_EXTENSIONS or name.endswith(_MODULE_SUFFIX):
        return elf_problem(data)
    if ext == "json":
        try:
            metadata = json.loads(data)
        except (ValueError, RecursionError) as e:  # RecursionError: JSON nested deeper than Python's parser goes
            return f"its metadata is not JSON: {e}"
        return _tc.metadata_problem(metadata)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text: {e.reason} at byte {e.start}"
    return None


# ---------------------------------------------------------------------------------------------
# Checked reads
# ---------------------------------------------------------------------------------------------


def problem(name: str, data: bytes, expected: str | None) -> str | None:
    """What is wrong with ``data``, the content of cache file ``name``, or None: its SHA-256
    against ``expected`` (the digest recorded when it was stored), or with none
    :func:`file_problem`."""
    if expected is not None:
        return None if sha256(data) == expected else "its SHA-256 differs from the digest recorded when it was stored"
    return file_problem(name, data)


def note_damaged(path: str, why: str) -> DamagedFileError:
    """The error for damaged file ``path``, named once (in the warm-up report being collected,
    else in one logged warning)."""
    error = DamagedFileError(path, why)
    _note(error)
    return error


def _damaged(path: str, why: str, folder: str | None = None) -> DamagedFileError:
    """The error for ``path`` (in the entry in ``folder``, default its own), named once and its
    entry dropped."""
    error = note_damaged(path, why)
    drop_entry(folder or os.path.dirname(path))
    return error


def check_data(path: str, data: bytes, digests: Mapping[str, str] | None = None) -> None:
    """Check ``data``, read from cache file ``path``: against its recorded digest (``digests``:
    its entry's, when the caller read them already; else read here), or, with none, by
    :func:`file_problem` (then its digest is recorded).

    Raises:
        DamagedFileError: the check failed (the file is named once in the warm-up report and its
            entry dropped: see the module's docstring).
    """
    folder, name = os.path.split(path)
    if digests is None:
        digests = digests_of(folder)
    why = problem(name, data, digests.get(name))
    if why is not None:
        raise _damaged(path, why)
    if name not in digests:
        record(folder, {name: sha256(data)})


def _read_member(path: str) -> bytes:
    """The bytes of entry member ``path`` (:func:`read_regular`); one that is not a regular file is
    damaged: named once, its entry dropped, and the member removed (:func:`_remove_member`).

    Raises:
        DamagedFileError: ``path`` is not a regular file.
        OSError: it cannot be read (gone).
    """
    try:
        return read_regular(path)
    except NotRegularFileError as e:
        error = _damaged(path, e.what)
        _remove_member(path)
        raise error from None


def _remove_member(path: str) -> None:
    """Remove ``path``, a member of an entry that is not a regular file, so Triton can write the
    entry whole again (its ``os.replace`` fails onto a folder): a symbolic link, FIFO or device
    node itself (never what it points to), a folder with what it holds. Only a path
    ``<Triton's cache folder>/<entry>/<name>``; anything else is left alone."""
    root = _tc.cache_dir()
    folder = os.path.dirname(os.path.abspath(path))
    if not root or os.path.dirname(folder) != os.path.abspath(root) or os.path.basename(folder).startswith("."):
        return
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def read_checked(path: str, digests: Mapping[str, str] | None = None) -> bytes:
    """The bytes of cache file ``path``, once they pass :func:`check_data`; read only if it is a
    regular file (:func:`read_regular`).

    Raises:
        DamagedFileError: the check failed, or ``path`` is not a regular file (then removed), or
            its entry's digests are damaged (:func:`digests_of`).
        OSError: the file cannot be read (gone).
    """
    data = _read_member(path)
    check_data(path, data, digests)
    return data


def check_files(files: Mapping[str, str]) -> None:
    """Check every file of one entry (file name -> path), as :func:`read_checked` does, recording
    the digests of those seen first.

    Raises:
        DamagedFileError: the first file that fails (or is gone, or is not a regular file), named;
            or the entry's digests are damaged (:func:`digests_of`).
    """
    found: dict[str, dict[str, str]] = {}
    first_seen: dict[str, dict[str, str]] = {}
    for path in files.values():
        folder, name = os.path.split(path)
        digests = found.get(folder)
        if digests is None:
            digests = found[folder] = digests_of(folder)
        try:
            data = _read_member(path)
        except DamagedFileError:
            raise
        except OSError as e:
            raise _damaged(path, f"it cannot be read: {e.strerror or e}") from None
        why = problem(name, data, digests.get(name))
        if why is not None:
            raise _damaged(path, why)
        if name not in digests:
            first_seen.setdefault(folder, {})[name] = sha256(data)
    for folder, digests in first_seen.items():
        record(folder, digests)


def read_group_file(path: str) -> dict[str, str]:
    """The files the group file at ``path`` lists (name -> absolute path), each of which exists
    in the group file's own folder. Read only if it is a regular file (:func:`read_regular`).

    Triton's group files hold absolute paths, so in a cache folder copied or moved elsewhere they
    still name the original folder's files: such an entry is refused here (named once and
    dropped, so Triton compiles it into this folder), never read from there, and no digest is
    recorded beside another folder (a user expects a copy to stand on its own). The same folder
    reached by another path (a symbolic link, a bind mount) is this folder. A custom cache
    manager built on Triton's file cache must keep an entry's files beside its group file too.

    Raises:
        DamagedFileError: it is not a regular file (then removed), does not parse as a group
            file, lists a file of another folder, or a file it lists is gone (named).
        FileNotFoundError: there is no group file (an entry not stored yet: a plain miss).
    """
    folder = os.path.dirname(path)
    try:
        children = _tc.parse_group_file(_read_member(path))
    except (FileNotFoundError, DamagedFileError):
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:  # UnicodeDecodeError is a ValueError
        raise _damaged(path, f"an unreadable group file: {type(e).__name__}") from None
    if not all(isinstance(n, str) and isinstance(p, str) for n, p in children.items()):
        raise _damaged(path, "a group file whose paths are not names")
    for p in children.values():
        if not _one_folder(os.path.dirname(p), folder):  # Triton's file cache: beside the group file
            raise _damaged(path, f"it lists files in another folder, {os.path.dirname(p)}, as a cache folder copied "
                           "or moved does; to move a warmed cache, use `zerojit bundle export` and `bundle import`")
        if not os.path.lexists(p):
            raise _damaged(p, "it is gone; its entry's group file lists it", folder)
    return children


def _one_folder(there: str, here: str) -> bool:
    # the same spelling (as Triton writes them: the common case, one comparison), else the same
    # absolute path, else the same folder by another route (a symbolic link, a bind mount): its
    # device and inode; a copy is another folder, and one that is gone is none
    if there == here:
        return True
    there, here = os.path.abspath(there), os.path.abspath(here)
    if there == here:
        return True
    try:
        return os.path.samestat(os.stat(there), os.stat(here))
    except OSError:
        return False


def drop_entry(folder: str) -> None:
    """Remove the group file(s) of the entry in ``folder``: it is then a miss for every reader
    until Triton stores it again (a read-only cache keeps it; each read then finds the damage)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(_tc.group_file_name("")):
                os.unlink(os.path.join(folder, name))


# ---------------------------------------------------------------------------------------------
# Triton's cache manager, checking
# ---------------------------------------------------------------------------------------------

_CLASSES: dict[type, type] = {}
_CLASSES_LOCK = threading.Lock()


def checked_manager_class(base: type) -> type:
    """Triton cache manager class ``base`` (``FileCacheManager`` or a user's), storing digests
    and checking what it hands out:

    * ``get_group``: a miss (None) for a group file that does not parse or lists a file that is
      gone, or a member that fails its check or is not a regular file; else ``base``'s group
      (every file checked before ``base`` opens any);
    * ``put_group``: records the members' digests, then writes the group file;
    * ``put`` of a C module (``*<EXT_SUFFIX>``, cached alone): records its digest, then writes
      it; ``get_file`` of one: None when it fails its check (Triton builds it again).

    ``base`` itself when it checks already. The class has ``_zerojit_base`` = ``base``
    (:func:`plain_manager_class`)."""
    if getattr(base, "_zerojit_checks", False):
        return base
    with _CLASSES_LOCK:
        made = _CLASSES.get(base)
        if made is None:
            made = _CLASSES[base] = _make_checked(base)
    return made


def _make_checked(base: type) -> type:
    class CheckedCacheManager(base):  # type: ignore[misc, valid-type]
        _zerojit_base = base
        _zerojit_checks = True

        def get_group(self, filename: str):  # noqa: ANN201 (Triton's signature)
            folder = getattr(self, "cache_dir", None)
            if not folder:  # not a file cache: its own business
                return super().get_group(filename)
            try:  # every file checked before Triton opens any (a FIFO would block its open)
                listed = read_group_file(os.path.join(folder, _tc.group_file_name(filename)))
                check_files(listed)
            except FileNotFoundError:
                return None
            except DamagedFileError:
                return None
            try:
                group = super().get_group(filename)
            except (OSError, ValueError, KeyError, TypeError):  # rewritten meanwhile: a miss, Triton compiles it
                return None
            return group if group == listed else None

        def put_group(self, filename: str, group: dict):  # noqa: ANN201
            folder = getattr(self, "cache_dir", None)
            if folder:
                digests = {}
                for path in group.values():
                    with contextlib.suppress(OSError):
                        with open(path, "rb") as f:
                            digests[os.path.basename(path)] = sha256(f.read())
                record(folder, digests, replace=True)  # before the group file: the entry's commit point
            return super().put_group(filename, group)

        def put(self, data, filename: str, binary: bool = True):  # noqa: ANN001, ANN201
            folder = getattr(self, "cache_dir", None)
            if folder and isinstance(data, bytes) and filename.endswith(_MODULE_SUFFIX):
                record(folder, {filename: sha256(data)}, replace=True)
            return super().put(data, filename, binary)

        def get_file(self, filename: str):  # noqa: ANN201
            path = super().get_file(filename)
            if path is not None and filename.endswith(_MODULE_SUFFIX):
                try:
                    read_checked(path)
                except OSError:
                    return None
            return path

    return CheckedCacheManager


def plain_manager_class(cls: type | None) -> type | None:
    """``cls`` without zerojit's wrappers (each names what it wraps as ``_zerojit_base``)."""
    while cls is not None and getattr(cls, "_zerojit_base", None) is not None:
        cls = cls._zerojit_base
    return cls


def install_checked_manager() -> None:
    """Make Triton's cache manager check for the rest of this process (idempotent): the one set
    (``TRITON_CACHE_MANAGER``, or Triton's file cache) wrapped by :func:`checked_manager_class`.
    A warm-up calls it, so runtime compiles after it treat a damaged entry as a miss too."""
    current = _tc.cache_manager_class()
    if not getattr(current, "_zerojit_checks", False):
        _tc.set_cache_manager_class(checked_manager_class(current or _tc.default_cache_manager))


# ---------------------------------------------------------------------------------------------
# Naming each damaged file once
# ---------------------------------------------------------------------------------------------

_NOTES_LOCK = threading.Lock()
_collectors: list[dict[str, str]] = []
_logged: set[str] = set()


def _note(error: DamagedFileError) -> None:
    _note_once(error.path, f"{error}; treated as a miss (compiled again)")


def _note_once(path: str, message: str) -> None:
    """``message`` about ``path``, once per warm-up (collected), else once per process (logged)."""
    with _NOTES_LOCK:
        if _collectors:
            _collectors[-1].setdefault(path, message)
            return
        if path in _logged:
            return
        _logged.add(path)
    logger.warning("zerojit: %s", message)


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """Within this block, each damaged file found (in this process) is noted once, in the list
    yielded (filled as the block ends: a warm-up adds it to ``WarmupStats.recovered``), instead
    of being logged."""
    found: dict[str, str] = {}
    notes: list[str] = []
    with _NOTES_LOCK:
        _collectors.append(found)
    try:
        yield notes
    finally:
        with _NOTES_LOCK:
            _collectors.remove(found)
        notes.extend(found.values())
