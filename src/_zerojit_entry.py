"""The ``zerojit`` console script (and ``python -m zerojit``), set up before zerojit is imported.

``import zerojit`` takes about a second (torch, Triton). A Ctrl-C then would end the command with
a KeyboardInterrupt traceback, and Python would re-raise SIGINT on the way out (status -2). This
module lies outside the package, so that the console script imports nothing heavy before
:func:`exit_on_interrupt`: until the CLI is imported, SIGINT ends the process at once, with one
line and status 130 (as a shell reports SIGINT); nothing needs cleaning up during imports. The
CLI then ends an interrupt the same way (``zerojit.cli._one_line_usage_errors``), through
Python's own handler, so that ``finally`` blocks and worker shutdown run.

SIGTERM (``kill PID``, a service manager's stop, ``timeout``) would kill the process at once,
running none of them: a ``ptxas`` the command runs itself (``--workers 1``) lives on in a
session of its own, a program ``zerojit record`` or ``audit`` runs in a child goes on without
its parent, and a private temporary folder stays. While the command runs, SIGTERM raises
:class:`Terminated` instead (a ``BaseException``: nothing catches it but the clean-ups), and
:func:`run` then ends the process by SIGTERM itself (status 143 in a shell), after one line.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from typing import Iterator

INTERRUPTED = "zerojit: interrupted"
STATUS = 130  # 128 + SIGINT
TERMINATED = "zerojit: terminated"


class Terminated(BaseException):
    """SIGTERM arrived while a command ran (:func:`terminate_by_raising`): ``finally`` blocks,
    context managers and the warm-up's worker kill run as it propagates, as for Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM, during the clean-ups, kills at once
    raise Terminated


def terminate_by_raising() -> None:
    """From now on SIGTERM raises :class:`Terminated` in the main thread, where it has its default
    action (one a program set up itself, or an ignored SIGTERM, is left as it is)."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextlib.contextmanager
def default_termination() -> Iterator[None]:
    """SIGTERM's default action meanwhile (a program ``zerojit exec`` runs in this process gets
    what ``python`` gives it: its own handler, or death, never an exception it could catch)."""
    ours = signal.getsignal(signal.SIGTERM) is _raise_terminated
    if ours:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        if ours and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _raise_terminated)


def _die_terminated() -> None:
    """Say so, then end by SIGTERM's default action, as a process without a handler would (a
    parent sees it killed by SIGTERM; a shell says 143)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        print(TERMINATED, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(128 + signal.SIGTERM)  # (not reached: SIGTERM is unblocked in the main thread)


def _exit_at_once(signum: int, frame: object) -> None:
    os.write(2, f"{INTERRUPTED}\n".encode())
    os._exit(STATUS)


def _ignore_interrupts() -> None:
    # The last exit function (registered first): the command's status is decided, and all that is
    # left is Python's teardown of the modules (0.4-0.5 s with torch), in which a Ctrl-C would
    # kill the process as SIGINT (status -2), silently. Python keeps an ignored signal ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ignore_further_interrupts() -> None:
    """The status is decided (interrupted, 130): a second Ctrl-C during the exit (Python's thread
    and module teardown) would only print a traceback over the one-line message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_on_interrupt() -> None:
    """From now until :func:`run`, SIGINT ends the process at once (``zerojit: interrupted``, status
    130); after the command and every other exit function, it is ignored. Only where SIGINT has
    Python's default handler: an ignored SIGINT (``nohup``, a background job) stays ignored."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_at_once)
        atexit.register(_ignore_interrupts)


def run() -> None:
    """Import the CLI, give SIGINT back to Python's handler, and run the command; an interrupt the
    CLI did not end itself (between the two) ends with the same line and status."""
    from zerojit.cli import main as cli_main

    if signal.getsignal(signal.SIGINT) is _exit_at_once:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    terminate_by_raising()
    try:
        cli_main()
    except Terminated:
        _die_terminated()
    except KeyboardInterrupt:
        ignore_further_interrupts()
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(STATUS)
    except SystemExit as e:
        if e.code == STATUS:  # the CLI ended an interrupt itself (its one line printed): the process exits now
            ignore_further_interrupts()
        raise
    finally:  # the status is decided: Python's teardown has nothing to clean up
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main() -> None:
    """The ``zerojit`` console script ([project.scripts] in pyproject.toml)."""
    exit_on_interrupt()
    run()


def launched_as_module() -> bool:
    """Whether this process is ``python -m zerojit`` and Python is still importing the package to
    find its ``__main__``: meanwhile ``sys.argv[0]`` is ``"-m"`` (Python's docs of ``-m``), and
    ``sys.orig_argv`` holds the module's name. Not ``python -m zerojit.MODULE``, which does not go
    through :func:`run`."""
    if sys.argv[:1] != ["-m"]:
        return False
    args = sys.orig_argv[1:]
    for i, arg in enumerate(args):
        if arg.startswith("-m"):
            return (arg[2:] or (args[i + 1] if i + 1 < len(args) else "")) == "zerojit"
    return False
