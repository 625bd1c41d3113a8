"""CUDA-graph capture on a GPU (issue 32): a warmed zerojit launch captured in a real
``torch.cuda.graph`` replays bit-equal to eager; a miss inside a real capture raises
CaptureCompileError before anything compiles or loads and leaves the capture usable; the
runner's ``--cuda-graphs`` replays decode steps with 0 compiles, equal to eager.
Run with ``pytest -m gpu tests/test_cuda_graphs_gpu.py`` (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from triton import knobs

from _fallback_kernels import add_n_kernel
from zerojit import capture
from zerojit.context import allow_compiles
from zerojit.monitor import CaptureCompileError, JitMonitor

pytestmark = pytest.mark.gpu


@pytest.fixture
def warmed(tmp_path, monkeypatch):
    """add_n_kernel compiled and loaded at n=16 (what a warm-up does), in a fresh cache; a
    compilation listener that counts compiles under the monitor."""
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton-cache"))
    add_n_kernel.device_caches.clear()
    x = torch.arange(64, dtype=torch.float32, device="cuda")
    out = torch.zeros(64, dtype=torch.float32, device="cuda")
    with allow_compiles():
        add_n_kernel[(1,)](x, out, 16, BLOCK=64)
    torch.cuda.synchronize()
    compiles = []
    monkeypatch.setattr(knobs.compilation, "listener", lambda **kw: compiles.append(kw))
    yield x, out, compiles
    add_n_kernel.device_caches.clear()


def test_a_captured_warmed_launch_replays_bit_equal_to_eager(warmed):
    x, out, compiles = warmed
    with JitMonitor("error", report=()):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            add_n_kernel[(1,)](x, out, 16, BLOCK=64)
        assert capture.open_captures() == 0
        for seed in range(3):
            x.copy_(torch.randn(64, generator=torch.Generator().manual_seed(seed)).cuda())
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            want = torch.zeros_like(out)
            add_n_kernel[(1,)](x, want, 16, BLOCK=64)
            assert torch.equal(out, want)
            assert torch.equal(out[:16], x[:16] + 16) and torch.equal(out[16:], torch.zeros(48, device="cuda"))
    assert compiles == []


@pytest.mark.parametrize("mode", ["warn", "error", "fallback"])
def test_a_miss_inside_a_real_capture_is_refused_and_the_capture_stays_usable(warmed, mode):
    x, out, compiles = warmed
    with JitMonitor(mode, report=()):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            assert capture.capturing() and capture.open_captures() == 1
            add_n_kernel[(1,)](x, out, 16, BLOCK=64)
            with pytest.raises(CaptureCompileError, match="CUDA-graph capture forbids"):
                add_n_kernel[(1,)](x, out, 17, BLOCK=64)  # another key: would compile and load a module
        assert capture.open_captures() == 0 and not torch.cuda.is_current_stream_capturing()
        assert compiles == []
        out.zero_()
        graph.replay()  # the capture was not invalidated: it replays the warmed launch
        torch.cuda.synchronize()
        assert torch.equal(out[:16], x[:16] + 16)
        if mode != "error":  # outside a capture the miss is the mode's ordinary one: it compiles
            add_n_kernel[(1,)](x, out, 17, BLOCK=64)
            torch.cuda.synchronize()
            assert torch.equal(out[:17], x[:17] + 17) and len(compiles) == 1


def test_the_runner_replays_decode_steps_with_no_compile_and_equal_to_eager():
    from zerojit.runner.engine import RunOptions, run

    report = run(RunOptions(config="dsv4-like", requests=60, device="cuda", check=6, progress=False,
                            fresh_triton_cache=True, cuda_graphs=True))
    g = report.graphs
    assert g is not None and g.captures >= 1 and g.replays >= g.captures, g.to_dict()
    assert g.compiles == 0 and g.checked == min(6, g.replays) and g.mismatches == [], g.to_dict()
    assert report.request_path_compiles == 0 and report.checks is not None and report.checks.ok
    assert g.median_decode_graph_ms is not None and g.median_decode_eager_ms is not None
    assert report.to_dict()["cuda_graphs"]["compiles_during_capture_and_replay"] == 0
