"""A fleet's shared compile store: one farm compiles, every node pulls the keys it needs.

Issue 31, groundwork. One concept per module:

* :mod:`zerojit.fleet.store`: the store interface (:class:`~zerojit.fleet.store.Store`) and its
  Redis implementation (every call with a deadline; any failure to reach the server is
  :class:`~zerojit.fleet.store.StoreDown`, which callers turn into "compile locally").
* :mod:`zerojit.fleet.entry`: one Triton cache entry as one store value (its files, its launcher
  module on Triton 3.6), its content address and its verified decoding.
* :mod:`zerojit.fleet.signing`: Ed25519 keys, signatures over an entry's address, build
  identity and file digests, and the trusted keys of ``ZEROJIT_STORE_VERIFY_KEYS``.
* :mod:`zerojit.fleet.tuning`: one tuning file of an autotuned kernel as one store value.
* :mod:`zerojit.fleet.needs`: the entries a key space needs (its generic variants' too), named
  before anything compiles.
* :mod:`zerojit.fleet.transfer`: push a warm-up's entries and tuning files, pull the ones a
  cache lacks.

The store is read during warm-up only; Triton's own remote cache backend is never installed.
Needs the ``zerojit[store]`` extra (``redis``, ``cryptography``); importing this package does not.
"""

from ..warmup_store import register_scheme as _register_scheme


def _open(url: str, **options):  # imported when a warm-up opens a store: redis and cryptography only then
    from .warmup import open_warmup_store

    return open_warmup_store(url, **options)


_register_scheme(("redis", "rediss"), _open)
