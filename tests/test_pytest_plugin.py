"""The pytest plugin, run in a child pytest from a source tree with nothing installed.

The inner project's conftest warms two kernels of ``tests/_kernels.py`` in a session fixture (the
test run's warm-up) under the compile-only target. In the first inner test file one test launches
the warmed key, one launches a key whose scalar was warmed with the literal 1, one swallows the
RuntimeJitError, one compiles inside allow_compiles; the second compiles in a fixture's set-up and
in another thread.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = str(Path(__file__).resolve().parent)  # the inner tests import their kernels from _kernels.py
SRC = str(Path(__file__).resolve().parent.parent / "src")

CONFTEST = textwrap.dedent('''
    import pytest
    from zerojit import JitWarmupRegistry
    from zerojit.compile_only import compile_only

    from _kernels import PagedScale, StoreN

    @pytest.fixture(scope="session", autouse=True)
    def warmed():
        """The test run's warm-up: PagedScale with the literal 1 for block_size (its bug), StoreN."""
        with compile_only("cuda:90"):
            registry = JitWarmupRegistry()
            with registry.activate():
                PagedScale().register_warmup()
                StoreN().register_warmup()
            yield registry.warmup(progress=False)
''')

INNER = textwrap.dedent('''
    import torch
    from zerojit.monitor import RuntimeJitError, allow_compiles

    from _kernels import PagedScale

    scale = PagedScale()

    def launch(block_size):
        scale(x=torch.zeros(64), out=torch.zeros(64), block_size=block_size)

    def test_warmed_key():
        launch(1)

    def test_runtime_compile():
        launch(64)

    def test_swallowed():
        try:
            launch(2**40)
        except RuntimeJitError:
            pass

    def test_allowed():
        with allow_compiles():
            launch(17)
''')


@pytest.fixture
def project(pytester, monkeypatch, tmp_path):
    """``project(source)``: a pytester project of the conftest warm-up and one test module
    ``source``, run against this tree's zerojit and the test kernels."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("ZEROJIT_JIT_MONITOR", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("ZEROJIT_LEARN", raising=False)

    def make(source: str):
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(test_inner=source)
        return pytester

    return make


def _run(project, mode: str, *options: str, **outcomes: int) -> str:
    """Run ``project``'s tests with the plugin's monitor in ``mode``, assert the outcome counts
    (``passed=``, ``failed=``, ``errors=``) and return the output."""
    result = project.runpytest_subprocess("-p", "zerojit.pytest_plugin", f"--jit-monitor-mode={mode}",
                                          "-p", "no:cacheprovider", *options)
    result.assert_outcomes(**outcomes)
    return result.stdout.str()


def test_error_mode_fails_tests_that_compile_at_run_time(project):
    out = _run(project(INNER), "error", "-rf", passed=2, failed=2)
    assert "FAILED test_inner.py::test_runtime_compile - zerojit.monitor.RuntimeJitError" in out
    assert "FAILED test_inner.py::test_swallowed" in out
    assert "the RuntimeJitError was caught inside the test" in out
    assert "block_size: warmed as equal-to-one, called as divisible-by-16" in out
    assert "kernel 'paged_scale' would compile at run time" in out
    assert "2 runtime compiles after warm-up in 2 tests" in out  # the summary section


def test_a_rerun_fails_again_unless_learning_was_asked_for(project, tmp_path):
    """The plugin records no learned keys (a rerun of a failed gate must fail again); with
    --jit-learn the misses are recorded and the next run's warm-up warms them: all pass."""
    learned = tmp_path / "triton-cache" / ".zerojit"
    inner = project(INNER)
    _run(inner, "error", passed=2, failed=2)
    assert not list(learned.glob("learned-*.jsonl"))
    _run(inner, "error", "--jit-learn", passed=2, failed=2)
    assert len(list(learned.glob("learned-*.jsonl"))) == 1
    _run(inner, "error", passed=4)


def test_warn_mode_reports_without_failing(project):
    out = _run(project(INNER), "warn", passed=4)
    assert "zerojit JIT monitor" in out
    assert "2 runtime compiles after warm-up in 2 tests:" in out
    assert "test_inner.py::test_runtime_compile: 1x runtime JIT compile of kernel 'paged_scale'" in out
    assert "test_inner.py::test_swallowed: 1x" in out
    assert "block_size: warmed as equal-to-one, called as i64 divisible-by-16" in out
    assert "test_allowed" not in out.split("zerojit JIT monitor")[1]


# ------------------------------------------- compiles in a fixture's set-up and in other threads
FIXTURE_INNER = textwrap.dedent('''
    import threading
    import pytest, torch
    from zerojit.monitor import RuntimeJitError

    from _kernels import StoreN

    fill = StoreN()

    @pytest.fixture
    def model():
        try:
            fill(x=torch.zeros(4, dtype=torch.int32), n=17)  # compiles at set-up (swallowed in error mode)
        except RuntimeJitError:
            pass
        return "model"

    def test_uses_model(model):
        fill(x=torch.zeros(4, dtype=torch.int32), n=16)

    def test_compiles_in_a_thread():
        def work():
            try:
                fill(x=torch.zeros(4, dtype=torch.int32), n=1)
            except RuntimeJitError:
                pass
        t = threading.Thread(target=work, name="server-loop")
        t.start()
        t.join()
''')


def test_plugin_error_mode_fails_for_fixture_set_up_and_other_threads(project):
    out = _run(project(FIXTURE_INNER), "error", "-rfE", errors=1, failed=1)
    assert "ERROR test_inner.py::test_uses_model - Failed: the set-up of fixture 'model'" in out
    assert ("the set-up of fixture 'model' triggered 1 runtime compile after warm-up (JIT monitor in error mode; "
            "the RuntimeJitError was caught inside the fixture)") in out
    assert "FAILED test_inner.py::test_compiles_in_a_thread" in out
    assert ("the test body triggered 1 runtime compile after warm-up (JIT monitor in error mode; the "
            "RuntimeJitError was raised in thread 'server-loop', not in the test's own thread, so the test could not "
            "see it)") in out
    assert "caught inside the test" not in out
    assert "test_inner.py::test_uses_model [fixture 'model']: 1x runtime JIT compile of kernel 'store_n'" in out


def test_plugin_warn_mode_attributes_fixture_compiles(project):
    out = _run(project(FIXTURE_INNER), "warn", passed=2)
    assert "2 runtime compiles after warm-up in 2 tests:" in out
    assert "test_inner.py::test_uses_model [fixture 'model']: 1x runtime JIT compile of kernel 'store_n'" in out
    assert "test_inner.py::test_compiles_in_a_thread: 1x" in out
