"""Nothing waits forever (issue 28, section 2): a compile that stops answering is killed, tried
once more in another worker, then reported failed; the fork of the workers cannot catch a pipe
another thread holds.

Each scenario runs a warm-up in its own Python process under a deadline, so that a hang fails
the test instead of stopping the suite; the scenario, its session and its children are killed
at the deadline (the workers of a warm-up that hangs included). The stand-in for ``ptxas``
(``TRITON_PTXAS_PATH``, or Triton 3.9's ``TRITON_PTXAS_BLACKWELL_PATH``: :func:`ptxas_env`) is a
shell script that answers ``--version`` with the real one's and, for a compile, stops itself or
its caller (the compile worker) with SIGSTOP, then runs the real ``ptxas``; it logs each compile's caller, so the tests see which workers ran it. The references
are the processes themselves (``/proc``) and what the stand-in logged, not zerojit's counts alone.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

from zerojit import triton_compat

TESTS = Path(__file__).resolve().parent
SRC = Path(triton_compat.__file__).resolve().parents[1]  # the zerojit under test (a scenario imports the same)
DEADLINE_S = float(os.environ.get("ZEROJIT_TEST_HANG_DEADLINE_S", "150"))  # a scenario that hangs fails after this

# A warm-up of StoreN's one key (tests/_kernels.py: a module compile workers import), printed as JSON.
SCENARIO = r"""
import json, os, signal, sys, threading
sys.path.insert(0, sys.argv[1])
from _kernels import StoreN
from zerojit import precompile, triton_compat
from zerojit.compile_only import compile_only
from zerojit.registry import JitWarmupRegistry

workers, mode = int(sys.argv[2]), sys.argv[3]
if mode == "workers-only":  # every key to a worker, none compiled here while spawned workers boot
    precompile._COMPILE_WHILE_BOOTING = False
