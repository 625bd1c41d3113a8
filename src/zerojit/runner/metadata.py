"""One scheduler step's sparse-MLA attention metadata, through the seven kernels of KERNELS.md.

Every step the runner turns a scheduler :class:`~zerojit.runner.scheduler.Batch` (which requests
run, their query and context lengths) and the KV-block allocator's block ids into the inputs the
kernels read (:func:`build_step_inputs`), then calls the kernels the attention backend launches
(:func:`step_metadata`). Which kernels, and with which layout facts (K2's caches and strides, K1's
flavours and stride, K6's variants), it reads from
:func:`zerojit.kernels.mla.launches.step_launches`, the same description the model's layers
register from (:class:`MetadataPlan`), so a step cannot launch what no layer registered. The
order:

====  ==========================================  =============================================
K2    ``compressed_slot_mapping``                 once per compressed cache (a ratio of ``config.compressed_ratios``)
K3    ``prepare_uniform_decode``                  uniform speculative decodes (``Lq > 1``), when the backend flattens them
K1    ``convert_req_index_to_global_index``       indexer top-k: the decode rows (decode flavour), then each prefill chunk (prefill flavour)
K6    ``compute_swa_indices_and_lens``            causal over every token; non-causal over the decode rows when the backend runs drafts so
K5    ``compute_prefill_metadata``                once, when the step has prefills
K4    ``build_prefill_chunk_metadata``            per prefill chunk, per indexer ratio
K7    ``combine_topk_swa_indices``                per prefill chunk, per distinct (ratio, TOP_K) of the layers
====  ==========================================  =============================================

The same :func:`step_metadata` runs the Triton launchers (:data:`KERNELS`) or the PyTorch
references (:data:`REFERENCES`): pass the implementation. A checked step runs both on the same
inputs and compares them (:func:`compare_metadata`).

Values: the indexer's top-k token positions are drawn at random among each token's valid
positions ``[0, pos]`` (``K = index_topk`` distinct positions, or all ``pos + 1`` of them, then
-1), K7's top-k compressed indices among ``[0, (pos + 1) // c)``, both from a generator seeded
by ``(seed, step)``, so any process replaying the schedule draws the same values for a step.
A *dry* step (``fill=False``: a compile-only dry launch checks only dtypes, shapes, strides and
alignment) allocates its input tensors with ``torch.empty`` and computes no value at all; every
host-side fact a launcher needs (largest query length, gathered lengths, compressed lengths) is
computed from the batch on the host, never read back from a tensor.

Layout choices (documented once, here):

* Block tables have a fixed width (vLLM's persistent block table): the main table
  ``[R, cdiv(max_model_len, block_size * S)]``, one entry per *virtual* block of
  ``block_size * S`` tokens (under DCP each rank holds ``block_size`` of them per block), shared
  by the compressed caches (same block ids, their own strides); the sliding-window table
  ``[R, cdiv(max_model_len, block_size)]`` indexed by global position (the window cache is not
  split by DCP). Window block ``j`` of a request is ``main[j // S] * S + j % S``: distinct for
  every (request, block), so the window cache needs ``S`` blocks per main block id (the runner
  allocates ``S * N`` blocks per cache and hands out ``N``).
* Prefill chunks: the step's prefill requests are split, in order, into chunks whose contexts
  (``sum(seq_lens)``) fit the prefill workspace of ``MetadataPlan.prefill_workspace_tokens``
  tokens (a request longer than that is a chunk of its own). Each chunk gets one K1 (its
  workspace starts are the exclusive cumsum of the chunk's contexts), one K4 per indexer ratio
  and one K7 per layer kind; its ``seq_lens`` is an offset view into the step's, so its
  16-byte alignment varies (both K4 classes are warmed).
* K7's gathered-buffer layout per chunk: ``swa_offset`` = the chunk's largest compressed length
  ``max(seq_len // c)`` for layers with a top-k part (0 for window-only layers), and
  ``row_stride = swa_offset + max(gather_lens)``. Ratio-128 layers (no indexer) pass
  ``topk[t, k] = k`` as an ``arange(TOP_K).expand(T, TOP_K)`` view (row stride 0).
* One launch per step per kernel call above, not one per layer: the 61 layers of a real model
  launch the same keys with the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from zerojit.kernels.mla import reference
from zerojit.kernels.mla.backends import AttentionBackend
from zerojit.kernels.mla.combine import combine_topk_swa_indices
from zerojit.kernels.mla.config import INDEXER_RATIO, ModelConfig
from zerojit.kernels.mla.decode import prepare_uniform_decode
from zerojit.kernels.mla.index import FLAVOUR_INPUTS, convert_req_index_to_global_index
from zerojit.kernels.mla.launches import CacheStrides, StepLaunches, block_table_width, step_launches
from zerojit.kernels.mla.prefill import build_prefill_chunk_metadata, compute_prefill_metadata
from zerojit.kernels.mla.shapes import cdiv
from zerojit.kernels.mla.slot_mapping import compressed_slot_mapping
from zerojit.kernels.mla.swa import compute_swa_indices_and_lens

from .scheduler import Batch

__all__ = [
    "MetadataOps",
    "KERNELS",
    "REFERENCES",
    "MetadataPlan",
    "PrefillChunk",
    "StepInputs",
    "DecodeBuffers",
    "StepMetadata",
    "build_step_inputs",
    "step_metadata",
    "compare_metadata",
    "random_positions",
]

I32 = torch.int32
I64 = torch.int64


# ---------------------------------------------------------------------------------------------
# The implementation: Triton launchers or PyTorch references
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetadataOps:
    """The seven functions a step calls, by their KERNELS.md names; keyword arguments only.

    Host-side hints the launchers take and the references do not (K6 ``max_query_len``, K7
    ``max_gather_len`` / ``max_compressed_len``) are dropped for the references, which derive
    the same facts from the tensors.
    """

    name: str
    convert_req_index_to_global_index: Callable[..., Any]
    compressed_slot_mapping: Callable[..., Any]
    prepare_uniform_decode: Callable[..., Any]
    build_prefill_chunk_metadata: Callable[..., Any]
    compute_prefill_metadata: Callable[..., Any]
    compute_swa_indices_and_lens: Callable[..., Any]
    combine_topk_swa_indices: Callable[..., Any]


def _without(fn: Callable[..., Any], *hints: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        for h in hints:
            kwargs.pop(h, None)
        return fn(**kwargs)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


#: The Triton launchers (real launch on a GPU, dry launch under compile-only, interpreted under
#: ``TRITON_INTERPRET=1``).
KERNELS = MetadataOps(
    name="triton",
    convert_req_index_to_global_index=convert_req_index_to_global_index,
    compressed_slot_mapping=compressed_slot_mapping,
    prepare_uniform_decode=prepare_uniform_decode,
    build_prefill_chunk_metadata=build_prefill_chunk_metadata,
    compute_prefill_metadata=compute_prefill_metadata,
    compute_swa_indices_and_lens=compute_swa_indices_and_lens,
    combine_topk_swa_indices=combine_topk_swa_indices,
)

#: The PyTorch references (the independent witness).
REFERENCES = MetadataOps(
    name="reference",
    convert_req_index_to_global_index=reference.convert_req_index_to_global_index,
    compressed_slot_mapping=reference.compressed_slot_mapping,
    prepare_uniform_decode=reference.prepare_uniform_decode,
    build_prefill_chunk_metadata=reference.build_prefill_chunk_metadata,
    compute_prefill_metadata=reference.compute_prefill_metadata,
    compute_swa_indices_and_lens=_without(reference.compute_swa_indices_and_lens, "max_query_len"),
    combine_topk_swa_indices=_without(reference.combine_topk_swa_indices, "max_gather_len", "max_compressed_len"),
)


# ---------------------------------------------------------------------------------------------
# What a run launches (fixed by config, backend and bound cache)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetadataPlan:
    """What every step of a run launches, fixed by the config, the backend and the bound cache.

    The kernels and their layout facts come from
    :func:`~zerojit.kernels.mla.launches.step_launches` (:attr:`step_launches`), the description
    the model's layers registered: the step launches K2 once per compressed cache listed there,
    K1 in the flavours and with the stride listed there, K6's non-causal variant only when listed,
    and nothing that is not listed.

    Attributes:
        config: the model configuration (S, r, I, ratios, Wn, TOP_K, limits).
        backend: the attention backend (which kernels, which K1 flavours, K3, K6 variants).
        strides: the bound cache's strides (:class:`~zerojit.kernels.mla.launches.CacheStrides`).
        prefill_workspace_tokens: most context tokens one prefill chunk gathers.
        step_launches: ``step_launches(config, backend, strides)`` (derived, not an argument).
    """

    config: ModelConfig
    backend: AttentionBackend
    strides: CacheStrides
    prefill_workspace_tokens: int = 32768
    step_launches: StepLaunches = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_launches", step_launches(self.config, self.backend, self.strides))

    @classmethod
    def for_cache(cls, config: ModelConfig, backend: AttentionBackend, cache: Any, **kw: Any) -> "MetadataPlan":
        """The plan for a bound :class:`~zerojit.runner.kv_cache.PagedKVCache` (strides read from it)."""
        return cls(config, backend, CacheStrides.of(cache), **kw)

    # -- which kernels, with which layout facts --------------------------------------------------
    @property
    def kernels(self) -> tuple[str, ...]:
        """Registry names of the kernels a step launches, in K-order."""
        return self.step_launches.names

    def launches(self, k: str) -> bool:
        """Whether kernel ``"K1"`` ... ``"K7"`` runs at all in this plan."""
        return k in self.step_launches

    def fact(self, k: str, name: str) -> Any:
        """Layout fact ``name`` of kernel ``k``'s launches, as registered (e.g. ``fact("K1",
        "block_stride_rows")``).

        Raises:
            KeyError: the plan never launches ``k``. LookupError: ``k`` has no such fact.
        """
        return self.step_launches[k].fact(name)

    @property
    def compressed_caches(self) -> tuple[tuple[int, int], ...]:
        """``((ratio, block_stride_rows), ...)``: one K2 launch per pair, as registered; () without K2."""
        return self.fact("K2", "compressed_block_strides") if self.launches("K2") else ()

    @property
    def index_flavours(self) -> tuple[str, str]:
        """K1's ``(decode rows, prefill rows)`` flavours, among those registered (see
        :attr:`StepLaunches.index_flavours <zerojit.kernels.mla.launches.StepLaunches.index_flavours>`)."""
        return self.step_launches.index_flavours

    @property
    def uniform_decode(self) -> bool:
        """K3 reachable (backend flattens speculative decodes and ``Lq > 1``)."""
        return self.launches("K3")

    @property
    def noncausal_drafts(self) -> bool:
        """K6's non-causal variant runs over the decode (draft) rows (it is registered)."""
        return False in self.fact("K6", "causal")

    # -- the cache's strides -----------------------------------------------------------------
    @property
    def block_stride_rows(self) -> int:
        """The main cache's rows between block ids (K1)."""
        return self.strides.block_stride_rows

    @property
    def compressed_block_strides(self) -> tuple[tuple[int, int], ...]:
        """``((ratio, rows), ...)`` of the compressed caches."""
        return self.strides.compressed_block_strides

    @property
    def swa_block_stride_rows(self) -> int:
        """The sliding-window cache's rows between block ids (K6)."""
        return self.strides.swa_block_stride_rows

    # -- widths --------------------------------------------------------------------------------
    @property
    def table_width(self) -> int:
        """Columns of the main block table: ``cdiv(max_model_len, block_size * S)``
        (:func:`~zerojit.kernels.mla.launches.block_table_width`, which K3's registered alignment reads)."""
        return block_table_width(self.config)

    @property
    def swa_table_width(self) -> int:
        """Columns of the sliding-window block table: ``cdiv(max_model_len, block_size)``."""
        return cdiv(self.config.max_model_len, self.config.block_size)

    def largest_topk_tensors(self) -> tuple[int, list[str]]:
        """Bytes of the ``[tokens, index_topk]`` int32 tensors of the largest step (``tokens =
        max_num_batched_tokens``) and their names: K1's ``token_indices`` and its output, K7's
        indexer top-k and its output when the config has an indexer. A lower bound on what one
        step allocates; these grow with ``index_topk`` without limit, every other step tensor is
        bounded by the int32 slot rule."""
        c = self.config
        names = []
        if self.launches("K1"):
            names += ["token_indices", "K1's output"]
        if INDEXER_RATIO in c.compress_ratios and self.launches("K7"):
            names += ["the indexer's prefill top-k", "K7's output"]
        return len(names) * c.max_num_batched_tokens * c.index_topk * 4, names

    @property
    def dcp(self) -> dict[str, int]:
        """``dcp_size``, ``dcp_rank``, ``dcp_interleave`` of the config (kernel keyword arguments)."""
        c = self.config
        return dict(dcp_size=c.dcp_size, dcp_rank=c.dcp_rank, dcp_interleave=c.dcp_interleave)

    def compressed_len(self, seq_len: int, ratio: int) -> int:
        """Compressed entries of a ``seq_len``-token context on this rank (K4's ``cu_compressed``)."""
        C = seq_len // ratio
        S, r, I = self.config.dcp_size, self.config.dcp_rank, self.config.dcp_interleave
        if S == 1:
            return C
        q = C // (I * S)
        return q * I + min(max(C - q * I * S - r * I, 0), I)


