"""``zerojit run`` / ``zerojit exec`` and fallback mode (issue 29): its flags, its default (fallback
on a GPU, error under compile-only), the four serving counts in ``--json``, exec's ``--json``, and
the benchmark-only ``--cut-keyspace``.

Runs are compile-only (cuda:90, dry launches) in subprocesses sharing the session's Triton home.
References: the runner's own coverage audit (a miss per cut kernel), the flags given, and the
number of kernels the key space registers. Tests that need fallback mode itself (the serving layer,
``zerojit.serving``) skip where it is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from typer.testing import CliRunner

from zerojit import monitor
from zerojit.cli import app
from zerojit.runner.engine import RunOptions

SRC = Path(monitor.__file__).resolve().parents[1]  # the zerojit under test, for the subprocesses too
RUN = ["run", "--device", "cpu", "--no-progress"]
EXEC = ["exec", "--manifest", "m.json", "--no-progress"]
#: The reference runner's kernels (one class cut from each by --cut-keyspace).
RUNNER_KERNELS = 7


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def one_line(result, status: int, *needles: str) -> str:
    """Exit ``status`` with one ``zerojit`` line naming every needle, and no traceback."""
    text = result.output
    assert result.exit_code == status, (result.exit_code, text, result.exception)
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.startswith("zerojit ")]
    assert len(lines) == 1, text
    for n in needles:
        assert n in lines[0], text
    return lines[0]


def zerojit(args: list[str], cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    if cache is not None:
        env["TRITON_CACHE_DIR"] = str(cache)
    env.pop("TRITON_INTERPRET", None)
    env.pop("ZEROJIT_JIT_MONITOR", None)
    return subprocess.run([sys.executable, "-m", "zerojit", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


needs_fallback = pytest.mark.skipif("fallback" not in monitor.MODES,
                                    reason="fallback mode (zerojit.serving) is not in this tree")


# ------------------------------------------------------------------------------ flags

@pytest.mark.parametrize("command", [RUN, [*EXEC, "--", "python", "x.py"]], ids=["run", "exec"])
@pytest.mark.parametrize("flag, value, why", [
    ("--swap", "sometimes", "must be one of immediate, between-requests, never, not 'sometimes'"),
    ("--fallback-miss", "ignore", "must be one of compile, error, not 'ignore'"),
    ("--background-workers", "0", "greater than or equal to 1")])
def test_an_invalid_fallback_option_exits_2_in_one_line_naming_the_flag(command, flag, value, why):
    name = command[0]
    args = [*command[:-3], flag, value, *command[-3:]] if name == "exec" else [*command, flag, value]
    one_line(invoke(*args), 2, f"zerojit {name}: Invalid value for '{flag}'", why)


def test_the_fallback_options_are_documented_in_the_help_of_run_and_exec():
    for command in ("run", "exec"):
        text = " ".join(invoke(command, "--help", env={"COLUMNS": "200"}).output.replace("│", " ").split())
        for flag in ("--no-generic", "--swap", "--fallback-miss", "--background-workers", "--json"):
            assert flag in text, (command, flag)
        assert "default: fallback on a GPU, error under" in text, command
        assert "--cut-keyspace" not in text  # benchmarks only: hidden


@needs_fallback
@pytest.mark.parametrize("warmup", ["triton", "none"])
def test_fallback_with_a_comparison_warmup_conflicts(warmup):
    one_line(invoke(*RUN, "--warmup", warmup, "--jit-monitor-mode", "fallback"), 2,
             f"--warmup {warmup} and --jit-monitor-mode fallback conflict")


@pytest.mark.parametrize("flags, mode", [(("--swap", "immediate"), "error"),
                                         (("--fallback-miss", "error", "--jit-monitor-mode", "warn"), "warn"),
                                         (("--background-workers", "3", "--jit-monitor-mode", "off"), "off"),
                                         (("--swap", "never", "--warmup", "none"), "warn")])
def test_a_fallback_flag_outside_fallback_mode_is_refused_not_ignored(flags, mode):
    """A fallback option given where the run serves in another mode would change nothing: exit 2,
    naming the flag and the mode (the compile-only default is error mode)."""
    one_line(invoke(*RUN, *flags), 2, f"zerojit run: {flags[0]} {flags[1]} applies in fallback mode only, and this "
             f"run serves in {mode} mode")


def test_every_fallback_flag_given_outside_fallback_mode_is_named():
    one_line(invoke(*RUN, "--fallback-miss", "error", "--swap", "immediate"), 2,
             "zerojit run: --swap immediate and --fallback-miss error apply in fallback mode only, and this run "
             "serves in error mode: leave them out")


def test_the_cut_with_a_comparison_warmup_conflicts():
    one_line(invoke(*RUN, "--warmup", "none", "--cut-keyspace"), 2, "--warmup none and --cut-keyspace conflict")


def test_the_default_monitor_mode_is_error_under_compile_only_and_fallback_on_a_gpu(monkeypatch):
    import torch

    assert RunOptions(device="cpu").monitor_mode == "error"
    assert RunOptions(device="cpu", warmup="none").monitor_mode == "warn"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert RunOptions().monitor_mode == "fallback"
    assert RunOptions(device="cuda").monitor_mode == "fallback"
    assert RunOptions(device="cpu").monitor_mode == "error"  # compile-only on a GPU machine: still error
    assert RunOptions(device="cuda", jit_monitor_mode="error").monitor_mode == "error"


# ------------------------------------------------------------------------------ run --json

def _run_json(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"run-{uuid.uuid4().hex[:6]}.json"
    done = zerojit([*RUN, "--requests", "200", "--json", str(out), *flags], tmp_path)
    assert out.exists(), done.stdout + done.stderr
    return done, json.loads(out.read_text())


def test_a_compile_only_run_serves_in_error_mode_and_reports_the_four_counts(tmp_path):
    done, data = _run_json(tmp_path)
    assert done.returncode == 0, done.stderr
    assert data["monitor_mode"] == "error"
    assert {k: data[k] for k in ("request_path_compiles", "fallback_launches", "background_compiles", "swaps")} == {
        "request_path_compiles": 0, "fallback_launches": 0, "background_compiles": 0, "swaps": 0}
    assert data["background_idle"] is None and data["cut_keyspace"] == []


def test_the_cut_drops_one_class_per_kernel_and_the_trace_misses_there(tmp_path):
    """Warn mode: each cut variant's key compiles again at the trace's first launch of it. The
    reference is the runner's coverage audit: one miss in each kernel, none elsewhere."""
    done, data = _run_json(tmp_path, "--cut-keyspace", "--jit-monitor-mode", "warn")
    cut = data["cut_keyspace"]
    kernels = [k["kernel"] for k in data["audit"]["detail"]["kernels"]]
    assert len(kernels) == RUNNER_KERNELS
    assert sorted(c.split(":")[0] for c in cut) == sorted(kernels)  # one per kernel
    misses = {k["kernel"]: len(k["misses"]) for k in data["audit"]["detail"]["kernels"]}
    assert misses == {k: 1 for k in kernels}
    assert data["runtime_compiles"] == data["request_path_compiles"] == len(cut) == RUNNER_KERNELS
    assert done.returncode == 1  # runtime compiles after a zerojit warm-up
    assert "  monitor      warn: 7 runtime compiles" in done.stdout
    assert "               cut: " + cut[0] in done.stdout


