"""K1 convert_req_index_to_global_index: equivalence with the reference (interpreter), the key
space against dry launches (compile-only: zero runtime compiles, no dead key), bad inputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from zerojit.kernels.mla import reference
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.index import (
    FLAVOURS,
    ConvertReqIndexToGlobalIndex,
    convert_req_index_to_global_index,
)
from zerojit.registry import JitWarmupRegistry

from _support import gpu_examples, input_error, on_cuda, slow_examples

I32 = torch.int32


# ----------------------------------------------------------------------------- case builder
def make_case(
    *,
    seed: int,
    T: int,
    K: int,
    R: int,
    W: int,
    max_blocks: int,
    block_size: int,
    stride: int,
    S: int = 1,
    rank: int = 0,
    I: int = 1,
    workspace: bool = False,
    ti_extra_cols: int = 0,
    ti_offset: int = 0,
    bt_extra_cols: int = 0,
    count_valid: bool = False,
    compact: bool = False,
    p_invalid: float = 0.2,
) -> dict:
    """Inputs of one K1 call; positions reach past ``max_blocks`` (the block-table bound)."""
    g = torch.Generator().manual_seed(seed)
    block_table = torch.randint(0, 1000, (R, W + bt_extra_cols), generator=g, dtype=I32)[:, :W]
    req_id = torch.randint(0, R, (T,), generator=g, dtype=I32)
    span = (max_blocks + 1) * block_size * S  # positions whose local block reaches the bound
    tok = torch.randint(0, max(span, 1), (T, K), generator=g, dtype=torch.int64)
    tok[torch.rand((T, K), generator=g) < p_invalid] = -1
    buf = torch.full((T * (K + ti_extra_cols) + ti_offset,), -7, dtype=I32)
    token_indices = buf[ti_offset:].view(T, K + ti_extra_cols)[:, :K] if T else buf[:0].view(0, K)
    token_indices.copy_(tok)
    case = dict(
        req_id=req_id,
        block_table=block_table,
        token_indices=token_indices,
        block_size=block_size,
        block_stride_rows=stride,
        max_num_blocks_per_req=max_blocks,
        dcp_size=S,
        dcp_rank=rank,
        dcp_interleave=I,
        count_valid=count_valid,
        compact=compact,
    )
    if workspace:
        P = 3
        ids = torch.randint(-1, P, (T,), generator=g, dtype=I32)
        case["prefill_workspace_request_ids"] = ids
        case["prefill_workspace_starts"] = torch.randint(0, 5000, (P,), generator=g, dtype=I32)
    return case


def check_against_reference(case: dict) -> None:
    out, counts = convert_req_index_to_global_index(**case)
    ref_out, ref_counts = reference.convert_req_index_to_global_index(**case)
    T, K = case["token_indices"].shape
    assert out.shape == (T, K) and out.dtype == torch.int32
    if case["count_valid"]:
        assert counts is not None and counts.dtype == torch.int32
        assert torch.equal(counts, ref_counts)
    else:
        assert counts is None
    if not case["compact"]:
        assert torch.equal(out, ref_out)
        return
    n_valid = (ref_out != -1).sum(1)
    for t in range(T):
        n = int(n_valid[t])
        assert torch.equal(out[t, :n].sort().values, ref_out[t, :n].sort().values), t
        assert bool((out[t, n:] == -1).all()), t


# ----------------------------------------------------------------------------- interpreter
BLOCK_SIZES = (16, 32, 64, 128, 256)
KS = (1, 3, 16, 64, 100, 128, 200)


@st.composite
def k1_cases(draw):
    S = draw(st.sampled_from((1, 1, 2, 4, 8)))
    I = draw(st.sampled_from((1, 8))) if S > 1 else 1
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    stride = draw(st.sampled_from((block_size, 2 * block_size, 3 * block_size, block_size + 16)))
    R = draw(st.integers(1, 4))
    W = draw(st.integers(1, 6))
    flavour = draw(st.sampled_from(("plain", "count", "compact", "workspace")))
    return make_case(
        seed=draw(st.integers(0, 2**16)),
        T=draw(st.integers(0, 6)),
        K=draw(st.sampled_from(KS)),
        R=R,
        W=W,
        max_blocks=draw(st.integers(0, W)),
        block_size=block_size,
        stride=stride,
        S=S,
        rank=draw(st.integers(0, S - 1)),
        I=I,
        workspace=flavour == "workspace" and S == 1,
        ti_extra_cols=draw(st.sampled_from((0, 0, 3, 8))),
        ti_offset=draw(st.sampled_from((0, 0, 1))),
        bt_extra_cols=draw(st.sampled_from((0, 5))),
        count_valid=flavour in ("count", "workspace") or draw(st.booleans()),
        compact=flavour == "compact" and S > 1,
        p_invalid=draw(st.sampled_from((0.0, 0.2, 1.0))),
    )


@pytest.mark.interpreter
@slow_examples(40)
@given(k1_cases())
def test_matches_reference(case):
    check_against_reference(case)


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "what, kw",
    [
        ("empty batch", dict(T=0, K=64, R=1, W=3, max_blocks=3)),
        ("empty batch, tiled", dict(T=0, K=100, R=1, W=3, max_blocks=3, count_valid=True)),
        ("single token", dict(T=1, K=16, R=1, W=2, max_blocks=2, count_valid=True)),
        ("single request", dict(T=5, K=64, R=1, W=4, max_blocks=4, count_valid=True)),
        ("all padding", dict(T=3, K=16, R=2, W=2, max_blocks=2, p_invalid=1.0, count_valid=True)),
        ("rows at the bound", dict(T=4, K=128, R=3, W=5, max_blocks=5, count_valid=True)),
        ("bound below width", dict(T=4, K=128, R=3, W=5, max_blocks=2, count_valid=True)),
        ("K not a power of two", dict(T=3, K=300, R=2, W=4, max_blocks=4, count_valid=True)),
        ("wide row stride, unaligned", dict(T=3, K=64, R=2, W=4, max_blocks=4, ti_extra_cols=5, ti_offset=1)),
        ("workspace", dict(T=6, K=64, R=2, W=4, max_blocks=4, workspace=True, count_valid=True)),
        ("workspace tiled", dict(T=4, K=200, R=2, W=4, max_blocks=4, workspace=True, count_valid=True)),
        ("dcp 2 count", dict(T=4, K=64, R=2, W=4, max_blocks=4, S=2, rank=1, I=8, count_valid=True)),
        ("dcp 8 compact", dict(T=4, K=128, R=2, W=4, max_blocks=4, S=8, rank=5, I=1, compact=True)),
        ("dcp 4 compact tiled", dict(T=4, K=200, R=2, W=3, max_blocks=3, S=4, rank=3, I=8, compact=True)),
        ("dcp 4 compact tiled count", dict(T=3, K=300, R=2, W=3, max_blocks=2, S=4, rank=0, I=1, compact=True,
                                           count_valid=True)),
        ("dcp 2 compact count", dict(T=3, K=256, R=2, W=3, max_blocks=3, S=2, rank=1, I=8, compact=True,
                                     count_valid=True)),
    ],
)
@pytest.mark.parametrize("block_size, stride", [(16, 16), (64, 192), (256, 272)])
def test_edge_cases(what, kw, block_size, stride):
    check_against_reference(make_case(seed=len(what), block_size=block_size, stride=stride, **kw))


# ----------------------------------------------------------------------------- key space (compile-only)
CONFIGS = {
    "v32": ModelConfig(name="v32", block_size=64, compress_ratios=(4,), index_topk=2048),
    "dsv4": ModelConfig(name="dsv4", block_size=256, compress_ratios=(1, 4, 128, 4), index_topk=512, index_kpool=4),
    "dcp4": ModelConfig(name="dcp4", block_size=64, compress_ratios=(4,), index_topk=1024, dcp_size=4,
                        dcp_rank=2, dcp_interleave=8),
    "odd_k": ModelConfig(name="odd_k", block_size=128, compress_ratios=(4,), index_topk=1000, dcp_size=2,
                         dcp_interleave=1),
}


def runtime_calls(config: ModelConfig, stride: int, flavours, *, seed=0):
    """Calls shaped like serving steps: varying T, R, block-table widths, strides, ranks."""
    g = torch.Generator().manual_seed(seed)
    K = config.index_topk
    for T, R, W, extra_cols in [(1, 1, 3, 0), (37, 5, 17, 0), (256, 64, 1025, 0), (8, 2, 40, 4)]:
        for flavour in flavours:
            dcp = flavour.startswith("dcp")
            if dcp and config.dcp_size == 1:
                continue
            S = config.dcp_size if dcp else 1
            for rank in sorted({0, S - 1}):
                case = make_case(
                    seed=int(torch.randint(0, 1000, (1,), generator=g)), T=T, K=K, R=R, W=W, max_blocks=W - 1,
                    block_size=config.block_size, stride=stride, S=S, rank=rank,
                    I=config.dcp_interleave if dcp else 1, workspace=flavour == "workspace_count_valid",
                    ti_extra_cols=extra_cols, bt_extra_cols=3 * (T % 2),
                    count_valid="count_valid" in flavour, compact=flavour == "dcp_compact",
                )
                yield flavour, case


@pytest.mark.parametrize("name", list(CONFIGS))
def test_warmup_covers_runtime_with_no_dead_key(name, assert_warmup_covers):
    config = CONFIGS[name]
    stride = 3 * config.block_size  # a packed cache: three layers' blocks interleaved
    registry = JitWarmupRegistry()
    with registry.activate():
        for _layer in range(3):  # every layer registers the same request: kept once
            convert_req_index_to_global_index.register_warmup(block_stride_rows=stride, flavours=FLAVOURS)
    report = registry.warmup(config, progress=False, target="cuda:90")
    keys = report.keys_by_kernel()["convert_req_index_to_global_index"]
    expected = len(FLAVOURS) if config.dcp_size > 1 else len(FLAVOURS) - 2
    assert len(keys) == expected
    assert all(k.block_stride_rows == stride and k.K == config.index_topk for k in keys)
    assert len({id(v.compiled) for v in report.variants}) == len(keys)
    with assert_warmup_covers(convert_req_index_to_global_index, report):
        for _flavour, case in runtime_calls(config, stride, FLAVOURS):
            assert convert_req_index_to_global_index.key_for(**case) in keys
            convert_req_index_to_global_index(**case)


def test_keys_use_the_physical_block_stride(dry_launches, compile_only_target):
    """Design test: a packed cache's stride (not block_size) is what K1 compiles for."""
    config = CONFIGS["v32"]
    packed = 5 * config.block_size
    registry = JitWarmupRegistry()
    with registry.activate():
        convert_req_index_to_global_index.register_warmup(block_stride_rows=packed, flavours=("count_valid",))
    report = registry.warmup(config, progress=False)
    case = make_case(seed=1, T=9, K=config.index_topk, R=2, W=8, max_blocks=8, block_size=config.block_size,
                     stride=packed, count_valid=True)
    with dry_launches(convert_req_index_to_global_index) as rec:  # a hit: nothing compiles
        convert_req_index_to_global_index(**case)
    assert [id(c) for c in rec.hits] == [id(report.variants[0].compiled)]
    # A key space built from block_size would warm the dense-stride variant, which this call
    # (the real, packed layout) never uses, and miss the variant it needs.
    from_block_size = convert_req_index_to_global_index.get_warmup_keys(
        config, block_stride_rows=config.block_size, flavours=("count_valid",))
    assert convert_req_index_to_global_index.key_for(**case) not in from_block_size
    # (No other test compiles this dense-stride variant, so the miss shows as a compile here.)
    cache = convert_req_index_to_global_index.kernel.device_caches[compile_only_target.device][0]
    size = len(cache)
    convert_req_index_to_global_index(**{**case, "block_stride_rows": config.block_size})
    assert len(cache) == size + 1  # the dense stride is another variant: it compiled at "run time"


