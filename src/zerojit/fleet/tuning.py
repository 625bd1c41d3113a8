"""One tuning file as one store value: an autotuned kernel's choices travel with its entries.

An autotuned kernel's tuning file (:mod:`zerojit.autotune`: ``<kernel>-<source hash>.json`` in
the cache folder's ``zerojit-tuning``) holds its config per tuning key; a node that pulls the
kernel's entries but not the file would benchmark again on its GPU, or launch the policy's
config. Each file is its own value (a file is written whole and read whole, like an entry).

Its *content address* (:func:`address_of`) is the SHA-256 of the file's name (the kernel and
its source hash), the GPU it was tuned on (its ``gpu`` field: timings are a GPU's, and a node
reads only a file of its own GPU; None for a file made where no GPU runs) and the build identity
(:func:`zerojit.fleet.entry.build_identity`). A node computes it from its kernel
(:meth:`~zerojit.kernel.TritonJitKernel.tuning_file`, ``tuning_header()``) before anything is
compiled.

A value (:func:`encode`) is one line ``zerojit-store-tuning 1``, one line of header JSON (the
address, the file's name, the GPU, the build identity, the file's size and SHA-256, when it was
pushed, the signature of :mod:`zerojit.fleet.signing` over the address, the build and the
digest under its own domain, so no entry's signature passes for a tuning file's), then the
file's bytes. :func:`decode` checks it as :func:`zerojit.fleet.entry.decode` checks an entry;
:func:`install` then checks the file as the warm-up will read it
(:func:`zerojit.autotune.load_tuning_file` against the kernel's header and configs, so a file
the warm-up would refuse is never installed) and writes it whole
(:func:`zerojit.autotune.write_atomically`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping

from .. import autotune as _autotune
from .. import cache as _cache
from .. import integrity
from . import signing
from .entry import EntryRefused, split_value

__all__ = ["TuningFile", "address_of", "of_file", "encode", "decode", "install", "wanted", "header_of", "MAGIC"]

MAGIC = b"zerojit-store-tuning 1\n"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+\.json$")  # zerojit.autotune.tuning_file_path's names, never a path


@dataclass(frozen=True)
class TuningFile:
    """One tuning file of one build.

    Attributes:
        name: its file name in the ``zerojit-tuning`` folder (``<kernel>-<source hash>.json``).
        gpu: the GPU it was tuned on (its ``gpu`` field), None where it has none.
        build: the build identity of the pusher (:func:`zerojit.fleet.entry.build_identity`).
        data: the file's bytes.
    """

    name: str
    gpu: str | None
    build: Mapping[str, Any]
    data: bytes

    @property
    def address(self) -> str:
        return address_of(self.name, self.gpu, self.build)

    def digests(self) -> dict[str, str]:
        """What its signature covers besides the address and build: ``tuning/<name>``'s SHA-256."""
        return {f"tuning/{self.name}": integrity.sha256(self.data)}


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def address_of(name: str, gpu: str | None, build: Mapping[str, Any]) -> str:
    """The content address of tuning file ``name`` tuned on ``gpu`` for build ``build``: the
    SHA-256 hex digest of their canonical JSON (never equal to an entry's, whose JSON has no
    ``tuning`` field)."""
    return hashlib.sha256(_canonical({"tuning": name, "gpu": gpu, "build": dict(build)})).hexdigest()


def of_file(name: str, data: bytes, build: Mapping[str, Any]) -> TuningFile:
    """The tuning file ``name`` with bytes ``data`` (its GPU read from its ``gpu`` field).

    Raises:
        zerojit.cache.BundleError: ``data`` is not a tuning file's JSON object (named).
    """
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # (nested too deep: RecursionError, no ValueError)
        doc = None
    if not _NAME_RE.match(name) or not isinstance(doc, dict) or doc.get("format") != _autotune.TUNING_FORMAT:
        raise _cache.BundleError(f"tuning file {name}: not a {_autotune.TUNING_FORMAT} file: not pushed")
    gpu = doc.get("gpu")
    return TuningFile(name, gpu if isinstance(gpu, str) else None, dict(build), data)


def encode(tuning: TuningFile, key: signing.SigningKey) -> bytes:
    """``tuning`` as one store value, signed with ``key`` (the format: this module's docstring)."""
    header = {
        "address": tuning.address, "tuning": tuning.name, "gpu": tuning.gpu, "build": dict(tuning.build),
        "size": len(tuning.data), "sha256": integrity.sha256(tuning.data),
        "pushed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),  # not signed: gc's
        "signature": signing.sign(key, tuning.address, tuning.build, tuning.digests(), kind="tuning"),
    }
    return MAGIC + _canonical(header) + b"\n" + tuning.data