@needs_fallback
def test_the_cut_in_fallback_mode_is_served_with_no_request_path_compile(tmp_path):
    """Compile-only, fallback mode: every miss the cut makes is a fallback launch (dry), its key
    compiles in the background and is swapped in between steps; exit 0."""
    done, data = _run_json(tmp_path, "--cut-keyspace", "--jit-monitor-mode", "fallback")
    assert done.returncode == 0, done.stdout + done.stderr
    assert data["monitor_mode"] == "fallback" and len(data["cut_keyspace"]) == RUNNER_KERNELS
    assert data["request_path_compiles"] == 0
    assert data["fallback_launches"] >= RUNNER_KERNELS
    assert data["background_compiles"] == data["swaps"] == RUNNER_KERNELS
    assert data["background_idle"] is True and data["background_failures"] == 0
    assert "zero request-path compiles" in done.stdout
    # the audit counts the served launches per kernel, and calls no dead key beside them "not a bug"
    served = {k["kernel"]: k["fallback_launches"] for k in data["audit"]["detail"]["kernels"]}
    assert sum(served.values()) == data["fallback_launches"] and len([n for n in served.values() if n]) == RUNNER_KERNELS
    assert "no miss, so not a bug" not in done.stdout and "dead keys beside misses the fallback served" in done.stdout
    # the warm-up's generic variants (one per group: 20 for the 21 keys) in the summary and the JSON
    assert data["warmup"]["generic_variants"] == 20 and "keys + 20 generic variants in " in done.stdout
    assert "generic variants: " in done.stdout and data["warmup"]["learned_skipped"] == []


