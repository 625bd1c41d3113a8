"""A damaged disk cache is never used (``zerojit.integrity``): each damage is a miss that is
compiled again, named once in the warm-up report, and the result afterwards is what the cold
warm-up compiled (its bytes, read before the damage, are the reference).

Damage: a cubin cut to half, one flipped bit in a cubin, ``"num_warps": 4`` -> ``5`` in a
metadata JSON that stays valid, one bad byte in a ``__grp__`` group file; through the restore
index and through Triton's own lookup (``ZEROJIT_RESTORE=0``); with digests and, for an entry
zerojit sees first (no digest), by the structural checks. Then ``bundle export`` and ``import``,
a runtime compile after the warm-up, the launcher modules (Triton 3.6) and compile workers.
"""

from __future__ import annotations

import errno
import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import glob
import hashlib
import json
import logging
import shutil
import tarfile
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs

from zerojit import cache as zcache
from zerojit import integrity
from zerojit import triton_compat as tc
from zerojit.cache import BundleCorruptError, BundleError, export_bundle, import_bundle, install_entries
from zerojit.compile_only import compile_only
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.monitor import JitMonitor
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import WarmupTensor


@triton.jit
def _scale_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value, mask=offs < n)


class Scale(TritonJitKernel["Scale.CompileKey"]):
    """Two keys (two blocks), so a damaged entry's key is told from a sound one's."""

    kernel = _scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int

    def get_warmup_keys(self) -> list:
        return trace_dispatch(self.CompileKey)(block=choices(32, 64))

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (key.block * 4,)), value=3, n=key.block * 4 - 1, block=key.block)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, out, value: int, n: int, block: int = 32) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(BLOCK=block), returns=out)


@pytest.fixture(autouse=True)
def co():
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    return tmp_path / "cache"


def warm_up(kernel, **kw):
    kernel.kernel.device_caches.clear()  # every warm-up starts as a new process would
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup()
    report = registry.warmup(progress=False, **kw)
    assert report.ok, report.failures
    return report


def files_of(report, i: int) -> dict[str, str]:
    """Key ``i``'s entry files (name -> path) and their bytes now, the group file included."""
    group = dict(report.variants[i].compiled.metadata_group)
    meta = next(n for n in group if n.endswith(".json"))
    group[tc.group_file_name(meta)] = os.path.join(os.path.dirname(group[meta]), tc.group_file_name(meta))
    return group


def snapshot(report) -> list[dict[str, bytes]]:
    return [{n: open(p, "rb").read() for n, p in files_of(report, i).items()} for i in range(len(report.variants))]


def path_of(report, i: int, suffix: str) -> str:
    """Key ``i``'s file ending in ``suffix`` (``"__grp__"``: its group file)."""
    files = files_of(report, i)
    if suffix == "__grp__":
        return next(p for n, p in files.items() if n.startswith("__grp__"))
    return next(p for n, p in files.items() if n.endswith(suffix) and not n.startswith("__grp__"))


def cut_to_half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flip_bit(data: bytes) -> bytes:
    i = len(data) // 2  # inside the code, far from the headers a structural check reads
    return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1:]


def five_warps(data: bytes) -> bytes:
    meta = json.loads(data)
    assert meta["num_warps"] == 4
    out = data.replace(b'"num_warps": 4', b'"num_warps": 5')
    assert out != data and json.loads(out)["num_warps"] == 5  # still valid JSON
    return out


def bad_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + b"\xff" + data[i + 1:]


def nested_too_deep(data: bytes = b"") -> bytes:
    """JSON nested deeper than Python's parser goes: json.loads raises RecursionError, no ValueError."""
    return b"[" * 200000 + b"]" * 200000


DAMAGE = {"cubin cut to half": (".cubin", cut_to_half), "one flipped bit in the cubin": (".cubin", flip_bit),
          "num_warps 4 -> 5": (".json", five_warps), "one bad byte in the group file": ("__grp__", bad_byte),
          "metadata nested too deep": (".json", nested_too_deep),
          "group file nested too deep": ("__grp__", nested_too_deep)}


