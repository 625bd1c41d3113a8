"""K6 compute_swa_indices_and_lens.

* interpreter tests: equal to the PyTorch reference (hypothesis: block sizes 16-256, packed block
  strides, padding rows, token offsets, causal and non-causal), and no stale value ever survives
  in an output row;
* compile-only tests: warm-up covers runtime-shaped dry launches, no dead key;
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
from zerojit.kernels.mla import swa as swa_module
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.shapes import cdiv
from zerojit.kernels.mla.swa import compute_swa_indices_and_lens
from zerojit.registry import JitWarmupRegistry

from _support import assert_equal_outputs, gpu_examples, input_error, on_cuda, slow_examples

I32, I64 = torch.int32, torch.int64
SETTINGS = slow_examples(40)


def _batch(qlens, prefixes, *, block_size, rng: random.Random, q0=0, pad=0, pad_prob=0.0, extra_cols=0,
           num_blocks=5000):
    """Runtime-shaped K6 inputs: tokens [q0, q0 + sum(qlens)) of the requests, ``pad`` trailing
    padding tokens (slot -1), a block table that is a column slice of a wider one (row stride >
    width)."""
    R = len(qlens)
    seqs = [q + p for q, p in zip(qlens, prefixes)]
    qsl = list(accumulate(qlens, initial=q0))
    total = qsl[-1] + pad
    token_to_req = [rng.randrange(max(R, 1)) for _ in range(total)]  # garbage for padding rows
    slot_mapping = [-1] * total
    for b in range(R):
        for t in range(qsl[b], qsl[b + 1]):
            token_to_req[t] = b
            slot_mapping[t] = -1 if rng.random() < pad_prob else rng.randrange(10**6)
    width = max([cdiv(s, block_size) for s in seqs] + [1])
    table = torch.tensor([[rng.randrange(num_blocks) for _ in range(width + extra_cols + 3)] for _ in range(R)],
                         dtype=I32).reshape(R, width + extra_cols + 3)
    return dict(
        token_to_req=torch.tensor(token_to_req, dtype=I32),
        slot_mapping=torch.tensor(slot_mapping, dtype=I64),
        seq_lens=torch.tensor(seqs, dtype=I32),
        query_start_loc=torch.tensor(qsl, dtype=I32),
        block_table=table[:, : width + extra_cols],
    ), total


def _reference(inputs: dict):
    kw = {k: v for k, v in inputs.items() if k != "max_query_len"}
    return ref.compute_swa_indices_and_lens(kw.pop("token_to_req"), kw.pop("slot_mapping"), kw.pop("seq_lens"),
                                            kw.pop("query_start_loc"), kw.pop("block_table"), **kw)


def _check(inputs: dict):
    got = compute_swa_indices_and_lens(**inputs)
    assert_equal_outputs(got, _reference(inputs))
    return got


# ------------------------------------------------------------------------------------ equivalence
@st.composite
def k6_cases(draw):
    causal = draw(st.booleans())
    spec = draw(st.integers(0, 4)) if causal else draw(st.integers(1, 4))
    R = draw(st.integers(0, 5))
    qlens = draw(st.lists(st.integers(0, 12 if causal else 1 + spec), min_size=R, max_size=R))
    prefixes = draw(st.lists(st.integers(0, 400), min_size=R, max_size=R))
    block_size = draw(st.sampled_from([16, 32, 64, 128, 256]))
    stride = draw(st.sampled_from([block_size, 2 * block_size, 3 * block_size, block_size + 16]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    inputs, total = _batch(qlens, prefixes, block_size=block_size, rng=rng, q0=draw(st.integers(0, 2)),
                           pad=draw(st.integers(0, 4)), pad_prob=draw(st.sampled_from([0.0, 0.2])),
                           extra_cols=draw(st.integers(0, 2)))
    token_offset = draw(st.integers(0, total))
    return dict(inputs, num_tokens=draw(st.integers(0, total - token_offset)), token_offset=token_offset,
                sliding_window=draw(st.integers(1, 200)), block_size=block_size, block_stride_rows=stride,
                causal=causal, num_speculative_tokens=spec,
                max_query_len=draw(st.sampled_from([None, max(qlens + [0])])) if not causal else None)


@pytest.mark.interpreter
@SETTINGS
@given(k6_cases())
def test_k6_matches_reference(inputs):
    _check(inputs)


@pytest.mark.interpreter
@pytest.mark.parametrize("block_size", [16, 64, 256])
@pytest.mark.parametrize("causal", [True, False])
def test_k6_edge_cases(block_size, causal):
    rng = random.Random(block_size)
    common = dict(sliding_window=128, block_size=block_size, block_stride_rows=3 * block_size, causal=causal,
                  num_speculative_tokens=3)
    empty, _ = _batch([], [], block_size=block_size, rng=rng)
    _check(dict(empty, num_tokens=0, token_offset=0, **common))  # empty batch
    one, _ = _batch([1], [0], block_size=block_size, rng=rng)
    _check(dict(one, num_tokens=1, token_offset=0, **common))  # single token, first position
    long, total = _batch([4], [5000], block_size=block_size, rng=rng, pad=3)
    _check(dict(long, num_tokens=total, token_offset=0, **common))  # single request, full window, padding rows
    many, total = _batch([1, 4, 2, 3], [300, 0, 127, 128], block_size=block_size, rng=rng, pad_prob=0.3)
    _check(dict(many, num_tokens=total - 2, token_offset=2, **common))  # a token_offset slice


@pytest.mark.interpreter
@pytest.mark.parametrize("causal", [True, False])
def test_k6_never_leaves_stale_values(causal, monkeypatch):
    """Every output element is written: rows from len to Wout are -1 even in recycled memory."""
    rng = random.Random(7)
    common = dict(sliding_window=96, block_size=32, block_stride_rows=64, causal=causal, num_speculative_tokens=2)
    big, total_big = _batch([3, 3, 2], [4000, 900, 700], block_size=32, rng=rng)  # full windows everywhere
    small, total_small = _batch([3, 1, 2], [0, 5, 1], block_size=32, rng=rng, pad=2)  # short windows, padding
    real_empty = torch.empty

    def stale_empty(*shape, **kw):  # what a caching allocator may hand back: old, non -1 values
        return real_empty(*shape, **kw).fill_(123456)

    for inputs, total in ((big, total_big), (small, total_small), (big, total_big), (small, total_small)):
        with monkeypatch.context() as m:
            m.setattr(swa_module.torch, "empty", stale_empty)
            got = compute_swa_indices_and_lens(**inputs, num_tokens=total, token_offset=0, **common)
        want = _reference(dict(inputs, num_tokens=total, token_offset=0, **common))
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert not (got[0] == 123456).any() and not (got[1] == 123456).any()


# ------------------------------------------------------------------------------------ on a GPU
@gpu_examples(30)
@given(k6_cases())
def test_k6_gpu_matches_reference(inputs):
    _check(on_cuda(inputs))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False])
def test_k6_gpu_serving_size(causal):
    rng = random.Random(1)
    qlens = [4] * 200 if not causal else [4] * 100 + [rng.randint(1, 2000) for _ in range(8)]
    inputs, total = _batch(qlens, [rng.randint(0, 100_000) for _ in qlens], block_size=64, rng=rng, pad=33,
                           extra_cols=5, num_blocks=100_000)
    _check(on_cuda(dict(inputs, num_tokens=total, token_offset=0, sliding_window=128, block_size=64,
                        block_stride_rows=192, causal=causal, num_speculative_tokens=3, max_query_len=4)))


# ------------------------------------------------------------------------------------ compile-only coverage
CONFIGS = [
    ModelConfig(name="v32-like", block_size=64, compress_ratios=(1, 4), sliding_window=128),
    ModelConfig(name="v4-like-mtp", block_size=256, compress_ratios=(1, 4, 128), index_topk=512, max_model_len=2**20,
                num_speculative_tokens=3, dcp_size=2, dcp_interleave=2),
    ModelConfig(name="odd-window", block_size=128, compress_ratios=(1,), sliding_window=100, num_speculative_tokens=1),
]


def _runtime_steps(config: ModelConfig, stride: int, rng: random.Random) -> int:
    """Mixed decode + prefill steps as the attention backend launches K6 (dry launches)."""
    lq = config.query_len
    calls = 0
    for step in range(20):
        num_decodes = rng.randint(0, 6)
        num_prefills = rng.randint(0 if num_decodes else 1, 3)
        qlens = [lq] * num_decodes + [rng.randint(1, 300) for _ in range(num_prefills)]
        prefixes = [rng.randint(0, 20000) for _ in qlens]
        inputs, total = _batch(qlens, prefixes, block_size=config.block_size, rng=rng, pad=rng.randint(0, 8),
                               extra_cols=rng.randint(0, 40), num_blocks=1000)
        common = dict(inputs, sliding_window=config.sliding_window, block_size=config.block_size,
                      block_stride_rows=stride, num_speculative_tokens=config.num_speculative_tokens)
        compute_swa_indices_and_lens(**common, num_tokens=total, token_offset=0, causal=True)
        nd = num_decodes * lq
        compute_swa_indices_and_lens(**common, num_tokens=total - nd, token_offset=nd, causal=True)
        calls += 2
        if config.num_speculative_tokens and num_decodes:
            compute_swa_indices_and_lens(**common, num_tokens=nd, token_offset=0, causal=False,
                                         max_query_len=lq if step % 2 else None)
            calls += 1
    return calls


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_warmup_covers_runtime_calls(config, assert_warmup_covers):
    stride = 3 * config.block_size  # a packed cache: three layers' blocks interleaved
    variants = (True, False) if config.num_speculative_tokens else (True,)
    reg = JitWarmupRegistry()
    with reg.activate():  # what binding the KV cache registers (stride read from the cache)
        compute_swa_indices_and_lens.register_warmup(block_stride_rows=stride, causal=variants)
    report = reg.warmup(config, progress=False, target="cuda:90")
    assert len(report.keys_by_kernel()["compute_swa_indices_and_lens"]) == len(variants)
    with assert_warmup_covers(compute_swa_indices_and_lens, report):
        _runtime_steps(config, stride, random.Random(config.name))


def test_warmup_keys():
    cfg = CONFIGS[1]
    causal, draft = compute_swa_indices_and_lens.get_warmup_keys(cfg, block_stride_rows=512, causal=(True, False))
    assert (causal.sliding_window, causal.block_size, causal.block_stride_rows, causal.wout) == (128, 256, 512, 128)
    assert (draft.causal, draft.wout) == (False, 192)  # roundup(128 - 1 + 4, 64)
    # non-causal needs speculative decoding: no key (nothing could reach it) without it
    assert len(compute_swa_indices_and_lens.get_warmup_keys(CONFIGS[0], block_stride_rows=64,
                                                            causal=(True, False))) == 1
    assert len(compute_swa_indices_and_lens.get_warmup_keys(CONFIGS[0], block_stride_rows=(64, 192))) == 2


# ------------------------------------------------------------------------------------ bad inputs
def _good(**change):
    inputs, total = _batch([1, 1, 5], [10, 20, 30], block_size=16, rng=random.Random(0))
    base = dict(inputs, num_tokens=total, token_offset=0, sliding_window=64, block_size=16, block_stride_rows=48,
                causal=False, num_speculative_tokens=1, max_query_len=None)
    return {**base, **change}


def test_k6_non_causal_row_too_long():
    # request 2 has 5 query tokens > Lmax = 2: named from the tensors (CPU: no sync) ...
    with pytest.raises(KernelInputError) as e:
        compute_swa_indices_and_lens(**_good())
    assert e.value.kernel == "compute_swa_indices_and_lens" and e.value.argument == "query_start_loc"
    assert "request 2" in str(e.value) and "Lmax" in str(e.value)
    # ... or from the host-side max_query_len, without touching the tensors
    with pytest.raises(KernelInputError) as e:
        compute_swa_indices_and_lens(**_good(max_query_len=5))
    assert e.value.kernel == "compute_swa_indices_and_lens" and e.value.argument == "max_query_len"


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(slot_mapping=torch.zeros(7, dtype=I32)), "slot_mapping"),
        (dict(token_to_req=torch.zeros(7, dtype=I64)), "token_to_req"),
        (dict(seq_lens=torch.zeros(3, dtype=torch.float32)), "seq_lens"),
        (dict(block_table=torch.zeros(3, 4, dtype=I64)), "block_table"),
        (dict(block_table=torch.zeros(4, 3, dtype=I32).t()), "block_table"),
        (dict(block_table=torch.zeros(12, dtype=I32)), "block_table"),
        (dict(query_start_loc=torch.zeros(3, dtype=I32)), "query_start_loc"),
        (dict(num_tokens=8), "slot_mapping"),
        (dict(token_offset=-1), "token_offset"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(causal=1), "causal"),
    ],
)
def test_k6_bad_inputs(change, argument):
    input_error(compute_swa_indices_and_lens, _good(**{"causal": True, **change}), kernel="compute_swa_indices_and_lens",
                argument=argument)
