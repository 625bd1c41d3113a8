"""K3 prepare_uniform_decode: equivalence with the reference (interpreter; sentinels outside the
live rows and columns survive), the config-free key space against dry launches (compile-only),
bad inputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from zerojit.kernels.mla import reference
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.decode import TILE, PrepareUniformDecode, prepare_uniform_decode
from zerojit.registry import JitWarmupRegistry

from _support import gpu_examples, input_error, on_cuda, slow_examples

I32 = torch.int32
SENTINEL = -12345


# ----------------------------------------------------------------------------- case builder
def make_case(
    *,
    seed: int,
    num_decodes: int,
    query_len: int,
    width: int,
    Nd: int | None = None,
    extra_reqs: int = 0,
    extra_rows: int = 0,
    extra_cols: int = 0,
    bt_extra_cols: int = 0,
    bt_offset: int = 0,
    ebt_offset: int = 0,
) -> dict:
    """Inputs of one K3 call; output buffers are sentinel-filled and sized past the live part."""
    g = torch.Generator().manual_seed(seed)
    R = num_decodes + extra_reqs
    Nd = num_decodes * query_len if Nd is None else Nd
    seq_lens = torch.randint(0, 3 * query_len + 40, (R,), generator=g, dtype=I32)
    bt_cols = width + bt_extra_cols
    bt_buf = torch.randint(0, 10_000, (R * bt_cols + bt_offset,), generator=g, dtype=I32)
    block_table = bt_buf[bt_offset:].view(R, bt_cols)[:, :width]
    rows, cols = Nd + extra_rows, width + extra_cols
    ebt_buf = torch.full((rows * cols + ebt_offset,), SENTINEL, dtype=I32)
    return dict(
        seq_lens=seq_lens,
        block_table=block_table,
        expanded_seq_lens=torch.full((rows,), SENTINEL, dtype=I32),
        expanded_block_table=ebt_buf[ebt_offset:].view(rows, cols),
        query_len=query_len,
        num_decode_tokens=Nd,
    )


def clone_outputs(case: dict) -> dict:
    return {**case, "expanded_seq_lens": case["expanded_seq_lens"].clone(),
            "expanded_block_table": case["expanded_block_table"].clone()}


def check_against_reference(case: dict) -> None:
    ref_case = clone_outputs(case)
    ref_sl, ref_bt = reference.prepare_uniform_decode(**ref_case)
    sl, bt = prepare_uniform_decode(**case)
    assert sl is case["expanded_seq_lens"] and bt is case["expanded_block_table"]  # in place
    assert torch.equal(sl, ref_sl)
    assert torch.equal(bt, ref_bt)
    Nd, W = case["num_decode_tokens"], case["block_table"].shape[1]
    assert bool((sl[Nd:] == SENTINEL).all()) and bool((bt[Nd:] == SENTINEL).all())  # rows >= Nd
    assert bool((bt[:, W:] == SENTINEL).all())  # columns >= width


# ----------------------------------------------------------------------------- interpreter
@st.composite
def k3_cases(draw):
    num_decodes = draw(st.integers(0, 5))
    query_len = draw(st.integers(1, 5))
    full = num_decodes * query_len
    return make_case(
        seed=draw(st.integers(0, 2**16)),
        num_decodes=num_decodes,
        query_len=query_len,
        width=draw(st.sampled_from((0, 1, 3, 16, 17, TILE, TILE + 5, 2 * TILE, 3 * TILE - 1))),
        Nd=draw(st.sampled_from((full, full, max(full - 1, 0)))),
        extra_reqs=draw(st.sampled_from((0, 2))),
        extra_rows=draw(st.sampled_from((0, 3))),
        extra_cols=draw(st.sampled_from((0, 5))),
        bt_extra_cols=draw(st.sampled_from((0, 4, 7))),
        bt_offset=draw(st.sampled_from((0, 0, 1))),
        ebt_offset=draw(st.sampled_from((0, 0, 3))),
    )


@pytest.mark.interpreter
@slow_examples(40)
@given(k3_cases())
def test_matches_reference(case):
    check_against_reference(case)


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "what, kw",
    [
        ("empty batch", dict(num_decodes=0, query_len=2, width=8, extra_rows=4, extra_cols=2)),
        ("single token", dict(num_decodes=1, query_len=1, width=5, extra_rows=2, extra_cols=3)),
        ("single request", dict(num_decodes=1, query_len=4, width=40, extra_rows=5, extra_cols=1)),
        ("width over a tile, buffers at capacity", dict(num_decodes=3, query_len=3, width=TILE + 1)),
        ("short seq_lens clamp to 0", dict(num_decodes=4, query_len=5, width=2, extra_rows=1)),
        ("strided, unaligned views", dict(num_decodes=3, query_len=2, width=33, extra_reqs=2, bt_extra_cols=3,
                                          bt_offset=1, ebt_offset=1, extra_rows=2, extra_cols=6)),
    ],
)
def test_edge_cases(what, kw):
    check_against_reference(make_case(seed=len(what), **kw))


# ----------------------------------------------------------------------------- key space (compile-only)
def runtime_steps(config: ModelConfig, *, aligned_only: bool):
    """Decode steps of a runner: growing batches and block-table widths, buffers at capacity."""
    Lq = config.query_len
    max_rows = config.max_num_seqs * Lq
    widths = [1, 4, 64, 1024, config.max_blocks_per_req]
    for i, num_decodes in enumerate([1, 3, 64, config.max_num_seqs]):
        for width in widths:
            yield make_case(seed=i, num_decodes=num_decodes, query_len=Lq, width=width,
                            extra_rows=max_rows - num_decodes * Lq, extra_cols=config.max_blocks_per_req - width,
                            extra_reqs=i, bt_extra_cols=-width % 4)  # rows of 4k ints: aligned
    if not aligned_only:  # a caller slicing a batch out of a bigger table at an odd offset
        yield make_case(seed=9, num_decodes=5, query_len=Lq, width=17, bt_offset=1)
        yield make_case(seed=9, num_decodes=5, query_len=Lq, width=17, ebt_offset=2)
        yield make_case(seed=9, num_decodes=5, query_len=Lq, width=18)  # rows of 18 ints: not aligned


CONFIGS = {
    "mtp1": ModelConfig(name="mtp1", block_size=64, num_speculative_tokens=1, max_num_seqs=256),
    "mtp3": ModelConfig(name="mtp3", block_size=256, num_speculative_tokens=3, max_num_seqs=128,
                        max_model_len=1 << 20),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("aligned", [(True,), (True, False)])
def test_warmup_covers_runtime_with_no_dead_key(name, aligned, assert_warmup_covers):
    config = CONFIGS[name]
    registry = JitWarmupRegistry()
    with registry.activate():
        prepare_uniform_decode.register_warmup(aligned=aligned)
        prepare_uniform_decode.register_warmup(aligned=aligned)  # a second backend: kept once
    report = registry.warmup(config, progress=False)  # config is not passed to K3
    keys = report.keys_by_kernel()["prepare_uniform_decode"]
    assert [k.aligned for k in keys] == list(aligned)
    with assert_warmup_covers(prepare_uniform_decode, report):
        for case in runtime_steps(config, aligned_only=aligned == (True,)):
            assert prepare_uniform_decode.key_for(**case) in keys
            prepare_uniform_decode(**case)


def test_config_free_registration_with_no_request(dry_launches):
    """K3 needs nothing from the model: registered with no request, warmed with or without a config."""
    for config in (None, CONFIGS["mtp1"]):
        registry = JitWarmupRegistry()
        with registry.activate():
            prepare_uniform_decode.register_warmup()
        assert registry.requests(prepare_uniform_decode) == [{}]
        report = registry.warmup(config, progress=False)
        assert report.ok
        assert report.keys_by_kernel() == {"prepare_uniform_decode": (PrepareUniformDecode.CompileKey(TILE, True),)}
        with dry_launches(prepare_uniform_decode) as rec:
            prepare_uniform_decode(**make_case(seed=0, num_decodes=7, query_len=2, width=100, extra_rows=10))
        assert [id(c) for c in rec.hits] == [id(report.variants[0].compiled)]


def test_grid_follows_live_count_not_capacity(dry_launches):
    """Nd = 0 launches nothing, whatever the buffers' capacity."""
    with dry_launches(prepare_uniform_decode) as rec:
        prepare_uniform_decode(**make_case(seed=0, num_decodes=0, query_len=2, width=8, extra_rows=64))
    assert rec.hits == []