def damage(report, i: int, how: str) -> str:
    suffix, edit = DAMAGE[how]
    path = path_of(report, i, suffix)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(edit(data))
    return path


def naming(report, path: str) -> list[str]:
    return [line for line in report.stats.recovered if path in line]


def assert_sound_again(kernel, cold, before, damaged_key: int) -> None:
    """The next warm-ups compile nothing, name nothing, and hold the cold warm-up's bytes."""
    again = warm_up(kernel)
    assert again.stats.compiled == 0 and not [line for line in again.stats.recovered if "damaged" in line]
    assert snapshot(again) == before
    assert [v.triton_key for v in again.variants] == [v.triton_key for v in cold.variants]
    assert again.variants[damaged_key].compiled.kernel == before[damaged_key][
        next(n for n in before[damaged_key] if n.endswith(".cubin"))]


@pytest.mark.parametrize("index", ["restore index", "ZEROJIT_RESTORE=0"])
@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_entry_is_compiled_again_and_named_once(cache, monkeypatch, how, index):
    if index == "ZEROJIT_RESTORE=0":
        monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    kernel = Scale()
    cold = warm_up(kernel)
    assert cold.stats.compiled == 2
    before = snapshot(cold)
    path = damage(cold, 1, how)

    warm = warm_up(kernel)
    assert warm.stats.compiled == 1  # that key alone: the other is restored or a disk hit
    assert len(naming(warm, path)) == 1, warm.stats.recovered
    (line,) = naming(warm, path)
    assert line.startswith(f"cache file {path} is damaged (") and "[" not in line.partition(")")[2]
    assert snapshot(warm) == before  # Triton wrote the entry again: the cold warm-up's bytes
    assert warm.variants[1].compiled.kernel == cold.variants[1].compiled.kernel
    assert_sound_again(kernel, cold, before, 1)


@pytest.mark.parametrize("how, why", [("cubin cut to half", "cut short"),
                                      ("num_warps 4 -> 5", "'num_warps' is 5, not a power of two"),
                                      ("metadata nested too deep", "its metadata is not JSON: maximum recursion")])
def test_an_entry_first_seen_with_no_digest_is_checked_by_its_structure(cache, monkeypatch, how, why):
    """An entry plain Triton wrote (no digests beside it): a cubin must be an ELF file whose
    section headers fit in its size; metadata must hold what Triton reads, with sane values."""
    monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    shutil.rmtree(cache / ".zerojit" / "digests", ignore_errors=True)
    path = damage(cold, 0, how)
    warm = warm_up(kernel)
    assert warm.stats.compiled == 1
    (line,) = naming(warm, path)
    assert why in line
    assert snapshot(warm) == before
    for i in range(2):  # digests recorded for every file now: the sound entry's as first seen
        folder = os.path.dirname(path_of(warm, i, ".cubin"))
        with open(cache / ".zerojit" / "digests" / f"{os.path.basename(folder)}.json") as f:
            digests = json.load(f)["files"]
        assert digests == {n: hashlib.sha256(d).hexdigest() for n, d in before[i].items()
                           if not n.startswith("__grp__")}


def test_compile_workers_record_digests_before_the_group_file(cache):
    kernel = Scale()
    cold = warm_up(kernel, workers=2)
    assert cold.stats.worker_compiled == 2
    for i, files in enumerate(snapshot(cold)):
        folder = os.path.dirname(path_of(cold, i, ".cubin"))
        with open(cache / ".zerojit" / "digests" / f"{os.path.basename(folder)}.json") as f:
            assert json.load(f)["files"] == {n: hashlib.sha256(d).hexdigest() for n, d in files.items()
                                             if not n.startswith("__grp__")}


def test_the_report_says_how_many_of_the_asked_workers_started_for_one_damaged_entry(cache):
    """Two workers asked, one damaged cubin: the one key to compile starts one worker, and the
    report's worker line says so beside "1 compiled by 1 worker process" (not just "as asked")."""
    kernel = Scale()
    cold = warm_up(kernel, workers=2)
    assert cold.stats.workers == 2 and cold.stats.worker_choice == "2 workers (as asked)"
    damage(cold, 1, "cubin cut to half")
    warm = warm_up(kernel, workers=2)
    assert (warm.stats.workers, warm.stats.worker_compiled) == (1, 1)
    assert warm.stats.worker_choice == "2 workers (as asked); 1 started: only 1 key to compile"
    summary = warm.summary()
    assert "  1 compiled by 1 worker process, then loaded from the disk cache;" in summary
    assert "  compile workers: 2 workers (as asked); 1 started: only 1 key to compile\n" in summary


