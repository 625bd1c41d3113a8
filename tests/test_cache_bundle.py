"""Cache bundles: export a warmed key space, import it elsewhere, warm up with zero compiles.

Compiles are counted by Triton's own compilation listener (``cache_hit`` False = compiled, True =
loaded from the disk cache). Refusals are checked to leave the cache folder untouched.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import io
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from triton import knobs

from zerojit.cache import (
    BundleCacheDirError,
    BundleCorruptError,
    BundleError,
    BundleMismatchError,
    export_bundle,
    import_bundle,
    read_manifest,
)
from zerojit.compile_only import compile_only
from zerojit.examples.scale_add import scale_add
from zerojit.registry import JitWarmupRegistry

ENTRY = re.compile(r"^[A-Z2-7]+$")
SRC = str(Path(__file__).resolve().parents[1] / "src")


def registry() -> JitWarmupRegistry:
    reg = JitWarmupRegistry()
    with reg.activate():
        scale_add.register_warmup(periods=(16, 7), aligned=(True, False))
    return reg


def forget() -> None:
    scale_add.kernel.device_caches.clear()


def cache_contents(folder) -> list[str]:
    """What an import may have left: entry folders and staging folders (locks and memos aside)."""
    if not os.path.isdir(folder):
        return []
    return sorted(e for e in os.listdir(folder) if ENTRY.match(e) or e.startswith(".zerojit-import-"))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A bundle of the example kernel's 4 keys, built under compile-only cuda:90."""
    root = tmp_path_factory.mktemp("bundle")
    with pytest.MonkeyPatch.context() as mp, compile_only("cuda:90"):
        mp.setattr(knobs.cache, "dir", str(root / "builder-cache"))
        forget()
        report = registry().warmup(progress=False, target="cuda:90")
        path = root / "scale_add.tar.gz"
        manifest = export_bundle(report, path)
    return path, manifest, report


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    folder = tmp_path / "importer-cache"
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    forget()
    return folder


def test_manifest_names_build_python_target_kernels_and_keys(bundle):
    path, manifest, report = bundle
    read = read_manifest(path)
    assert read == manifest
    assert read.target == "cuda:90" and read.python.startswith(f"{sys.implementation.name}-3.")
    assert read.triton_version == __import__("triton").__version__ and len(read.triton_build) == 64
    assert list(read.kernels) == ["scale_add"] and read.num_keys == 4
    assert read.kernels["scale_add"]["keys"][0] == {"period_class": 16, "block": 256, "x_aligned": True}
    assert read.kernels["scale_add"]["function"].endswith("scale_add._scale_add_kernel")
    assert len(read.entries) == 5 and all(len(e["files"]) >= 3 for e in read.entries.values())
    assert sorted(e["kernel"] for e in read.entries.values()) == ["primer"] + ["scale_add"] * 4  # + the primer


def test_import_then_warm_up_compiles_nothing(bundle, fresh_cache, monkeypatch):
    path, manifest, built = bundle
    events = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda *, cache_hit, **_: events.append(cache_hit))
    with compile_only("cuda:90"):
        report = registry().warmup(bundle=path, progress=False, target="cuda:90")
    assert events == [True] * 4  # Triton's listener: four disk loads, no compile
    s = report.stats
    assert (s.total_compiled, s.disk_loads, s.bundle_entries) == (0, 4, 5)
    assert [(v.key, v.triton_key) for v in report.variants] == [(v.key, v.triton_key) for v in built.variants]
    for entry in cache_contents(fresh_cache):  # group files point into this cache folder
        group = next(f for f in os.listdir(fresh_cache / entry) if f.startswith("__grp__"))
        paths = json.loads((fresh_cache / entry / group).read_text())["child_paths"].values()
        assert all(p.startswith(str(fresh_cache / entry)) and os.path.isfile(p) for p in paths)


def test_importing_twice_keeps_what_is_there(bundle, fresh_cache):
    first = import_bundle(bundle[0], target="cuda:90")
    again = import_bundle(bundle[0], target="cuda:90")
    assert len(first.installed) == 5 and again.installed == () and len(again.present) == 5


# --- refusals -----------------------------------------------------------------------------------


def rewrite(src: Path, dst: Path, *, manifest=None, member=None) -> Path:
    """Copy a bundle, editing its manifest dict and/or one entry file's bytes."""
    with tarfile.open(src, "r:gz") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in members:
            if name == "manifest.json" and manifest is not None:
                data = json.dumps(manifest(json.loads(data))).encode()
            elif member is not None and name.endswith(member[0]):
                data = member[1](data)
                member = None  # only the first match
            if data is None:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dst


