"""When a compile counts as hung, and what is done then (docs/start-up.md, "Hung compiles").

A compile is hung when its process group (a compile worker and the ``ptxas`` or C compiler it
runs; or, in this process, the ``ptxas`` Triton runs) uses no CPU time for
``ZEROJIT_COMPILE_STALL_S`` seconds (default 60), or when its wall time passes
``max(ZEROJIT_COMPILE_WALL_S, 10 x`` the entry's remembered compile seconds ``)``
(:func:`wall_limit`; ``ZEROJIT_COMPILE_WALL_S`` defaults to 300 s; the seconds are
:func:`zerojit.cache.remembered_compile_seconds`). A stopped process (``SIGSTOP``, a
debugger, a process frozen by its cgroup) uses none; a busy one, however slow, does.

CPU time is read from ``/proc/<pid>/stat`` (Linux: ``utime + stime``, with the children's the
processes reaped, of every process of the group). Where there is no ``/proc`` (macOS; zerojit's
compile workers are spawned there, Triton's NVIDIA backend does not run on Windows) only the
wall-time rule applies.

Stdlib only, in the bottom layer ("triton facts", docs/architecture.md): :mod:`zerojit.precompile`
watches its workers with it; every tool run for the compiler goes through :func:`run`: Triton's
``ptxas`` runs and ``--version`` probes (:func:`zerojit.triton_compat.watch_toolchain`) and
compile-only's ``ptxas --help`` (:func:`zerojit.compile_only.supported_cuda_capabilities`).
"""

from __future__ import annotations

import contextvars
import math
import os
import signal
import subprocess
import time
from typing import Any

__all__ = ["STALL_ENV", "DEFAULT_STALL_S", "WALL_ENV", "WALL_FLOOR_S", "WALL_FACTOR", "CompileHung", "StallSettingError",
           "stall_seconds", "wall_floor_seconds", "wall_limit", "group_cpu_seconds", "Watch", "kill_group", "run",
           "check_output", "expected_seconds"]

#: ``ZEROJIT_COMPILE_STALL_S``: seconds without CPU time after which a compile is hung.
STALL_ENV = "ZEROJIT_COMPILE_STALL_S"
DEFAULT_STALL_S = 60.0
#: ``ZEROJIT_COMPILE_WALL_S``: the wall time a compile may always take (a machine whose compiles,
#: or the lock waits they bring, take longer than 5 minutes raises it).
WALL_ENV = "ZEROJIT_COMPILE_WALL_S"
WALL_FLOOR_S = 300.0  # its default
WALL_FACTOR = 10.0  # ... or this many times what the entry took before, if more

#: The remembered compile seconds of the entry this context compiles in-process (set by the
#: warm-up around an in-process compile): the wall-time rule for the ``ptxas`` it runs.
expected_seconds: contextvars.ContextVar["float | None"] = contextvars.ContextVar("zerojit_expected_seconds",
                                                                                default=None)


class CompileHung(RuntimeError):
    """A compile (a worker's, or a ``ptxas`` run) stopped answering and was killed; the message
    says which, why (no CPU time, or past its wall-time limit) and how many seconds were waited."""


class StallSettingError(ValueError):
    """``ZEROJIT_COMPILE_STALL_S`` or ``ZEROJIT_COMPILE_WALL_S`` is set to something that is not a
    number of seconds above 0 (invalid input: the command line exits 2)."""


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise StallSettingError(f"{name}={os.environ[name]!r}: give a number of seconds above 0 (default {default:g})")
    return seconds


def stall_seconds() -> float:
    """``ZEROJIT_COMPILE_STALL_S`` as seconds (default :data:`DEFAULT_STALL_S`).

    Raises:
        StallSettingError: the variable is set to something that is not a finite number of
            seconds above 0 (the message names the variable and its value).
    """
    return _seconds(STALL_ENV, DEFAULT_STALL_S)


def wall_floor_seconds() -> float:
    """``ZEROJIT_COMPILE_WALL_S`` as seconds (default :data:`WALL_FLOOR_S`): the wall time any
    compile may take, and so any wait for another process's lock on a cache entry.

    Raises:
        StallSettingError: the variable is set to something that is not a finite number of
            seconds above 0 (the message names the variable and its value).
    """
    return _seconds(WALL_ENV, WALL_FLOOR_S)


