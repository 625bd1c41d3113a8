"""Model construction and KV-cache binding register exactly the active backend's kernels.

Checks KERNELS.md "Registration" and DESIGN.md's lessons on the runner's model: one request per
distinct value however many layers register it; stride-derived keys carry the bound cache's real
(packed) stride, not the block size; nothing registers outside ``activate()``; each backend
registers (and warms) its own kernel subset and variants, never another backend's; and a full
compile-only warm-up of a shipped config succeeds within a start-up budget.
"""

from __future__ import annotations

import pytest
import torch
from triton import knobs

from zerojit.compile_only import compile_only
from zerojit.kernels.mla.backends import (
    BACKENDS,
    KERNEL_NAMES,
    AttentionBackend,
    BackendError,
    default_backend,
    get_backend,
)
from zerojit.kernels.mla.index import convert_req_index_to_global_index
from zerojit.kernels.mla.registration import layer_kind
from zerojit.registry import JitWarmupRegistry
from zerojit.runner.config import load_config
from zerojit.runner.kv_cache import allocate_kv_cache
from zerojit.runner.model import KVCacheMismatchError, SparseMLAModel

K = KERNEL_NAMES
ALL_KERNELS = set(K.values())

#: The config each backend is exercised with: the DSv4-like model (every layer kind, one MTP
#: token), with DCP for the DCP backend.
BACKEND_CONFIG = {
    "flashmla_sparse": dict(),
    "flashmla_sparse_dcp": dict(dcp_size=2, dcp_rank=1, dcp_interleave=2),
}


def build(config, backend=None, *, num_blocks=64, layers_per_pack=None, bind=True):
    """Model (+ bound cache) built under a fresh registry; returns (registry, model, cache)."""
    registry = JitWarmupRegistry()
    with registry.activate():
        model = SparseMLAModel(config, backend)
        cache = allocate_kv_cache(config, num_blocks, layers_per_pack=layers_per_pack) if bind else None
        if bind:
            model.bind_kv_cache(cache)
    return registry, model, cache


def by_name(registry):
    return {k.name: k for k in registry.kernels}


@pytest.fixture(scope="module")
def dsv4():
    return load_config("dsv4-like")


# ---------------------------------------------------------------------------------- backends
def test_backend_lookup_and_errors(dsv4):
    assert [b for b in BACKENDS] == ["flashmla_sparse", "flashmla_sparse_dcp"]
    assert default_backend(dsv4).name == "flashmla_sparse"
    assert default_backend(dsv4.replace(dcp_size=4)).name == "flashmla_sparse_dcp"
    assert get_backend(BACKENDS["flashmla_sparse"]) is BACKENDS["flashmla_sparse"]
    with pytest.raises(BackendError, match="unknown attention backend 'flashmla'.*flashmla_sparse, flashmla_sparse_dcp"):
        get_backend("flashmla")
    with pytest.raises(BackendError, match="'flashmla_sparse' needs dcp_size == 1, got dcp_size=2.*flashmla_sparse_dcp"):
        get_backend("flashmla_sparse").validate(dsv4.replace(dcp_size=2))
    with pytest.raises(BackendError, match="'flashmla_sparse_dcp' needs dcp_size > 1, got dcp_size=1"):
        get_backend("flashmla_sparse_dcp").validate(dsv4)
    with pytest.raises(BackendError, match="workspace_count_valid.*dcp_size > 1 only"):
        AttentionBackend("bad", dcp=True, index_flavours=("workspace_count_valid",), uniform_decode=False,
                         swa_noncausal_drafts=False)
    with pytest.raises(BackendError, match="unknown flavour"):
        AttentionBackend("bad", dcp=False, index_flavours=("nope",), uniform_decode=False, swa_noncausal_drafts=False)