if mode == "stop-after-store":
    # A worker that stops (SIGSTOP) once it stored its entry, before it answers: the first one only.
    from zerojit import _compile_worker

    compile_ = _compile_worker.Worker.compile

    def compile_then_stop_once(self, task):
        reply = compile_(self, task)
        try:
            os.mkdir(os.environ["TRITON_CACHE_DIR"] + "-stopped")
        except FileExistsError:
            return reply
        with open(os.environ["TRITON_CACHE_DIR"] + "-stopped/pid", "w") as f:
            f.write(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
        return reply

    _compile_worker.Worker.compile = compile_then_stop_once
if mode == "race":
    # Stands for the backend hash's `ptxas --version`: a subprocess whose pipe its caller reads
    # to the end. It holds the pipe open until a fork has happened (or 1 s passed), then waits for
    # the end-of-file, which never comes while a forked child still has the write end.
    forked = threading.Event()
    os.register_at_fork(after_in_parent=forked.set)

    def holds_a_pipe_across_the_fork(target):
        r, w = os.pipe()
        forked.wait(1.0)
        os.close(w)
        while os.read(r, 1):
            pass
        os.close(r)

    triton_compat.prime_backend_hash = holds_a_pipe_across_the_fork
registry = JitWarmupRegistry()
with registry.activate():
    StoreN().register_warmup()
with compile_only("cuda:90"):
    report = registry.warmup(workers=workers, progress=False, raise_on_failure=False, generic=False)
print(json.dumps({"failures": [[f.kernel, repr(f.key), f.error] for f in report.failures],
                  "origin": report.stats.origin(),
                  "recovered": list(report.stats.recovered), "compiled": report.stats.compiled,
                  "lock_waits": report.stats.lock_waits, "worker_compiled": report.stats.worker_compiled, "workers": report.stats.workers,
                  "keys": [repr(k) for k in report.keys_by_kernel().get("store_n", ())]}))
"""

# The stand-in for ptxas: a compile (``-o FILE``) may stop; anything else (``--version``, ``--help``) is the real one.
FAKE_PTXAS = """#!/bin/sh
case " $* " in *" -o "*) ;; *) exec {real} "$@";; esac
echo "$$ $PPID" >> {log}
if [ {mode} = once ] && ! mkdir {dir}/stopped-once 2>/dev/null; then exec {real} "$@"; fi
if [ {who} = worker ]; then kill -STOP $PPID; else kill -STOP $$; fi
exec {real} "$@"
"""


def fake_ptxas(tmp_path, who: str, mode: str) -> Path:
    """A ``ptxas`` that stops ``who`` (``worker``: its caller; ``ptxas``: itself) at ``mode``
    (``once``: the first compile only; ``always``: every compile)."""
    script = tmp_path / "ptxas"
    script.write_text(FAKE_PTXAS.format(real=triton_compat.ptxas_path(90), log=tmp_path / "ptxas.log", dir=tmp_path,
                                        mode=mode, who=who))
    script.chmod(0o755)
    return script


def ptxas_env(script) -> dict[str, str]:
    """The variables that make Triton run ``script`` as its ``ptxas`` for ``cuda:90``: Triton 3.9
    reads ``TRITON_PTXAS_BLACKWELL_PATH`` from capability 90 on, earlier versions
    ``TRITON_PTXAS_PATH`` below 100 (each ignores the other's there)."""
    return {"TRITON_PTXAS_PATH": str(script), "TRITON_PTXAS_BLACKWELL_PATH": str(script)}


def run_scenario(tmp_path, workers: int, *, mode: str = "-", **env: str) -> dict:
    """Run :data:`SCENARIO` in a new session (``mode``: ``race``, ``stop-after-store`` or ``-``);
    its JSON. Fails (killing it and what it started) if it has not ended within
    :data:`DEADLINE_S` seconds."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]),
                    TRITON_CACHE_DIR=str(tmp_path / "cache"), TRITON_HOME=str(tmp_path / "home"), **env)
    full_env.pop("ZEROJIT_WORKER_START", None)  # forked workers: the default on Linux
    out, err = run_in_session([sys.executable, "-c", SCENARIO, str(TESTS), str(workers), mode], full_env, tmp_path)
    return json.loads(out.strip().splitlines()[-1])


def run_in_session(argv, env, tmp_path, *, status: int = 0) -> tuple[str, str]:
    """Run ``argv`` in a new session; its stdout and stderr once it exits with ``status``. Fails
    (killing it and what it started) if it has not ended within :data:`DEADLINE_S` seconds."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        _kill_scenario(proc.pid)
        _kill_logged(tmp_path)
        proc.communicate()
        pytest.fail(f"{argv[3:] or argv!r} did not end within {DEADLINE_S:.0f} s: it hangs")
    assert proc.returncode == status, (proc.returncode, err[-3000:])
    return out, err


def logged(tmp_path) -> list[tuple[int, int]]:
    """(ptxas pid, its parent's pid) of each compile the stand-in saw."""
    log = tmp_path / "ptxas.log"
    return [tuple(map(int, line.split())) for line in log.read_text().splitlines()] if log.exists() else []


def _kill_scenario(pid: int) -> None:
    """SIGKILL the scenario ``pid`` (a session leader) and what it started: its session (forked
    workers in process groups of their own stay in it) and its children (spawned workers have
    sessions of their own)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid or int(fields[3]) == pid:  # itself, a child, its session
            try:
                os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _kill_logged(tmp_path) -> None:
    for pids in logged(tmp_path):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def alive(pid: int) -> bool:
    """True while ``pid`` runs, stopped or not (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(pids, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


STALL = {"ZEROJIT_COMPILE_STALL_S": "2"}


@pytest.mark.parametrize("who", ["worker", "ptxas"])
def test_a_compile_stopped_once_is_retried_in_another_worker(tmp_path, who):
    """The worker (or its ptxas, a grandchild of this process) stops at the first compile: after
    2 s without CPU time its group is killed and another worker compiles the key; nothing is
    compiled in the warm-up's process and the key does not fail."""
    result = run_scenario(tmp_path, 2, **ptxas_env(fake_ptxas(tmp_path, who, "once")), **STALL)
    compiles = logged(tmp_path)
    assert len(compiles) == 2 and compiles[0][1] != compiles[1][1]  # two workers ran ptxas
    assert result["failures"] == [] and result["keys"] == ["SingleKey.CompileKey()"]
    assert (result["compiled"], result["worker_compiled"]) == (0, 1)  # never in the warm-up's process
    hung = [r for r in result["recovered"] if "stopped answering" in r]
    assert len(hung) == 1 and hung[0].startswith(f"compile worker {compiles[0][1]} stopped answering while compiling "
                                                 "kernel 'store_n'")
    assert "no CPU time for 2." in hung[0] and "tried once more in another worker" in hung[0]
    assert gone([compiles[0][0], compiles[0][1]])  # the stopped worker and its ptxas were killed


@pytest.mark.parametrize("who", ["worker", "ptxas"])
def test_a_compile_that_stops_again_fails_naming_kernel_key_and_seconds(tmp_path, who):
    """Stopped again in the second worker: the key fails with the others (never compiled in the
    warm-up's process), naming its kernel, key and the seconds waited in each worker."""
    start = time.monotonic()
    result = run_scenario(tmp_path, 2, **ptxas_env(fake_ptxas(tmp_path, who, "always")), **STALL)
    compiles = logged(tmp_path)
    assert len(compiles) == 2 and compiles[0][1] != compiles[1][1]
    assert result["compiled"] == 0 and result["worker_compiled"] == 0 and result["keys"] == []
    [(kernel, key, error)] = result["failures"]
    assert (kernel, key) == ("store_n", "SingleKey.CompileKey()")
    m = re.fullmatch(r"CompileHung: kernel 'store_n' key SingleKey\.CompileKey\(\): its compile stopped answering in "
                     r"two compile workers, each killed with its process group \((\d+\.\d) s then (\d+\.\d) s waited; "
                     r"the second: no CPU time for 2\.\d s \(ZEROJIT_COMPILE_STALL_S=2\)\); not compiled in this process",
                     error)
    assert m, error
    first, second = float(m[1]), float(m[2])
    assert 2.0 <= first and 2.0 <= second and first + second < time.monotonic() - start
    assert gone([pid for pair in compiles for pid in pair])


def test_a_retry_that_finds_the_entry_its_killed_worker_stored_is_no_lock_wait(tmp_path):
    """A worker stops after it stored its entry, before it answers, and no other process exists:
    after 2 s without CPU time it is killed, and the retry in another worker finds the entry on
    disk. That is this warm-up's (killed) worker's compile, not one "compiled meanwhile by another
    process (this warm-up waited for its lock)". The reference: the pid the stopped worker wrote."""
    result = run_scenario(tmp_path, 2, mode="stop-after-store", **STALL)
    stopped = int((tmp_path / "cache-stopped" / "pid").read_text())
    assert result["failures"] == [] and result["keys"] == ["SingleKey.CompileKey()"]
    assert (result["compiled"], result["worker_compiled"], result["lock_waits"]) == (0, 1, 0)
    assert "another process" not in result["origin"] and result["origin"].startswith("1 compiled by "), result["origin"]
    hung = [r for r in result["recovered"] if "stopped answering" in r]
    assert len(hung) == 1 and hung[0].startswith(f"compile worker {stopped} stopped answering while compiling "), hung
    assert gone([stopped])


def test_a_wait_for_another_processs_lock_on_the_entry_is_no_hang(tmp_path, compile_only_target):
    """This process holds the entry's lock (as another warm-up compiling it would) until 3 s
    after a worker waits for it (the kernel's lock table, /proc/locks, shows the waiter), with a
    stall limit of 1 s: the worker is not killed for that wait; it compiles once the lock is
    free. There its ptxas stops it once: that, and only that, is a hang (its worker killed,
    the key compiled by another)."""
    import threading

    from filelock import FileLock

    from _kernels import StoreN
    from zerojit.cache import entry_lock_path
    from zerojit.registry import JitWarmupRegistry

    registry = JitWarmupRegistry()  # the entry's name (Triton's hash: the same in every cache folder)
    with registry.activate():
        StoreN().register_warmup()
    StoreN.kernel.device_caches.clear()
    assert registry.warmup(workers=1, progress=False, generic=False).ok
    folder = Path(knobs_cache_dir())
    [entry] = [e.name for e in folder.iterdir() if any(f.name.startswith("__grp__") for f in e.iterdir())]
    path = entry_lock_path(entry, str(tmp_path / "cache"))
    lock = FileLock(path, thread_local=False)  # released by another thread
    lock.acquire()
    waiter = re.compile(rf"^\d+: -> FLOCK .* [0-9a-f]+:[0-9a-f]+:{os.stat(path).st_ino} ", re.M)

    def release_once_waited_for() -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not waiter.search(Path("/proc/locks").read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3.0)
        lock.release()

    threading.Thread(target=release_once_waited_for, daemon=True).start()
    result = run_scenario(tmp_path, 2, **ptxas_env(fake_ptxas(tmp_path, "worker", "once")),
                          ZEROJIT_COMPILE_STALL_S="1")
    compiles = logged(tmp_path)
    assert len(compiles) == 2 and compiles[0][1] != compiles[1][1]  # the first worker waited, then ran ptxas
    assert result["failures"] == [] and (result["compiled"], result["worker_compiled"]) == (0, 1)
    hung = [r for r in result["recovered"] if "stopped answering" in r]
    assert len(hung) == 1 and hung[0].startswith(f"compile worker {compiles[0][1]} stopped answering"), hung
    assert float(re.search(r"; (\d+\.\d) s waited\)", hung[0])[1]) >= 4.0  # the lock's 3 s, then the stall


@contextlib.contextmanager
def lock_held_by_another_process(path) -> "Iterator[int]":
    """Another process holds lock file ``path`` (``fcntl.flock``, the lock filelock takes), as a
    warm-up stopped with Ctrl-Z while it compiled that entry would; yields its pid."""
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)",
                               str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


@contextlib.contextmanager
def store_n_warmed(folder):
    """StoreN's one key warmed (compiled) here under compile-only into cache folder ``folder``;
    yields the report, inside the compile-only block."""
    from _kernels import StoreN
    from zerojit.compile_only import compile_only
    from zerojit.registry import JitWarmupRegistry

    registry = JitWarmupRegistry()
    with registry.activate():
        StoreN().register_warmup()
    StoreN.kernel.device_caches.clear()
    with pytest.MonkeyPatch.context() as mp, compile_only("cuda:90"):
        mp.setattr(__import__("triton").knobs.cache, "dir", str(folder))
        report = registry.warmup(workers=1, progress=False, generic=False, target="cuda:90")
        assert report.ok
        yield report


def stored_entry(tmp_path) -> str:
    """The cache entry of StoreN's one key (Triton's hash: the same in every cache folder),
    compiled here under compile-only into a folder of its own."""
    with store_n_warmed(tmp_path / "entry-cache"):
        pass
    [entry] = [e.name for e in (tmp_path / "entry-cache").iterdir()
               if e.is_dir() and any(f.name.startswith("__grp__") for f in e.iterdir())]
    return entry


def test_an_in_process_wait_for_a_lock_held_forever_fails_its_key_naming_the_lock(tmp_path):
    """``workers=1``: another process holds the entry's lock and never lets go (a warm-up stopped
    with Ctrl-Z). The warm-up says once, after ``ZEROJIT_COMPILE_STALL_S`` (1 s here), which lock
    file it waits for, and gives up at the wall-time limit workers use (``ZEROJIT_COMPILE_WALL_S``:
    3 s here, 300 s by default): the key fails naming its kernel, key and lock file; the warm-up ends. Before the fix
    it waited for ever (the scenario's deadline failed the test)."""
    from zerojit.cache import entry_lock_path

    entry = stored_entry(tmp_path)
    path = entry_lock_path(entry, str(tmp_path / "cache"))
    start = time.monotonic()
    with lock_held_by_another_process(path):
        full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]), ZEROJIT_COMPILE_STALL_S="1",
                        ZEROJIT_COMPILE_WALL_S="3", TRITON_CACHE_DIR=str(tmp_path / "cache"),
                        TRITON_HOME=str(tmp_path / "home"))
        out, err = run_in_session([sys.executable, "-c", SCENARIO, str(TESTS), "1", "default"], full_env, tmp_path)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["keys"] == [] and result["compiled"] == 0
    [(kernel, key, error)] = result["failures"]
    assert (kernel, key) == ("store_n", "SingleKey.CompileKey()")
    m = re.fullmatch(rf"CompileHung: kernel 'store_n' key SingleKey\.CompileKey\(\): another process held the lock on "
                     rf"its cache entry {entry} for (\d+\.\d) s, the wall-time limit of its compile \(3 s: "
                     r"ZEROJIT_COMPILE_WALL_S, or 10x its last compile\); lock file "
                     rf"{re.escape(path)}; not compiled: .*resume or end that process \(`fuser {re.escape(path)}` "
                     r"names it\), then warm up again", error)
    assert m, error
    assert 3.0 <= float(m[1]) < time.monotonic() - start
    notes = [line for line in err.splitlines() if "waiting for another process's lock" in line]
    assert notes == [f"zerojit: kernel 'store_n' key SingleKey.CompileKey(): waiting for another process's lock on its "
                     f"cache entry ({path}); a warm-up gives up on the key after 3 s"], err