def test_bundle_export_never_packs_a_damaged_entry(cache, tmp_path):
    """A damaged IR file (read by no warm start: the restore index loads IR lazily) is found
    when the export reads it: the export refuses, naming it, and writes nothing; the entry is
    dropped, so the next export compiles it afresh and packs the sound bytes."""
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    ptx = damage_ir(cold, 1)
    report = warm_up(kernel)  # a warm start: the PTX is not read
    assert report.stats.restored == 2
    out = tmp_path / "b.tar.gz"
    with pytest.raises(BundleError) as info:
        export_bundle(report, out, target="cuda:90")
    assert f"cache file {ptx} is damaged" in str(info.value) and not out.exists()

    again = warm_up(kernel)
    assert again.stats.compiled == 1
    export_bundle(again, out, target="cuda:90")
    with tarfile.open(out) as tar:
        # by entry folder and name: both keys' files are named after the kernel (the tar's order
        # of entries differs between Triton versions)
        packed = {tuple(m.name.split("/")[-2:]): tar.extractfile(m).read() for m in tar if m.name.endswith(".ptx")}
    entry, name = ptx.split(os.sep)[-2:]
    assert packed[entry, name] == before[1][name]


def damage_ir(report, i: int) -> str:
    path = path_of(report, i, ".ptx")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data.replace(b".reg", b".rag", 1))  # a stray edit, still text
    return path


def test_a_damaged_cubin_is_recompiled_before_bundle_export_packs_it(cache, tmp_path):
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    damage(cold, 0, "cubin cut to half")
    report = warm_up(kernel)  # what `zerojit bundle export` runs first
    out = tmp_path / "b.tar.gz"
    export_bundle(report, out, target="cuda:90")
    assert packed_cubins(out, cold) == [next(d for n, d in files.items() if n.endswith(".cubin")) for files in before]


def packed_cubins(bundle, report) -> list[bytes]:
    """The cubin of each of ``report``'s keys in ``bundle``."""
    with tarfile.open(bundle) as tar:
        packed = {m.name: tar.extractfile(m).read() for m in tar}
    return [packed[f"entries/{os.path.basename(os.path.dirname(p))}/{os.path.basename(p)}"]
            for p in (path_of(report, i, ".cubin") for i in range(len(report.variants)))]


def test_bundle_import_refuses_a_cut_cubin_and_records_the_digests_of_what_it_installs(cache, tmp_path):
    kernel = Scale()
    cold = warm_up(kernel)
    out = tmp_path / "b.tar.gz"
    export_bundle(cold, out, target="cuda:90")
    fresh = tmp_path / "fresh"

    # exported damaged (by a zerojit before digests): its SHA-256 sums agree with the cut cubin
    files = zcache.pack_entries(zcache.entries_of(cold.variants))
    entry, names = next((e, n) for e, n in files.items() if any(k.endswith(".cubin") for k in n))
    cubin = next(k for k in names if k.endswith(".cubin"))
    names[cubin] = cut_to_half(names[cubin])
    with pytest.raises(BundleCorruptError, match=f"cache entry {entry}: {cubin} is damaged .*cut short"):
        install_entries(files, str(fresh))
    assert not glob.glob(str(fresh / "[A-Z2-7]*"))  # nothing installed

    result = import_bundle(out, target="cuda:90", into=str(fresh))
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert result.installed
    for e in result.installed:
        with open(fresh / ".zerojit" / "digests" / f"{e}.json") as f:
            recorded = json.load(f)["files"]
        assert recorded == {n: h for n, h in manifest["entries"][e]["files"].items() if not n.startswith("__grp__")}