def test_invalid_backend_registers_nothing(dsv4):
    registry = JitWarmupRegistry()
    with registry.activate(), pytest.raises(BackendError, match="dcp_size"):
        SparseMLAModel(dsv4.replace(dcp_size=2), "flashmla_sparse")
    assert registry.kernels == []


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_backend_registers_its_kernel_set(backend, dsv4):
    config = dsv4.replace(**BACKEND_CONFIG[backend])
    registry, model, cache = build(config, backend)
    names = by_name(registry)
    print(f"\n{BACKENDS[backend].describe()}\n  registered: {sorted(names)}")
    assert model.backend.name == backend
    assert set(names) == set(model.kernel_names)  # nothing dropped out, nothing extra
    k1 = registry.requests(names[K["K1"]])
    k6 = registry.requests(names[K["K6"]])
    if backend == "flashmla_sparse":
        assert set(names) == ALL_KERNELS
        assert k1 == [dict(block_stride_rows=cache.block_stride_rows,
                           flavours=("workspace_count_valid", "count_valid"))]
        assert k6 == [dict(block_stride_rows=cache.swa_block_stride_rows, causal=(True, False))]
        assert registry.requests(names[K["K3"]]) == [dict(aligned=(True,))]
    else:
        assert set(names) == ALL_KERNELS - {K["K3"]}
        assert k1 == [dict(block_stride_rows=cache.block_stride_rows, flavours=("dcp_count_valid", "dcp_compact"))]
        assert k6 == [dict(block_stride_rows=cache.swa_block_stride_rows, causal=(True,))]


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_only_the_active_backends_variants_are_planned(backend, dsv4):
    """The keys warm-up would compile: the active backend's K1 flavours and K6 variants only."""
    config = dsv4.replace(**BACKEND_CONFIG[backend])
    registry, _, cache = build(config, backend)
    plan, failures = registry.warmup_keys(config)
    assert failures == []
    keys = {k.name: v for k, v in plan.items()}
    k1 = keys[K["K1"]]
    flavours = {(k.has_workspace, k.count_valid, k.compact, k.dcp_size) for k in k1}
    k6_causal = {k.causal for k in keys[K["K6"]]}
    if backend == "flashmla_sparse":
        assert flavours == {(True, True, False, 1), (False, True, False, 1)}
        assert k6_causal == {True, False}
        assert len(keys[K["K3"]]) == 1
    else:
        assert flavours == {(False, True, False, 2), (False, False, True, 2)}
        assert {k.dcp_interleave for k in k1} == {2}
        assert k6_causal == {True}
        assert K["K3"] not in keys
    assert {k.block_stride_rows for k in k1} == {cache.block_stride_rows}


def test_kernel_sets_follow_the_layer_kinds():
    """A window-only model needs no indexer (K1, K4) and no compressed slots (K2)."""
    base = load_config("dsv4-like")
    window_only = base.replace(compress_ratios=[1] * 3, index_kpool=None, num_speculative_tokens=0)
    registry, model, _ = build(window_only)
    assert model.layer_kinds == ("window",) * 3
    assert set(by_name(registry)) == {K["K5"], K["K6"], K["K7"]} == set(model.kernel_names)
    no_indexer = base.replace(compress_ratios=[1, 128, 128])
    registry, model, _ = build(no_indexer)
    assert set(by_name(registry)) == {K["K2"], K["K3"], K["K5"], K["K6"], K["K7"]} == set(model.kernel_names)


# ---------------------------------------------------------------------------------- one per value
def test_61_layers_register_each_distinct_request_once(dsv4, monkeypatch):
    calls: dict[str, int] = {}
    original = JitWarmupRegistry.register

    def counting(self, kernel, **request):
        calls[kernel.name] = calls.get(kernel.name, 0) + 1
        return original(self, kernel, **request)

    monkeypatch.setattr(JitWarmupRegistry, "register", counting)
    registry, model, _ = build(dsv4, "flashmla_sparse")
    kinds = model.kind_counts
    assert len(model) == 61 and kinds == {"window": 2, "indexer": 30, "compressed": 29}
    assert model.layer_kinds == tuple(layer_kind(c) for c in dsv4.compress_ratios)
    every, indexer, compressed = 61, kinds["indexer"], kinds["indexer"] + kinds["compressed"]
    assert calls == {
        K["K1"]: indexer, K["K2"]: compressed, K["K3"]: every, K["K4"]: indexer,
        K["K5"]: every, K["K6"]: every, K["K7"]: every,
    }
    for kernel in registry.kernels:
        assert len(registry.requests(kernel)) == 1, kernel.name


