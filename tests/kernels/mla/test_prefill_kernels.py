"""K4 build_prefill_chunk_metadata and K5 compute_prefill_metadata.

* interpreter tests: the Triton kernels equal the PyTorch references (hypothesis + edge cases);
* compile-only tests: warm-up for several configurations covers every runtime-shaped dry launch
  (the in-process cache does not grow) and every warmed key is hit by some runtime call;
* bad inputs: each error names the kernel and the argument.
"""

from __future__ import annotations

import random
from itertools import accumulate

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from zerojit.kernels.mla import reference as ref
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from zerojit.registry import JitWarmupRegistry

from _support import assert_equal_outputs, gpu_examples, input_error, on_cuda, slow_examples, to_cuda

I32 = torch.int32
SETTINGS = slow_examples(30)


def _view(values: list[int], offset: int) -> torch.Tensor:
    """``values`` as an int32 view starting ``offset`` elements into a bigger tensor (alignment)."""
    return torch.tensor([7] * offset + values, dtype=I32)[offset:]


def _cumsum(start: int, counts: list[int]) -> list[int]:
    return list(accumulate(counts, initial=start))


# ------------------------------------------------------------------------------------ K4 equivalence
def _k4_inputs(qlens, prefixes, counts, *, q0=0, cu0=0, seq_offset=0, slice_=None, ratio=4, S=1, r=0, I=1):
    qsl = _cumsum(q0, qlens)
    cu = _cumsum(cu0, counts)
    start, stop = slice_ if slice_ is not None else (qsl[0], qsl[-1])
    return dict(
        query_start_loc=torch.tensor(qsl, dtype=I32),
        seq_lens=_view([q + p for q, p in zip(qlens, prefixes)], seq_offset),
        cu_compressed=torch.tensor(cu, dtype=I32),
        query_slice_start=start,
        query_slice_stop=stop,
        num_compressed=cu[-1],
        ratio=ratio,
        dcp_size=S,
        dcp_rank=r,
        dcp_interleave=I,
    )


def _check_k4(inputs: dict) -> None:
    got = build_prefill_chunk_metadata(**inputs)
    args = dict(inputs)
    want = ref.build_prefill_chunk_metadata(args.pop("query_start_loc"), args.pop("seq_lens"),
                                            args.pop("cu_compressed"), **args)
    assert_equal_outputs(got, want)


@st.composite
def k4_cases(draw):
    n = draw(st.integers(0, 6))
    qlens = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    prefixes = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    counts = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    q0 = draw(st.integers(0, 3))
    lo, hi = q0, q0 + sum(qlens)
    start = draw(st.integers(lo, hi))
    stop = draw(st.integers(start, hi))
    S = draw(st.sampled_from([1, 2, 4, 8]))
    return _k4_inputs(qlens, prefixes, counts, q0=q0, cu0=draw(st.integers(0, 3)),
                      seq_offset=draw(st.integers(0, 3)), slice_=(start, stop),
                      ratio=draw(st.sampled_from([1, 2, 4, 8, 128])), S=S, r=draw(st.integers(0, S - 1)),
                      I=draw(st.sampled_from([1, 8])))


@pytest.mark.interpreter
@SETTINGS
@given(k4_cases())
def test_k4_matches_reference(inputs):
    _check_k4(inputs)