@pytest.mark.parametrize("mode", ["warn", "off"])
def test_after_warm_up_a_runtime_compile_meeting_a_damaged_group_file_is_a_miss(cache, monkeypatch, mode):
    """Triton's own lookup at run time (no restore index there) reads the group file: Triton 3.6
    raised UnicodeDecodeError from ``json.load`` at the launch."""
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    key = cold.variants[0].key
    path = damage(cold, 0, "one bad byte in the group file")
    kernel.kernel.device_caches.clear()  # the key is gone from the process: its launch looks on disk
    out = torch.empty(key.block * 4, dtype=torch.float32, device="meta")
    if mode == "warn":
        with JitMonitor("warn") as monitor:
            kernel(out=out, value=3, n=key.block * 4 - 1, block=key.block)
            assert monitor.counts().runtime_compiles == 1
    else:
        kernel(out=out, value=3, n=key.block * 4 - 1, block=key.block)
    assert snapshot(cold)[0] == before[0]  # compiled again, the entry whole again
    assert open(path, "rb").read() == before[0][os.path.basename(path)]


def test_a_damaged_launcher_module_is_built_again_and_a_damaged_remembered_copy_is_not_used(cache, caplog):
    """Triton 3.6 caches each signature's C launcher module alone (``__triton_launcher.so``, no
    group file), and zerojit remembers a copy per install. Any ELF file stands in for one here
    (building a real one needs ``libcuda``)."""
    import _ctypes

    with open(_ctypes.__file__, "rb") as f:
        module = f.read()
    warm_up(Scale())  # after a warm-up, Triton's cache checks for the process's lifetime
    key, name = "cd" * 32, zcache.launcher_file()
    manager = tc.cache_manager(key)
    stored = manager.put(module, name, binary=True)
    assert manager.get_file(name) == stored
    zcache.remember_launcher(key)
    kept = zcache.remembered_launcher(key)
    assert open(kept, "rb").read() == module

    with open(stored, "wb") as f:
        f.write(cut_to_half(module))
    caplog.set_level(logging.WARNING, logger="zerojit.integrity")
    assert tc.cache_manager(key).get_file(name) is None  # Triton builds it again
    assert tc.cache_manager(key).get_file(name) is None
    assert [r.getMessage() for r in caplog.records if stored in r.getMessage()] == [
        f"zerojit: cache file {stored} is damaged (its SHA-256 differs from the digest recorded when it was stored); "
        "treated as a miss (compiled again)"]

    with open(kept, "wb") as f:
        f.write(flip_bit(module))
    assert not zcache.install_remembered_launcher(key)  # the caller builds it instead
    assert [r for r in caplog.records if kept in r.getMessage()] and not os.path.exists(kept)
    tc.cache_manager(key).put(module, name, binary=True)  # built again
    zcache.remember_launcher(key)
    assert zcache.install_remembered_launcher(key) and open(kept, "rb").read() == module


# ---------------------------------------------------------------------------------------------
# A damaged digests file, and entry files that are not regular files
# ---------------------------------------------------------------------------------------------


def digests_file(report, i: int) -> str:
    folder = os.path.dirname(path_of(report, i, ".cubin"))
    return os.path.join(os.path.dirname(folder), ".zerojit", "digests", f"{os.path.basename(folder)}.json")


def recorded(report, i: int) -> dict[str, str]:
    with open(digests_file(report, i)) as f:
        return json.load(f)["files"]


def expected_digests(files: dict[str, bytes]) -> dict[str, str]:
    return {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if not n.startswith("__grp__")}


def _empty(path: str) -> None:
    open(path, "wb").close()


def _nested_too_deep(path: str) -> None:
    with open(path, "wb") as f:
        f.write(nested_too_deep())


def _garbage(path: str) -> None:
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 3)


def _unreadable(path: str) -> None:
    os.chmod(path, 0)


def _a_folder(path: str) -> None:
    os.remove(path)
    os.makedirs(os.path.join(path, "inside"))


def _folder_a_file(path: str) -> None:
    folder = os.path.dirname(path)
    shutil.rmtree(folder)
    with open(folder, "w") as f:
        f.write("not a folder")


