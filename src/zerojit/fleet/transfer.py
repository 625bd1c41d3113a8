"""Push a warm-up's entries and tuning files to a store; pull the ones a cache lacks.

A push publishes every key of a warm-up (:func:`push_report`), each entry signed
(:mod:`zerojit.fleet.signing`) and stored once (:meth:`~zerojit.fleet.store.Store.put_if_absent`:
of two pushers of one entry one stores it and both succeed). A pull (:func:`pull`) takes the
cache entries a warm-up needs (Triton's cache-key hashes, in base 32), skips those the cache
folder holds complete, and for each of the others reads its value, checks it whole
(:func:`zerojit.fleet.entry.decode`) and installs it whole (:func:`zerojit.fleet.entry.install`).
Whatever is not pulled (missing, evicted, refused, or the store down) is left for the warm-up to
compile: a pull never fails a warm-up, it says what it did (:class:`PullResult`).

Autotuned kernels' tuning files travel as values of their own (:mod:`zerojit.fleet.tuning`):
:func:`push_tunings` (part of :func:`push_report`) and :func:`pull_tunings` (part of
:func:`pull_jobs`), so a node reads the farm's choices instead of benchmarking again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable

from .. import autotune as _autotune
from .. import cache as _cache
from ..reports import count
from . import entry as _entry
from . import signing
from . import tuning as _tuning
from .needs import needed_entry_names
from .store import Store, StoreDown

__all__ = ["PushResult", "PullResult", "StoreStatus", "GcResult", "push_entries", "push_tunings", "push_report", "pull",
           "pull_tunings", "pull_jobs", "pull_with_tunings", "status", "gc", "build_digest", "present_locally"]


@dataclass
class PushResult:
    """What a push did: entries (or tuning files) it stored, those the store held already, bytes
    it sent; ``tunings``: the tuning files' push (:func:`push_tunings`) where it pushed them too."""

    stored: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    bytes: int = 0
    tunings: PushResult | None = None

    def summary(self) -> str:
        line = (f"pushed {count(len(self.stored), 'entry', 'entries')} ({self.bytes} bytes); "
                f"{len(self.present)} already in the store")
        t = self.tunings
        if t is not None and (t.stored or t.present):
            line += f"; {count(len(t.stored), 'tuning file')} pushed, {len(t.present)} already there"
        return line


@dataclass
class PullResult:
    """What a pull did, by cache entry name.

    Attributes:
        installed: pulled and installed; local: the cache held them complete (not read);
        (for :func:`pull_tunings`: tuning file names, not entries)
        missing: not in the store (never pushed, or evicted); refused: ``(entry, reason)``, not
        installed (:class:`~zerojit.fleet.entry.EntryRefused`); down: the one-line reason the
        store went away, else None; unreached: the entries not asked for once it had (the
        cache lacks them; whether the store holds them is not known); bytes: read of the
        entries installed.
    """

    installed: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    down: str | None = None
    unreached: list[str] = field(default_factory=list)
    bytes: int = 0
    tunings: PullResult | None = None

    def summary(self) -> str:
        line = (f"store: {count(len(self.installed), 'entry', 'entries')} pulled ({self.bytes} bytes), "
                f"{len(self.local)} local, {len(self.missing)} missing, {len(self.refused)} refused")
        t = self.tunings
        if t is not None and (t.installed or t.local or t.missing or t.refused):
            line += (f"; {count(len(t.installed), 'tuning file')} pulled, {len(t.local)} local, "
                     f"{len(t.missing)} missing, {len(t.refused)} refused")
        return line + (f"; {self.down}: {len(self.unreached)} not reached, compiling locally" if self.down else "")


def push_entries(store: Store, entries: Iterable[_entry.Entry], key: signing.SigningKey) -> PushResult:
    """Store each of ``entries`` signed with ``key``, unless its address holds a value already.

    Raises:
        StoreDown: the store went away (what was stored before stays, each value whole).
    """
    result = PushResult()
    entries = list(entries)
    held = store.exists(e.address for e in entries)  # one round trip: a value held is not sent again
    for e in entries:
        if e.address in held:
            result.present.append(e.name)
            continue
        value = _entry.encode(e, key)
        if store.put_if_absent(e.address, value):
            result.stored.append(e.name)
            result.bytes += len(value)
        else:
            result.present.append(e.name)
    return result


def push_tunings(store: Store, kernels: Iterable[str], key: signing.SigningKey, build: dict) -> PushResult:
    """Store the tuning files of the kernels named ``kernels`` (those in the cache folder:
    :func:`zerojit.cache.tuning_files`, as a bundle carries them), each signed with ``key`` under
    its address (:func:`zerojit.fleet.tuning.address_of`: name, GPU, ``build``), unless the
    address holds one already (a file is pushed once per kernel source, GPU and build: a file
    tuned again later is not published over it).

    Raises:
        zerojit.cache.BundleError: a file that is not a tuning file (named).
        OSError: a tuning file that cannot be read.
        StoreDown: the store went away (what was stored before stays, each value whole).
    """
    result = PushResult()
    for name, data in _cache.tuning_files(kernels).items():
        t = _tuning.of_file(name, data, build)
        value = _tuning.encode(t, key)
        if store.put_if_absent(t.address, value):
            result.stored.append(name)
            result.bytes += len(value)
        else:
            result.present.append(name)
    return result


