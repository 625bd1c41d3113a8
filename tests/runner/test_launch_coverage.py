"""Every kernel and compile key a step can launch is registered, and every registered key is one a
step can launch: over every ratio pattern, ``index_kpool`` on and off, DCP 1-8, 0-3 speculative
tokens and each backend.

The model's registration and the runner's step read one description
(:func:`zerojit.kernels.mla.launches.step_launches`); this checks the two ends of it without
compiling anything, so it runs in seconds on a CPU: the *registered* keys are what the registry
would warm (``registry.warmup_keys``: the kernels' ``get_warmup_keys`` over the model's
requests); the *launched* keys are what the step's launches dispatch, from the real
:func:`~zerojit.runner.metadata.step_metadata` run with an implementation that computes each
launch's compile key (the kernel's ``key_for``, else its ``dispatch``) and launches nothing, on
dry steps (tensors allocated, no values: keys depend on shapes, dtypes, strides, alignment and
host ints only).
"""

from __future__ import annotations

import inspect
import itertools
import json
from collections import defaultdict

import pytest
import torch

from zerojit.kernels.mla.backends import BACKENDS, KERNEL_NAMES, AttentionBackend
from zerojit.kernels.mla.launches import CacheStrides, step_launches
from zerojit.registry import JitWarmupRegistry
from zerojit.runner.config import load_config
from zerojit.runner.kv_cache import allocate_kv_cache
from zerojit.runner.metadata import KERNELS, DecodeBuffers, MetadataOps, MetadataPlan, build_step_inputs, step_metadata
from zerojit.runner.model import SparseMLAModel
from zerojit.runner.scheduler import Batch
from zerojit.specialization import is_aligned

#: Layer ratio patterns: window-only, indexer-only, compressed-only and every mix.
RATIO_PATTERNS = {
    "all-1": (1, 1, 1),
    "all-4": (4, 4),
    "all-128": (128, 128),
    "1+4": (1, 4),
    "1+128": (1, 128),
    "4+128": (4, 128),
    "1+4+128": (1, 1, 4, 128, 4, 128),
}
KPOOLS = (None, 4, 16)  # off; the indexer's own ratio; a ratio no layer has
DCPS = ((1, 1), (2, 1), (2, 2), (4, 2), (8, 1), (8, 2))  # (dcp_size, dcp_interleave)
SPECULATIVE = (0, 1, 2, 3)

#: Backends beyond the shipped ones, with the other choices a backend can make (a plain K1
#: flavour and no K3; no K1 at all), to show the description holds for any backend value.
EXTRA_BACKENDS = (
    AttentionBackend("plain_no_k3", dcp=False, index_flavours=("plain",), uniform_decode=False,
                     swa_noncausal_drafts=True),
    AttentionBackend("no_k1", dcp=False, index_flavours=(), uniform_decode=True, swa_noncausal_drafts=False),
)


def backends_for(dcp_size: int) -> list[AttentionBackend]:
    shipped = [b for b in BACKENDS.values() if b.dcp == (dcp_size > 1)]
    return shipped + ([] if dcp_size > 1 else list(EXTRA_BACKENDS))


# ------------------------------------------------------------------------------ launched keys
def launch_key(kernel, inputs: dict):
    """The compile key ``kernel``'s launcher dispatches for ``inputs``, launching nothing: its
    ``key_for`` when it has one, else its ``dispatch`` called with the launch inputs of the same
    names (a parameter ``<input>_aligned`` is the 16-byte alignment of tensor ``<input>``), which
    is how those launchers call it."""
    if hasattr(kernel, "key_for"):
        return kernel.key_for(**inputs)
    args = {}
    for p in inspect.signature(kernel.dispatch).parameters:
        if p in inputs:
            args[p] = inputs[p]
        elif p.endswith("_aligned") and p.removesuffix("_aligned") in inputs:
            args[p] = is_aligned(inputs[p.removesuffix("_aligned")])
    return kernel.dispatch(**args)


