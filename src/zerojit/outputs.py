"""Outputs: every file zerojit writes for a user, whole or not at all, and never over what is not
a regular file.

A user names a path (``record -o``, ``--json``, ``bundle export -o``, ``ZEROJIT_AUDIT_OUT``) and
zerojit writes there. Three rules hold for all of them:

* **Whole or not at all** (:func:`atomic_output`, :func:`write_output`): the bytes go to a
  temporary file in the target's own folder (so the rename below never crosses a file system),
  which is flushed and ``fsync``-ed, then renamed over the target. A reader sees the old file or
  the new one; a full disk or a kill leaves the old file as it was. On any failure the temporary
  file is removed (a kill leaves it: below).
* **Never clobber** (:func:`output_problem`): a rename replaces whatever is at the path, so only
  a regular file (or nothing) may be there. A directory, a device (``/dev/full``), a FIFO, a
  socket or a symbolic link (named with where it points: writing "through" it would be a
  different promise) is refused before any work.
* ``-`` is standard output (:data:`STDOUT`): what the caller writes there is not a file, so it
  is neither checked nor renamed.

Temporary names carry the host and the process (:func:`temporary_name`,
``FILE.tmp-<host>-<pid>-<random>``), so that a leftover of a killed writer can be told from a
live writer's file: :func:`is_stale` is true only for something untouched for over
:data:`STALE_SECONDS`, and a caller removes only its own host's leftovers, since a folder shared
by containers or over NFS has live writers whose processes this one cannot see.

This module imports nothing of zerojit (any layer may use it).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile
import time
from typing import IO, Iterable, Iterator

__all__ = ["STDOUT", "STALE_SECONDS", "HOST", "OutputError", "output_problem", "atomic_output", "write_output",
           "temporary_name", "is_stale", "remove_stale", "remove_stale_temporaries"]

#: The path that means standard output.
STDOUT = "-"

#: A leftover untouched for longer than this (seconds) is dead: a live writer writes its
#: temporary file within seconds of creating it (Triton's ``put``: one write, then a rename).
STALE_SECONDS = 3600.0

#: This host's name as temporary names carry it: only letters, digits and dots (anything else
#: becomes ``_``), so the ``-`` after it in a name ends it.
HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "localhost"


class OutputError(OSError):
    """An output that cannot be written: ``filename`` is the path, ``strerror`` why (as the
    system says it, e.g. "No space left on device", or zerojit's own reason for refusing it)."""

    def __str__(self) -> str:
        return f"cannot write {self.filename!r}: {self.strerror}"


def _kind(mode: int) -> str:
    """What a file that is not regular is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _replace_problem(path: str) -> OutputError | None:
    """Why a rename must not replace what is at ``path`` (anything but a regular file), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return OutputError(e.errno, e.strerror, path)
    if stat.S_ISLNK(st.st_mode):
        try:
            where = os.readlink(path)
        except OSError:
            where = "?"
        return OutputError(errno.EEXIST, f"is a symbolic link to {where!r}; it would be replaced, not written "
                           "through: give the file it points to, or another path", path)
    if stat.S_ISDIR(st.st_mode):
        return OutputError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        return OutputError(errno.EEXIST, f"exists and is not a regular file ({_kind(st.st_mode)}); it would be "
                           "replaced: remove it or write elsewhere", path)
    return None


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot be written as an output, as the end of "cannot write there: ...", or
    None. Checked before any work, so that a command refuses a bad path at once rather than after
    minutes of work: an empty path, something other than a regular file there
    (:func:`atomic_output` would replace it), a folder that does not exist, is not writable or
    refuses new files (``/proc``, a read-only mount: only creating one tells, also for root), an
    existing file that is read-only, a path that starts with ``-`` (an option the parser took as
    the flag's value: ``--json --`` wrote a file named ``--``). :data:`STDOUT` has no problem."""
    if path == STDOUT:
        return None
    if not path:
        return "the path is empty; give a file to write"
    if path.startswith("-"):
        return f"looks like an option; write ./{path} for a file of that name"
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    refused = _replace_problem(full)
    if refused is not None:
        return refused.strerror
    if not os.path.isdir(folder):
        return f"its directory {folder!r} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"its directory {folder!r} is not writable"
    if os.path.exists(full) and not os.access(full, os.W_OK):
        return "exists and is not writable"
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".zerojit-probe-"):
            return None
    except OSError as e:
        return f"no file can be created in its directory {folder!r} ({e.strerror or e})"


def temporary_name(path: str) -> str:
    """The temporary file beside ``path`` that :func:`atomic_output` writes:
    ``PATH.tmp-<host>-<pid>-<random>`` (the random part: two threads writing one path)."""
    return f"{path}.tmp-{HOST}-{os.getpid()}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, binary: bool = False, owner_writes_only: bool = False) -> Iterator[IO]:
    """Yield a file to write the whole of ``path`` into; when the block ends, it is flushed,
    ``fsync``-ed and renamed over ``path``. If the block or the write fails, ``path`` is as it
    was and the temporary file is removed. The new file has the old one's permission bits, else
    ``open()``'s (0666 less the umask: ``mkstemp``'s 0600 would hide a manifest from the user who
    serves). Stale temporary files of earlier writers of ``path`` on this host are removed first
    (:func:`remove_stale_temporaries`).

    Args:
        binary: yield a binary file (else text, UTF-8).
        owner_writes_only: the new file is writable by its owner only, whatever the umask or the
            old file's bits (a manifest that carries program source is code: a warm-up refuses one
            others can write to, :func:`zerojit.manifest.read_manifest`).

    Raises:
        OutputError: ``path`` is something a rename must not replace (a directory, a device, a
            FIFO, a socket, a symbolic link: :func:`output_problem`), before or just before the
            rename; or any ``OSError`` of the writing (a full disk, a missing folder), as an
            ``OutputError`` naming ``path``. Other exceptions of the block pass unchanged.
    """
    path = os.fspath(path)
    refused = _replace_problem(path)
    if refused is not None:
        raise refused
    remove_stale_temporaries(path)
    tmp = temporary_name(path)
    try:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = None
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            if owner_writes_only:
                os.fchmod(f.fileno(), stat.S_IMODE(os.fstat(f.fileno()).st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
            yield f
            f.flush()
            os.fsync(f.fileno())
        refused = _replace_problem(path)  # something else may have been put there meanwhile
        if refused is not None:
            raise refused
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise OutputError(e.errno, e.strerror or str(e), path) from None
        raise


def write_output(path: str | os.PathLike, data: str | bytes, *, stdout: IO | None = None,
                 owner_writes_only: bool = False) -> None:
    """Write ``data`` as the whole of ``path`` (:func:`atomic_output`); to ``stdout`` (default
    ``sys.stdout``) when ``path`` is :data:`STDOUT`, flushed. ``owner_writes_only``: as
    :func:`atomic_output`'s.

    Raises:
        OutputError: as :func:`atomic_output`; for standard output, a failed write (a closed pipe).
    """
    path = os.fspath(path)
    if path == STDOUT:
        out = stdout or sys.stdout
        try:
            if isinstance(data, bytes):
                out.flush()
                out.buffer.write(data)
            else:
                out.write(data)
            out.flush()
        except OSError as e:
            raise OutputError(e.errno, e.strerror or str(e), "<stdout>") from None
        return
    with atomic_output(path, binary=isinstance(data, bytes), owner_writes_only=owner_writes_only) as f:
        f.write(data)


def _newest_mtime(path: str) -> float:
    """The newest modification time (seconds since the epoch) of ``path`` and, for a folder,
    everything in it (symbolic links not followed)."""
    newest = os.lstat(path).st_mtime
    if os.path.isdir(path) and not os.path.islink(path):
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(OSError):  # removed meanwhile
                    newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
    return newest


def is_stale(path: str, *, now: float | None = None, max_age: float = STALE_SECONDS) -> bool:
    """True when nothing in ``path`` (a file, or a folder and everything in it) was modified in
    the last ``max_age`` seconds; False for a path that is gone, or has a time in the future (a
    clock that differs: never taken for old)."""
    try:
        return (time.time() if now is None else now) - _newest_mtime(path) > max_age
    except OSError:
        return False


def remove_stale(paths: Iterable[str]) -> list[str]:
    """Remove each of ``paths`` (a file or a folder) that :func:`is_stale`; returns those removed.
    A path another process removes meanwhile, or one this process may not remove, is passed over:
    a leftover only costs space."""
    removed = []
    for path in paths:
        if not is_stale(path):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def remove_stale_temporaries(path: str) -> list[str]:
    """Remove the stale temporary files (:func:`temporary_name`) this host's killed writers left
    beside ``path``; returns those removed."""
    folder, name = os.path.split(os.path.abspath(path))
    prefix = f"{name}.tmp-{HOST}-"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return []
    return remove_stale(os.path.join(folder, n) for n in names)