def push_report(store: Store, report: Any, key: signing.SigningKey, *, target: str | None = None) -> PushResult:
    """Push the entries of every key (and generic variant) of a warm-up ``report``, and its
    kernels' tuning files (:func:`push_tunings`, in :attr:`PushResult.tunings`).

    Args:
        target: the target the report compiled for; default its own (a ``"device"`` report: this
            process's target, as a bundle export decides it).

    Raises:
        zerojit.cache.BundleError: a failed warm-up (its keys are not all there), no target known,
            or a missing or damaged cache file (named).
        StoreDown: the store went away.
    """
    if getattr(report, "failures", ()):
        raise _cache.BundleError(f"the warm-up had {count(len(report.failures), 'failure')}: push a warm-up that "
                                 "compiled every key")
    target = target or (report.target if report.target != "device" else _cache.current_target_name())
    if not target:
        raise _cache.BundleError("no target known for the push: pass target= (e.g. 'cuda:90')")
    build = _entry.build_identity(target)
    variants = list(report.variants) + [v for v in getattr(report, "generic", ()) if v.compiled is not None]
    entries: dict[str, _entry.Entry] = {}
    for v in variants:
        e = _entry.entry_of_variant(v, build)
        entries.setdefault(e.name, e)
    result = push_entries(store, entries.values(), key)
    result.tunings = push_tunings(store, {v.kernel for v in report.variants}, key, build)
    return result


def present_locally(name: str, folder: str | None = None) -> bool:
    """Whether the cache folder (default Triton's) holds entry ``name`` complete: its group file
    is written last (:mod:`zerojit.cache`), so an entry with one is whole."""
    path = os.path.join(folder or _cache.cache_dir(), name)
    try:
        return any(n.startswith("__grp__") for n in os.listdir(path))
    except OSError:
        return False


_PULL_BATCH = 16  # entries fetched per round trip; a store down midway keeps every batch verified before it


def pull(store: Store, names: Iterable[str], build: dict, keys: signing.VerifyKeys) -> PullResult:
    """Install into Triton's cache folder the entries ``names`` (of build ``build``) the cache
    lacks, each checked whole against ``keys`` first. Never raises for the store: a store down
    (at the start or midway) ends the pull with :attr:`PullResult.down` set, every entry installed
    before it whole.

    Raises:
        zerojit.cache.BundleCacheDirError: the cache folder cannot be written.
    """
    result = PullResult()
    wanted = []
    for name in dict.fromkeys(names):
        (result.local if present_locally(name) else wanted).append(name)
    checked: list[tuple[_entry.Entry, int]] = []  # verified whole, installed together at the end
    for start in range(0, len(wanted), _PULL_BATCH):
        batch = wanted[start:start + _PULL_BATCH]
        addresses = [_entry.address_of(n, build) for n in batch]
        try:
            values = store.get_many(addresses)
        except StoreDown as e:
            result.down = str(e)
            result.unreached += wanted[start:]
            break
        for name, address, value in zip(batch, addresses, values):
            if value is None:  # never pushed, or evicted since a status said it was there
                result.missing.append(name)
                continue
            try:
                checked.append((_entry.decode(value, address, build, keys), len(value)))
            except _entry.EntryRefused as e:
                result.refused.append((name, str(e)))
    try:
        _entry.install([e for e, _ in checked])
        done = checked
    except _cache.BundleCorruptError:  # one entry's group file: install them one by one, naming it
        done = []
        for e, size in checked:
            try:
                _entry.install([e])
                done.append((e, size))
            except _cache.BundleCorruptError as why:
                result.refused.append((e.name, str(why)))
    for e, size in done:
        result.installed.append(e.name)
        result.bytes += size
    return result


def pull_tunings(store: Store, kernels: Iterable[Any], build: dict, keys: signing.VerifyKeys) -> PullResult:
    """Install the tuning files of ``kernels`` (kernel objects of a warm-up; those with an
    autotuner of several configs, :func:`zerojit.fleet.tuning.wanted`) that the cache folder
    lacks, tuned on this GPU (none where none runs) for build ``build``, each checked whole
    against ``keys`` and against the kernel's header and configs before it is written
    (:func:`zerojit.fleet.tuning.install`). Run it where the warm-up runs, before it (the warm-up
    reads the files at its end). Never raises for the store, as :func:`pull`.

    Raises:
        zerojit.outputs.OutputError: the tuning folder cannot be written.
    """
    result = PullResult()
    seen: set[str] = set()
    for kernel in kernels:
        want = _tuning.wanted(kernel)
        if want is None or want[0] in seen:
            continue
        name, gpu, header, configs = want
        seen.add(name)
        if result.down is not None:
            result.unreached.append(name)
            continue
        if os.path.exists(os.path.join(_cache.cache_dir(), _autotune.TUNING_FOLDER, name)):
            result.local.append(name)
            continue
        address = _tuning.address_of(name, gpu, build)
        try:
            value = store.get(address)
        except StoreDown as e:
            result.down = str(e)
            result.unreached.append(name)
            continue
        if value is None:
            result.missing.append(name)
            continue
        try:
            _tuning.install(_tuning.decode(value, address, build, keys), header, configs)
        except _entry.EntryRefused as e:
            result.refused.append((name, str(e)))
            continue
        result.bytes += len(value)
        result.installed.append(name)
    return result


