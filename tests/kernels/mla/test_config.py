"""ModelConfig: validation (every problem at once), derived values, conversions."""

from __future__ import annotations

import dataclasses

import pytest

from zerojit.kernels.mla.config import ConfigError, ModelConfig


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
