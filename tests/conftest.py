"""Test-session set-up shared by every test file.

Triton decides at decoration time whether a kernel is interpreted, so the suite runs as two
pytest processes (see tests/run.sh): one with ``TRITON_INTERPRET=1`` that runs only tests marked
``interpreter`` (kernel correctness on CPU tensors), and one without it that runs the rest
(specialization, key spaces, compile-only warm-up and dry launches). Tests marked ``gpu`` need
CUDA and are skipped without it.
"""

from __future__ import annotations

import os

import pytest

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_configure(config):
    """Give the session its own Triton home (``TRITON_HOME``): Triton's default cache folder and
    what zerojit remembers per Triton install live under it, so no test reads or writes the
    user's ``~/.triton`` (and a warm one there cannot change what a test sees)."""
    import tempfile

    config._zerojit_home = tempfile.mkdtemp(prefix="zerojit-tests-home-")
    config._zerojit_saved_home = os.environ.get("TRITON_HOME")
    os.environ["TRITON_HOME"] = config._zerojit_home


def pytest_unconfigure(config):
    import shutil

    home = getattr(config, "_zerojit_home", None)
    if home is None:
        return
    if config._zerojit_saved_home is None:
        os.environ.pop("TRITON_HOME", None)
    else:
        os.environ["TRITON_HOME"] = config._zerojit_saved_home
    shutil.rmtree(home, ignore_errors=True)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Tests of zerojit's own host logic (processes, files, signals, the store's client and signatures,
# command-line refusals) that reach no Triton surface which differs between Triton versions: CI
# runs them once, with Triton 3.6.0, and the other versions of its matrix skip them
# (ZEROJIT_TEST_SCOPE=triton, set by .ci/run) to stay inside its time limit.
HOST_ONLY_FILES = {"test_hangs.py", "test_pytest_plugin.py", "test_audit.py", "test_outputs.py",
                   "test_fleet_store.py", "test_fleet_signing.py", "test_fleet_cli.py", "test_tensor_parallel.py",
                   "test_warmup_benchmark.py", "test_switches.py"}
HOST_ONLY_TESTS = {
    "test_ctrl_c_during_record_ends_in_one_line_after_the_manifest_is_written",
    "test_cli_refuses_bad_manifests_and_programs_in_one_line",
    "test_a_programs_exception_reads_as_python_prints_it_and_zerojits_summary_follows",
    "test_record_takes_the_venvs_python_when_zerojit_runs_under_its_python3",
    "test_a_python_path_that_is_not_this_interpreter_is_refused",
    "test_twenty_writers_in_four_processes_leave_whole_lines_each_key_once",
    "test_compile_workers_run_at_the_niceness_asked",
    "test_a_worker_niceness_outside_0_to_19_is_refused",
    "test_a_bad_worker_setting_exits_2_naming_it_on_the_command_line",
}


def _host_only(item) -> bool:
    return item.path.name in HOST_ONLY_FILES or item.originalname in HOST_ONLY_TESTS


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    triton_scope = os.environ.get("ZEROJIT_TEST_SCOPE") == "triton"
    for item in items:
        is_interp = item.get_closest_marker("interpreter") is not None
        (keep if is_interp == INTERPRET and not (triton_scope and _host_only(item)) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if not _has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


@pytest.fixture
def compile_only_target(tmp_path, monkeypatch):
    """Compile-only mode for ``cuda:90`` with a fresh Triton cache directory for this test."""
    from triton import knobs

    from zerojit.compile_only import compile_only

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton-cache"))
    with compile_only("cuda:90") as drv:
        yield drv


@pytest.fixture(scope="module")
def module_compile_only_target(tmp_path_factory):
    """Compile-only mode for ``cuda:90`` for a whole test module, with a fresh Triton cache
    directory for the module (its tests share what they compile)."""
    from triton import knobs

    from zerojit.compile_only import compile_only

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path_factory.mktemp("triton-cache")))
        with compile_only("cuda:90") as drv:
            yield drv
