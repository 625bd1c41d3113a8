"""The reference runner's model: sparse-MLA layers that register their kernels where they are built.

No weights and no attention math: a :class:`SparseMLAModel` is the part of a serving model that
decides which metadata and index kernels will run, which is all warm-up needs. It follows
docs KERNELS.md "Registration" literally:

1. each :class:`SparseMLALayer`'s constructor registers its config-derived kernels (K3, K4, K5,
   K7) through :func:`zerojit.kernels.mla.registration.register_layer_kernels`;
2. :meth:`SparseMLAModel.bind_kv_cache` has every layer register its stride-derived kernels (K1,
   K2, K6) with the bound cache's real strides through
   :func:`~zerojit.kernels.mla.registration.register_kv_cache_kernels`.

Both register what :func:`zerojit.kernels.mla.launches.step_launches` lists, the description the
runner's step launches from (:class:`zerojit.runner.metadata.MetadataPlan`), so the model
registers every kernel and stride a step launches.

A 61-layer model so registers 61 times at each step; the active registry keeps one request per
distinct value. Outside :meth:`zerojit.registry.JitWarmupRegistry.activate` both steps register
nothing (and cost nothing).

Example::

    registry = JitWarmupRegistry()
    with registry.activate():
        model = SparseMLAModel(config)                      # K3/K4/K5/K7
        model.bind_kv_cache(allocate_kv_cache(config, 1024))  # K1/K2/K6, packed strides
    registry.warmup(config)
"""

from __future__ import annotations

from collections import Counter

from zerojit.kernels.mla.backends import AttentionBackend, default_backend, get_backend
from zerojit.kernels.mla.config import ModelConfig
from zerojit.kernels.mla.launches import step_launches
from zerojit.kernels.mla.registration import (
    LayerKind,
    layer_kind,
    register_kv_cache_kernels,
    register_layer_kernels,
)

from .kv_cache import PagedKVCache

__all__ = ["SparseMLALayer", "SparseMLAModel", "KVCacheMismatchError"]


class KVCacheMismatchError(ValueError):
    """A KV cache bound to a model it was not allocated for (names the differing fields)."""


class SparseMLALayer:
    """One sparse-MLA attention layer: its compression ratio and the kernels it launches.

    Constructing it registers the config-derived kernels of its kind (see
    :mod:`zerojit.kernels.mla.registration` for the table), with the active registry if any.

    Args:
        config: the model configuration.
        backend: the attention backend serving the model (already validated against ``config``).
        index: the layer's position in the model, ``0 <= index < config.num_layers``.

    Attributes:
        config, backend, index: as given.
        ratio: ``config.compress_ratios[index]``.
        kind: ``"window"`` (ratio 1), ``"indexer"`` (ratio 4) or ``"compressed"`` (other ratios).
        kv_cache: the bound :class:`~zerojit.runner.kv_cache.PagedKVCache`, or None.
    """

    def __init__(self, config: ModelConfig, backend: AttentionBackend, index: int) -> None:
        self.config = config
        self.backend = backend
        self.index = index
        self.ratio: int = config.compress_ratios[index]
        self.kind: LayerKind = layer_kind(self.ratio)
        self.kv_cache: PagedKVCache | None = None
        register_layer_kernels(config, backend, ratio=self.ratio)

    def bind_kv_cache(self, cache: PagedKVCache) -> None:
        """Attach ``cache`` and register the stride-derived kernels of this layer's kind."""
        self.kv_cache = cache
        register_kv_cache_kernels(self.config, self.backend, cache, ratio=self.ratio)

    def __repr__(self) -> str:
        return f"SparseMLALayer({self.index}, ratio={self.ratio}, kind={self.kind!r})"


class SparseMLAModel:
    """A model of ``config.num_layers`` :class:`SparseMLALayer`, one per ``config.compress_ratios``.

    Args:
        config: the model configuration.
        backend: an :class:`~zerojit.kernels.mla.backends.AttentionBackend` or its name; None
            picks :func:`~zerojit.kernels.mla.backends.default_backend` (the DCP backend when
            ``dcp_size > 1``).

    Raises:
        BackendError: an unknown backend name (listing the valid ones) or a backend that cannot
            serve ``config`` (e.g. ``flashmla_sparse`` with ``dcp_size = 2``); raised before any
            layer is built, so nothing is registered.
    """

    def __init__(self, config: ModelConfig, backend: AttentionBackend | str | None = None) -> None:
        self.config = config
        self.backend: AttentionBackend = default_backend(config) if backend is None else get_backend(backend)
        self.backend.validate(config)
        self.layers: tuple[SparseMLALayer, ...] = tuple(
            SparseMLALayer(config, self.backend, i) for i in range(config.num_layers)
        )
        self.kv_cache: PagedKVCache | None = None

    # ------------------------------------------------------------------ layer kinds
    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Each layer's kind, in layer order."""
        return tuple(layer.kind for layer in self.layers)

    @property
    def kind_counts(self) -> dict[LayerKind, int]:
        """How many layers of each kind, in first-seen order (e.g. ``{"window": 2, "indexer": 30,
        "compressed": 29}``)."""
        return dict(Counter(self.layer_kinds))

    def layers_of_kind(self, kind: LayerKind) -> tuple[SparseMLALayer, ...]:
        """The layers of ``kind``, in layer order."""
        return tuple(layer for layer in self.layers if layer.kind == kind)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """Registry names of the kernels a step of this model launches with its backend, in
        K-order: the kernels :func:`~zerojit.kernels.mla.launches.step_launches` lists, which are
        the kernels its layers register."""
        return step_launches(self.config, self.backend).names

    # ------------------------------------------------------------------ KV cache
    def bind_kv_cache(self, cache: PagedKVCache) -> None:
        """Bind ``cache`` to every layer; each registers its stride-derived kernels (K1, K2, K6).

        Binding another cache later registers its strides too (a registry never forgets a
        request), so bind the cache the model will serve with, once, before warm-up.

        Raises:
            KVCacheMismatchError: ``cache`` was allocated for another configuration; the message
                names the fields that differ.
        """
        if cache.config != self.config:
            mine, theirs = self.config.to_dict(), cache.config.to_dict()
            diff = [f"{k}: model {mine[k]!r}, cache {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]
            raise KVCacheMismatchError(
                "the KV cache was allocated for another configuration (" + "; ".join(diff)
                + "); allocate it with allocate_kv_cache(model.config, num_blocks)"
            )
        self.kv_cache = cache
        for layer in self.layers:
            layer.bind_kv_cache(cache)

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}={n}" for k, n in self.kind_counts.items())
        bound = "bound" if self.kv_cache is not None else "unbound"
        return f"SparseMLAModel({self.config.name}, {len(self.layers)} layers: {kinds}; backend {self.backend.name}; cache {bound})"


def register_model(config: ModelConfig, backend: AttentionBackend | str | None = None) -> "JitWarmupRegistry":
    """A fresh registry holding what ``config``'s model and a bound KV cache register.

    Builds a :class:`SparseMLAModel` and binds a small packed cache (block strides do not depend
    on the number of blocks) under the registry's ``activate()``; the caller then warms it up.
    For tools (bundle export, benchmarks, tests); the runner does these steps one by one.

    Raises:
        zerojit.kernels.mla.backends.BackendError: ``backend`` does not suit ``config``.
    """
    from zerojit.registry import JitWarmupRegistry

    from .kv_cache import allocate_kv_cache

    registry = JitWarmupRegistry()
    with registry.activate():
        model = SparseMLAModel(config, backend)
        model.bind_kv_cache(allocate_kv_cache(config, 4 * config.dcp_size))
    return registry
