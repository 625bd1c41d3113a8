"""Outputs are atomic and never clobber (issue 28, part 3).

Every path a command writes (``run``/``warmup``/``audit --json``, ``record -o``, ``bundle export
-o``) refuses, before any work, anything that is not a regular file (exit 2, naming the flag),
leaving it as it was; ``-`` is standard output, with nothing else on it; a write that fails (a
full disk, simulated with ``RLIMIT_FSIZE``: the kernel fails the write past N bytes, as a full
disk does, with no root and no mount) keeps the previous file and exits 2 naming the flag. Stale
leftovers of killed imports, exports and Triton writes are removed, fresh ones and other hosts'
kept.

The commands run in process (typer's ``CliRunner``); only ``record`` and ``audit`` start a
Python child, as they always do. Any work a refused command would start fails the test.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import contextlib
import json
import re
import resource
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from typer.testing import CliRunner

from zerojit.cli import app
from zerojit.manifest import Manifest, write_manifest
from zerojit.triton_compat import TRITON_VERSION

import zerojit

SRC = str(Path(zerojit.__file__).resolve().parents[1])  # the zerojit under test, for a child process
HOUR = 3600


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line(result, status: int, *needles: str) -> str:
    """Exit ``status`` with exactly one ``zerojit COMMAND:`` line (notes aside) holding every needle, and no
    traceback."""
    text = result.output
    assert result.exit_code == status, (result.exit_code, text, result.exception)
    assert "Traceback" not in text and not isinstance(result.exception, (ValueError, OSError, RuntimeError)), text
    lines = [line for line in text.splitlines() if re.match(r"zerojit [a-z]+( export)?: (?!note:)", line)]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], text
    return lines[0]


class FakeReport:
    """What a command prints and writes of a warm-up or run report; ``to_dict`` is large enough
    to pass the simulated full disk's limit."""

    ok = True
    skipped = ()
    failures = ()
    variants = ()
    num_keys = 1
    seconds = 0.0
    target = "hip:gfx942"  # bundle export: no launch-path primer to compile (it is for CUDA targets)
    stats = SimpleNamespace(origin=lambda n: "fake")

    def summary(self) -> str:
        return "the report's summary"

    def to_dict(self) -> dict:
        return {"ok": True, "padding": "x" * 8192}


@pytest.fixture
def no_work(monkeypatch):
    """A refused command must start nothing: a run, a warm-up, a child process fail the test."""
    from zerojit import registry
    from zerojit.runner import engine

    def started(*args, **kwargs):
        raise AssertionError("the command started work before refusing its output")

    monkeypatch.setattr(engine, "run", started)
    monkeypatch.setattr(registry.JitWarmupRegistry, "warmup", started)
    monkeypatch.setattr(subprocess, "Popen", started)


@pytest.fixture
def manifest(tmp_path) -> str:
    """An empty manifest (its program launched no kernel) recorded for cuda:90."""
    path = tmp_path / "in.json"
    write_manifest(Manifest(TRITON_VERSION, "cuda:90", ("python", "x.py"), ()), path)
    return str(path)


def commands(manifest: str) -> dict[str, tuple[list[str], str]]:
    """Each subcommand that writes a path: its arguments (OUT where the path goes) and the flag named."""
    return {
        "run": (["run", "--device", "cpu", "--no-progress", "--requests", "1", "--json", "OUT"], "--json"),
        "warmup": (["warmup", "--manifest", manifest, "--no-progress", "--json", "OUT"], "--json"),
        "audit": (["audit", "--json", "OUT", "--", sys.executable, "-c", "pass"], "--json"),
        "record": (["record", "-o", "OUT", "--target", "cuda:90", "--", "python", "-c", "pass"], "--output"),
        "bundle export": (["bundle", "export", "-o", "OUT", "--manifest", manifest, "--no-progress"], "--output"),
    }


def _state(path: str):
    """What is at ``path``, to show a refusal changed nothing."""
    st = os.lstat(path)
    return (stat.S_IFMT(st.st_mode), st.st_ino, st.st_size, os.readlink(path) if os.path.islink(path) else None,
            sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else None)


KINDS = ["a character device", "a FIFO", "a symlink", "a symlink to a file", "a symlink to a folder", "a folder"]


