"""The benchmarks' command lines: benchmarks/warmup.py's modes, each child process getting exactly
the worker settings its mode names, whatever the caller exported (reference: the settings each
mode's docstring names); benchmarks/first_launch.py without a GPU; the refusals of the diagnosis
benchmarks (warm_call_parts.py, first_launch_parts.py, also without a GPU), of autotune.py,
digest_cost.py, fallback_runner.py, miss.py, step_pauses.py and launch.py."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("warmup_bench", ROOT / "benchmarks" / "warmup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mode, start, nice", [("zerojit", None, None), ("zerojit-nice5", None, "5"),
                                               ("zerojit-spawn", "spawn", None)])
def test_each_mode_sets_its_own_worker_settings_not_the_callers(bench, monkeypatch, mode, start, nice):
    monkeypatch.setenv("ZEROJIT_WORKER_NICE", "7")
    monkeypatch.setenv("ZEROJIT_WORKER_START", "fork")
    seen = {}

    def fake_run(cmd, env, **kw):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({"seconds": 1.0}) + "\n", stderr="")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    args = argparse.Namespace(workers=2, space="dsv4-like", overlap=1.0, target=None)
    row = bench.run_child(mode, "/tmp/cache", "/tmp/home", args)
    assert row == {"seconds": 1.0, "mode": mode}
    assert seen.get("ZEROJIT_WORKER_START") == start and seen.get("ZEROJIT_WORKER_NICE") == nice
    assert seen["TRITON_CACHE_DIR"] == "/tmp/cache" and seen["TRITON_HOME"] == "/tmp/home"


def test_a_hung_child_ends_the_benchmark_with_one_line(bench, monkeypatch):
    def hung(cmd, env, **kw):  # the call had no deadline: a hung child hung the benchmark
        assert kw.get("timeout") == bench.CHILD_TIMEOUT_S
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(bench.subprocess, "run", hung)
    args = argparse.Namespace(workers=2, space="dsv4-like", overlap=1.0, target=None)
    with pytest.raises(SystemExit) as exited:
        bench.run_child("zerojit", "/tmp/cache", "/tmp/home", args)
    assert exited.value.code == f"zerojit: no result after {bench.CHILD_TIMEOUT_S} s"


@pytest.mark.parametrize("flags, message", [
    (["--space", "no-such-config"], "invalid config name: unknown config 'no-such-config'"),
    (["--target", "cuda:bogus"], "compile-only target 'cuda:bogus' is not of the form 'cuda:90'"),
    (["--json", "/no-such-folder/w.json"], "--json /no-such-folder/w.json: cannot write there: "),
])
def test_bad_input_exits_2_with_one_line_before_any_run(bench, monkeypatch, capsys, flags, message):
    def no_child(*a, **kw):  # the refusal comes before any child process
        raise AssertionError("a child process was started")

    monkeypatch.setattr(bench.subprocess, "run", no_child)
    monkeypatch.setattr(bench.sys, "argv", ["warmup.py", "--modes", "zerojit", *flags])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"warmup.py: error: {message}")


def test_first_launch_benchmark_without_a_gpu_exits_2_with_one_line():
    """benchmarks/first_launch.py times real launches: with no GPU it says so and exits 2 (no
    child traceback), and a --repeat below 1 is a usage error."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the benchmark would run")
    script = ROOT / "benchmarks" / "first_launch.py"
    proc = subprocess.run([sys.executable, str(script), "--repeat", "1"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip().splitlines() == [
        "first_launch.py needs a CUDA GPU (none is visible); benchmarks/autotune.py measures the primed vs "
        "unprimed first launch under compile-only"]
    usage = subprocess.run([sys.executable, str(script), "--repeat", "0"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "--repeat must be >= 1, got 0" in usage.stderr


def _usage(script: str, flags: list[str], message: str) -> tuple[str, list[str], str]:
    """A refusal argparse words: ``<script>: error: <message>``."""
    return script, flags, f"{script}: error: {message}"


NO_FOLDER = "/no-such-folder/out.json"
REFUSALS = [
    _usage("warm_call_parts.py", ["--runs", "0"], "--runs 0: at least 1"),
    _usage("warm_call_parts.py", ["--env", "CUDA_MODULE_LOADING"], "--env 'CUDA_MODULE_LOADING': write NAME=VALUE"),
    _usage("warm_call_parts.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there"),
    _usage("first_launch_parts.py", ["--modes", "base,nope"],
           "--modes: unknown nope; choose from base, occ, attrs, param, grid0, eager, realB, cdirect"),
    _usage("first_launch_parts.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("first_launch_parts.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there"),
    # without --cpu-check its children time real launches: each failed with torch's traceback
    ("first_launch_parts.py", ["--rounds", "1"], "first_launch_parts.py needs a CUDA GPU (none is visible); "
                                                 "--cpu-check runs the flow compile-only with dry launches"),
    # were an IndexError, a child's traceback, a FileNotFoundError after every round
    _usage("autotune.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("autotune.py", ["--workers", "0"], "--workers must be >= 1, got 0"),
    _usage("autotune.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    # were --rounds failed processes and a table of n/a (--rounds 0: that table and exit 0), or a
    # traceback after every run
    _usage("fallback_runner.py", ["--device", "cpu", "--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("fallback_runner.py", ["--device", "cpu", "--requests", "0"], "--requests must be >= 1, got 0"),
    _usage("fallback_runner.py", ["--device", "cpu", "--check", "-1"], "--check must be >= 0, got -1"),
    _usage("fallback_runner.py", ["--device", "cpu", "--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    _usage("fallback_runner.py", ["--device", "cpu", "--mode", "nope"], "argument --mode: invalid choice: 'nope'"),
    _usage("fallback_runner.py", ["--device", "cpu", "--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    ("fallback_runner.py", ["--device", "cuda"], "fallback_runner.py: --device cuda needs a CUDA GPU (none is visible); "
                                                 "--device cpu runs the same compile-only"),
    _usage("miss.py", ["--device", "cpu", "--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("miss.py", ["--device", "cpu", "--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    _usage("miss.py", ["--device", "cpu", "--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    ("miss.py", ["--device", "cuda"], "miss.py: --device cuda needs a CUDA GPU (none is visible); --device cpu runs "
                                      "the same compile-only"),
    # were a traceback (--rounds 0: no median of nothing; --requests 0, a missing --trace: the
    # child's), a run that ignored it (--passes 0, --window 5-2), or the write after every round
    _usage("step_pauses.py", ["--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("step_pauses.py", ["--requests", "0"], "--requests must be >= 1, got 0"),
    _usage("step_pauses.py", ["--passes", "0"], "--passes must be >= 1, got 0"),
    _usage("step_pauses.py", ["--window", "5-2"], "--window 5-2: write A-B, steps 0 <= A <= B"),
    _usage("step_pauses.py", ["--window", "x"], "--window x: write A-B, steps 0 <= A <= B"),
    _usage("step_pauses.py", ["--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    _usage("step_pauses.py", ["--trace", "/no-such-folder/t.csv"], "--trace /no-such-folder/t.csv: no such file"),
    _usage("step_pauses.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    # were an IndexError after minutes, a child's failure, the write after every round, and exit 0
    _usage("manifest.py", ["--target", "cuda:90", "--rounds", "0"], "--rounds must be >= 1, got 0"),
    _usage("manifest.py", ["--target", "cuda:90", "--workers", "0"], "--workers must be >= 1, got 0"),
    _usage("manifest.py", ["--target", "cuda:90", "--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    ("manifest.py", [], "manifest.py needs a CUDA GPU (it measures real first launches), or --target cuda:90 for dry "
                        "launches"),
    # were a ZeroDivisionError, a silent default, or the write after every measurement
    _usage("first_launch.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    _usage("distributed_warmup.py", ["--ranks", "0"], "--ranks must be >= 1, got 0"),
    _usage("distributed_warmup.py", ["--workers", "0"], "--workers must be >= 1, got 0"),
    _usage("distributed_warmup.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    _usage("faults.py", ["--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    _usage("faults.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    _usage("fleet.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    _usage("kernels.py", ["--device", "cpu", "--dry", "--compile-budget", "-1"],
           "--compile-budget must be >= 0 seconds, got -1"),
    _usage("kernels.py", ["--device", "cpu", "--dry", "--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    _usage("generic_speed.py", ["--dry", "--json", "out.json"],
           "--json: --dry times nothing, so it writes nothing; drop one of them"),
    _usage("generic_speed.py", ["--json", NO_FOLDER], f"--json {NO_FOLDER}: cannot write there: "),
    ("generic_speed.py", [], "generic_speed.py: needs a CUDA GPU (none is visible); without one, --dry compiles every "
                             "variant for cuda:90"),
]


@pytest.mark.parametrize("script, flags, message", REFUSALS)
def test_a_benchmark_refuses_bad_input_with_exit_2_and_one_line_before_any_child(monkeypatch, capsys, script, flags,
                                                                                  message):
    """Each refusal comes before the first child process (none may start), as one line (its
    start is given: a path's problem ends it), status 2; the GPU is made to look absent."""
    import torch

    spec = importlib.util.spec_from_file_location(f"bench_{script[:-3]}", ROOT / "benchmarks" / script)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)

    def no_child(*a, **kw):
        raise AssertionError("a child process was started")

    monkeypatch.setattr(subprocess, "run", no_child)
    monkeypatch.setattr(subprocess, "Popen", no_child)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench.sys, "argv", [script, *flags])
    with pytest.raises(SystemExit) as exited:
        sys.exit(bench.main())  # (some return their status)
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(message)


@pytest.mark.parametrize("flags, code", [(["--no-such-flag"], 2), (["--help"], 0)])
def test_digest_cost_benchmark_parses_its_command_line_before_measuring(monkeypatch, capsys, flags, code):
    """digest_cost.py has no options: --help prints its usage and a bad flag is refused, neither
    measures (both ran the whole benchmark and exited 0)."""
    spec = importlib.util.spec_from_file_location("digest_cost", ROOT / "benchmarks" / "digest_cost.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "measure", lambda: pytest.fail("the benchmark ran"), raising=False)
    monkeypatch.setattr(sys, "argv", ["digest_cost.py", *flags])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == code
    out = capsys.readouterr()
    if code == 0:
        assert out.out.startswith("usage: digest_cost.py")
    else:
        assert out.err.strip().splitlines()[-1] == "digest_cost.py: error: unrecognized arguments: --no-such-flag"


def test_step_pauses_gives_each_process_a_deadline(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("step_pauses", ROOT / "benchmarks" / "step_pauses.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def hung(cmd, **kw):
        assert kw.get("timeout") == 5
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(bench.subprocess, "run", hung)
    monkeypatch.setattr(bench.sys, "argv", ["step_pauses.py", "--rounds", "1", "--timeout", "5"])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == "serving: no result after 5 s (--timeout)"


@pytest.mark.parametrize("flags, message", [
    (["--launches", "0"], "--launches must be >= 1, got 0"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
    (["--json", "/no-such-folder/l.json"], "--json /no-such-folder/l.json: cannot write there: "),
])
def test_launch_benchmark_refuses_bad_input_with_exit_2_and_one_line_before_measuring(monkeypatch, capsys, flags,
                                                                                      message):
    spec = importlib.util.spec_from_file_location("launch_bench", ROOT / "benchmarks" / "launch.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "launch_bench", bench)  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "JitWarmupRegistry", lambda: pytest.fail("the benchmark started"))
    monkeypatch.setattr(bench.sys, "argv", ["launch.py", *flags])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"launch.py: error: {message}")


@pytest.mark.parametrize("script, gpus", [("gpu_must_show.sh", 1), ("gpu_issue29.sh", 1), ("gpu_issue30.sh", 1),
                                          ("gpu_issue32.sh", 1), ("gpu_issue34.sh", 2)])
def test_a_gpu_driver_script_without_its_gpus_exits_2_in_one_line_before_making_its_output(tmp_path, script, gpus):
    """An ``nvidia-smi`` that lists no GPU (a stand-in first on PATH, whatever this machine has):
    the script says so and exits 2, with no output folder made (each step failed and it exited 0)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OUT=str(out))
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / script)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    plural = "s" if gpus > 1 else ""
    assert done.stderr.splitlines() == [f"benchmarks/{script} needs {gpus} NVIDIA GPU{plural}; nvidia-smi lists 0: "
                                        "run it on the GPU machine"]
    assert not out.exists()