DIGESTS_DAMAGE = {"emptied": _empty, "garbage bytes": _garbage, "chmod 000": _unreadable, "a folder": _a_folder,
                  "digests/ a plain file": _folder_a_file, "nested too deep": _nested_too_deep}


@pytest.mark.parametrize("index", ["restore index", "ZEROJIT_RESTORE=0"])
@pytest.mark.parametrize("how", list(DIGESTS_DAMAGE))
def test_a_damaged_digests_file_makes_its_entry_a_miss(cache, monkeypatch, how, index):
    """Damaged digests plus one flipped bit in the entry's cubin: the damage is never hidden (by
    falling back to the structural check, which a flipped bit passes) nor made permanent (by
    recording the damaged cubin's digest). With ``digests/`` a plain file every entry's digests
    are lost: both entries are compiled again."""
    if how == "chmod 000" and os.geteuid() == 0:
        pytest.skip("root reads a file of mode 000")
    if index == "ZEROJIT_RESTORE=0":
        monkeypatch.setenv("ZEROJIT_RESTORE", "0")
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    damage(cold, 1, "one flipped bit in the cubin")
    DIGESTS_DAMAGE[how](digests_file(cold, 1))

    warm = warm_up(kernel)
    lost = how == "digests/ a plain file"
    assert warm.stats.compiled == (2 if lost else 1)
    for i in ((0, 1) if lost else (1,)):
        (line,) = naming(warm, digests_file(cold, i))
        assert line.startswith(f"cache file {digests_file(cold, i)} is damaged (")
    assert snapshot(warm) == before  # the cold warm-up's bytes: the flipped bit is gone
    assert [recorded(warm, i) for i in range(2)] == [expected_digests(files) for files in before]
    assert_sound_again(kernel, cold, before, 1)


def test_json_nested_too_deep_is_a_damaged_file_never_a_recursion_error(tmp_path):
    """Python's JSON parser raises RecursionError (no ValueError) for JSON nested past its
    recursion limit: a digests file, metadata or group file like that is damaged, as garbage is."""
    deep = nested_too_deep()
    assert integrity.file_problem("k.json", deep).startswith("its metadata is not JSON: maximum recursion depth")
    with pytest.raises(ValueError, match="nested too deep"):
        tc.parse_group_file(deep)
    folder = tmp_path / "entry"
    folder.mkdir()
    os.makedirs(os.path.dirname(integrity.digest_path(str(folder))))
    with open(integrity.digest_path(str(folder)), "wb") as f:
        f.write(deep)
    with pytest.raises(integrity.DamagedFileError, match="the digests file does not parse: maximum recursion"):
        integrity.digests_of(str(folder))


def test_a_digests_folder_that_cannot_be_written_is_said_once(cache):
    """``.zerojit`` a plain file: no digest can be recorded; the warm-up says so in one line (two
    entries compiled, each recording nothing), and its entries are checked by their structure."""
    os.makedirs(cache)
    with open(cache / ".zerojit", "w") as f:
        f.write("not a folder")
    kernel = Scale()
    cold = warm_up(kernel)
    assert cold.stats.compiled == 2
    folder = str(cache / ".zerojit" / "digests")
    lines = [line for line in cold.stats.recovered if "digests cannot be recorded" in line]
    assert lines == [f"digests cannot be recorded in {folder} (Not a directory); the cache's entries are "
                     "checked by their structure only"]
    before = snapshot(cold)
    damage(cold, 0, "cubin cut to half")  # still caught: by its structure
    warm = warm_up(kernel)
    assert warm.stats.compiled == 1 and snapshot(warm) == before


@pytest.mark.parametrize("node", ["file", "link"])
def test_a_lock_folder_that_is_not_a_folder_is_replaced_by_one(cache, tmp_path, node):
    """``.zerojit-locks`` a plain file (or a link to a file) failed every key with
    "FileExistsError: ... (Triton's cache folder ... cannot be used: point TRITON_CACHE_DIR at a
    writable folder)", though the folder was writable. It holds nothing to keep: it is replaced
    by a folder, as ``digests/`` is (the link itself, never what it points to)."""
    os.makedirs(cache)
    locks = cache / ".zerojit-locks"
    kept = tmp_path / "elsewhere"
    kept.write_text("not zerojit's")
    make = {"file": lambda p: p.write_text("not a folder"), "link": lambda p: p.symlink_to(kept)}
    make[node](locks)
    cold = warm_up(Scale())
    assert cold.ok and cold.stats.compiled == 2, [f.error for f in cold.failures]
    assert locks.is_dir() and not locks.is_symlink() and kept.read_text() == "not zerojit's"