def test_a_bundle_import_gives_up_on_a_lock_held_forever_exit_1(tmp_path):
    """``zerojit bundle import``: another process holds the lock of one of the bundle's entries
    and never lets go. The import says which lock file it waits for, gives up at a compile's
    wall-time limit (``ZEROJIT_COMPILE_WALL_S``: 3 s here) and exits 1 in one line naming the entry and lock file; the
    entry is not installed and no staging folder is left. Before the fix it waited for ever."""
    from zerojit.cache import entry_lock_path, export_bundle

    bundle = tmp_path / "b.tar.gz"
    with store_n_warmed(tmp_path / "builder") as report:
        manifest = export_bundle(report, bundle)
    entry = next(e for e, v in manifest.entries.items() if v["kernel"] == "store_n")
    cache = tmp_path / "cache"
    path = entry_lock_path(entry, str(cache))
    start = time.monotonic()
    with lock_held_by_another_process(path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]), ZEROJIT_COMPILE_STALL_S="1",
                   ZEROJIT_COMPILE_WALL_S="3", TRITON_HOME=str(tmp_path / "home"))
        out, err = run_in_session([sys.executable, "-m", "zerojit", "bundle", "import", str(bundle), "--target",
                                   "cuda:90", "--cache-dir", str(cache)], env, tmp_path, status=1)
    lines = err.strip().splitlines()
    assert lines[0] == (f"zerojit: bundle import: waiting for another process's lock on cache entry {entry} ({path}); "
                        "the import gives up after 3 s"), err
    m = re.fullmatch(rf"zerojit bundle import: another process held the lock on cache entry {entry} for (\d+\.\d) s, "
                     rf"the wall-time limit of a compile \(ZEROJIT_COMPILE_WALL_S, or 10x its last compile\); lock file "
                     rf"{re.escape(path)}; .*\(`fuser {re.escape(path)}` "
                     r"names it\), then import again; (nothing was installed|1 whole entry installed before it, the "
                     r"rest not)", lines[1])
    assert m and len(lines) == 2, err
    assert 3.0 <= float(m[1]) < time.monotonic() - start
    assert not (cache / entry).exists() and not [n for n in os.listdir(cache) if n.startswith(".zerojit-import-")]


