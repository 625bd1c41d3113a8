"""The fleet store as a warm-up's store: ``registry.warmup(store="redis://...", push=...)``.

:class:`FleetWarmupStore` is the :class:`zerojit.warmup_store.WarmupStore` the warm-up calls:
before compiling it names each job's cache entry (:func:`zerojit.fleet.needs.entry_names`, no
compile) and pulls those the cache folder lacks (:func:`zerojit.fleet.transfer.pull`: each
checked whole against the trusted keys, installed whole), then the tuning files of its
autotuned kernels (:func:`zerojit.fleet.transfer.pull_tunings`); after the warm-up, with ``push``, it
publishes the warm-up's entries (:func:`zerojit.fleet.transfer.push_report`), sending only those
the store lacks. A store that is down, at the start or midway, is one line in the report and
the warm-up compiles what it did not give.

Trusted keys: those of ``ZEROJIT_STORE_VERIFY_KEYS``, and with ``push`` also the signing key's
own public key (a farm trusts what it signed itself). With neither, opening is refused: a store
whose every entry would be refused is a configuration error, not a slow start.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from .. import cache as _cache
from ..warmup_store import StoreOutcome
from . import entry as _entry
from . import signing
from .needs import entry_names
from .store import CONNECT_TIMEOUT, OPERATION_TIMEOUT, StoreDown, open_store
from .transfer import pull_with_tunings, push_report

__all__ = ["FleetWarmupStore", "open_warmup_store"]


class FleetWarmupStore:
    """A Redis store (:class:`zerojit.fleet.store.RedisStore`) as a warm-up's store.

    Args:
        url: ``redis://`` or ``rediss://``, a password in the URL if the server has one.
        push: publish the warm-up's entries afterwards (needs ``ZEROJIT_STORE_SIGNING_KEY``).
        connect_timeout, timeout: seconds to connect and for each operation (2 s and 10 s by
            default: redis-py waits forever unless told).

    Raises:
        zerojit.fleet.store.StoreError: a bad URL or timeout, the ``redis`` package missing.
        zerojit.fleet.signing.SigningError: ``push`` without a usable signing key, a verify key
            file missing or unusable, or no trusted key at all (nothing could be pulled).
    """

    def __init__(self, url: str, *, push: bool = False, connect_timeout: float = CONNECT_TIMEOUT,
                 timeout: float = OPERATION_TIMEOUT) -> None:
        self._signing = signing.signing_key_from_env() if push else None
        keys = signing.verify_keys_from_env()
        if self._signing is not None:  # the farm trusts its own entries
            own = self._signing.private.public_key()
            keys = signing.VerifyKeys({**keys.keys, self._signing.key_id: own},
                                      {**keys.paths, self._signing.key_id: self._signing.path})
        if not keys.keys:
            raise signing.SigningError(f"pulling from a store needs trusted keys: set {signing.VERIFY_KEYS_ENV} to the "
                                       "farm's public key file(s), ':'-separated (there is no unsigned mode)")
        self._keys = keys
        self._store = open_store(url, connect_timeout=connect_timeout, timeout=timeout)
        self.name = self._store.name

    def _build(self) -> dict:
        target = _cache.current_target_name()
        if not target:
            raise _cache.BundleError("no compile target: the store's entries are per target")
        return _entry.build_identity(target)

    def pull(self, jobs: Sequence[tuple[Any, Any]]) -> tuple[StoreOutcome, set[int]]:
        """See :meth:`zerojit.warmup_store.WarmupStore.pull`; run inside the warm-up's target."""
        names = entry_names(jobs)
        result = pull_with_tunings(self._store, [n for n in names if n is not None], [k for k, _ in jobs],
                                   self._build(), self._keys)
        t = result.tunings
        installed = set(result.installed)
        outcome = StoreOutcome(self.name, pulled=len(result.installed), bytes=result.bytes + (t.bytes if t else 0),
                               missing=len(result.missing), refused=tuple(result.refused + (t.refused if t else [])),
                               down=result.down, unreached=len(result.unreached),
                               tuning_files=len(t.installed) if t else 0)
        return outcome, {i for i, n in enumerate(names) if n in installed}

    def push(self, report: Any, outcome: StoreOutcome) -> StoreOutcome:
        """See :meth:`zerojit.warmup_store.WarmupStore.push`."""
        if self._signing is None:
            return outcome
        if outcome.down:
            return dataclasses.replace(outcome, push_error=f"not pushed: {outcome.down}")
        try:
            done = push_report(self._store, report, self._signing)
        except (StoreDown, _cache.BundleError) as e:
            return dataclasses.replace(outcome, push_error=str(e))
        t = done.tunings
        return dataclasses.replace(outcome, pushed=len(done.stored), pushed_bytes=done.bytes + (t.bytes if t else 0),
                                   already_there=len(done.present), pushed_tuning_files=len(t.stored) if t else 0)

    def close(self) -> None:
        self._store.close()


def open_warmup_store(url: str, *, push: bool = False, **options: Any) -> FleetWarmupStore:
    """The opener ``zerojit.fleet`` registers for ``redis://`` and ``rediss://`` (see
    :class:`FleetWarmupStore` for the arguments and errors)."""
    return FleetWarmupStore(url, push=push, **options)
