"""The ``zerojit`` console script (and ``python -m zerojit``), set up before zerojit is imported.

``import zerojit`` takes about a second (torch, Triton). A Ctrl-C then would end the command with
a KeyboardInterrupt traceback, and Python would re-raise SIGINT on the way out (status -2). This
module lies outside the package, so that the console script imports nothing heavy before
:func:`exit_on_interrupt`: until the CLI is imported, SIGINT ends the process at once, with one
line and status 130 (as a shell reports SIGINT); nothing needs cleaning up during imports. The
CLI then ends an interrupt the same way (``zerojit.cli._one_line_usage_errors``), through
Python's own handler, so that ``finally`` blocks and worker shutdown run.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys

INTERRUPTED = "zerojit: interrupted"
STATUS = 130  # 128 + SIGINT


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
    try:
        cli_main()
    except KeyboardInterrupt:
        ignore_further_interrupts()
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(STATUS)
    except SystemExit as e:
        if e.code == STATUS:  # the CLI ended an interrupt itself (its one line printed): the process exits now
            ignore_further_interrupts()
        raise


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
