"""What one scheduler step launches: the one description that registration and the step both read.

docs DESIGN.md "Lessons": *a registration point and a launch site that are two descriptions
drift apart (a kernel the step launches that no layer registered): derive both from one
description.* :func:`step_launches` is that description. (KERNELS.md "Registration" still
speaks of one registration function per kernel family and backend: those functions now only
register what this description lists.) For a configuration, an attention
backend (:class:`~zerojit.kernels.mla.backends.AttentionBackend`: its K1 flavours, K3, K6
variants) and, once the KV cache is bound, the cache's strides, it lists every kernel a step can
launch (:class:`KernelLaunch`), each with

- ``request``: the layout facts its launches carry, exactly the keyword arguments its
  ``register_warmup`` receives (K2's compressed caches and their strides, K1's flavours and
  main-cache stride, K6's variants and window-cache stride, K3's and K4's alignment classes);
- ``moment``: when it is registered: ``"layer"`` (config-derived keys, when a layer is built)
  or ``"kv_cache"`` (stride-derived keys, when the cache is bound; KERNELS.md "Strides");
- ``ratios``: the compression ratios of the layers that register it.

:mod:`zerojit.kernels.mla.registration` registers each entry's ``request``; the runner's step
(:func:`zerojit.runner.metadata.step_metadata`) launches only the kernels listed here, with the
facts read from the same ``request`` (K2 once per ``compressed_block_strides`` pair, K1 in the
listed flavours with the listed stride, K6 non-causal only when listed, ...). So a kernel or a
stride the step launches cannot be missing from registration: there are no two lists to keep in
step (``tests/runner/test_launch_coverage.py`` compares both ends by compile key, over the
configuration space).

Which kernels, and which layers register them (KERNELS.md; layer kinds by the layer's ratio c):

====  ==========================================  ===========  =========================  =============
K     kernel                                      moment       listed when                registered by
====  ==========================================  ===========  =========================  =============
K1    ``convert_req_index_to_global_index``       kv_cache     an indexer layer (c = 4)   indexer layers
                                                               and the backend has K1
                                                               flavours
K2    ``compressed_slot_mapping``                 kv_cache     a compressed cache: a      layers of c > 1
                                                               layer of c > 1 or
                                                               ``index_kpool``
K3    ``prepare_uniform_decode``                  layer        the backend flattens       every layer
                                                               speculative decodes and
                                                               ``num_speculative_tokens
                                                               > 0``
K4    ``build_prefill_chunk_metadata``            layer        an indexer layer           indexer layers
K5    ``compute_prefill_metadata``                layer        always                     every layer
K6    ``compute_swa_indices_and_lens``            kv_cache     always                     every layer
K7    ``combine_topk_swa_indices``                layer        always                     every layer
====  ==========================================  ===========  =========================  =============

A kernel listed for a reason no layer has (K2 for ``index_kpool`` in a model of window-only
layers: the pooled selector's cache exists, see :func:`zerojit.runner.kv_cache.plan_kv_cache`)
is registered by every layer, so every listed kernel has a registering layer by construction.

Example::

    >>> from zerojit.kernels.mla.backends import get_backend
    >>> from zerojit.kernels.mla.config import ModelConfig
    >>> cfg = ModelConfig(block_size=256, compress_ratios=(1, 1), index_kpool=4)
    >>> plan = step_launches(cfg, get_backend("flashmla_sparse"), CacheStrides(256, ((4, 128),), 512))
    >>> plan.numbers, plan["K2"].request, plan["K2"].ratios
    (('K2', 'K5', 'K6', 'K7'), (('compressed_block_strides', ((4, 128),)),), (1,))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .backends import KERNEL_NAMES, AttentionBackend
from .combine import combine_topk_swa_indices
from .config import INDEXER_RATIO, ModelConfig
from .decode import prepare_uniform_decode
from .index import FLAVOUR_INPUTS, convert_req_index_to_global_index
from .prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from .shapes import cdiv
from .slot_mapping import compressed_slot_mapping
from .swa import compute_swa_indices_and_lens

__all__ = [
    "LayerKind",
    "Moment",
    "layer_kind",
    "block_table_width",
    "CacheStrides",
    "KernelLaunch",
    "StepLaunches",
    "step_launches",
]

LayerKind = Literal["window", "indexer", "compressed"]

#: When a kernel is registered: when a layer is built (config-derived keys) or when the KV cache
#: is bound (stride-derived keys).
Moment = Literal["layer", "kv_cache"]

#: The launcher of each kernel, by its KERNELS.md number.
_LAUNCHERS: dict[str, Any] = {
    "K1": convert_req_index_to_global_index,
    "K2": compressed_slot_mapping,
    "K3": prepare_uniform_decode,
    "K4": build_prefill_chunk_metadata,
    "K5": compute_prefill_metadata,
    "K6": compute_swa_indices_and_lens,
    "K7": combine_topk_swa_indices,
}


def layer_kind(ratio: int) -> LayerKind:
    """The kind of a layer of compression ratio ``ratio``: ``window`` (1), ``indexer``
    (:data:`~zerojit.kernels.mla.config.INDEXER_RATIO`) or ``compressed`` (any other ratio > 1).

    Raises:
        ValueError: ``ratio`` is not an int ``>= 1``.
    """
    if not isinstance(ratio, int) or ratio < 1:
        raise ValueError(f"layer_kind: ratio={ratio!r} must be an int >= 1")
    if ratio == 1:
        return "window"
    return "indexer" if ratio == INDEXER_RATIO else "compressed"


def block_table_width(config: ModelConfig) -> int:
    """Columns of a step's main block table: ``cdiv(max_model_len, block_size * dcp_size)``.

    The runner's block table has this fixed width (vLLM's persistent block table, one entry per
    virtual block of ``block_size * S`` tokens; see :mod:`zerojit.runner.metadata`), so the
    alignment of its rows is a layout fact: rows of a fresh contiguous int32 table start on a
    16-byte boundary iff the width is a multiple of 4 (K3's key).
    """
    return cdiv(config.max_model_len, config.block_size * config.dcp_size)


@dataclass(frozen=True)
class CacheStrides:
    """The layout facts of a bound KV cache that stride-derived keys carry (KERNELS.md "Strides").

    Attributes:
        block_stride_rows: rows between consecutive block ids of the main (full-resolution)
            cache, which K1's slots address.
        compressed_block_strides: ``((ratio, rows), ...)`` of every compressed cache (one per
            ratio of ``config.compressed_ratios``, ascending), K2's.
        swa_block_stride_rows: rows between consecutive block ids of the sliding-window cache, K6's.
    """

    block_stride_rows: int
    compressed_block_strides: tuple[tuple[int, int], ...]
    swa_block_stride_rows: int

    @classmethod
    def of(cls, cache: Any) -> "CacheStrides":
        """The strides of a bound cache (a :class:`~zerojit.runner.kv_cache.PagedKVCache`, or
        anything with its three stride properties), read from it, never assumed."""
        return cls(int(cache.block_stride_rows), tuple((int(c), int(s)) for c, s in cache.compressed_block_strides),
                   int(cache.swa_block_stride_rows))


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel a step can launch, with the layout facts of its launches.

    Attributes:
        number: ``"K1"`` ... ``"K7"`` (KERNELS.md).
        kernel: its launcher (the module-level instance the step calls and registration registers).
        moment: ``"layer"`` or ``"kv_cache"``: when it is registered.
        request: the keyword arguments of ``kernel.register_warmup``, as ``(name, value)`` pairs;
            every layout fact the step's launches of it read. None for a stride-derived kernel
            described before the cache is bound (:func:`step_launches` without ``strides``).
        ratios: the ratios of the layers that register it (never empty).
    """

    number: str
    kernel: Any
    moment: Moment
    request: tuple[tuple[str, Any], ...] | None
    ratios: tuple[int, ...]

    @property
    def name(self) -> str:
        """The kernel's registry name (``compressed_slot_mapping``, ...)."""
        return KERNEL_NAMES[self.number]

    def fact(self, name: str) -> Any:
        """The value of request argument ``name``.

        Raises:
            LookupError: the cache is not bound yet (no request), or no such argument.
        """
        if self.request is None:
            raise LookupError(f"{self.number} {self.name}: its layout facts are known once the KV cache is bound")
        facts = dict(self.request)
        if name not in facts:
            raise LookupError(f"{self.number} {self.name}: no layout fact {name!r} (it has {', '.join(facts) or 'none'})")
        return facts[name]

    def register(self) -> None:
        """``kernel.register_warmup(**request)``: a no-op outside an active registry.

        Raises:
            LookupError: a stride-derived kernel described before the cache was bound.
        """
        if self.request is None:
            raise LookupError(f"{self.number} {self.name}: register it once the KV cache is bound (it needs its strides)")
        self.kernel.register_warmup(**dict(self.request))


@dataclass(frozen=True)
class StepLaunches:
    """Every kernel a step of ``backend`` can launch for ``config``, in KERNELS.md order.

    Build it with :func:`step_launches`. Index it by number (``launches["K2"]``, ``"K2" in
    launches``).

    Attributes:
        config: the model configuration.
        backend: the attention backend.
        strides: the bound cache's strides, or None before the cache is bound (stride-derived
            kernels are then listed without a request).
        launches: one :class:`KernelLaunch` per kernel, K1 to K7 order.
    """

    config: ModelConfig
    backend: AttentionBackend
    strides: CacheStrides | None
    launches: tuple[KernelLaunch, ...]

    def __contains__(self, number: object) -> bool:
        return any(k.number == number for k in self.launches)

    def __getitem__(self, number: str) -> KernelLaunch:
        """The entry of kernel ``number``.

        Raises:
            KeyError: the step never launches that kernel (the message lists those it launches).
        """
        for k in self.launches:
            if k.number == number:
                return k
        raise KeyError(f"a step of backend {self.backend.name!r} for config {self.config.name!r} never launches "
                       f"{number}; it launches {', '.join(self.numbers)}")

    @property
    def numbers(self) -> tuple[str, ...]:
        """``("K1", "K2", ...)``: the kernels listed."""
        return tuple(k.number for k in self.launches)

    @property
    def names(self) -> tuple[str, ...]:
        """Registry names of the kernels listed, in K-order."""
        return tuple(k.name for k in self.launches)

    @property
    def index_flavours(self) -> tuple[str, str]:
        """K1's ``(decode rows, prefill rows)`` flavours, both among K1's registered ``flavours``:
        the prefill rows take the workspace or compact flavour when there is one (the prefill
        workspace and the compaction before DCP's all-gather serve prefills), the decode rows the
        other.

        Raises:
            KeyError: the step launches no K1. LookupError: the cache is not bound yet.
        """
        flavours = self["K1"].fact("flavours")
        special = [f for f in flavours if FLAVOUR_INPUTS[f]["has_workspace"] or FLAVOUR_INPUTS[f]["compact"]]
        plain = [f for f in flavours if f not in special]
        return (plain or special)[0], (special or plain)[0]

    def register(self, moment: Moment, *, ratio: int) -> None:
        """Register, with the active registry, every kernel of ``moment`` that a layer of
        ``ratio`` registers (what a layer constructor or its ``bind_kv_cache`` calls).

        Raises:
            ValueError: no layer of ``config`` has ratio ``ratio``.
            LookupError: ``moment="kv_cache"`` on a description without strides.
        """
        if ratio not in self.config.compress_ratios:
            raise ValueError(f"register: ratio={ratio!r} is no layer's ratio; config {self.config.name!r} has layers "
                             f"of ratio {', '.join(map(str, dict.fromkeys(self.config.compress_ratios)))}")
        if moment == "kv_cache" and self.strides is None:
            raise LookupError("step_launches(...) was built without the KV cache's strides: pass "
                              "strides=CacheStrides.of(cache) to register the stride-derived kernels")
        for k in self.launches:
            if k.moment == moment and ratio in k.ratios:
                k.register()


def step_launches(config: ModelConfig, backend: AttentionBackend, strides: CacheStrides | None = None) -> StepLaunches:
    """The kernels a step of ``backend`` launches for ``config``, with their layout facts (the
    table in the module docstring).

    Args:
        config: the model configuration.
        backend: the attention backend (validated against ``config`` by the caller).
        strides: the bound cache's strides; None lists the stride-derived kernels (K1, K2, K6)
            without their request (enough to know which kernels run, and to register the
            config-derived ones when a layer is built).
    """
    layer_ratios = tuple(dict.fromkeys(config.compress_ratios))
    has_indexer = INDEXER_RATIO in config.compress_ratios
    launches: list[KernelLaunch] = []

    def add(number: str, moment: Moment, request: dict[str, Any] | None, wanted: tuple[int, ...]) -> None:
        # A kernel no layer kind asks for but the step launches: every layer registers it.
        ratios = tuple(r for r in layer_ratios if r in wanted) or layer_ratios
        pairs = None if request is None else tuple(request.items())
        launches.append(KernelLaunch(number, _LAUNCHERS[number], moment, pairs, ratios))

    s = strides  # stride-derived requests are None until the cache is bound
    if backend.index_flavours and has_indexer:
        add("K1", "kv_cache", None if s is None else dict(block_stride_rows=s.block_stride_rows,
                                                           flavours=tuple(backend.index_flavours)), (INDEXER_RATIO,))
    if config.compressed_ratios:
        add("K2", "kv_cache", None if s is None else dict(compressed_block_strides=s.compressed_block_strides),
            tuple(r for r in layer_ratios if r > 1))
    if backend.launches_uniform_decode(config):
        add("K3", "layer", dict(aligned=(block_table_width(config) % 4 == 0,)), layer_ratios)
    if has_indexer:
        add("K4", "layer", dict(seq_lens_aligned=tuple(backend.prefill_seq_lens_aligned)), (INDEXER_RATIO,))
    add("K5", "layer", {}, layer_ratios)
    add("K6", "kv_cache", None if s is None else dict(block_stride_rows=s.swa_block_stride_rows,
                                                       causal=backend.swa_causal(config)), layer_ratios)
    add("K7", "layer", {}, layer_ratios)
    return StepLaunches(config, backend, strides, tuple(launches))