def test_key_space_shape():
    k1 = convert_req_index_to_global_index
    v32 = CONFIGS["v32"]
    keys = k1.get_warmup_keys(v32, block_stride_rows=64, flavours=FLAVOURS)
    assert [k.dcp_size for k in keys] == [1, 1, 1]  # no DCP flavour when S = 1
    assert {k.block_n for k in keys} == {2048}
    assert k1.get_warmup_keys(v32, block_stride_rows=64, flavours=("dcp_compact",)) == []
    dcp = k1.get_warmup_keys(CONFIGS["dcp4"], block_stride_rows=64, flavours=("plain", "dcp_compact"))
    assert [(k.dcp_size, k.dcp_interleave, k.compact) for k in dcp] == [(1, 1, False), (4, 8, True)]
    odd = k1.get_warmup_keys(CONFIGS["odd_k"], block_stride_rows=128, flavours=("count_valid",))
    assert [(k.K, k.block_n) for k in odd] == [(1000, 128)]
    both = k1.get_warmup_keys(v32, block_stride_rows=64, flavours=("plain",), indices_aligned=(True, False))
    assert [k.indices_aligned for k in both] == [True, False]
    with pytest.raises(ValueError, match="unknown flavour"):
        k1.get_warmup_keys(v32, block_stride_rows=64, flavours=("nope",))
    for key in keys + dcp + odd + both:  # warm-up inputs land on their own key
        assert k1.key_for(**k1.warmup_inputs(key)) == key


