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
    verify_bundle,
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
        report = registry().warmup(progress=False, target="cuda:90", generic=False)
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
        report = registry().warmup(bundle=path, progress=False, target="cuda:90", generic=False)
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


def test_importing_repairs_an_entry_whose_cubin_was_altered_in_the_cache(bundle, fresh_cache):
    import_bundle(bundle[0], target="cuda:90")
    entry = next(e for e in cache_contents(fresh_cache) if any(f.endswith(".cubin") for f in os.listdir(fresh_cache / e)))
    cubin = next(fresh_cache / entry / f for f in os.listdir(fresh_cache / entry) if f.endswith(".cubin"))
    good = cubin.read_bytes()
    cubin.write_bytes(good[:-16] + b"\0" * 16)  # damaged in place: every file still there
    again = import_bundle(bundle[0], target="cuda:90")
    assert again.installed == (entry,) and len(again.present) == 4
    assert cubin.read_bytes() == good


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


@pytest.mark.parametrize("how", ["another build", "a corrupted cubin"])
def test_a_refused_import_leaves_the_disk_as_it_was(bundle, fresh_cache, tmp_path, monkeypatch, how):
    """No cache folder and no build memo (``.zerojit/triton-build.json`` there, or in Triton's
    home) is made by a refused import, through the CLI (with and without --cache-dir) as through
    import_bundle; an accepted one writes the memos (they were held back, not lost)."""
    from typer.testing import CliRunner

    from zerojit.cli import app

    home = tmp_path / "home"
    monkeypatch.setenv("TRITON_HOME", str(home))
    bad = rewrite(bundle[0], tmp_path / "bad.tar.gz", **(
        dict(manifest=lambda m: {**m, "triton_build": "0" * 64}) if how == "another build"
        else dict(member=(".cubin", lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:]))))
    for flags in ([], ["--cache-dir", str(tmp_path / "other")]):
        result = CliRunner().invoke(app, ["bundle", "import", str(bad), "--target", "cuda:90", *flags])
        assert result.exit_code == 1, (result.output, result.exception)
        assert [p for p in (fresh_cache, tmp_path / "other", home) if p.exists()] == []
    with pytest.raises(BundleMismatchError if how == "another build" else BundleCorruptError):
        import_bundle(bad, target="cuda:90")
    assert [p for p in (fresh_cache, home) if p.exists()] == []
    assert len(import_bundle(bundle[0], target="cuda:90").installed) == 5
    assert (fresh_cache / ".zerojit" / "triton-build.json").is_file()
    assert [p.name for p in (home / ".triton" / "zerojit").iterdir() if p.name.startswith("triton-build-")]


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


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_with_no_gpu_an_import_needs_the_target_it_will_serve_on(bundle, fresh_cache):
    """No GPU and no compile-only block: nothing to check the bundle's target against, so the
    caller must say it (a check against the bundle's own manifest would always pass)."""
    from typer.testing import CliRunner

    from zerojit.cli import app
    from zerojit.registry import NoTargetError

    with pytest.raises(NoTargetError) as info:
        import_bundle(bundle[0])
    assert str(info.value) == (
        f"bundle {bundle[0]} is for cuda:90, and this machine has no GPU and no compile-only target to check that "
        "against: pass the target it will serve on (--target cuda:90, import_bundle(target='cuda:90')); nothing was "
        "installed")
    result = CliRunner().invoke(app, ["bundle", "import", str(bundle[0])])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [f"zerojit bundle import: {info.value}"]
    assert cache_contents(fresh_cache) == []
    done = import_bundle(bundle[0], target="cuda:90")
    assert done.summary().startswith("imported 5 cache entries (0 already present) for 4 keys of 1 kernel "
                                     "(target cuda:90) into ")


