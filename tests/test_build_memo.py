"""Triton's build key, remembered per cache folder and per Triton install (zerojit.cache).

Triton hashes its whole build (~0.5 s) before its first cache key in every process. zerojit
remembers the value under a stat signature of the files Triton hashes, both in the cache folder
and in Triton's home, so a fresh cache folder on a known install does not hash it again. The tests
stand a counting fake in for ``triton.runtime.cache.triton_key`` (monkeypatch puts the real one
back) and check when it is called and what ``use_fast_triton_key`` returns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import triton
import triton.runtime.cache as tcache
from triton import knobs

from zerojit import cache


def fresh_triton_key(monkeypatch, value: str = "3.6.0-fake-build") -> list:
    """A stand-in for Triton's ``triton_key`` (an lru_cache, like Triton's, not yet called);
    returns the list its calls are counted in."""
    calls: list = []

    @functools.lru_cache(None)
    def triton_key() -> str:
        calls.append(1)
        return value

    monkeypatch.setattr(tcache, "triton_key", triton_key)
    return calls


def where(monkeypatch, tmp_path, cache_name: str, home_name: str = "home") -> None:
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / cache_name))
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / home_name))


def install_memo(tmp_path, home_name: str = "home") -> list:
    return list((tmp_path / home_name / ".triton" / "zerojit").glob("triton-build-*.json"))


def test_a_fresh_cache_folder_on_a_known_install_does_not_hash_the_build(monkeypatch, tmp_path):
    where(monkeypatch, tmp_path, "first")
    calls = fresh_triton_key(monkeypatch)
    assert cache.use_fast_triton_key() == "3.6.0-fake-build" and len(calls) == 1
    assert (tmp_path / "first" / ".zerojit" / "triton-build.json").is_file() and len(install_memo(tmp_path)) == 1

    where(monkeypatch, tmp_path, "second")  # a new, empty cache folder; same install, same home
    calls = fresh_triton_key(monkeypatch, "must-not-be-called")
    assert cache.use_fast_triton_key() == "3.6.0-fake-build" and calls == []
    assert tcache.triton_key() == "3.6.0-fake-build"  # what Triton's compile now sees
    assert (tmp_path / "second" / ".zerojit" / "triton-build.json").is_file()  # copied along


def test_another_home_or_a_changed_build_hashes_again(monkeypatch, tmp_path):
    where(monkeypatch, tmp_path, "first")
    fresh_triton_key(monkeypatch)
    cache.use_fast_triton_key()

    where(monkeypatch, tmp_path, "second", home_name="other-home")
    calls = fresh_triton_key(monkeypatch, "3.6.0-other")
    assert cache.use_fast_triton_key() == "3.6.0-other" and len(calls) == 1

    # Triton reinstalled in place: its files' stat signature changes, both memos are stale
    real = cache._build_stat_signature
    monkeypatch.setattr(cache, "_build_stat_signature", lambda root: "x" + real(root))
    where(monkeypatch, tmp_path, "second")
    calls = fresh_triton_key(monkeypatch, "3.6.0-rebuilt")
    assert cache.use_fast_triton_key() == "3.6.0-rebuilt" and len(calls) == 1


@pytest.mark.parametrize("garbage", ["not json", "[1, 2]", '{"signature": "%s", "values": {"triton_key": 7}}'])
def test_a_garbage_install_memo_is_ignored_and_rewritten(monkeypatch, tmp_path, garbage):
    where(monkeypatch, tmp_path, "first")
    fresh_triton_key(monkeypatch)
    cache.use_fast_triton_key()
    (memo,) = install_memo(tmp_path)
    signature = json.loads(memo.read_text())["signature"]
    memo.write_text(garbage.replace("%s", signature))

    where(monkeypatch, tmp_path, "second")
    calls = fresh_triton_key(monkeypatch, "3.6.0-again")
    assert cache.use_fast_triton_key() == "3.6.0-again" and len(calls) == 1
    body = {"triton_version": triton.__version__, "signature": signature, "values": {"triton_key": "3.6.0-again"}}
    assert json.loads(memo.read_text()) == dict(body, sha256=content_digest(body))


def content_digest(body: dict) -> str:
    """The digest a remembered file records of its other fields: SHA-256 of their canonical JSON."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def edited(path, **fields) -> None:
    """A stray edit of remembered file ``path``: ``fields`` changed, still valid JSON, its
    digest left as it was."""
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, **fields}))


def resealed(path, **fields) -> None:
    """``fields`` changed and the digest recomputed: a file as zerojit would have written it."""
    data = json.loads(path.read_text())
    data.pop("sha256")
    data.update(fields)
    path.write_text(json.dumps(dict(data, sha256=content_digest(data))))


