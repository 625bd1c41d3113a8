"""A warm-up's shared store of cache entries: what ``warmup(store=...)`` asks of one.

A fleet's store (:mod:`zerojit.fleet`, a layer above the warm-up) is reached by the warm-up
through the small interface here, so the registry never imports it: before compiling, the
warm-up hands the store the ``(kernel, key)`` jobs it has left (after its restore index) and the
store installs into Triton's cache folder the entries it holds of them; the warm-up then loads
those from disk and compiles only the rest. After the warm-up, a store opened with ``push``
publishes what the warm-up holds.

A URL becomes a store through the scheme's opener (:func:`register_scheme`): ``zerojit.fleet``
registers ``redis://`` and ``rediss://`` when ``zerojit`` is imported (as ``zerojit.serving``
registers fallback mode with the monitor).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from typing import Any, Callable, Protocol, Sequence

from .reports import count

__all__ = ["WarmupStore", "StoreOutcome", "UnknownStoreError", "register_scheme", "open_store"]


class UnknownStoreError(ValueError):
    """A store URL of a scheme nothing registered, or a string that is no URL (a user error: the
    message lists the schemes known)."""


@dataclasses.dataclass(frozen=True)
class StoreOutcome:
    """What a warm-up's store did, in ``WarmupReport.store``.

    Attributes:
        store: the store as messages name it (its URL without a password).
        pulled: cache entries pulled and installed (each checked whole first); ``bytes`` read;
            ``tuning_files``: autotuned kernels' tuning files pulled and installed.
        missing: entries the warm-up needed that the store lacked (compiled here instead).
        refused: ``(entry, reason)`` for each entry refused (unsigned, wrongly signed, another
            build's, damaged): compiled here instead.
        down: why the store went away (at the start or midway), else None: what it did not
            give was compiled here; ``unreached``: the entries not asked for once it had.
        pushed, pushed_tuning_files, pushed_bytes, already_there: with ``push``, entries (and
            tuning files) this warm-up stored, and the entries the store held already; ``push_error`` says why a push did not happen.
    """

    store: str
    pulled: int = 0
    bytes: int = 0
    tuning_files: int = 0
    missing: int = 0
    refused: tuple[tuple[str, str], ...] = ()
    down: str | None = None
    unreached: int = 0
    pushed: int | None = None
    pushed_tuning_files: int = 0
    pushed_bytes: int = 0
    already_there: int = 0
    push_error: str | None = None

    def add(self, other: "StoreOutcome") -> "StoreOutcome":
        """This outcome and ``other`` (a second pull of the same warm-up: its generic variants)."""
        return dataclasses.replace(self, pulled=self.pulled + other.pulled, bytes=self.bytes + other.bytes,
                                   tuning_files=self.tuning_files + other.tuning_files,
                                   missing=self.missing + other.missing, refused=self.refused + other.refused,
                                   down=self.down or other.down, unreached=self.unreached + other.unreached)

    def lines(self, indent: str = "") -> list[str]:
        """The report's lines: what was pulled, missing or refused (each named), pushed."""
        tunings = f" and {count(self.tuning_files, 'tuning file')}" if self.tuning_files else ""
        line = (f"{indent}store {self.store}: {count(self.pulled, 'entry', 'entries')}{tunings} pulled "
                f"({self.bytes / 1e6:.1f} MB), {self.missing} missing, {len(self.refused)} refused")
        if self.down:
            line += f"; {self.down}: {self.unreached} not reached, compiled locally"
        out = [line]
        out += [f"{indent}  refused {name}: {reason} (compiled locally)" for name, reason in self.refused]
        if self.pushed is not None:
            tunings = f" and {count(self.pushed_tuning_files, 'tuning file')}" if self.pushed_tuning_files else ""
            out.append(f"{indent}  pushed {count(self.pushed, 'entry', 'entries')}{tunings} "
                       f"({self.pushed_bytes / 1e6:.1f} MB); "
                       f"{self.already_there} already in the store")
        if self.push_error:
            out.append(f"{indent}  push failed: {self.push_error}")
        return out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["refused"] = [{"entry": n, "reason": r} for n, r in self.refused]
        return d


class WarmupStore(Protocol):
    """What a warm-up needs of a store (:mod:`zerojit.fleet.warmup` implements it for Redis)."""

    name: str  #: the store as messages name it (no password)

    def pull(self, jobs: Sequence[tuple[Any, Any]]) -> tuple[StoreOutcome, set[int]]:
        """Install into Triton's cache folder the entries of ``jobs`` the folder lacks and the
        store holds (checked whole), inside the warm-up's compile target. Returns the outcome
        and the indexes of the jobs whose entries were installed. Never raises for the store
        (a store down is ``StoreOutcome.down``)."""

    def push(self, report: Any, outcome: StoreOutcome) -> StoreOutcome:
        """With ``push``: publish the warm-up's entries; ``outcome`` plus what was pushed. A
        no-op without ``push``. Never raises for the store (``push_error``)."""

    def close(self) -> None:
        """Close the connection."""


_openers: dict[str, Callable[..., WarmupStore]] = {}


def register_scheme(schemes: Sequence[str], opener: Callable[..., WarmupStore]) -> None:
    """Make ``open_store`` open URLs of ``schemes`` with ``opener(url, push=..., **options)``."""
    for scheme in schemes:
        _openers[scheme] = opener


def open_store(store: "str | WarmupStore", *, push: bool = False, **options: Any) -> WarmupStore:
    """``store`` as a :class:`WarmupStore`: a URL is opened by its scheme's opener (``options``:
    the opener's, e.g. ``connect_timeout``/``timeout`` seconds); an object is taken as it is.

    Raises:
        UnknownStoreError: a URL of a scheme nothing registered, or no URL at all.
        TypeError: ``store`` is neither a str nor an object with ``pull``, ``push`` and ``close``.
        Whatever the opener raises for a bad URL or, with ``push``, a missing signing key
        (``zerojit.fleet``: ``StoreError``, ``SigningError``; both user errors).
    """
    if not isinstance(store, str):
        missing = [m for m in ("pull", "push", "close") if not callable(getattr(store, m, None))]
        if missing:
            raise TypeError(f"store: give a URL (a str, e.g. redis://host:6379/0) or a WarmupStore, not a "
                            f"{type(store).__name__} (it has no {', '.join(missing)})")
        return store
    try:
        scheme = urllib.parse.urlsplit(store).scheme
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        raise UnknownStoreError(f"store {store.split('@')[-1]!r}: not a URL ({e})") from None
    if scheme not in _openers:
        known = ", ".join(f"{s}://" for s in sorted(_openers)) or "none (is zerojit.fleet importable?)"
        raise UnknownStoreError(f"store {store.split('@')[-1]!r}: no store of scheme {scheme or '(none)'!r}; "
                                f"stores known: {known}")
    return _openers[scheme](store, push=push, **options)
