"""Compile workers do not outlive their warm-up: an interrupt (Ctrl-C's ``KeyboardInterrupt``)
kills their process groups, ``ptxas`` included (each worker runs in a session of its own, which a
terminal's Ctrl-C does not reach), and so does a SIGKILL of the warm-up, which runs no handler:
each worker watches its owner through a pidfd and kills its own group when the owner has ended.

Each scenario is tests/test_hangs.py's warm-up of one key, whose ``ptxas`` stops itself (SIGSTOP)
at its compile: without the fix, that worker and its ``ptxas`` stay forever. The references are
the processes themselves (``/proc``), snapshotted while the compile is stopped.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import signal
import subprocess
import sys
import time

from test_hangs import SCENARIO, SRC, TESTS, _kill_logged, _kill_scenario, alive, fake_ptxas, gone, logged, ptxas_env

WITHIN_S = 30.0  # every worker and ptxas is gone this long after the interrupt (the kill waits up to
#                  KILL_WAIT_S = 5 s; the rest is slack for a busy 2-core host)


def _tree(root: int) -> set[int]:
    """Every process whose parent chain or session leads to ``root`` (``root`` left out)."""
    parents, sessions = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)], sessions[int(entry)] = int(fields[1]), int(fields[3])
    found = {p for p, s in sessions.items() if s == root}
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if (pp == root or pp in found) and p not in found}
        found |= more
        grew = bool(more)
    return found - {root}


def _stopped_compile(tmp_path, start: str, mode: str = "-") -> tuple[subprocess.Popen, set[int], int]:
    """A warm-up (2 workers, started ``start``; ``mode``: test_hangs.SCENARIO's) whose ptxas stopped
    itself; (it, its processes, that ptxas's pid)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(TESTS)]), TRITON_CACHE_DIR=str(tmp_path / "cache"),
               TRITON_HOME=str(tmp_path / "home"), ZEROJIT_WORKER_START=start,
               **ptxas_env(fake_ptxas(tmp_path, "ptxas", "always")))
    env.pop("ZEROJIT_COMPILE_STALL_S", None)  # default 60 s: the warm-up's watchdog does not end it first
    proc = subprocess.Popen([sys.executable, "-c", SCENARIO, str(TESTS), "2", mode], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while not logged(tmp_path):
        if time.monotonic() > deadline or proc.poll() is not None:
            _kill_scenario(proc.pid)
            pytest.fail("no ptxas compile started")
        time.sleep(0.05)
    ptxas = logged(tmp_path)[0][0]
    while alive(ptxas) and open(f"/proc/{ptxas}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.02)
    return proc, _tree(proc.pid) | {ptxas}, ptxas


def survivors(pids) -> list[str]:
    """Each process of ``pids`` still alive: pid, state, parent and command line, for the failure's message."""
    found = []
    for pid in sorted(p for p in pids if alive(p)):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        found.append(f"{pid} ({state}, parent {parent}): {argv}")
    return found


def ptxas_parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_an_interrupted_warm_up_kills_its_workers_and_their_ptxas(tmp_path, start):
    proc, pids, ptxas = _stopped_compile(tmp_path, start)
    try:
        assert len(pids) >= 2, pids  # its worker (one key: one worker) and the ptxas at least
        os.kill(proc.pid, signal.SIGINT)  # KeyboardInterrupt in the warm-up's thread
        proc.wait(timeout=WITHIN_S)
        assert gone(pids, within=WITHIN_S), survivors(pids)
    finally:
        _kill_scenario(proc.pid)
        _kill_logged(tmp_path)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_warm_up_killed_with_sigkill_takes_its_workers_and_their_ptxas_with_it(tmp_path, start):
    """SIGKILL runs no handler in the warm-up: each worker watches its owner (a pidfd) and kills its
    own process group when the owner ends. Without that, the worker waits on its stopped ptxas for ever.
    The key goes to a worker (``workers-only``): a ptxas the warm-up's own process runs (``workers=1``,
    or a key it compiles while spawned workers boot) is its child alone and outlives a SIGKILL of it,
    which docs/start-up.md says."""
    proc, pids, ptxas = _stopped_compile(tmp_path, start, "workers-only")
    assert ptxas_parent(ptxas) != proc.pid  # a worker's ptxas
    try:
        assert len(pids) >= 2, pids
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WITHIN_S)
        assert gone(pids, within=WITHIN_S), survivors(pids)
    finally:
        _kill_scenario(proc.pid)
        _kill_logged(tmp_path)


def test_a_killed_descendant_worker_not_reaped_yet_counts_as_ended():
    """A forked tree's workers but the first are this process's descendants: once killed, each
    stays a zombie until its parent (or whoever adopts it) reaps it, and signal 0 still reaches a
    zombie. The interrupted warm-up's kill waited for each such worker until then (1.5 s a worker
    on a host whose first process reaps late; KILL_WAIT_S = 5 s where it never does): an interrupt
    took seconds to end the command. Here the zombie's parent never reaps it."""
    from zerojit._compile_worker import ForkedProcess

    parent = subprocess.Popen([sys.executable, "-c", "import os, time\npid = os.fork()\nif pid == 0:\n    os._exit(0)\n"
                               "print(pid, flush=True)\ntime.sleep(120)\n"], stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(parent.stdout.readline())
        deadline = time.monotonic() + WITHIN_S
        while open(f"/proc/{zombie}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the grandchild never ended"
            time.sleep(0.01)
        worker = ForkedProcess(zombie, None, None, child=False)
        started = time.monotonic()
        assert worker.wait(timeout=3) == 0
        assert time.monotonic() - started < 1.0
    finally:
        parent.kill()
        parent.wait()


def test_sigterm_of_a_command_compiling_in_its_own_process_kills_its_ptxas(tmp_path):
    """``kill PID`` of ``zerojit run --workers 1`` while its ``ptxas`` (stopped) compiles: that ptxas
    runs in a session of its own, which only the command's own clean-up reaches. SIGTERM's default
    action ran none: the command died at once and its ptxas stayed (for ever, being stopped). Now
    the command ends by SIGTERM all the same, after one line, its ptxas killed."""
    env = dict(os.environ, PYTHONPATH=str(SRC), TRITON_CACHE_DIR=str(tmp_path / "cache"),
               TRITON_HOME=str(tmp_path / "home"), **ptxas_env(fake_ptxas(tmp_path, "ptxas", "always")))
    env.pop("ZEROJIT_COMPILE_STALL_S", None)  # default 60 s: the watchdog does not end it first
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.Popen([sys.executable, "-m", "zerojit", "run", "--device", "cpu", "--workers", "1",
                             "--requests", "1", "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not logged(tmp_path):
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("no ptxas compile started")
            time.sleep(0.05)
        ptxas = logged(tmp_path)[0][0]
        assert ptxas_parent(ptxas) == proc.pid  # the command's own ptxas
        proc.send_signal(signal.SIGTERM)  # to the command alone, as `kill PID` sends it
        _, err = proc.communicate(timeout=WITHIN_S)
        assert gone([ptxas], within=WITHIN_S), survivors([ptxas])
        # its last line (Triton 3.9 warns about TRITON_DEFAULT_FP_FUSION on stderr before it), no traceback
        assert proc.returncode == -signal.SIGTERM and err.splitlines()[-1:] == ["zerojit: terminated"], (
            proc.returncode, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
    finally:
        _kill_scenario(proc.pid)
        _kill_logged(tmp_path)