def _header(value: bytes, where: str) -> tuple[dict, bytes]:
    return split_value(value, MAGIC, "tuning file", where)


def header_of(value: bytes) -> dict:
    """The header of tuning-file value ``value``, unchecked (for gc, never for installing).

    Raises:
        EntryRefused: not a zerojit tuning file, or its header line is not whole JSON.
    """
    return _header(value, "store value")[0]


def decode(value: bytes, address: str, build: Mapping[str, Any], keys: signing.VerifyKeys) -> TuningFile:
    """The tuning file of store value ``value`` read at ``address``, once its form, size, build,
    address, signature and digest are checked (in that order, as an entry's).

    Raises:
        EntryRefused: naming ``address``, the file and the reason; nothing of it may be installed.
    """
    where = f"store tuning file {address[:16]}"
    header, body = _header(value, where)
    try:
        name, gpu, theirs, size = header["tuning"], header["gpu"], header["build"], int(header["size"])
        if not isinstance(name, str) or not _NAME_RE.match(name) or not isinstance(theirs, dict) \
                or not (gpu is None or isinstance(gpu, str)):
            raise TypeError("a field of the wrong type or form")
    except (KeyError, TypeError, ValueError) as e:
        raise EntryRefused(f"{where}: its header is not a zerojit tuning file's ({e})") from None
    where = f"store tuning file {address[:16]} ({name})"
    if len(body) != size:
        raise EntryRefused(f"{where}: truncated or damaged ({len(body)} bytes, its header lists {size})")
    if dict(theirs) != dict(build):
        differs = next((f for f in _cache.FINGERPRINT_FIELDS if theirs.get(f) != build.get(f)), "fields")
        raise EntryRefused(f"{where}: built for another build ({differs} {str(theirs.get(differs))[:40]!r}, "
                           f"here {str(build.get(differs))[:40]!r})")
    tuning = TuningFile(name, gpu, theirs, body)
    if header.get("address") != address or tuning.address != address:
        raise EntryRefused(f"{where}: filed under another address than its own (copied or replayed)")
    signed = {f"tuning/{name}": header.get("sha256")}
    try:
        signing.verify(keys, header.get("signature"), address, theirs, signed, kind="tuning")
    except signing.SignatureRefused as e:
        raise EntryRefused(f"{where}: {e}") from None
    if tuning.digests() != signed:
        raise EntryRefused(f"{where}: tuning/{name} does not match its SHA-256 (altered in the store)")
    return tuning


def wanted(kernel: Any) -> tuple[str, str | None, dict[str, Any], list[Any]] | None:
    """What a node needs to fetch ``kernel``'s tuning file: ``(file name, GPU, the header its
    warm-up checks, the autotuner's configs)``; None for a kernel with no tuning file (no
    autotuner with several configs, or no zerojit kernel class). Run it where the warm-up runs
    (the header names the target, and the GPU where one runs)."""
    wrapping = _autotune.unwrap(getattr(kernel, "wrapped", None))
    if wrapping is None or not wrapping.tunes or not callable(getattr(kernel, "tuning_file", None)):
        return None
    header = kernel.tuning_header()
    return os.path.basename(kernel.tuning_file()), header.get("gpu"), header, list(wrapping.configs)


def install(tuning: TuningFile, header: Mapping[str, Any], configs: list[Any]) -> None:
    """Write ``tuning`` into the cache folder's ``zerojit-tuning`` whole, once the warm-up's own
    reader accepts it for this kernel (:func:`zerojit.autotune.load_tuning_file` with the
    kernel's ``header`` and ``configs``).

    Raises:
        EntryRefused: the warm-up would refuse the file (the field that differs is named).
        zerojit.outputs.OutputError: the folder cannot be written.
    """
    with tempfile.TemporaryDirectory(prefix="zerojit-tuning-") as folder:
        staged = os.path.join(folder, tuning.name)
        with open(staged, "wb") as f:
            f.write(tuning.data)
        try:
            _autotune.load_tuning_file(staged, dict(header), configs)
        except _autotune.TuningFileError as e:
            raise EntryRefused(f"store tuning file {tuning.name}: this warm-up would not read it (field {e.field!r}: "
                               f"{str(e.found)[:60]!r}, here {str(e.expected)[:60]!r})") from None
    _autotune.write_atomically(os.path.join(_cache.cache_dir(), _autotune.TUNING_FOLDER, tuning.name), tuning.data)
