"""``registry.warmup(store=URL, push=...)`` against a real redis-server: a farm's warm-up
publishes its entries (keys and generic variants), a node's warm-up with an empty cache pulls
them and compiles nothing; a store that is down costs one line and a local compile; a store
given wrongly is refused before anything compiles.

Triton's compilation listener counts compiles (``cache_hit`` False) and disk loads (True).
"""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)
pytest.importorskip("redis", reason="the redis package is not installed (pip install 'zerojit[store]'): "
                    "the store cannot be tested")
pytest.importorskip("cryptography", reason="the cryptography package is not installed (pip install "
                    "'zerojit[store]'): signed entries cannot be tested")

from triton import knobs  # noqa: E402

from _redis_server import PASSWORD, flush, free_port, redis_url  # noqa: E402,F401 (fixtures)

from zerojit.cache import entries_of  # noqa: E402
from zerojit.compile_only import compile_only  # noqa: E402
from zerojit.examples.scale_add import scale_add  # noqa: E402
from zerojit.fleet import signing  # noqa: E402
from zerojit.generic import forget as forget_generic  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402
from zerojit.warmup_store import UnknownStoreError  # noqa: E402


def registry() -> JitWarmupRegistry:
    reg = JitWarmupRegistry()
    with reg.activate():
        scale_add.register_warmup(periods=(16, 7), aligned=(True, False))
    return reg


def fresh_cache(monkeypatch, folder) -> list[bool]:
    """Point Triton at an empty cache folder, forget the in-process variants; the listener's
    events (True: a disk load, False: a compile)."""
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    for fn in (scale_add.kernel, *scale_add.kernel.__dict__.get("_zerojit_generic", {}).values()):
        fn.device_caches.clear()  # (a node is a new process: nothing compiled in it yet)
    forget_generic()
    events: list[bool] = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    return events


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    private, public, _ = signing.keygen(str(tmp_path_factory.mktemp("keys")))
    return private, public


def test_a_farm_pushes_and_a_node_pulls_every_key_and_generic_variant(keys, flush, tmp_path, monkeypatch):
    private, public = keys
    monkeypatch.setenv(signing.SIGNING_KEY_ENV, private)
    monkeypatch.delenv(signing.VERIFY_KEYS_ENV, raising=False)  # a farm trusts its own key
    farm_events = fresh_cache(monkeypatch, tmp_path / "farm")
    with compile_only("cuda:90"):
        farm = registry().warmup(progress=False, target="cuda:90", store=flush, push=True, workers=1)
    compiled = farm.num_keys + farm.generic_variants
    assert farm.num_keys == 4 and farm.generic_variants >= 1 and farm_events == [False] * compiled
    assert (farm.store.pulled, farm.store.missing, farm.store.pushed, farm.store.already_there) == (0, compiled,
                                                                                                   compiled, 0)
    assert f"pushed {compiled} entries" in farm.summary()

    monkeypatch.delenv(signing.SIGNING_KEY_ENV)
    monkeypatch.setenv(signing.VERIFY_KEYS_ENV, public)
    node_events = fresh_cache(monkeypatch, tmp_path / "node")
    with compile_only("cuda:90"):
        node = registry().warmup(progress=False, target="cuda:90", store=flush, workers=1)
    assert node_events == [True] * compiled  # every variant loaded from disk: nothing compiled
    assert (node.store.pulled, node.store.missing, node.store.refused, node.store.pushed) == (compiled, 0, (), None)
    assert [v.triton_key for v in node.variants] == [v.triton_key for v in farm.variants]
    assert sorted(entries_of(node.generic)) == sorted(entries_of(farm.generic))
    assert node.stats.store_entries == 4 and node.generic_stats.store_entries == compiled - 4
    assert "4 pulled from the store, then loaded from the disk cache" in node.summary()
    assert "store redis://:***@127.0.0.1:" in node.summary() and PASSWORD not in node.summary()
    assert node.to_dict()["store"]["pulled"] == compiled


def test_a_store_down_costs_one_line_and_a_local_compile(keys, tmp_path, monkeypatch):
    monkeypatch.setenv(signing.VERIFY_KEYS_ENV, keys[1])
    events = fresh_cache(monkeypatch, tmp_path / "node")
    t0 = time.monotonic()
    with compile_only("cuda:90"):
        report = registry().warmup(progress=False, target="cuda:90", store=f"redis://127.0.0.1:{free_port()}/0",
                                   workers=1, generic=False)
    assert events == [False] * 4 and report.ok and report.store.pulled == 0
    assert "compiled locally" in report.store.lines()[0] and "127.0.0.1" in report.store.down
    assert dict(report.stats.phases)["store"] < 2.5  # the connect deadline, once (no retries)
    assert time.monotonic() - t0 < 60


def test_a_store_given_wrongly_is_refused_before_anything_compiles(keys, flush, tmp_path, monkeypatch):
    events = fresh_cache(monkeypatch, tmp_path / "node")
    monkeypatch.delenv(signing.VERIFY_KEYS_ENV, raising=False)
    monkeypatch.delenv(signing.SIGNING_KEY_ENV, raising=False)
    with compile_only("cuda:90"):
        with pytest.raises(signing.SigningError, match=signing.VERIFY_KEYS_ENV):  # no trusted key: no unsigned mode
            registry().warmup(progress=False, store=flush)
        monkeypatch.setenv(signing.VERIFY_KEYS_ENV, keys[1])
        with pytest.raises(signing.SigningError, match=signing.SIGNING_KEY_ENV):
            registry().warmup(progress=False, store=flush, push=True)
        with pytest.raises(ValueError, match="needs store="):
            registry().warmup(progress=False, push=True)
        with pytest.raises(UnknownStoreError, match="no store of scheme 's3'.*redis://, rediss://"):
            registry().warmup(progress=False, store="s3://bucket/zerojit")
    assert events == []
