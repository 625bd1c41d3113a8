"""A damaged restore index is never a failed warm-up, and never runs code (issue 28, section 1).

The index (``<cache>/.zerojit/restore-*.json``) is JSON behind a header line holding its body's
SHA-256. Whatever happens to the file (a flipped bit anywhere, a cut, random bytes, a body that
parses but breaks the schema), the warm-up falls back to Triton's own lookup for every key (the
counts say so), says so in exactly one ``recovered`` line naming the file and what is wrong, and
rewrites the index, which the next warm-up restores from. An index of an older zerojit (pickle)
is never read. A cache folder other users can write to is warned about, once per warm-up.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import enum
import errno
import glob
import hashlib
import json
import pickle
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton import knobs

from zerojit import manifest, restore
from zerojit.compile_only import compile_only
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import WarmupTensor


@triton.jit
def _scaled_fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr, DTYPE: tl.constexpr, NEGATE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = (offs * value).to(DTYPE)
    if NEGATE:
        v = -v
    tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=offs < n)


class ScaledFill(TritonJitKernel["ScaledFill.CompileKey"]):
    """Three keys whose ``ASTSource`` constants hold an int, a ``tl.dtype`` and a bool."""

    kernel = _scaled_fill_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int
        dtype: tl.dtype
        negate: bool

    def get_warmup_keys(self) -> list:
        return [self.CompileKey(32, tl.float16, True), self.CompileKey(64, tl.float32, False),
                self.CompileKey(32, tl.int32, False)]

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (key.block * 4,)), value=3, n=key.block * 4 - 1,
                    block=key.block, dtype=key.dtype, negate=key.negate)

    @kernel_launcher(host_only=("block", "dtype", "negate"))
    def __call__(self, *, out, value: int, n: int, block: int = 32, dtype=tl.float32, negate: bool = False):
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(BLOCK=block, DTYPE=dtype, NEGATE=negate),
                          returns=out)


@triton.jit
def _scale_kernel(out_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(tl.float32) * SCALE, mask=offs < n)


class Scale(TritonJitKernel["Scale.CompileKey"]):
    """Two keys; one has an infinite constexpr (a value JSON cannot carry exactly)."""

    kernel = _scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        scale: float

    def get_warmup_keys(self) -> list:
        return [self.CompileKey(2.5), self.CompileKey(float("inf"))]

    def warmup_inputs(self, key) -> dict:
        return dict(out=WarmupTensor(torch.float32, (32,)), n=32, scale=key.scale)

    @kernel_launcher(host_only=("scale",))
    def __call__(self, *, out, n: int, scale: float):
        return LaunchSpec(grid=(1,), kwargs=dict(SCALE=scale, BLOCK=32), returns=out)


@pytest.fixture(autouse=True)
def co():
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture
def cache(monkeypatch, tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(knobs.cache, "dir", str(folder))
    return folder


def registry_of(*kernels) -> JitWarmupRegistry:
    registry = JitWarmupRegistry()
    with registry.activate():
        for kernel in kernels:
            kernel.register_warmup()
    return registry


def warm(*kernels):
    """A warm-up in a fresh process, as far as Triton's in-process caches go."""
    for kernel in kernels:
        kernel.kernel.device_caches.clear()
    return registry_of(*kernels).warmup(progress=False)


def variants(report):
    return [(v.kernel, v.key, v.triton_key, v.specialization, v.param_names) for v in report.variants]


def the_index(cache: Path) -> str:
    """The one restore index in ``cache`` (whatever its format)."""
    (path,) = [p for p in glob.glob(str(cache / ".zerojit" / "restore-*")) if ".tmp" not in p]
    return path


def read_index(path: str) -> dict:
    """The body of the index at ``path``, its header line checked independently of zerojit's reader."""
    head, body = open(path, "rb").read().split(b"\n", 1)
    assert json.loads(head) == {"format": "zerojit-restore-index", "sha256": hashlib.sha256(body).hexdigest()}
    return json.loads(body)


def write_index(path: str, body) -> None:
    """``body`` as the index at ``path``, with a header whose SHA-256 matches (a schema test)."""
    data = json.dumps(body).encode()
    header = json.dumps({"format": "zerojit-restore-index", "sha256": hashlib.sha256(data).hexdigest()}).encode()
    open(path, "wb").write(header + b"\n" + data)


