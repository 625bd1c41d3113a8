"""An autotuned kernel through the store, against a real redis-server: every config's entry is
named before anything compiles, and its tuning file travels signed with the entries, so a node
pulls both and warms with zero compiles and the farm's choices.

The kernel is ``zerojit.examples.tuned_scale`` (heuristics over an autotuner of 6 configs, pruned
by row length), warmed compile-only for cuda:90 at one row length (4096: every config survives)
with and without a scale: 12 keys, 12 entries.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)
pytest.importorskip("redis", reason="the redis package is not installed (pip install 'zerojit[store]'): "
                    "the store cannot be tested")
pytest.importorskip("cryptography", reason="the cryptography package is not installed (pip install "
                    "'zerojit[store]'): signed values cannot be tested")

import json  # noqa: E402

from triton import knobs  # noqa: E402

from _redis_server import flush, redis_url  # noqa: E402,F401 (fixtures)

from zerojit.autotune import TUNING_FOLDER, save_tuning_file  # noqa: E402
from zerojit.cache import entries_of  # noqa: E402
from zerojit.compile_only import compile_only  # noqa: E402
from zerojit.examples.tuned_scale import TunedScale, tuned_scale_kernel  # noqa: E402
from zerojit.fleet import entry as fe  # noqa: E402
from zerojit.fleet import signing  # noqa: E402
from zerojit.fleet import tuning as ft  # noqa: E402
from zerojit.fleet.needs import entry_names, key_space_jobs  # noqa: E402
from zerojit.fleet.store import NAMESPACE, open_store  # noqa: E402
from zerojit.fleet.transfer import pull_tunings, push_report  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402

TUNING_KEY = (4096, "torch.float32", "torch.float32")  # Triton's: the autotuner's key n, then each tensor's dtype
CONFIGS = tuned_scale_kernel.fn.configs  # heuristics over the autotuner: its configs
CHOICE = 5  # the farm's choice for TUNING_KEY (any config warmed at n=4096)


def registry() -> JitWarmupRegistry:
    reg = JitWarmupRegistry()
    with reg.activate():
        TunedScale().register_warmup(sizes=(4096,))
    return reg


def forget() -> None:
    """This process as a new node: no compiled variant in memory, an empty tuning table."""
    TunedScale.kernel.device_caches.clear()
    TunedScale._tuning_table.clear()
    TunedScale._compiled_configs = None


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """The farm's compile-only cuda:90 warm-up with a tuning file (as a GPU tuning run wrote it)
    in its cache folder, the names its entries get, and a key pair."""
    root = tmp_path_factory.mktemp("farm")
    private, public, _ = signing.keygen(str(root / "keys"))
    with pytest.MonkeyPatch.context() as mp, compile_only("cuda:90"):
        mp.setattr(knobs.cache, "dir", str(root / "farm-cache"))
        forget()
        kernel = TunedScale()
        path = kernel.tuning_file()
        save_tuning_file(path, kernel.tuning_header(), CONFIGS, [(TUNING_KEY, CHOICE, 0.0123)])
        report = registry().warmup(progress=False, target="cuda:90", generic=False)
        build = fe.build_identity("cuda:90")
    assert not report.failures and report.kernels[0].tuning.untuned == 0  # the farm read its file
    return {"report": report, "build": build, "names": [next(iter(entries_of([v]))) for v in report.variants],
            "tuning_name": os.path.basename(path), "tuning_bytes": open(path, "rb").read(),
            "farm_cache": root / "farm-cache", "key": signing.load_signing_key(private),
            "keys": signing.load_verify_keys([public]), "public": public}


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    folder = tmp_path / "node-cache"
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    forget()
    return folder


def test_every_configs_entry_is_named_before_anything_compiles(farm, node_cache, monkeypatch):
    """An autotuned key's key space holds one key per config that survives pruning; each is
    named as the warm-up compiles it (the farm's entries, key by key), nothing compiled."""
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: events.append(kw))
    with compile_only("cuda:90"):
        jobs, skipped = key_space_jobs(registry())
        names = entry_names(jobs)
    assert (len(jobs), skipped) == (12, []) and len(set(names)) == 12
    assert {k.config for _, k in jobs} == set(range(len(CONFIGS)))  # all 6 configs, with and without scale
    assert names == farm["names"]
    assert events == [] and not node_cache.exists()  # nothing compiled, nothing written