def knobs_cache_dir() -> str:
    from triton import knobs

    return knobs.cache.dir


def test_an_in_process_ptxas_that_stops_fails_its_key(tmp_path):
    """``workers=1``: the ptxas Triton runs in the warm-up's own process stops; after 2 s
    without CPU time it is killed and the key fails, naming kernel, key and seconds; the
    temporary files Triton made for it (PTX, log) are not left behind."""
    start = time.monotonic()
    script = fake_ptxas(tmp_path, "ptxas", "always")
    temporary = tmp_path / "tmp"  # the scenario's temporary folder: Triton's PTX, log and cubin files go there
    temporary.mkdir()
    result = run_scenario(tmp_path, 1, **ptxas_env(script), **STALL, TMPDIR=str(temporary))
    [(ptxas, parent)] = logged(tmp_path)
    assert result["keys"] == [] and result["workers"] == 0
    [(kernel, key, error)] = result["failures"]
    assert (kernel, key) == ("store_n", "SingleKey.CompileKey()")
    m = re.fullmatch(rf"CompileHung: kernel 'store_n' key SingleKey\.CompileKey\(\): {re.escape(str(script))} \(pid {ptxas}\) stopped "
                     r"answering: no CPU time for 2\.\d s \(ZEROJIT_COMPILE_STALL_S=2\); (\d+\.\d) s waited, killed",
                     error)
    assert m, error
    assert 2.0 <= float(m[1]) < time.monotonic() - start
    assert gone([ptxas])
    # Triton removes its .ptx / .log only once ptxas returns: the killed one's are removed for it.
    assert not [p.name for p in temporary.iterdir() if p.suffix in (".ptx", ".log", ".o")]