@pytest.fixture
def warmed(cache):
    """A cold warm-up of ScaledFill's three keys into ``cache``: (kernel, its report, the index)."""
    fill = ScaledFill()
    cold = warm(fill)
    assert cold.ok and cold.stats.compiled == 3 and cold.stats.recovered == ()
    os.chmod(cache / ".zerojit", 0o755)  # whatever the umask: no warning about the folder in these reports
    return fill, cold, the_index(cache)


def falls_back_once_and_is_rewritten(fill, cold, path: str, why: str) -> None:
    """The warm-up over the damaged index at ``path``: every key through Triton's lookup (the
    same variants as the cold one), one report line naming the file and ``why``, the index
    rewritten valid, and the next warm-up restoring every key from it."""
    report = warm(fill)
    s = report.stats
    assert report.ok and (s.restored, s.disk_loads, s.compiled) == (0, 3, 0)
    assert variants(report) == variants(cold)
    (line,) = s.recovered
    assert line.startswith(f"restore index {path} is unreadable (") and line.endswith(
        "; warmed up through Triton's lookup instead, and the index rewritten"), line
    assert why in line, line
    assert read_index(path)["keys"] == 3  # rewritten, and whole
    again = warm(fill)
    assert again.stats.restored == 3 and again.stats.recovered == () and variants(again) == variants(cold)


def _flip(fraction: float):
    def damage(data: bytes) -> bytes:
        body_start = data.index(b"\n") + 1 if b"\n" in data else 0
        i = body_start + int((len(data) - 1 - body_start) * fraction)
        return data[:i] + bytes([data[i] ^ 0x02]) + data[i + 1:]  # 0x94 -> 0x96, as the issue found
    return damage


def _issue_flip(data: bytes) -> bytes:
    """The issue's damage: the first byte 0x94 made 0x96 (in a pickled index: MemoryError); a
    JSON index holds no such byte, so its middle one is flipped the same way."""
    i = data.find(b"\x94")
    i = len(data) // 2 if i < 0 else i
    return data[:i] + bytes([data[i] ^ 0x02]) + data[i + 1:]


