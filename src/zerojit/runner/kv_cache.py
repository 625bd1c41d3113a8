"""A paged KV cache packed across layers, so its block stride is a real layout fact.

docs KERNELS.md "Strides": a KV cache may be *packed*, several layers' blocks interleaved, so the
number of cache rows between two consecutive block ids (``block_stride_rows``) differs from the
block size; every slot is ``block_id * block_stride_rows + offset`` and the stride is read from
the allocated cache. This module allocates such a cache and reads the strides back from the
tensors (``tensor.stride(0) // tensor.stride(2)``), never assuming them; the stride-dependent
kernels (K1, K2, K6) are then registered with those values when the cache is bound
(:meth:`zerojit.runner.model.SparseMLAModel.bind_kv_cache`).

Layout (``P`` = layers per pack, ``E`` = ``entry_bytes``; every tensor uint8, one byte per
element: the metadata kernels only compute slots, so only the layout matters and the memory
stays small)::

    main                [num_blocks, P,   block_size, E]   full-resolution KV of the indexer
                                                             layers (the cache K1's slots address)
    compressed[c]       [num_blocks, P_c, block_size//c, E] layers of ratio c (and the
                                                             indexer layers for index_kpool)
    swa                 [num_blocks, P,   block_size, E]   every layer's sliding window

A layer's KV lives at ``pack[:, i]`` of its pack: block ``b`` of that layer starts
``b * P * rows_per_block`` rows after the layer's first row, hence
``block_stride_rows = P * rows_per_block`` (``rows_per_block`` = block_size, or
``cbs = block_size // c`` for a compressed cache). With ``P = 1`` the cache is dense and
``block_stride_rows == block_size``. A cache used by ``n`` layers is split into
``cdiv(n, P)`` packs of ``P`` layer slots each (the last one possibly part-empty), so all packs of
a cache share one stride.

DCP (KERNELS.md "DCP"): under ``dcp_size > 1`` every rank allocates this same layout; its main
and compressed caches hold its interleaved share of each sequence's entries, while the
sliding-window cache is *not* split by DCP (every rank holds the whole window). The layout, and
so every stride, is the same on every rank.

Slots are int32 in the kernels (KERNELS.md "Conventions": "a configuration whose slots cannot
fit int32 is rejected when it is built"): :func:`allocate_kv_cache` checks the largest slot of
every cache before allocating anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import torch

from zerojit.kernels.mla.config import INDEXER_RATIO, INT32_MAX, ConfigError, ModelConfig
from zerojit.kernels.mla.shapes import cdiv

__all__ = ["CacheLayout", "PagedKVCache", "allocate_kv_cache", "plan_kv_cache"]

#: Name of the full-resolution cache and the sliding-window cache in :attr:`PagedKVCache.layouts`.
MAIN = "main"
SWA = "swa"


@dataclass(frozen=True)
class CacheLayout:
    """The layout of one cache (main, one compressed ratio, or sliding window), before allocation.

    Attributes:
        name: ``"main"``, ``"swa"`` or ``"compressed:<c>"``.
        layers: the model layers that use this cache, in order.
        layers_per_pack: layer slots per pack tensor ``P`` (``<= len(layers)``).
        rows_per_block: cache rows (entries) per block: ``block_size`` or ``block_size // c``.
        num_blocks: blocks per layer (block ids ``0 .. num_blocks - 1``).
        entry_bytes: bytes per row ``E``.
    """

    name: str
    layers: tuple[int, ...]
    layers_per_pack: int
    rows_per_block: int
    num_blocks: int
    entry_bytes: int

    @property
    def num_packs(self) -> int:
        """Pack tensors of this cache: ``cdiv(len(layers), layers_per_pack)``."""
        return cdiv(len(self.layers), self.layers_per_pack)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """Shape of each pack tensor: ``[num_blocks, P, rows_per_block, entry_bytes]``."""
        return (self.num_blocks, self.layers_per_pack, self.rows_per_block, self.entry_bytes)

    @property
    def expected_block_stride_rows(self) -> int:
        """The stride this layout will have once allocated: ``P * rows_per_block`` rows."""
        return self.layers_per_pack * self.rows_per_block

    @property
    def max_slot(self) -> int:
        """The largest slot a kernel can produce: ``(num_blocks - 1) * stride + rows_per_block - 1``."""
        return (self.num_blocks - 1) * self.expected_block_stride_rows + self.rows_per_block - 1

    @property
    def nbytes(self) -> int:
        """Bytes of all pack tensors of this cache."""
        n, p, r, e = self.shape
        return self.num_packs * n * p * r * e

    def place(self, layer: int) -> tuple[int, int]:
        """``(pack, slot in pack)`` of model layer ``layer``.

        Raises:
            KeyError: the layer does not use this cache.
        """
        try:
            i = self.layers.index(layer)
        except ValueError:
            raise KeyError(f"layer {layer} does not use the {self.name} cache (its layers: {list(self.layers)})") from None
        return divmod(i, self.layers_per_pack)


def _read_stride(t: torch.Tensor) -> int:
    """Rows between consecutive block ids of a ``[num_blocks, P, rows, E]`` pack, read from strides."""
    return t.stride(0) // t.stride(2)


@dataclass(frozen=True, eq=False)
class PagedKVCache:
    """An allocated paged KV cache, packed across layers (see the module docstring for the layout).

    Build it with :func:`allocate_kv_cache`. Compared by identity (it holds tensors); its
    mappings are read-only (the tensors' contents are not).

    Attributes:
        config: the model configuration it was allocated for.
        layouts: ``"main"``, ``"swa"`` and ``"compressed:<c>"`` -> :class:`CacheLayout`.
        tensors: the same keys -> their pack tensors (uint8 ``[num_blocks, P, rows, E]`` each).
    """

    config: ModelConfig
    layouts: Mapping[str, CacheLayout]
    tensors: Mapping[str, tuple[torch.Tensor, ...]] = field(repr=False)

    # ------------------------------------------------------------------ strides (read, not assumed)
    def stride_of(self, cache: str) -> int:
        """Rows between consecutive block ids of ``cache``, read from its first pack's strides.

        Raises:
            KeyError: no such cache (the message lists the caches).
        """
        if cache not in self.tensors:
            raise KeyError(f"no cache {cache!r}; caches are {', '.join(self.tensors)}")
        return _read_stride(self.tensors[cache][0])

    @property
    def block_stride_rows(self) -> int:
        """Rows between consecutive block ids of the main (full-resolution) cache; K1's stride."""
        return self.stride_of(MAIN)

    @property
    def swa_block_stride_rows(self) -> int:
        """Rows between consecutive block ids of the sliding-window cache; K6's stride."""
        return self.stride_of(SWA)

    @property
    def compressed_block_strides(self) -> tuple[tuple[int, int], ...]:
        """``((ratio, block_stride_rows), ...)`` of every compressed cache, by ascending ratio; K2's."""
        return tuple((c, self.stride_of(f"compressed:{c}")) for c in self.config.compressed_ratios)

    # ------------------------------------------------------------------ sizes
    @property
    def num_blocks(self) -> int:
        """Blocks per layer (block ids ``0 .. num_blocks - 1``; block 0 is the allocator's null block)."""
        return self.tensors[MAIN][0].shape[0]

    @property
    def block_size(self) -> int:
        """Tokens per block (``config.block_size``)."""
        return self.config.block_size

    @property
    def layers_per_pack(self) -> int:
        """Layer slots per pack of the main cache ``P`` (1: dense)."""
        return self.tensors[MAIN][0].shape[1]

    @property
    def max_slot(self) -> int:
        """The largest slot any kernel can produce in any of the caches (``<= 2**31 - 1``)."""
        return max(
            (self.num_blocks - 1) * self.stride_of(name) + t[0].shape[2] - 1 for name, t in self.tensors.items()
        )

    @property
    def nbytes(self) -> int:
        """Bytes of every tensor of the cache."""
        return sum(t.numel() * t.element_size() for ts in self.tensors.values() for t in ts)

    # ------------------------------------------------------------------ per-layer access
    def layer_blocks(self, layer: int, cache: str = MAIN) -> torch.Tensor:
        """Layer ``layer``'s blocks of ``cache``: a ``[num_blocks, rows_per_block, E]`` view.

        Its ``stride(0) // stride(1)`` is the cache's ``block_stride_rows`` (not
        ``rows_per_block`` unless the cache is dense).

        Raises:
            KeyError: no such cache, or a layer that does not use it.
        """
        if cache not in self.layouts:
            raise KeyError(f"no cache {cache!r}; caches are {', '.join(self.layouts)}")
        pack, i = self.layouts[cache].place(layer)
        return self.tensors[cache][pack][:, i]

    def layer_rows(self, layer: int, cache: str = MAIN) -> torch.Tensor:
        """Layer ``layer``'s rows of ``cache`` addressed by slot: ``rows[slot]`` for
        ``slot = block_id * block_stride_rows + offset``, a ``[max_slot_of_cache + 1, E]`` view
        starting at the layer's first row (rows of other layers in between are reachable too,
        as they are to a kernel given that slot)."""
        blocks = self.layer_blocks(layer, cache)
        n, rows, e = blocks.shape
        stride = blocks.stride(0) // blocks.stride(1)
        return blocks.as_strided(((n - 1) * stride + rows, e), (blocks.stride(1), blocks.stride(2)))

    def __repr__(self) -> str:
        comp = ", ".join(f"{c}:{s}" for c, s in self.compressed_block_strides)
        return (
            f"PagedKVCache({self.config.name}, num_blocks={self.num_blocks}, block_size={self.block_size}, "
            f"layers_per_pack={self.layers_per_pack}, block_stride_rows={self.block_stride_rows}, "
            f"compressed_block_strides={{{comp}}}, swa_block_stride_rows={self.swa_block_stride_rows}, "
            f"max_slot={self.max_slot}, {self.nbytes / 2**20:.1f} MiB)"
        )


def plan_kv_cache(
    config: ModelConfig, num_blocks: int, *, layers_per_pack: int | None = None, entry_bytes: int = 1
) -> dict[str, CacheLayout]:
    """The layouts :func:`allocate_kv_cache` would allocate, checked, without allocating.

    Args:
        config: the model configuration (block_size, compress_ratios, index_kpool).
        num_blocks: blocks per layer, ``>= 1``.
        layers_per_pack: layer slots per pack ``P >= 1``; None packs every layer of a cache into
            one tensor. A cache used by fewer layers packs only those (``min(P, its layers)``).
        entry_bytes: bytes per row, ``>= 1``.

    Returns:
        ``"main"``, ``"compressed:<c>"`` for each ``c`` in ``config.compressed_ratios``, ``"swa"``.

    Raises:
        ConfigError: every bad argument at once (naming ``num_blocks``, ``layers_per_pack`` or
            ``entry_bytes``), including a cache whose largest slot does not fit int32.
    """
    problems = []
    for fname, v in (("num_blocks", num_blocks), ("layers_per_pack", layers_per_pack), ("entry_bytes", entry_bytes)):
        if v is None and fname == "layers_per_pack":
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"{fname}={v!r}: must be an int >= 1")
    if problems:
        raise ConfigError(problems, what="PagedKVCache")

    all_layers = tuple(range(config.num_layers))
    layouts: dict[str, CacheLayout] = {}

    def layout(name: str, layers: tuple[int, ...], rows: int) -> CacheLayout:
        p = len(layers) if layers_per_pack is None else min(layers_per_pack, len(layers))
        return CacheLayout(name, layers, max(p, 1), rows, num_blocks, entry_bytes)

    # Full-resolution KV: the indexer layers' (K1 addresses it); every layer's when none has an
    # indexer, so the cache (and its stride) always exists.
    indexer_layers = tuple(i for i, r in enumerate(config.compress_ratios) if r == INDEXER_RATIO)
    layouts[MAIN] = layout(MAIN, indexer_layers or all_layers, config.block_size)
    for c in config.compressed_ratios:
        layers = tuple(
            i for i, r in enumerate(config.compress_ratios)
            if r == c or (c == config.index_kpool and r == INDEXER_RATIO)
        )
        # A ratio no layer uses (index_kpool without indexer layers) still gets a cache, over
        # every layer, so that K2's key for it has a real stride.
        layouts[f"compressed:{c}"] = layout(f"compressed:{c}", layers or all_layers, config.block_size // c)
    layouts[SWA] = layout(SWA, all_layers, config.block_size)

    for lay in layouts.values():
        if lay.max_slot > INT32_MAX:
            per_block = lay.expected_block_stride_rows
            fit = (INT32_MAX - lay.rows_per_block + 1) // per_block + 1
            problems.append(
                f"num_blocks={num_blocks}: the {lay.name} cache's largest slot is "
                f"({num_blocks} - 1) * block_stride_rows {per_block} + {lay.rows_per_block} - 1 = {lay.max_slot}, "
                f"which does not fit int32 (<= {INT32_MAX}); use num_blocks <= {fit} or a smaller "
                f"layers_per_pack (now {lay.layers_per_pack})"
            )
    if problems:
        raise ConfigError(problems, what="PagedKVCache")
    return layouts


def allocate_kv_cache(
    config: ModelConfig,
    num_blocks: int,
    *,
    device: str | torch.device = "cpu",
    layers_per_pack: int | None = None,
    entry_bytes: int = 1,
) -> PagedKVCache:
    """Allocate a paged KV cache for ``config``, packed across layers (layout: module docstring).

    Args:
        config: the model configuration.
        num_blocks: blocks per layer, ``>= 1`` (the block allocator's ``num_blocks``).
        device: where the tensors live.
        layers_per_pack: layer slots per pack ``P``; None (default) packs all layers of a cache
            into one tensor; 1 gives a dense cache (``block_stride_rows == block_size``).
        entry_bytes: bytes per cache row (uint8 elements); only the layout matters to the
            metadata kernels, so it defaults to 1.

    Returns:
        The :class:`PagedKVCache`; its strides are read from the tensors.

    Raises:
        ConfigError: a bad argument, or a cache whose largest slot cannot fit int32 (KERNELS.md
            "Conventions"), naming the field; checked before any memory is allocated.
    """
    layouts = plan_kv_cache(config, num_blocks, layers_per_pack=layers_per_pack, entry_bytes=entry_bytes)
    tensors = {
        name: tuple(torch.zeros(lay.shape, dtype=torch.uint8, device=device) for _ in range(lay.num_packs))
        for name, lay in layouts.items()
    }
    cache = PagedKVCache(config=config, layouts=MappingProxyType(layouts), tensors=MappingProxyType(tensors))
    for name, lay in layouts.items():  # the layout we meant is the layout we got
        assert cache.stride_of(name) == lay.expected_block_stride_rows, (name, cache.stride_of(name))
    return cache
