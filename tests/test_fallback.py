"""Fallback mode end to end under compile-only (cuda:90): a miss a generic variant serves costs no
compile on the request path, the key compiles in a background worker process (really: its Triton
disk entry appears), and the specialized variant is swapped in by the policy.

Generic variants are filed here by the test itself (a dry warm-up launch of the generic function
under compile-only, then :func:`zerojit.generic.register`), as the warm-up does it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from triton import knobs

from _fallback_kernels import AddN, add_n_kernel, div_n_kernel
from zerojit import generic, serving
from zerojit import triton_compat as tc
from zerojit.audit import build_audit
from zerojit.cache import entry_name
from zerojit.context import allow_compiles
from zerojit.monitor import (ENV_VAR, FallbackOptions, JitMonitor, MonitorModeError, RuntimeJitError,
                             configured_mode, specialization_from_compile_info)
from zerojit import capture
from zerojit.serving.fallback import CaptureCompileError, FallbackVariant
from zerojit.specialization import spec_classes

WAIT_S = 120.0


@pytest.fixture
def fresh(compile_only_target):
    """Empty in-process caches and generic table before and after the test."""
    for fn in (add_n_kernel, div_n_kernel):
        fn.device_caches.clear()
        generic.generic_function_of(fn).device_caches.clear()
    generic.forget()
    yield compile_only_target
    generic.forget()


def _file_generic(jit_fn, *args, **kwargs):
    """Warm ``jit_fn`` at ``args`` and file its generic variant for that key's group, as the
    warm-up does; returns (the warmed CompiledKernel, the generic one)."""
    with allow_compiles():
        warmed = jit_fn[(1,)](*args, **kwargs)
        compiled = generic.generic_function_of(jit_fn)[(1,)](*args, **kwargs)
    key = tc.find_in_process_key(jit_fn, warmed)
    spec = specialization_from_compile_info(*tc.source_of(warmed))
    generic.register(jit_fn, tc.current_device(), generic.group_of(jit_fn, spec, key), compiled)
    return warmed, compiled


def _key(jit_fn, *args, **kwargs):
    """Triton's in-process key for a launch, from Triton's binder."""
    _, specialization, options = tc.bind(jit_fn, *args, **kwargs)
    return tc.in_process_key(specialization, options)


def _tensors(n=64, dtype=torch.float32):
    return torch.zeros(n, dtype=dtype), torch.zeros(n, dtype=dtype)


def test_a_miss_a_generic_variant_serves_compiles_nothing_on_the_request_path(fresh):
    x, out = _tensors()
    _, compiled = _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=()) as monitor:
        served = add_n_kernel[(1,)](x, out, 17, BLOCK=64)  # 17: not divisible by 16, a new key
        key = _key(add_n_kernel, x, out, 17, BLOCK=64)
        assert isinstance(served, FallbackVariant) and served.generic is compiled
        assert tc.kernel_cache(add_n_kernel, tc.current_device())[key] is served
        assert add_n_kernel[(1,)](x, out, 17, BLOCK=64) is served  # later launches of the key: plain hits
        counts = monitor.counts()
        assert (counts.request_path_compiles, counts.runtime_compiles, counts.fallback_launches) == (0, 0, 1)
        assert serving.wait_idle(WAIT_S)


def test_the_background_compile_is_real_and_between_requests_swaps_in_the_specialized_variant(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=()) as monitor:
        served = add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        key = _key(add_n_kernel, x, out, 17, BLOCK=64)
        cache = tc.kernel_cache(add_n_kernel, tc.current_device())
        assert serving.wait_idle(WAIT_S) and serving.failures() == ()
        assert cache[key] is served  # the default policy waits for the engine's call
        assert serving.between_requests() == 1
        specialized = add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        assert specialized is cache[key] and not isinstance(specialized, FallbackVariant)
        # the key's own variant: the specialization Triton's binder gives these arguments
        _, specialization, _ = tc.bind(add_n_kernel, x, out, 17, BLOCK=64)
        assert specialization_from_compile_info(*tc.source_of(specialized)) == spec_classes(add_n_kernel, specialization)
        # compiled by the worker into the disk cache (this process only read it)
        src = tc.source_of(specialized)
        digest = tc.disk_cache_hash(tc.ast_source(*src), tc.gpu_target("cuda", 90, 32), None)
        entry = os.path.join(knobs.cache.dir, entry_name(digest))
        assert any(f.endswith(".cubin") for f in os.listdir(entry))
        counts = monitor.counts()
        assert (counts.request_path_compiles, counts.fallback_launches, counts.background_compiles, counts.swaps,
                counts.background_failures) == (0, 1, 1, 1, 0)


def test_swap_immediate_needs_no_call_and_never_never_swaps(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    cache = lambda: tc.kernel_cache(add_n_kernel, tc.current_device())  # noqa: E731
    with JitMonitor("fallback", report=(), fallback=FallbackOptions(swap="immediate")) as monitor:
        add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        assert serving.wait_idle(WAIT_S)
        assert not isinstance(cache()[_key(add_n_kernel, x, out, 17, BLOCK=64)], FallbackVariant)
        assert monitor.counts().swaps == 1
    with JitMonitor("fallback", report=(), fallback=FallbackOptions(swap="never")) as monitor:
        served = add_n_kernel[(1,)](x[1:], out, 17, BLOCK=64)  # an unaligned pointer: another key
        assert isinstance(served, FallbackVariant)
        assert serving.wait_idle(WAIT_S)
        assert serving.between_requests() == 0
        assert cache()[_key(add_n_kernel, x[1:], out, 17, BLOCK=64)] is served
        counts = monitor.counts()
        assert (counts.background_compiles, counts.swaps) == (1, 0)


def test_fallback_miss_error_raises_before_compiling_a_new_constexpr(fresh):
    x, out = _tensors(128)
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=(), fallback=FallbackOptions(fallback_miss="error")) as monitor:
        with pytest.raises(RuntimeJitError, match="no generic variant serves this key .* nothing was compiled"):
            add_n_kernel[(1,)](x, out, 16, BLOCK=128)  # a constexpr no generic variant has
        assert not any("('constexpr', 128)" in k for k in tc.kernel_cache(add_n_kernel, tc.current_device()))
        counts = monitor.counts()
        assert (counts.blocked, counts.compiled, counts.request_path_compiles, counts.fallback_launches) == (1, 0, 0, 0)


def test_a_new_dtype_with_no_generic_variant_compiles_inline_and_is_counted(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=()) as monitor:
        half, half_out = _tensors(dtype=torch.float16)
        compiled = add_n_kernel[(1,)](half, half_out, 16, BLOCK=64)
        assert not isinstance(compiled, FallbackVariant)
        counts = monitor.counts()
        assert (counts.request_path_compiles, counts.compiled, counts.fallback_launches,
                counts.background_compiles) == (1, 1, 0, 0)


def test_a_failing_background_compile_is_reported_and_the_generic_variant_keeps_serving(fresh):
    x = torch.zeros(4, dtype=torch.int32)
    _file_generic(div_n_kernel, x, 16)
    with JitMonitor("fallback", report=()) as monitor:
        served = div_n_kernel[(1,)](x, 1)  # Triton makes n == 1 a constexpr; that compile divides by zero
        key = _key(div_n_kernel, x, 1)
        assert isinstance(served, FallbackVariant) and "('constexpr', 1)" in key
        assert serving.wait_idle(WAIT_S)
        (failure,) = serving.failures()
        assert (failure.kernel, failure.key) == ("div_n_kernel", key)
        assert failure.error.startswith("CompilationError") and "division or modulo by zero" in failure.error
        assert serving.between_requests() == 0
        assert div_n_kernel[(1,)](x, 1) is served
        counts = monitor.counts()
        assert (counts.request_path_compiles, counts.background_compiles, counts.swaps) == (0, 0, 0)
        assert counts.background_failures == 1  # what run's and exec's closing lines and JSON report


def test_a_worker_killed_mid_compile_is_replaced_and_the_request_retried(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=()) as monitor:
        add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        assert serving.wait_idle(WAIT_S)
        (pid,) = serving.active_server().background.worker_pids()
        # one worker, spawned (a new interpreter running the worker script, not a fork), at nice 19
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[2].endswith(b"zerojit/_compile_worker.py")
        assert os.getpriority(os.PRIO_PROCESS, pid) == 19
        os.kill(pid, signal.SIGSTOP)  # it cannot take the next request before it dies
        add_n_kernel[(1,)](x[1:], out, 17, BLOCK=64)
        time.sleep(0.2)  # the request is in its pipe
        os.kill(pid, signal.SIGKILL)
        assert serving.wait_idle(WAIT_S)
        assert serving.failures() == ()
        (note,) = serving.active_server().notes()
        assert f"worker {pid} died (killed by signal {int(signal.SIGKILL)})" in note and "replaced" in note
        assert serving.active_server().background.worker_pids() not in ((), (pid,))
        assert serving.between_requests() == 2
        assert monitor.counts().background_compiles == 2


def test_a_hung_worker_is_killed_by_the_watchdog_and_replaced(fresh, monkeypatch):
    monkeypatch.setenv("ZEROJIT_COMPILE_STALL_S", "2")  # no CPU time for 2 s: hung
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=(), fallback=FallbackOptions(nice=0)) as monitor:
        add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        assert serving.wait_idle(WAIT_S)
        (pid,) = serving.active_server().background.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # a stopped process uses no CPU time
        add_n_kernel[(1,)](x[1:], out, 17, BLOCK=64)
        assert serving.wait_idle(WAIT_S)
        (note,) = serving.active_server().notes()
        assert f"worker {pid} stopped answering (no CPU time for" in note and "replaced" in note
        assert serving.failures() == () and monitor.counts().background_compiles == 2


def test_the_capture_gate_holds_a_swap_while_a_capture_is_open(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    with JitMonitor("fallback", report=(), fallback=FallbackOptions(swap="immediate")) as monitor:
        capture.capture_started()  # what the torch.cuda.CUDAGraph.capture_begin wrapper calls
        try:
            served = add_n_kernel[(1,)](x, out, 17, BLOCK=64)  # served during the capture: nothing loads
            assert isinstance(served, FallbackVariant)
            with pytest.raises(CaptureCompileError, match="during a CUDA-graph capture"):
                add_n_kernel[(1,)](*_tensors(dtype=torch.float16), 16, BLOCK=64)  # would compile: refused
            with pytest.raises(CaptureCompileError, match="'div_n_kernel' missed"):  # no generic variants at all
                div_n_kernel[(1,)](torch.zeros(4, dtype=torch.int32), 16)
            assert not tc.every_kernel_cache(div_n_kernel)[0]
            assert serving.wait_idle(WAIT_S)
            key = _key(add_n_kernel, x, out, 17, BLOCK=64)
            assert tc.kernel_cache(add_n_kernel, tc.current_device())[key] is served
            assert serving.between_requests() == 0
        finally:
            capture.capture_ended()  # the held swap is made now (immediate)
        assert not isinstance(tc.kernel_cache(add_n_kernel, tc.current_device())[key], FallbackVariant)
        counts = monitor.counts()
        assert (counts.swaps, counts.request_path_compiles, counts.compiled) == (1, 0, 0)


def test_fallback_mode_installs_and_releases_the_handler_and_the_audit_reports_its_counts(fresh, monkeypatch):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    monkeypatch.setenv(ENV_VAR, "fallback")
    assert configured_mode() == "fallback"
    with pytest.raises(MonitorModeError, match="off, warn, error, fallback"):
        JitMonitor("fallbak")
    with pytest.raises(ValueError, match="FallbackOptions.swap"):
        FallbackOptions(swap="later")
    monitor = JitMonitor("fallback", report=())
    assert not tc.misses_intercepted(add_n_kernel)
    monitor.install()
    try:
        assert tc.misses_intercepted(add_n_kernel)
        second = JitMonitor("fallback", report=())
        with pytest.raises(RuntimeError, match="a fallback is installed already"):
            second.install()
        assert not second.installed
        add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        assert serving.wait_idle(WAIT_S) and serving.between_requests() == 1
        audit = build_audit(None, monitor).to_dict()
        assert {k: audit[k] for k in ("request_path_compiles", "fallback_launches", "background_compiles", "swaps")} == {
            "request_path_compiles": 0, "fallback_launches": 1, "background_compiles": 1, "swaps": 1}
    finally:
        monitor.uninstall()
    assert not tc.misses_intercepted(add_n_kernel) and serving.active_server() is None


def test_launches_through_zerojit_count_every_fallback_launch_and_the_audit_lists_none_as_unwarmed(fresh):
    x, out = _tensors()
    _file_generic(add_n_kernel, x, out, 16, BLOCK=64)
    kernel = AddN()
    with JitMonitor("fallback", report=()) as monitor:
        for _ in range(3):
            kernel(x=x, out=out, n=17)  # one miss the generic variant serves, then two hits of it
        counts = monitor.counts()
        assert (counts.fallback_launches, counts.launches, counts.request_path_compiles) == (3, 3, 0)
        audit = build_audit(None, monitor)
        assert audit.fallback_launches == 3
        (coverage,) = audit.kernels  # its launches served, counted per kernel: no "unwarmed hit" of the generic variant
        assert (coverage.kernel, coverage.fallback_launches, coverage.unwarmed_hits, coverage.misses) == (
            kernel.name, 3, (), ())
        assert "fallback: 0 request-path compiles, 3 fallback launches" in audit.table()
        assert "  SERVED  3 launches in classes the warm-up lacked, by generic variants" in audit.table()
        assert type(audit).from_dict(audit.to_dict()) == audit
        assert serving.wait_idle(WAIT_S) and serving.between_requests() == 1
        kernel(x=x, out=out, n=17)  # the specialized variant now: no more fallback launches
        assert monitor.counts().fallback_launches == 3