class KeyRecorder:
    """A :class:`MetadataOps` whose every kernel records ``(kernel name, compile key)`` and
    returns placeholders (only K5's ``gather_lens`` is read by a later launch, K7's)."""

    def __init__(self) -> None:
        self.keys: dict[str, set] = defaultdict(set)
        launchers = {name: getattr(KERNELS, name) for name in KERNEL_NAMES.values()}

        def record(name, returns):
            def call(**inputs):
                self.keys[name].add(launch_key(launchers[name], inputs))
                return returns(inputs)
            return call

        none2 = lambda _: (None, None)  # noqa: E731
        self.ops = MetadataOps(
            name="keys",
            convert_req_index_to_global_index=record(KERNEL_NAMES["K1"], none2),
            compressed_slot_mapping=record(KERNEL_NAMES["K2"], lambda _: None),
            prepare_uniform_decode=record(KERNEL_NAMES["K3"], none2),
            build_prefill_chunk_metadata=record(KERNEL_NAMES["K4"], lambda _: (None, None, None)),
            compute_prefill_metadata=record(
                KERNEL_NAMES["K5"], lambda kw: (torch.empty(kw["num_prefills"], dtype=torch.int32), None)),
            compute_swa_indices_and_lens=record(KERNEL_NAMES["K6"], none2),
            combine_topk_swa_indices=record(KERNEL_NAMES["K7"], none2),
        )


def batches(config) -> list[Batch]:
    """Steps of every shape that changes a key: uniform and mixed decodes, prefills after 0-3
    decodes (the chunk's ``seq_lens`` view is aligned only after a multiple of 4), 1 to
    ``max_num_seqs`` prefills in powers of two (K5's tile), and a prefill longer than the
    prefill workspace (several chunks)."""
    lq = config.query_len
    out = [Batch(0, (0, 1, 2), (lq,) * 3, (lq + 10, 300, 5000), 3)]
    if lq > 1:
        out.append(Batch(1, (0, 1), (1, lq), (40, 41), 2))
    for nd in range(4):
        out.append(Batch(2 + nd, tuple(range(nd + 2)), (lq,) * nd + (40, 7), (lq + 9,) * nd + (40, 300), nd))
    n = 1
    while n <= config.max_num_seqs:
        out.append(Batch(10 + n, tuple(range(n)), (1,) * n, (3,) * n, 0))
        n *= 2
    out.append(Batch(1000, (0, 1, 2), (lq, 30000, 9000), (lq + 5, 30000, 40000), 1))
    return out


def registered_and_launched(config, backend):
    """``(registered, launched)``: ``{kernel name: set of compile keys}`` of a model built and
    bound under a registry, and of the steps of :func:`batches` on its plan."""
    registry = JitWarmupRegistry()
    with registry.activate():
        model = SparseMLAModel(config, backend)
        cache = allocate_kv_cache(config, 8 * config.dcp_size)
        model.bind_kv_cache(cache)
    plan_keys, failures = registry.warmup_keys(config)
    assert failures == []
    registered = {kernel.name: set(keys) for kernel, keys in plan_keys.items() if keys}
    plan = MetadataPlan.for_cache(config, model.backend, cache)
    recorder = KeyRecorder()
    buffers = DecodeBuffers.allocate(plan)
    for batch in batches(config):
        step_metadata(build_step_inputs(batch, plan, fill=False), plan, recorder.ops, buffers)
    return registered, dict(recorder.keys)


def configs():
    base = load_config("dsv4-like", max_num_seqs=16)
    for (pattern, ratios), kpool, (S, I), spec in itertools.product(RATIO_PATTERNS.items(), KPOOLS, DCPS, SPECULATIVE):
        config = base.replace(name=f"{pattern}-kpool{kpool}-dcp{S}x{I}-spec{spec}", compress_ratios=list(ratios),
                              index_kpool=kpool, dcp_size=S, dcp_rank=S - 1, dcp_interleave=I,
                              num_speculative_tokens=spec)
        for backend in backends_for(S):
            yield config, backend