def test_a_lock_folder_that_cannot_be_replaced_is_named_as_not_a_folder(cache, monkeypatch):
    """When what is at ``.zerojit-locks`` cannot be removed, the error names it as not a folder."""
    os.makedirs(cache)
    locks = cache / ".zerojit-locks"
    locks.write_text("not a folder")

    def refused(path, *args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted", path)

    monkeypatch.setattr(zcache.os, "unlink", refused)
    with pytest.raises(NotADirectoryError) as caught:
        zcache.entry_lock_path("ENTRY", str(cache))
    assert str(caught.value) == (f"[Errno {errno.ENOTDIR}] zerojit's lock folder is not a folder and cannot be "
                                 f"replaced by one (Operation not permitted): remove it: '{locks}'")


# Entry files that are not regular files. A FIFO blocks a plain open() forever and /dev/zero reads
# without end, so the warm-up that meets them runs in a process of its own with a deadline (and a
# memory limit); the cold one runs here.

_WARM_UP_ELSEWHERE = """
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # /dev/zero read whole: a MemoryError, not the machine's memory
sys.path.insert(0, sys.argv[1])
from triton import knobs
import test_integrity as t
from zerojit.compile_only import compile_only
knobs.cache.dir = sys.argv[2]
with compile_only("cuda:90"):
    report = t.warm_up(t.Scale())
print(json.dumps({"compiled": report.stats.compiled, "recovered": list(report.stats.recovered)}))
"""


def warm_up_elsewhere(cache, env: dict | None = None) -> dict:
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run([sys.executable, "-c", _WARM_UP_ELSEWHERE, tests, str(cache)], capture_output=True,
                         text=True, timeout=240, env={**os.environ, **(env or {})})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _fifo(path: str) -> None:
    os.remove(path)
    os.mkfifo(path)


def _dev_zero(path: str) -> None:
    os.remove(path)
    os.symlink("/dev/zero", path)


NOT_REGULAR = {"a FIFO cubin": (".cubin", _fifo, "a FIFO"), "a FIFO group file": ("__grp__", _fifo, "a FIFO"),
               "metadata a symbolic link to /dev/zero": (".json", _dev_zero, "a symbolic link"),
               "a folder cubin": (".cubin", _a_folder, "a folder")}


@pytest.mark.parametrize("index", ["restore index", "ZEROJIT_RESTORE=0"])
@pytest.mark.parametrize("how", list(NOT_REGULAR))
def test_an_entry_file_that_is_not_a_regular_file_is_removed_and_compiled_again(cache, how, index):
    """Never opened as a file (a FIFO would block the open, /dev/zero read until memory runs out,
    a folder made Triton's rewrite of the entry fail): the entry is a miss, the node removed (a
    link itself, not /dev/zero), named once, and Triton writes the entry whole again."""
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    suffix, make, what = NOT_REGULAR[how]
    path = path_of(cold, 1, suffix)
    make(path)

    warm = warm_up_elsewhere(cache, {"ZEROJIT_RESTORE": "0"} if index == "ZEROJIT_RESTORE=0" else None)
    assert warm["compiled"] == 1
    assert [line for line in warm["recovered"] if path in line] == [
        f"cache file {path} is damaged ({what}); treated as a miss (compiled again)"]
    assert os.path.isfile(path) and not os.path.islink(path)
    assert snapshot(cold) == before  # the entry whole again: the cold warm-up's bytes
    assert not glob.glob(str(cache / "*" / "tmp.pid_*"))
    assert_sound_again(kernel, cold, before, 1)


def test_a_member_linked_to_a_sound_file_is_removed_and_what_it_points_to_is_kept(cache, tmp_path):
    """Triton writes no symbolic link into an entry: one is damaged even when it points to the very
    bytes Triton wrote. The link goes; the file it points to stays as it was."""
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    path = path_of(cold, 1, ".cubin")
    outside = tmp_path / "kept.cubin"
    shutil.move(path, outside)
    os.symlink(outside, path)
    warm = warm_up(kernel)
    assert warm.stats.compiled == 1
    assert naming(warm, path) == [f"cache file {path} is damaged (a symbolic link); treated as a miss (compiled again)"]
    assert not os.path.islink(path) and snapshot(warm) == before
    assert outside.read_bytes() == before[1][os.path.basename(path)]


def test_a_copied_cache_folder_compiles_its_entries_again_and_never_reads_the_original(cache, monkeypatch, tmp_path):
    """Triton's group files hold absolute paths: in a copy of a warmed cache folder they name the
    original's files. Each such entry is named once, compiled into the copy (its group file then
    lists the copy's own files) and nothing of the original is read or written: no digests beside
    it, its bytes unchanged. The next warm-up of the copy is clean."""
    kernel = Scale()
    cold = warm_up(kernel)
    before = snapshot(cold)
    copy = tmp_path / "copy"
    shutil.copytree(cache, copy, ignore=shutil.ignore_patterns(".zerojit"))
    original = sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*") if p.is_file())
    monkeypatch.setattr(knobs.cache, "dir", str(copy))
    warm = warm_up(kernel)
    assert warm.stats.compiled == 2
    moved = [line for line in warm.stats.recovered if "as a cache folder copied or moved does; to move" in line]
    assert len(moved) == 2 and all(str(cache) in line and str(copy) in line for line in moved), warm.stats.recovered
    for i in range(2):
        assert all(os.path.dirname(p).startswith(str(copy)) for p in files_of(warm, i).values())
    def compiled(snap):  # every file but the group file (it names its own folder)
        return [{n: b for n, b in entry.items() if not n.startswith("__grp__")} for entry in snap]

    assert compiled(snapshot(warm)) == compiled(before)  # what the cold warm-up compiled, byte for byte
    assert sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*") if p.is_file()) == original
    again = warm_up(kernel)
    assert again.stats.compiled == 0 and again.stats.recovered == ()


def test_a_cache_folder_reached_through_a_symbolic_link_is_no_copy(cache, monkeypatch, tmp_path):
    """The group files of a cache warmed through its real path, read through a symbolic link to
    it (or the other way round): the same folder, every key a hit, nothing named."""
    kernel = Scale()
    assert warm_up(kernel).stats.compiled == 2
    link = tmp_path / "link"
    link.symlink_to(cache, target_is_directory=True)
    for index in ("restore index", "ZEROJIT_RESTORE=0"):
        if index == "ZEROJIT_RESTORE=0":
            monkeypatch.setenv("ZEROJIT_RESTORE", "0")
        monkeypatch.setattr(knobs.cache, "dir", str(link))
        warm = warm_up(kernel)
        assert warm.stats.compiled == 0 and warm.stats.recovered == (), (index, warm.stats.recovered)
        monkeypatch.setattr(knobs.cache, "dir", str(cache))
        assert warm_up(kernel).stats.compiled == 0


def test_a_failure_names_the_damaged_file_that_made_its_key_compile(cache, monkeypatch):
    """One cubin cut short, then a cache folder that refuses writes (a read-only mount, simulated
    so that it holds as root): the key's compile fails, and the failure names the damaged file that
    made it compile, not only the refused write."""
    import errno

    from zerojit.reports import WarmupError

    kernel = Scale()
    cold = warm_up(kernel)
    path = damage(cold, 1, "cubin cut to half")
    real_replace = os.replace

    def read_only(src, dst, *args, **kwargs):
        if str(dst).startswith(str(cache)):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", read_only)
    kernel.kernel.device_caches.clear()
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup()
    with pytest.raises(WarmupError) as info:
        registry.warmup(progress=False)
    text = str(info.value)
    assert "Read-only file system" in text
    assert [line for line in text.splitlines() if line.startswith(f"  note: cache file {path} is damaged (")], text