def test_the_workers_fork_holds_no_pipe_of_another_thread(tmp_path):
    """The backend hash's thread holds a pipe (as ``ptxas --version`` does) and reads it to its
    end; the workers' fork must not give a worker that pipe (the warm-up joins that thread before
    forking, and a forked worker closes what it did not open). Without both, the warm-up waits
    for that thread forever (4 of 4 runs of tests/test_library_kernels.py on a 2-core machine)."""
    result = run_scenario(tmp_path, 2, mode="race")
    assert result["failures"] == [] and result["keys"] == ["SingleKey.CompileKey()"]
    assert result["worker_compiled"] == 1 and result["workers"] >= 1


def test_a_forked_worker_keeps_only_its_own_descriptors(tmp_path):
    """A pipe of this process's, open at the fork and not the workers', is closed in the workers:
    its reader sees end-of-file once this process closes its own end, while the workers live."""
    from zerojit import _compile_worker

    r, w = os.pipe()
    stderr = os.open(os.devnull, os.O_WRONLY)
    setup = {"sys_path": list(sys.path), "cache_dir": str(tmp_path), "target": ("cuda", 90, 32)}
    try:
        [proc] = _compile_worker.fork_workers(setup, [stderr])
        try:
            assert _compile_worker.read_message(proc.stdout)["ready"]  # it serves: alive, waiting for requests
            os.close(w)
            w = None
            os.set_blocking(r, False)
            deadline = time.monotonic() + 30
            while True:
                try:
                    assert os.read(r, 1) == b""  # end-of-file: no worker holds the write end
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "a forked worker holds a pipe it did not open"
                    time.sleep(0.05)
            assert proc.poll() is None
        finally:
            proc.close()  # end-of-file on its requests: it exits
            proc.wait(timeout=30)
    finally:
        for fd in (r, w, stderr):
            if fd is not None:
                os.close(fd)