def _make(kind: str, tmp_path: Path) -> tuple[str, str]:
    """Something of ``kind`` for an output path, and why it is refused."""
    if kind == "a character device":
        return "/dev/full", "exists and is not a regular file (a character device)"
    path = tmp_path / kind.replace(" ", "-")
    if kind == "a FIFO":
        os.mkfifo(path)
        return str(path), "exists and is not a regular file (a FIFO)"
    if kind == "a folder":
        path.mkdir()
        return str(path), "is a directory"
    target = {"a symlink": tmp_path / "nowhere", "a symlink to a file": tmp_path / "file.json",
              "a symlink to a folder": tmp_path}[kind]
    path.symlink_to(target)
    return str(path), f"is a symbolic link to {str(target)!r}"


@pytest.mark.parametrize("command", ["run", "warmup", "audit", "record", "bundle export"])
def test_every_output_refuses_what_is_not_a_regular_file(command, tmp_path, manifest, no_work):
    """``record -o /dev/full`` replaced the device by a regular file holding the manifest; a
    symlink, a FIFO were replaced too. Every flag that writes a path refuses them up front, and
    a symlink is named with where it points."""
    (tmp_path / "file.json").write_text("the file a symlink points to")
    args, flag = commands(manifest)[command]
    for kind in KINDS:
        path, why = _make(kind, tmp_path)
        before, around = _state(path), sorted(os.listdir(tmp_path))
        result = invoke(*[path if a == "OUT" else a for a in args])
        one_line(result, 2, f"zerojit {command}: {flag} {path!r}: cannot write there: {why}")
        assert _state(path) == before and sorted(os.listdir(tmp_path)) == around, kind
    assert (tmp_path / "file.json").read_text() == "the file a symlink points to"


@pytest.mark.parametrize("command", ["run", "warmup", "audit", "record", "bundle export"])
def test_an_output_path_that_looks_like_an_option_is_refused(command, tmp_path, manifest, no_work, monkeypatch):
    """``--json --`` wrote a file named ``--`` (the parser took ``--`` as the flag's value): a
    path that starts with ``-``, other than ``-`` itself, is refused before any work, naming the
    flag and how to name such a file."""
    monkeypatch.chdir(tmp_path)
    args, flag = commands(manifest)[command]
    for path in ("--", "-x.json", "--no-progress"):
        result = invoke(*[path if a == "OUT" else a for a in args])
        one_line(result, 2, f"zerojit {command}: {flag} {path!r}: looks like an option; write ./{path} for a file "
                            "of that name")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json"], path