@pytest.mark.interpreter
@pytest.mark.parametrize("S", [1, 2, 4, 8])
@pytest.mark.parametrize("I", [1, 8])
def test_k4_dcp_sizes_and_interleaves(S, I):
    for r in sorted({0, S // 2, S - 1}):
        _check_k4(_k4_inputs([5, 0, 37, 64], [0, 9, 150, 1000], [0, 2, 40, 250], ratio=4, S=S, r=r, I=I,
                             seq_offset=1))


@pytest.mark.interpreter
def test_k4_edge_cases():
    _check_k4(_k4_inputs([], [], []))  # empty chunk
    _check_k4(_k4_inputs([], [], [], q0=3, cu0=2))  # empty chunk, -1 before cu_compressed[0]
    _check_k4(_k4_inputs([1], [0], [0]))  # single token, nothing compressed yet
    _check_k4(_k4_inputs([1], [3], [1]))  # single token that completes an entry
    _check_k4(_k4_inputs([2000], [5000], [1750], slice_=(17, 1500)))  # single long request, several tiles
    _check_k4(_k4_inputs([4, 4], [0, 8], [1, 3], slice_=(2, 2)))  # empty slice


# ------------------------------------------------------------------------------------ K5 equivalence
def _check_k5(seq_lens, qsl, **kw) -> None:
    got = compute_prefill_metadata(seq_lens=seq_lens, query_start_loc=qsl, **kw)
    assert_equal_outputs(got, ref.compute_prefill_metadata(seq_lens, qsl, **kw))


@st.composite
def k5_cases(draw):
    R = draw(st.integers(0, 12))
    qlens = draw(st.lists(st.integers(0, 40), min_size=R, max_size=R))
    prefixes = draw(st.lists(st.integers(0, 400), min_size=R, max_size=R))
    num_decodes = draw(st.integers(0, R))
    num_prefills = draw(st.integers(0, R - num_decodes))
    return (_view([q + p for q, p in zip(qlens, prefixes)], draw(st.integers(0, 3))),
            _view(_cumsum(draw(st.integers(0, 3)), qlens), draw(st.integers(0, 3))),
            dict(num_decodes=num_decodes, num_prefills=num_prefills, sliding_window=draw(st.integers(1, 200))))


@pytest.mark.interpreter
@SETTINGS
@given(k5_cases())
def test_k5_matches_reference(case):
    seq_lens, qsl, kw = case
    _check_k5(seq_lens, qsl, **kw)


@pytest.mark.interpreter
def test_k5_edge_cases():
    empty = torch.zeros(0, dtype=I32)
    _check_k5(empty, torch.zeros(1, dtype=I32), num_decodes=0, num_prefills=0, sliding_window=128)
    _check_k5(torch.tensor([1], dtype=I32), torch.tensor([0, 1], dtype=I32), num_decodes=0, num_prefills=1,
              sliding_window=128)  # single token
    _check_k5(torch.tensor([9000], dtype=I32), torch.tensor([0, 8192], dtype=I32), num_decodes=0, num_prefills=1,
              sliding_window=1)  # single request, window 1
    # 256 prefills after 3 decodes: the largest tile of a max_num_seqs=256 config
    R = 259
    qlens = [1, 1, 1] + [random.Random(i).randint(0, 50) for i in range(256)]
    seqs = [q + 100 * (i % 5) for i, q in enumerate(qlens)]
    _check_k5(torch.tensor(seqs, dtype=I32), torch.tensor(_cumsum(0, qlens), dtype=I32), num_decodes=3,
              num_prefills=R - 3, sliding_window=128)
    _check_k5(torch.tensor([5, 6], dtype=I32), torch.tensor([0, 1, 2], dtype=I32), num_decodes=2, num_prefills=0,
              sliding_window=128)  # decodes only: no launch


# ------------------------------------------------------------------------------------ on a GPU
@gpu_examples(25)
@given(k4_cases())
def test_k4_gpu_matches_reference(inputs):
    _check_k4(on_cuda(inputs))


@gpu_examples(25)
@given(k5_cases())
def test_k5_gpu_matches_reference(case):
    seq_lens, qsl, kw = case
    _check_k5(to_cuda(seq_lens), to_cuda(qsl), **kw)


@pytest.mark.gpu
def test_k4_gpu_serving_size():
    rng = random.Random(0)
    qlens = [rng.randint(1, 2000) for _ in range(6)] + [8192]
    prefixes = [rng.randint(0, 200_000) for _ in qlens]
    for S, r, I in [(1, 0, 1), (8, 5, 8)]:
        counts = [(q + p) // 4 // S + I for q, p in zip(qlens, prefixes)]
        inputs = _k4_inputs(qlens, prefixes, counts, seq_offset=1, ratio=4, S=S, r=r, I=I,
                            slice_=(100, sum(qlens) - 7))
        _check_k4(on_cuda(inputs))


# ------------------------------------------------------------------------------------ compile-only coverage
CONFIGS = [
    ModelConfig(name="v32-like", block_size=64, compress_ratios=(1, 4, 4), index_topk=2048, max_num_seqs=256),
    ModelConfig(name="v4-like", block_size=256, compress_ratios=(1, 4, 128, 4), index_topk=512,
                max_model_len=2**20, num_speculative_tokens=2, dcp_size=2, dcp_rank=1, dcp_interleave=2,
                max_num_seqs=128),
    ModelConfig(name="dcp8", block_size=256, compress_ratios=(4, 1), index_topk=1024, sliding_window=100,
                dcp_size=8, dcp_rank=3, dcp_interleave=8, num_speculative_tokens=1, max_num_seqs=48),
    ModelConfig(name="window-only", block_size=128, compress_ratios=(1, 1), max_num_seqs=7),
]


def _k4_runtime_calls(config: ModelConfig, rng: random.Random) -> int:
    """Prefill chunks as a runner builds them: seq_lens[num_decodes:] views, sliced query rows."""
    calls = 0
    for step in range(24):
        num_decodes = step % 8  # offset views: aligned when num_decodes % 4 == 0
        n = rng.randint(1, min(8, config.max_num_seqs))
        qlens = [rng.randint(1, 300) for _ in range(n)]
        seqs = [rng.randint(1, 40) for _ in range(num_decodes)] + [q + rng.randint(0, 5000) for q in qlens]
        seq_lens = torch.tensor(seqs, dtype=I32)[num_decodes:]
        for ratio in config.indexer_ratios:
            S, I = config.dcp_size, config.dcp_interleave
            counts = [(s // ratio) // S + I for s in seq_lens.tolist()]
            cu = _cumsum(0, counts)
            total = sum(qlens)
            for start in range(0, total, 512):  # the runner slices long chunks
                build_prefill_chunk_metadata(
                    query_start_loc=torch.tensor(_cumsum(0, qlens), dtype=I32), seq_lens=seq_lens,
                    cu_compressed=torch.tensor(cu, dtype=I32), query_slice_start=start,
                    query_slice_stop=min(start + 512, total), num_compressed=cu[-1], ratio=ratio, dcp_size=S,
                    dcp_rank=config.dcp_rank, dcp_interleave=I)
                calls += 1
    return calls


def _k5_runtime_calls(config: ModelConfig, rng: random.Random) -> int:
    calls = 0
    for num_prefills in range(config.max_num_seqs + 1):
        num_decodes = rng.randint(0, config.max_num_seqs - num_prefills)
        qlens = [1 + config.num_speculative_tokens] * num_decodes + [rng.randint(1, 64) for _ in range(num_prefills)]
        seq_lens = torch.tensor([q + rng.randint(0, 3000) for q in qlens], dtype=I32)
        compute_prefill_metadata(seq_lens=seq_lens, query_start_loc=torch.tensor(_cumsum(0, qlens), dtype=I32),
                                 num_decodes=num_decodes, num_prefills=num_prefills,
                                 sliding_window=config.sliding_window)
        calls += 1
    return calls


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_warmup_covers_runtime_calls(config, assert_warmup_covers):
    reg = JitWarmupRegistry()
    with reg.activate():  # what the indexer layers and the attention backend register
        build_prefill_chunk_metadata.register_warmup(seq_lens_aligned=(True, False))
        compute_prefill_metadata.register_warmup()
    report = reg.warmup(config, progress=False, target="cuda:90")
    keys = report.keys_by_kernel()
    assert len(keys["build_prefill_chunk_metadata"]) == 2 * len(config.indexer_ratios)
    assert [k.tile for k in keys["compute_prefill_metadata"]] == [
        1 << i for i in range((config.max_num_seqs - 1).bit_length() + 1)]
    rng = random.Random(config.name)
    with assert_warmup_covers(build_prefill_chunk_metadata, report):
        _k4_runtime_calls(config, rng)
    with assert_warmup_covers(compute_prefill_metadata, report):
        _k5_runtime_calls(config, rng)


def test_warmup_keys_are_config_values():
    cfg = CONFIGS[1]
    (k_aligned, k_view) = build_prefill_chunk_metadata.get_warmup_keys(cfg)
    assert (k_aligned.ratio, k_aligned.dcp_size, k_aligned.dcp_interleave) == (4, 2, 2)
    assert (k_aligned.seq_lens_aligned, k_view.seq_lens_aligned) == (True, False)
    assert build_prefill_chunk_metadata.get_warmup_keys(CONFIGS[3]) == []  # no indexer layer
    assert len(compute_prefill_metadata.get_warmup_keys(ModelConfig(max_num_seqs=256))) == 9
    assert len(compute_prefill_metadata.get_warmup_keys(ModelConfig(max_num_seqs=1))) == 1


# ------------------------------------------------------------------------------------ bad inputs
def _k4_good() -> dict:
    return _k4_inputs([3, 5], [0, 10], [0, 3])


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(seq_lens=torch.tensor([3, 15], dtype=torch.int64)), "seq_lens"),
        (dict(query_start_loc=torch.tensor([0, 3], dtype=I32)), "query_start_loc"),
        (dict(cu_compressed=torch.tensor([[0, 0, 3]], dtype=I32)), "cu_compressed"),
        (dict(cu_compressed=torch.tensor([0, 0, 3, 9, 9, 9], dtype=I32)[::2]), "cu_compressed"),
        (dict(query_slice_start=5, query_slice_stop=4), "query_slice_stop"),
        (dict(num_compressed=-1), "num_compressed"),
        (dict(dcp_size=2, dcp_rank=2), "dcp_rank"),
        (dict(ratio=0), "ratio"),
    ],
)
def test_k4_bad_inputs(change, argument):
    input_error(build_prefill_chunk_metadata, {**_k4_good(), **change}, kernel="build_prefill_chunk_metadata",
                argument=argument)


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(seq_lens=torch.tensor([4, 5], dtype=torch.int64)), "seq_lens"),
        (dict(query_start_loc=torch.tensor([0, 1], dtype=I32)), "query_start_loc"),
        (dict(num_prefills=2), "num_prefills"),
        (dict(num_decodes=-1), "num_decodes"),
        (dict(sliding_window=0), "sliding_window"),
    ],
)
def test_k5_bad_inputs(change, argument):
    good = dict(seq_lens=torch.tensor([4, 5], dtype=I32), query_start_loc=torch.tensor([0, 1, 3], dtype=I32),
                num_decodes=1, num_prefills=1, sliding_window=128)
    input_error(compute_prefill_metadata, {**good, **change}, kernel="compute_prefill_metadata", argument=argument)