def test_a_stray_edit_of_the_build_memos_is_not_believed_and_named_once(monkeypatch, tmp_path):
    """The tester's case: ``triton_key`` changed in both memos (still valid JSON). Trusted, every
    key would compile again under a made-up build key; now neither is used: the build is hashed
    afresh, both files are written again with the true value, and each is named once."""
    where(monkeypatch, tmp_path, "first")
    fresh_triton_key(monkeypatch)
    cache.use_fast_triton_key()
    folder_memo, (install,) = tmp_path / "first" / ".zerojit" / "triton-build.json", install_memo(tmp_path)
    for memo in (folder_memo, install):
        assert json.loads(memo.read_text())["values"] == {"triton_key": "3.6.0-fake-build"}
        edited(memo, values={"triton_key": "made-up"})
    cache.take_damaged_notes()  # (this process's earlier notes)

    calls = fresh_triton_key(monkeypatch)  # a new process: the same build
    assert cache.use_fast_triton_key() == "3.6.0-fake-build" and len(calls) == 1
    assert tcache.triton_key() == "3.6.0-fake-build"
    for memo in (folder_memo, install):
        data = json.loads(memo.read_text())
        digest = data.pop("sha256")
        assert data["values"] == {"triton_key": "3.6.0-fake-build"} and digest == content_digest(data)
    assert cache.take_damaged_notes() == [
        f"the remembered Triton build key {memo} does not match the digest it records (a stray edit or damage): not "
        "used, the key taken from the other memo, else Triton's build hashed afresh, and the file written again"
        for memo in (folder_memo, install)]

    calls = fresh_triton_key(monkeypatch, "must-not-be-called")  # the rewritten memos serve again
    assert cache.use_fast_triton_key() == "3.6.0-fake-build" and calls == [] and cache.take_damaged_notes() == []


def test_a_warm_up_names_an_edited_build_memo_and_restores_under_the_true_key(monkeypatch, tmp_path,
                                                                             compile_only_target):
    """End to end: after a warm-up, both memos' ``triton_key`` edited; the next warm-up restores
    its key through the restore index (its fingerprint holds the true build), compiles nothing,
    and its report names each memo once."""
    from _kernels import StoreN
    from zerojit.registry import JitWarmupRegistry

    import inspect

    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "home"))
    real = inspect.unwrap(tcache.triton_key)  # Triton's own hash, under a new process's empty lru_cache
    monkeypatch.setattr(tcache, "triton_key", functools.lru_cache(None)(real))
    registry = JitWarmupRegistry()
    with registry.activate():
        StoreN().register_warmup()
    StoreN.kernel.device_caches.clear()
    assert registry.warmup(workers=1, progress=False).ok
    folder_memo, (install,) = tmp_path / "triton-cache" / ".zerojit" / "triton-build.json", install_memo(tmp_path)
    true_key = json.loads(install.read_text())["values"]["triton_key"]
    for memo in (folder_memo, install):
        edited(memo, values={"triton_key": "made-up"})
    cache.take_damaged_notes()

    StoreN.kernel.device_caches.clear()
    monkeypatch.setattr(tcache, "triton_key", functools.lru_cache(None)(real))  # a new process
    report = registry.warmup(workers=1, progress=False)
    assert report.ok and (report.stats.restored, report.stats.compiled) == (1, 0), report.stats
    named = [line for line in report.stats.recovered if "triton-build" in line]
    assert named == [f"the remembered Triton build key {memo} does not match the digest it records (a stray edit or "
                     "damage): not used, the key taken from the other memo, else Triton's build hashed afresh, and "
                     "the file written again" for memo in (folder_memo, install)], report.stats.recovered
    assert not [line for line in report.stats.recovered if "refused" in line], report.stats.recovered
    assert json.loads(install.read_text())["values"]["triton_key"] == true_key


def test_a_stray_edit_of_the_compile_seconds_is_not_believed(monkeypatch, tmp_path):
    """The remembered compile seconds decide the order of a warm-up's compiles and each one's
    wall-time limit (10x them): an edited figure (still valid JSON) is not believed; the file is
    named once and removed, then written afresh."""
    where(monkeypatch, tmp_path, "first")
    cache.remember_compile_seconds({"entry-a": 0.5, "entry-b": 1.25})
    assert cache.remembered_compile_seconds() == {"entry-a": 0.5, "entry-b": 1.25}
    (memo,) = (tmp_path / "home" / ".triton" / "zerojit").glob("compile-seconds-*.json")
    resealed(memo, seconds={"entry-a": 0.5, "entry-b": 2.5})  # as zerojit writes it: believed
    assert cache.remembered_compile_seconds() == {"entry-a": 0.5, "entry-b": 2.5}
    edited(memo, seconds={"entry-a": 0.5, "entry-b": 100000.0})
    cache.take_damaged_notes()
    assert cache.remembered_compile_seconds() == {} and not memo.exists()
    assert cache.take_damaged_notes() == [
        f"the remembered compile seconds {memo} does not match the digest it records (a stray edit or damage): not "
        "used, compiles ordered and bounded as on a new install"]
    cache.remember_compile_seconds({"entry-c": 0.75})
    assert cache.remembered_compile_seconds() == {"entry-c": 0.75}


