"""CUDA-graph capture on CPU (issue 32): the monitor refuses a miss during an open capture in
every mode, before Triton compiles or loads anything, and a warmed key launches (a hit is
captured). An open capture is simulated with zerojit.capture.capture_started()/capture_ended(),
what the torch.cuda.CUDAGraph.capture_begin/end wrappers call; the runner's bucket choice,
padding, config validation and host-int audit for --cuda-graphs are checked here too."""

from __future__ import annotations

import contextlib
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


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_a_miss_refused_during_a_capture_is_counted_blocked_and_names_the_mode(warmed, mode):
    """The refusal is a runtime compile that was blocked (in warn mode too), and the message names
    the monitor's real mode."""
    x, out, _ = warmed
    with JitMonitor(mode, report=()) as monitor:
        capture.capture_started()
        try:
            with pytest.raises(CaptureCompileError) as err:
                add_n_kernel[(1,)](x, out, 17, BLOCK=64)
        finally:
            capture.capture_ended()
    counts = monitor.counts()
    assert (counts.runtime_compiles, counts.blocked, counts.compiled, counts.request_path_compiles) == (1, 1, 0, 0)
    assert [(m.misses, m.blocked) for m in monitor.misses()] == [(1, 1)]
    assert f"the JIT monitor (in {mode} mode) refuses every compile while a capture is open" in str(err.value)
    assert "is in error mode" not in str(err.value)


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


# -- the runner's --cuda-graphs: buckets, padding, host ints, config, exit 2 ------------------

import dataclasses  # noqa: E402

from zerojit.kernel import KernelInputError  # noqa: E402
from zerojit.kernels.mla.config import ConfigError, ModelConfig  # noqa: E402
from zerojit.kernels.mla.swa import compute_swa_indices_and_lens  # noqa: E402
from zerojit.runner.config import CONFIG_DIR, load_config  # noqa: E402
from zerojit.runner.graphs import (captured_host_ints, decode_step_metadata, graph_bucket, live_rows,  # noqa: E402
                                   pad_decode_inputs)
from zerojit.runner.kv_cache import allocate_kv_cache  # noqa: E402
from zerojit.runner.metadata import (REFERENCES, DecodeBuffers, MetadataOps, MetadataPlan, build_step_inputs,  # noqa: E402
                                     compare_metadata, step_metadata)
from zerojit.runner.model import SparseMLAModel  # noqa: E402
from zerojit.runner.scheduler import Batch  # noqa: E402


@pytest.fixture(scope="module")
def plan():
    """dsv4-like (one speculative token: Lq 2; K2 at ratios 4 and 128, K3, K1, K6 causal and
    draft), built outside any registry (nothing registers)."""
    cfg = load_config("dsv4-like")
    return MetadataPlan.for_cache(cfg, SparseMLAModel(cfg).backend, allocate_kv_cache(cfg, 16))


def _decode(step, seq_lens, lq=2):
    return Batch(step=step, request_ids=tuple(range(len(seq_lens))), query_lens=(lq,) * len(seq_lens),
                 seq_lens=tuple(seq_lens), num_decodes=len(seq_lens))


