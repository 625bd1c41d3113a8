"""The ``zerojit`` command line (typer).

Commands:
    run      the reference runner on a real request trace (the main job)
    demo     warm up the example kernel and print its report
    audit    run a script under the monitor and print the coverage audit
    record   run an unmodified program and write the manifest of every specialization it launched
    warmup   warm a manifest's specializations (into the Triton cache) and print the report
    exec     warm a manifest, install the monitor, then run the unmodified program in-process
    bundle   export / import / inspect a cache bundle (the compiled key space as one archive)
    store    keygen / push / status / wait / gc: a fleet's shared store of signed entries (zerojit.fleet)
    learned  show / clear / merge into a manifest the keys that missed after warm-up (zerojit.learned)

Exit status, in every command: 2 for invalid input (a flag, a config, a trace, a missing file, a
cache folder that cannot serve, flags that conflict), 1 for a refused artefact (a bundle for
another build or target, a corrupted one, a warm-up that failed, a ``ptxas`` that stopped
answering) or a runtime compile, 130 for
Ctrl-C, 0 otherwise (``audit`` passes the script's own status on). A user error ends the command
with one line ``zerojit COMMAND: what is wrong and what to change`` on stderr, never a traceback
(:func:`_user_errors`; the parser's own errors: :func:`_one_line_usage_errors`); a traceback means
a bug in zerojit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from typing import Any, Callable, Iterator, Optional

import _zerojit_entry as _entry  # the console script's interrupt line and status
import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from zerojit.monitor import ENV_VAR as _JIT_MONITOR_ENV, FALLBACK_MISSES, MODES as JIT_MONITOR_MODES, SWAP_POLICIES
from zerojit.runner.config import REQUIRED_FIELDS, file_defaults


class _HelpWithoutType:
    """``--help`` listed without a type: typer 0.29 shows the flag's ``<bool>`` beside it."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = ""
        return option