def test_a_memo_of_another_triton_version_is_never_used(monkeypatch, tmp_path):
    """The same files' stat signature under another Triton version (a memo carried over, or
    stat values that happen to match): the build is hashed again and the memo rewritten."""
    where(monkeypatch, tmp_path, "first")
    fresh_triton_key(monkeypatch)
    cache.use_fast_triton_key()
    memo_file = tmp_path / "first" / ".zerojit" / "triton-build.json"
    for path in (memo_file, *install_memo(tmp_path)):
        resealed(path, triton_version="3.5.0")  # whole, as a zerojit with that Triton wrote it
    cache.take_damaged_notes()

    calls = fresh_triton_key(monkeypatch, "3.6.0-this-version")
    assert cache.use_fast_triton_key() == "3.6.0-this-version" and len(calls) == 1
    assert json.loads(memo_file.read_text())["triton_version"] == triton.__version__
    assert cache.take_damaged_notes() == []  # not damaged: another version's


def test_the_signature_covers_the_files_triton_hashes():
    """Every file Triton's own ``triton_key`` reads is in the stat signature (compared by listing)."""
    import pkgutil

    root = cache._triton_root()
    hashed = {os.path.join(root, "runtime", "cache.py"), cache._libtriton_path(root)}
    for sub in ("compiler", "backends", "language"):
        for lib in pkgutil.walk_packages([os.path.join(root, sub)], prefix=f"triton.{sub}."):
            hashed.add(lib.module_finder.find_spec(lib.name).origin)
    touched: list = []
    real_stat = os.stat

    def stat(path, *a, **k):
        touched.append(os.path.abspath(path))
        return real_stat(path, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "stat", stat)
        cache._build_stat_signature(root)
    assert hashed <= set(touched), sorted(hashed - set(touched))[:5]


LAUNCHER_KEY = "ab" * 32  # a launcher's cache key: SHA-256 of its source and the platform
LAUNCHER = cache.launcher_file()  # __triton_launcher<EXT_SUFFIX>


def test_a_launcher_built_once_is_copied_into_a_new_cache_folder_on_the_same_install(monkeypatch, tmp_path):
    from triton.runtime.cache import get_cache_manager

    where(monkeypatch, tmp_path, "first")
    assert not cache.install_remembered_launcher(LAUNCHER_KEY)  # nothing remembered yet
    assert get_cache_manager(LAUNCHER_KEY).get_file(LAUNCHER) is None  # and nothing written
    get_cache_manager(LAUNCHER_KEY).put(b"\x7fELF launcher bytes", LAUNCHER, binary=True)  # a worker built it
    cache.remember_launcher(LAUNCHER_KEY)
    kept = cache.remembered_launcher(LAUNCHER_KEY)
    assert kept.startswith(str(tmp_path / "home" / ".triton" / "zerojit" / "launchers-"))

    where(monkeypatch, tmp_path, "second")  # a new, empty cache folder; same install, same home
    assert cache.install_remembered_launcher(LAUNCHER_KEY)
    found = get_cache_manager(LAUNCHER_KEY).get_file(LAUNCHER)  # where Triton's build looks first
    assert found is not None and found.startswith(str(tmp_path / "second"))
    assert open(found, "rb").read() == b"\x7fELF launcher bytes"
    assert not [p for p in os.listdir(os.path.dirname(kept)) if p.endswith(".tmp")]

    where(monkeypatch, tmp_path, "third", home_name="other-home")  # another home remembers nothing
    assert not cache.install_remembered_launcher(LAUNCHER_KEY)


def test_a_launcher_remembered_by_another_triton_version_is_not_used(monkeypatch, tmp_path):
    """Triton upgraded in place (same interpreter, same package folder): another install, whose
    remembered launchers are its own (Triton 3.6 builds launcher modules; 3.7 and later none)."""
    from triton.runtime.cache import get_cache_manager

    from zerojit import triton_compat

    where(monkeypatch, tmp_path, "first")
    get_cache_manager(LAUNCHER_KEY).put(b"\x7fELF launcher bytes", LAUNCHER, binary=True)
    cache.remember_launcher(LAUNCHER_KEY)
    assert os.path.isfile(cache.remembered_launcher(LAUNCHER_KEY))
    monkeypatch.setattr(triton_compat, "TRITON_VERSION", "3.5.0")
    where(monkeypatch, tmp_path, "second")
    assert not cache.install_remembered_launcher(LAUNCHER_KEY)
    assert get_cache_manager(LAUNCHER_KEY).get_file(LAUNCHER) is None


