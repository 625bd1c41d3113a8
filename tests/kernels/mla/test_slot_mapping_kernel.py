"""K2 compressed_slot_mapping: equivalence with the reference (interpreter), at the launcher's
grid and at forced splits of the requests, the grid policy, the key space against dry launches
(compile-only: zero runtime compiles, no dead key), bad inputs."""

from __future__ import annotations

from itertools import accumulate

import pytest
import torch
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from zerojit.kernels.mla import reference
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla import slot_mapping
from zerojit.kernels.mla.slot_mapping import (MAX_SPLITS, TILE, CompressedSlotMapping, compressed_slot_mapping,
                                              split_grid)
from zerojit.registry import JitWarmupRegistry

from _support import gpu_examples, input_error, on_cuda, slow_examples

I32 = torch.int32


# ----------------------------------------------------------------------------- case builder
def make_case(
    *,
    seed: int,
    qlens: list[int],
    contexts: list[int],
    ratio: int,
    block_size: int,
    stride: int,
    S: int = 1,
    rank: int = 0,
    I: int = 1,
    pad: int = 0,
    head: int = 0,
    extra_rows: int = 0,
    extra_cols: int = 0,
) -> dict:
    """Inputs of one K2 call; the block table is exactly wide enough for the longest request
    (its last entry lies on the bound), plus ``extra_cols`` hidden columns of a wider buffer."""
    g = torch.Generator().manual_seed(seed)
    R = len(qlens)
    seq = [q + c for q, c in zip(qlens, contexts)]
    qsl = list(accumulate(qlens, initial=head))
    cbs = block_size // ratio
    width = max([1] + [(s // ratio - 1) // (cbs * S) + 1 for s in seq if s >= ratio])  # last entry: s//c - 1
    block_table = torch.randint(0, 2000, (R + extra_rows, width + extra_cols), generator=g, dtype=I32)[:, :width]
    return dict(
        query_start_loc=torch.tensor(qsl, dtype=I32),
        seq_lens=torch.tensor(seq, dtype=I32),
        block_table=block_table,
        num_tokens=qsl[-1] + pad,
        ratio=ratio,
        block_size=block_size,
        block_stride_rows=stride,
        dcp_size=S,
        dcp_rank=rank,
        dcp_interleave=I,
    )


def check_against_reference(case: dict) -> None:
    out = compressed_slot_mapping(**case)
    ref = reference.compressed_slot_mapping(**case)
    assert out.dtype == torch.int64 and out.shape == (case["num_tokens"],)
    assert torch.equal(out, ref)


# ----------------------------------------------------------------------------- interpreter
@st.composite
def k2_cases(draw):
    block_size = draw(st.sampled_from((16, 32, 64, 128, 256)))
    ratio = draw(st.sampled_from([c for c in (2, 4, 8, 16, 128) if block_size % c == 0]))
    cbs = block_size // ratio
    S = draw(st.sampled_from((1, 1, 2, 4, 8)))
    I = draw(st.sampled_from([i for i in (1, 8) if cbs % i == 0])) if S > 1 else 1
    R = draw(st.integers(0, 4))
    qlens = draw(st.lists(st.sampled_from((0, 1, 2, 3, 5, 40, 150, 300)), min_size=R, max_size=R))
    contexts = draw(st.lists(st.integers(0, 700), min_size=R, max_size=R))
    return make_case(
        seed=draw(st.integers(0, 2**16)),
        qlens=qlens,
        contexts=contexts,
        ratio=ratio,
        block_size=block_size,
        stride=draw(st.sampled_from((cbs, 2 * cbs, 3 * cbs + 4, cbs + 16))),
        S=S,
        rank=draw(st.integers(0, S - 1)),
        I=I,
        pad=draw(st.sampled_from((0, 0, 1, 7, 300))),
        head=draw(st.sampled_from((0, 0, 0, 3))),
        extra_rows=draw(st.sampled_from((0, 2))),
        extra_cols=draw(st.sampled_from((0, 3))),
    )


@pytest.mark.interpreter
@slow_examples(40)
@given(k2_cases())
def test_matches_reference(case):
    check_against_reference(case)


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "what, kw",
    [
        ("empty batch", dict(qlens=[], contexts=[])),
        ("empty batch with padding", dict(qlens=[], contexts=[], pad=5)),
        ("single token", dict(qlens=[1], contexts=[3])),
        ("single request prefill", dict(qlens=[300], contexts=[0])),
        ("decode batch", dict(qlens=[1, 1, 1, 1], contexts=[3, 7, 10, 127])),
        ("padding tail", dict(qlens=[5, 0, 9], contexts=[11, 4, 0], pad=200)),
        ("head before request 0", dict(qlens=[4, 4], contexts=[4, 0], head=5, pad=2)),
    ],
)
@pytest.mark.parametrize(
    "ratio, block_size, stride, S, rank, I",
    [(4, 64, 16, 1, 0, 1), (4, 64, 48, 2, 1, 8), (128, 256, 2, 1, 0, 1), (4, 256, 200, 8, 7, 8), (8, 16, 2, 4, 2, 1)],
)
def test_edge_cases(what, kw, ratio, block_size, stride, S, rank, I):
    check_against_reference(make_case(seed=1, ratio=ratio, block_size=block_size, stride=stride, S=S, rank=rank,
                                      I=I, **kw))


def forced_splits(monkeypatch, splits: int) -> None:
    """Make the launcher use grid ``(R, splits)`` whatever its policy would pick."""
    monkeypatch.setattr(slot_mapping, "split_grid", lambda R, T: (R, splits) if R else (0, 1))


# Several unequal requests (one empty, one a single token, lengths on and off tile bounds), a
# head before request 0 and a padding tail longer than a tile.
UNEQUAL = dict(qlens=[700, 0, 1, 300, 129, 128], contexts=[0, 5, 64, 1000, 3, 250], head=37, pad=450)
LAYOUTS = [(4, 64, 16, 1, 0, 1), (4, 256, 200, 4, 3, 8), (8, 16, 2, 2, 0, 1)]  # ratio, block_size, stride, S, r, I


@pytest.mark.interpreter
@pytest.mark.parametrize("ratio, block_size, stride, S, rank, I", LAYOUTS)
def test_launcher_splits_unequal_requests(ratio, block_size, stride, S, rank, I):
    case = make_case(seed=5, ratio=ratio, block_size=block_size, stride=stride, S=S, rank=rank, I=I, **UNEQUAL)
    assert split_grid(6, case["num_tokens"])[1] > 1  # the policy's own grid splits the requests
    check_against_reference(case)


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [1, 2, 3, 6, 64])
@pytest.mark.parametrize("ratio, block_size, stride, S, rank, I", LAYOUTS)
def test_forced_splits_unequal_requests(monkeypatch, splits, ratio, block_size, stride, S, rank, I):
    """Any split of the requests writes the same outputs: programs looping over several tiles
    (splits < a request's tiles), programs with no tile (splits > them), the padding spread."""
    forced_splits(monkeypatch, splits)
    check_against_reference(make_case(seed=6, ratio=ratio, block_size=block_size, stride=stride, S=S, rank=rank,
                                      I=I, **UNEQUAL))


@pytest.mark.interpreter
@slow_examples(30, HealthCheck.function_scoped_fixture)
@given(case=k2_cases(), splits=st.integers(1, 9))
def test_matches_reference_at_any_split(monkeypatch, case, splits):
    forced_splits(monkeypatch, splits)
    check_against_reference(case)


@pytest.mark.parametrize(
    "R, T, want",
    [
        (0, 0, (0, 1)), (0, 50, (0, 1)),  # nothing launched
        (3, 0, (3, 1)), (1, 1, (1, 1)), (1, TILE, (1, 1)), (1, TILE + 1, (1, 2)),
        (256, 256, (256, 1)),  # decode: one program per request, as before
        (64, 128, (64, 1)),
        (2, 8192, (2, 32)), (1, 8192, (1, 64)),  # long prefills: about one tile per program
        (3, 8192, (3, 22)),
        (1, 2**31 - 1, (1, MAX_SPLITS)),  # the cap
    ],
)
def test_split_grid(R, T, want):
    assert split_grid(R, T) == want
    assert want[1] <= 65535  # CUDA's grid axis-1 limit


# ----------------------------------------------------------------------------- key space (compile-only)
CONFIGS = {
    "v32": ModelConfig(name="v32", block_size=64, compress_ratios=(4,), index_topk=2048),
    "dsv4": ModelConfig(name="dsv4", block_size=256, compress_ratios=(1, 4, 128, 4, 1), index_topk=512),
    "kpool_only": ModelConfig(name="kpool_only", block_size=256, compress_ratios=(1, 128), index_kpool=4),
    "dcp": ModelConfig(name="dcp", block_size=256, compress_ratios=(4, 128), index_kpool=8, dcp_size=2,
                       dcp_rank=1, dcp_interleave=2),
}


def packed_strides(config: ModelConfig) -> tuple[tuple[int, int], ...]:
    """A packed cache for the smallest ratio; the others dense (missing from the tuple)."""
    ratios = config.compressed_ratios
    return ((ratios[0], 3 * (config.block_size // ratios[0])),) if ratios else ()


def runtime_steps(config: ModelConfig):
    """Steps shaped like serving: decode batches, chunked prefills, padding, every rank."""
    strides = dict(packed_strides(config))
    shapes = [([1], [0]), ([1] * 7, [5, 9, 100, 3, 4, 77, 1000]), ([2048, 1], [0, 511]), ([], []),
              ([300, 0, 17], [1, 2, 3]), ([70000], [5])]  # the last at MAX_SPLITS: same key, any grid
    for ratio in config.compressed_ratios:
        stride = strides.get(ratio, config.block_size // ratio)
        for i, (qlens, contexts) in enumerate(shapes):
            for rank in sorted({0, config.dcp_size - 1}):
                yield make_case(seed=i, qlens=qlens, contexts=contexts, ratio=ratio, block_size=config.block_size,
                                stride=stride, S=config.dcp_size, rank=rank, I=config.dcp_interleave, pad=i * 13,
                                extra_rows=i % 2, extra_cols=3 * (i % 2))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_warmup_covers_runtime_with_no_dead_key(name, assert_warmup_covers):
    config = CONFIGS[name]
    registry = JitWarmupRegistry()
    with registry.activate():
        for _layer in range(config.num_layers):
            compressed_slot_mapping.register_warmup(compressed_block_strides=packed_strides(config))
    report = registry.warmup(config, progress=False)
    keys = report.keys_by_kernel()["compressed_slot_mapping"]
    assert sorted(k.ratio for k in keys) == list(config.compressed_ratios)
    with assert_warmup_covers(compressed_slot_mapping, report):
        for case in runtime_steps(config):
            assert compressed_slot_mapping.key_for(**case) in keys
            compressed_slot_mapping(**case)


def test_keys_include_index_kpool(dry_launches):
    config = CONFIGS["kpool_only"]  # layers of ratio 1 and 128 only; the pooled selector adds 4
    keys = compressed_slot_mapping.get_warmup_keys(config)
    assert [(k.ratio, k.cbs, k.block_stride_rows) for k in keys] == [(4, 64, 64), (128, 2, 2)]
    registry = JitWarmupRegistry()
    with registry.activate():
        compressed_slot_mapping.register_warmup()
    report = registry.warmup(config, progress=False)
    case = make_case(seed=0, qlens=[8, 1], contexts=[0, 33], ratio=4, block_size=256, stride=64, pad=3)
    with dry_launches(compressed_slot_mapping) as rec:
        compressed_slot_mapping(**case)
    kpool_variant = report.variants[[k.ratio for k in report.kernels[0].keys].index(4)]
    assert [id(c) for c in rec.hits] == [id(kpool_variant.compiled)]


def test_key_space_shape():
    k2 = compressed_slot_mapping
    assert k2.get_warmup_keys(ModelConfig(compress_ratios=(1, 1), index_kpool=None)) == []
    dsv4 = k2.get_warmup_keys(CONFIGS["dsv4"], compressed_block_strides=((4, 128), (128, 2)))
    assert [(k.ratio, k.cbs, k.block_stride_rows, k.dcp_size) for k in dsv4] == [(4, 64, 128, 1), (128, 2, 2, 1)]
    dcp = k2.get_warmup_keys(CONFIGS["dcp"])
    assert [(k.ratio, k.dcp_size, k.dcp_interleave) for k in dcp] == [(4, 2, 2), (8, 2, 2), (128, 2, 2)]
    for key in dsv4 + dcp:
        assert k2.key_for(**k2.warmup_inputs(key)) == key  # meta tensors: validation reads no value
    # S = 1 normalises the interleave away: any I gives the same key
    assert k2.dispatch(ratio=4, block_size=64, block_stride_rows=16, dcp_interleave=8) == k2.dispatch(
        ratio=4, block_size=64, block_stride_rows=16)


# ----------------------------------------------------------------------------- bad inputs
def good(**over) -> dict:
    case = make_case(seed=0, qlens=[3, 4], contexts=[5, 6], ratio=4, block_size=64, stride=16)
    case.update(over)
    return case


@pytest.mark.parametrize(
    "arg, over",
    [
        ("seq_lens", dict(seq_lens=torch.zeros(2, dtype=torch.int64))),
        ("seq_lens", dict(seq_lens=torch.zeros(2, 1, dtype=I32))),
        ("seq_lens", dict(seq_lens=torch.zeros(4, dtype=I32)[::2])),
        ("query_start_loc", dict(query_start_loc=torch.zeros(2, dtype=I32))),
        ("query_start_loc", dict(query_start_loc=torch.zeros(3, dtype=torch.int64))),
        ("query_start_loc", dict(query_start_loc=torch.zeros(3, dtype=I32, device="meta"))),
        ("block_table", dict(block_table=torch.zeros(1, 4, dtype=I32))),
        ("block_table", dict(block_table=torch.zeros(4, 2, dtype=I32).t())),
        ("block_table", dict(block_table=torch.zeros(2, 4, dtype=torch.int64))),
        ("num_tokens", dict(num_tokens=-1)),
        ("num_tokens", dict(num_tokens=7.0)),
        ("ratio", dict(ratio=3)),
        ("ratio", dict(ratio=0)),
        ("block_size", dict(block_size=0)),
        ("block_stride_rows", dict(block_stride_rows=0)),
        ("dcp_rank", dict(dcp_size=2, dcp_rank=-1)),
        ("dcp_size", dict(dcp_size=0)),
        ("dcp_interleave", dict(dcp_size=2, dcp_interleave=32)),
    ],
)
def test_bad_inputs_name_kernel_and_argument(arg, over):
    assert input_error(compressed_slot_mapping, good(**over), kernel="compressed_slot_mapping", argument=arg).kernel == CompressedSlotMapping.name


# ----------------------------------------------------------------------------- GPU
@gpu_examples(40)
@given(k2_cases())
def test_gpu_matches_reference(case):
    check_against_reference(on_cuda(case))


@pytest.mark.gpu
@pytest.mark.parametrize("S, I", [(1, 1), (4, 8)])
def test_gpu_serving_size(S, I):
    """A prefill-heavy step: 8,192 tokens over a few long requests, plus decodes."""
    qlens = [4000, 3000, 1000] + [1] * 192
    contexts = [0, 5000, 60000] + [30000 + 97 * i for i in range(192)]
    case = make_case(seed=3, qlens=qlens, contexts=contexts, ratio=4, block_size=256, stride=64 * 30, S=S,
                     rank=S - 1, I=I, pad=64)
    check_against_reference(on_cuda(case))


@pytest.mark.gpu
@pytest.mark.parametrize("S, I", [(1, 1), (4, 8)])
@pytest.mark.parametrize("qlens, contexts", [([7930, 262], [0, 0]), ([70000, 3], [1000, 9])])
def test_gpu_long_prefill_splits(S, I, qlens, contexts):
    """A few long requests: the policy splits them (up to MAX_SPLITS), padding at both ends."""
    case = make_case(seed=4, qlens=qlens, contexts=contexts, ratio=4, block_size=256, stride=64 * 3, S=S, rank=S - 1,
                     I=I, head=11, pad=300)
    assert split_grid(len(qlens), case["num_tokens"])[1] > 1
    check_against_reference(on_cuda(case))