# ---------------------------------------------------------------------------------------------
# One step's inputs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillChunk:
    """Prefill requests ``[first, stop)`` of the step (0 = the first prefill), their token rows
    ``[token_start, token_stop)`` of the step, and host facts K4/K7 need."""

    first: int
    stop: int
    token_start: int
    token_stop: int

    @property
    def num_reqs(self) -> int:
        return self.stop - self.first

    @property
    def num_tokens(self) -> int:
        return self.token_stop - self.token_start


@dataclass(frozen=True)
class StepInputs:
    """One step's kernel inputs: host ints from the batch and tensors on the step's device.

    Tensor shapes (int32 unless said): ``query_start_loc [R+1]``, ``seq_lens [R]``,
    ``block_table [R, table_width]``, ``swa_block_table [R, swa_table_width]``,
    ``token_to_req [T]``, ``swa_slot_mapping [T]`` int64 (every token's window-cache slot),
    ``token_indices [T, index_topk]`` (K1, request-local token positions, -1 padded; None without
    K1), ``compressed_topk [T_prefill, index_topk]`` (K7's indexer-layer top-k over the prefill
    rows; None without an indexer). ``filled`` False: tensor values are undefined (dry step).
    """

    step: int
    query_lens: tuple[int, ...]
    seq_lens_host: tuple[int, ...]
    num_decodes: int
    chunks: tuple[PrefillChunk, ...]
    query_start_loc: Tensor
    seq_lens: Tensor
    block_table: Tensor
    swa_block_table: Tensor
    token_to_req: Tensor
    swa_slot_mapping: Tensor
    token_indices: Tensor | None
    compressed_topk: Tensor | None
    filled: bool

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def num_prefills(self) -> int:
        return self.num_reqs - self.num_decodes

    @property
    def num_decode_tokens(self) -> int:
        return sum(self.query_lens[: self.num_decodes])

    @property
    def device(self) -> torch.device:
        return self.seq_lens.device