def test_standard_output_is_no_bundle(tmp_path, manifest, no_work, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line(invoke("bundle", "export", "-o", "-", "--manifest", manifest), 2,
             "zerojit bundle export: --output '-': this output is written to a file only")
    assert not (tmp_path / "-").exists()


# ------------------------------------------------------------------------------ '-': standard output
def test_run_json_dash_is_the_json_alone_on_stdout(monkeypatch, tmp_path):
    from zerojit.runner import engine

    monkeypatch.chdir(tmp_path)  # (a file named '-' would land here)
    monkeypatch.setattr(engine, "run", lambda options: FakeReport())
    result = invoke("run", "--device", "cpu", "--no-progress", "--requests", "1", "--json", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == FakeReport().to_dict()
    assert "the report's summary" in result.stderr
    assert os.listdir(tmp_path) == []


def test_warmup_json_dash_is_the_json_alone_on_stdout(monkeypatch, tmp_path, manifest):
    from zerojit import registry

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry.JitWarmupRegistry, "warmup", lambda self, **kwargs: FakeReport())
    result = invoke("warmup", "--manifest", manifest, "--no-progress", "--json", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == FakeReport().to_dict()
    assert "the report's summary" in result.stderr
    assert os.listdir(tmp_path) == ["in.json"]


AUDIT_SCRIPT = ("import os; print('the script speaks', flush=True); "
                "open(os.environ['ZEROJIT_AUDIT_OUT'], 'w').write({audit!r})")


def _audit_json() -> str:
    from zerojit.audit import CoverageAudit

    return CoverageAudit(kernels=()).to_json()


def test_audit_json_dash_sends_the_table_and_the_scripts_output_to_stderr(capfd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = AUDIT_SCRIPT.format(audit=_audit_json())
    result = invoke("audit", "--json", "-", "--", sys.executable, "-c", script)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(_audit_json())
    assert "zero runtime compiles" in result.stderr  # the table
    out, err = capfd.readouterr()  # the script's own stdout: file descriptor 1 went to stderr
    assert "the script speaks" in err and "the script speaks" not in out + result.stdout
    assert os.listdir(tmp_path) == []


def test_audit_json_dash_through_a_pipe_is_pure_json(tmp_path):
    """``zerojit audit --json - -- ... | jq``, as a shell runs it."""
    script = AUDIT_SCRIPT.format(audit=_audit_json())
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "zerojit", "audit", "--json", "-", "--", sys.executable, "-c", script],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(_audit_json())
    assert "the script speaks" in proc.stderr and "zero runtime compiles" in proc.stderr


def test_record_to_dash_writes_the_manifest_alone_on_stdout(capfd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    program = "print('the program', 'speaks')"  # (the manifest holds the command)
    result = invoke("record", "-o", "-", "--target", "cuda:90", "--", "python", "-c", program)
    assert result.exit_code == 0, result.output
    recorded = json.loads(result.stdout)
    assert recorded["format"] == "zerojit-manifest" and recorded["command"] == ["python", "-c", program]
    assert result.stderr.startswith("manifest: 0 kernel(s)"), result.stderr  # the summary, with no "wrote -"
    out, err = capfd.readouterr()
    assert "the program speaks" in err and "the program speaks" not in out + result.stdout
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------ a full disk
@contextlib.contextmanager
def disk_full_past(nbytes: int):
    """Writes that would make any file of this process larger than ``nbytes`` fail (``EFBIG``,
    "File too large"), as writes on a full disk fail: ``RLIMIT_FSIZE``, with ``SIGXFSZ``
    ignored so that the write returns the error instead of killing the process."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


@contextlib.contextmanager
def disk_fills_after_the_child(monkeypatch):
    """The disk fills once the command's child process (the program of ``record``, the script
    of ``audit``) has ended: only this process's own write of the output fails. The limit is
    lifted when the block ends, before pytest writes the test's result (to a log file, in CI)."""
    stack = contextlib.ExitStack()
    wait = subprocess.Popen.wait
    full: list[bool] = []

    def wait_then_fill(self, *args, **kwargs):
        rc = wait(self, *args, **kwargs)
        if not full:
            full.append(True)
            stack.enter_context(disk_full_past(64))
        return rc

    with monkeypatch.context() as patch:
        patch.setattr(subprocess.Popen, "wait", wait_then_fill)
        with stack:
            yield


@pytest.mark.parametrize("command", ["run", "warmup", "audit", "record", "bundle export"])
def test_a_full_disk_keeps_the_previous_output_and_names_the_flag(command, tmp_path, manifest, monkeypatch):
    from zerojit import registry
    from zerojit.runner import engine

    monkeypatch.setattr(engine, "run", lambda options: FakeReport())
    monkeypatch.setattr(registry.JitWarmupRegistry, "warmup", lambda self, *a, **kwargs: FakeReport())
    old = tmp_path / "out"
    old.write_text("the previous output")
    args, flag = commands(manifest)[command]
    if command == "audit":
        args = args[:-1] + [AUDIT_SCRIPT.format(audit=_audit_json())]
    args = [str(old) if a == "OUT" else a for a in args]
    with disk_fills_after_the_child(monkeypatch) if command in ("audit", "record") else disk_full_past(200):
        result = invoke(*args)
    one_line(result, 2, f"zerojit {command}: {flag} {str(old)!r}: cannot write there: File too large")
    assert old.read_text() == "the previous output"
    assert sorted(os.listdir(tmp_path)) == ["in.json", "out"]  # no temporary file left


# ------------------------------------------------------------------------------ leftovers
def _file(path: Path) -> Path:
    path.write_text("partial")
    return path


def _aged(path: Path, seconds: float) -> Path:
    """Set the modification time of ``path`` and everything in it ``seconds`` in the past."""
    when = time.time() - seconds
    for p in [path, *(path.rglob("*") if path.is_dir() else ())]:
        os.utime(p, (when, when), follow_symlinks=False)
    return path


def _folder(path: Path, *files: str) -> Path:
    path.mkdir(parents=True)
    for f in files:
        (path / f).parent.mkdir(parents=True, exist_ok=True)
        (path / f).write_text("partial")
    return path


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "localhost"


@pytest.fixture
def leftovers(tmp_path):
    """A cache folder with what killed imports and Triton writes leave: name -> (path, removed?)."""
    root = tmp_path / "cache"
    entry = _folder(root / "ABCDEFGH2345", "k.cubin", "__grp__k.json")
    host = _host()
    old = 2 * HOUR
    made = {  # name -> (path, removed?)
        "this host's stale staging": (_aged(_folder(root / f".zerojit-import-{host}-a1b2c3", "E/x.cubin"), old), True),
        "this host's fresh staging": (_folder(root / f".zerojit-import-{host}-d4e5f6", "E/x.cubin"), False),
        "other host's stale staging": (_aged(_folder(root / ".zerojit-import-otherhost-a1", "E/x.cubin"), old), False),
        "a staging folder with a fresh file": (_folder(root / f".zerojit-import-{host}-g7h8i9", "E/x.cubin"), False),
        "Triton's stale temporary": (_aged(_folder(entry / "tmp.pid_123_0a1b", "k.cubin"), old), True),
        "Triton's fresh temporary": (_folder(entry / "tmp.pid_456_2c3d", "k.cubin"), False),
        "an entry": (entry, False),
    }
    staged = made["a staging folder with a fresh file"][0]
    _aged(staged, 2 * HOUR)
    os.utime(staged / "E" / "x.cubin")  # only its file is fresh: the newest time counts
    return root, made


def _left(made) -> dict:
    return {name: path.exists() for name, (path, _) in made.items()}


def test_stale_leftovers_of_this_host_are_removed_fresh_and_other_hosts_kept(leftovers):
    from zerojit.cache import remove_leftovers

    root, made = leftovers
    removed = remove_leftovers(str(root))
    assert sorted(removed) == sorted(str(p) for p, gone in made.values() if gone)
    assert _left(made) == {name: not gone for name, (_, gone) in made.items()}


def test_a_bundle_import_removes_stale_leftovers_first(leftovers):
    from zerojit.cache import install_entries

    root, made = leftovers
    group = json.dumps({"child_paths": {"n.ptx": "/elsewhere/n.ptx"}}).encode()  # a text member: no metadata check
    installed, _ = install_entries({"QRSTUVWXYZ67": {"n.ptx": b"// ptx", "__grp__n.json": group}}, str(root))
    assert installed == ["QRSTUVWXYZ67"]
    assert _left(made) == {name: not gone for name, (_, gone) in made.items()}


def test_a_warm_up_that_compiles_removes_stale_leftovers_first(leftovers, monkeypatch):
    from triton import knobs

    from zerojit.compile_only import compile_only
    from zerojit.examples.scale_add import scale_add
    from zerojit.registry import JitWarmupRegistry

    root, made = leftovers
    monkeypatch.setattr(knobs.cache, "dir", str(root))
    scale_add.kernel.device_caches.clear()
    reg = JitWarmupRegistry()
    with reg.activate():
        scale_add.register_warmup(periods=(16,), aligned=(True,))
    with compile_only("cuda:90"):
        report = reg.warmup(progress=False, target="cuda:90", workers=1)
    assert report.num_keys >= 1 and not report.failures
    assert _left(made) == {name: not gone for name, (_, gone) in made.items()}


def test_import_staging_folders_and_export_temporaries_name_this_host(tmp_path, monkeypatch):
    """The host in the name is what lets a later import tell its own host's leftovers."""
    import tempfile

    from zerojit import outputs
    from zerojit.cache import install_entries

    made = []
    mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda *a, **k: made.append(k.get("prefix")) or mkdtemp(*a, **k))
    group = json.dumps({"child_paths": {"n.ptx": "/elsewhere/n.ptx"}}).encode()  # a text member: no metadata check
    install_entries({"QRSTUVWXYZ67": {"n.ptx": b"// ptx", "__grp__n.json": group}}, str(tmp_path))
    assert made == [f".zerojit-import-{_host()}-"]
    name = outputs.temporary_name(str(tmp_path / "b.tar.gz"))
    assert os.path.basename(name).startswith(f"b.tar.gz.tmp-{_host()}-{os.getpid()}-")


def test_an_output_write_removes_its_own_stale_temporaries(tmp_path):
    """A killed export leaves ``FILE.tmp-<host>-<pid>-<random>``: the next write of FILE removes
    it once stale; a fresh one (a live writer) and another host's are kept."""
    from zerojit.outputs import write_output

    host = _host()
    stale = _aged(_file(tmp_path / f"b.tar.gz.tmp-{host}-999-aa"), 2 * HOUR)
    fresh = _file(tmp_path / f"b.tar.gz.tmp-{host}-998-bb")
    other = _aged(_file(tmp_path / "b.tar.gz.tmp-otherhost-997-cc"), 2 * HOUR)
    unrelated = _aged(_file(tmp_path / f"c.tar.gz.tmp-{host}-996-dd"), 2 * HOUR)  # another output's
    write_output(str(tmp_path / "b.tar.gz"), "new")
    assert (tmp_path / "b.tar.gz").read_text() == "new"
    assert not stale.exists() and fresh.exists() and other.exists() and unrelated.exists()