# The stand-in for ptxas that stops itself (SIGSTOP) when asked ``{arg}``, logging its pid first;
# anything else is the real one.
PROBE_STOPS = """#!/bin/sh
if [ "$1" = {arg} ]; then echo $$ >> {log}; kill -STOP $$; fi
exec {real} "$@"
"""


@pytest.mark.parametrize("arg", ["--help", "--version"])
def test_a_ptxas_that_stops_when_compile_only_asks_it_fails_the_command_at_once(tmp_path, arg):
    """Compile-only asks Triton's ptxas which GPUs it compiles for (``--help``; Triton itself runs
    ``--version`` to find it): a ptxas that stops there is killed after ``ZEROJIT_COMPILE_STALL_S``
    (2 s) without CPU time, and the command fails at once (exit 1, one line naming its path, pid
    and the seconds waited), instead of waiting 60 s and going on unchecked (``--help``) or
    forever (``--version``). The references: the pid the stand-in logged, and /proc."""
    script = tmp_path / "ptxas"
    log = tmp_path / "stopped.log"
    script.write_text(PROBE_STOPS.format(arg=arg, log=log, real=triton_compat.ptxas_path(90)))
    script.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(SRC), TRITON_CACHE_DIR=str(tmp_path / "cache"),
               TRITON_HOME=str(tmp_path / "home"), **ptxas_env(script), ZEROJIT_COMPILE_STALL_S="2")
    env.pop("TRITON_INTERPRET", None)
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "zerojit", "demo", "--target", "cuda:90", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=45)
    except subprocess.TimeoutExpired:
        _kill_scenario(proc.pid)
        proc.communicate()
        pytest.fail(f"zerojit demo did not end within 45 s with a ptxas stopped at {arg}")
    finally:
        for pid in (map(int, log.read_text().split()) if log.exists() else ()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    seconds = time.monotonic() - start
    [stopped] = map(int, log.read_text().split())
    shown = f" {arg}" if arg == "--help" else ""
    assert proc.returncode == 1 and out == "", (proc.returncode, out, err)
    m = re.fullmatch(rf"zerojit demo: {re.escape(str(script))}{shown} \(pid {stopped}\) stopped answering: no CPU "
                     r"time for 2\.\d s \(ZEROJIT_COMPILE_STALL_S=2\); (\d+\.\d) s waited, killed: Triton's ptxas "
                     r"must answer for compile-only to know the GPUs it compiles for, and to compile "
                     r"\(TRITON_PTXAS_PATH, TRITON_PTXAS_BLACKWELL_PATH: the ptxas Triton runs\)\n", err)
    assert m, err
    assert 2.0 <= float(m[1]) < seconds < 40
    assert gone([stopped])


# --- the rule itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, default, read", [("ZEROJIT_COMPILE_STALL_S", 60.0, "stall_seconds"),
                                                 ("ZEROJIT_COMPILE_WALL_S", 300.0, "wall_floor_seconds")])