@pytest.mark.parametrize("damage, why", [
    (_issue_flip, "SHA-256"),
    (_flip(0.0), "SHA-256"),  # the body's first byte
    (_flip(0.01), "SHA-256"),
    (_flip(0.37), "SHA-256"),
    (_flip(0.71), "SHA-256"),
    (_flip(1.0), "SHA-256"),  # its last byte
    (lambda data: data[:5] + bytes([data[5] ^ 0x02]) + data[6:], "header"),  # in the header line
    (lambda data: data[: len(data) // 2], "SHA-256"),  # cut in half
    (lambda data: data[: data.index(b"\n") + 1], "SHA-256"),  # only its header left
    (lambda data: data[:20], "header"),  # cut inside the header
    (lambda data: b"", "header"),
    (lambda data: random.Random(28).randbytes(4096), "Error"),  # random bytes
    (lambda data: random.Random(7).randbytes(7), "header"),  # a short random file (no line)
], ids=["issue-0x94", "flip-body-first", "flip-1%", "flip-37%", "flip-71%", "flip-last", "flip-header", "half",
        "header-only", "cut-in-header", "empty", "random", "short-random"])
def test_a_damaged_index_falls_back_once_and_is_rewritten(warmed, damage, why):
    fill, cold, path = warmed
    data = open(path, "rb").read()
    open(path, "wb").write(damage(data))
    falls_back_once_and_is_rewritten(fill, cold, path, why)


_IN_ANOTHER_PROCESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from triton import knobs
from zerojit.compile_only import compile_only
import test_restore_index_damage as t
knobs.cache.dir = sys.argv[2]
with compile_only("cuda:90"):
    report = t.warm(t.ScaledFill())
s = report.stats
print(json.dumps({"ok": report.ok, "counts": [s.restored, s.disk_loads, s.compiled], "recovered": list(s.recovered)}))
"""


def warm_in_another_process(cache: Path) -> dict:
    """The warm-up of ScaledFill into ``cache`` in a child process with a deadline: a warm-up that
    waits on a FIFO fails the test (TimeoutExpired), never hangs the suite."""
    env = dict(os.environ, PYTHONPATH=str(Path(restore.__file__).resolve().parents[1]))
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-c", _IN_ANOTHER_PROCESS, str(Path(__file__).parent), str(cache)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("node", ["fifo", "folder", "link"])
def test_an_index_path_that_is_no_regular_file_is_never_waited_on_and_is_replaced(warmed, cache, tmp_path, node):
    """A FIFO at the index's path hung the warm-up for ever (a plain ``open``), a folder made every
    warm-up fall back, a link was followed (to ``/dev/zero``: read until memory ran out; not run
    here). Each is not a regular file: one line names it, every key goes through Triton's lookup,
    and the node itself (never what a link points to) is replaced by the index, whole. (The
    generic variants' index, ``generic-*.json``, is read and written by the same code.)"""
    fill, cold, path = warmed
    os.unlink(path)
    kept = tmp_path / "elsewhere.json"
    kept.write_bytes(b"not zerojit's")
    {"fifo": os.mkfifo, "folder": os.mkdir, "link": lambda p: os.symlink(kept, p)}[node](path)
    what = {"fifo": "a FIFO", "folder": "a folder", "link": "a symbolic link"}[node]
    report = warm_in_another_process(cache)
    assert report["ok"]
    line = f"restore index {path} is unreadable (it is {what}, not a regular file); "
    assert [r for r in report["recovered"] if r.startswith(line)] == [
        line + "warmed up through Triton's lookup instead, and the index rewritten"], report
    assert report["counts"] == [0, 3, 0]
    assert not os.path.islink(path) and os.path.isfile(path) and kept.read_bytes() == b"not zerojit's"
    assert read_index(path)["entries"]  # whole
    again = warm(fill)
    assert again.stats.restored == 3 and again.stats.recovered == () and variants(again) == variants(cold)


def test_an_index_that_cannot_be_rewritten_is_not_said_to_be(warmed, monkeypatch):
    """The line naming an index not used said "and the index rewritten" before anything was
    written, and also when the write failed (a full disk, a folder at its path that could not be
    removed): it says so only once the index was written, else why it could not be."""
    fill, cold, path = warmed
    open(path, "wb").write(b"garbage")

    def full(where, data, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", where)

    with monkeypatch.context() as m:
        m.setattr(restore, "write_output", full)
        report = warm(fill)
    assert report.ok and (report.stats.restored, report.stats.disk_loads) == (0, 3)
    (line,) = report.stats.recovered
    assert line.startswith(f"restore index {path} is unreadable (") and line.endswith(
        "; warmed up through Triton's lookup instead; the index could not be rewritten: No space left on device"), line
    assert open(path, "rb").read() == b"garbage"
    (line,) = warm(fill).stats.recovered
    assert line.endswith("; warmed up through Triton's lookup instead, and the index rewritten"), line
    assert read_index(path)["keys"] == 3
    again = warm(fill)
    assert again.stats.restored == 3 and again.stats.recovered == () and variants(again) == variants(cold)


def _drop(field):
    def change(body):
        del body[field]
    return change


def _entry(field, value):
    def change(body):
        if value is None:
            del body["entries"][0][field]
        else:
            body["entries"][0][field] = value
    return change


def _set(field, value):
    def change(body):
        body[field] = value
    return change


def _folder_outside(body):
    body["entries"][0]["folder"] = ".."


def _file_outside(body):
    body["entries"][0]["files"][0] = "../../../etc/passwd"


def _plan(body):
    (name,) = body["plans"]
    body["plans"][name] = [["BLOCK"], ["x=print('ran')"]]  # names a keyword argument in generated code


def _job_twice(body):
    body["entries"][1]["job"] = body["entries"][0]["job"]


@pytest.mark.parametrize("change, why", [
    (_drop("entries"), "field 'entries' is missing"),
    (_drop("fingerprint"), "field 'fingerprint' is missing"),
    (_set("keys", "3"), "field 'keys' must be an int, not str"),
    (_set("classes", []), "field 'classes' must be a dict, not list"),
    (_entry("triton_key", None), "entry 0 (job 0): field 'triton_key' is missing"),
    (_entry("files", "not a list"), "entry 0 (job 0): field 'files' must be a list, not str"),
    (_entry("src", {"tuple": []}), "entry 0 (job 0): field 'src' must be a str, not dict"),
    (_entry("src", "gASVAAAA"), "entry 0 (job 0): 'src': 'gASVAAAA' is no JSON text (Expecting value)"),
    (_entry("src", '{"pickle": "gASVAAAA"}'), "{'pickle': 'gASVAAAA'} is not an encoded value"),
    (_entry("src", '{"tuple": [1, 2]}'), "'src' is no (signature, constants, attrs)"),
    (_entry("src", '{"tuple": [NaN]}'), "NaN is no finite number"),
    (_entry("specialization", '{"tuple": [{"tuple": ["i32"]}]}'),
     "'specialization' entry ('i32',) is no (type, attr) pair"),
    (_entry("specialization", "5"), "'specialization' must be a tuple of (type, attr) pairs"),
    (_entry("key_memo", '{"tuple": [[1]]}'), "'key_memo' holds a list"),
    (_entry("job", 3), "entry 0: 'job' is no job index"),
    (_job_twice, "entry 1: 'job' is no job index of this key space, or one given twice"),
    (_folder_outside, "'folder' '..' is no folder of the cache folder"),
    (_file_outside, "'files' entry '../../../etc/passwd' is no file name"),
    (_plan, "holds a name that is no identifier"),
    (lambda body: body.clear() or body.update({"not": "an index"}), "field 'fingerprint' is missing"),
], ids=["no-entries", "no-fingerprint", "keys-str", "classes-list", "entry-no-triton-key", "files-str", "src-dict",
        "src-no-json", "src-other-tag", "src-pair", "src-nan", "spec-short", "spec-int", "memo-list", "job-out-of-range",
        "job-twice", "folder-outside", "file-outside", "plan-code", "other-object"])
def test_an_index_that_parses_but_breaks_the_schema_falls_back_once(warmed, change, why):
    fill, cold, path = warmed
    body = read_index(path)
    change(body)
    write_index(path, body)
    falls_back_once_and_is_rewritten(fill, cold, path, why)


def test_an_index_body_that_is_not_an_object_falls_back_once(warmed):
    fill, cold, path = warmed
    write_index(path, [1, 2, 3])
    falls_back_once_and_is_rewritten(fill, cold, path, "the body is a list, not an object")


def test_an_old_pickled_index_is_never_read(warmed, cache, tmp_path):
    """An older zerojit's ``restore-*.pkl`` lying in the folder: never unpickled (unpickling runs
    whatever code its writer chose), with the JSON index beside it or alone."""
    fill, cold, path = warmed
    ran = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return (open, (str(ran), "w"))

    old = os.path.join(os.path.dirname(path), os.path.basename(path).rsplit(".", 1)[0] + ".pkl")
    open(old, "wb").write(pickle.dumps({"entries": Payload()}))
    beside = warm(fill)
    assert beside.stats.restored == 3 and beside.stats.recovered == ()
    os.unlink(path)
    alone = warm(fill)
    assert (alone.stats.restored, alone.stats.disk_loads) == (0, 3) and alone.stats.recovered == ()
    assert not ran.exists() and read_index(path)["keys"] == 3


def test_a_key_holding_a_value_json_cannot_carry_is_left_out_of_the_index(cache):
    scale = Scale()
    cold = warm(scale)
    assert cold.ok and cold.stats.compiled == 2
    (entry,) = read_index(the_index(cache))["entries"]
    assert entry["job"] == 0  # the key with SCALE=inf is not indexed
    again = warm(scale)
    assert (again.stats.restored, again.stats.disk_loads, again.stats.compiled) == (1, 1, 0)
    assert again.stats.recovered == () and variants(again) == variants(cold)


class _Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [
    None, True, 0, -7, 2**70, 1.5, -0.0, "s", [], (), [1, [2, (3,)]], (1, True, None),
    {(3,): 32, (4,): True, (5,): None}, {"a": [["tt.divisibility", 16]]}, {(0,): tl.float16},
    (("*fp16", "D"), ("constexpr", tl.bfloat16)), {1: {2: (3, [4])}},
])
def test_encode_exact_gives_back_equal_values_of_the_same_types(value):
    def same(a, b):
        assert type(a) is type(b), (a, b)
        if isinstance(a, (list, tuple)):
            assert len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        elif isinstance(a, dict):
            assert list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        else:
            assert a == b and str(a) == str(b)
        return True

    encoded = manifest.encode_exact(value)
    assert same(manifest.decode_exact(json.loads(json.dumps(encoded, allow_nan=False)), "here"), value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), _scale_kernel, tl.pointer_type(tl.float16), {1, 2},
                                   _Colour.RED, b"bytes", [object()], {(1,): _scale_kernel}])
def test_encode_exact_refuses_what_has_no_exact_json_form(value):
    with pytest.raises(TypeError, match="has no exact JSON form"):
        manifest.encode_exact(value)


@pytest.mark.parametrize("data", [{"pickle": "x"}, {"tuple": 1}, {"tuple": [], "dict": []}, {"dict": [[1]]},
                                  {"dict": [[[1], 2]]}, {"triton_dtype": "bogus"}, {"triton_dtype": 16},
                                  {"repr": "<function f>"}, [1, {"x": 1}]])
def test_decode_exact_refuses_anything_encode_exact_never_writes(data):
    with pytest.raises(ValueError, match="^here: "):
        manifest.decode_exact(data, "here")


# ------------------------------------------------------------------ a folder others can write to
def test_a_cache_folder_others_can_write_to_is_warned_about_once_per_warm_up(cache):
    fill = ScaledFill()
    assert warm(fill).stats.recovered == ()  # 0700 (and .zerojit/ 0755): nothing to say
    dot = cache / ".zerojit"
    for mode, dot_mode, named in [(0o777, 0o755, [f"{cache} (mode 777: every user)"]),
                                  # sticky: others still add files
                                  (0o1777, 0o755, [f"{cache} (mode 1777: every user)"]),
                                  (0o700, 0o777, [f"{dot} (mode 777: every user)"]),
                                  (0o757, 0o707, [f"{cache} (mode 757: every user)", f"{dot} (mode 707: every user)"])]:
        os.chmod(cache, mode)
        os.chmod(dot, dot_mode)
        report = warm(fill)
        assert report.ok and report.stats.restored == 3  # a warning only: the index is still used
        (line,) = report.stats.recovered
        assert line == (f"WARNING: other users can write to {' and '.join(named)}: the restore index and digests "
                        "there decide which compiled code is loaded; make it writable by you only (chmod go-w)")
    os.chmod(cache, 0o755)
    os.chmod(dot, 0o755)
    assert warm(fill).stats.recovered == ()


@pytest.mark.parametrize("private", [True, False])
def test_a_group_writable_cache_folder_is_warned_about_unless_the_group_is_the_users_own(cache, monkeypatch, private):
    import grp

    fill = ScaledFill()
    warm(fill)
    os.chmod(cache, 0o770)
    monkeypatch.setattr(restore, "_private_group", lambda gid: private)
    lines = warm(fill).stats.recovered
    if private:
        assert lines == ()
    else:
        group = grp.getgrgid(os.stat(cache).st_gid).gr_name
        (line,) = lines
        assert line.startswith(f"WARNING: other users can write to {cache} (mode 770: group {group}): ")


# ------------------------------------------------------------------ the command line
def test_zerojit_run_with_a_damaged_index_exits_0_having_warmed_up_normally(tmp_path):
    """``zerojit run --device cpu --target cuda:90 --jit-monitor-mode error`` over a cache whose
    index has one flipped byte: exit 0 (it was 1, a MemoryError traceback from pickle), every key
    from the disk cache, one report line naming the index, zero runtime compiles; the index
    rewritten whole."""
    src = str(Path(restore.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=src, TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_HOME=str(tmp_path))
    env.pop("TRITON_INTERPRET", None)

    def run(name: str) -> dict:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "zerojit", "run", "--device", "cpu", "--target", "cuda:90",
                               "--jit-monitor-mode", "error", "--requests", "5", "--no-progress", "--json", str(out)],
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        return json.loads(out.read_text())

    cold = run("cold")
    path = the_index(tmp_path / "cache")
    data = open(path, "rb").read()
    i = len(data) // 2
    open(path, "wb").write(data[:i] + bytes([data[i] ^ 0x02]) + data[i + 1:])
    damaged = run("damaged")
    stats = damaged["warmup"]["stats"]
    keys = cold["warmup"]["stats"]["compiled"] + cold["warmup"]["stats"]["worker_compiled"]
    assert keys > 0 and (stats["restored"], stats["disk_loads"], stats["compiled"]) == (0, keys, 0)
    (line,) = stats["recovered"]
    assert line.startswith(f"restore index {path} is unreadable (") and "SHA-256" in line, line
    assert damaged["runtime_compiles"] == 0 and damaged["ok"]
    assert read_index(path)["keys"] == keys
