"""One Triton cache entry as one store value: what a node needs to load a key with no compiler.

An :class:`Entry` holds the files of one entry folder of Triton's disk cache (the IR stages, the
cubin, the metadata JSON and the ``__grp__`` file: :func:`zerojit.cache.entries_of`), the CUDA
launcher module of the kernel's signature where Triton 3.6 builds one
(:func:`zerojit.triton_compat.launcher_key`). No restore record travels: a node's warm-up finds a
pulled entry through Triton's disk lookup (the dsv4-like key space's 41 entries: 0.03 s) and
writes its own restore index from what it loaded, as after any cold start.

Its *content address* (:func:`address_of`) is the SHA-256 of Triton's cache key (the entry's
folder name: the base 32 of the key's hash) and the build identity (:func:`build_identity`: the
bundle fingerprint, :func:`zerojit.cache.fingerprint`: Triton's version, its ``libtriton`` build,
its build key, Python, the target, ``ptxas`` and the cache-relevant environment), so entries of
different builds never share an address.

A value (:func:`encode`) is one line ``zerojit-store-entry 1``, one line of header JSON (the
address, the entry, the build identity, each file's name, size and SHA-256, the launcher's, when
it was pushed, the signature: :mod:`zerojit.fleet.signing`), then the
files' bytes in header order. :func:`decode` trusts nothing in it: the sizes must add up (a
value cut short is refused), the build identity must be this machine's, the address must be the
one asked for and the one the header's entry and build give, the signature must verify with a
trusted key, and every file must match its SHA-256 and structure
(:func:`zerojit.integrity.file_problem`). :func:`install` then installs it as a bundle import
does (:func:`zerojit.cache.install_entries`: staged, moved in whole, the group file last,
digests recorded).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from .. import cache as _cache
from .. import integrity
from .. import triton_compat as _tc
from . import signing

__all__ = ["Entry", "EntryRefused", "build_identity", "address_of", "entry_of_variant", "encode", "decode", "install",
           "header_of", "MAGIC"]

MAGIC = b"zerojit-store-entry 1\n"
_ENTRY_RE = re.compile(r"^[A-Z2-7]+$")  # Triton's entry folders: the base 32 of a SHA-256
_FILE_RE = re.compile(r"^(?!\.\.?$)[^/\\\x00]+$")  # a file name, never a path, '.' or '..'


class EntryRefused(ValueError):
    """A store value that is not installed; the message names the address (and entry) and why:
    not a zerojit entry, cut short, another build's, filed under another address, unsigned or
    wrongly signed (naming the key), or a file that does not match its digest."""


@dataclass(frozen=True)
class Entry:
    """One cache entry of one build.

    Attributes:
        name: the entry folder's name in Triton's cache (base 32 of Triton's cache-key hash).
        build: the build identity it was compiled by (:func:`build_identity`).
        files: the folder's files by name, its ``__grp__`` file included.
        launcher: ``(launcher key, module bytes)`` of its CUDA launcher (Triton 3.6), or None.
    """

    name: str
    build: Mapping[str, Any]
    files: Mapping[str, bytes]
    launcher: tuple[str, bytes] | None = None

    @property
    def address(self) -> str:
        return address_of(self.name, self.build)

    def digests(self) -> dict[str, str]:
        """What a signature covers besides the address and build: each file's SHA-256
        (``files/<name>``) and the launcher's (``launcher/<key>``)."""
        out = {f"files/{n}": integrity.sha256(d) for n, d in sorted(self.files.items())}
        if self.launcher is not None:
            out[f"launcher/{self.launcher[0]}"] = integrity.sha256(self.launcher[1])
        return out

    @property
    def size(self) -> int:
        """Bytes of its files and launcher (what a pull moves, the header aside)."""
        return sum(map(len, self.files.values())) + (len(self.launcher[1]) if self.launcher else 0)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def build_identity(target: str) -> dict[str, Any]:
    """What an entry compiled here for ``target`` depends on beyond its cache key: the bundle
    fingerprint (:func:`zerojit.cache.fingerprint`), so a store and a bundle agree on what
    "the same build" means."""
    return _cache.fingerprint(target)


def address_of(name: str, build: Mapping[str, Any]) -> str:
    """The content address of entry ``name`` (Triton's cache-key hash in base 32) of build
    ``build``: the SHA-256 hex digest of their canonical JSON."""
    return hashlib.sha256(_canonical({"entry": name, "build": dict(build)})).hexdigest()


def _launcher_of(compiled: Any) -> tuple[str, bytes] | None:
    """The CUDA launcher module of ``compiled``'s signature, from the cache folder or the copy
    remembered for this Triton install; None where Triton builds none (3.7+) or none is on disk
    (a compile-only farm builds none: the node then builds it at load)."""
    source = _tc.source_of(compiled)
    key = _tc.launcher_key(tuple(source[1].values())) if source is not None else None
    if key is None:
        return None
    for path in (_tc.cache_manager(key).get_file(_tc.launcher_file()), _cache.remembered_launcher(key)):
        try:
            data = integrity.read_regular(path) if path else None
        except OSError:
            continue
        if data is not None and integrity.file_problem(_tc.launcher_file(), data) is None:
            return key, data
    return None


def entry_of_variant(variant: Any, build: Mapping[str, Any]) -> Entry:
    """The entry of a warmed :class:`~zerojit.kernel.CompiledVariant`, read from the cache folder
    and checked as a bundle export checks it (:func:`zerojit.cache.read_entries`).

    Raises:
        zerojit.cache.BundleError: no compiled kernel on disk, a missing or damaged file (named).
    """
    ((name, files),) = _cache.read_entries(_cache.entries_of([variant])).items()
    return Entry(name, dict(build), files, _launcher_of(variant.compiled))


def encode(entry: Entry, key: signing.SigningKey) -> bytes:
    """``entry`` as one store value, signed with ``key`` (the format: this module's docstring)."""
    names = sorted(entry.files)
    header = {
        "address": entry.address, "entry": entry.name, "build": dict(entry.build),
        "files": [[n, len(entry.files[n]), integrity.sha256(entry.files[n])] for n in names],
        "launcher": None if entry.launcher is None else [entry.launcher[0], len(entry.launcher[1]),
                                                         integrity.sha256(entry.launcher[1])],
        # when it was pushed (not signed: for gc, which keeps the newest builds); UTC, ISO 8601
        "pushed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "signature": signing.sign(key, entry.address, entry.build, entry.digests()),
    }
    body = b"".join(entry.files[n] for n in names) + (entry.launcher[1] if entry.launcher else b"")
    return MAGIC + _canonical(header) + b"\n" + body


def _first_difference(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str:
    for f in _cache.FINGERPRINT_FIELDS:
        if theirs.get(f) != ours.get(f):
            return f"{f} {str(theirs.get(f))[:40]!r}, here {str(ours.get(f))[:40]!r}"
    extra = sorted(set(theirs) ^ set(ours))
    return f"fields {extra}"


def header_of(value: bytes) -> dict:
    """The header of store value ``value``, unchecked (for listing and gc, never for installing).

    Raises:
        EntryRefused: not a zerojit entry, or its header line is not whole JSON.
    """
    return _header(value, "store value")[0]


def split_value(value: bytes, magic: bytes, what: str, where: str) -> tuple[dict, bytes]:
    """A store value's header (the JSON line after its ``magic`` line) and body, unchecked
    beyond their shape (``what``: the kind of value, for the message; ``where``: which one).

    Raises:
        EntryRefused: no ``magic`` line, or a header line that is not whole JSON.
    """
    if not value.startswith(magic):
        raise EntryRefused(f"{where}: not a zerojit {what} (no '{magic.decode().strip()}' line)")
    head, newline, body = value[len(magic):].partition(b"\n")
    try:
        header = json.loads(head) if newline else None
    except (ValueError, RecursionError):  # (nested too deep: RecursionError, no ValueError)
        header = None
    if not isinstance(header, dict):
        raise EntryRefused(f"{where}: truncated or damaged (its header line is not whole JSON)")
    return header, body


def _header(value: bytes, where: str) -> tuple[dict, bytes]:
    return split_value(value, MAGIC, "store entry", where)


def decode(value: bytes, address: str, build: Mapping[str, Any], keys: signing.VerifyKeys) -> Entry:
    """The entry of store value ``value`` read at ``address``, once everything in it is checked
    (this module's docstring says what and in which order).

    Raises:
        EntryRefused: naming ``address``, the entry and the reason; nothing of it may be installed.
    """
    where = f"store entry {address[:16]}"
    header, body = _header(value, where)
    try:
        name, theirs = header["entry"], header["build"]
        files = [(str(n), int(size), str(h)) for n, size, h in header["files"]]
        launcher = header["launcher"]
        launcher = None if launcher is None else (str(launcher[0]), int(launcher[1]), str(launcher[2]))
        if not isinstance(name, str) or not isinstance(theirs, dict) or not _ENTRY_RE.match(name) \
                or not all(_FILE_RE.match(n) and size >= 0 for n, size, _ in files) \
                or len({n for n, _, _ in files}) != len(files):
            raise TypeError("a field of the wrong type or form")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise EntryRefused(f"{where}: its header is not a zerojit entry's ({e})") from None
    where = f"store entry {address[:16]} (cache entry {name})"
    expected = sum(size for _, size, _ in files) + (launcher[1] if launcher else 0)
    if len(body) != expected:
        raise EntryRefused(f"{where}: truncated or damaged ({len(body)} bytes of files, its header lists {expected})")
    if dict(theirs) != dict(build):
        raise EntryRefused(f"{where}: built for another build ({_first_difference(theirs, build)})")
    if header.get("address") != address or address_of(name, theirs) != address:
        raise EntryRefused(f"{where}: filed under another address than its own (copied or replayed)")
    blobs: dict[str, bytes] = {}
    offset = 0
    for n, size, _ in files:
        blobs[n] = body[offset:offset + size]
        offset += size
    launcher_data = (launcher[0], body[offset:]) if launcher else None
    entry = Entry(name, theirs, blobs, launcher_data)
    # the signature binds the header's digests; the bytes must then match them
    signed = {f"files/{n}": h for n, _, h in files}
    if launcher:
        signed[f"launcher/{launcher[0]}"] = launcher[2]
    try:
        signing.verify(keys, header.get("signature"), address, theirs, signed)
    except signing.SignatureRefused as e:
        raise EntryRefused(f"{where}: {e}") from None
    actual = entry.digests()
    for what, digest in signed.items():
        if actual.get(what) != digest:
            raise EntryRefused(f"{where}: {what} does not match its SHA-256 (altered in the store)")
    for n, data in blobs.items():
        why = None if n.startswith("__grp__") else integrity.file_problem(n, data)
        if why is not None:
            raise EntryRefused(f"{where}: {n} is damaged ({why})")
    return entry


def install(entries: list[Entry]) -> list[str]:
    """Install ``entries`` into Triton's cache folder as a bundle import does, in one call of
    :func:`zerojit.cache.install_entries` (one staging folder, one leftovers scan: a pull's
    entries together), and each launcher module where Triton looks for it (unless one is
    there). Returns the names installed (not those the cache held complete already).

    Raises:
        zerojit.cache.BundleCorruptError: a group file is unreadable (nothing installed).
        zerojit.cache.BundleCacheDirError: the cache folder cannot be written.
    """
    installed, _ = _cache.install_entries({e.name: dict(e.files) for e in entries})
    for entry in entries:
        if entry.launcher is not None:
            key, data = entry.launcher
            manager = _tc.cache_manager(key)
            if manager.get_file(_tc.launcher_file()) is None:
                manager.put(data, _tc.launcher_file(), binary=True)  # Triton's manager writes it whole
    return installed