def wall_limit(remembered: float | None) -> float:
    """The wall-time limit, in seconds, of a compile that took ``remembered`` seconds before
    (None: unknown): ``max(ZEROJIT_COMPILE_WALL_S, WALL_FACTOR x remembered)``.

    Raises:
        StallSettingError: ``ZEROJIT_COMPILE_WALL_S`` is not valid (:func:`wall_floor_seconds`).
    """
    return max(wall_floor_seconds(), WALL_FACTOR * (remembered or 0.0))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU seconds used so far by the processes of process group ``pgid`` (their own, and that of
    the children they reaped); None where ``/proc`` cannot be read (not Linux)."""
    total = 0
    try:
        entries = os.scandir("/proc")
    except OSError:
        return None
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:  # ended meanwhile
                continue
            fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm)": the name may hold spaces
            # state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
            if len(fields) > 14 and int(fields[2]) == pgid:
                total += sum(int(v) for v in fields[11:15])
    return total / _TICK


class Watch:
    """Watches one compile in process group ``pgid`` (None: unknown, the wall-time rule only):
    :meth:`hung` says why it counts as hung (no CPU time for ``stall_s`` seconds, or ``wall_s``
    seconds since the watch began), else None; it reads ``/proc`` at most every ``poll_s / 2``
    seconds, however often it is asked. :meth:`pause` stops the CPU rule until :meth:`resume`
    (while the compile waits for another process's lock on its entry, whose holder has its own
    watch); the wall-time rule goes on, so a lock held forever is not waited for forever.
    ``wall_from``: what set ``wall_s``, for the message (by default :func:`wall_limit`'s rule,
    naming ``ZEROJIT_COMPILE_WALL_S``, the knob a user raises on a slow machine)."""

    def __init__(self, pgid: int | None, *, stall_s: float, wall_s: float, wall_from: str | None = None) -> None:
        self.pgid, self.stall_s, self.wall_s = pgid, stall_s, wall_s
        self.wall_from = wall_from if wall_from is not None else f"{WALL_ENV}, or {WALL_FACTOR:g}x its last compile"
        self.poll_s = min(max(stall_s / 8, 0.05), 2.0)  # how often a caller asks
        self.started = time.monotonic()
        self.paused = False
        self._idle_from_now()

    def _idle_from_now(self) -> None:
        self.cpu = group_cpu_seconds(self.pgid) if self.pgid is not None else None
        self.idle_since = self.checked = time.monotonic()

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._idle_from_now()

    @property
    def waited(self) -> float:
        """Seconds since the watch began."""
        return time.monotonic() - self.started

    def hung(self) -> str | None:
        now = time.monotonic()
        if now - self.checked < self.poll_s / 2:
            return None
        self.checked = now
        if self.cpu is not None and not self.paused:
            cpu = group_cpu_seconds(self.pgid)
            if cpu != self.cpu:
                self.cpu, self.idle_since = cpu, now
            elif now - self.idle_since >= self.stall_s:
                return f"no CPU time for {now - self.idle_since:.1f} s ({STALL_ENV}={self.stall_s:g})"
        if now - self.started >= self.wall_s:
            return f"still running after {now - self.started:.0f} s (its limit: {self.wall_s:.0f} s, {self.wall_from})"
        return None


#: Seconds :func:`reap` waits for a stopped worker before it kills it.
REAP_WAIT_S = 30.0


def reap(proc: subprocess.Popen) -> None:
    """Wait for a stopped worker to exit (killed if it takes over :data:`REAP_WAIT_S`), so none is
    left a zombie; run it in a thread of its own (it blocks)."""
    try:
        proc.wait(timeout=REAP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def kill_group(pid: int | None) -> None:
    """SIGKILL process group ``pid`` (a stopped member too), else the process alone."""
    if pid is None:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(*popenargs: Any, input: Any = None, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, name: str | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run``, bounded by the stall rule: the process runs in its own process group,
    which is killed once the watch calls it hung, or when an exception (``KeyboardInterrupt``
    included) leaves the wait (wall limit: the entry's remembered seconds, see
    :data:`expected_seconds`, or ``timeout`` if given and shorter). ``name``: what the message
    calls the process (default: its program, as given: Triton gives ``ptxas``'s full path).

    Raises:
        CompileHung: it was killed (the message names the program, why, and the seconds waited).
        StallSettingError: ``ZEROJIT_COMPILE_STALL_S`` or ``ZEROJIT_COMPILE_WALL_S`` is not valid.
        subprocess.CalledProcessError: ``check`` and it failed, as ``subprocess.run`` does.
    """
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    kwargs["start_new_session"] = True  # its own group: its own children die with it
    stall_s, wall_s = stall_seconds(), wall_limit(expected_seconds.get())
    with subprocess.Popen(*popenargs, **kwargs) as proc:
        watch = Watch(proc.pid, stall_s=stall_s, wall_s=wall_s) if timeout is None or timeout >= wall_s else \
            Watch(proc.pid, stall_s=stall_s, wall_s=timeout, wall_from="the caller's timeout")
        try:
            while True:
                try:
                    out, err = proc.communicate(input, timeout=watch.poll_s)
                    break
                except subprocess.TimeoutExpired:
                    input = None  # sent already (communicate refuses it again)
                    why = watch.hung()
                    if why is not None:
                        kill_group(proc.pid)
                        proc.wait()
                        if name is None:
                            name = str(proc.args[0] if isinstance(proc.args, (list, tuple)) else proc.args)
                        raise CompileHung(f"{name} (pid {proc.pid}) stopped answering: {why}; {watch.waited:.1f} s "
                                          "waited, killed") from None
        except BaseException:
            # Ctrl-C's KeyboardInterrupt included: the group is in a session of its own, which the
            # terminal's SIGINT never reaches, and Popen's exit does not kill it (a stopped or hung
            # ptxas would outlive the warm-up).
            if proc.returncode is None:
                kill_group(proc.pid)
            raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def check_output(*popenargs: Any, **kwargs: Any) -> Any:
    """``subprocess.check_output`` through :func:`run`."""
    return run(*popenargs, stdout=subprocess.PIPE, check=True, **kwargs).stdout