@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_stall_or_wall_setting_is_an_error_naming_it(monkeypatch, value, name, default, read):
    from zerojit import precompile, watchdog

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=rf"^{name}='{value}': give a number of seconds above 0 \(default {default:g}\)$"):
        precompile.WarmupSession(workers=2)
    monkeypatch.setenv(name, " 2.5 ")
    assert getattr(watchdog, read)() == 2.5
    monkeypatch.delenv(name)
    assert getattr(watchdog, read)() == default


def test_the_wall_limit_is_300_s_or_ten_times_the_remembered_compile(monkeypatch):
    from zerojit import watchdog

    monkeypatch.delenv("ZEROJIT_COMPILE_WALL_S", raising=False)
    assert [watchdog.wall_limit(s) for s in (None, 0.5, 30.0, 45.5)] == [300.0, 300.0, 300.0, 455.0]
    monkeypatch.setenv("ZEROJIT_COMPILE_WALL_S", "1200")  # a machine whose compiles take longer
    assert [watchdog.wall_limit(s) for s in (None, 30.0, 150.0)] == [1200.0, 1200.0, 1500.0]


def test_a_sleeping_process_is_hung_and_a_busy_one_is_not():
    """The CPU rule on two real process groups: ``sleep`` uses no CPU time, a loop does; the
    reference for the CPU time is /proc/<pid>/stat read here."""
    from zerojit import watchdog

    sleeping = subprocess.Popen(["sleep", "30"], start_new_session=True)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        watches = {p: watchdog.Watch(p.pid, stall_s=1.0, wall_s=300.0) for p in (sleeping, busy)}
        deadline, why = time.monotonic() + 20, None
        while why is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            why = watches[sleeping].hung()
            assert watches[busy].hung() is None
        assert why.startswith("no CPU time for 1.") and watches[sleeping].waited >= 1.0
        with open(f"/proc/{busy.pid}/stat") as f:
            assert sum(int(v) for v in f.read().rsplit(")", 1)[1].split()[11:13]) > 0
        watchdog.kill_group(sleeping.pid)
        assert sleeping.wait(timeout=10) == -signal.SIGKILL
    finally:
        for p in (sleeping, busy):
            p.kill()
            p.wait()