def test_remembering_a_launcher_where_the_home_cannot_be_written_is_no_error(monkeypatch, tmp_path):
    from triton.runtime.cache import get_cache_manager

    where(monkeypatch, tmp_path, "first", home_name="home-is-a-file")
    (tmp_path / "home-is-a-file").write_text("")
    get_cache_manager(LAUNCHER_KEY).put(b"x", LAUNCHER, binary=True)
    cache.remember_launcher(LAUNCHER_KEY)
    assert not cache.install_remembered_launcher(LAUNCHER_KEY)


def test_the_install_memo_is_shared_by_every_name_of_the_interpreter(tmp_path):
    """``python`` and ``python3`` of one environment are one install: the second name finds the
    build hash the first remembered (each in its own new cache folder, so only the install's
    memo can tell it)."""
    import subprocess
    import sys
    from pathlib import Path

    folder = os.path.dirname(sys.executable)
    names = [os.path.join(folder, n) for n in ("python", "python3") if os.path.exists(os.path.join(folder, n))]
    if len(names) < 2 or len({os.path.realpath(n) for n in names}) != 1:
        pytest.skip("this environment has no second name for its interpreter")
    src = str(Path(cache.__file__).resolve().parents[1])
    code = ("import triton.runtime.cache as t; from zerojit.cache import use_fast_triton_key; use_fast_triton_key(); "
            "print(getattr(t.triton_key, '_zerojit_memo', False))")
    remembered = []
    for i, exe in enumerate(names):
        env = dict(os.environ, PYTHONPATH=src, TRITON_HOME=str(tmp_path / "home"), TRITON_CACHE_DIR=str(tmp_path / f"c{i}"))
        proc = subprocess.run([exe, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        remembered.append(proc.stdout.strip().splitlines()[-1])
    assert remembered == ["False", "True"] and len(install_memo(tmp_path)) == 1


_READ_MEMOS = """
import json
from zerojit import cache
key = cache.use_fast_triton_key()
seconds = cache.remembered_compile_seconds()
cache.remember_compile_seconds({"entry-b": 2.0})
print(json.dumps({"key": key, "seconds": seconds, "notes": cache.take_damaged_notes()}))
"""


@pytest.mark.parametrize("node", ["fifo", "folder", "link"])
def test_a_memo_path_that_is_no_regular_file_is_never_waited_on_and_is_replaced(tmp_path, node):
    """A FIFO at the build memo's path (or the compile seconds') hung every warm-up for ever (a
    plain ``open``); a link was followed (to ``/dev/zero``: read until memory ran out; not run
    here); a folder there could never be written again. Each is not a regular file: named once,
    not used, and replaced (the node itself, never what a link points to) by the file written
    again. In a child process with a deadline, so a regression fails instead of hanging."""
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(cache.__file__).resolve().parents[1]),
               TRITON_HOME=str(tmp_path / "home"), TRITON_CACHE_DIR=str(tmp_path / "cache"))

    def run() -> dict:
        proc = subprocess.run([sys.executable, "-c", _READ_MEMOS], env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.splitlines()[-1])

    cold = run()
    memo = tmp_path / "cache" / ".zerojit" / "triton-build.json"
    (seconds,) = (tmp_path / "home" / ".triton" / "zerojit").glob("compile-seconds-*.json")
    kept = tmp_path / "elsewhere.json"
    kept.write_text("not zerojit's")
    what = {"fifo": "a FIFO", "folder": "a folder", "link": "a symbolic link"}[node]
    for path in (memo, seconds):
        path.unlink()
        {"fifo": os.mkfifo, "folder": os.mkdir, "link": lambda p: os.symlink(kept, p)}[node](path)
    damaged = run()
    assert damaged["key"] == cold["key"] and damaged["seconds"] == {}
    assert damaged["notes"] == [
        f"the remembered Triton build key {memo} is {what}, not a regular file: not used, the key taken from the "
        "other memo, else Triton's build hashed afresh, and the file written again",
        f"the remembered compile seconds {seconds} is {what}, not a regular file: not used, compiles ordered and "
        "bounded as on a new install"]
    for path in (memo, seconds):
        assert path.is_file() and not path.is_symlink()
    assert kept.read_text() == "not zerojit's"
    again = run()
    assert again == {"key": cold["key"], "seconds": {"entry-b": 2.0}, "notes": []}