def _blocks(seq_lens, block_tokens=256):
    out, next_id = [], 1
    for s in seq_lens:
        n = -(-s // block_tokens)
        out.append(list(range(next_id, next_id + n)))
        next_id += n
    return out


def test_cuda_graph_batch_sizes_are_validated_and_default_to_powers_of_two():
    assert ModelConfig().cuda_graph_batch_sizes == (1, 2, 4, 8, 16, 32)
    assert ModelConfig(cuda_graph_batch_sizes=[1, 3]).cuda_graph_batch_sizes == (1, 3)  # a list is kept as a tuple
    assert load_config("dsv4-like", cuda_graph_batch_sizes=[2, 8]).to_dict()["cuda_graph_batch_sizes"] == [2, 8]
    for bad, words in (([4, 2], "must be sorted and unique; use [2, 4]"), ([2, 2], "sorted and unique"),
                       ([0, 1], "0 is not a positive int"), ([1, 2.5], "2.5 is not a positive int"),
                       ([], "must be a non-empty list"), ([True], "true is not a positive int")):
        with pytest.raises(ConfigError, match="cuda_graph_batch_sizes=") as err:
            ModelConfig(cuda_graph_batch_sizes=bad)
        assert words in str(err.value), bad


def test_cuda_graph_batch_sizes_messages_echo_the_json(tmp_path):
    """A bad value is echoed as the config file wrote it (JSON), not as Python's repr."""
    import json

    for written, echoed in (("true", "true"), ("null", "null"), ('[1, "2"]', '[1, "2"]')):
        path = tmp_path / "c.json"
        path.write_text(json.dumps({**json.loads((CONFIG_DIR / "dsv4-like.json").read_text()),
                                    "cuda_graph_batch_sizes": json.loads(written)}))
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert f"cuda_graph_batch_sizes={echoed}:" in str(err.value), written
        assert "True" not in str(err.value) and "None" not in str(err.value)


def test_a_decode_step_replays_the_smallest_bucket_that_holds_it_and_others_run_eagerly():
    sizes = (1, 2, 4, 8)
    assert [graph_bucket(_decode(0, [9] * n), sizes, 2) for n in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, None]
    mixed = Batch(step=0, request_ids=(0, 1), query_lens=(2, 7), seq_lens=(9, 7), num_decodes=1)
    assert graph_bucket(mixed, sizes, 2) is None  # a prefill: eager
    assert graph_bucket(_decode(0, [9, 9], lq=1), sizes, 2) is None  # not 1 + num_speculative_tokens tokens


@pytest.mark.parametrize("seq_lens,bucket", [([300, 17, 1000], 4), ([5, 4096, 77, 256], 4), ([2], 1)])
def test_a_padded_decode_step_equals_the_eager_step_on_its_live_rows(plan, seq_lens, bucket):
    inputs = build_step_inputs(_decode(3, seq_lens), plan, blocks=_blocks(seq_lens), seed=1)
    want = step_metadata(inputs, plan, REFERENCES, DecodeBuffers.allocate(plan, fill=-7))
    padded = pad_decode_inputs(inputs, bucket, plan.config.query_len)
    got = decode_step_metadata(padded, plan, REFERENCES, DecodeBuffers.allocate(plan, fill=-7), bucket)
    T, Tn = inputs.num_tokens, bucket * 2
    assert sorted(got.outputs) == sorted(want.outputs)
    assert compare_metadata(live_rows(got, T), live_rows(want, T)) == []
    assert padded.seq_lens[len(seq_lens):].tolist() == [0] * (bucket - len(seq_lens))
    assert padded.query_start_loc.tolist()[len(seq_lens):] == [T] * (bucket - len(seq_lens) + 1)  # query length 0
    # the padding rows: no slot, no window, no top-k entry
    for name in ("K2 slot_mapping ratio 4", "K2 slot_mapping ratio 128"):
        assert got.outputs[name].shape == (Tn,) and got.outputs[name][T:].tolist() == [-1] * (Tn - T)
    assert got.outputs["K6 causal swa_lens"][T:].tolist() == [0] * (Tn - T)
    assert got.outputs["K6 draft swa_lens"][T:].tolist() == [0] * (Tn - T)
    assert got.outputs["K1 decode valid_counts"][T:].tolist() == [0] * (Tn - T)


def _recording(calls):
    def wrap(fn):
        def call(**kwargs):
            calls.append((fn.__name__, {k: (v.dtype, tuple(v.shape), v.stride()) if isinstance(v, torch.Tensor) else v
                                        for k, v in kwargs.items()}))
            return fn(**kwargs)
        return call

    fields = [f.name for f in dataclasses.fields(MetadataOps) if f.name != "name"]
    return MetadataOps("recording", **{f: wrap(getattr(REFERENCES, f)) for f in fields})


def test_every_host_int_and_shape_of_a_captured_step_depends_only_on_its_bucket(plan):
    records = []
    for step, seq_lens in ((4, [300, 17, 1000]), (9, [2, 5000, 640, 8191])):  # 3 and 4 requests, bucket 4
        calls = []
        inputs = build_step_inputs(_decode(step, seq_lens), plan, blocks=_blocks(seq_lens), seed=step)
        decode_step_metadata(pad_decode_inputs(inputs, 4, 2), plan, _recording(calls), DecodeBuffers.allocate(plan), 4)
        records.append(calls)
    assert records[0] == records[1]  # every int, and every tensor's dtype, shape and stride
    ints = captured_host_ints(plan, 4)
    assert ints["K6 draft"]["max_query_len"] == 2 and ints["K3"] == {"query_len": 2, "num_decode_tokens": 8}
    launched = [{k: v for k, v in kw.items() if not isinstance(v, tuple)} for _, kw in records[0]]
    assert launched[0] == ints["K2 slot_mapping ratio 4"] and launched[1] == ints["K2 slot_mapping ratio 128"]
    assert {"num_tokens": 8, "token_offset": 0, "max_query_len": 2}.items() <= launched[-1].items()


def test_k6_without_max_query_len_refuses_during_a_capture_instead_of_reading_the_device(compile_only_target):
    n = 4
    qsl = torch.arange(0, 2 * n + 1, 2, dtype=torch.int32)
    kw = dict(token_to_req=torch.zeros(2 * n, dtype=torch.int32), slot_mapping=torch.zeros(2 * n, dtype=torch.int64),
              seq_lens=torch.full((n,), 9, dtype=torch.int32), query_start_loc=qsl,
              block_table=torch.zeros((n, 4), dtype=torch.int32), num_tokens=2 * n, token_offset=0, sliding_window=128,
              block_size=64, block_stride_rows=64, causal=False, num_speculative_tokens=1)
    capture.capture_started()
    try:
        with pytest.raises(KernelInputError, match="max_query_len.*must be given during a CUDA-graph capture"):
            compute_swa_indices_and_lens(**kw)
    finally:
        capture.capture_ended()


def test_cuda_graphs_without_a_gpu_exits_2_with_one_line():
    from typer.testing import CliRunner

    from zerojit.cli import app

    result = CliRunner().invoke(app, ["run", "--device", "cpu", "--cuda-graphs", "--requests", "1", "--no-progress"])
    assert result.exit_code == 2
    out = result.output.strip()
    assert out.count("\n") == 0 and "--cuda-graphs needs a CUDA GPU" in out and "Traceback" not in out


def test_the_graph_report_gives_both_medians_and_fails_on_a_compile_or_a_mismatch():
    from zerojit.runner.graphs import GraphReport

    r = GraphReport((1, 2, 4), captures=2, replays=5, checked=5, graph_step_ms=[1.0, 3.0, 2.0],
                    eager_step_ms=[4.0, 6.0, 5.0, 9.0])
    assert (r.median_decode_graph_ms, r.median_decode_eager_ms, r.ok) == (2.0, 5.5, True)
    d = r.to_dict()
    assert (d["captures"], d["replays"], d["compiles_during_capture_and_replay"], d["batch_sizes"]) == (2, 5, 0, [1, 2, 4])
    assert "median decode step 2.000 ms with graphs, 5.500 ms without (2.75x)" in r.summary()
    assert not dataclasses.replace(r, compiles=1).ok and not dataclasses.replace(r, mismatches=["x"]).ok


def test_decode_graphs_capture_once_per_bucket_and_replay_later_steps_from_their_static_inputs(plan, monkeypatch):
    """DecodeGraphs' flow on CPU: torch.cuda's graph, stream and synchronize are stood in for by
    fakes whose replay re-runs the captured launches on the captured (static) tensors and writes
    into the captured outputs, as a replay does; the references stand in for the kernels. A later
    step of a bucket must reach the launches only through the static inputs it is copied into."""
    from zerojit.runner import graphs as graphs_mod
    from zerojit.runner.graphs import DecodeGraphs

    class FakeStream:
        def wait_stream(self, other):
            pass

    class FakeGraph:
        replay_fn = None

        def replay(self):
            self.replay_fn()

    open_graphs = []

    class FakeCapture:
        def __init__(self, graph, **kw):
            self.graph = graph

        def __enter__(self):
            open_graphs.append(self.graph)

        def __exit__(self, *exc):
            open_graphs.pop()

    real = graphs_mod.decode_step_metadata

    def recorded(*args, **kwargs):
        out = real(*args, **kwargs)
        if open_graphs:
            def replay():
                for name, value in real(*args, **kwargs).outputs.items():
                    out.outputs[name].copy_(value)
            open_graphs[-1].replay_fn = replay
        return out

    monkeypatch.setattr(graphs_mod, "decode_step_metadata", recorded)
    monkeypatch.setattr(graphs_mod, "KERNELS", REFERENCES)
    for name, value in dict(CUDAGraph=FakeGraph, graph=FakeCapture, Stream=lambda *a: FakeStream(),
                            stream=lambda s: contextlib.nullcontext(), current_stream=lambda *a: FakeStream(),
                            synchronize=lambda *a: None).items():
        monkeypatch.setattr(torch.cuda, name, value)

    dg = DecodeGraphs(plan, torch.device("cpu"), seed=3, checks=4, compile_marker=lambda: (0, 0))
    steps = [[300, 17, 1000], [40, 8000, 2], [9], [12, 700, 5000, 64], [33]]  # buckets 4, 4, 1, 4, 1
    for i, seq_lens in enumerate(steps):
        batch = _decode(10 + i, seq_lens)
        bucket = dg.bucket(batch)
        got = dg.step(batch, bucket, _blocks(seq_lens))
        inputs = build_step_inputs(batch, plan, blocks=_blocks(seq_lens), seed=3)
        want = step_metadata(inputs, plan, REFERENCES, DecodeBuffers.allocate(plan, fill=-7))
        assert compare_metadata(got, live_rows(want, inputs.num_tokens)) == [], (i, seq_lens)
    r = dg.report
    assert (r.captures, r.replays, r.checked, r.mismatches, r.eager_steps) == (2, 5, 4, [], 0)
    assert len(r.graph_step_ms) == len(r.eager_step_ms) == 5