class _Command(_HelpWithoutType, TyperCommand):
    """A command whose ``--help`` lists no Python types: none for ``--help``, none beside an
    argument that has a metavar (typer 0.29 shows ``FILE <str>``, ``COMMAND... <list[str]>``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar:
                param.display_type_rich = lambda ctx: None  # the metavar says it all


# click's UsageError, the base of every usage error click detects (an unknown option or command, a
# missing or bad value): typer 0.26+ vendors click and exports only its subclass BadParameter.
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


@contextlib.contextmanager
def _one_line_usage_errors(ctx: Any) -> Iterator[None]:
    """End a usage error click detects as zerojit's own errors end (one line ``zerojit COMMAND:
    message`` on stderr, exit 2), not in typer's boxed usage block. ``ctx``: the group's context,
    for an error that names none. ``zerojit`` or ``zerojit bundle`` alone still prints its help."""
    try:
        yield
    except _UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # typer prints the help for it
            raise
        names = []
        if e.ctx is None and ctx is not None and ctx.invoked_subcommand:  # the parser's errors name no context:
            names.append(ctx.invoked_subcommand)  # it is the command being set up's
        where = e.ctx or ctx
        while where is not None and where.parent is not None:  # the root's name is how it was started
            names.insert(0, where.info_name)
            where = where.parent
        message = " ".join(e.format_message().splitlines())
        typer.echo(f"{' '.join(['zerojit', *names])}: {message}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:  # typer would exit 130 silently
        typer.echo(_entry.INTERRUPTED, err=True)
        raise typer.Exit(_entry.STATUS) from None
    except OSError as e:
        if not _writing_stdout(e):  # (a command's own OSErrors are user errors or bugs, said before here)
            raise
        null = os.open(os.devnull, os.O_WRONLY)  # so that Python's flush at exit does not fail again
        os.dup2(null, 1)
        os.close(null)
        typer.echo(f"zerojit: cannot write to standard output: {e.strerror or e}", err=True)
        raise typer.Exit(1) from None


def _writing_stdout(error: OSError) -> bool:
    """Whether ``error`` was raised writing to standard output (a full disk or ``/dev/full``, a
    closed pipe): the frame that raised it writes to a file whose descriptor is 1 (``click.echo``'s
    ``file``, ``rich``'s console ``self.file``). The output is lost then, which is no bug of zerojit's."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    names = tb.tb_frame.f_locals
    for value in (*names.values(), getattr(names.get("self"), "file", None)):
        try:
            if value is not None and callable(getattr(value, "fileno", None)) and value.fileno() == 1:
                return True
        except (OSError, ValueError, AttributeError, TypeError):  # a closed or unusual file
            pass
    return False


class _Group(_HelpWithoutType, TyperGroup):
    """A command group whose ``--help`` is listed without a type and whose usage errors, its
    commands' included, end in one line (:func:`_one_line_usage_errors`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:  # parses the group's own options
        with _one_line_usage_errors(kwargs.get("parent")):
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:  # finds the command, parses its options and runs it
        with _one_line_usage_errors(ctx):
            return super().invoke(ctx)


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True,
                  help="zerojit: zero JIT compilation at run time for Triton kernels.")


def _exit_status(error: BaseException) -> int | None:
    """The exit status of a user error (the rule in the module docstring), or None for anything
    else (a bug, whose traceback must show).

    The classes are imported here, not at the top: only a failing command needs them, and
    ``zerojit --help`` need not load the runner and its kernels.
    """
    from zerojit.cache import BundleError, BundleReadError, CacheFolderError
    from zerojit.compile_only import InterpreterProcessError
    from zerojit.fleet.signing import SigningError
    from zerojit.fleet.store import StoreDown, StoreError
    from zerojit.kernels.mla.backends import BackendError
    from zerojit.kernels.mla.config import ConfigError
    from zerojit.manifest import ManifestError, UntrustedManifestError
    from zerojit.monitor import MonitorModeError, RuntimeJitError
    from zerojit.precompile import WorkerSettingError
    from zerojit.switches import SwitchSettingError
    from zerojit.outputs import OutputError
    from zerojit.recording import ProgramError
    from zerojit.registry import NoTargetError, WarmupError
    from zerojit.runner.engine import RunError
    from zerojit.runner.trace import TraceError
    from zerojit.warmup_store import UnknownStoreError
    from zerojit.watchdog import CompileHung, StallSettingError

    # A cache folder that cannot be written is invalid input, also when a bundle import met it; so
    # is the environment (a bad ZEROJIT_JIT_MONITOR, ZEROJIT_COMPILE_STALL_S, ZEROJIT_WORKER_START,
    # ZEROJIT_WORKER_NICE, ZEROJIT_LEARN / _RESTORE / _PRIME_KERNELS, TRITON_INTERPRET=1
    # where compile-only is needed), a bundle file that cannot be read (permissions: there is no
    # bundle to judge) and a program that cannot be run, and an output that cannot be written (a
    # command names its flag: _output_errors).
    if isinstance(error, (ConfigError, BackendError, TraceError, RunError, CacheFolderError, NoTargetError,
                          MonitorModeError, InterpreterProcessError, BundleReadError, ProgramError, OutputError,
                          StallSettingError, UntrustedManifestError, StoreError, SigningError, UnknownStoreError,
                          WorkerSettingError, SwitchSettingError)):
        return 2
    if isinstance(error, (RuntimeJitError, WarmupError, BundleError, ManifestError, CompileHung, StoreDown)):
        return 1
    return None


def _user_errors(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate command ``zerojit COMMAND``: a user error (:func:`_exit_status`) it raises ends it
    with one line on stderr and its exit status, never a traceback. Apply below ``@app.command``
    (and ``@_reflowed``)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)  # typer reads the options from the wrapped signature
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                status = _exit_status(e)
                if status is None:
                    raise
                # (the monitor's messages and WarmupError's name zerojit already)
                message = str(e).removeprefix("zerojit: ")
                if message.startswith("zerojit warm-up"):
                    message = message.removeprefix("zerojit ")
                typer.echo(f"zerojit {command}: {message}", err=True)
                raise typer.Exit(status) from None

        return run

    return decorate


def _refuse(command: str, message: str) -> None:
    """Exit 2 (invalid input) with ``zerojit COMMAND: message`` on stderr."""
    typer.echo(f"zerojit {command}: {message}", err=True)
    raise typer.Exit(2)


def _reflowed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Join the hard-wrapped lines of each docstring paragraph, so ``--help`` wraps them to the
    terminal (typer keeps a docstring's line breaks). Apply below ``@app.command``."""
    paragraphs = inspect.cleandoc(fn.__doc__ or "").split("\n\n")
    fn.__doc__ = "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)
    return fn


def _check_output_file(command: str, option: str, path: Optional[str], *, stdout: bool = True) -> None:
    """Refuse (exit 2), before any work, an output file that cannot be written
    (:func:`zerojit.outputs.output_problem`: an empty path, one that starts with ``-`` (an
    option taken as the flag's value), a folder missing, read-only or
    refusing new files (``/proc``), or anything but a regular file at the path: a directory, a
    device, a FIFO, a symbolic link, which the atomic write would replace). ``-`` is standard
    output where ``stdout`` (see :func:`_stdout_is_for`), else refused."""
    from zerojit.outputs import STDOUT, output_problem

    if path is None:
        return
    if path == STDOUT and not stdout:
        _refuse(command, f"{option} '-': this output is written to a file only; give a path")
    problem = output_problem(path)
    if problem:
        where = "" if not path or path.startswith("-") else "cannot write there: "  # (else: the path itself is wrong)
        _refuse(command, f"{option} {path!r}: {where}{problem}")


@contextlib.contextmanager
def _output_errors(command: str, option: str, path: str) -> Iterator[None]:
    """A failed write of the output of ``option`` (a full disk, ``path`` replaced by a device
    since the up-front check) is invalid input like an unwritable path: exit 2, one line naming
    the flag; the previous file at ``path`` is left as it was (:mod:`zerojit.outputs`)."""
    from zerojit.outputs import OutputError

    try:
        yield
    except OutputError as e:
        _refuse(command, f"{option} {path!r}: cannot write there: {e.strerror}")


# The ``-`` outputs of the command running under _stdout_is_for, written to stdout when it ends.
_pending_stdout: list[list[tuple[str, str, str]]] = []


def _write_output(command: str, option: str, path: str, text: str, *, owner_writes_only: bool = False) -> None:
    """Write ``text`` as the whole of the output of ``option`` (:func:`zerojit.outputs.write_output`;
    ``owner_writes_only``: a manifest that carries program source);
    ``-``: to standard output, once the command has ended (under :func:`_stdout_is_for`)."""
    from zerojit.outputs import STDOUT, write_output

    if path == STDOUT and _pending_stdout:
        _pending_stdout[-1].append((command, option, text))
        return
    with _output_errors(command, option, path):
        write_output(path, text, owner_writes_only=owner_writes_only)


def _stdout_is_for(param: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command whose output parameter ``param`` may be ``-`` (standard output), so
    that ``--json - | jq`` reads pure JSON: while the command runs, everything else it prints
    (its own report, and what a program it runs prints: file descriptor 1 is redirected too)
    goes to stderr; its ``-`` output is written to standard output when it ends, whatever its
    exit status. Apply below :func:`_user_errors`."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            import sys

            from zerojit.outputs import STDOUT, write_output

            if kwargs.get(param) != STDOUT:
                return fn(*args, **kwargs)
            sys.stdout.flush()
            saved = os.dup(1)
            os.dup2(2, 1)  # a child process and C code write to the descriptor, not to sys.stdout
            _pending_stdout.append([])
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    return fn(*args, **kwargs)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 1)
                os.close(saved)
                for command, option, text in _pending_stdout.pop():
                    with _output_errors(command, option, STDOUT):
                        write_output(STDOUT, text)

        return run

    return decorate


def _check_input_file(command: str, what: str, path: str) -> None:
    """Refuse (exit 2), before any work, an input file that does not exist, is a directory, or is
    no regular file (a FIFO, device or socket: opening or reading it could wait for ever)."""
    from zerojit.integrity import NotRegularFileError, refuse_irregular

    if os.path.isdir(path):
        _refuse(command, f"{what} {path!r} is a directory, not a file")
    if not os.path.exists(path):
        _refuse(command, f"{what} {path!r} does not exist")
    try:
        refuse_irregular(path)
    except NotRegularFileError as e:
        _refuse(command, f"{what} {path!r} is {e.what}, not a regular file")


def _check_target(command: str, target: str, *, option: str | None = None) -> None:
    """Refuse (exit 2) a target this Triton cannot compile for, listing the supported ones;
    ``option``: the flag to name instead of "compile-only target" (where the target is not one
    to compile for, e.g. the target a bundle must be for)."""
    from zerojit.compile_only import parse_target, supported_cuda_capabilities

    try:
        parse_target(target)
    except ValueError as e:
        message = str(e)
        if option is not None:
            message = message.replace("compile-only target", option, 1)
        if "supported:" not in message and supported_cuda_capabilities():
            message += (f"; supported: {', '.join(f'cuda:{c}' for c in supported_cuda_capabilities())}, "
                        "and hip:<gfx arch>")
        _refuse(command, message)


def _current_folder_importable() -> None:
    """Put the current folder first on ``sys.path`` (where ``python -m`` puts it; a console script
    does not): a manifest names its kernels' modules as the recorded program imported them, often
    from the folder it ran in."""
    import sys

    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.insert(0, here)


def _nothing_warmed(command: str, report: Any) -> None:
    """Exit 1 when a manifest's every recorded kernel was skipped (listed in the report): a warm-up
    of nothing is not a success a deployment should build on."""
    if report.skipped and report.num_keys == 0:
        typer.echo(f"zerojit {command}: nothing warmed: every recorded kernel was skipped (the SKIPPED lines say why)",
                   err=True)
        raise typer.Exit(1)


def _capped_workers(command: str, workers: Optional[int]) -> Any:
    """``--workers`` capped to the cores this process can use
    (:func:`zerojit.registry.capped_workers`: the warm-up report then says so), with a note on
    stderr when capped."""
    from zerojit.registry import capped_workers
    from zerojit.runner import engine

    cores = engine.usable_cores()
    capped = capped_workers(workers, cores)
    if capped is not workers:
        _note_capped(command, "--workers", workers, cores)
    return capped


def _capped_background_workers(command: str, workers: int) -> int:
    """``--background-workers`` capped to the cores this process can use, with a note on stderr
    (a worker past them only waits for a core, as with ``--workers``)."""
    from zerojit.runner import engine

    cores = engine.usable_cores()
    if workers <= cores:
        return workers
    _note_capped(command, "--background-workers", workers, cores)
    return cores


def _note_capped(command: str, flag: str, asked: Any, cores: int) -> None:
    from zerojit.registry import count

    typer.echo(f"zerojit {command}: note: {flag} {asked} is more than the {count(cores, 'core')} this process can "
               f"use; using {cores}", err=True)


def _no_progress_option(what: str) -> Any:
    """``--no-progress``: no ``what``, which is otherwise drawn on stderr only where it is a terminal."""
    return typer.Option(False, "--no-progress", metavar="",
                        help=f"no {what} (default: drawn only where stderr is a terminal)")


def _no_learned_option() -> Any:
    """``--no-learned``: the warm-up skips the learned-keys file (:mod:`zerojit.learned`)."""
    return typer.Option(False, "--no-learned", metavar="",
                        help="do not warm the keys that missed after earlier warm-ups into this cache folder (the "
                        "learned-keys file; zerojit learned show lists them)")


def _progress(no_progress: bool) -> bool:
    """Whether to draw progress bars: not with ``--no-progress``, else only where stderr is a
    terminal, as tqdm's ``disable=None`` does: a redirected stderr is a log, which a bar's redraws
    fill with carriage returns."""
    import sys

    return not no_progress and sys.stderr.isatty()


def _check_jit_monitor_mode(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    if value is not None and value.lower() not in JIT_MONITOR_MODES:
        source = ctx.get_parameter_source(param.name)  # name what the value came from: the flag or the variable
        hint = param.envvar if source is not None and source.name == "ENVIRONMENT" else f"'{param.opts[0]}'"
        raise typer.BadParameter(f"must be one of {', '.join(JIT_MONITOR_MODES)}, not {value!r}", param_hint=hint)
    return value.lower() if value is not None else None


def jit_monitor_mode_option(default: Optional[str] = None, *, default_help: str = "") -> Any:
    """A ``--jit-monitor-mode off|warn|error`` typer option (falls back to ``ZEROJIT_JIT_MONITOR``).

    Use in a command that warms up and serves, then pass its value to
    :func:`apply_jit_monitor_mode` before warming up::

        def run(jit_monitor_mode: Optional[str] = jit_monitor_mode_option("error")): ...

    ``default_help``: what the default is, when it is not one value (e.g. it follows another
    flag); appended to the help.
    """
    return typer.Option(
        default,
        "--jit-monitor-mode",
        envvar=_JIT_MONITOR_ENV,
        callback=_check_jit_monitor_mode,
        metavar="MODE",
        help="runtime JIT monitor after warm-up: off, warn (log each runtime compile once), "
        "error (raise RuntimeJitError before compiling) or fallback (a miss a generic variant serves launches "
        "it, the key compiles in the background)" + (f" ({default_help})" if default_help else ""),
    )


#: The values of the fallback flags (those of ``zerojit.monitor.FallbackOptions``, fallback mode's options).


def _one_of(values: tuple[str, ...]) -> Callable[[typer.Context, typer.CallbackParam, Any], Any]:
    """A typer callback refusing (exit 2, one line naming the flag) a value not in ``values``."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is not None and value not in values:
            raise typer.BadParameter(f"must be one of {', '.join(values)}, not {value!r}",
                                     param_hint=f"'{param.opts[0]}'")
        return value

    return check


def _no_generic_option() -> Any:
    return typer.Option(False, "--no-generic", metavar="",
                        help="warm no generic variants (a miss then compiles or fails as outside fallback mode)")


def _swap_option() -> Any:
    return typer.Option("between-requests", "--swap", metavar="WHEN", callback=_one_of(SWAP_POLICIES),
                        help="fallback mode: when a variant compiled in the background replaces the generic one: "
                        "immediate, between-requests (a request runs on one variant: batch invariance and "
                        "tensor-parallel ranks agree) or never")


def _fallback_miss_option() -> Any:
    return typer.Option("compile", "--fallback-miss", metavar="WHAT", callback=_one_of(FALLBACK_MISSES),
                        help="fallback mode: a miss no generic variant serves (a new dtype, constexpr or launch "
                        "option): compile (inline, counted as a request-path compile) or error (raise)")


def _background_workers_option() -> Any:
    return typer.Option(1, "--background-workers", min=1, metavar="N",
                        help="fallback mode: background compile worker processes (at nice 19)")


def _check_fallback_flags(command: str, ctx: typer.Context, mode: str) -> None:
    """Refuse (exit 2) ``--swap``, ``--fallback-miss`` or ``--background-workers`` given on the
    command line where the run serves in ``mode``, not fallback: they would change nothing.
    (``--no-generic`` is not refused: a run outside fallback mode that warms no generic variant
    does what it asks.)"""
    given = [_given(ctx, n, ctx.params[n]) for n in ("swap", "fallback_miss", "background_workers")
             if ctx.get_parameter_source(n).name == "COMMANDLINE"]
    if mode != "fallback" and given:
        _refuse(command, f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} in fallback mode only, "
                f"and this run serves in {mode} mode: leave {'it' if len(given) == 1 else 'them'} out, or pass "
                "--jit-monitor-mode fallback")


def _configure_fallback(command: str, mode: str | None, swap: str, fallback_miss: str, workers: int) -> None:
    """Give the process monitor these fallback options (``monitor.configure(mode, fallback=)``)
    when it serves in fallback mode (``workers``: :func:`_capped_background_workers`)."""
    if mode == "fallback":
        from zerojit import monitor

        workers = _capped_background_workers(command, workers)

        monitor.configure(mode, fallback=monitor.FallbackOptions(swap=swap, fallback_miss=fallback_miss,
                                                                 workers=workers))


def apply_jit_monitor_mode(mode: Optional[str]) -> None:
    """Make the next warm-up install the monitor in ``mode`` (None: follow ``ZEROJIT_JIT_MONITOR``).

    Call it before any work in every command that warms up: with None, a bad value of the
    variable is refused now (:class:`~zerojit.monitor.MonitorModeError`, exit 2 through
    :func:`_user_errors`), not when the warm-up completes; a mode given wins over the variable.
    """
    from zerojit import monitor

    monitor.configure(mode)
    monitor.configured_mode()


def _print_version(value: bool) -> None:
    if value:
        import zerojit

        typer.echo(f"zerojit {zerojit.__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, metavar="",
                                 help="print the zerojit version and exit"),
) -> None:
    """zerojit: zero JIT compilation at run time for Triton kernels."""


def _config_help() -> str:
    """``--config``'s help: the shipped names, and what a JSON file must set or may leave out
    (from :data:`zerojit.runner.config.REQUIRED_FIELDS` and ``file_defaults()``, so the help
    cannot disagree with the loader)."""
    from zerojit.runner.config import shipped_configs

    defaults = ", ".join(f"{k} {'none' if v is None else list(v) if isinstance(v, tuple) else v}"
                         for k, v in file_defaults().items())
    return (f"a shipped config ({', '.join(shipped_configs())}) or a JSON file of ModelConfig fields: it must set "
            f"{', '.join(REQUIRED_FIELDS)}; a field it leaves out takes its default ({defaults}; name: the file's "
            "stem)")


def _warmup_store_options() -> dict[str, Any]:
    """``--store URL``, ``--push``, ``--connect-timeout S`` and ``--op-timeout S`` of the commands
    that warm up (run, warmup, exec): the fleet store the warm-up pulls from (zerojit.fleet)."""
    from zerojit.fleet.store import CONNECT_TIMEOUT, OPERATION_TIMEOUT

    return dict(
        store=typer.Option(None, "--store", metavar="URL", envvar="ZEROJIT_STORE",
                           help="a fleet store (a redis:// or rediss:// URL: docs/store.md): pull the entries this "
                           "warm-up needs and the cache lacks, signed by a key of ZEROJIT_STORE_VERIFY_KEYS, before "
                           "compiling the rest (a store down: compile locally)"),
        push=typer.Option(False, "--push", metavar="", help="with --store: publish what this warm-up holds and the "
                          "store lacks, signed with ZEROJIT_STORE_SIGNING_KEY (required)"),
        connect_timeout=typer.Option(CONNECT_TIMEOUT, "--connect-timeout", metavar="S",
                                     help="seconds to connect to the store"),
        op_timeout=typer.Option(OPERATION_TIMEOUT, "--op-timeout", metavar="S",
                                help="seconds for each store operation"),
    )


_WARMUP_STORE = _warmup_store_options()


def _check_store_timeouts(command: str, connect_timeout: float, op_timeout: float) -> None:
    """Refuse (exit 2) a ``--connect-timeout`` or ``--op-timeout`` that is no deadline (not a
    finite number of seconds in ``(0, 3600]``), with or without ``--store``: a typo either way."""
    from zerojit.fleet.store import MAX_TIMEOUT, timeout_ok

    for flag, value in (("--connect-timeout", connect_timeout), ("--op-timeout", op_timeout)):
        if not timeout_ok(value):
            _refuse(command, f"{flag} {value!r}: give a positive number of seconds, at most {MAX_TIMEOUT:g}")


def _warmup_store(command: str, store: Optional[str], push: bool, connect_timeout: float, op_timeout: float) -> Any:
    """The store of ``--store`` opened for the warm-up (None without one), checked before anything
    compiles: a bad URL or timeout, no trusted key, ``--push`` without a signing key or without
    ``--store`` are refused (exit 2). Each command checks the timeouts first, with or without a
    store (:func:`_check_store_timeouts`)."""
    if store is None:
        if push:
            _refuse(command, "--push needs --store URL: the store to publish the warm-up's entries to")
        return None
    from zerojit.warmup_store import open_store

    return open_store(store, push=push, connect_timeout=connect_timeout, timeout=op_timeout)


@app.command("run", cls=_Command)
@_reflowed
@_user_errors("run")
@_stdout_is_for("json_out")
def run_command(
    ctx: typer.Context,
    config: str = typer.Option("dsv4-like", "--config", metavar="NAME|FILE", help=_config_help()),
    trace: Optional[str] = typer.Option(None, "--trace", metavar="FILE",
                                        help="Azure-format trace CSV (default: the shipped 2,000-request slice)"),
    requests: Optional[int] = typer.Option(None, "--requests", min=1, metavar="N", help="replay only the first N requests"),
    device: Optional[str] = typer.Option(None, "--device", metavar="DEV", help="cpu or cuda (default: cuda when available)"),
    target: str = typer.Option("cuda:90", "--target", metavar="TARGET", help="compile-only target on cpu (e.g. cuda:80)"),
    warmup: str = typer.Option("zerojit", "--warmup", metavar="MODE",
                               help="zerojit; or, to compare, triton (Triton's own warmup(): compile, no load) or "
                               "none (plain JIT): these run the monitor in warn mode, take no --workers and need a "
                               "fresh process"),
    jit_monitor_mode: Optional[str] = jit_monitor_mode_option(
        default_help="default: fallback on a GPU, error under compile-only (--device cpu; what CI and tests use); "
        "with --warmup triton or none only warn"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, metavar="N",
                                          help="compile worker processes for a zerojit warm-up (default: one per "
                                          "core, at most one per 4 keys to compile, none when the cache is warm; 1: "
                                          "compile in this process; more than the cores: capped to the cores)"),
    check: Optional[int] = typer.Option(None, "--check", min=0, metavar="N",
                                        help="steps checked against the PyTorch references "
                                        "(cpu: in a TRITON_INTERPRET=1 child; default 0 on cpu, 8 on cuda); with "
                                        "--cuda-graphs also the first N graph steps against their eager launch"),
    cuda_graphs: bool = typer.Option(False, "--cuda-graphs", metavar="",
                                     help="capture decode steps as CUDA graphs, one per batch-size bucket (the "
                                     "config's cuda_graph_batch_sizes, padded), and replay them; steps with "
                                     "prefills or more requests run eagerly; needs a GPU"),
    dcp_size: Optional[int] = typer.Option(None, "--dcp-size", metavar="S",
                                           help="decode-context-parallel size (one process plays one rank)"),
    dcp_rank: Optional[int] = typer.Option(None, "--dcp-rank", metavar="R", help="the rank this process plays"),
    num_speculative_tokens: Optional[int] = typer.Option(None, "--num-speculative-tokens", metavar="N",
                                                         help="draft tokens per decode step"),
    backend: Optional[str] = typer.Option(None, "--backend", metavar="NAME", help="attention backend (default: the config's)"),
    seed: int = typer.Option(0, "--seed", metavar="N", help="seeds the top-k draws and the check sampling"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE",
                                           help="also write the report as JSON to this file ('-': standard output; "
                                           "the report then goes to stderr)"),
    no_progress: bool = _no_progress_option("progress bars"),
    no_generic: bool = _no_generic_option(),
    swap: str = _swap_option(),
    fallback_miss: str = _fallback_miss_option(),
    background_workers: int = _background_workers_option(),
    cut_keyspace: bool = typer.Option(False, "--cut-keyspace", hidden=True,  # benchmarks/fallback_runner.py
                                      help="benchmarks only: drop one warmed class per kernel after the primer"),
    no_learned: bool = _no_learned_option(),
    store: Optional[str] = _WARMUP_STORE["store"],
    push: bool = _WARMUP_STORE["push"],
    connect_timeout: float = _WARMUP_STORE["connect_timeout"],
    op_timeout: float = _WARMUP_STORE["op_timeout"],
) -> None:
    """Replay a request trace through the sparse-MLA kernels with zero runtime JIT (the main job).

    Loads the config, builds the model and a packed paged KV cache under the registry (their layers
    register their kernels), warms up, installs the JIT monitor, replays the trace through a
    continuous-batching scheduler (every step builds its attention metadata through the seven
    kernels) and reports. The monitor serves in fallback mode on a GPU (a miss a generic variant
    serves launches it at once and compiles the key in the background; swaps land between
    scheduler steps) and in error mode under compile-only (a miss fails: what CI and tests use).
    Exit status: 0 on success; 1 when something compiled on the request path after a zerojit
    warm-up (in fallback mode: a request-path compile; background compiles are reported, not
    failures) or a check failed; 2 for invalid input (config, trace, options, flags that
    conflict, the environment, a --json that cannot be written). With --jit-monitor-mode off
    nothing is counted: 1 only when the request-path clock saw a compile or a check failed.
    """
    import json

    from zerojit.runner.config import load_config
    from zerojit.runner.engine import WARMUP_MODES, RunOptions, option_conflicts, run

    _check_output_file("run", "--json", json_out)
    _check_store_timeouts("run", connect_timeout, op_timeout)
    if warmup not in WARMUP_MODES:
        _refuse("run", f"--warmup {warmup!r}: must be one of {', '.join(WARMUP_MODES)}")
    _check_target("run", target)
    paired = dict(warmup=warmup, jit_monitor_mode=jit_monitor_mode, workers=workers, cut_keyspace=cut_keyspace)
    for a, b, why in option_conflicts(**paired):
        _refuse("run", f"{_given(ctx, a, paired[a])} and {_given(ctx, b, paired[b])} conflict: {why}")
    overrides, given_as = _config_overrides(ctx, dcp_size=dcp_size, dcp_rank=dcp_rank,
                                            num_speculative_tokens=num_speculative_tokens)
    if overrides:  # checked here to name a bad value's flag (run() knows only fields); it loads it again
        load_config(config, given_as=given_as, **overrides)
    if store is not None and warmup != "zerojit":
        source = ctx.get_parameter_source("store")  # (named, not shown: the URL may hold a password)
        given = "ZEROJIT_STORE" if source is not None and source.name == "ENVIRONMENT" else "--store"
        _refuse("run", f"{given} and {_given(ctx, 'warmup', warmup)} conflict: only a zerojit warm-up pulls from a store")
    options = RunOptions(
        config=config, trace=trace, requests=requests, device=device, target=target, warmup=warmup,
        jit_monitor_mode=jit_monitor_mode, check=check, dcp_size=dcp_size, dcp_rank=dcp_rank,
        num_speculative_tokens=num_speculative_tokens, backend=backend, seed=seed, progress=_progress(no_progress),
        workers=workers,  # RunOptions caps it (the report says so); the note is said here, below
        generic=not no_generic, swap=swap, fallback_miss=fallback_miss, background_workers=background_workers,
        cut_keyspace=cut_keyspace, cuda_graphs=cuda_graphs,
        learned=not no_learned,
    )
    _check_fallback_flags("run", ctx, options.monitor_mode)  # (before the store is opened)
    if options.monitor_mode == "fallback":
        options = dataclasses.replace(options, background_workers=_capped_background_workers("run", background_workers))
    options = dataclasses.replace(options, store=_warmup_store("run", store, push, connect_timeout, op_timeout))
    # The flag wins over ZEROJIT_JIT_MONITOR for the process monitor too, which otherwise reads
    # the variable when warm-up completes (a value the option took from it is already checked).
    # A run that serves in fallback mode has the process's one fallback server in its own
    # monitor: the process monitor stays off then.
    from_flag = ctx.get_parameter_source("jit_monitor_mode").name == "COMMANDLINE"
    fallback = options.monitor_mode == "fallback"
    apply_jit_monitor_mode("off" if fallback else jit_monitor_mode if from_flag else None)
    _capped_workers("run", workers)
    report = run(options)
    typer.echo(report.summary())
    if json_out is not None:
        _write_output("run", "--json", json_out, json.dumps(report.to_dict(), indent=2))
    raise typer.Exit(1 if report.ok is False else 0)  # (None: monitor off, nothing counted to fail on)


def _config_overrides(ctx: typer.Context, **values: Optional[int]) -> tuple[dict[str, int], dict[str, str]]:
    """The config fields the current command's flags override (those given) and how each was
    given (``{"dcp_size": "--dcp-size 0"}``), for ``load_config(given_as=...)``: a bad value is
    then named as the flag, not blamed on the config file."""
    given = {k: v for k, v in values.items() if v is not None}
    return given, {k: _given(ctx, k, v) for k, v in given.items()}


def _given(ctx: typer.Context, name: str, value: Any) -> str:
    """How the user gave ``value`` to parameter ``name`` of the current command: ``--flag VALUE``,
    or ``ENV=VALUE`` when it came from the parameter's environment variable."""
    param = next(p for p in ctx.command.params if p.name == name)
    source = ctx.get_parameter_source(name)
    if source is not None and source.name == "ENVIRONMENT" and param.envvar:
        return f"{param.envvar}={value}"
    if isinstance(value, bool):  # a flag
        return max(param.opts, key=len)
    return f"{max(param.opts, key=len)} {value}"


@app.command(cls=_Command)
@_reflowed
@_user_errors("demo")
def demo(target: str = typer.Option("cuda:90", metavar="TARGET", help="compile-only target used when no GPU is present"),
         no_progress: bool = _no_progress_option("progress bar")) -> None:
    """Warm up the example kernel's key space and print the warm-up report.

    Exit status: 0 warmed up; 1 a key failed to compile; 2 invalid input (a TARGET this Triton
    cannot compile for, a cache folder that cannot serve, a bad ZEROJIT_JIT_MONITOR,
    TRITON_INTERPRET=1)."""
    import torch

    from zerojit import JitWarmupRegistry
    from zerojit.compile_only import compile_only
    from zerojit.examples.scale_add import scale_add

    _check_target("demo", target)
    apply_jit_monitor_mode(None)
    registry = JitWarmupRegistry()
    with registry.activate():
        scale_add.register_warmup(periods=(16, 7), aligned=(True, False))
    if torch.cuda.is_available():
        report = registry.warmup(progress=_progress(no_progress))
    else:
        with compile_only(target):
            report = registry.warmup(target=target, progress=_progress(no_progress))
    typer.echo(report.summary())


def _this_install(command: list[str]) -> list[str]:
    """``command`` with a Python interpreter or a bare ``zerojit`` as its program run by this
    install: this interpreter (``sys.executable``), or ``sys.executable -m zerojit``, as ``record``
    and ``exec`` run ``python``. A console script run from a virtual environment that is not
    activated would otherwise start whatever PATH finds first (the system's Python, without
    torch), and the child imports this zerojit, which another Python's packages do not fit: an
    interpreter is taken as :func:`zerojit.recording.names_this_python` takes it (a bare
    ``python``, ``python3`` or ``python3.N`` of this version, or this interpreter's path; another
    raises :class:`~zerojit.recording.ProgramError`). Any other program is run as given."""
    import sys

    from zerojit.recording import names_this_python

    program, rest = command[0], list(command[1:])
    if names_this_python(program, where="a child process"):
        return [sys.executable, *rest]
    if program == "zerojit":
        return [sys.executable, "-m", "zerojit", *rest]
    return [program, *rest]


@app.command(cls=_Command, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@_reflowed
@_user_errors("audit")
@_stdout_is_for("json_out")
def audit(
    command: list[str] = typer.Argument(..., metavar="COMMAND...", help="the command to run, after '--' (e.g. -- python serve.py --trace t.csv)"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE",
                                           help="also write the audit as JSON to this file ('-': standard output; "
                                           "the table and the script's output then go to stderr)"),
) -> None:
    """Run a script under the JIT monitor (warn) and print its coverage audit.

    The script runs as a child process with ZEROJIT_JIT_MONITOR=warn;
    its zerojit warm-up installs the monitor; it writes its audit at exit.
    A bare 'python' (python3, python3.N) or 'zerojit' as COMMAND runs with
    this zerojit's interpreter, as in record and exec; a path to another
    Python than this one is refused (exit 2), naming this one.

    Exit status: 1 when anything compiled, or an autotuner benchmarked, at
    run time, else the script's own status (128 + N when signal N killed
    it); 2 when the script ran no
    zerojit warm-up and exited 0, or cannot be run (another Python), or
    --json cannot be written.
    """
    import json
    import signal
    import subprocess
    import tempfile
    from pathlib import Path

    from zerojit.audit import AUDIT_OUT_ENV, CoverageAudit

    _check_output_file("audit", "--json", json_out)
    src_root = str(Path(__file__).resolve().parent.parent)  # the child imports this same zerojit
    with tempfile.TemporaryDirectory(prefix="zerojit-audit-") as tmp:
        out = os.path.join(tmp, "audit.json")
        env = dict(os.environ)
        env[_JIT_MONITOR_ENV] = "warn"
        env[AUDIT_OUT_ENV] = out
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
        try:
            rc = subprocess.call(_this_install(command), env=env)
        except OSError as e:  # exec says "Permission denied" for a directory
            is_dir = isinstance(e, PermissionError) and os.path.isdir(command[0])
            _refuse("audit", f"cannot run {command[0]!r}: {'it is a directory' if is_dir else e.strerror or e}")
        killed = None
        if rc < 0:  # killed by a signal: the shell's status for it (128 + N), not -N mod 256
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            killed, rc = f"the script was killed by {name}", 128 - rc
        if not os.path.exists(out) and killed:
            typer.echo(f"zerojit audit: {killed} before it wrote its audit", err=True)
            raise typer.Exit(rc)
        if not os.path.exists(out) and rc != 0:
            typer.echo(f"zerojit audit: the script exited with status {rc} before it wrote an audit (it failed, "
                       "or ran no zerojit warm-up), so nothing was monitored", err=True)
            raise typer.Exit(rc)
        if not os.path.exists(out):
            typer.echo("zerojit audit: the script wrote no audit: it ran no zerojit warm-up (or exited "
                       "through os._exit), so nothing was monitored", err=True)
            raise typer.Exit(2)
        result = CoverageAudit.from_dict(json.loads(Path(out).read_text()))
    typer.echo(result.table())
    if json_out is not None:
        _write_output("audit", "--json", json_out, result.to_json())
    if rc != 0:
        typer.echo(f"zerojit audit: {killed or f'the script exited with status {rc}'}", err=True)
    raise typer.Exit(1 if not result.ok else rc)

_PROGRAM_HELP = ("the program, after '--': python SCRIPT ARGS, python -m MODULE ARGS, python -c CODE ARGS, SCRIPT.py ARGS "
                 "or zerojit ARGS")


def _tune_recorded(command: str, kernels: list) -> None:
    """On a GPU, before any program runs: tune the recorded tuning keys that hold no choice
    (:func:`zerojit.recorded_tuning.tune_recorded`) and say so in one line, with a note per key
    not tuned (exec: on stderr, beside its warm-up report)."""
    import torch

    from zerojit.recorded_tuning import tune_recorded
    from zerojit.triton_compat import current_target

    if not any(t.config is None and t.launch is not None for k in kernels for t in k.record.tunings):
        return  # nothing to tune (a manifest of no kernel needs no GPU either)
    t = current_target()
    outcome = tune_recorded(kernels, target=f"{t.backend}:{t.arch}", gpu=torch.cuda.get_device_name())
    for note in outcome.notes:
        typer.echo(f"zerojit {command}: note: {note}", err=command == "exec")
    line = outcome.line()
    if line:
        typer.echo(f"zerojit {command}: {line}", err=command == "exec")


def _manifest_target(command: str, target: Optional[str], path: str) -> Optional[str]:
    """The compile-only target to warm the manifest at ``path`` for: ``--target`` (checked first,
    before the file is read: a bad flag is named even beside a bad file); else None (the GPU
    here) where there is one; else the target the manifest was recorded for; else, for a
    manifest of no kernel (the program launched none, which a note says), None: there is nothing
    to compile. Refuses (exit 2) when there is neither a GPU nor a target to take; a manifest
    that cannot be read raises :class:`~zerojit.manifest.ManifestError`."""
    from zerojit.compile_only import current_target_name, is_target_name
    from zerojit.manifest import read_manifest

    if target is not None and target != "device":
        _check_target(command, target)
    manifest = read_manifest(path)
    if not manifest.kernels:
        typer.echo(f"zerojit {command}: note: the manifest holds no kernel (its program launched none): there is "
                   "nothing to warm", err=True)
    if target is not None:
        if target == "device":
            return None
        _check_target(command, target)
        return target
    if current_target_name() is not None:
        return None
    if is_target_name(manifest.target):
        return manifest.target
    if not manifest.kernels:  # the program launched nothing: nothing to compile, for no target
        return None
    if manifest.target != "device":  # neither a target nor what a GPU recording writes: an edited file
        _refuse(command, f"{path}: field 'target' is {manifest.target!r}, not a compile-only target (e.g. 'cuda:90') "
                "nor 'device': record the program again, or pass --target")
    _refuse(command, "no GPU is visible here and the manifest was recorded on a GPU: pass the compile-only target "
            "to warm for (e.g. --target cuda:90)")
    return None


@app.command(cls=_Command, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@_reflowed
@_user_errors("record")
@_stdout_is_for("output")
def record(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., metavar="COMMAND...", help=_PROGRAM_HELP),
    output: str = typer.Option("zerojit-manifest.json", "-o", "--output", metavar="MANIFEST",
                               help="the manifest file to write ('-': standard output; the program's "
                               "output and the summary then go to stderr)"),
    target: Optional[str] = typer.Option(None, "--target", metavar="TARGET",
                                         help="compile-only target (e.g. cuda:90): every launch is a dry launch, "
                                         "nothing executes and outputs are not computed (for a machine with no GPU)"),
    report: bool = typer.Option(False, "--report", metavar="", help="also print the generalisation report"),
) -> None:
    """Run an unmodified Python program and write the manifest of every Triton specialization it
    launched.

    The program runs in a child Python process (its own interpreter, as 'python app.py' would),
    whose Triton launches are recorded from before the program imports anything: raw launches of
    triton.jit functions, triton.autotune and triton.heuristics, and zerojit kernels. The
    manifest (docs/manifest.md) is written atomically, also when the program fails. With --target
    the launches are dry launches through the compile-only target: Triton's binder and cache
    lookup, compiling on a miss, nothing executed, so a CPU machine records a program that uses CPU
    tensors, and the program's outputs are not computed; where there is no GPU, --target is
    required. The program's hardware probes (a library asking Triton's driver for the GPU, as FLA
    does) still see this machine, not the target, so the manifest holds the kernels and configs
    the program picks here: record a GPU deployment's manifest on that GPU (a short run), then
    warm it anywhere with --target. Kernels defined at the top level of the script itself (its
    __main__) are carried by their source (the manifest is then code: it is written writable by
    its owner only, and a warm-up refuses one that others can write to); kernels defined inside a
    function are named and not carried. Exit status: the program's own; 2 when the program cannot
    be run (another Python than this one included) or an option is invalid, or there is neither a
    GPU nor --target (no manifest is written then).
    """
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from zerojit.compile_only import refuse_interpreter
    from zerojit.manifest import read_manifest, unimportable
    from zerojit.generalisation import growth_report
    from zerojit.recorded_tuning import untuned_report
    from zerojit.recording import Program
    from zerojit.triton_compat import gpu_driver_available

    _check_output_file("record", "--output", output)
    if target is not None:
        _check_target("record", target)
        refuse_interpreter()  # (the child's would come after the program started; exit 2 here instead)
    Program(command, where="a child Python process")  # refused here (exit 2), before a child starts
    if target is None and not gpu_driver_available():  # else the program's first launch fails: no driver
        _refuse("record", "no GPU is visible here: pass the compile-only target to record for (e.g. --target "
                "cuda:90): every launch is then a dry launch, which needs no GPU")
    src_root = str(Path(__file__).resolve().parent.parent)  # the child imports this same zerojit
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
    # A Ctrl-C reaches the child too (one process group): during its imports (torch, Triton: a second
    # or more) it ends it quietly, as the console script's own start does (_zerojit_entry), instead of
    # a KeyboardInterrupt traceback through them; record_child handles it from the program's start on.
    child = ("import os, signal, sys\n"
             "def _quiet(signum, frame):\n    os._exit(130)\n"
             "if signal.getsignal(signal.SIGINT) is signal.default_int_handler:\n"
             "    signal.signal(signal.SIGINT, _quiet)\n"
             "from zerojit.compile_only import InterpreterProcessError\n"
             "from zerojit.recording import ProgramError, record_child\n"
             "if signal.getsignal(signal.SIGINT) is _quiet:\n"
             "    signal.signal(signal.SIGINT, signal.default_int_handler)\ntry:\n"
             "    sys.exit(record_child(sys.argv[1], sys.argv[2] or None, sys.argv[3:]))\n"
             "except (ProgramError, InterpreterProcessError) as e:\n"
             "    print(f'zerojit record: {e}', file=sys.stderr)\n    sys.exit(2)\n"
             "except OSError as e:  # the manifest's (the program's own are its status)\n"
             "    print(f'zerojit record: the manifest: {e}', file=sys.stderr)\n    sys.exit(2)\n")
    # The child writes the manifest to a private file; this process writes it to --output (whole or
    # not at all, or to stdout), so a failed write is named as the flag, as in every command.
    recorded = os.path.join(ctx.with_resource(tempfile.TemporaryDirectory(prefix="zerojit-record-")), "manifest.json")
    proc = subprocess.Popen([sys.executable, "-c", child, recorded, target or "", *command], env=env)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:  # the child had the same Ctrl-C (one process group): let it write the manifest
        try:
            proc.wait(timeout=10)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):  # a second Ctrl-C, or a child that ignores it
            proc.kill()
            proc.wait()
        if os.path.exists(recorded):  # (not read: it may carry program source, so owner-writable only)
            _write_output("record", "--output", output, Path(recorded).read_text(encoding="utf-8"),
                          owner_writes_only=True)
        raise
    except _entry.Terminated:  # (`kill PID` reaches this process alone): the program goes with it, unrecorded
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a program that handles SIGTERM and goes on
            proc.kill()
            proc.wait()
        raise
    if not os.path.exists(recorded):
        raise typer.Exit(rc or 1)
    manifest = read_manifest(recorded)
    _write_output("record", "--output", output, Path(recorded).read_text(encoding="utf-8"),
                  owner_writes_only=bool(manifest.carries_source))
    if output != "-":
        typer.echo(f"wrote {output}")
    typer.echo(manifest.summary())
    unwarmable: dict[str, list[str]] = {}
    for kernel in manifest.kernels:
        why = unimportable(kernel)
        if why is not None:
            unwarmable.setdefault(why, []).append(kernel.name)
    for why, names in unwarmable.items():
        typer.echo(f"zerojit record: warning: a manifest cannot warm {', '.join(names)} (warmup and exec skip "
                   f"{'it' if len(names) == 1 else 'them'}): {why}", err=True)
    if report:
        typer.echo(growth_report(manifest, output if output != "-" else "MANIFEST"))
        untuned = untuned_report(manifest)
        if untuned:
            typer.echo(untuned)
    if rc != 0:
        typer.echo(f"zerojit record: the program exited with status {rc}", err=True)
    raise typer.Exit(rc)


@app.command("warmup", cls=_Command)
@_reflowed
@_user_errors("warmup")
@_stdout_is_for("json_out")
def warmup_command(
    manifest: str = typer.Option(..., "--manifest", metavar="MANIFEST", help="a manifest from zerojit record"),
    target: Optional[str] = typer.Option(None, "--target", metavar="TARGET",
                                         help="compile-only target (default: the GPU here, else the manifest's)"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, metavar="N",
                                          help="compile worker processes (default: chosen from the cores and the keys "
                                          "to compile, none when the cache is warm; 1: in this process)"),
    no_progress: bool = _no_progress_option("progress bar"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE",
                                           help="also write the report as JSON to this file (phases, workers' "
                                           "timeline; '-': standard output, the report then on stderr)"),
    no_learned: bool = _no_learned_option(),
    store: Optional[str] = _WARMUP_STORE["store"],
    push: bool = _WARMUP_STORE["push"],
    connect_timeout: float = _WARMUP_STORE["connect_timeout"],
    op_timeout: float = _WARMUP_STORE["op_timeout"],
) -> None:
    """Compile (and on a GPU load) every specialization a manifest recorded, and print the report.

    Each specialization is rebuilt from the manifest (WarmupTensors of the recorded dtype and
    alignment, ints in their recorded classes, constexprs by value, the launch options). A kernel
    whose source changed since recording, recorded with another Triton, or no longer importable
    is skipped and listed, naming what differs. Keys of these kernels that missed after earlier
    warm-ups into this cache folder (the learned-keys file: zerojit learned show) are warmed too,
    unless --no-learned. The kernels' modules are imported with the current
    folder on sys.path, as 'python -m' has it: run from the folder the program was recorded in.
    On a GPU, the recorded tuning keys of triton.autotune kernels that hold no choice (a
    compile-only recording) are then tuned on buffers of the recorded layout and kept in each
    kernel's tuning file, which exec reads. Exit status: 0 warmed; 1 a corrupted or truncated manifest, a key failed to compile, or every
    recorded kernel was skipped (nothing warmed); 2 invalid input (no such MANIFEST, a TARGET this
    Triton cannot compile for, no GPU and no target).
    """
    from zerojit.compile_only import compile_only
    from zerojit.registry import JitWarmupRegistry, WarmupError

    _check_input_file("warmup", "manifest", manifest)
    _check_output_file("warmup", "--json", json_out)
    _check_store_timeouts("warmup", connect_timeout, op_timeout)
    chosen = _manifest_target("warmup", target, manifest)
    opened = _warmup_store("warmup", store, push, connect_timeout, op_timeout)
    _current_folder_importable()
    def write_json(report: Any) -> None:
        if json_out:
            import json

            _write_output("warmup", "--json", json_out, json.dumps(report.to_dict(), indent=2))

    # (the machine view: a recorded module imports as the program imports it, probes and all)
    with (compile_only(chosen, machine_view=True) if chosen else contextlib.nullcontext()):
        try:
            registry = JitWarmupRegistry()
            report = registry.warmup(manifest=manifest, workers=_capped_workers("warmup", workers),
                                     progress=_progress(no_progress), target=chosen or "device",
                                     learned=not no_learned, store=opened)
        except WarmupError as e:  # a failed key: reported (exit 1) by _user_errors, its report written first
            write_json(e.report)
            raise
        if not chosen:  # a GPU: the recorded tuning keys with no choice are tuned, into their tuning files
            from zerojit.manifest import RecordedKernel

            _tune_recorded("warmup", [k for k in registry.kernels if isinstance(k, RecordedKernel)])
    typer.echo(report.summary())
    write_json(report)
    _nothing_warmed("warmup", report)


@app.command("exec", cls=_Command, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@_reflowed
@_user_errors("exec")
@_stdout_is_for("json_out")
def exec_command(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., metavar="COMMAND...", help=_PROGRAM_HELP),
    manifest: str = typer.Option(..., "--manifest", metavar="MANIFEST", help="a manifest from zerojit record"),
    target: Optional[str] = typer.Option(None, "--target", metavar="TARGET",
                                         help="compile-only target: the program's launches are dry launches (default: "
                                         "the GPU here, else the manifest's)"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, metavar="N",
                                          help="compile worker processes for the warm-up (default: chosen from the "
                                          "cores and the keys to compile; 1: in this process)"),
    jit_monitor_mode: Optional[str] = jit_monitor_mode_option(
        default_help="default: fallback on a GPU, error under a compile-only target (what CI and tests use)"),
    no_progress: bool = _no_progress_option("progress bar"),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE",
                                           help="also write the warm-up report and the monitor's counts as JSON to "
                                           "this file ('-': standard output; the program's output then goes to "
                                           "stderr)"),
    no_generic: bool = _no_generic_option(),
    swap: str = _swap_option(),
    fallback_miss: str = _fallback_miss_option(),
    background_workers: int = _background_workers_option(),
    no_learned: bool = _no_learned_option(),
    store: Optional[str] = _WARMUP_STORE["store"],
    push: bool = _WARMUP_STORE["push"],
    connect_timeout: float = _WARMUP_STORE["connect_timeout"],
    op_timeout: float = _WARMUP_STORE["op_timeout"],
) -> None:
    """Warm a manifest, install the JIT monitor, then run the unmodified program in this process.

    The program's code is imported as 'python app.py' would: its folder (for -m and -c, the
    current one) first on sys.path, not the folder it was recorded in, so a copy of the program
    warms and runs its own kernels. Keys of the recorded kernels that missed in earlier runs
    (the learned-keys file beside the cache, zerojit learned show) are warmed too, unless
    --no-learned; each miss of this run is added to it. The warm-up report goes to stderr. The program's raw launches
    of recorded kernels are counted as hits (and are dry launches under a compile-only target:
    outputs are not computed). In error mode a specialization the manifest lacks is blocked
    before compiling, ending the program: the error names the kernel, where the program launched
    it, and each argument whose class differs from the nearest recorded one. A kernel defined in
    the script itself (carried by its source) is rebuilt for the warm-up and bound to the
    program's function at its first launch, when its source hash (its source, starting line,
    the globals and functions it reads) is the recorded one; otherwise it is named in one line and
    compiles as Triton would. Generic variants are warmed in fallback mode only (--no-generic: none
    there either). A triton.autotune
    kernel's choices recorded on a GPU are put back into its autotuner before the program runs,
    so their tuning keys benchmark nothing; on a GPU its recorded tuning keys with no choice (a
    recording under a compile-only target) are tuned at warm-up on buffers of the recorded
    layout and kept in its tuning file; any other tuning key gets the default policy (the
    nearest tuned key's config, else the first surviving config compiled for the launch) instead
    of a benchmark, said in one line. An exception the program raises is
    printed as python prints it. The monitor serves in fallback mode on a GPU (a miss a generic
    variant serves launches it at once and compiles the key in a background worker; an unmodified
    program never calls zerojit.serving.between_requests(), so with the default --swap
    between-requests it keeps the generic variant unless it does: --swap immediate takes the
    compiled one at once) and in error mode under a compile-only target (what CI and tests use).
    A closing line counts the monitored launches (every launch of a recorded kernel, bound or not, and
    every launch the monitor blocked), runtime compiles and any autotune benchmarks (warn mode
    logs each autotuner's tuning key once, however often it benchmarks; in fallback mode also
    request-path compiles, fallback launches, background compiles and swaps, after waiting for the
    background compiles with a deadline); with --jit-monitor-mode off nothing is counted, and it
    says so. Exit status: 1 when anything compiled (or was blocked) at run time (in fallback mode:
    on the request path; background compiles are reported, not failures), or for a corrupted
    manifest or one recorded with another Triton version, else the program's own (1 for an
    exception, as python's; the only status with the monitor off); 2 when the program cannot be
    run or an option is invalid, or the manifest carries program source and other users can
    write to it (docs/manifest.md: a manifest that carries source is code).
    """
    from zerojit import monitor as _monitor
    from zerojit.compile_only import compile_only
    from zerojit.manifest import RecordedKernel, restore_tunings
    from zerojit.monitor import RuntimeJitError
    from zerojit.recorded_tuning import install_default_policy
    from zerojit.recording import Program, count_raw_launches
    from zerojit.registry import JitWarmupRegistry, count

    _check_input_file("exec", "manifest", manifest)
    _check_output_file("exec", "--json", json_out)
    _check_store_timeouts("exec", connect_timeout, op_timeout)
    program = Program(command)  # (its folder goes first on sys.path, as python puts it: the warm-up imports from it)
    chosen = _manifest_target("exec", target, manifest)
    mode = jit_monitor_mode or ("error" if chosen else "fallback")  # (chosen: a compile-only target)
    _check_fallback_flags("exec", ctx, mode)
    opened = _warmup_store("exec", store, push, connect_timeout, op_timeout)
    apply_jit_monitor_mode(mode)
    _configure_fallback("exec", mode, swap, fallback_miss, background_workers)
    blocked = None
    # (the machine view: the program's hardware probes see this machine; its launches, the target)
    with (compile_only(chosen, machine_view=True) if chosen else contextlib.nullcontext()):
        registry = JitWarmupRegistry()
        report = registry.warmup(manifest=manifest, workers=_capped_workers("exec", workers),
                                 progress=_progress(no_progress), target=chosen or "device", program_folder=False,
                                 # generic variants serve fallback mode only: in error and warn mode a
                                 # miss compiles (or is blocked) whatever was warmed, so they would only
                                 # double the warm-up (FLA's: 27 keys, 18.6 s -> 46 s)
                                 generic=mode == "fallback" and not no_generic, learned=not no_learned,
                                 store=opened)
        typer.echo(report.summary(), err=True)
        recorded = [k for k in registry.kernels if isinstance(k, RecordedKernel)]
        if not chosen:  # a GPU: the recorded tuning keys with no choice are tuned now, before the program runs
            _tune_recorded("exec", recorded)
        tuned, notes = restore_tunings(recorded)
        for note in notes:
            typer.echo(f"zerojit exec: note: {note}", err=True)
        if tuned:
            typer.echo(f"zerojit exec: {count(tuned, 'autotune choice')} of the recording restored (their tuning keys "
                       "benchmark nothing)", err=True)
        policy = install_default_policy(recorded)  # an untuned tuning key: a default choice, never a benchmark
        on_bound = None
        if mode == "fallback":  # a __main__ kernel bound at its first launch: its misses served as a module's are
            from zerojit import serving

            on_bound = serving.refresh
        restore = count_raw_launches(recorded, note=lambda m: typer.echo(f"zerojit exec: {m}", err=True),
                                     serve_tuner=policy.install, on_bound=on_bound)
        try:
            with _entry.default_termination():  # SIGTERM as python gives it to the program
                rc = program.run(propagate=(RuntimeJitError,))  # its own exceptions: its traceback, status 1
        except RuntimeJitError as e:  # a blocked compile: explained where the program launched it
            blocked, rc = e, 1
        finally:
            restore()
            policy.restore()
        untuned = policy.line(compile_only=bool(chosen))
        if untuned:
            typer.echo(f"zerojit exec: {untuned}", err=True)
        idle = None
        if mode == "fallback":  # the background compiles the program started, waited for with a deadline
            from zerojit import serving
            from zerojit.runner.engine import BACKGROUND_WAIT_S

            idle = serving.wait_idle(BACKGROUND_WAIT_S)
    if blocked is not None:
        head, _, rest = str(blocked).removeprefix("zerojit: ").partition("\n")
        site = program.launch_site(blocked)
        lines = [f"zerojit exec: {head}", *([f"  launched at {site}"] if site else []), *([rest] if rest else [])]
        typer.echo("\n".join(lines), err=True)
    watching = _monitor.current()
    counts = watching.counts() if watching is not None else None
    served: dict[str, int] = {}
    if counts is not None:
        # every launch the program made that the monitor saw: those that ran, and those it blocked
        # before they compiled (each blocked miss is one refused launch, which never reached the observer)
        launches = counts.launches + counts.blocked
        compiles = counts.runtime_compiles + counts.direct_compiles + counts.direct_disk_loads
        # (counts without the serving fields: a runtime compile that was not blocked waited on the request path)
        served = {name: getattr(counts, name, default) for name, default in (
            ("request_path_compiles", compiles - counts.blocked), ("fallback_launches", 0), ("background_compiles", 0),
            ("swaps", 0), ("background_failures", 0))}
        line = (f"zerojit exec: {count(launches, 'monitored launch', 'monitored launches')}, "
                f"{count(compiles, 'runtime compile')}" + (f" ({counts.blocked} blocked)" if counts.blocked else "")
                + (f", {count(counts.benchmarks, 'autotune benchmark')}" if counts.benchmarks else ""))
        if mode == "fallback":
            line += (f"; {count(served['request_path_compiles'], 'request-path compile')}, "
                     f"{count(served['fallback_launches'], 'fallback launch', 'fallback launches')}, "
                     f"{count(served['background_compiles'], 'background compile')}"
                     + ("" if idle in (None, True) else " (still compiling at the deadline)")
                     + (f" ({served['background_failures']} failed: their generic variants kept serving)"
                        if served["background_failures"] else "")
                     + f", {count(served['swaps'], 'swap')}")
        typer.echo(line, err=True)
    elif mode == "off":  # nothing installed: a compile at run time goes unseen, and the status cannot say
        typer.echo("zerojit exec: monitor off: runtime compiles not counted", err=True)
    if counts is None:
        failed = False
    elif mode == "fallback":
        failed = served["request_path_compiles"] > 0
    else:
        failed = counts.any_runtime_compile
    status = 1 if failed else rc
    if json_out is not None:
        import json

        data = {"warmup": report.to_dict(), "monitor_mode": mode,
                "launches": launches if counts is not None else None,
                "runtime_compiles": compiles if counts is not None else None,
                "blocked": counts.blocked if counts is not None else None,
                "benchmarks": counts.benchmarks if counts is not None else None,
                **{name: served.get(name) for name in ("request_path_compiles", "fallback_launches",
                                                      "background_compiles", "swaps", "background_failures")},
                "background_idle": idle, "untuned_tuning_keys": len(policy.decisions), "exit_status": status}
        _write_output("exec", "--json", json_out, json.dumps(data, indent=2))
    raise typer.Exit(status)


@contextlib.contextmanager
def _key_space(command: str, what: str, ctx: typer.Context, *, config: str, target: str, backend: Optional[str],
               dcp_size: Optional[int], dcp_interleave: Optional[int], num_speculative_tokens: Optional[int],
               manifest: Optional[str]) -> Iterator[tuple[Any, Any]]:
    """The registry and model configuration of ``zerojit COMMAND``'s key space (a model's, or a
    manifest's with ``cfg`` None), yielded inside the compile-only block of ``target``, once the
    flags are checked (exit 2: a ``what`` for a target that cannot be, flags that conflict)."""
    from zerojit.cache import current_target_name
    from zerojit.compile_only import compile_only
    from zerojit.registry import JitWarmupRegistry
    from zerojit.runner.config import load_config
    from zerojit.runner.model import register_model

    if target != "device":
        _check_target(command, target)
    elif current_target_name() is None:
        _refuse(command, f"--target device: no GPU is visible here; pass the compile-only target the {what} is for "
                "(e.g. --target cuda:90): it needs no GPU")
    apply_jit_monitor_mode(None)
    overrides, given_as = _config_overrides(ctx, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                                            num_speculative_tokens=num_speculative_tokens)
    if manifest is not None:
        _check_input_file(command, "manifest", manifest)
        given = [_given(ctx, n, v) for n, v in dict(config=config, backend=backend, **overrides).items()
                 if ctx.get_parameter_source(n).name != "DEFAULT"]
        if given:
            _refuse(command, f"--manifest and {', '.join(given)} conflict: a manifest names its kernels and "
                    "specializations itself")
    if dcp_size is not None:
        overrides.setdefault("dcp_rank", 0)
    with (compile_only(target) if target != "device" else contextlib.nullcontext()):
        if manifest is not None:
            cfg, registry = None, JitWarmupRegistry()
            _current_folder_importable()
        else:
            cfg = load_config(config, given_as=given_as, **overrides)
            registry = register_model(cfg, backend)
        yield registry, cfg


@contextlib.contextmanager
def _warmed_for_export(command: str, what: str, ctx: typer.Context, *, config: str, target: str,
                       workers: Optional[int], backend: Optional[str], dcp_size: Optional[int],
                       dcp_interleave: Optional[int], num_speculative_tokens: Optional[int], no_progress: bool,
                       manifest: Optional[str]) -> Iterator[Any]:
    """Warm a model's key space (or a manifest's specializations) for ``target`` as ``zerojit
    COMMAND`` (bundle export, store push) does before it publishes the result, a ``what``; yields
    the report inside the compile-only block (exit 2 on invalid flags, 1 when nothing was warmed)."""
    from zerojit.runner.engine import usable_cores

    with _key_space(command, what, ctx, config=config, target=target, backend=backend, dcp_size=dcp_size,
                    dcp_interleave=dcp_interleave, num_speculative_tokens=num_speculative_tokens,
                    manifest=manifest) as (registry, cfg):
        report = registry.warmup(cfg, manifest=manifest, workers=_capped_workers(command, workers) or usable_cores(),
                                 progress=_progress(no_progress), target=target)
        for skipped in report.skipped:
            typer.echo(f"zerojit {command}: SKIPPED {skipped}", err=True)
        _nothing_warmed(command, report)  # (before anything is published: nothing empty)
        yield report


bundle_app = typer.Typer(cls=_Group, no_args_is_help=True,
                         help="Cache bundles: a model's compiled key space as one archive.")
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("export", cls=_Command)
@_reflowed
@_user_errors("bundle export")
def bundle_export(
    ctx: typer.Context,
    output: str = typer.Option(..., "-o", "--output", metavar="FILE", help="the bundle file to write (.tar.gz)"),
    config: str = typer.Option("dsv4-like", "--config", metavar="NAME|FILE", help=_config_help()),
    target: str = typer.Option("cuda:90", "--target", metavar="TARGET",
                               help="compile-only target (e.g. cuda:90), or 'device' for the GPU here"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, metavar="N",
                                          help="compile worker processes (default and most: the cores this process "
                                          "can use)"),
    backend: Optional[str] = typer.Option(None, "--backend", metavar="NAME", help="attention backend (default: the config's)"),
    dcp_size: Optional[int] = typer.Option(None, "--dcp-size", metavar="S", help="decode-context-parallel size"),
    dcp_interleave: Optional[int] = typer.Option(None, "--dcp-interleave", metavar="N", help="DCP interleave"),
    num_speculative_tokens: Optional[int] = typer.Option(None, "--num-speculative-tokens", metavar="N",
                                                         help="draft tokens per decode step"),
    no_progress: bool = _no_progress_option("progress bar"),
    manifest: Optional[str] = typer.Option(None, "--manifest", metavar="MANIFEST",
                                           help="bundle a recording's specializations (zerojit record) instead of a "
                                           "model's key space; the model flags are then refused"),
) -> None:
    """Warm up a model's whole key space (or a manifest's specializations) for TARGET and write it
    as one bundle.

    Needs no GPU for a compile-only target (run it with CUDA_VISIBLE_DEVICES="" on a GPU host
    to prove it). The manifest records the Triton version and build, Python, target, ptxas,
    kernels and keys. A manifest's kernels are imported with the current folder on sys.path, as
    'python -m' has it; a skipped kernel is listed on stderr. Exit status: 0 written; 1 warm-up
    failed, or every kernel of the manifest was skipped (no bundle is written); 2 invalid input
    (config, TARGET, output path, a cache folder that cannot serve, a bad ZEROJIT_JIT_MONITOR,
    TRITON_INTERPRET=1).
    """
    from zerojit.cache import export_bundle
    from zerojit.registry import count

    _check_output_file("bundle export", "--output", output, stdout=False)
    with _warmed_for_export("bundle export", "bundle", ctx, config=config, target=target, workers=workers,
                            backend=backend, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                            num_speculative_tokens=num_speculative_tokens, no_progress=no_progress,
                            manifest=manifest) as report:
        with _output_errors("bundle export", "--output", output):
            manifest = export_bundle(report, output)
    origin = report.stats.origin(len({id(getattr(v, "compiled", v)) for v in report.variants}))
    typer.echo(f"wrote {output}: {count(report.num_keys, 'key')} ({origin}) in {report.seconds:.1f} s")
    typer.echo(manifest.summary())


@bundle_app.command("import", cls=_Command)
@_reflowed
@_user_errors("bundle import")
def bundle_import(
    file: str = typer.Argument(..., metavar="FILE", help="the bundle to install"),
    target: Optional[str] = typer.Option(None, "--target", metavar="TARGET",
                                         help="the target it must be for (default: this GPU's; required "
                                         "where there is no GPU)"),
    cache_dir: Optional[str] = typer.Option(None, "--cache-dir", metavar="DIR",
                                            help="Triton cache folder (default: TRITON_CACHE_DIR)"),
) -> None:
    """Verify a bundle (manifest fields, every file's SHA-256) and install it into the Triton cache.

    A bundle for another Triton build, Python or target is refused, naming the field; a truncated
    or corrupted one is refused; either way nothing is installed. Where there is no GPU, --target
    says which GPU the bundle is meant for (there is nothing here to check its target against).
    A cache entry whose lock another process holds (another warm-up compiling it) is waited for,
    at most a compile's wall-time limit (docs/start-up.md, "Hung compiles").
    Exit status: 0 installed; 1 refused, or an entry's lock held past that limit (naming its lock
    file); 2 invalid input (no such FILE or one that cannot be read, a TARGET this Triton cannot
    compile for, no --target without a GPU, a cache folder that cannot be written, --cache-dir '').
    """
    from zerojit.cache import import_bundle

    _check_input_file("bundle import", "bundle", file)
    if cache_dir == "":  # import_bundle(into='') would fall back to TRITON_CACHE_DIR
        _refuse("bundle import", "--cache-dir '': the folder is empty; give a folder, or leave the flag out to "
                "install into TRITON_CACHE_DIR")
    if target is not None:
        _check_target("bundle import", target, option="--target")
    result = import_bundle(file, target=target, into=cache_dir)
    typer.echo(result.summary())


@bundle_app.command("inspect", cls=_Command)
@_reflowed
@_user_errors("bundle inspect")
def bundle_inspect(
    file: str = typer.Argument(..., metavar="FILE", help="a bundle"),
    json_out: bool = typer.Option(False, "--json", metavar="", help="print the whole manifest as JSON"),
) -> None:
    """Verify a bundle without installing it, and print its manifest.

    Every file is read and checked against its SHA-256 and the manifest, as an import does, but
    not against this machine. Exit status: 0 printed; 1 not a sound bundle (truncated,
    corrupted, not a zerojit bundle); 2 no such FILE, or it cannot be read."""
    import json

    from zerojit.cache import verify_bundle

    _check_input_file("bundle inspect", "bundle", file)
    manifest = verify_bundle(file)
    typer.echo(json.dumps(manifest.to_dict(), indent=2) if json_out else manifest.summary())


store_app = typer.Typer(cls=_Group, no_args_is_help=True,
                        help="A fleet's shared store (Redis): a farm pushes signed entries, nodes pull them.")
app.add_typer(store_app, name="store")


def _store_options() -> tuple[Any, Any, Any]:
    """``--store URL``, ``--connect-timeout S`` and ``--op-timeout S`` (zerojit.fleet.store's deadlines;
    ``--timeout`` is ``store wait``'s)."""
    from zerojit.fleet.store import CONNECT_TIMEOUT, OPERATION_TIMEOUT

    return (typer.Option(..., "--store", metavar="URL", envvar="ZEROJIT_STORE",
                         help="the store: a redis:// or rediss:// (TLS) URL, e.g. redis://:PASSWORD@host:6379/0"),
            typer.Option(CONNECT_TIMEOUT, "--connect-timeout", metavar="S", help="seconds to connect to the store"),
            typer.Option(OPERATION_TIMEOUT, "--op-timeout", metavar="S", help="seconds for each store operation"))


_STORE, _CONNECT_TIMEOUT, _OP_TIMEOUT = _store_options()


@store_app.command("keygen", cls=_Command)
@_reflowed
@_user_errors("store keygen")
def store_keygen(
    output: str = typer.Option(..., "-o", "--output", metavar="DIR", help="the folder to write the key pair into"),
) -> None:
    """Write a new Ed25519 key pair for signing store entries into DIR.

    zerojit-store.key (PKCS#8 PEM, mode 0600): the farm's, named by ZEROJIT_STORE_SIGNING_KEY when
    it pushes. zerojit-store.pub (SubjectPublicKeyInfo PEM): every node's, listed in
    ZEROJIT_STORE_VERIFY_KEYS (':'-separated, several for a rotation). Exit status: 0 written; 2 a
    key file there already (never overwritten) or a folder that cannot be written."""
    from zerojit.fleet.signing import keygen

    private, public, kid = keygen(output)
    typer.echo(f"key {kid}: private {private} (the farm's: ZEROJIT_STORE_SIGNING_KEY), public {public} (every "
               "node's: ZEROJIT_STORE_VERIFY_KEYS)")


def _key_space_options() -> dict[str, Any]:
    return dict(
        config=typer.Option("dsv4-like", "--config", metavar="NAME|FILE", help=_config_help()),
        target=typer.Option("cuda:90", "--target", metavar="TARGET",
                            help="the target the nodes serve (a compile-only target, e.g. cuda:90, or 'device')"),
        backend=typer.Option(None, "--backend", metavar="NAME", help="attention backend (default: the config's)"),
        dcp_size=typer.Option(None, "--dcp-size", metavar="S", help="decode-context-parallel size"),
        dcp_interleave=typer.Option(None, "--dcp-interleave", metavar="N", help="DCP interleave"),
        num_speculative_tokens=typer.Option(None, "--num-speculative-tokens", metavar="N",
                                            help="draft tokens per decode step"),
        manifest=typer.Option(None, "--manifest", metavar="MANIFEST",
                              help="a recording's specializations (zerojit record) instead of a model's key space"),
    )


_SPACE = _key_space_options()


@store_app.command("push", cls=_Command)
@_reflowed
@_user_errors("store push")
def store_push(
    ctx: typer.Context,
    store: str = _STORE,
    connect_timeout: float = _CONNECT_TIMEOUT,
    op_timeout: float = _OP_TIMEOUT,
    config: str = _SPACE["config"],
    target: str = _SPACE["target"],
    workers: Optional[int] = typer.Option(None, "--workers", min=1, metavar="N",
                                          help="compile worker processes (default and most: the cores this process "
                                          "can use)"),
    backend: Optional[str] = _SPACE["backend"],
    dcp_size: Optional[int] = _SPACE["dcp_size"],
    dcp_interleave: Optional[int] = _SPACE["dcp_interleave"],
    num_speculative_tokens: Optional[int] = _SPACE["num_speculative_tokens"],
    no_progress: bool = _no_progress_option("progress bar"),
    manifest: Optional[str] = _SPACE["manifest"],
) -> None:
    """Warm a model's key space (or a manifest's specializations) for TARGET and publish every
    key's cache entry to the store, signed.

    Needs ZEROJIT_STORE_SIGNING_KEY (the private key zerojit store keygen wrote): without it the
    push is refused before anything is compiled. Each entry is one store value under an address
    of its Triton cache key and this build (Triton version and build, Python, target, ptxas,
    cache-relevant variables); an entry the store holds already is kept (of two pushers, one
    stores it and both succeed). Exit status: 0 pushed; 1 warm-up failed, or the store is down
    or did not answer in time; 2 invalid input (no signing key or not a usable one, a URL that
    is not redis:// or rediss://, the warm-up flags as for bundle export).
    """
    from zerojit.fleet.signing import signing_key_from_env
    from zerojit.fleet.store import open_store
    from zerojit.fleet.transfer import push_report

    key = signing_key_from_env()
    target_store = open_store(store, connect_timeout=connect_timeout, timeout=op_timeout)
    target_store.exists(["0" * 64])  # down: say so now, before a warm-up for nothing
    with _warmed_for_export("store push", "push", ctx, config=config, target=target, workers=workers,
                            backend=backend, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                            num_speculative_tokens=num_speculative_tokens, no_progress=no_progress,
                            manifest=manifest) as report:
        result = push_report(target_store, report, key)
    typer.echo(f"{target_store.name}: {result.summary()}, signed by key {key.key_id}")


def _store_needs(command: str, ctx: typer.Context, *, store: str, connect_timeout: float, op_timeout: float,
                 target: str, manifest: Optional[str], **space: Any) -> tuple[Any, list[str], dict]:
    """The store, the cache entries the key space needs, its generic variants' included as
    ``store push`` pushes them (named, nothing compiled: :func:`zerojit.fleet.needs.needed_entry_names`)
    and the build identity they must be of."""
    from zerojit.cache import current_target_name
    from zerojit.fleet.entry import build_identity
    from zerojit.fleet.needs import key_space_jobs, needed_entry_names
    from zerojit.fleet.store import open_store

    opened = open_store(store, connect_timeout=connect_timeout, timeout=op_timeout)
    with _key_space(command, "store", ctx, target=target, manifest=manifest, **space) as (registry, cfg):
        jobs, skipped = key_space_jobs(registry, cfg, manifest)
        for s in skipped:
            typer.echo(f"zerojit {command}: SKIPPED {s}", err=True)
        names = needed_entry_names(jobs)
        build = build_identity(target if target != "device" else current_target_name())
    return opened, names, build




@store_app.command("status", cls=_Command)
@_reflowed
@_user_errors("store status")
def store_status(
    ctx: typer.Context,
    store: str = _STORE,
    connect_timeout: float = _CONNECT_TIMEOUT,
    op_timeout: float = _OP_TIMEOUT,
    config: str = _SPACE["config"],
    target: str = _SPACE["target"],
    backend: Optional[str] = _SPACE["backend"],
    dcp_size: Optional[int] = _SPACE["dcp_size"],
    dcp_interleave: Optional[int] = _SPACE["dcp_interleave"],
    num_speculative_tokens: Optional[int] = _SPACE["num_speculative_tokens"],
    manifest: Optional[str] = _SPACE["manifest"],
) -> None:
    """Say how many of the cache entries a key space needs for TARGET the store holds, and which
    are missing. Compiles nothing: each key's entry is named by Triton's own cache-key hashing.
    Exit status: 0 said; 1 the store is down or did not answer in time; 2 invalid input."""
    from zerojit.fleet.transfer import status

    opened, names, build = _store_needs("store status", ctx, store=store, connect_timeout=connect_timeout,
                                        op_timeout=op_timeout, target=target, manifest=manifest, config=config,
                                        backend=backend, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                                        num_speculative_tokens=num_speculative_tokens)
    typer.echo(f"{opened.name}: {status(opened, names, build).summary()}")


@store_app.command("wait", cls=_Command)
@_reflowed
@_user_errors("store wait")
def store_wait(
    ctx: typer.Context,
    timeout: float = typer.Option(..., "--timeout", metavar="S", min=0, max=86400,
                                  help="seconds to wait at most (up to a day)"),
    store: str = _STORE,
    connect_timeout: float = _CONNECT_TIMEOUT,
    op_timeout: float = _OP_TIMEOUT,
    config: str = _SPACE["config"],
    target: str = _SPACE["target"],
    backend: Optional[str] = _SPACE["backend"],
    dcp_size: Optional[int] = _SPACE["dcp_size"],
    dcp_interleave: Optional[int] = _SPACE["dcp_interleave"],
    num_speculative_tokens: Optional[int] = _SPACE["num_speculative_tokens"],
    manifest: Optional[str] = _SPACE["manifest"],
) -> None:
    """Block until the store holds every cache entry a key space needs for TARGET (a node's
    start-up gate: the farm pushes, the node waits, then pulls). A store that is down counts as
    not ready yet. Exit status: 0 all there; 1 not all there after S seconds (the missing
    entries named, or the store named as down); 2 invalid input."""
    import time

    from zerojit.fleet.store import DeadlinePassed, StoreDown, open_store
    from zerojit.fleet.transfer import status

    deadline = time.monotonic() + timeout
    opened, names, build = _store_needs("store wait", ctx, store=store, connect_timeout=connect_timeout,
                                        op_timeout=op_timeout, target=target, manifest=manifest, config=config,
                                        backend=backend, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                                        num_speculative_tokens=num_speculative_tokens)
    why = None
    while True:
        left = deadline - time.monotonic()
        if why is not None:  # after the first try (always made: --timeout 0 checks once), each ends by --timeout
            if 0 < left < connect_timeout:  # (a connect has its own deadline only: cut to the time left)
                opened.close()
                opened = open_store(store, connect_timeout=left, timeout=op_timeout)
            opened.end_by(deadline)  # its operations too, also against a store that answers a byte at a time
        try:
            st = status(opened, names, build)
            if not st.missing:
                typer.echo(f"{opened.name}: {st.summary()}")
                return
            why = st.summary()
        except DeadlinePassed as e:  # --timeout ended this try: the last answer says more, if there was one
            why = why if why is not None else str(e)
        except StoreDown as e:
            why = str(e)
        left = deadline - time.monotonic()
        if left <= 0:
            typer.echo(f"zerojit store wait: not ready after {timeout:g} s: {why}", err=True)
            raise typer.Exit(1)
        time.sleep(min(1.0, left))


@store_app.command("gc", cls=_Command)
@_reflowed
@_user_errors("store gc")
def store_gc(
    keep_builds: int = typer.Option(..., "--keep-builds", min=1, metavar="N",
                                    help="keep the entries of the N builds pushed to most recently"),
    store: str = _STORE,
    connect_timeout: float = _CONNECT_TIMEOUT,
    op_timeout: float = _OP_TIMEOUT,
) -> None:
    """Drop the entries of every build but the N pushed to most recently (a build: Triton version
    and build, Python, target, ptxas, cache-relevant variables), and every value in zerojit's
    namespace that is no zerojit entry. Exit status: 0 done; 1 the store is down or did not
    answer in time; 2 invalid input."""
    from zerojit.fleet.store import open_store
    from zerojit.fleet.transfer import gc

    opened = open_store(store, connect_timeout=connect_timeout, timeout=op_timeout)
    typer.echo(f"{opened.name}: {gc(opened, keep_builds).summary()}")


learned_app = typer.Typer(cls=_Group, no_args_is_help=True,
                          help="The learned-keys file: keys that missed after warm-up, warmed at the next start-up.")
app.add_typer(learned_app, name="learned")


def _cache_dir_option() -> Any:
    return typer.Option(None, "--cache-dir", metavar="DIR", help="Triton cache folder (default: TRITON_CACHE_DIR)")


def _learned_target_option() -> Any:
    return typer.Option(None, "--target", metavar="TARGET",
                        help="the target the keys were learned for, e.g. cuda:90 (default: the GPU here)")


def _learned_file_option() -> Any:
    return typer.Option(None, "--file", metavar="FILE",
                        help="the learned-keys file itself (instead of --cache-dir and --target)")


def _learned_file(command: str, cache_dir: Optional[str], target: Optional[str], file: Optional[str],
                  fallback_target: Optional[str] = None) -> str:
    """The learned-keys file a ``zerojit learned`` command works on: ``--file``, else the one
    of ``--cache-dir`` (default: TRITON_CACHE_DIR) for ``--target`` (default: the GPU's, else
    ``fallback_target``). Refuses (exit 2) flags that conflict, a folder given as the file, an
    empty ``--cache-dir``, a target this Triton cannot compile for, or no target at all."""
    from zerojit.compile_only import current_target_name
    from zerojit.learned import LearnedError, learned_path

    if file is not None:
        if cache_dir is not None or target is not None:
            given = " and ".join(f for f, v in (("--cache-dir", cache_dir), ("--target", target)) if v is not None)
            _refuse(command, f"--file and {given} conflict: --file names the learned-keys file itself")
        if os.path.isdir(file):
            _refuse(command, f"--file {file!r} is a directory, not a learned-keys file")
        return file
    if cache_dir == "":
        _refuse(command, "--cache-dir '': the folder is empty; give a folder, or leave the flag out for "
                "TRITON_CACHE_DIR")
    if target is not None:
        _check_target(command, target, option="--target")
    target = target or current_target_name() or fallback_target
    if target is None:
        _refuse(command, "no GPU is visible here: pass --target, the target the keys were learned for (e.g. "
                "--target cuda:90), or --file")
    try:
        return learned_path(cache_dir, target)
    except LearnedError as e:
        _refuse(command, str(e))
    raise AssertionError  # (_refuse exits)


@learned_app.command("show", cls=_Command)
@_reflowed
@_user_errors("learned show")
def learned_show(
    cache_dir: Optional[str] = _cache_dir_option(),
    target: Optional[str] = _learned_target_option(),
    file: Optional[str] = _learned_file_option(),
    json_out: bool = typer.Option(False, "--json", metavar="", help="print the records and skipped lines as JSON"),
) -> None:
    """List the learned keys: each key that missed after a warm-up into this cache folder, which
    the next warm-up of its kernel warms.

    One line per key: the kernel, its function, the key (Triton's class of each argument and the
    launch options) and, for a contract kernel, its CompileKey. A line of another Triton or
    target, or a corrupted one, is listed as skipped (the source of each kernel is checked at
    warm-up, not here). Exit status: 0 listed (also none: no file); 2 invalid input (flags that
    conflict, a TARGET this Triton cannot compile for, no target, a file that cannot be read).
    """
    import json

    from zerojit.learned import read_learned
    from zerojit.manifest import encode_exact
    from zerojit.reports import count

    path = _learned_file("learned show", cache_dir, target, file)
    try:
        records, skipped = read_learned(path, check_source=False)
    except OSError as e:
        _refuse("learned show", f"{path}: cannot be read: {e.strerror or e}")
    if json_out:
        typer.echo(json.dumps({
            "file": path,
            "records": [{"kernel": r.kernel, "function": r.function, "line": r.line, "key": repr(r.key),
                         "specialization": [list(p) for p in r.specialization], "options": dict(r.options),
                         "compile_key": None if r.compile_key is None else {n: encode_exact(v) for n, v in
                                                                              r.compile_key.items()},
                         "source_hash": r.source_hash, "target": r.target, "triton_version": r.triton_version}
                        for r in records],
            "skipped": [{"where": s.where, "kernel": s.kernel, "reason": s.reason} for s in skipped],
        }, indent=2))
        return
    if not records and not skipped:
        typer.echo(f"no learned keys ({path}: {'empty' if os.path.exists(path) else 'no such file'})")
        return
    typer.echo(f"{path}: {count(len(records), 'learned key')}")
    for r in records:
        key = "" if r.compile_key is None else "  CompileKey(" + ", ".join(
            f"{n}={v!r}" for n, v in r.compile_key.items()) + ")"
        # a kernel recorded raw is named after its function ("mod.fn"): said once, in the same columns
        name = f"{r.function:<61}" if r.kernel == r.function else f"{r.kernel:<30} {r.function:<30}"
        typer.echo(f"  {name}  {r.key!r}{key}")
    for s in skipped:
        typer.echo(f"  SKIPPED {s}")


@learned_app.command("clear", cls=_Command)
@_reflowed
@_user_errors("learned clear")
def learned_clear(
    cache_dir: Optional[str] = _cache_dir_option(),
    target: Optional[str] = _learned_target_option(),
    file: Optional[str] = _learned_file_option(),
) -> None:
    """Remove the learned-keys file (under its lock): the next warm-ups warm no learned key
    until keys miss again.

    Exit status: 0 removed (or there was none); 2 invalid input (flags that conflict, no target)
    or a file that cannot be removed.
    """
    from filelock import Timeout

    from zerojit.learned import clear
    from zerojit.reports import count

    path = _learned_file("learned clear", cache_dir, target, file)
    existed = os.path.exists(path)
    try:
        lines = clear(path)
    except (OSError, Timeout) as e:
        _refuse("learned clear", f"{path}: cannot be removed: {getattr(e, 'strerror', None) or e}")
    typer.echo(f"removed {path} ({count(lines, 'line')})" if existed
               else f"no learned keys to remove ({path}: no such file)")


@learned_app.command("merge", cls=_Command)
@_reflowed
@_user_errors("learned merge")
@_stdout_is_for("output")
def learned_merge(
    output: str = typer.Option(..., "-o", "--output", metavar="MANIFEST",
                               help="the manifest to write ('-': standard output)"),
    manifest: Optional[str] = typer.Option(None, "--manifest", metavar="BASE",
                                           help="a manifest (zerojit record) to add the learned keys to (default: "
                                           "a manifest of the learned keys alone)"),
    cache_dir: Optional[str] = _cache_dir_option(),
    target: Optional[str] = _learned_target_option(),
    file: Optional[str] = _learned_file_option(),
) -> None:
    """Write a manifest holding the learned keys (added to BASE's kernels, a kernel BASE lacks
    appended), which zerojit warmup, exec and bundle export warm like a recording.

    A learned key BASE holds already is added once; one of a kernel BASE recorded with another
    source or other parameters is skipped, named on stderr, as are lines of another Triton or
    target and corrupted ones. Without --target and a GPU, the target is BASE's. Exit status: 0
    written; 1 BASE is a corrupted manifest; 2 invalid input (no such BASE or --file FILE,
    BASE of another Triton, flags that conflict, no target, an output that cannot be written).
    """
    import json

    from zerojit.compile_only import is_target_name
    from zerojit.learned import LearnedError, merged_manifest
    from zerojit.manifest import read_manifest
    from zerojit.reports import count

    _check_output_file("learned merge", "--output", output)
    base = None
    if manifest is not None:
        _check_input_file("learned merge", "manifest", manifest)
        base = read_manifest(manifest)
    fallback = base.target if base is not None and is_target_name(base.target) else None
    path = _learned_file("learned merge", cache_dir, target, file, fallback_target=fallback)
    if file is not None and not os.path.lexists(file):  # a file named outright: a typo, not "no key learned yet"
        _refuse("learned merge", f"--file {file!r} does not exist")
    try:
        merged, added, skipped = merged_manifest([path], base=base)
    except LearnedError as e:
        _refuse("learned merge", str(e))
    except OSError as e:
        _refuse("learned merge", f"{path}: cannot be read: {e.strerror or e}")
    for s in skipped:
        typer.echo(f"zerojit learned merge: SKIPPED {s}", err=True)
    _write_output("learned merge", "--output", output, json.dumps(merged.to_dict(), indent=1) + "\n",
                  owner_writes_only=bool(merged.carries_source))
    typer.echo(f"wrote {output}: {count(added, 'learned key')} added ({count(len(merged.kernels), 'kernel')}, "
               f"{count(merged.num_specializations, 'specialization')})", err=output == "-")


manifest_app = typer.Typer(cls=_Group, no_args_is_help=True,
                           help="Manifests from zerojit record: widen a kernel's constexprs, merge recordings.")
app.add_typer(manifest_app, name="manifest")


@manifest_app.command("widen", cls=_Command)
@_reflowed
@_user_errors("manifest widen")
@_stdout_is_for("output")
def manifest_widen(
    manifest: str = typer.Argument(..., metavar="MANIFEST", help="a manifest from zerojit record"),
    axis: list[str] = typer.Option(..., "--axis", metavar="KERNEL:PARAM=VALUES",
                                   help="a kernel (module.qualname or qualname), one of its parameters and its values: "
                                   "A..B (inclusive), a comma list (1,2,4), true,false; repeat for a cross product"),
    output: str = typer.Option(..., "-o", "--output", metavar="MANIFEST",
                               help="the widened manifest to write ('-': standard output)"),
) -> None:
    """Read MANIFEST and write to --output its copy with each recorded specialization of KERNEL
    repeated for every value of PARAM on the axis: every value of a constexpr, every Triton class
    (equal to 1, divisible by 16, other; the int width) of a specialized int; several axes of one
    kernel as their cross product; each new specialization once.

    Prints the new variants and the compile time they are expected to take, from the compile
    times this Triton install remembers (to stderr with -o -, where stdout carries the manifest).
    Warns, and writes all the same, of values that are not powers of two for a constexpr that
    sets a shape or a static loop bound, and of a constexpr the kernel's triton.autotune configs
    set. A kernel left with more than zerojit.keyspace's
    DEFAULT_KEY_BUDGET specializations is refused. Exit status: 0 written; 1 a corrupted
    manifest; 2 invalid input (an unknown or ambiguous KERNEL, an unknown PARAM or one widen
    cannot set, a malformed axis, a size above the budget, an output that cannot be written).
    """
    import json

    from zerojit.manifest import read_manifest
    from zerojit.reports import count
    from zerojit.widen import WidenError, estimate_seconds, new_specializations, widen, widen_warnings

    _check_input_file("manifest widen", "manifest", manifest)
    _check_output_file("manifest widen", "--output", output)
    before = read_manifest(manifest)
    try:
        after = widen(before, axis)
    except WidenError as e:
        _refuse("manifest widen", str(e))
    for warning in widen_warnings(before, axis):
        typer.echo(f"zerojit manifest widen: warning: {warning}", err=True)
    added = new_specializations(before, after)
    _write_output("manifest widen", "--output", output, json.dumps(after.to_dict(), indent=1) + "\n",
                  owner_writes_only=bool(after.carries_source))
    seconds, how = estimate_seconds(added)
    total = sum(added.values())
    wrote = "wrote the widened manifest to stdout" if output == "-" else f"wrote {output}"
    typer.echo(f"{wrote}: {count(total, 'new variant')}" + (f" of {', '.join(added)}" if added else ""))
    if total:
        typer.echo(f"estimated compile time: {seconds:.1f} s on one worker ({how})" if seconds is not None
                   else f"estimated compile time: none: {how}")


@manifest_app.command("merge", cls=_Command)
@_reflowed
@_user_errors("manifest merge")
@_stdout_is_for("output")
def manifest_merge(
    manifests: list[str] = typer.Argument(..., metavar="MANIFEST...", help="manifests from zerojit record"),
    output: str = typer.Option(..., "-o", "--output", metavar="MANIFEST",
                               help="the merged manifest to write ('-': standard output)"),
    report: bool = typer.Option(False, "--report", metavar="", help="also print the generalisation report"),
) -> None:
    """Write one manifest of the recordings of several runs (one per set of model flags): each
    run kept in its 'runs', each kernel merged by identity and source hash, each specialization
    once (launches summed).

    With --report, the generalisation report tells a value constant within each run
    (configuration: a model setting) from one that varies within a run (growth). Exit status: 0
    written; 1 a corrupted manifest; 2 invalid input (a manifest missing, of another Triton or
    target, a kernel whose source changed between them, one file given twice, by one path or two:
    a link, ./m.json; an output that cannot be written).
    """
    import json

    from zerojit.generalisation import growth_report
    from zerojit.manifest import read_manifest
    from zerojit.merging import MergeError, merge_manifests
    from zerojit.reports import count

    files: dict[tuple[int, int], str] = {}  # (device, inode) -> the path it was first given by
    for path in manifests:
        _check_input_file("manifest merge", "manifest", path)
        st = os.stat(path)  # (a link: the file it points to)
        first = files.get((st.st_dev, st.st_ino))
        if first is not None:
            _refuse("manifest merge", (f"manifest {path!r} is given twice" if first == path else
                                       f"manifests {first!r} and {path!r} are the same file") +
                    ": merging a recording with itself would count its runs and launches twice")
        files[(st.st_dev, st.st_ino)] = path
    _check_output_file("manifest merge", "--output", output)
    try:
        merged = merge_manifests([(path, read_manifest(path)) for path in manifests])
    except MergeError as e:
        _refuse("manifest merge", str(e))
    _write_output("manifest merge", "--output", output, json.dumps(merged.to_dict(), indent=1) + "\n",
                  owner_writes_only=bool(merged.carries_source))
    wrote = "wrote the merged manifest to stdout" if output == "-" else f"wrote {output}"
    typer.echo(f"{wrote}: {count(len(merged.runs or ()), 'run')}, {count(len(merged.kernels), 'kernel')}, "
               f"{count(merged.num_specializations, 'specialization')}")
    if report:
        typer.echo(growth_report(merged, output if output != "-" else "MANIFEST"))


def main() -> None:
    """Run the command line (what the ``zerojit`` console script and ``python -m zerojit`` run,
    through :mod:`_zerojit_entry`)."""
    app()
