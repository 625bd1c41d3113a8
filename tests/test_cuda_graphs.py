"""CUDA-graph capture on CPU (issue 32): the monitor refuses a miss during an open capture in
every mode, before Triton compiles or loads anything, and a warmed key launches (a hit is
captured). An open capture is simulated with zerojit.capture.capture_started()/capture_ended(),
what the torch.cuda.CUDAGraph.capture_begin/end wrappers call; the runner's bucket choice,
padding, config validation and host-int audit for --cuda-graphs are checked here too."""

from __future__ import annotations

import threading

import pytest
import torch
from triton import knobs

from _fallback_kernels import add_n_kernel
from zerojit import capture
from zerojit import triton_compat as tc
from zerojit.context import allow_compiles
from zerojit.monitor import CaptureCompileError, JitMonitor, RuntimeJitError


@pytest.fixture
def warmed(compile_only_target, monkeypatch):
    """add_n_kernel warmed at n=16 (float32), and a compilation listener that counts compiles
    (the monitor chains onto it, calling it first)."""
    add_n_kernel.device_caches.clear()
    x, out = torch.zeros(64), torch.zeros(64)
    with allow_compiles():
        add_n_kernel[(1,)](x, out, 16, BLOCK=64)
    compiles = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: compiles.append(kw))
    yield x, out, compiles
    add_n_kernel.device_caches.clear()


@pytest.mark.parametrize("mode", ["warn", "error", "fallback"])
def test_a_miss_during_a_capture_is_refused_before_anything_compiles_in_every_mode(warmed, mode):
    x, out, compiles = warmed
    cached = len(tc.every_kernel_cache(add_n_kernel)[0])
    with JitMonitor(mode, report=()) as monitor:
        assert torch.cuda.CUDAGraph.capture_begin.__wrapped__  # capture counting installed with the monitor
        capture.capture_started()
        try:
            add_n_kernel[(1,)](x, out, 16, BLOCK=64)  # the warmed key: a hit, launched (captured)
            with pytest.raises(CaptureCompileError) as err:
                add_n_kernel[(1,)](x, out, 17, BLOCK=64)  # n=17: not divisible by 16, another key
        finally:
            capture.capture_ended()
        message = str(err.value)
        assert "kernel 'add_n' missed Triton key" in message  # (the function's name, less _kernel)
        assert "a CUDA-graph capture forbids compiling or loading a module" in message
        assert "n: " in message and "not-divisible-by-16" in message  # the runtime specialization
        assert compiles == [] and len(tc.every_kernel_cache(add_n_kernel)[0]) == cached
        # with the capture ended, the same miss is the mode's ordinary miss (compiles, or is blocked)
        if mode == "error":
            with pytest.raises(RuntimeJitError) as blocked:
                add_n_kernel[(1,)](x, out, 17, BLOCK=64)
            assert not isinstance(blocked.value, CaptureCompileError)
        else:
            add_n_kernel[(1,)](x, out, 17, BLOCK=64)
            assert len(compiles) == 1
        assert monitor.counts().compiled == (0 if mode == "error" else 1)


def test_a_capture_open_on_another_thread_refuses_a_miss_on_this_one(warmed):
    x, out, compiles = warmed
    begun, release = threading.Event(), threading.Event()

    def capturing_thread():
        capture.capture_started()
        begun.set()
        release.wait(30)
        capture.capture_ended()

    with JitMonitor("warn", report=()):
        thread = threading.Thread(target=capturing_thread)
        thread.start()
        try:
            assert begun.wait(30)
            with pytest.raises(CaptureCompileError, match="'add_n' missed"):
                add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        finally:
            release.set()
            thread.join(30)
    assert compiles == [] and capture.open_captures() == 0
