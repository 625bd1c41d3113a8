"""The pytest plugin, run in a child pytest from a source tree with nothing installed.

The inner test file warms one kernel in a session fixture (the test run's warm-up) under the
compile-only target, then: one test launches the warmed key, one launches a key whose scalar was
warmed with the literal 1, one swallows the RuntimeJitError, one compiles inside allow_compiles.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SRC = str(Path(__file__).resolve().parent.parent / "src")

INNER = textwrap.dedent('''
    from dataclasses import dataclass
    import pytest, torch, triton, triton.language as tl
    from zerojit import JitWarmupRegistry
    from zerojit.compile_only import compile_only
    from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
    from zerojit.monitor import RuntimeJitError, allow_compiles
    from zerojit.specialization import WarmupTensor

    @triton.jit
    def _plugin_scale_kernel(x_ptr, block_size):
        tl.store(x_ptr + tl.program_id(0), block_size)

    class PluginScale(TritonJitKernel):
        kernel = _plugin_scale_kernel

        @dataclass(frozen=True)
        class CompileKey:
            pass

        def dispatch(self):
            return self.CompileKey()

        def get_warmup_keys(self):
            return [self.CompileKey()]

        def warmup_inputs(self, key):
            return dict(x=WarmupTensor(torch.int32, (4,)), block_size=1)  # the literal-1 bug

        @kernel_launcher
        def __call__(self, *, x, block_size):
            return LaunchSpec(grid=(x.numel(),), returns=x)

    scale = PluginScale()

    @pytest.fixture(scope="session", autouse=True)
    def warmed():
        with compile_only("cuda:90"):
            registry = JitWarmupRegistry()
            with registry.activate():
                scale.register_warmup()
            yield registry.warmup(progress=False)

    def test_warmed_key():
        scale(x=torch.zeros(4, dtype=torch.int32), block_size=1)

    def test_runtime_compile():
        scale(x=torch.zeros(4, dtype=torch.int32), block_size=64)

    def test_swallowed():
        try:
            scale(x=torch.zeros(4, dtype=torch.int32), block_size=2**40)
        except RuntimeJitError:
            pass

    def test_allowed():
        with allow_compiles():
            scale(x=torch.zeros(4, dtype=torch.int32), block_size=17)
''')


def _project(pytester, monkeypatch, tmp_path, source: str):
    """A pytester project whose one test module is ``source``, run against this tree's zerojit."""
    monkeypatch.setenv("PYTHONPATH", SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.delenv("ZEROJIT_JIT_MONITOR", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pytester.makepyfile(test_inner=source)
    return pytester


@pytest.fixture
def inner(pytester, monkeypatch, tmp_path):
    return _project(pytester, monkeypatch, tmp_path, INNER)


def test_error_mode_fails_tests_that_compile_at_run_time(inner):
    result = inner.runpytest_subprocess("-p", "zerojit.pytest_plugin", "--jit-monitor-mode=error",
                                        "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "FAILED test_inner.py::test_runtime_compile - zerojit.monitor.RuntimeJitError" in out
    assert "FAILED test_inner.py::test_swallowed" in out
    assert "the RuntimeJitError was caught inside the test" in out
    assert "block_size: warmed as equal-to-one, called as divisible-by-16" in out
    assert "kernel 'plugin_scale' would compile at run time" in out
    assert "2 runtime compiles after warm-up in 2 tests" in out  # the summary section


def test_warn_mode_reports_without_failing(inner):
    result = inner.runpytest_subprocess("-p", "zerojit.pytest_plugin", "--jit-monitor-mode=warn",
                                        "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "zerojit JIT monitor" in out
    assert "2 runtime compiles after warm-up in 2 tests:" in out
    assert "test_inner.py::test_runtime_compile: 1x runtime JIT compile of kernel 'plugin_scale'" in out
    assert "test_inner.py::test_swallowed: 1x" in out
    assert "block_size: warmed as equal-to-one, called as i64 divisible-by-16" in out
    assert "test_allowed" not in out.split("zerojit JIT monitor")[1]


# ------------------------------------------- compiles in a fixture's set-up and in other threads
FIXTURE_INNER = textwrap.dedent('''
    import threading
    from dataclasses import dataclass
    import pytest, torch, triton, triton.language as tl
    from zerojit import JitWarmupRegistry
    from zerojit.compile_only import compile_only
    from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
    from zerojit.monitor import RuntimeJitError
    from zerojit.specialization import WarmupTensor

    @triton.jit
    def _plugin_fill_kernel(x_ptr, n):
        tl.store(x_ptr + tl.program_id(0), n)

    class PluginFill(TritonJitKernel):
        kernel = _plugin_fill_kernel

        @dataclass(frozen=True)
        class CompileKey:
            pass

        def dispatch(self):
            return self.CompileKey()

        def get_warmup_keys(self):
            return [self.CompileKey()]

        def warmup_inputs(self, key):
            return dict(x=WarmupTensor(torch.int32, (4,)), n=16)

        @kernel_launcher
        def __call__(self, *, x, n):
            return LaunchSpec(grid=(x.numel(),), returns=x)

    fill = PluginFill()

    @pytest.fixture(scope="session", autouse=True)
    def warmed():
        with compile_only("cuda:90"):
            registry = JitWarmupRegistry()
            with registry.activate():
                fill.register_warmup()
            yield registry.warmup(progress=False)

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


@pytest.fixture
def plugin_inner(pytester, monkeypatch, tmp_path):
    return _project(pytester, monkeypatch, tmp_path, FIXTURE_INNER)


def test_plugin_error_mode_fails_for_fixture_set_up_and_other_threads(plugin_inner):
    result = plugin_inner.runpytest_subprocess("-p", "zerojit.pytest_plugin", "--jit-monitor-mode=error",
                                               "-p", "no:cacheprovider", "-rfE")
    result.assert_outcomes(errors=1, failed=1)
    out = result.stdout.str()
    assert "ERROR test_inner.py::test_uses_model - Failed: the set-up of fixture 'model'" in out
    assert ("the set-up of fixture 'model' triggered 1 runtime compile after warm-up (JIT monitor in error mode; "
            "the RuntimeJitError was caught inside the fixture)") in out
    assert "FAILED test_inner.py::test_compiles_in_a_thread" in out
    assert ("the test body triggered 1 runtime compile after warm-up (JIT monitor in error mode; the "
            "RuntimeJitError was raised in thread 'server-loop', not in the test's own thread, so the test could not "
            "see it)") in out
    assert "caught inside the test" not in out
    assert "test_inner.py::test_uses_model [fixture 'model']: 1x runtime JIT compile of kernel 'plugin_fill'" in out


def test_plugin_warn_mode_attributes_fixture_compiles(plugin_inner):
    result = plugin_inner.runpytest_subprocess("-p", "zerojit.pytest_plugin", "--jit-monitor-mode=warn",
                                               "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "2 runtime compiles after warm-up in 2 tests:" in out
    assert "test_inner.py::test_uses_model [fixture 'model']: 1x runtime JIT compile of kernel 'plugin_fill'" in out
    assert "test_inner.py::test_compiles_in_a_thread: 1x" in out
