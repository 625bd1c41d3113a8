"""Attention backends: which sparse-MLA kernels (and which variants of them) each one launches.

An *attention backend* is the code path that serves a model's sparse-MLA layers. Backends
differ in the metadata they need, so they launch different subsets of the seven kernels of
docs KERNELS.md, and different variants of some of them:

======================================  ==========================  ===========================
kernel                                  ``flashmla_sparse``         ``flashmla_sparse_dcp``
======================================  ==========================  ===========================
K1 convert_req_index_to_global_index    ``count_valid``,            ``dcp_count_valid``,
                                        ``workspace_count_valid``   ``dcp_compact``
K2 compressed_slot_mapping              yes                         yes
K3 prepare_uniform_decode               when speculative (Lq > 1)   no
K4 build_prefill_chunk_metadata         yes                         yes
K5 compute_prefill_metadata             yes                         yes
K6 compute_swa_indices_and_lens         causal (+ non-causal when   causal
                                        speculative)
K7 combine_topk_swa_indices             yes                         yes
dcp_size                                1 only                      > 1 only
======================================  ==========================  ===========================

A backend is a frozen value (:class:`AttentionBackend`) of the choices that differ between
backends. :func:`zerojit.kernels.mla.launches.step_launches` combines it with a configuration
and the bound cache's strides into the one description of what a step launches (layers without
an indexer need no K1/K4, a config without compressed caches no K2, ...), which both
registration and the runner's step read; so only the active backend's kernels are ever
registered, and exactly those its steps launch.

Example::

    >>> from zerojit.kernels.mla.config import ModelConfig
    >>> cfg = ModelConfig(block_size=64, compress_ratios=(4,) * 4, dcp_size=2)
    >>> default_backend(cfg).name
    'flashmla_sparse_dcp'
    >>> get_backend("flashmla_sparse").validate(cfg)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zerojit.kernels.mla.backends.BackendError: attention backend 'flashmla_sparse' needs dcp_size == 1, ...
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ModelConfig
from .index import FLAVOUR_INPUTS, FLAVOURS

__all__ = [
    "BackendError",
    "AttentionBackend",
    "FlashMLASparseBackend",
    "FlashMLASparseDCPBackend",
    "KERNEL_NAMES",
    "BACKENDS",
    "backend_names",
    "get_backend",
    "default_backend",
]

#: The registry name (``JitKernel.name``) of each kernel of KERNELS.md, by its number there.
KERNEL_NAMES: dict[str, str] = {
    "K1": "convert_req_index_to_global_index",
    "K2": "compressed_slot_mapping",
    "K3": "prepare_uniform_decode",
    "K4": "build_prefill_chunk_metadata",
    "K5": "compute_prefill_metadata",
    "K6": "compute_swa_indices_and_lens",
    "K7": "combine_topk_swa_indices",
}


class BackendError(ValueError):
    """An unknown backend name, a malformed backend, or a backend that cannot serve a config.

    The message names the offending value and the valid choices.
    """


@dataclass(frozen=True)
class AttentionBackend:
    """What an attention backend launches, as far as warm-up cares.

    Attributes:
        name: the name users select it by (``get_backend(name)``).
        dcp: False: serves ``dcp_size == 1`` only; True: serves ``dcp_size > 1`` only (KERNELS.md
            "DCP": S and I are constexpr, so a DCP backend's kernels are different variants).
        index_flavours: the K1 flavours it launches (names from
            :data:`zerojit.kernels.mla.index.FLAVOURS`): DCP flavours only in a DCP backend, the
            prefill workspace only without DCP (K1 supports it only with S = 1). Empty: no K1.
        uniform_decode: it flattens speculative decode batches with K3 (only reachable when
            ``num_speculative_tokens > 0``, i.e. ``Lq > 1``).
        swa_noncausal_drafts: it runs speculative draft rows through K6's non-causal variant
            (only reachable when ``num_speculative_tokens > 0``); K6's causal variant is always
            launched.
        prefill_seq_lens_aligned: the 16-byte alignment classes of the ``seq_lens`` it passes to
            K4: the chunk's ``seq_lens`` is an offset view into the step's (prefills follow the
            decodes), so both classes occur.

    Raises:
        BackendError: (when built) an unknown or misplaced K1 flavour.
    """

    name: str
    dcp: bool
    index_flavours: tuple[str, ...]
    uniform_decode: bool
    swa_noncausal_drafts: bool
    prefill_seq_lens_aligned: tuple[bool, ...] = (True, False)

    def __post_init__(self) -> None:
        problems = []
        unknown = [f for f in self.index_flavours if f not in FLAVOUR_INPUTS]
        if unknown:
            problems.append(f"index_flavours: unknown {'flavour' if len(unknown) == 1 else 'flavours'} {unknown}; "
                            f"known flavours are {FLAVOURS}")
        for f in self.index_flavours:
            spec = FLAVOUR_INPUTS.get(f)
            if spec is None:
                continue
            if spec["dcp"] and not self.dcp:
                problems.append(f"index_flavours: {f!r} is a DCP flavour but this backend serves dcp_size == 1 only")
            if not spec["dcp"] and self.dcp:
                problems.append(f"index_flavours: {f!r} runs with S = 1 but this backend serves dcp_size > 1 only")
        if problems:
            raise BackendError(f"attention backend {self.name!r} is malformed: " + "; ".join(problems))

    # ------------------------------------------------------------------ config checks
    def validate(self, config: ModelConfig) -> None:
        """Check that this backend can serve ``config``.

        Raises:
            BackendError: ``config.dcp_size`` is on the wrong side of 1 for this backend; the
                message names the field, its value, and the backends that would serve it.
        """
        S = config.dcp_size
        if self.dcp and S == 1:
            raise BackendError(
                f"attention backend {self.name!r} needs dcp_size > 1, got dcp_size={S}; "
                f"use backend {_pick(False)!r} or set dcp_size > 1 (valid backends: {', '.join(backend_names())})"
            )
        if not self.dcp and S != 1:
            raise BackendError(
                f"attention backend {self.name!r} needs dcp_size == 1, got dcp_size={S}; "
                f"use backend {_pick(True)!r} or set dcp_size=1 (valid backends: {', '.join(backend_names())})"
            )

    # ------------------------------------------------------------------ what it launches
    def launches_uniform_decode(self, config: ModelConfig) -> bool:
        """Whether K3 is reachable: the backend uses it and decode steps have ``Lq > 1``."""
        return self.uniform_decode and config.num_speculative_tokens > 0

    def swa_causal(self, config: ModelConfig) -> tuple[bool, ...]:
        """K6's variants for ``config``: ``(True,)``, plus False (non-causal draft rows) when
        the backend uses it and ``num_speculative_tokens > 0`` (KERNELS.md K6)."""
        if self.swa_noncausal_drafts and config.num_speculative_tokens > 0:
            return (True, False)
        return (True,)

    def describe(self) -> str:
        """One line per kernel family: what this backend launches (for ``--help`` and reports)."""
        lines = [f"{self.name} (dcp_size {'> 1' if self.dcp else '== 1'}):"]
        lines.append(f"  K1 {KERNEL_NAMES['K1']}: flavours {', '.join(self.index_flavours) or 'none'}")
        lines.append(f"  K3 {KERNEL_NAMES['K3']}: {'speculative decode only' if self.uniform_decode else 'not used'}")
        lines.append(
            f"  K6 {KERNEL_NAMES['K6']}: causal{' + non-causal for draft rows' if self.swa_noncausal_drafts else ''}"
        )
        lines.append("  K2, K4, K5, K7: as the config's layers need them")
        return "\n".join(lines)


@dataclass(frozen=True)
class FlashMLASparseBackend(AttentionBackend):
    """FlashMLA sparse attention without decode-context parallelism (``dcp_size == 1``).

    Prefill tokens read their selected KV through a prefill *workspace* (K1 flavour
    ``workspace_count_valid``), decode tokens straight from the paged cache (``count_valid``,
    valid counts feed the sparse kernel's per-row lengths). Speculative decode batches are
    flattened to single-token rows by K3 and draft rows see their window through K6's
    non-causal variant.
    """

    name: str = "flashmla_sparse"
    dcp: bool = False
    index_flavours: tuple[str, ...] = ("workspace_count_valid", "count_valid")
    uniform_decode: bool = True
    swa_noncausal_drafts: bool = True


@dataclass(frozen=True)
class FlashMLASparseDCPBackend(AttentionBackend):
    """FlashMLA sparse attention with decode-context parallelism (``dcp_size > 1``).

    Every rank holds an interleaved share of each sequence's KV (KERNELS.md "DCP"), so K1 runs
    its DCP flavours: ``dcp_count_valid`` (decode) and ``dcp_compact`` (prefill: each rank's
    entries compacted to the front of the row before the all-gather). There is no prefill
    workspace (K1 supports it only with S = 1). Speculative rows go through the causal paths
    (no K3 flattening, K6 causal only): each draft token is a row with its own causal window.
    """

    name: str = "flashmla_sparse_dcp"
    dcp: bool = True
    index_flavours: tuple[str, ...] = ("dcp_count_valid", "dcp_compact")
    uniform_decode: bool = False
    swa_noncausal_drafts: bool = False


#: Every backend, by name.
BACKENDS: dict[str, AttentionBackend] = {b.name: b for b in (FlashMLASparseBackend(), FlashMLASparseDCPBackend())}


def backend_names() -> list[str]:
    """The valid backend names, in definition order."""
    return list(BACKENDS)


def get_backend(name: str | AttentionBackend) -> AttentionBackend:
    """The backend called ``name`` (an :class:`AttentionBackend` is returned as is).

    Raises:
        BackendError: an unknown name; the message lists the valid choices.
    """
    if isinstance(name, AttentionBackend):
        return name
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise BackendError(
            f"unknown attention backend {name!r}; valid choices: {', '.join(backend_names())}"
        ) from None


def default_backend(config: ModelConfig) -> AttentionBackend:
    """The backend that serves ``config`` by default: the DCP one when ``dcp_size > 1``."""
    return BACKENDS[_pick(config.dcp_size > 1)]


def _pick(dcp: bool) -> str:
    return next(n for n, b in BACKENDS.items() if b.dcp == dcp)