def test_a_bad_stall_setting_exits_2_naming_it_on_the_command_line(tmp_path, monkeypatch):
    from triton import knobs
    from typer.testing import CliRunner

    from zerojit.cli import app

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "cache"))
    for name, default in (("ZEROJIT_COMPILE_STALL_S", 60), ("ZEROJIT_COMPILE_WALL_S", 300)):
        result = CliRunner().invoke(app, ["demo"], env={name: "soon"})
        assert result.exit_code == 2, (result.output, result.exception)
        assert "Traceback" not in result.output
        assert [line for line in result.output.splitlines() if line.startswith("zerojit ")] == [
            f"zerojit demo: {name}='soon': give a number of seconds above 0 (default {default})"]


def test_a_busy_compile_past_its_wall_limit_is_hung():
    """The wall-time rule: a process group that keeps using CPU time is hung once the watch's
    wall limit passes (here 1 s; a compile's is max(300 s, 10x its remembered seconds))."""
    from zerojit import watchdog

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        watch, why = watchdog.Watch(busy.pid, stall_s=60.0, wall_s=1.0), None
        deadline = time.monotonic() + 20
        while why is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            why = watch.hung()
        assert why == "still running after 1 s (its limit: 1 s, ZEROJIT_COMPILE_WALL_S, or 10x its last compile)"
        assert 1.0 <= watch.waited < 5.0
    finally:
        busy.kill()
        busy.wait()


def test_an_interrupted_wait_kills_the_process_group_it_started(tmp_path):
    """Ctrl-C while :func:`zerojit.watchdog.run` waits (here a ``KeyboardInterrupt`` raised by a
    SIGALRM handler after 0.5 s): the process it started runs in a session of its own, which a
    terminal's SIGINT never reaches, so the wait kills its group before the interrupt goes on. The
    reference: the child's pid, written by the child, looked up in /proc afterwards. (Before the
    fix a warm-up's in-process ptxas that had stopped outlived a Ctrl-C of the warm-up.)"""
    from zerojit import watchdog

    pid_file = tmp_path / "pid"
    script = f"echo $$ > {pid_file}; kill -STOP $$"  # a stopped compile: no CPU time, never ends by itself

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            watchdog.run(["sh", "-c", script], name="stand-in")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    child = int(pid_file.read_text())
    try:
        assert gone([child], within=10.0), child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_run_past_its_callers_timeout_is_killed_naming_that_timeout():
    """``watchdog.run(..., timeout=1)`` on a ``sleep 30``: killed after 1 s (at the watch's next poll,
    2 s here), the message naming the
    caller's timeout as the limit (not ``ZEROJIT_COMPILE_WALL_S``, which did not set it)."""
    from zerojit import watchdog

    start = time.monotonic()
    with pytest.raises(watchdog.CompileHung) as raised:
        watchdog.run(["sleep", "30"], timeout=1.0, name="sleep")
    assert time.monotonic() - start < 10.0
    assert "s (its limit: 1 s, the caller's timeout)" in str(raised.value), raised.value
    assert str(raised.value).startswith("sleep (pid ")
