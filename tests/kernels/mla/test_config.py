"""ModelConfig: validation (every problem at once), derived values, conversions."""

from __future__ import annotations

import dataclasses

import pytest

from zerojit.kernels.mla.config import MAX_NUM_SEQS, ConfigError, ModelConfig


def test_defaults_are_valid():
    cfg = ModelConfig()
    assert cfg.compress_ratios == (4,)
    assert cfg.num_layers == 1
    assert cfg.compressed_ratios == (4,)
    assert cfg.indexer_ratios == (4,)
    assert cfg.query_len == 1
    assert cfg.max_blocks_per_req == 1024  # 65536 / 64


def test_lists_become_tuples_and_derived_values():
    cfg = ModelConfig(block_size=256, compress_ratios=[1, 4, 128, 4], index_topk=1024,
                      num_speculative_tokens=2, max_model_len=1000)
    assert cfg.compress_ratios == (1, 4, 128, 4)
    assert isinstance(cfg.compress_ratios, tuple)
    assert hash(cfg) == hash(ModelConfig(**{**cfg.to_dict(), "compress_ratios": (1, 4, 128, 4)}))
    assert cfg.num_layers == 4
    assert cfg.compressed_ratios == (4, 128)
    assert cfg.indexer_ratios == (4,)
    assert cfg.query_len == 3
    assert cfg.max_blocks_per_req == 4  # cdiv(1000, 256)
    assert [cfg.topk_width(c) for c in (1, 4, 128, 16)] == [0, 1024, 8, 63]  # cdiv(1000, c)
    assert cfg.layer_topk_pairs == ((1, 0), (4, 1024), (128, 8))
    assert cfg.replace(index_kpool=8).compressed_ratios == (4, 8, 128)
    assert ModelConfig(block_size=256, compress_ratios=(1, 128)).indexer_ratios == ()
    assert ModelConfig(compress_ratios=(1,)).compressed_ratios == ()


def test_three_bad_fields_reported_at_once():
    with pytest.raises(ConfigError) as ei:
        ModelConfig(block_size=48, dcp_size=2, dcp_rank=2, sliding_window=0)
    e = ei.value
    assert isinstance(e, ValueError)
    assert len(e.problems) == 3
    text = str(e)
    for needle in ("block_size=48", "power of two", "dcp_rank=2", "dcp_size=2",
                   "sliding_window=0", "3 problems"):
        assert needle in text
    assert [p.split("=")[0] for p in e.problems] == ["block_size", "sliding_window", "dcp_rank"]


def test_ratio_rules():
    with pytest.raises(ConfigError) as ei:  # 128 does not divide 64 (layers 1 and 3)
        ModelConfig(block_size=64, compress_ratios=(4, 128, 1, 128))
    assert len(ei.value.problems) == 1
    assert ei.value.problems[0].startswith("compress_ratios[1, 3]=128")

    with pytest.raises(ConfigError) as ei:  # a ratio below 1, and index_kpool 1
        ModelConfig(compress_ratios=(0, 4), index_kpool=1)
    assert len(ei.value.problems) == 2
    assert "compress_ratios[0]=0" in ei.value.problems[0]
    assert "index_kpool=1" in ei.value.problems[1]

    with pytest.raises(ConfigError, match="compress_ratios=()"):
        ModelConfig(compress_ratios=())


def test_dcp_interleave_rules():
    ok = ModelConfig(block_size=64, compress_ratios=(4,), dcp_size=2, dcp_rank=1, dcp_interleave=16)
    assert ok.dcp_interleave == 16  # (64 // 4) % 16 == 0 and 64 % 16 == 0
    with pytest.raises(ConfigError) as ei:  # cbs = 16 not a multiple of 32; 64 % 32 == 0
        ModelConfig(block_size=64, compress_ratios=(4,), dcp_size=2, dcp_interleave=32)
    assert len(ei.value.problems) == 1 and "dcp_interleave=32" in ei.value.problems[0]
    with pytest.raises(ConfigError) as ei:  # both (64 // 4) % 128 and 64 % 128 fail
        ModelConfig(block_size=64, compress_ratios=(4,), dcp_size=2, dcp_interleave=128)
    assert len(ei.value.problems) == 2


def test_types_checked():
    with pytest.raises(ConfigError) as ei:
        ModelConfig(block_size=True, compress_ratios=5)
    assert len(ei.value.problems) == 2