def _prefill_chunks(batch: Batch, workspace_tokens: int) -> tuple[PrefillChunk, ...]:
    """Consecutive prefill requests whose contexts fit ``workspace_tokens`` (at least one each)."""
    qsl = batch.query_start_loc()
    nd = batch.num_decodes
    chunks, first, used = [], 0, 0
    for p in range(batch.num_prefills):
        seq = batch.seq_lens[nd + p]
        if p > first and used + seq > workspace_tokens:
            chunks.append(PrefillChunk(first, p, qsl[nd + first], qsl[nd + p]))
            first, used = p, 0
        used += seq
    if batch.num_prefills:
        chunks.append(PrefillChunk(first, batch.num_prefills, qsl[nd + first], qsl[nd + batch.num_prefills]))
    return tuple(chunks)


def random_positions(limit: Tensor, width: int, generator: torch.Generator) -> Tensor:
    """``[N, width]`` int32: per row, ``min(limit, width)`` distinct values in ``[0, limit)``
    (sorted), then -1; all of ``[0, limit)`` when ``limit <= width``.

    Drawn as ``sort(u) + arange`` with ``u`` uniform in ``[0, limit - m]`` (``m`` kept values),
    which is distinct by construction and vectorised (no per-row loop).
    """
    n = limit.to(I64).unsqueeze(1)
    dev = limit.device
    col = torch.arange(width, device=dev, dtype=I64).unsqueeze(0)
    m = torch.clamp(n, max=width)
    u = torch.floor(torch.rand((limit.numel(), width), generator=generator, device=dev) * (n - m + 1)).to(I64)
    big = torch.iinfo(I64).max // 2
    u = torch.where(col < m, u, torch.full_like(u, big)).sort(dim=1).values
    return torch.where(col < m, u + col, torch.full_like(u, -1)).to(I32)