# ------------------------------------------------------------------------------ the check
@pytest.mark.parametrize("pattern", list(RATIO_PATTERNS))
def test_every_launched_key_is_registered_and_every_registered_key_launched(pattern):
    checked = 0
    for config, backend in configs():
        if not config.name.startswith(f"{pattern}-"):
            continue
        registered, launched = registered_and_launched(config, backend)
        where = f"{config.name}, backend {backend.name}"
        for kernel, keys in launched.items():
            missing = keys - registered.get(kernel, set())
            assert not missing, f"{where}: {kernel} launches keys no layer registered: {sorted(map(str, missing))}"
        for kernel, keys in registered.items():
            dead = keys - launched.get(kernel, set())
            assert not dead, f"{where}: {kernel} registered keys no step launches: {sorted(map(str, dead))}"
        assert set(launched) == set(step_launches(config, backend).names), where
        checked += 1
    assert checked == len(KPOOLS) * len(SPECULATIVE) * sum(len(backends_for(S)) for S, _ in DCPS)


def test_issue_16_index_kpool_on_window_only_layers_registers_k2():
    """``index_kpool`` set and only ratio-1 layers: the step launches K2 for the pooled
    selector's cache, so every (window) layer registers it, with that cache's stride."""
    config = load_config("dsv4-like", compress_ratios=[1] * 61)
    registered, launched = registered_and_launched(config, BACKENDS["flashmla_sparse"])
    k2 = KERNEL_NAMES["K2"]
    assert launched[k2] == registered[k2]
    (key,) = registered[k2]
    cache = allocate_kv_cache(config, 8)
    assert (key.ratio, key.cbs, key.block_stride_rows) == (4, 64, dict(cache.compressed_block_strides)[4]) == (4, 64, 61 * 64)
    launches = step_launches(config, BACKENDS["flashmla_sparse"], CacheStrides.of(cache))
    assert launches["K2"].ratios == (1,) and launches["K2"].moment == "kv_cache"
    assert launches.numbers == ("K2", "K3", "K5", "K6", "K7")  # no indexer layer: no K1, no K4


def test_the_shipped_configs_with_every_dcp_and_speculative_count():
    for name, (S, I), spec in itertools.product(("deepseek-v3.2", "dsv4-like"), DCPS, SPECULATIVE):
        config = load_config(name, dcp_size=S, dcp_rank=0, dcp_interleave=I, num_speculative_tokens=spec,
                             max_num_seqs=16)
        for backend in backends_for(S):
            registered, launched = registered_and_launched(config, backend)
            assert registered == launched, f"{name} dcp {S}x{I} spec {spec} {backend.name}"


# ------------------------------------------------------------------------------ the description
def test_a_description_before_the_cache_is_bound_lists_stride_kernels_without_facts():
    config = load_config("dsv4-like")
    launches = step_launches(config, BACKENDS["flashmla_sparse"])
    assert launches.numbers == ("K1", "K2", "K3", "K4", "K5", "K6", "K7")
    assert launches["K1"].request is None and launches["K3"].request == (("aligned", (True,)),)
    with pytest.raises(LookupError, match="K1 convert_req_index_to_global_index: its layout facts are known once"):
        launches["K1"].fact("block_stride_rows")
    with pytest.raises(LookupError, match="strides=CacheStrides.of"):
        launches.register("kv_cache", ratio=4)
    with pytest.raises(KeyError, match="never launches K9; it launches K1, K2, K3"):
        launches["K9"]
    with pytest.raises(ValueError, match="ratio=8 is no layer's ratio; config 'dsv4-like' has layers of ratio 1, 4, 128"):
        launches.register("layer", ratio=8)
    bound = step_launches(config, BACKENDS["flashmla_sparse"], CacheStrides(7680, ((4, 3840), (128, 58)), 15616))
    assert bound["K1"].fact("block_stride_rows") == 7680 and bound.index_flavours == ("count_valid", "workspace_count_valid")
    with pytest.raises(LookupError, match="no layout fact 'nope' \\(it has block_stride_rows, flavours\\)"):
        bound["K1"].fact("nope")
    assert json.dumps(bound["K6"].request) == '[["block_stride_rows", 15616], ["causal", [true, false]]]'
