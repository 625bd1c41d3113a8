"""K7 combine_topk_swa_indices.

* interpreter tests: equal to the PyTorch reference for ratio-1 (window-only), ratio-4 (indexer,
  -1 padded top-k) and ratio-128 (``topk[t, k] = k``) layers, hypothesis + edge cases;
* compile-only tests: warm-up covers runtime-shaped dry launches of every layer kind, no dead key;
* bad inputs: each error names the kernel and the argument.
"""

from __future__ import annotations

import random
from itertools import accumulate

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from zerojit.kernel import KernelInputError
from zerojit.kernels.mla import reference as ref
from zerojit.kernels.mla.combine import combine_topk_swa_indices
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.shapes import cdiv, padded_width
from zerojit.registry import JitWarmupRegistry

from _support import assert_equal_outputs, gpu_examples, input_error, on_cuda, slow_examples

I32 = torch.int32
SETTINGS = slow_examples(40)


def _chunk(qlens, prefixes, *, ratio, top_k, sliding_window, rng: random.Random, q0=0, pad=0, extra_stride=0,
           extra_offset=0, topk_cols=0, neg_prob=0.2, expand=True):
    """Runtime-shaped K7 inputs for one prefill chunk (gather_lens from the K5 reference)."""
    n = len(qlens)
    seqs = [q + p for q, p in zip(qlens, prefixes)]
    qsl = list(accumulate(qlens, initial=q0))
    T = qsl[-1] + pad
    seq_lens = torch.tensor(seqs, dtype=I32)
    gather_lens, _ = ref.compute_prefill_metadata(seq_lens, torch.tensor(qsl, dtype=I32), num_decodes=0,
                                                  num_prefills=n, sliding_window=sliding_window)
    if top_k == 0:
        topk = None
    elif ratio == 4:  # the indexer's picks: request-local compressed indices, -1 padded
        rows = []
        for t in range(T):
            b = next((b for b in range(n) if qsl[b] <= t < qsl[b + 1]), None)
            comp = seqs[b] // ratio if b is not None else 0
            rows.append([rng.randrange(comp) if comp and rng.random() >= neg_prob else -1
                         for _ in range(top_k + topk_cols)])
        topk = torch.tensor(rows, dtype=I32).reshape(T, top_k + topk_cols)
    elif expand:  # no indexer: topk[t, k] = k, as a stride-0 view
        topk = torch.arange(top_k, dtype=I32).expand(T, top_k)
    else:
        topk = torch.arange(top_k, dtype=I32).repeat(T, 1)
    max_comp = max([s // ratio for s in seqs] + [0]) if top_k else 0
    swa_offset = max_comp + extra_offset
    return dict(
        topk=topk,
        query_start_loc=torch.tensor(qsl, dtype=I32),
        seq_lens=seq_lens,
        gather_lens=gather_lens,
        num_tokens=T,
        row_stride=swa_offset + max([int(g) for g in gather_lens] + [0]) + extra_stride,
        swa_offset=swa_offset,
        top_k=top_k,
        ratio=ratio,
        sliding_window=sliding_window,
    )


def _reference(inputs: dict):
    kw = {k: v for k, v in inputs.items() if k not in ("max_gather_len", "max_compressed_len")}
    return ref.combine_topk_swa_indices(kw.pop("topk"), kw.pop("query_start_loc"), kw.pop("seq_lens"),
                                        kw.pop("gather_lens"), **kw)


def _check(inputs: dict):
    got = combine_topk_swa_indices(**inputs)
    assert_equal_outputs(got, _reference(inputs))
    return got


# ------------------------------------------------------------------------------------ equivalence
MAX_MODEL_LEN = 2048  # ratio-128 layers: TOP_K = cdiv(2048, 128) = 16


@st.composite
def k7_cases(draw):
    ratio = draw(st.sampled_from([1, 4, 128]))
    top_k = {1: 0, 4: draw(st.integers(1, 48)), 128: cdiv(MAX_MODEL_LEN, 128)}[ratio]
    n = draw(st.integers(0, 5))
    qlens = draw(st.lists(st.integers(0, 24), min_size=n, max_size=n))
    prefixes = draw(st.lists(st.integers(0, MAX_MODEL_LEN - 24), min_size=n, max_size=n))
    return _chunk(qlens, prefixes, ratio=ratio, top_k=top_k, sliding_window=draw(st.integers(1, 150)),
                  rng=random.Random(draw(st.integers(0, 2**32))), q0=draw(st.integers(0, 3)),
                  pad=draw(st.integers(0, 3)), extra_stride=draw(st.integers(0, 5)),
                  extra_offset=draw(st.integers(0, 5)), topk_cols=draw(st.integers(0, 3)),
                  neg_prob=draw(st.sampled_from([0.0, 0.3, 1.0])), expand=draw(st.booleans()))


@pytest.mark.interpreter
@SETTINGS
@given(k7_cases())
def test_k7_matches_reference(inputs):
    _check(inputs)


@pytest.mark.interpreter
@pytest.mark.parametrize("ratio, top_k", [(1, 0), (4, 64), (128, 16)], ids=["window-only", "indexer", "ratio-128"])
def test_k7_layers_and_edge_cases(ratio, top_k):
    rng = random.Random(ratio)
    kw = dict(ratio=ratio, top_k=top_k, sliding_window=128, rng=rng)
    _check(_chunk([], [], **kw))  # empty chunk
    _check(_chunk([], [], pad=3, **kw))  # only padding rows: all -1, lens 0
    _check(_chunk([1], [0], **kw))  # single token at position 0
    if top_k == 0:  # a window-only layer ignores a top-k tensor passed anyway
        _check(dict(_chunk([5], [70], **kw), topk=torch.zeros(5, 4, dtype=I32)))
    _check(_chunk([1], [1999], **kw))  # single decode-like token with a long history
    _check(_chunk([40], [2000], q0=2, pad=5, **kw))  # single request, tiles of 16 rows
    got, lens = _check(_chunk([3, 0, 17, 5], [300, 50, 0, 1200], extra_stride=7, **kw))
    assert got.shape[1] == padded_width(top_k, 128)
    cols = torch.arange(got.shape[1])
    assert (got[cols >= lens[:, None]] == -1).all()  # past each row's length: -1


@pytest.mark.interpreter
def test_k7_topk_minus_one_padding_stays_minus_one():
    inputs = _chunk([6, 6], [400, 800], ratio=4, top_k=32, sliding_window=16, rng=random.Random(3), neg_prob=1.0)
    got, lens = _check(inputs)
    # every top-k pick is -1: the first tk entries stay -1, the window follows them
    assert (got[:, :32] == -1).all() and (lens > 16).all()


# ------------------------------------------------------------------------------------ on a GPU
@gpu_examples(30)
@given(k7_cases())
def test_k7_gpu_matches_reference(inputs):
    _check(on_cuda(inputs))


@pytest.mark.gpu
@pytest.mark.parametrize("ratio, top_k", [(1, 0), (4, 2048), (128, 8192)], ids=["window-only", "indexer", "ratio-128"])
def test_k7_gpu_serving_size(ratio, top_k):
    rng = random.Random(2)
    qlens = [rng.randint(1, 1000) for _ in range(5)] + [3000]
    inputs = _chunk(qlens, [rng.randint(0, 300_000) for _ in qlens], ratio=ratio, top_k=min(top_k, 64),
                    sliding_window=128, rng=rng, pad=9)
    if ratio == 4:  # an index_topk-wide buffer whose picks sit in the first columns
        wide = torch.full((inputs["num_tokens"], top_k), -1, dtype=I32)
        wide[:, :64] = inputs["topk"]
        inputs.update(topk=wide, top_k=top_k)
    elif ratio == 128:
        inputs.update(topk=torch.arange(top_k, dtype=I32).expand(inputs["num_tokens"], top_k), top_k=top_k)
    _check(on_cuda(inputs))


# ------------------------------------------------------------------------------------ compile-only coverage
CONFIGS = [
    ModelConfig(name="v32-like", block_size=64, compress_ratios=(4, 4, 1), index_topk=2048),
    ModelConfig(name="v4-like", block_size=256, compress_ratios=(1, 4, 128, 4, 128), index_topk=512,
                max_model_len=2**20, num_speculative_tokens=2),
    ModelConfig(name="odd-window", block_size=128, compress_ratios=(128, 1), max_model_len=100_000,
                sliding_window=100),
]


def _runtime_chunks(config: ModelConfig, rng: random.Random) -> int:
    """Prefill chunks for every layer kind of the model (dry launches), host-side maxima given or not."""
    calls = 0
    for step in range(6):
        n = rng.randint(1, 4)
        qlens = [rng.randint(1, 200) for _ in range(n)]
        prefixes = [rng.randint(0, 5000) for _ in range(n)]
        for c in sorted(set(config.compress_ratios)):
            top_k = config.topk_width(c)
            inputs = _chunk(qlens, prefixes, ratio=c, top_k=min(top_k, 64) if c == 4 else top_k,
                            sliding_window=config.sliding_window, rng=rng, pad=rng.randint(0, 16),
                            extra_stride=rng.randint(0, 99), neg_prob=0.5)
            if c == 4:  # the indexer's buffer is index_topk wide
                picks = inputs["topk"]
                inputs["topk"] = torch.full((picks.shape[0], top_k), -1, dtype=I32)
                inputs["topk"][:, : picks.shape[1]] = picks
                inputs["top_k"] = top_k
            if step % 2:
                inputs.update(max_gather_len=int(inputs["gather_lens"].max()),
                              max_compressed_len=max(int(s) // c for s in inputs["seq_lens"]))
            combine_topk_swa_indices(**inputs)
            calls += 1
    return calls


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_warmup_covers_runtime_calls(config, assert_warmup_covers):
    reg = JitWarmupRegistry()
    with reg.activate():
        for _ in config.compress_ratios:  # every layer registers; the registry keeps one request
            combine_topk_swa_indices.register_warmup()
    report = reg.warmup(config, progress=False, target="cuda:90")
    keys = report.keys_by_kernel()["combine_topk_swa_indices"]
    assert {(k.ratio, k.top_k) for k in keys} == set(config.layer_topk_pairs)
    with assert_warmup_covers(combine_topk_swa_indices, report):
        _runtime_chunks(config, random.Random(config.name))


def test_warmup_keys():
    keys = combine_topk_swa_indices.get_warmup_keys(CONFIGS[1])
    assert [(k.ratio, k.top_k, k.width) for k in keys] == [(1, 0, 128), (4, 512, 640), (128, 8192, 8320)]


# ------------------------------------------------------------------------------------ bad inputs
def _good(**change):
    inputs = _chunk([3, 4], [100, 300], ratio=4, top_k=8, sliding_window=32, rng=random.Random(0))
    return {**inputs, **change}


def _raises(argument: str, **change) -> KernelInputError:
    return input_error(combine_topk_swa_indices, _good(**change), kernel="combine_topk_swa_indices", argument=argument)


def test_k7_row_stride_too_small():
    good = _good()
    need = good["swa_offset"] + int(good["gather_lens"].max())
    err = _raises("row_stride", row_stride=need - 1)  # derived from the CPU tensors
    assert str(need) in str(err)
    _raises("row_stride", max_gather_len=good["row_stride"])  # from the host-side int


def test_k7_swa_offset_too_small():
    good = _good()
    _raises("swa_offset", swa_offset=good["swa_offset"] - 1, row_stride=good["row_stride"] + 10)
    _raises("swa_offset", max_compressed_len=good["swa_offset"] + 1)


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(topk=None), "topk"),
        (dict(topk=torch.zeros(7, 8, dtype=torch.int64)), "topk"),
        (dict(topk=torch.zeros(7, 7, dtype=I32)), "topk"),
        (dict(topk=torch.zeros(8, 7, dtype=I32).t()), "topk"),
        (dict(seq_lens=torch.tensor([103, 304], dtype=torch.int64)), "seq_lens"),
        (dict(gather_lens=torch.zeros(3, dtype=I32)), "gather_lens"),
        (dict(query_start_loc=torch.zeros(2, dtype=I32)), "query_start_loc"),
        (dict(num_tokens=-1), "num_tokens"),
        (dict(ratio=0), "ratio"),
        (dict(sliding_window=0), "sliding_window"),
    ],
)
def test_k7_bad_inputs(change, argument):
    _raises(argument, **change)