@needs_fallback
def test_with_no_generic_variants_a_blocked_miss_says_the_warm_up_made_none(tmp_path):
    """--no-generic --fallback-miss error: the first cut key is blocked (the run stops there, exit
    1, as error mode does), and the monitor names the reason (no generic variant of the function
    was filed), not a dtype or constexpr change."""
    done = zerojit([*RUN, "--requests", "200", "--cut-keyspace", "--jit-monitor-mode", "fallback", "--no-generic",
                    "--fallback-miss", "error"], tmp_path)
    assert done.returncode == 1
    assert "the warm-up filed no generic variant of this function" in done.stdout + done.stderr
    assert "another dtype, constexpr" not in done.stdout + done.stderr


# ------------------------------------------------------------------------------ exec --json

APP_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
'''

APP = '''
import sys

import torch

import {module} as kern

x = torch.zeros(128)
for n in sys.argv[1:]:
    kern.add_kernel[(1,)](x, torch.empty_like(x), int(n), BLOCK=128)
print("ran", flush=True)
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """app.py and its kernel module, recorded for cuda:90 with n=100 (an i32 not divisible by 16)."""
    root = tmp_path_factory.mktemp("fallback-exec")
    module = f"zj_fb_kern_{uuid.uuid4().hex[:8]}"
    (root / f"{module}.py").write_text(APP_KERNEL)
    (root / "app.py").write_text(APP.format(module=module))
    rec = zerojit(["record", "-o", "m.json", "--target", "cuda:90", "--", "python", "app.py", "100"], root,
                  root / "cache")
    assert rec.returncode == 0 and "ran" in rec.stdout, rec.stderr
    return root


def test_exec_json_writes_the_four_counts_and_defaults_to_error_under_compile_only(recorded):
    done = zerojit([*EXEC, "--json", "out.json", "--", "python", "app.py", "100", "100"], recorded, recorded / "cache")
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr
    data = json.loads((recorded / "out.json").read_text())
    assert data["monitor_mode"] == "error"
    assert (data["launches"], data["runtime_compiles"], data["exit_status"]) == (2, 0, 0)
    assert {k: data[k] for k in ("request_path_compiles", "fallback_launches", "background_compiles", "swaps")} == {
        "request_path_compiles": 0, "fallback_launches": 0, "background_compiles": 0, "swaps": 0}
    assert data["warmup"]["keys"] == 1  # the one recorded specialization


def test_exec_json_to_stdout_is_pure_json_and_counts_a_blocked_miss(recorded):
    """n=64 (divisible by 16) was not recorded: blocked in error mode (exit 1), a runtime compile
    but no request-path one (nothing compiled); ``--json -`` puts the JSON alone on stdout, the
    program's output on stderr."""
    done = zerojit([*EXEC, "--json", "-", "--", "python", "app.py", "64"], recorded, recorded / "cache")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["exit_status"] == 1 and data["blocked"] == 1
    assert (data["launches"], data["runtime_compiles"], data["request_path_compiles"]) == (1, 1, 0)
    assert "zerojit exec: 1 monitored launch, 1 runtime compile (1 blocked)" in done.stderr


@pytest.mark.parametrize("flags", [("--swap", "immediate"), ("--background-workers", "2"), ("--fallback-miss", "error")])
def test_exec_refuses_a_fallback_flag_in_error_mode_before_running_the_program(recorded, flags):
    result = invoke("exec", "--manifest", str(recorded / "m.json"), *flags, "--", "python", str(recorded / "app.py"))
    assert "ran" not in result.output
    one_line(result, 2, f"zerojit exec: {' '.join(flags)} applies in fallback mode only", "serves in error mode")


def test_exec_refuses_an_unwritable_json_before_running_the_program(recorded):
    one_line(invoke("exec", "--manifest", str(recorded / "m.json"), "--json", "/nonexistent/dir/out.json", "--",
                    "python", "app.py"), 2, "zerojit exec: --json '/nonexistent/dir/out.json'")


@needs_fallback
def test_more_background_workers_than_cores_are_capped_with_a_note(recorded):
    """--background-workers past the usable cores: a note naming both numbers, the run goes on
    with one worker a core (os.sched_getaffinity, the reference)."""
    cores = len(os.sched_getaffinity(0))
    done = zerojit([*EXEC[:-1], "--jit-monitor-mode", "fallback", "--background-workers", "4096", "--no-progress", "--",
                    "python", "app.py", "100"], recorded, recorded / "cache")
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr
    assert (f"zerojit exec: note: --background-workers 4096 is more than the {cores} "
            f"core{'s' if cores > 1 else ''} this process can use; using {cores}") in done.stderr
