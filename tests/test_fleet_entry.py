"""Store entries end to end against a real redis-server: a farm pushes a compile-only warm-up's
entries signed, a node with an empty cache pulls them and warms up with zero compiles; every
fault the issue lists is refused or survived, naming the entry and the reason.

Triton's compilation listener counts compiles (``cache_hit`` False) and disk loads (True).
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)
pytest.importorskip("redis", reason="the redis package is not installed (pip install 'zerojit[store]'): "
                    "the store cannot be tested")
pytest.importorskip("cryptography", reason="the cryptography package is not installed (pip install "
                    "'zerojit[store]'): signed entries cannot be tested")

import dataclasses  # noqa: E402
import json  # noqa: E402

from triton import knobs  # noqa: E402

from _redis_server import _start, flush, redis_url  # noqa: E402,F401 (fixtures)

from zerojit.cache import entries_of  # noqa: E402
from zerojit.compile_only import compile_only  # noqa: E402
from zerojit.examples.scale_add import scale_add  # noqa: E402
from zerojit.fleet import entry as fe  # noqa: E402
from zerojit.fleet import signing  # noqa: E402
from zerojit.fleet.store import NAMESPACE, open_store  # noqa: E402
from zerojit.fleet.needs import entry_names, key_space_jobs  # noqa: E402
from zerojit.fleet.transfer import build_digest, gc, pull, pull_jobs, push_report, status  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402


def registry() -> JitWarmupRegistry:
    reg = JitWarmupRegistry()
    with reg.activate():
        scale_add.register_warmup(periods=(16, 7), aligned=(True, False))
    return reg


def forget() -> None:
    scale_add.kernel.device_caches.clear()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """A compile-only cuda:90 warm-up of the example kernel's 4 keys in the farm's cache folder,
    its build identity and a key pair (the farm signs; nodes trust the public key)."""
    root = tmp_path_factory.mktemp("farm")
    private, public, kid = signing.keygen(str(root / "keys"))
    with pytest.MonkeyPatch.context() as mp, compile_only("cuda:90"):
        mp.setattr(knobs.cache, "dir", str(root / "farm-cache"))
        forget()
        report = registry().warmup(progress=False, target="cuda:90", generic=False)
        build = fe.build_identity("cuda:90")
        names = sorted(entries_of(report.variants))
        entries = {e.name: e for e in (fe.entry_of_variant(v, build) for v in report.variants)}
    return {"report": report, "build": build, "names": names, "entries": entries, "farm_cache": root / "farm-cache",
            "key": signing.load_signing_key(private), "keys": signing.load_verify_keys([public]), "kid": kid,
            "root": root}


@pytest.fixture
def node_cache(tmp_path, monkeypatch):
    folder = tmp_path / "node-cache"
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    forget()
    return folder


def raw(url):
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)


def test_push_then_pull_warms_a_node_with_zero_compiles(farm, flush, node_cache, monkeypatch):
    store = open_store(flush)
    with compile_only("cuda:90"), monkeypatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(farm["farm_cache"]))
        pushed = push_report(store, farm["report"], farm["key"])
    assert sorted(pushed.stored) == farm["names"] and len(farm["names"]) == 4 and pushed.present == []
    with raw(flush) as r:  # one value per entry, at the content address of its entry and build
        assert sorted(r.keys("*")) == sorted(f"{NAMESPACE}{fe.address_of(n, farm['build'])}".encode()
                                             for n in farm["names"])
    again = push_report(store, farm["report"], farm["key"], target="cuda:90")
    assert again.stored == [] and sorted(again.present) == farm["names"]

    result = pull(store, farm["names"], farm["build"], farm["keys"])
    assert (sorted(result.installed), result.missing, result.refused, result.down) == (farm["names"], [], [], None)
    for name in farm["names"]:  # byte for byte the farm's files (group file paths aside)
        for f, data in farm["entries"][name].files.items():
            if not f.startswith("__grp__"):
                assert (node_cache / name / f).read_bytes() == data
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    with compile_only("cuda:90"):
        report = registry().warmup(progress=False, target="cuda:90", generic=False)
    assert events == [True] * 4 and report.stats.total_compiled == 0
    assert [v.triton_key for v in report.variants] == [v.triton_key for v in farm["report"].variants]
    assert pull(store, farm["names"], farm["build"], farm["keys"]).local == farm["names"]  # nothing read again


def _pull_one(store, farm, name):
    return pull(store, [name], farm["build"], farm["keys"])


def _refused(result, name, pattern, node_cache):
    assert result.installed == [] and [n for n, _ in result.refused] == [name]
    assert pattern in result.refused[0][1], result.refused[0][1]
    assert not (node_cache / name).exists()  # nothing of it installed


def test_a_truncated_value_is_refused(farm, flush, node_cache):
    name = farm["names"][0]
    address = fe.address_of(name, farm["build"])
    value = fe.encode(farm["entries"][name], farm["key"])
    with raw(flush) as r:
        r.set(NAMESPACE + address, value[:-100])
    result = _pull_one(open_store(flush), farm, name)
    cut = len(value) - 100 - value.index(b"\n", len(fe.MAGIC)) - 1
    _refused(result, name, f"truncated or damaged ({cut} bytes of files, its header lists {cut + 100})", node_cache)


def test_a_wrong_signature_is_refused_naming_the_key(farm, flush, node_cache, tmp_path):
    name, other = farm["names"][0], farm["names"][1]
    store = open_store(flush)
    stranger, _, stranger_id = signing.keygen(str(tmp_path / "stranger"))
    store.put_if_absent(fe.address_of(name, farm["build"]), fe.encode(farm["entries"][name],
                                                                       signing.load_signing_key(stranger)))
    _refused(_pull_one(store, farm, name), name, f"signed by key {stranger_id}, which is not trusted (trusted: "
             f"{farm['kid']})", node_cache)
    # a trusted signature over other files: the cubin replaced, its digest in the header too
    e = farm["entries"][other]
    value = fe.encode(e, farm["key"])
    cubin = next(n for n in e.files if n.endswith(".cubin"))
    forged = dataclasses.replace(e, files={**e.files, cubin: e.files[cubin][:-4] + b"\0\0\0\1"})
    header_forged = fe.encode(forged, signing.load_signing_key(stranger)).split(b"\n")[1]
    header = json.loads(header_forged)
    header["signature"] = json.loads(value.split(b"\n")[1])["signature"]  # the farm's, for the real files
    body = b"".join(forged.files[n] for n in sorted(forged.files))
    with raw(flush) as r:
        r.set(NAMESPACE + fe.address_of(other, farm["build"]),
              fe.MAGIC + json.dumps(header).encode() + b"\n" + body)
    _refused(_pull_one(store, farm, other), other, f"the signature of key {farm['kid']} does not verify", node_cache)


def test_altered_bytes_under_a_valid_signature_are_refused(farm, flush, node_cache):
    name = farm["names"][0]
    e = farm["entries"][name]
    value = bytearray(fe.encode(e, farm["key"]))
    value[-1] ^= 0xFF  # the last file's last byte
    with raw(flush) as r:
        r.set(NAMESPACE + fe.address_of(name, farm["build"]), bytes(value))
    last = sorted(e.files)[-1]
    _refused(_pull_one(open_store(flush), farm, name), name, f"files/{last} does not match its SHA-256", node_cache)


def test_another_builds_entry_is_refused(farm, flush, node_cache):
    name = farm["names"][0]
    theirs = dataclasses.replace(farm["entries"][name], build={**farm["build"], "triton_version": "3.5.1"})
    with raw(flush) as r:  # signed by the trusted key, yet for another Triton: put where this build looks
        r.set(NAMESPACE + fe.address_of(name, farm["build"]), fe.encode(theirs, farm["key"]))
    here = farm["build"]["triton_version"]
    _refused(_pull_one(open_store(flush), farm, name), name,
             f"built for another build (triton_version '3.5.1', here '{here}')", node_cache)


def test_an_entry_under_another_address_is_refused(farm, flush, node_cache):
    name, other = farm["names"][:2]
    with raw(flush) as r:  # a valid, trusted entry replayed under another entry's address
        r.set(NAMESPACE + fe.address_of(other, farm["build"]), fe.encode(farm["entries"][name], farm["key"]))
    _refused(_pull_one(open_store(flush), farm, other), other, "filed under another address", node_cache)


def test_a_key_evicted_between_status_and_pull_is_compiled(farm, flush, node_cache):
    store = open_store(flush)
    addresses = [fe.address_of(n, farm["build"]) for n in farm["names"]]
    for n, a in zip(farm["names"], addresses):
        store.put_if_absent(a, fe.encode(farm["entries"][n], farm["key"]))
    assert store.exists(addresses) == set(addresses)  # the status
    assert store.delete(addresses[1:2]) == 1  # evicted
    result = pull(store, farm["names"], farm["build"], farm["keys"])
    assert result.missing == farm["names"][1:2] and sorted(result.installed) == sorted(farm["names"][:1] + farm["names"][2:])


def test_redis_gone_mid_pull_leaves_whole_entries(farm, node_cache, tmp_path, monkeypatch):
    from zerojit.fleet import transfer

    monkeypatch.setattr(transfer, "_PULL_BATCH", 1)  # a round trip per entry: the server dies between two
    proc, url, log = _start(tmp_path, None)
    try:
        inner = open_store(url)
        for n in farm["names"]:
            inner.put_if_absent(fe.address_of(n, farm["build"]), fe.encode(farm["entries"][n], farm["key"]))

        class Dying:  # the server stops right after the second value is read
            reads = 0

            def get(self, address):
                value = inner.get(address)
                Dying.reads += 1
                if Dying.reads == 2:
                    proc.terminate()
                    proc.wait(5)
                return value

            def get_many(self, addresses):
                return [self.get(a) for a in addresses]

        result = pull(Dying(), farm["names"], farm["build"], farm["keys"])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        log.close()
    assert result.installed == farm["names"][:2] and (result.missing, result.unreached) == ([], farm["names"][2:])
    assert result.down is not None and "is down (get:" in result.down
    for n in farm["names"][:2]:  # whole: every file of the farm's entry, byte for byte (group file paths aside)
        files = farm["entries"][n].files
        assert set(os.listdir(node_cache / n)) == set(files)
        assert all((node_cache / n / f).read_bytes() == d for f, d in files.items() if not f.startswith("__grp__"))
    assert not any((node_cache / n).exists() for n in farm["names"][2:])


def test_store_down_at_start_pulls_nothing_in_one_line(farm, node_cache):
    from _redis_server import free_port

    result = pull(open_store(f"redis://127.0.0.1:{free_port()}/0"), farm["names"], farm["build"], farm["keys"])
    assert (result.installed, result.missing, result.unreached) == ([], [], farm["names"])
    assert result.summary().endswith(f": {len(farm['names'])} not reached, compiling locally")
    assert "\n" not in result.summary()


def test_a_key_spaces_entries_are_named_before_anything_is_compiled(farm, node_cache):
    with compile_only("cuda:90"):
        jobs, skipped = key_space_jobs(registry())
        names = entry_names(jobs)
    assert (len(jobs), skipped) == (4, [])
    assert names == [next(iter(entries_of([v]))) for v in farm["report"].variants]  # the farm's, key by key
    assert not node_cache.exists() or not any(p.name in names for p in node_cache.iterdir())  # nothing compiled


def test_status_then_pull_of_a_warm_up_compiles_only_what_the_store_lacks(farm, flush, node_cache, monkeypatch):
    store = open_store(flush)
    held = farm["names"][:3]
    for n in held:
        store.put_if_absent(fe.address_of(n, farm["build"]), fe.encode(farm["entries"][n], farm["key"]))
    st = status(store, farm["names"], farm["build"])
    assert (st.present, st.missing) == (held, farm["names"][3:])
    assert st.summary() == f"3 of 4 needed entries in the store; missing: {farm['names'][3]}"
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    with compile_only("cuda:90"):
        reg = registry()
        result = pull_jobs(store, key_space_jobs(reg)[0], farm["build"], farm["keys"])
        assert (sorted(result.installed), result.missing) == (held, farm["names"][3:])
        report = reg.warmup(progress=False, target="cuda:90", generic=False)
    assert sorted(events) == [False, True, True, True]  # one compile: the entry the store lacked
    assert report.stats.total_compiled == 1


def _pushed_at(value: bytes, when: str) -> bytes:
    head, _, body = value[len(fe.MAGIC):].partition(b"\n")
    header = json.loads(head)
    header["pushed"] = when  # not signed: gc's ordering only
    return fe.MAGIC + json.dumps(header).encode() + b"\n" + body


def test_gc_keeps_the_newest_builds_and_drops_foreign_values(farm, flush):
    store = open_store(flush)
    name = farm["names"][0]
    builds = {when: {**farm["build"], "triton_build": f"build-{when}"} for when in ("2026-01", "2026-03", "2026-02")}
    addresses = {}
    for when, build in builds.items():
        e = dataclasses.replace(farm["entries"][name], build=build)
        addresses[when] = e.address
        store.put_if_absent(e.address, _pushed_at(fe.encode(e, farm["key"]), f"{when}-01T00:00:00+00:00"))
    store.put_if_absent("ff" * 32, b"not an entry")
    result = gc(store, keep_builds=2)
    assert result.kept == [build_digest(builds["2026-03"]), build_digest(builds["2026-02"])]
    assert (result.dropped, result.foreign) == (1, 1)
    assert sorted(store.scan()) == sorted([addresses["2026-03"], addresses["2026-02"]])
    with pytest.raises(ValueError, match="keep at least 1 build"):
        gc(store, keep_builds=0)


def test_the_launcher_module_travels_with_its_entry_on_triton_3_6(farm, node_cache, monkeypatch):
    """A compile-only farm builds no launcher; one on the farm's disk (here a real ELF extension
    module standing in for it) is carried, signed, and installed where Triton looks for it."""
    import sys

    from zerojit import triton_compat as tc

    variant = farm["report"].variants[0]
    key = tc.launcher_key(tuple(tc.source_of(variant.compiled)[1].values()))
    if key is None:
        pytest.skip(f"Triton {tc.TRITON_VERSION} builds no launcher modules (3.7 and later)")
    so = min((f for m in list(sys.modules.values()) if (f := getattr(m, "__file__", None) or "").endswith(".so")),
             key=os.path.getsize)  # a loaded extension module: a real ELF shared object
    data = open(so, "rb").read()
    monkeypatch.setattr(knobs.cache, "dir", str(farm["farm_cache"]))
    tc.cache_manager(key).put(data, tc.launcher_file(), binary=True)
    e = fe.entry_of_variant(variant, farm["build"])
    assert e.launcher == (key, data) and f"launcher/{key}" in e.digests()
    value = fe.encode(e, farm["key"])
    monkeypatch.setattr(knobs.cache, "dir", str(node_cache))
    tampered = value[:-1] + bytes([value[-1] ^ 0xFF])  # the launcher comes last
    with pytest.raises(fe.EntryRefused, match=f"launcher/{key} does not match its SHA-256"):
        fe.decode(tampered, e.address, farm["build"], farm["keys"])
    assert fe.install([fe.decode(value, e.address, farm["build"], farm["keys"])]) == [e.name]
    assert open(tc.cache_manager(key).get_file(tc.launcher_file()), "rb").read() == data


def _forget_generic() -> None:
    from zerojit import generic

    generic.forget()
    for fn in scale_add.kernel.__dict__.get("_zerojit_generic", {}).values():
        fn.device_caches.clear()


def test_generic_variants_are_named_ahead_pulled_and_loaded(farm, flush, node_cache, monkeypatch, tmp_path):
    """A warm-up with generic variants (registry.warmup's default): their jobs are made after the
    keys compile, yet their entries are named before anything compiles (from the keys' names and
    specializations seen at Triton's hook), equal to the farm's, and a node that pulls them
    compiles nothing, generic variants included."""
    from zerojit.fleet.needs import needed_entry_names

    keys = [next(iter(entries_of([v]))) for v in farm["report"].variants]  # in job order
    with compile_only("cuda:90"), monkeypatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path / "farm-generic"))
        forget()
        _forget_generic()
        report = registry().warmup(progress=False, target="cuda:90", generic=True)
        generic = list(entries_of([v for v in report.generic if v.compiled is not None]))
        assert generic and not set(generic) & set(farm["names"])
        pushed = push_report(open_store(flush), report, farm["key"])
    assert sorted(pushed.stored) == sorted(farm["names"] + generic)
    forget()
    _forget_generic()
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    with compile_only("cuda:90"):
        reg = registry()
        jobs = key_space_jobs(reg)[0]
        assert needed_entry_names(jobs) == keys + generic
        assert needed_entry_names(jobs, generic=False) == keys
        assert events == [] and not node_cache.exists()  # nothing compiled
        result = pull_jobs(open_store(flush), jobs, farm["build"], farm["keys"], generic=True)
        assert (result.installed, result.missing, result.refused) == (keys + generic, [], [])
        node = reg.warmup(progress=False, target="cuda:90", generic=True)
    assert events == [True] * (4 + len(generic))  # every key and generic variant loaded from disk
    assert node.stats.total_compiled == 0 and node.generic_stats.total_compiled == 0
    assert [v.triton_key for v in node.generic] == [v.triton_key for v in report.generic]
    _forget_generic()
