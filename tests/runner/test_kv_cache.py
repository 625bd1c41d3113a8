"""The packed paged KV cache: strides read from the tensors, slot addressing, int32 rejection.

KERNELS.md "Strides": every slot is ``block_id * block_stride_rows + offset`` with the stride read
from the allocated cache (equal to the block size only for a dense cache). "Conventions": a
configuration whose slots cannot fit int32 is rejected when it is built.
"""

from __future__ import annotations

import pytest
import torch

from zerojit.kernels.mla.config import INT32_MAX, ConfigError, ModelConfig
from zerojit.runner.config import load_config
from zerojit.runner.kv_cache import PagedKVCache, allocate_kv_cache, plan_kv_cache

SMALL = ModelConfig(name="small", block_size=16, compress_ratios=(1, 4, 8, 4, 8, 4), index_topk=64, index_kpool=2)


def test_strides_are_read_from_the_packed_tensors():
    cache = allocate_kv_cache(SMALL, 10)
    assert isinstance(cache, PagedKVCache) and cache.num_blocks == 10
    # main: the 3 indexer layers (ratio 4) packed; swa: all 6 layers; compressed: per ratio.
    assert [t.shape for t in cache.tensors["main"]] == [torch.Size([10, 3, 16, 1])]
    assert cache.block_stride_rows == 3 * 16
    assert cache.swa_block_stride_rows == 6 * 16
    # ratio 2 = index_kpool (the indexer layers), 4 (cbs 4), 8 (cbs 2)
    assert cache.compressed_block_strides == ((2, 3 * 8), (4, 3 * 4), (8, 2 * 2))
    for name, packs in cache.tensors.items():
        t = packs[0]
        assert t.dtype == torch.uint8
        assert cache.stride_of(name) == t.stride(0) // t.stride(2) == t.shape[1] * t.shape[2]
    assert cache.max_slot == 9 * 96 + 15
    assert "block_stride_rows=48" in repr(cache)


def test_dense_cache_has_the_block_size_as_stride():
    cache = allocate_kv_cache(SMALL, 4, layers_per_pack=1, entry_bytes=2)
    assert cache.block_stride_rows == cache.swa_block_stride_rows == SMALL.block_size
    assert cache.compressed_block_strides == ((2, 8), (4, 4), (8, 2))
    assert len(cache.tensors["swa"]) == 6 and cache.layers_per_pack == 1
    assert cache.tensors["main"][0].shape == (4, 1, 16, 2)


def test_partial_packs_share_one_stride():
    cache = allocate_kv_cache(SMALL, 4, layers_per_pack=4)  # swa: 6 layers -> 2 packs of 4 slots
    assert [t.shape[1] for t in cache.tensors["swa"]] == [4, 4]
    assert cache.swa_block_stride_rows == 4 * 16
    assert cache.layouts["swa"].place(5) == (1, 1)
    assert cache.block_stride_rows == 3 * 16  # only 3 indexer layers: min(P, 3)


def test_slots_address_the_layers_blocks():
    cache = allocate_kv_cache(SMALL, 5, entry_bytes=2)
    for name, layer in (("main", 3), ("swa", 4), ("compressed:8", 4)):
        blocks = cache.layer_blocks(layer, name)
        rows = cache.layer_rows(layer, name)
        stride = cache.stride_of(name)
        assert blocks.stride(0) // blocks.stride(1) == stride
        for block_id, off in ((0, 0), (2, 1), (4, blocks.shape[1] - 1)):
            slot = block_id * stride + off
            assert slot <= cache.max_slot
            assert rows[slot].data_ptr() == blocks[block_id, off].data_ptr()
            rows[slot].fill_(7)
            assert blocks[block_id, off].tolist() == [7, 7]
    # Layers never overlap: each (layer, block) owns its rows.
    fresh = allocate_kv_cache(SMALL, 5)
    fresh.layer_blocks(1, "main").fill_(1)
    assert int(fresh.layer_blocks(3, "main").sum()) == int(fresh.layer_blocks(5, "main").sum()) == 0
    assert int(fresh.tensors["main"][0].sum()) == 5 * 16
    with pytest.raises(KeyError, match="layer 0 does not use the main cache"):
        cache.layer_blocks(0, "main")
    with pytest.raises(KeyError, match="no cache 'compressed:16'"):
        cache.layer_blocks(0, "compressed:16")


def test_slots_beyond_int32_are_rejected_before_allocating():
    cfg = load_config("dsv4-like")
    plan = plan_kv_cache(cfg, 1024)
    stride = plan["swa"].expected_block_stride_rows  # the largest: 61 layers x 256
    fit = (INT32_MAX - 256 + 1) // stride + 1
    assert plan_kv_cache(cfg, fit)["swa"].max_slot <= INT32_MAX
    with pytest.raises(ConfigError) as e:
        allocate_kv_cache(cfg, fit + 1)  # would be ~33 GB per cache: never allocated
    msg = str(e.value)
    assert "num_blocks=" in msg and "does not fit int32" in msg and f"num_blocks <= {fit}" in msg
    assert "swa cache" in msg and "layers_per_pack" in msg
    # A dense layout of the same blocks fits.
    assert plan_kv_cache(cfg, fit + 1, layers_per_pack=1)["swa"].max_slot <= INT32_MAX


def test_bad_arguments_are_all_reported():
    with pytest.raises(ConfigError) as e:
        allocate_kv_cache(SMALL, 0, layers_per_pack=0, entry_bytes=-1)
    assert len(e.value.problems) == 3
    for field in ("num_blocks=0", "layers_per_pack=0", "entry_bytes=-1"):
        assert field in str(e.value)
    assert "PagedKVCache" in str(e.value)


@pytest.mark.parametrize("name", ["deepseek-v3.2", "dsv4-like"])
def test_shipped_configs_allocate_small(name):
    cfg = load_config(name)
    cache = allocate_kv_cache(cfg, 256)
    assert cache.block_stride_rows != cfg.block_size  # packed
    assert cache.nbytes < 64 * 2**20
    assert {c for c, _ in cache.compressed_block_strides} == set(cfg.compressed_ratios)