@pytest.mark.parametrize("field, value", [
    ("triton_version", "3.5.0"),
    ("triton_build", "0" * 64),
    ("python", "cpython-3.99"),
    ("target", "cuda:80"),
])
def test_a_bundle_for_another_build_python_or_target_is_refused(bundle, fresh_cache, tmp_path, field, value):
    bad = rewrite(bundle[0], tmp_path / "bad.tar.gz", manifest=lambda m: {**m, field: value})
    with pytest.raises(BundleMismatchError) as info:
        import_bundle(bad, target="cuda:90")
    assert info.value.field == field and repr(value) in str(info.value) and "Nothing was installed" in str(info.value)
    assert f"refused: field {field!r} differs" in str(info.value)  # a bundle of another Triton names triton_version
    assert cache_contents(fresh_cache) == []


def test_the_target_is_the_one_compiled_for(bundle, fresh_cache):
    with compile_only("cuda:80"):
        with pytest.raises(BundleMismatchError) as info:
            registry().warmup(bundle=bundle[0], progress=False, target="cuda:80")
    assert info.value.field == "target" and "'cuda:90'" in str(info.value) and "'cuda:80'" in str(info.value)
    assert cache_contents(fresh_cache) == []


def test_a_truncated_archive_is_refused(bundle, fresh_cache, tmp_path):
    data = bundle[0].read_bytes()
    for cut in (len(data) // 2, len(data) - 100):
        short = tmp_path / f"short-{cut}.tar.gz"
        short.write_bytes(data[:cut])
        with pytest.raises(BundleCorruptError, match="truncated|corrupted"):
            import_bundle(short, target="cuda:90")
        assert cache_contents(fresh_cache) == []


def test_a_corrupted_file_is_refused(bundle, fresh_cache, tmp_path):
    flipped = rewrite(bundle[0], tmp_path / "flip.tar.gz", member=(".cubin", lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:]))
    with pytest.raises(BundleCorruptError, match="SHA-256"):
        import_bundle(flipped, target="cuda:90")
    dropped = rewrite(bundle[0], tmp_path / "drop.tar.gz", member=(".ptx", lambda d: None))
    with pytest.raises(BundleCorruptError, match="missing"):
        import_bundle(dropped, target="cuda:90")
    raw = bytearray(bundle[0].read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # damage the compressed stream itself
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(bytes(raw))
    with pytest.raises(BundleCorruptError):
        import_bundle(damaged, target="cuda:90")
    assert cache_contents(fresh_cache) == []


def test_not_a_bundle(tmp_path, fresh_cache):
    with pytest.raises(BundleError, match="does not exist"):
        import_bundle(tmp_path / "nope.tar.gz")
    with pytest.raises(BundleError, match="is a directory, not a bundle archive"):
        import_bundle(tmp_path)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive at all")
    with pytest.raises(BundleCorruptError):
        import_bundle(junk)
    assert cache_contents(fresh_cache) == []


def test_a_bundle_that_is_not_a_path_is_a_type_error_naming_the_argument(fresh_cache):
    for call in (lambda: registry().warmup(bundle=123, progress=False), lambda: import_bundle(123),
                 lambda: read_manifest(None)):
        with compile_only("cuda:90"), pytest.raises(TypeError, match=r"bundle=(123|None): a bundle is the path of "
                                                                     r"a bundle archive \(str or os.PathLike\), "
                                                                     r"not (int|NoneType)"):
            call()
    assert cache_contents(fresh_cache) == []


@pytest.mark.parametrize("how", ["import_bundle", "warmup"])
def test_a_target_mismatch_under_compile_only_says_so_not_this_machine(bundle, fresh_cache, how):
    with compile_only("cuda:80"), pytest.raises(BundleMismatchError) as info:
        if how == "import_bundle":
            import_bundle(bundle[0])  # the target: the compile-only block's
        else:
            registry().warmup(bundle=bundle[0], progress=False, target="cuda:80")
    text = str(info.value)
    assert info.value.field == "target" and "bundle has 'cuda:90'" in text
    assert "this process compiles for 'cuda:80' (compile-only)" in text and "compile_only('cuda:90')" in text
    assert "this machine" not in text and "this GPU" not in text and "--target) is" not in text
    assert cache_contents(fresh_cache) == []


# --- a cache folder that cannot be written -------------------------------------------------------


def test_an_empty_cache_folder_setting_is_refused_saying_so(bundle, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an empty folder name must not mean the working directory
    monkeypatch.setattr(knobs.cache, "dir", "")
    with pytest.raises(BundleCacheDirError, match=r"cache folder '' is empty \(TRITON_CACHE_DIR=''\): point"):
        import_bundle(bundle[0], target="cuda:90")
    assert list(tmp_path.iterdir()) == []


def test_a_cache_folder_that_is_a_file_is_refused_naming_it(bundle, fresh_cache, tmp_path, monkeypatch):
    place = tmp_path / "place"  # nothing but the file, so nothing staged beside it goes unseen
    place.mkdir()
    blocker = place / "not-a-folder"
    blocker.write_text("a file, not a cache folder")
    with pytest.raises(BundleCacheDirError) as info:
        import_bundle(bundle[0], target="cuda:90", into=str(blocker))
    text = str(info.value)
    assert f"cache folder '{blocker}' is a file, not a folder" in text and info.value.cache_dir == str(blocker)
    assert "point TRITON_CACHE_DIR (or --cache-dir" in text and "writable folder" in text
    assert "nothing was installed" in text
    monkeypatch.setattr(knobs.cache, "dir", str(blocker))  # TRITON_CACHE_DIR, through warmup(bundle=...)
    with compile_only("cuda:90"), pytest.raises(BundleError, match=f"cache folder '{re.escape(str(blocker))}' is a file"):
        registry().warmup(bundle=bundle[0], progress=False, target="cuda:90")
    assert blocker.read_text() == "a file, not a cache folder" and os.listdir(place) == ["not-a-folder"]


def test_bundle_import_into_a_file_exits_2_with_one_line(bundle, tmp_path):
    from typer.testing import CliRunner

    from zerojit.cli import app

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    result = CliRunner().invoke(app, ["bundle", "import", str(bundle[0]), "--target", "cuda:90",
                                      "--cache-dir", str(blocker)])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.strip().splitlines() == [
        f"zerojit bundle import: cache folder '{blocker}' is a file, not a folder: point TRITON_CACHE_DIR (or "
        "--cache-dir, import_bundle(into=...)) at a writable folder; nothing was installed"]
    assert blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_a_read_only_cache_folder_is_refused_naming_it(bundle, fresh_cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from zerojit.cli import app

    ro = tmp_path / "ro_empty"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(BundleCacheDirError) as info:
            import_bundle(bundle[0], target="cuda:90", into=str(ro))
        assert f"cache folder '{ro}' is not writable (permission denied)" in str(info.value)
        assert "point TRITON_CACHE_DIR" in str(info.value) and "nothing was installed" in str(info.value)
        monkeypatch.setattr(knobs.cache, "dir", str(ro))  # TRITON_CACHE_DIR, through warmup(bundle=...)
        with compile_only("cuda:90"), pytest.raises(BundleError, match=f"cache folder '{re.escape(str(ro))}' is not"):
            registry().warmup(bundle=bundle[0], progress=False, target="cuda:90")
        result = CliRunner().invoke(app, ["bundle", "import", str(bundle[0]), "--target", "cuda:90",
                                          "--cache-dir", str(ro)])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert f"cache folder '{ro}' is not writable" in result.output and "Traceback" not in result.output
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_a_cache_folder_that_refuses_the_staging_folder_is_left_untouched(bundle, fresh_cache, monkeypatch):
    """What a read-only folder does to a non-root user, simulated (so it also runs as root)."""
    import tempfile

    def refuse(*args, dir=None, **kwargs):
        raise PermissionError(13, "Permission denied", os.path.join(dir, ".zerojit-import-x"))

    fresh_cache.mkdir()
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(BundleCacheDirError, match=f"cache folder '{re.escape(str(fresh_cache))}' is not writable "
                                                  r"\(permission denied\): point TRITON_CACHE_DIR"):
        import_bundle(bundle[0], target="cuda:90")
    assert cache_contents(fresh_cache) == []  # no entry, no staging folder


@pytest.mark.parametrize("target, needle", [
    ("foo", "--target 'foo' is not of the form 'cuda:90' (a compute capability) or 'hip:gfx942' (an AMD gfx arch); "
            "supported: cuda:70"),
    ("cuda:999", "--target 'cuda:999': Triton"),
])
def test_bundle_import_checks_its_target_first(bundle, tmp_path, target, needle):
    from typer.testing import CliRunner

    from zerojit.cli import app

    cache = tmp_path / "cache"
    result = CliRunner().invoke(app, ["bundle", "import", str(bundle[0]), "--target", target,
                                      "--cache-dir", str(cache)])
    assert result.exit_code == 2, (result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zerojit bundle import: ") and needle in lines[0], lines
    assert "cuda:90" in lines[0] and "cuda:120" in lines[0] and "bundle export --target" not in lines[0]
    assert not cache.exists()


# --- the whole story, through the CLI, in separate processes ----------------------------------


def test_built_without_a_gpu_imported_elsewhere_warms_with_zero_compiles(tmp_path):
    """``zerojit bundle export`` with no GPU visible, ``zerojit bundle import`` into another cache,
    then a fresh process's warm-up of the DSv4-like model: zero compiles (Triton's listener)."""
    env = dict(os.environ, PYTHONPATH=SRC, CUDA_VISIBLE_DEVICES="")
    out = tmp_path / "dsv4.tar.gz"

    def zerojit(*args, cache):
        proc = subprocess.run([sys.executable, "-m", "zerojit", *args], env=dict(env, TRITON_CACHE_DIR=str(cache)),
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    printed = zerojit("bundle", "export", "--config", "dsv4-like", "--target", "cuda:90", "-o", str(out),
                      "--workers", "2", "--no-progress", cache=tmp_path / "builder")
    assert "21 keys" in printed and out.is_file()
    assert "imported 22 cache entries" in zerojit("bundle", "import", str(out), "--target", "cuda:90",
                                                   cache=tmp_path / "server")
    script = (
        "import json\n"
        "from triton import knobs\n"
        "from zerojit.runner.model import register_model\n"
        "from zerojit.compile_only import compile_only\n"
        "from zerojit.runner.config import load_config\n"
        "events = []\n"
        "knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)\n"
        "cfg = load_config('dsv4-like')\n"
        "with compile_only('cuda:90'):\n"
        "    report = register_model(cfg, None).warmup(cfg, progress=False, workers=2, target='cuda:90')\n"
        "print(json.dumps({'compiled': events.count(False), 'loaded': events.count(True), 'keys': report.num_keys}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=dict(env, TRITON_CACHE_DIR=str(tmp_path / "server")),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"compiled": 0, "loaded": 21, "keys": 21}


@pytest.mark.gpu
def test_on_a_gpu_a_bundle_built_with_no_gpu_visible_warms_with_zero_compiles(tmp_path):
    """Build the bundle for this GPU's target in a process that sees no GPU, import it, warm up on
    the GPU in a fresh process: Triton's listener sees zero compiles (the primer included)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    target = f"cuda:{major * 10 + minor}"
    out = tmp_path / "dsv4.tar.gz"
    base = dict(os.environ, PYTHONPATH=SRC)
    built = subprocess.run([sys.executable, "-m", "zerojit", "bundle", "export", "--config", "dsv4-like", "--target",
                            target, "-o", str(out), "--no-progress"], capture_output=True, text=True, timeout=600,
                           env=dict(base, CUDA_VISIBLE_DEVICES="", TRITON_CACHE_DIR=str(tmp_path / "builder")))
    assert built.returncode == 0, built.stderr
    server = dict(base, TRITON_CACHE_DIR=str(tmp_path / "server"))
    imported = subprocess.run([sys.executable, "-m", "zerojit", "bundle", "import", str(out)], capture_output=True,
                              text=True, timeout=600, env=server)
    assert imported.returncode == 0 and "target not checked" not in imported.stdout, imported.stderr
    script = (
        "import json\n"
        "from triton import knobs\n"
        "from zerojit.runner.model import register_model\n"
        "from zerojit.runner.config import load_config\n"
        "events = []\n"
        "knobs.compilation.listener = lambda *, cache_hit, **_: events.append(cache_hit)\n"
        "cfg = load_config('dsv4-like')\n"
        "report = register_model(cfg, None).warmup(cfg, progress=False, workers=4)\n"
        "print(json.dumps({'compiled': events.count(False), 'keys': report.num_keys,\n"
        "                  'loaded': all(v.loaded for v in report.variants)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=server, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"compiled": 0, "keys": 21, "loaded": True}
