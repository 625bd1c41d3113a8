"""Where each sparse-MLA kernel is registered for warm-up: one function per kernel family.

docs DESIGN.md "Lessons": *one registration point per kernel family per backend, so a kernel
cannot silently drop out*. Every kernel of KERNELS.md is registered by exactly one function
below; the backend (:class:`~zerojit.kernels.mla.backends.AttentionBackend`) passed in decides
which of its kernels and variants are reachable, so the rules for a backend live in one value
and the call sites in one module. Each function calls ``kernel.register_warmup(**request)``,
which reaches the registry activated with
:meth:`zerojit.registry.JitWarmupRegistry.activate` and is a no-op outside it. The registry
passes the :class:`~zerojit.kernels.mla.config.ModelConfig` to ``get_warmup_keys`` at warm-up,
so a request carries only what the config does not say: backend choices and cache strides.

Who calls what, and when (KERNELS.md "Registration"):

=================================  ======================  =====================  =============
function                           kernels                 moment                 layers
=================================  ======================  =====================  =============
:func:`register_indexer_kernels`   K4                      layer construction     indexer (c=4)
:func:`register_metadata_kernels`  K3 (speculative), K5,   layer construction     every layer
                                   K7
:func:`register_kv_cache_kernels`  K1 (indexer layers),    KV-cache binding       every layer
                                   K2 (layers of c > 1),
                                   K6
=================================  ======================  =====================  =============

Config-derived keys (K3, K4, K5, K7) are known when a layer is built; stride-derived keys (K1,
K2, K6) only once the cache exists, because a packed cache's ``block_stride_rows`` is not the
block size (KERNELS.md "Strides"; DESIGN.md "Strides are layout facts"). A 61-layer model calls
these 61 times with equal requests; the registry keeps one of each (requests compared by value).
:func:`register_layer_kernels` is what a layer constructor calls (the two construction-time
families), :func:`register_kv_cache_kernels` what its ``bind_kv_cache`` calls.

Layer kinds (by the layer's compression ratio c, KERNELS.md "Model configuration"): ``window``
(c = 1, sliding window only), ``indexer`` (c = :data:`~zerojit.kernels.mla.config.INDEXER_RATIO`,
compressed with a top-k indexer), ``compressed`` (any other c > 1, e.g. 128: no indexer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .backends import AttentionBackend
from .combine import combine_topk_swa_indices
from .config import INDEXER_RATIO, ModelConfig
from .decode import prepare_uniform_decode
from .index import convert_req_index_to_global_index
from .prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from .slot_mapping import compressed_slot_mapping
from .swa import compute_swa_indices_and_lens

if TYPE_CHECKING:  # the runner's cache; only its stride attributes are read
    from zerojit.runner.kv_cache import PagedKVCache

__all__ = [
    "LayerKind",
    "layer_kind",
    "register_indexer_kernels",
    "register_metadata_kernels",
    "register_kv_cache_kernels",
    "register_layer_kernels",
]

LayerKind = Literal["window", "indexer", "compressed"]


def layer_kind(ratio: int) -> LayerKind:
    """The kind of a layer of compression ratio ``ratio``: ``window`` (1), ``indexer``
    (:data:`~zerojit.kernels.mla.config.INDEXER_RATIO`) or ``compressed`` (any other ratio > 1).

    Raises:
        ValueError: ``ratio < 1``.
    """
    if not isinstance(ratio, int) or ratio < 1:
        raise ValueError(f"layer_kind: ratio={ratio!r} must be an int >= 1")
    if ratio == 1:
        return "window"
    return "indexer" if ratio == INDEXER_RATIO else "compressed"


def register_indexer_kernels(config: ModelConfig, backend: AttentionBackend, *, ratio: int) -> None:
    """Layer construction, indexer family: K4 ``build_prefill_chunk_metadata``.

    Called by every layer; registers only for an indexer layer (ratio 4), with the alignment
    classes of ``seq_lens`` the backend passes (``backend.prefill_seq_lens_aligned``). K4's key
    space is each indexer ratio of ``config`` x those classes. K1, the indexer's other kernel,
    needs the cache's stride and is registered by :func:`register_kv_cache_kernels`.
    """
    if layer_kind(ratio) != "indexer":
        return
    build_prefill_chunk_metadata.register_warmup(seq_lens_aligned=tuple(backend.prefill_seq_lens_aligned))


def register_metadata_kernels(config: ModelConfig, backend: AttentionBackend) -> None:
    """Layer construction, attention-metadata family (every layer kind): K3, K5, K7.

    - K3 ``prepare_uniform_decode``: only when the backend flattens speculative decode batches
      and ``config.num_speculative_tokens > 0``. Alignment: the runner's block table is a fresh
      contiguous ``[R, cdiv(max_model_len, block_size)]`` int32 tensor and K3 reads a prefix
      of its rows, so its rows are 16-byte aligned iff the width is a multiple of 4.
    - K5 ``compute_prefill_metadata``: config-derived (powers of two up to ``max_num_seqs``).
    - K7 ``combine_topk_swa_indices``: config-derived (each layer's ``(c, TOP_K)``).
    """
    if backend.launches_uniform_decode(config):
        prepare_uniform_decode.register_warmup(aligned=(config.max_blocks_per_req % 4 == 0,))
    compute_prefill_metadata.register_warmup()
    combine_topk_swa_indices.register_warmup()


def register_kv_cache_kernels(
    config: ModelConfig, backend: AttentionBackend, cache: "PagedKVCache", *, ratio: int
) -> None:
    """KV-cache binding, stride-derived family: K1, K2, K6 with the cache's real strides.

    - K1 ``convert_req_index_to_global_index`` (indexer layers): the main cache's
      ``block_stride_rows`` and the backend's flavours ``backend.index_flavours``.
    - K2 ``compressed_slot_mapping`` (layers of ratio > 1): every compressed cache's stride,
      ``cache.compressed_block_strides``.
    - K6 ``compute_swa_indices_and_lens`` (every layer): the sliding-window cache's stride
      ``cache.swa_block_stride_rows`` and the backend's causal variants for ``config``.

    Args:
        config: the model configuration the cache was allocated for.
        backend: the active attention backend.
        cache: the bound cache; only its stride properties are read.
        ratio: the registering layer's compression ratio.
    """
    kind = layer_kind(ratio)
    if kind == "indexer" and backend.index_flavours:
        convert_req_index_to_global_index.register_warmup(
            block_stride_rows=cache.block_stride_rows, flavours=tuple(backend.index_flavours)
        )
    if kind != "window":
        compressed_slot_mapping.register_warmup(compressed_block_strides=cache.compressed_block_strides)
    compute_swa_indices_and_lens.register_warmup(
        block_stride_rows=cache.swa_block_stride_rows, causal=backend.swa_causal(config)
    )


def register_layer_kernels(config: ModelConfig, backend: AttentionBackend, *, ratio: int) -> None:
    """Everything a layer of ratio ``ratio`` registers when it is constructed (config-derived):
    :func:`register_indexer_kernels` then :func:`register_metadata_kernels`."""
    register_indexer_kernels(config, backend, ratio=ratio)
    register_metadata_kernels(config, backend)
