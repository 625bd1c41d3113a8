"""Shipped model configurations, loading by name or path, overrides and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zerojit.kernels.mla.config import ConfigError, ModelConfig
from zerojit.runner.config import CONFIG_DIR, REQUIRED_FIELDS, file_defaults, load_config, shipped_configs


def test_shipped_names():
    assert shipped_configs() == ["deepseek-v3.2", "dsv4-like"]


def test_deepseek_v32():
    cfg = load_config("deepseek-v3.2")
    assert isinstance(cfg, ModelConfig) and cfg.name == "deepseek-v3.2"
    assert cfg.num_layers == 61 and set(cfg.compress_ratios) == {4}  # every layer has the indexer
    assert (cfg.block_size, cfg.index_topk, cfg.index_kpool, cfg.sliding_window) == (64, 2048, None, 128)
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.dcp_size, cfg.num_speculative_tokens) == (8192, 256, 1, 0)
    assert cfg.layer_topk_pairs == ((4, 2048),)


def test_dsv4_like():
    cfg = load_config("dsv4-like")
    assert cfg.num_layers == 61 and cfg.block_size == 256
    assert cfg.compress_ratios[:2] == (1, 1)
    assert cfg.compress_ratios[2:] == tuple(4 if i % 2 == 0 else 128 for i in range(59))
    assert (cfg.index_topk, cfg.index_kpool, cfg.sliding_window, cfg.max_model_len) == (1024, 4, 128, 65536)
    assert cfg.compressed_ratios == (4, 128) and cfg.indexer_ratios == (4,)
    assert cfg.layer_topk_pairs == ((1, 0), (4, 1024), (128, 512))  # K7's TOP_K stays small
    assert cfg.num_speculative_tokens == 1


def test_files_are_plain_model_config_fields():
    for name in shipped_configs():
        data = json.loads((CONFIG_DIR / f"{name}.json").read_text())
        assert data["name"] == name
        assert {k for k in data if not k.startswith("_")} <= set(ModelConfig.field_names())


def test_overrides():
    cfg = load_config("dsv4-like", dcp_size=4, dcp_rank=3, dcp_interleave=2, num_speculative_tokens=3)
    assert (cfg.dcp_size, cfg.dcp_rank, cfg.dcp_interleave, cfg.query_len) == (4, 3, 2, 4)
    assert cfg.compress_ratios == load_config("dsv4-like").compress_ratios


def test_bad_overrides_list_every_bad_field():
    with pytest.raises(ConfigError) as e:
        load_config("dsv4-like", dcp_size=2, dcp_rank=5, dcp_interleave=4, num_speculative_tokens=-1,
                    max_num_seqs=0, nonsense=1)
    msg = str(e.value)
    for part in ("dcp_rank=5", "dcp_interleave=4", "num_speculative_tokens=-1", "max_num_seqs=0", "'nonsense'"):
        assert part in msg, part
    assert len(e.value.problems) >= 5


def test_unknown_name_lists_shipped_configs():
    with pytest.raises(ConfigError, match=r"unknown config 'dsv5'.*deepseek-v3\.2, dsv4-like"):
        load_config("dsv5")


def test_a_file_here_that_is_no_json_is_not_an_unknown_name(tmp_path, monkeypatch):
    (tmp_path / "trace.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^invalid config path: 'trace\.csv' is not a JSON config file: a config "
                                          r"file's name ends in \.json \(shipped configs are deepseek-v3\.2, dsv4-like\)$"):
        load_config("trace.csv")
    with pytest.raises(ConfigError, match=r"^invalid config file: \./trace\.csv: cannot read a JSON object: .*\(a config file is JSON"):
        load_config("./trace.csv")


def test_load_from_path(tmp_path):
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps({"_comment": "ignored", "block_size": 128, "compress_ratios": [1, 4], "index_topk": 512}))
    cfg = load_config(p, max_num_seqs=8)
    assert (cfg.name, cfg.block_size, cfg.compress_ratios, cfg.max_num_seqs) == ("tiny", 128, (1, 4), 8)
    assert load_config(str(p)) == load_config(p)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read a JSON object"):
        load_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level must be a JSON object"):
        load_config(bad)
    bad.write_text(json.dumps({"block_size": 96, "compress_ratios": [4, 128]}))
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert "block_size=96" in str(e.value) and "compress_ratios" in str(e.value)


def test_a_file_must_set_the_architecture_fields_one_line_each(tmp_path):
    """Leaving out block_size is one problem, not a second one about the default standing in for it."""
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"compress_ratios": [1, 4, 128], "index_topk": 512}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == ["block_size: missing; set it (tokens per KV-cache block, a power of two: 64 for "
                                   "DeepSeek-V3.2, 256 for a DSv4-like model)"]
    assert str(info.value) == f"invalid config partial.json: {info.value.problems[0]}"  # one problem: one line
    path.write_text(json.dumps({}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [p.split(":")[0] for p in info.value.problems] == list(REQUIRED_FIELDS) == [
        "block_size", "compress_ratios", "index_topk"]
    assert load_config(path, block_size=64, compress_ratios=[4], index_topk=64).block_size == 64  # overrides set them


def test_a_problem_with_a_default_the_file_never_set_says_so_on_its_line(tmp_path):
    path = tmp_path / "short.json"
    path.write_text(json.dumps({"block_size": 64, "compress_ratios": [4], "index_topk": 64, "max_model_len": 100}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.startswith("sliding_window=128: must be <= max_model_len=100")
    assert problem.endswith("(sliding_window=128: the default, short.json does not set it)")
    path.write_text(json.dumps({"block_size": 48, "compress_ratios": [4], "index_topk": 64}))  # a value the file set
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert not any("the default" in p for p in info.value.problems)


def test_the_defaults_of_a_file_are_modelconfigs_and_documented():
    defaults = file_defaults()
    assert defaults == {"index_kpool": None, "sliding_window": 128, "max_model_len": 65536,
                        "max_num_batched_tokens": 8192, "max_num_seqs": 256, "dcp_size": 1, "dcp_rank": 0,
                        "dcp_interleave": 1, "num_speculative_tokens": 0,
                        "cuda_graph_batch_sizes": (1, 2, 4, 8, 16, 32)}
    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    for name, value in defaults.items():
        value = list(value) if isinstance(value, tuple) else value  # as JSON writes it
        assert f"`{name}` | {'none' if value is None else value}" in docs, name
    for name in REQUIRED_FIELDS:
        assert f"`{name}` | required" in docs, name


def test_a_config_file_nested_too_deep_is_a_config_error_not_a_recursion_error(tmp_path):
    """json raises RecursionError (no ValueError) for an array nested past the interpreter's limit."""
    p = tmp_path / "deep.json"
    p.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ConfigError, match=r"deep\.json: cannot read a JSON object: maximum recursion depth"):
        load_config(p)