def test_a_bundle_repacked_with_plain_tar_is_refused_saying_what_a_bundle_holds(bundle, fresh_cache, tmp_path):
    from typer.testing import CliRunner

    from zerojit.cli import app

    unpacked = tmp_path / "unpacked"
    with tarfile.open(bundle[0]) as tar:
        tar.extractall(unpacked, filter="data")
    layout = ("a bundle holds manifest.json first, then only files named entries/<entry>/<file> (no folder members, "
              "no './' prefix), as zerojit bundle export writes it; a bundle repacked with plain tar adds folder "
              "members: repack it with `tar -czf BUNDLE manifest.json entries/*/*` from the unpacked folder")
    plain, dotted, fixed = (tmp_path / f"{n}.tar.gz" for n in ("plain", "dotted", "fixed"))
    subprocess.run(["tar", "-czf", str(plain), "manifest.json", "entries"], cwd=unpacked, check=True)
    subprocess.run(["tar", "-czf", str(dotted), "."], cwd=unpacked, check=True)
    with pytest.raises(BundleCorruptError) as info:
        import_bundle(plain, target="cuda:90")
    assert str(info.value) == f"bundle {plain}: unexpected folder 'entries'; {layout}; nothing was installed"
    with pytest.raises(BundleCorruptError) as info:
        import_bundle(dotted, target="cuda:90")
    assert str(info.value) == f"bundle {dotted} starts with folder '.', not the file manifest.json: {layout}"
    result = CliRunner().invoke(app, ["bundle", "import", str(plain), "--target", "cuda:90"])
    assert result.exit_code == 1 and "unexpected folder 'entries'" in result.output
    assert cache_contents(fresh_cache) == []
    # the repack the message gives is a bundle again
    subprocess.run(f"tar -czf {fixed} manifest.json entries/*/*", shell=True, cwd=unpacked, check=True)
    assert len(import_bundle(fixed, target="cuda:90").installed) == 5


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
    # 21 keys' entries, 20 generic variants' and the primer's
    assert "imported 42 cache entries" in zerojit("bundle", "import", str(out), "--target", "cuda:90",
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
        "print(json.dumps({'compiled': events.count(False), 'loaded': events.count(True), 'keys': report.num_keys,\n"
        "                  'generic': report.generic_variants}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=dict(env, TRITON_CACHE_DIR=str(tmp_path / "server")),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"compiled": 0, "loaded": 41, "keys": 21, "generic": 20}


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


def test_export_never_replaces_a_symlink_or_device(bundle, tmp_path):
    from zerojit.outputs import OutputError

    link = tmp_path / "link.tar.gz"
    link.symlink_to(tmp_path / "target")
    for path, why in ((link, "is a symbolic link to"), ("/dev/full", "exists and is not a regular file")):
        with pytest.raises(OutputError, match=why):
            export_bundle(bundle[2], path)
    assert os.path.islink(link) and not os.path.isfile("/dev/full")


def damaged(bundle: Path, tmp_path: Path, how: str) -> Path:
    """A copy of ``bundle`` damaged as ``how`` says (a fresh user's list of what got through)."""
    data = bundle.read_bytes()
    out = tmp_path / f"{how}.tar.gz"
    if how.startswith("cut-"):
        out.write_bytes(data[:len(data) - int(how[4:])])
    elif how == "half":
        out.write_bytes(data[:len(data) // 2])
    elif how == "crc":
        out.write_bytes(data[:-8] + bytes([data[-8] ^ 1]) + data[-7:])  # gzip's trailer: CRC-32, then length
    elif how == "appended":
        out.write_bytes(data + b"garbage")
    elif how == "missing":
        rewrite(bundle, out, member=(".ptx", lambda d: None))
    else:  # a member an extraction would follow out of the cache folder
        with tarfile.open(bundle, "r:gz") as tar:
            members = [(m, tar.extractfile(m).read()) for m in tar]
        entry = next(m.name.split("/")[1] for m, _ in members if m.name.startswith("entries/"))
        with tarfile.open(out, "w:gz") as tar:
            for m, d in members:
                tar.addfile(m, io.BytesIO(d))
            if how == "traversal":
                info = tarfile.TarInfo(f"entries/{entry}/../../evil")
                info.size = 4
                tar.addfile(info, io.BytesIO(b"evil"))
            else:
                info = tarfile.TarInfo(f"entries/{entry}/link")
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
    return out


DAMAGES = ["cut-1", "cut-8", "cut-30", "half", "crc", "appended", "missing", "traversal", "symlink"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_bundle_is_refused_by_import_and_inspect(bundle, fresh_cache, tmp_path, how):
    from zerojit.cli import app
    from typer.testing import CliRunner

    path = damaged(bundle[0], tmp_path, how)
    with pytest.raises(BundleCorruptError) as info:
        import_bundle(path, target="cuda:90")
    assert str(info.value).endswith("nothing was installed")
    assert cache_contents(fresh_cache) == []
    with pytest.raises(BundleCorruptError):
        verify_bundle(path)
    for command in (["import", "--target", "cuda:90"], ["inspect"]):
        result = CliRunner().invoke(app, ["bundle", command[0], str(path), *command[1:]])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert cache_contents(fresh_cache) == []
    assert verify_bundle(bundle[0]) == read_manifest(bundle[0])  # the sound one passes


@pytest.mark.parametrize("command", [["import", "--target", "cuda:90"], ["inspect"]])
def test_unreadable_empty_and_foreign_files_get_one_line_naming_the_file(bundle, tmp_path, monkeypatch, command):
    import builtins

    from typer.testing import CliRunner

    from zerojit import cache
    from zerojit.cli import app

    def cli(path):
        result = CliRunner().invoke(app, ["bundle", command[0], str(path), *command[1:]])
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output and "[" not in lines[0], result.output
        return result.exit_code, lines[0]

    name = f"zerojit bundle {command[0]}: bundle "
    locked = tmp_path / "locked.tar.gz"
    locked.write_bytes(bundle[0].read_bytes())
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: refuse the open as the kernel would
        def no_read(file, *args, **kwargs):
            if str(file) == str(locked):
                raise PermissionError(13, "Permission denied", str(file))
            return builtins.open(file, *args, **kwargs)

        monkeypatch.setattr(cache, "open", no_read, raising=False)
    assert cli(locked) == (2, f"{name}{locked} cannot be read: Permission denied; check its permissions")
    empty = tmp_path / "empty.tar.gz"
    empty.write_bytes(b"")
    assert cli(empty) == (1, f"{name}{empty} is empty (0 bytes), not a zerojit bundle: export it again")
    for data in (os.urandom(4096), b"x" * 1024):
        foreign = tmp_path / "foreign.tar.gz"
        foreign.write_bytes(data.replace(b"\x1f\x8b", b"..")[:4096])
        status, line = cli(foreign)
        assert status == 1 and line.startswith(f"{name}{foreign} is not a zerojit bundle (a gzip tar archive"), line
    gzipped = tmp_path / "gzipped.tar.gz"
    gzipped.write_bytes(__import__("gzip").compress(b"not a tar"))
    assert cli(gzipped)[0] == 1


@pytest.mark.parametrize("edit, needle", [
    (lambda m: {**m, "version": 99}, "its format is version 99, and zerojit"),
    (lambda m: {k: v for k, v in m.items() if k != "target"}, "its manifest lacks the field target (edited by hand?): "
                                                              "export it again"),
    (lambda m: {**m, "format": "other"}, 'not a zerojit bundle: its manifest.json has no "format"'),
    # fields of the wrong type: refused before anything is installed, not a traceback after
    (lambda m: {**m, "kernels": [1]}, "its manifest's field 'kernels' is no object (edited by hand?): export it again"),
    (lambda m: {**m, "entries": "x"}, "its manifest's field 'entries' is no object"),
    (lambda m: {**m, "kernels": {"k": 1}}, "its manifest's kernel 'k' is no {\"function\": str, \"keys\": list}"),
    (lambda m: {**m, "entries": {e: {"kernel": v["kernel"]} for e, v in m["entries"].items()}},
     "its manifest's entry '"),
    (lambda m: {**m, "target": 90}, "its manifest's field 'target' is no string"),
    (lambda m: {**m, "tuning": {"a.json": 1}}, "its manifest's field 'tuning' is no {file: sha256}"),
])
def test_a_bad_manifest_is_refused_naming_the_file_and_what_to_do(bundle, tmp_path, edit, needle):
    path = rewrite(bundle[0], tmp_path / "edited.tar.gz", manifest=edit)
    for call in (read_manifest, verify_bundle, lambda p: import_bundle(p, target="cuda:90")):
        with pytest.raises(BundleCorruptError) as info:
            call(path)
        assert str(info.value).startswith(f"bundle {path}: {needle}") and "[" not in str(info.value), info.value


def test_bundle_import_refuses_an_empty_cache_dir_flag(bundle, fresh_cache):
    from typer.testing import CliRunner

    from zerojit.cli import app

    result = CliRunner().invoke(app, ["bundle", "import", str(bundle[0]), "--target", "cuda:90", "--cache-dir", ""])
    assert result.exit_code == 2 and result.output.strip() == (
        "zerojit bundle import: --cache-dir '': the folder is empty; give a folder, or leave the flag out to "
        "install into TRITON_CACHE_DIR"), result.output
    assert cache_contents(fresh_cache) == []


def test_a_file_packed_twice_is_refused(bundle, fresh_cache, tmp_path):
    with tarfile.open(bundle[0], "r:gz") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    twice = next(name for name, _ in members if name.startswith("entries/"))
    path = tmp_path / "twice.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members + [(twice, next(d for n, d in members if n == twice))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BundleCorruptError, match=re.escape(f"bundle {path}: {twice!r} is in it twice; ")):
        import_bundle(path, target="cuda:90")
    assert cache_contents(fresh_cache) == []