def test_the_tuning_file_travels_and_the_node_warms_with_the_farms_choice(farm, flush, node_cache, monkeypatch):
    store = open_store(flush)
    with compile_only("cuda:90"), monkeypatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(farm["farm_cache"]))
        pushed = push_report(store, farm["report"], farm["key"])
    assert sorted(pushed.stored) == sorted(farm["names"]) and pushed.tunings.stored == [farm["tuning_name"]]
    address = ft.address_of(farm["tuning_name"], None, farm["build"])  # made where no GPU runs: no gpu field
    import redis

    with redis.Redis.from_url(flush, socket_connect_timeout=2, socket_timeout=5) as raw:  # its own value and address
        assert raw.exists(NAMESPACE + address) == 1 and len(raw.keys("*")) == 13
    assert "1 tuning file pushed, 0 already there" in pushed.summary()

    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    monkeypatch.setenv(signing.VERIFY_KEYS_ENV, farm["public"])
    with compile_only("cuda:90"):  # the node: its warm-up pulls the entries and the tuning file first
        report = registry().warmup(progress=False, target="cuda:90", generic=False, store=flush)
    assert (node_cache / TUNING_FOLDER / farm["tuning_name"]).read_bytes() == farm["tuning_bytes"]
    assert (report.store.pulled, report.store.tuning_files, report.store.refused) == (12, 1, ())
    assert "12 entries and 1 tuning file pulled" in report.summary()
    assert events == [True] * 12 and report.stats.total_compiled == 0
    assert dict(TunedScale._tuning_table.items()) == {TUNING_KEY: CHOICE} and report.kernels[0].tuning.untuned == 0
    with compile_only("cuda:90"):  # the node holds it now: not read again
        again = pull_tunings(store, [TunedScale()], farm["build"], farm["keys"])
    assert (again.local, again.installed, again.bytes) == ([farm["tuning_name"]], [], 0)


def _pull_tuning(store, farm):
    with compile_only("cuda:90"):
        return pull_tunings(store, [TunedScale()], farm["build"], farm["keys"])


def test_a_tampered_tuning_file_is_refused_naming_it(farm, flush, node_cache):
    store = open_store(flush)
    name = farm["tuning_name"]
    t = ft.TuningFile(name, None, farm["build"], farm["tuning_bytes"])
    value = ft.encode(t, farm["key"])
    tampered = value.replace(b'"config": 5', b'"config": 0')  # another choice, same size, the farm's signature
    assert tampered != value
    store.put_if_absent(t.address, tampered)
    result = _pull_tuning(store, farm)
    assert result.installed == [] and [n for n, _ in result.refused] == [name]
    assert result.refused[0][1] == (f"store tuning file {t.address[:16]} ({name}): tuning/{name} does not match its "
                                    "SHA-256 (altered in the store)")
    assert not (node_cache / TUNING_FOLDER / name).exists()


def test_a_signed_tuning_file_the_warm_up_would_refuse_is_not_installed(farm, flush, node_cache):
    """Signed by the farm, but for another config list (the library's autotuner changed, its
    kernel source not): installing it would fail the node's warm-up."""
    name = farm["tuning_name"]
    doc = json.loads(farm["tuning_bytes"])
    doc["configs"] = doc["configs"][:-1]
    t = ft.TuningFile(name, None, farm["build"], json.dumps(doc).encode())
    store = open_store(flush)
    store.put_if_absent(t.address, ft.encode(t, farm["key"]))
    result = _pull_tuning(store, farm)
    assert [n for n, _ in result.refused] == [name]
    assert result.refused[0][1].startswith(f"store tuning file {name}: this warm-up would not read it (field 'configs'")
    assert not (node_cache / TUNING_FOLDER / name).exists()


def test_an_entrys_signature_does_not_pass_for_a_tuning_file(farm, node_cache):
    """The signature of a tuning file has its own domain: the same key signing the same address,
    build and digests as an entry does not verify as a tuning file."""
    name = farm["tuning_name"]
    t = ft.TuningFile(name, None, farm["build"], farm["tuning_bytes"])
    value = ft.encode(t, farm["key"])
    head, _, body = value[len(ft.MAGIC):].partition(b"\n")
    header = json.loads(head)
    header["signature"] = signing.sign(farm["key"], t.address, t.build, t.digests())  # kind "entry"
    forged = ft.MAGIC + json.dumps(header).encode() + b"\n" + body
    with pytest.raises(fe.EntryRefused, match="does not verify"):
        ft.decode(forged, t.address, farm["build"], farm["keys"])
    assert ft.decode(value, t.address, farm["build"], farm["keys"]).data == farm["tuning_bytes"]


def test_gc_keeps_the_tuning_files_of_the_builds_it_keeps(farm, flush):
    """Before tuning files had a header gc knew, it dropped them all as foreign values."""
    from zerojit.fleet.transfer import gc

    store = open_store(flush)
    kept = None
    for when, build in (("2026-01", {**farm["build"], "triton_build": "older"}), ("2026-02", farm["build"])):
        t = ft.TuningFile(farm["tuning_name"], None, build, farm["tuning_bytes"])
        head, _, body = ft.encode(t, farm["key"])[len(ft.MAGIC):].partition(b"\n")
        header = {**json.loads(head), "pushed": f"{when}-01T00:00:00+00:00"}  # not signed: gc's ordering only
        store.put_if_absent(t.address, ft.MAGIC + json.dumps(header).encode() + b"\n" + body)
        kept = t.address
    result = gc(store, keep_builds=1)
    assert (result.dropped, result.foreign) == (1, 0)
    assert list(store.scan()) == [kept]


def test_a_store_value_nested_too_deep_is_refused_never_a_recursion_error():
    """json raises RecursionError (no ValueError) for a header nested past the interpreter's limit:
    an entry or tuning file whose header is that is refused like any damaged value."""
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    for module, what in ((fe, "store entry"), (ft, "store tuning file")):
        with pytest.raises(fe.EntryRefused, match=f"{what} abcd: truncated or damaged"):
            module.decode(module.MAGIC + deep, "abcd", {}, None)