def build_step_inputs(
    batch: Batch,
    plan: MetadataPlan,
    *,
    blocks: Sequence[Sequence[int]] | None = None,
    fill: bool = True,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> StepInputs:
    """The kernel inputs of one step.

    Args:
        batch: the scheduler's step (decodes first, then prefills).
        plan: the run's plan (config, backend, strides, widths).
        blocks: each request's main block ids, in batch order (the allocator's); needed when
            ``fill``.
        fill: compute every value (a launched or checked step); False allocates the tensors
            with ``torch.empty`` (a dry step: only dtypes, shapes, strides and alignment matter).
        seed: the run's seed; the top-k draws use a generator seeded by ``(seed, batch.step)``.
        device: where the tensors live.
    """
    cfg = plan.config
    dev = torch.device(device)
    R, T, nd = batch.num_reqs, batch.num_tokens, batch.num_decodes
    Tp = T - batch.num_decode_tokens
    K = cfg.index_topk
    chunks = _prefill_chunks(batch, plan.prefill_workspace_tokens)
    needs_k1 = plan.launches("K1")
    needs_topk = INDEXER_RATIO in cfg.compress_ratios and batch.num_prefills > 0
    W, Ws = plan.table_width, plan.swa_table_width

    if not fill:
        empty = lambda *shape, dtype=I32: torch.empty(shape, dtype=dtype, device=dev)  # noqa: E731
        return StepInputs(
            step=batch.step, query_lens=batch.query_lens, seq_lens_host=batch.seq_lens, num_decodes=nd,
            chunks=chunks, query_start_loc=empty(R + 1), seq_lens=empty(R), block_table=empty(R, W),
            swa_block_table=empty(R, Ws), token_to_req=empty(T), swa_slot_mapping=empty(T, dtype=I64),
            token_indices=empty(T, K) if needs_k1 else None,
            compressed_topk=empty(Tp, K) if needs_topk else None, filled=False,
        )

    if blocks is None or len(blocks) != R:
        raise ValueError(f"build_step_inputs: fill=True needs the block ids of the batch's {R} requests")
    S, bs = cfg.dcp_size, cfg.block_size
    qlens = torch.tensor(batch.query_lens, dtype=I64, device=dev)
    seq = torch.tensor(batch.seq_lens, dtype=I64, device=dev)
    qsl = torch.zeros(R + 1, dtype=I64, device=dev)
    qsl[1:] = torch.cumsum(qlens, 0)

    # Block tables: the allocator's ids padded with the null block 0 to the fixed width.
    used = max((len(b) for b in blocks), default=0)
    if used > W:
        raise ValueError(f"a request holds {used} blocks, more than the block table's {W} columns")
    rows = torch.tensor([list(b) + [0] * (used - len(b)) for b in blocks], dtype=I64, device=dev).view(R, used)
    block_table = torch.zeros((R, W), dtype=I32, device=dev)
    block_table[:, :used] = rows.to(I32)
    swa_cols = torch.arange(Ws, device=dev)
    swa_block_table = (block_table.to(I64)[:, swa_cols // S] * S + swa_cols % S).to(I32)

    # Per token: its request (batch row) and position; its window-cache slot.
    req = torch.repeat_interleave(torch.arange(R, device=dev), qlens)
    pos = seq[req] - qlens[req] + (torch.arange(T, device=dev) - qsl[req])
    swa_slot = swa_block_table.to(I64)[req, pos // bs] * plan.swa_block_stride_rows + pos % bs

    g = torch.Generator(device=dev)
    g.manual_seed((seed * 1_000_003 + batch.step) % (2**63))
    token_indices = random_positions(pos + 1, K, g) if needs_k1 else None
    compressed_topk = None
    if needs_topk:
        compressed_topk = random_positions((pos[T - Tp:] + 1) // INDEXER_RATIO, K, g)
    return StepInputs(
        step=batch.step, query_lens=batch.query_lens, seq_lens_host=batch.seq_lens, num_decodes=nd, chunks=chunks,
        query_start_loc=qsl.to(I32), seq_lens=seq.to(I32), block_table=block_table, swa_block_table=swa_block_table,
        token_to_req=req.to(I32), swa_slot_mapping=swa_slot, token_indices=token_indices,
        compressed_topk=compressed_topk, filled=True,
    )


# ---------------------------------------------------------------------------------------------
# The step
# ---------------------------------------------------------------------------------------------


@dataclass
class DecodeBuffers:
    """K3's output buffers, sized for the largest decode batch (``max_num_seqs * Lq`` rows) and
    kept across steps, as a serving engine keeps them. Rows past the live count are untouched.
    """

    expanded_seq_lens: Tensor
    expanded_block_table: Tensor

    @classmethod
    def allocate(cls, plan: MetadataPlan, *, device: torch.device | str = "cpu", fill: int | None = None) -> "DecodeBuffers":
        """Buffers for ``plan`` (``fill``: a sentinel value, else uninitialised)."""
        rows = plan.config.max_num_seqs * plan.config.query_len
        make = (lambda *s: torch.full(s, fill, dtype=I32, device=device)) if fill is not None else (
            lambda *s: torch.empty(s, dtype=I32, device=device))
        return cls(make(rows), make(rows, plan.table_width))


@dataclass
class StepMetadata:
    """What one step's kernels returned, by name (``"K2 slot_mapping ratio 4"``, ...).

    ``compact`` names K1 outputs whose rows hold their valid entries first in any order.
    """

    outputs: dict[str, Tensor] = field(default_factory=dict)
    compact: set[str] = field(default_factory=set)

    def add(self, name: str, value: Tensor | None, *, compact: bool = False) -> None:
        if value is not None:
            self.outputs[name] = value
            if compact:
                self.compact.add(name)

    def __len__(self) -> int:
        return len(self.outputs)


def step_metadata(inputs: StepInputs, plan: MetadataPlan, ops: MetadataOps, buffers: DecodeBuffers | None) -> StepMetadata:
    """Run one step's metadata kernels (``ops``: :data:`KERNELS` or :data:`REFERENCES`).

    Args:
        inputs: from :func:`build_step_inputs`.
        plan: the run's plan.
        ops: the implementation.
        buffers: K3's persistent buffers (needed when the plan launches K3).

    Returns:
        Every output, by name, for :func:`compare_metadata`.
    """
    cfg, out = plan.config, StepMetadata()
    R, T, nd, Td = inputs.num_reqs, inputs.num_tokens, inputs.num_decodes, inputs.num_decode_tokens
    qsl, seq = inputs.query_start_loc, inputs.seq_lens

    # K2: where this step's compressed-KV entries go, in each compressed cache.
    for ratio, stride in plan.compressed_caches:
        out.add(f"K2 slot_mapping ratio {ratio}", ops.compressed_slot_mapping(
            query_start_loc=qsl, seq_lens=seq, block_table=inputs.block_table, num_tokens=T, ratio=ratio,
            block_size=cfg.block_size, block_stride_rows=stride, **plan.dcp))

    # K3: a uniform speculative decode batch flattened to single-token rows.
    decode_lens = set(inputs.query_lens[:nd])
    if plan.uniform_decode and nd and len(decode_lens) == 1 and min(decode_lens) > 1:
        lq = min(decode_lens)
        s, bt = ops.prepare_uniform_decode(
            seq_lens=seq[:nd], block_table=inputs.block_table[:nd], expanded_seq_lens=buffers.expanded_seq_lens,
            expanded_block_table=buffers.expanded_block_table, query_len=lq, num_decode_tokens=nd * lq)
        out.add("K3 expanded_seq_lens", s)
        out.add("K3 expanded_block_table", bt)

    # K1: the indexer's top-k token positions -> KV-cache slots (decode rows, then each chunk).
    if plan.launches("K1"):
        decode_flavour, prefill_flavour = plan.index_flavours
        if Td:
            _index(out, "K1 decode", ops, plan, decode_flavour, inputs, 0, Td, None)
        for i, chunk in enumerate(inputs.chunks):
            _index(out, f"K1 prefill chunk {i}", ops, plan, prefill_flavour, inputs, chunk.token_start,
                   chunk.token_stop, chunk)

    # K6: every token's sliding window (causal); draft rows' shared window (non-causal).
    swa = dict(token_to_req=inputs.token_to_req, slot_mapping=inputs.swa_slot_mapping, seq_lens=seq,
               query_start_loc=qsl, block_table=inputs.swa_block_table, token_offset=0,
               sliding_window=cfg.sliding_window, block_size=cfg.block_size,
               block_stride_rows=plan.fact("K6", "block_stride_rows"), num_speculative_tokens=cfg.num_speculative_tokens)
    idx, lens = ops.compute_swa_indices_and_lens(num_tokens=T, causal=True, **swa)
    out.add("K6 causal swa_indices", idx)
    out.add("K6 causal swa_lens", lens)
    if plan.noncausal_drafts and Td:
        idx, lens = ops.compute_swa_indices_and_lens(num_tokens=Td, causal=False,
                                                     max_query_len=max(inputs.query_lens[:nd]), **swa)
        out.add("K6 draft swa_indices", idx)
        out.add("K6 draft swa_lens", lens)

    if not inputs.chunks:
        return out

    # K5: how many tokens each prefill request gathers for its window.
    gather_lens, cu_gather = ops.compute_prefill_metadata(
        seq_lens=seq, query_start_loc=qsl, num_decodes=nd, num_prefills=R - nd, sliding_window=cfg.sliding_window)
    out.add("K5 gather_lens", gather_lens)
    out.add("K5 cu_gather_lens", cu_gather)

    # K4 and K7, per prefill chunk.
    for i, chunk in enumerate(inputs.chunks):
        _prefill_chunk(out, f"chunk {i}", ops, plan, inputs, chunk, gather_lens)
    return out


def _index(out: StepMetadata, name: str, ops: MetadataOps, plan: MetadataPlan, flavour: str, inputs: StepInputs,
           t0: int, t1: int, chunk: PrefillChunk | None) -> None:
    """K1 over token rows ``[t0, t1)`` in ``flavour`` (a chunk's rows read its prefill workspace)."""
    cfg, spec = plan.config, FLAVOUR_INPUTS[flavour]
    kw: dict[str, Any] = dict(
        req_id=inputs.token_to_req[t0:t1], block_table=inputs.block_table, token_indices=inputs.token_indices[t0:t1],
        block_size=cfg.block_size, block_stride_rows=plan.fact("K1", "block_stride_rows"),
        max_num_blocks_per_req=plan.table_width, count_valid=spec["count_valid"], compact=spec["compact"],
        **(plan.dcp if spec["dcp"] else {}))
    if spec["has_workspace"] and chunk is not None:
        ids, starts = _workspace(inputs, chunk)
        kw.update(prefill_workspace_request_ids=ids, prefill_workspace_starts=starts)
    elif spec["has_workspace"]:  # decode rows in a workspace flavour: no row reads the workspace
        kw.update(prefill_workspace_request_ids=torch.full((t1 - t0,), -1, dtype=I32, device=inputs.device),
                  prefill_workspace_starts=torch.zeros(1, dtype=I32, device=inputs.device))
    slots, counts = ops.convert_req_index_to_global_index(**kw)
    out.add(f"{name} out", slots, compact=spec["compact"])
    out.add(f"{name} valid_counts", counts)


def _workspace(inputs: StepInputs, chunk: PrefillChunk) -> tuple[Tensor, Tensor]:
    """A chunk's prefill workspace: each token's chunk-local request, each request's first row
    (the exclusive cumsum of the chunk's contexts)."""
    dev, n = inputs.device, chunk.num_reqs
    if not inputs.filled:
        return torch.empty(chunk.num_tokens, dtype=I32, device=dev), torch.empty(n, dtype=I32, device=dev)
    nd = inputs.num_decodes
    lens = torch.tensor(inputs.query_lens[nd + chunk.first: nd + chunk.stop], dtype=I64, device=dev)
    # output_size from the host: no device sync, and a static size when torch.compile traces the step
    ids = torch.repeat_interleave(torch.arange(n, device=dev), lens, output_size=chunk.num_tokens).to(I32)
    ctx = inputs.seq_lens_host[nd + chunk.first: nd + chunk.stop]
    starts = [0]
    for c in ctx[:-1]:
        starts.append(starts[-1] + c)
    return ids, torch.tensor(starts, dtype=I32, device=dev)


def _prefill_chunk(out: StepMetadata, name: str, ops: MetadataOps, plan: MetadataPlan, inputs: StepInputs,
                   chunk: PrefillChunk, gather_lens: Tensor) -> None:
    """K4 (each indexer ratio) and K7 (each layer kind) over one chunk of prefill requests."""
    cfg, dev = plan.config, inputs.device
    nd, p0, p1 = inputs.num_decodes, chunk.first, chunk.stop
    b0, b1 = nd + p0, nd + p1
    seq_view = inputs.seq_lens[b0:b1]  # an offset view: its 16-byte alignment varies by step
    qlens = inputs.query_lens[b0:b1]
    ctx = inputs.seq_lens_host[b0:b1]
    chunk_qsl = _cumsum([0, *qlens], dev) if inputs.filled else torch.empty(chunk.num_reqs + 1, dtype=I32, device=dev)
    gathered = [q + min(s - q, cfg.sliding_window - 1) for q, s in zip(qlens, ctx)]

    # K4: each query row's range of the indexer's packed compressed KV.
    if plan.launches("K4"):
        for ratio in cfg.indexer_ratios:
            counts = [plan.compressed_len(s, ratio) for s in ctx]
            cu = [0]
            for c in counts:
                cu.append(cu[-1] + c)
            ks, ke, token_to_seq = ops.build_prefill_chunk_metadata(
                query_start_loc=chunk_qsl, seq_lens=seq_view,
                cu_compressed=_cumsum([0, *counts], dev) if inputs.filled else torch.empty(len(cu), dtype=I32, device=dev),
                query_slice_start=0, query_slice_stop=chunk.num_tokens, num_compressed=cu[-1], ratio=ratio, **plan.dcp)
            out.add(f"K4 {name} ratio {ratio} ks", ks)
            out.add(f"K4 {name} ratio {ratio} ke", ke)
            out.add(f"K4 {name} ratio {ratio} token_to_seq", token_to_seq)

    # K7: each token's top-k compressed entries then its window, over the gathered buffer.
    for ratio, top_k in cfg.layer_topk_pairs:
        if top_k == 0:
            topk, swa_offset, max_comp = None, 0, None
        else:
            max_comp = max(s // ratio for s in ctx)
            swa_offset = max_comp
            if ratio == INDEXER_RATIO:
                r0 = chunk.token_start - inputs.num_decode_tokens
                topk = inputs.compressed_topk[r0: r0 + chunk.num_tokens]
            else:  # no indexer: every compressed entry, topk[t, k] = k
                topk = torch.arange(top_k, dtype=I32, device=dev).expand(chunk.num_tokens, top_k)
        combined, lens = ops.combine_topk_swa_indices(
            topk=topk, query_start_loc=chunk_qsl, seq_lens=seq_view, gather_lens=gather_lens[p0:p1],
            num_tokens=chunk.num_tokens, row_stride=swa_offset + max(gathered), swa_offset=swa_offset, top_k=top_k,
            ratio=ratio, sliding_window=cfg.sliding_window, max_gather_len=max(gathered),
            max_compressed_len=max_comp)
        out.add(f"K7 {name} ratio {ratio} combined", combined)
        out.add(f"K7 {name} ratio {ratio} lens", lens)


def _cumsum(values: list[int], dev: torch.device) -> Tensor:
    acc, total = [], 0
    for v in values:
        total += v
        acc.append(total)
    return torch.tensor(acc, dtype=I32, device=dev)


# ---------------------------------------------------------------------------------------------
# Comparing two implementations
# ---------------------------------------------------------------------------------------------


def compare_metadata(got: StepMetadata, want: StepMetadata) -> list[str]:
    """Every difference between two steps' outputs (empty: equal), one line each.

    Outputs must be equal exactly, except K1's compact rows: same valid entries (as a set per
    row), valid entries first, then -1 (KERNELS.md K1 ``COMPACT_TO_FRONT``).
    """
    problems = []
    for name in dict.fromkeys([*got.outputs, *want.outputs]):
        a, b = got.outputs.get(name), want.outputs.get(name)
        if a is None or b is None:
            problems.append(f"{name}: produced by only one of the two ({'reference' if a is None else 'kernel'})")
            continue
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.shape != b.shape:
            problems.append(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
            continue
        if name in got.compact or name in want.compact:
            valid = a != -1
            if a.numel() and not bool((valid.to(I32).diff(dim=1) <= 0).all()):
                problems.append(f"{name}: a row has -1 before a valid entry (not compacted to the front)")
                continue
            big = torch.iinfo(torch.int64).max  # -1 sorts last
            a = torch.where(a == -1, big, a.to(I64)).sort(dim=1).values
            b = torch.where(b == -1, big, b.to(I64)).sort(dim=1).values
        a, b = a.to(I64), b.to(I64)
        if not torch.equal(a, b):
            where = (a != b).nonzero()
            first = tuple(int(x) for x in where[0])
            n = where.shape[0]
            problems.append(f"{name}: {n} {'element differs' if n == 1 else 'elements differ'}, first at {first}: "
                            f"kernel {int(a[first])}, reference {int(b[first])}")
    return problems