# ---------------------------------------------------------------------------------- strides
def test_binding_registers_the_packed_stride(dsv4):
    registry, model, _ = build(dsv4, bind=False)
    assert {K["K1"], K["K2"], K["K6"]}.isdisjoint(by_name(registry)), "stride-derived before the cache exists"

    cache = allocate_kv_cache(dsv4, 64)
    with registry.activate():
        model.bind_kv_cache(cache)
    assert model.kv_cache is cache and all(layer.kv_cache is cache for layer in model.layers)
    main = cache.tensors["main"][0]
    assert cache.block_stride_rows == main.stride(0) // main.stride(2) == 30 * dsv4.block_size != dsv4.block_size
    plan, _ = registry.warmup_keys(dsv4)
    keys = {k.name: v for k, v in plan.items()}
    assert {k.block_stride_rows for k in keys[K["K1"]]} == {cache.block_stride_rows}
    assert {k.block_stride_rows for k in keys[K["K6"]]} == {cache.swa_block_stride_rows} != {dsv4.block_size}
    assert {(k.ratio, k.block_stride_rows) for k in keys[K["K2"]]} == set(cache.compressed_block_strides)
    assert dict(cache.compressed_block_strides)[128] != dsv4.block_size // 128


def test_dense_and_packed_caches_register_different_keys(dsv4):
    _, _, dense = build(dsv4, num_blocks=8, layers_per_pack=1)
    registry, _, packed = build(dsv4, num_blocks=8)
    assert dense.block_stride_rows == dsv4.block_size and packed.block_stride_rows != dsv4.block_size
    # A runtime launch with the packed cache's stride hits the registered key; the key a dense
    # assumption would have warmed is a different one (the "strides are layout facts" bug).
    plan, _ = registry.warmup_keys(dsv4)
    warmed = next(v for k, v in plan.items() if k.name == K["K1"])
    T, W = 3, dsv4.max_blocks_per_req
    launch = dict(
        req_id=torch.zeros(T, dtype=torch.int32),
        block_table=torch.zeros((2, W), dtype=torch.int32),
        token_indices=torch.full((T, dsv4.index_topk), -1, dtype=torch.int32),
        block_size=dsv4.block_size,
        max_num_blocks_per_req=W,
        count_valid=True,
    )
    assert convert_req_index_to_global_index.key_for(**launch, block_stride_rows=packed.block_stride_rows) in warmed
    assert convert_req_index_to_global_index.key_for(**launch, block_stride_rows=dsv4.block_size) not in warmed


def test_binding_a_cache_of_another_config_is_an_error(dsv4):
    _, model, _ = build(dsv4, bind=False)
    other = allocate_kv_cache(load_config("deepseek-v3.2"), 4)
    with pytest.raises(KVCacheMismatchError, match="block_size: model 256, cache 64"):
        model.bind_kv_cache(other)


# ---------------------------------------------------------------------------------- activation
def test_registration_outside_activate_registers_nothing(dsv4):
    registry = JitWarmupRegistry()
    model = SparseMLAModel(dsv4)  # no registry active
    model.bind_kv_cache(allocate_kv_cache(dsv4, 8))
    assert registry.kernels == []
    with registry.activate():
        pass
    other = SparseMLAModel(dsv4)  # after the block: still nothing reaches it
    other.bind_kv_cache(allocate_kv_cache(dsv4, 8))
    assert registry.kernels == []


# ---------------------------------------------------------------------------------- full warm-up
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_full_compile_only_warmup_of_dsv4_like(backend, dsv4, tmp_path, monkeypatch):
    """The whole key space of the shipped DSv4-like model compiles for sm_90 with no GPU (how
    fast is benchmarks/warmup.py's business)."""
    config = dsv4.replace(**BACKEND_CONFIG[backend])
    registry, model, _ = build(config, backend, num_blocks=1024)
    # A fresh disk cache: keys not already in this process's in-memory cache really compile.
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "triton-cache"))
    with compile_only("cuda:90"):
        report = registry.warmup(config, progress=False, target="cuda:90")
    assert report.ok and report.target == "cuda:90"
    assert {k.kernel for k in report.kernels} == set(model.kernel_names)
    assert all(len(k.variants) == len(k.keys) > 0 for k in report.kernels)
    assert len({v.triton_key for v in report.variants}) == report.num_keys  # distinct Triton variants