def test_key_space_shape():
    k3 = prepare_uniform_decode
    assert k3.get_warmup_keys() == [PrepareUniformDecode.CompileKey(tile=TILE, aligned=True)]
    keys = k3.get_warmup_keys(aligned=(True, False))
    assert [k.aligned for k in keys] == [True, False]
    for key in keys:  # meta tensors: validation reads no value
        assert k3.key_for(**k3.warmup_inputs(key)) == key


# ----------------------------------------------------------------------------- bad inputs
def good(**over) -> dict:
    case = make_case(seed=0, num_decodes=3, query_len=2, width=8, extra_rows=2)
    case.update(over)
    return case


@pytest.mark.parametrize(
    "arg, over",
    [
        ("seq_lens", dict(seq_lens=torch.zeros(3, dtype=torch.int64))),
        ("seq_lens", dict(seq_lens=torch.zeros(3, 1, dtype=I32))),
        ("seq_lens", dict(seq_lens=torch.zeros(6, dtype=I32)[::2])),
        ("seq_lens", dict(seq_lens=torch.zeros(2, dtype=I32))),
        ("block_table", dict(block_table=torch.zeros(2, 8, dtype=I32))),
        ("block_table", dict(block_table=torch.zeros(8, 3, dtype=I32).t())),
        ("block_table", dict(block_table=torch.zeros(3, 8, dtype=torch.int64))),
        ("block_table", dict(block_table=torch.zeros(3, 8, dtype=I32, device="meta"))),
        ("expanded_seq_lens", dict(expanded_seq_lens=torch.zeros(5, dtype=I32))),
        ("expanded_seq_lens", dict(expanded_seq_lens=torch.zeros(8, dtype=torch.float32))),
        ("expanded_block_table", dict(expanded_block_table=torch.zeros(5, 8, dtype=I32))),
        ("expanded_block_table", dict(expanded_block_table=torch.zeros(8, 7, dtype=I32))),
        ("expanded_block_table", dict(expanded_block_table=torch.zeros(8, 8, dtype=I32).t())),
        ("query_len", dict(query_len=0)),
        ("query_len", dict(query_len=2.0)),
        ("num_decode_tokens", dict(num_decode_tokens=-1)),
        ("num_decode_tokens", dict(num_decode_tokens=True)),
    ],
)
def test_bad_inputs_name_kernel_and_argument(arg, over):
    input_error(prepare_uniform_decode, good(**over), kernel="prepare_uniform_decode", argument=arg)


# ----------------------------------------------------------------------------- GPU
@gpu_examples(40)
@given(k3_cases())
def test_gpu_matches_reference(case):
    check_against_reference(on_cuda(case))


@pytest.mark.gpu
def test_gpu_serving_size():
    """256 decodes with 2 query tokens each over a 1,024-wide block table, sentinels around."""
    case = make_case(seed=5, num_decodes=256, query_len=2, width=1024, Nd=512, extra_reqs=2, extra_rows=8,
                     extra_cols=16)
    check_against_reference(on_cuda(case))
