"""Where the sparse-MLA kernels are registered for warm-up: a layer's two registration points.

docs DESIGN.md "Lessons": *one registration point per kernel family per backend, so a kernel
cannot silently drop out*, and *a registration point and a launch site that are two
descriptions drift apart: derive both from one description*. Both functions below register
what :func:`zerojit.kernels.mla.launches.step_launches` lists, the same description the runner's
step launches from, so what a step launches is registered by construction (the table of which
layers register which kernel is in :mod:`zerojit.kernels.mla.launches`).

Each registration calls ``kernel.register_warmup(**request)``, which reaches the registry
activated with :meth:`zerojit.registry.JitWarmupRegistry.activate` and is a no-op outside it.
The registry passes the :class:`~zerojit.kernels.mla.config.ModelConfig` to ``get_warmup_keys``
at warm-up, so a request carries only what the config does not say: backend choices, layout
alignment classes and cache strides.

Config-derived keys (K3, K4, K5, K7) are known when a layer is built (:func:`register_layer_kernels`);
stride-derived keys (K1, K2, K6) only once the cache exists (:func:`register_kv_cache_kernels`),
because a packed cache's ``block_stride_rows`` is not the block size (KERNELS.md "Strides";
DESIGN.md "Strides are layout facts"). A 61-layer model calls these 61 times with equal
requests; the registry keeps one of each (requests compared by value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends import AttentionBackend
from .config import ModelConfig
from .launches import CacheStrides, LayerKind, layer_kind, step_launches

if TYPE_CHECKING:  # the runner's cache; only its stride attributes are read
    from zerojit.runner.kv_cache import PagedKVCache

__all__ = ["LayerKind", "layer_kind", "register_layer_kernels", "register_kv_cache_kernels"]


def register_layer_kernels(config: ModelConfig, backend: AttentionBackend, *, ratio: int) -> None:
    """Layer construction: the config-derived kernels (K3, K4, K5, K7) a layer of ``ratio``
    registers, with the requests :func:`~zerojit.kernels.mla.launches.step_launches` lists.

    Raises:
        ValueError: ``ratio`` is no layer's ratio in ``config``.
    """
    step_launches(config, backend).register("layer", ratio=ratio)


def register_kv_cache_kernels(
    config: ModelConfig, backend: AttentionBackend, cache: "PagedKVCache", *, ratio: int
) -> None:
    """KV-cache binding: the stride-derived kernels (K1, K2, K6) a layer of ``ratio`` registers,
    with the strides read from ``cache`` (:meth:`~zerojit.kernels.mla.launches.CacheStrides.of`).

    Args:
        config: the model configuration the cache was allocated for.
        backend: the active attention backend.
        cache: the bound cache; only its stride properties are read.
        ratio: the registering layer's compression ratio.

    Raises:
        ValueError: ``ratio`` is no layer's ratio in ``config``.
    """
    step_launches(config, backend, CacheStrides.of(cache)).register("kv_cache", ratio=ratio)