def test_from_dict_to_dict_replace():
    cfg = ModelConfig(name="v32", compress_ratios=(1, 4))
    d = cfg.to_dict()
    assert d["compress_ratios"] == [1, 4] and d["name"] == "v32"
    assert ModelConfig.from_dict(d) == cfg

    with pytest.raises(ConfigError) as ei:  # unknown key reported with the bad field
        ModelConfig.from_dict({"block_sizee": 64, "sliding_window": -1})
    assert len(ei.value.problems) == 2
    assert "'block_sizee'" in ei.value.problems[0] and "unknown" in ei.value.problems[0]
    assert "sliding_window=-1" in ei.value.problems[1]

    assert cfg.replace(block_size=128).block_size == 128
    with pytest.raises(ConfigError, match="block_size=100"):
        cfg.replace(block_size=100)
    with pytest.raises(ConfigError, match="bogus"):
        cfg.replace(bogus=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.block_size = 128  # type: ignore[misc]


# ------------------------------------------------------------------ limits between fields
def only_problem(**fields) -> str:
    """The one problem ``ModelConfig(**fields)`` reports (it must report exactly one)."""
    with pytest.raises(ConfigError) as ei:
        ModelConfig(**fields)
    assert len(ei.value.problems) == 1, ei.value.problems
    return ei.value.problems[0]


def test_max_model_len_holds_a_prompt_and_a_generated_token():
    msg = only_problem(max_model_len=1, sliding_window=1)
    assert msg.startswith("max_model_len=1: must be >= 2")
    assert "prompt token" in msg and "prefill samples" in msg
    assert ModelConfig(max_model_len=2, sliding_window=2).max_model_len == 2  # the smallest


def test_a_decode_query_fits_a_step_and_a_sequence():
    assert ModelConfig(num_speculative_tokens=8191).query_len == 8192  # == max_num_batched_tokens
    assert ModelConfig(max_num_batched_tokens=1, max_num_seqs=1).query_len == 1
    msg = only_problem(num_speculative_tokens=8192)
    assert msg.startswith("num_speculative_tokens=8192: ")
    for needle in ("1 + num_speculative_tokens = 8193", "max_num_batched_tokens=8192",
                   "num_speculative_tokens <= 8191", "raise max_num_batched_tokens"):
        assert needle in msg
    assert "max_model_len" not in msg

    # max_model_len bounds it too (and with it K6's non-causal width), whatever the budget.
    assert ModelConfig(max_model_len=1000, num_speculative_tokens=999).query_len == 1000
    msg = only_problem(max_model_len=1000, num_speculative_tokens=1000)
    assert msg.startswith("num_speculative_tokens=1000: ")
    assert "max_model_len=1000" in msg and "num_speculative_tokens <= 999" in msg
    assert "max_num_batched_tokens" not in msg

    msg = only_problem(num_speculative_tokens=100_000)
    for needle in ("num_speculative_tokens=100000", "max_num_batched_tokens=8192", "max_model_len=65536",
                   "num_speculative_tokens <= 8191"):
        assert needle in msg


def test_sliding_window_at_most_max_model_len():
    assert ModelConfig(max_model_len=1000, sliding_window=1000).sliding_window == 1000
    msg = only_problem(sliding_window=2**30)
    assert msg.startswith("sliding_window=1073741824: must be <= max_model_len=65536")
    assert "covers nothing more" in msg and "sliding_window <= 65536" in msg


def test_max_num_seqs_at_most_max_num_batched_tokens():
    assert ModelConfig(max_num_seqs=8192).max_num_seqs == 8192  # == max_num_batched_tokens
    msg = only_problem(max_num_seqs=2**30)
    assert msg.startswith("max_num_seqs=1073741824: must be <= max_num_batched_tokens=8192")
    assert "at least one token" in msg

    # K5's one-tile prefill metadata caps it at Triton's largest tensor, whatever the budget.
    big = ModelConfig(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=2 * MAX_NUM_SEQS)
    assert big.max_num_seqs == 2**20
    with pytest.raises(ConfigError) as ei:
        big.replace(max_num_seqs=MAX_NUM_SEQS + 1)
    assert len(ei.value.problems) == 1
    msg = ei.value.problems[0]
    assert msg.startswith(f"max_num_seqs={MAX_NUM_SEQS + 1}: must be <= {MAX_NUM_SEQS}")
    assert "max_num_batched_tokens" not in msg


def test_limits_between_fields_are_reported_together_in_field_order():
    with pytest.raises(ConfigError) as ei:
        ModelConfig(max_model_len=1000, sliding_window=2000, max_num_seqs=9000, num_speculative_tokens=1000)
    assert [p.split("=")[0] for p in ei.value.problems] == [
        "sliding_window", "max_num_seqs", "num_speculative_tokens"]
    with pytest.raises(ConfigError) as ei:  # a bad max_model_len is reported once, not compared
        ModelConfig(max_model_len=0, sliding_window=2000, num_speculative_tokens=5000)
    assert [p.split("=")[0] for p in ei.value.problems] == ["max_model_len"]


def test_block_size_without_a_divisor_names_no_empty_set():
    with pytest.raises(ConfigError) as ei:
        ModelConfig(block_size=1, compress_ratios=(1, 4), index_kpool=8)
    assert len(ei.value.problems) == 2
    for msg, c in zip(ei.value.problems, (4, 8)):
        assert "{}" not in msg
        assert "block_size=1, which has no divisor > 1" in msg
        assert f"use a block_size that is a multiple of {c}" in msg
    with pytest.raises(ConfigError, match=r"use a ratio in \{2\} or a block_size that is a multiple of 4"):
        ModelConfig(block_size=2, compress_ratios=(4,))
