"""The ``zerojit`` command line (typer).

Commands:
    run      the reference runner on a real request trace (the main job)
    demo     warm up the example kernel and print its report
    audit    run a script under the monitor and print the coverage audit
"""

from __future__ import annotations

from typing import Any, Optional

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="zerojit: zero JIT compilation at run time for Triton kernels.")


JIT_MONITOR_MODES = ("off", "warn", "error")


def _check_jit_monitor_mode(value: Optional[str]) -> Optional[str]:
    if value is not None and value.lower() not in JIT_MONITOR_MODES:
        raise typer.BadParameter(f"must be one of {', '.join(JIT_MONITOR_MODES)}, not {value!r}")
    return value.lower() if value is not None else None


def jit_monitor_mode_option(default: Optional[str] = None) -> Any:
    """A ``--jit-monitor-mode off|warn|error`` typer option (falls back to ``ZEROJIT_JIT_MONITOR``).

    Use in a command that warms up and serves, then pass its value to
    :func:`apply_jit_monitor_mode` before warming up::

        def run(jit_monitor_mode: Optional[str] = jit_monitor_mode_option("error")): ...
    """
    return typer.Option(
        default,
        "--jit-monitor-mode",
        envvar="ZEROJIT_JIT_MONITOR",
        callback=_check_jit_monitor_mode,
        help="runtime JIT monitor after warm-up: off, warn (log each runtime compile once) or "
        "error (raise RuntimeJitError before compiling)",
    )


def apply_jit_monitor_mode(mode: Optional[str]) -> None:
    """Make the next warm-up install the monitor in ``mode`` (None: follow ``ZEROJIT_JIT_MONITOR``)."""
    from zerojit import monitor

    monitor.configure(mode)


@app.callback()
def _root() -> None:
    """zerojit: zero JIT compilation at run time for Triton kernels."""


@app.command()
def demo(target: str = typer.Option("cuda:90", help="compile-only target used when no GPU is present")) -> None:
    """Warm up the example kernel's key space and print the warm-up report."""
    import torch

    from zerojit import JitWarmupRegistry, compile_only
    from zerojit.examples.scale_add import scale_add

    registry = JitWarmupRegistry()
    with registry.activate():
        scale_add.register_warmup(periods=(16, 7), aligned=(True, False))
    if torch.cuda.is_available():
        report = registry.warmup()
    else:
        with compile_only(target):
            report = registry.warmup(target=target)
    typer.echo(report.summary())


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def audit(
    command: list[str] = typer.Argument(..., help="the command to run, after '--' (e.g. -- python serve.py --trace t.csv)"),
    json_out: Optional[str] = typer.Option(None, "--json", help="also write the audit as JSON to this file"),
) -> None:
    """Run a script under the JIT monitor (warn) and print its coverage audit.

    The script runs as a child process with ZEROJIT_JIT_MONITOR=warn (its zerojit warm-up installs
    the monitor) and writes its audit at exit. Exit status: 1 when anything compiled at run time;
    otherwise the script's own status (0 when it succeeded); 2 when the script ran no zerojit
    warm-up (nothing was monitored) and exited 0.
    """
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from zerojit.audit import AUDIT_OUT_ENV, CoverageAudit

    src_root = str(Path(__file__).resolve().parent.parent)  # the child imports this same zerojit
    with tempfile.TemporaryDirectory(prefix="zerojit-audit-") as tmp:
        out = os.path.join(tmp, "audit.json")
        env = dict(os.environ)
        env["ZEROJIT_JIT_MONITOR"] = "warn"
        env[AUDIT_OUT_ENV] = out
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, env.get("PYTHONPATH")) if p)
        try:
            rc = subprocess.call(list(command), env=env)
        except OSError as e:
            typer.echo(f"zerojit audit: cannot run {command[0]!r}: {e}", err=True)
            raise typer.Exit(127) from None
        if not os.path.exists(out):
            typer.echo("zerojit audit: the script wrote no audit: it ran no zerojit warm-up (or exited "
                       "through os._exit), so nothing was monitored", err=True)
            raise typer.Exit(rc or 2)
        result = CoverageAudit.from_dict(json.loads(Path(out).read_text()))
    typer.echo(result.table())
    if json_out:
        Path(json_out).write_text(result.to_json())
    if rc != 0:
        typer.echo(f"zerojit audit: the script exited with status {rc}", err=True)
    raise typer.Exit(1 if not result.ok else rc)


def main() -> None:
    """Console-script entry point."""
    app()