def pull_jobs(store: Store, jobs: Any, build: dict, keys: signing.VerifyKeys, *, generic: bool = False) -> PullResult:
    """:func:`pull` the entries of a warm-up's ``(kernel, key)`` jobs and, with ``generic`` (pass
    the warm-up's own ``generic``), of the generic variants it will make of them
    (:func:`zerojit.fleet.needs.needed_entry_names`; run it inside the warm-up's compile-only
    block), then their kernels' tuning files (:func:`pull_tunings`, in
    :attr:`PullResult.tunings`) unless the store went down."""
    jobs = list(jobs)
    return pull_with_tunings(store, needed_entry_names(jobs, generic=generic), [k for k, _ in jobs], build, keys)


def pull_with_tunings(store: Store, names: Iterable[str], kernels: Iterable[Any], build: dict,
                      keys: signing.VerifyKeys) -> PullResult:
    """:func:`pull` the entries ``names``, then, unless the store went down, the tuning files of
    ``kernels`` (:func:`pull_tunings`, in :attr:`PullResult.tunings`; before the warm-up, which
    reads them at its end)."""
    result = pull(store, names, build, keys)
    if result.down is None:
        result.tunings = pull_tunings(store, kernels, build, keys)
        result.down = result.tunings.down
    return result


@dataclass
class StoreStatus:
    """Which needed entries the store holds now (``present``) and which not (``missing``); one
    may still be evicted before it is pulled."""

    present: list[str]
    missing: list[str]

    def summary(self) -> str:
        line = f"{len(self.present)} of {count(len(self.present) + len(self.missing), 'needed entry', 'needed entries')} in the store"
        return line + (f"; missing: {', '.join(self.missing[:5])}{', ...' if len(self.missing) > 5 else ''}"
                       if self.missing else "")


def status(store: Store, names: Iterable[str], build: dict) -> StoreStatus:
    """Which of the entries ``names`` (of build ``build``) the store holds.

    Raises:
        StoreDown: the store cannot be reached in time.
    """
    names = list(dict.fromkeys(names))
    held = store.exists(_entry.address_of(n, build) for n in names)
    return StoreStatus([n for n in names if _entry.address_of(n, build) in held],
                       [n for n in names if _entry.address_of(n, build) not in held])


@dataclass
class GcResult:
    """What :func:`gc` did: the builds kept (newest first, by build digest), the entries (and tuning files) dropped,
    and the values dropped that were no zerojit entry at all (damaged, or another writer's)."""

    kept: list[str]
    dropped: int
    foreign: int

    def summary(self) -> str:
        return (f"kept {count(len(self.kept), 'build')}; dropped {count(self.dropped, 'entry', 'entries')} of older "
                f"builds and {count(self.foreign, 'value')} that {'was' if self.foreign == 1 else 'were'} no zerojit "
                "entry")


def build_digest(build: dict) -> str:
    """A short name of a build identity: the first 16 hex digits of its canonical JSON's SHA-256."""
    return _entry.address_of("", build)[:16]


def gc(store: Store, keep_builds: int) -> GcResult:
    """Drop every entry and tuning file but those of the ``keep_builds`` builds pushed to most
    recently (by each build's newest ``pushed`` time), and every value of the namespace that is
    neither.
    Reads each value's header (the whole value: the store interface has no partial read).

    Raises:
        ValueError: ``keep_builds`` below 1.
        StoreDown: the store cannot be reached in time (what was dropped stays dropped).
    """
    if keep_builds < 1:
        raise ValueError(f"keep_builds={keep_builds!r}: keep at least 1 build")
    newest: dict[str, str] = {}
    by_build: dict[str, list[str]] = {}
    foreign: list[str] = []
    for address in list(store.scan()):
        value = store.get(address)
        if value is None:  # evicted meanwhile
            continue
        try:
            header = (_tuning.header_of if value.startswith(_tuning.MAGIC) else _entry.header_of)(value)
            digest, pushed = build_digest(header["build"]), str(header.get("pushed", ""))
        except (_entry.EntryRefused, KeyError, TypeError):
            foreign.append(address)
            continue
        by_build.setdefault(digest, []).append(address)
        newest[digest] = max(newest.get(digest, ""), pushed)
    kept = sorted(newest, key=lambda d: newest[d], reverse=True)[:keep_builds]
    drop = [a for d, addresses in by_build.items() if d not in kept for a in addresses]
    store.delete(drop + foreign)
    return GcResult(kept, len(drop), len(foreign))
