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


@app.command("run")
def run_command(
    config: str = typer.Option("dsv4-like", "--config", help="a shipped config (deepseek-v3.2, dsv4-like) or a JSON file"),
    trace: Optional[str] = typer.Option(None, "--trace", help="Azure-format trace CSV (default: the shipped 2,000-request slice)"),
    requests: Optional[int] = typer.Option(None, "--requests", min=1, help="replay only the first N requests"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)"),
    target: str = typer.Option("cuda:90", "--target", help="compile-only target on cpu"),
    warmup: str = typer.Option("zerojit", "--warmup", help="zerojit, triton (Triton's warmup(), no load) or none (plain JIT)"),
    jit_monitor_mode: Optional[str] = jit_monitor_mode_option("error"),
    check: Optional[int] = typer.Option(None, "--check", min=0, help="steps checked against the PyTorch references "
                                        "(cpu: in a TRITON_INTERPRET=1 child; default 0 on cpu, 8 on cuda)"),
    dcp_size: Optional[int] = typer.Option(None, "--dcp-size", help="decode-context-parallel size S (one process plays one rank)"),
    dcp_rank: Optional[int] = typer.Option(None, "--dcp-rank", help="the rank this process plays"),
    num_speculative_tokens: Optional[int] = typer.Option(None, "--num-speculative-tokens", help="draft tokens per decode step"),
    backend: Optional[str] = typer.Option(None, "--backend", help="attention backend (default: the config's)"),
    seed: int = typer.Option(0, "--seed", help="seeds the top-k draws and the check sampling"),
    json_out: Optional[str] = typer.Option(None, "--json", help="also write the report as JSON to this file"),
    no_progress: bool = typer.Option(False, "--no-progress", help="no progress bars"),
) -> None:
    """Replay a request trace through the sparse-MLA kernels with zero runtime JIT (the main job).

    Loads the config, builds the model and a packed paged KV cache under the registry (their layers
    register their kernels), warms up, installs the JIT monitor, replays the trace through a
    continuous-batching scheduler (every step builds its attention metadata through the seven
    kernels) and reports. Exit status: 0 on success; 1 when something compiled at run time after a
    zerojit warm-up or a check failed; 2 for invalid input (config, trace, options).
    """
    import json
    from pathlib import Path

    from zerojit.kernels.mla.backends import BackendError
    from zerojit.kernels.mla.config import ConfigError
    from zerojit.monitor import RuntimeJitError
    from zerojit.registry import WarmupError
    from zerojit.runner.engine import RunError, RunOptions, run
    from zerojit.runner.trace import TraceError

    try:
        options = RunOptions(
            config=config, trace=trace, requests=requests, device=device, target=target, warmup=warmup,
            jit_monitor_mode=jit_monitor_mode or "error", check=check, dcp_size=dcp_size, dcp_rank=dcp_rank,
            num_speculative_tokens=num_speculative_tokens, backend=backend, seed=seed, progress=not no_progress,
        )
        report = run(options)
    except (ConfigError, BackendError, TraceError) as e:
        typer.echo(f"zerojit run: {e}", err=True)
        raise typer.Exit(2) from None
    except RunError as e:
        typer.echo(f"zerojit run: {e}", err=True)
        raise typer.Exit(2) from None
    except (RuntimeJitError, WarmupError) as e:
        typer.echo(f"zerojit run: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(report.summary())
    if json_out:
        Path(json_out).write_text(json.dumps(report.to_dict(), indent=2))
    raise typer.Exit(0 if report.ok else 1)


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

    The script runs as a child process with ZEROJIT_JIT_MONITOR=warn;
    its zerojit warm-up installs the monitor; it writes its audit at exit.

    Exit status: 1 when anything compiled at run time, else the script's
    own status; 2 when the script ran no zerojit warm-up and exited 0.
    """
    import json
    import os
    import subprocess
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