def test_unaligned_indices_class_is_reachable(assert_warmup_covers):
    """indices_aligned=False is a real class: warm it and an unaligned runtime view hits it."""
    config = CONFIGS["v32"]
    registry = JitWarmupRegistry()
    with registry.activate():
        convert_req_index_to_global_index.register_warmup(
            block_stride_rows=64, flavours=("plain",), indices_aligned=(True, False))
    report = registry.warmup(config, progress=False)
    assert len(report.variants) == 2
    with assert_warmup_covers(convert_req_index_to_global_index, report):
        for offset, extra in [(0, 0), (1, 0), (0, 1), (2, 6)]:
            case = make_case(seed=offset, T=4, K=config.index_topk, R=1, W=4, max_blocks=4, block_size=64,
                             stride=64, ti_offset=offset, ti_extra_cols=extra)
            convert_req_index_to_global_index(**case)


# ----------------------------------------------------------------------------- bad inputs
def good(**over) -> dict:
    case = make_case(seed=0, T=4, K=16, R=2, W=4, max_blocks=4, block_size=16, stride=16, count_valid=True)
    case.update(over)
    return case


@pytest.mark.parametrize(
    "arg, over",
    [
        ("token_indices", dict(token_indices=torch.zeros(4, 16, dtype=torch.int64))),
        ("token_indices", dict(token_indices=torch.zeros(4, 16, 2, dtype=I32))),
        ("token_indices", dict(token_indices=torch.zeros(16, 4, dtype=I32).t())),
        ("req_id", dict(req_id=torch.zeros(5, dtype=I32))),
        ("req_id", dict(req_id=torch.zeros(8, dtype=I32)[::2])),
        ("req_id", dict(req_id=torch.zeros(4, dtype=torch.int64))),
        ("block_table", dict(block_table=torch.zeros(2, 4, dtype=torch.int64))),
        ("block_table", dict(block_table=torch.zeros(8, dtype=I32))),
        ("block_table", dict(block_table=torch.zeros(4, 2, dtype=I32).t())),
        ("max_num_blocks_per_req", dict(max_num_blocks_per_req=5)),
        ("max_num_blocks_per_req", dict(max_num_blocks_per_req=-1)),
        ("block_size", dict(block_size=0)),
        ("block_stride_rows", dict(block_stride_rows=0)),
        ("dcp_rank", dict(dcp_size=2, dcp_rank=2)),
        ("dcp_size", dict(dcp_size=0)),
        ("dcp_interleave", dict(dcp_size=2, dcp_interleave=0)),
        ("compact", dict(compact=True)),
        ("prefill_workspace_starts", dict(prefill_workspace_request_ids=torch.zeros(4, dtype=I32))),
        ("prefill_workspace_request_ids", dict(prefill_workspace_starts=torch.zeros(4, dtype=I32))),
        ("prefill_workspace_request_ids", dict(prefill_workspace_request_ids=torch.zeros(4, dtype=I32),
                                               prefill_workspace_starts=torch.zeros(2, dtype=I32),
                                               dcp_size=2)),
        ("prefill_workspace_request_ids", dict(prefill_workspace_request_ids=torch.zeros(3, dtype=I32),
                                               prefill_workspace_starts=torch.zeros(2, dtype=I32))),
        ("prefill_workspace_starts", dict(prefill_workspace_request_ids=torch.zeros(4, dtype=I32),
                                          prefill_workspace_starts=torch.zeros(2, dtype=torch.int64))),
        ("req_id", dict(req_id=torch.zeros(4, dtype=I32, device="meta"))),
    ],
)
def test_bad_inputs_name_kernel_and_argument(arg, over):
    input_error(convert_req_index_to_global_index, good(**over), kernel="convert_req_index_to_global_index", argument=arg)


def test_validation_reads_metadata_only():
    """Meta tensors have no values: validation and key computation still work on them."""
    k1 = ConvertReqIndexToGlobalIndex()
    key = k1.dispatch(block_size=64, block_stride_rows=192, K=2048, count_valid=True)
    assert k1.key_for(**k1.warmup_inputs(key)) == key


# ----------------------------------------------------------------------------- GPU
@gpu_examples(40)
@given(k1_cases())
def test_gpu_matches_reference(case):
    check_against_reference(on_cuda(case))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kw",
    [dict(count_valid=True), dict(workspace=True, count_valid=True), dict(S=2, rank=1, I=8, count_valid=True)],
    ids=["count_valid", "workspace_count_valid", "dcp_count_valid"],
)
def test_gpu_serving_size(kw):
    """T = 8,192 tokens, top-k 2,048, a packed stride: the size the kernel benchmark times."""
    case = make_case(seed=7, T=8192, K=2048, R=64, W=1024, max_blocks=1024, block_size=64, stride=64 * 30, **kw)
    check_against_reference(on_cuda(case))
