"""K1 ``convert_req_index_to_global_index``: indexer top-k positions -> global KV-cache slots.

The lightning indexer picks, for every token t of the step, up to K request-local token
positions (``token_indices[t, :]``, -1 padded). This kernel turns each position into the slot of
that token in the paged KV cache (docs KERNELS.md, K1)::

    tok = token_indices[t, j]                       # -1: no entry
    S > 1:  owner = (tok // I) % S                  # the DCP rank holding tok; others get -1
            local = (tok // (S*I)) * I + tok % I    # its position in this rank's cache
    blk, off = divmod(local, block_size)            # blk >= max_num_blocks_per_req: -1
    slot = prefill_workspace_starts[p] + tok        # p = prefill_workspace_request_ids[t] >= 0
         | block_table[req_id[t], blk] * block_stride_rows + off

``block_stride_rows`` is the *physical* distance in cache rows between consecutive block ids
(equal to ``block_size`` only for a dense cache; a packed cache interleaves several layers'
blocks), so it is a compile-time fact of the bound cache, registered when the cache is bound.

Compile key (:class:`ConvertReqIndexToGlobalIndex.CompileKey`): block_size, block_stride_rows,
K, BLOCK_N, has-workspace, count-valid, compact, S, I (KERNELS.md) plus ``indices_aligned``, the
one alignment class that matters (see the class). Everything else is either fixed by the key or
kept out of Triton's key: the per-step ints (``token_indices``' and ``block_table``'s row strides,
``max_num_blocks_per_req``, the DCP rank r) are ``do_not_specialize`` and the launcher checks they
fit int32, so their width class never changes; the input pointers and ``valid_counts`` are
``do_not_specialize_on_alignment``; ``out`` is allocated here, hence always 16-byte aligned;
``num_warps`` follows from BLOCK_N and compact; T only sizes the grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import INT32_MAX, CheckedKernel, IntArg, Let, Require, RowStrideInt32, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec
from zerojit.keyspace import choices, trace_dispatch, zip_inputs
from zerojit.specialization import WarmupTensor, scalar_rep

from ._checks import DCP

__all__ = [
    "FLAVOURS",
    "FLAVOUR_INPUTS",
    "MAX_ROW_BLOCK",
    "TILE_N",
    "ConvertReqIndexToGlobalIndex",
    "convert_req_index_to_global_index",
]

#: Widest row handled by one program (BLOCK_N = K when K is a power of two <= this).
MAX_ROW_BLOCK = 2048
#: Tile width for every other K (several programs per row; valid_counts summed atomically).
TILE_N = 128

#: The launch flavours a backend can use (KERNELS.md K1 "Warm-up space"), in order.
FLAVOURS: tuple[str, ...] = ("plain", "count_valid", "workspace_count_valid", "dcp_count_valid", "dcp_compact")

#: What each flavour sets: has_workspace, count_valid, compact, and whether it runs under DCP
#: (S = config.dcp_size; the non-DCP flavours run with S = 1).
FLAVOUR_INPUTS: dict[str, dict[str, bool]] = {
    "plain": dict(has_workspace=False, count_valid=False, compact=False, dcp=False),
    "count_valid": dict(has_workspace=False, count_valid=True, compact=False, dcp=False),
    "workspace_count_valid": dict(has_workspace=True, count_valid=True, compact=False, dcp=False),
    "dcp_count_valid": dict(has_workspace=False, count_valid=True, compact=False, dcp=True),
    "dcp_compact": dict(has_workspace=False, count_valid=False, compact=True, dcp=True),
}


@triton.jit(
    do_not_specialize=["ti_stride", "bt_stride", "max_num_blocks_per_req", "dcp_rank"],
    do_not_specialize_on_alignment=[
        "req_id_ptr",
        "block_table_ptr",
        "token_indices_ptr",
        "valid_counts_ptr",
        "prefill_workspace_request_ids_ptr",
        "prefill_workspace_starts_ptr",
    ],
)
def _convert_req_index_to_global_index_kernel(
    req_id_ptr,  # [T] int32
    block_table_ptr,  # [R, W] int32, row stride bt_stride
    token_indices_ptr,  # [T, K] int32, row stride ti_stride
    out_ptr,  # [T, K] int32, contiguous
    valid_counts_ptr,  # [T] int32, or None
    prefill_workspace_request_ids_ptr,  # [T] int32, or None
    prefill_workspace_starts_ptr,  # [P] int32, or None
    ti_stride,
    bt_stride,
    max_num_blocks_per_req,
    dcp_rank,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_STRIDE_ROWS: tl.constexpr,
    K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_WORKSPACE: tl.constexpr,
    COUNT_VALID: tl.constexpr,
    COMPACT: tl.constexpr,
    DCP_SIZE: tl.constexpr,
    DCP_INTERLEAVE: tl.constexpr,
    INDICES_ALIGNED: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_row = cols < K

    ti_row = token_indices_ptr + row * ti_stride
    if INDICES_ALIGNED:  # row start is 16-byte aligned: 128-bit loads
        ti_row = tl.multiple_of(ti_row, 16)
    tok = tl.load(ti_row + cols, mask=in_row, other=-1)

    valid = tok >= 0
    if DCP_SIZE > 1:
        valid = valid & ((tok // DCP_INTERLEAVE) % DCP_SIZE == dcp_rank)
        local = (tok // (DCP_SIZE * DCP_INTERLEAVE)) * DCP_INTERLEAVE + tok % DCP_INTERLEAVE
    else:
        local = tok
    blk = local // BLOCK_SIZE
    off = local % BLOCK_SIZE
    valid = valid & (blk < max_num_blocks_per_req)

    from_table = valid
    if HAS_WORKSPACE:
        p = tl.load(prefill_workspace_request_ids_ptr + row)
        in_ws = p >= 0
        ws_start = tl.load(prefill_workspace_starts_ptr + tl.maximum(p, 0), mask=in_ws, other=0)
        # a select, not `valid & (p < 0)`: Triton 3.9's interpreter refuses that mask (int32 data there)
        from_table = tl.where(p < 0, valid, False)
    req = tl.load(req_id_ptr + row).to(tl.int64)
    block_id = tl.load(block_table_ptr + req * bt_stride + blk, mask=from_table, other=0)
    slot = block_id.to(tl.int64) * BLOCK_STRIDE_ROWS + off.to(tl.int64)
    if HAS_WORKSPACE:
        slot = tl.where(in_ws, ws_start.to(tl.int64) + tok.to(tl.int64), slot)
    res = tl.where(valid, slot, -1).to(tl.int32)

    out_row = out_ptr + row * K
    flags = valid.to(tl.int32)
    n_valid = tl.sum(flags, axis=0)
    if COMPACT:
        rank = tl.cumsum(flags, axis=0) - flags  # exclusive prefix: position among the valid
        if BLOCK_N >= K:  # the whole row here: one store of a permutation, valid first, -1 after
            dest = tl.where(valid, rank, n_valid + cols - rank)
            tl.store(out_row + dest, res, mask=in_row)
        else:  # reserve n_valid places of the row; the launcher pre-filled it with -1
            base = tl.atomic_add(valid_counts_ptr + row, n_valid)
            tl.store(out_row + base + rank, res, mask=valid)
    else:
        tl.store(out_row + cols, res, mask=in_row)
        if COUNT_VALID:
            if BLOCK_N >= K:
                tl.store(valid_counts_ptr + row, n_valid)
            else:
                tl.atomic_add(valid_counts_ptr + row, n_valid)
    if COMPACT and COUNT_VALID and BLOCK_N >= K:
        tl.store(valid_counts_ptr + row, n_valid)


def _is_pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


class ConvertReqIndexToGlobalIndex(CheckedKernel["ConvertReqIndexToGlobalIndex.CompileKey"]):
    """K1: ``out[t, j]`` = the global KV-cache slot of request-local position ``token_indices[t, j]``.

    Call (keyword-only)::

        out, valid_counts = convert_req_index_to_global_index(
            req_id=..., block_table=..., token_indices=..., block_size=64,
            block_stride_rows=64, max_num_blocks_per_req=W, count_valid=True)

    Inputs (every tensor int32 on one device):
        req_id: ``[T]`` contiguous; the block-table row of each token.
        block_table: ``[R, W]``, columns contiguous (any row stride).
        token_indices: ``[T, K]`` request-local positions, -1 padded; columns contiguous, row
            stride ``>= K`` allowed.
        block_size, block_stride_rows: tokens per block and the cache rows between consecutive
            block ids (compile-time facts of the bound cache).
        max_num_blocks_per_req: a position whose block is ``>=`` this is invalid; ``<= W``.
        prefill_workspace_request_ids ``[T]`` (-1 for decode tokens) and
            prefill_workspace_starts ``[P]``, contiguous, both or neither, only with S = 1: a token
            with ``p = ids[t] >= 0`` maps to ``starts[p] + tok``.
        dcp_size, dcp_rank, dcp_interleave: S, r, I (S, I constexpr; r a runtime int).
        count_valid: also return ``valid_counts``. compact: COMPACT_TO_FRONT (S > 1 only).

    Returns:
        ``(out, valid_counts)``: ``out [T, K]`` int32 (contiguous), every entry either a slot or
        -1 (the rule in the module docstring); with ``compact`` each row holds its valid entries
        first, in unspecified order, then -1. ``valid_counts [T]`` int32, the number of entries
        != -1 per row, or None without ``count_valid``. Slots are computed in int64 and stored
        as int32 (a config whose slots overflow int32 is rejected when built).

    Grid ``(T, cdiv(K, BLOCK_N))``: ``BLOCK_N = K`` (one program per row) when K is a power of
    two ``<= 2048``, else 128-wide tiles; then ``valid_counts`` starts zeroed and tiles add to it
    atomically, and a compact row is pre-filled with -1 and tiles reserve their places
    atomically. ``T = 0`` launches nothing.

    Raises:
        KernelInputError: a wrong dtype, dimension or device; a non-contiguous ``req_id`` /
            workspace tensor or column dimension; ``req_id`` / workspace ids not of length T;
            ``max_num_blocks_per_req`` outside ``[0, W]``; a bad DCP triple; ``compact``
            without DCP; workspace tensors with DCP or only one of them; a non-positive
            ``block_size`` / ``block_stride_rows``; a row stride or count outside int32. Only
            metadata is checked (no device sync): values are the caller's contract.
    """

    kernel = _convert_req_index_to_global_index_kernel

    @dataclass(frozen=True)
    class CompileKey:
        """One compiled variant of K1 (each field is the kernel's upper-cased constexpr).

        Attributes:
            block_size: tokens per KV-cache block (constexpr).
            block_stride_rows: cache rows between consecutive block ids (constexpr).
            K: columns of ``token_indices`` / ``out`` (the indexer's top-k, constexpr).
            block_n: columns per program (K, or 128 when K is no power of two <= 2048).
            has_workspace: prefill workspace tensors are passed.
            count_valid: ``valid_counts`` is produced.
            compact: COMPACT_TO_FRONT.
            dcp_size: S (1 = no DCP).
            dcp_interleave: I (normalised to 1 when S = 1: it then changes nothing).
            indices_aligned: every row of ``token_indices`` starts on a 16-byte boundary (base
                address aligned and row stride a multiple of 4 elements), so rows load as 128-bit
                vectors. Triton's own alignment class of the pointer is switched off, so this is
                the only alignment fact in the key.
        """

        block_size: int
        block_stride_rows: int
        K: int
        block_n: int
        has_workspace: bool
        count_valid: bool
        compact: bool
        dcp_size: int
        dcp_interleave: int
        indices_aligned: bool

    def dispatch(self, *, block_size: int, block_stride_rows: int, K: int, has_workspace: bool = False,
                 count_valid: bool = False, compact: bool = False, dcp_size: int = 1, dcp_interleave: int = 1,
                 indices_aligned: bool = True) -> "ConvertReqIndexToGlobalIndex.CompileKey":
        """The compile key of a launch with these layout facts (the launcher calls it too)."""
        return self.CompileKey(
            block_size=block_size, block_stride_rows=block_stride_rows, K=K,
            block_n=K if _is_pow2(K) and K <= MAX_ROW_BLOCK else TILE_N, has_workspace=bool(has_workspace),
            count_valid=bool(count_valid), compact=bool(compact), dcp_size=dcp_size,
            dcp_interleave=dcp_interleave if dcp_size > 1 else 1, indices_aligned=bool(indices_aligned))

    def extra_kwargs(self, key: "ConvertReqIndexToGlobalIndex.CompileKey") -> dict:
        """``num_warps``: 8 elements per thread (two 128-bit vectors), 1 to 8 warps; at most 4 for
        a compacting row, whose scan and scattered store ran fastest so (H200, T=8192, K=2048)."""
        return dict(num_warps=max(1, min(4 if key.compact else 8, key.block_n // 256)))

    def get_warmup_keys(self, config, *, block_stride_rows: int, flavours: tuple[str, ...],
                        indices_aligned: tuple[bool, ...] | None = None,
                        ) -> list["ConvertReqIndexToGlobalIndex.CompileKey"]:
        """Every key of K1 for a model and a bound KV cache.

        Args:
            config: the :class:`~zerojit.kernels.mla.config.ModelConfig` (block_size, K =
                index_topk, S, I).
            block_stride_rows: the bound cache's physical block stride in rows (not the block size
                unless the cache is dense).
            flavours: names from :data:`FLAVOURS` the backend launches; the DCP flavours are
                skipped when ``config.dcp_size == 1``; the others run with S = 1.
            indices_aligned: the alignment classes of ``token_indices`` rows the caller produces;
                default: the class of a contiguous, freshly allocated ``[T, index_topk]`` buffer,
                ``(index_topk % 4 == 0,)``.

        Raises:
            ValueError: an unknown flavour name.
        """
        unknown = [f for f in flavours if f not in FLAVOUR_INPUTS]
        if unknown:
            raise ValueError(f"{self.name}: unknown flavour(s) {unknown}; known flavours are {FLAVOURS}")
        rows = [  # what each flavour sets, varying together; a DCP flavour needs S > 1
            dict(has_workspace=spec["has_workspace"], count_valid=spec["count_valid"], compact=spec["compact"],
                 dcp_size=config.dcp_size if spec["dcp"] else 1,
                 dcp_interleave=config.dcp_interleave if spec["dcp"] else 1)
            for spec in (FLAVOUR_INPUTS[f] for f in flavours) if config.dcp_size > 1 or not spec["dcp"]
        ]
        if not rows:
            return []
        if indices_aligned is None:
            indices_aligned = (config.index_topk % 4 == 0,)
        return trace_dispatch(self.dispatch)(zip_inputs(*rows), block_size=config.block_size, K=config.index_topk,
                                             block_stride_rows=block_stride_rows,
                                             indices_aligned=choices(*indices_aligned))

    def warmup_inputs(self, key: "ConvertReqIndexToGlobalIndex.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory)."""
        T, R, W = 16, 4, 17  # any sizes: T and R only size the grid / tables, W is a runtime int
        K = key.K  # aligned: row stride rounded up to 4 elements; else the base one element past 16 bytes
        ti = (WarmupTensor(torch.int32, (T, K), strides=(-(-K // 4) * 4, 1)) if key.indices_aligned
              else WarmupTensor(torch.int32, (T, K), aligned=False))
        inputs = dict(self.fact_inputs(key), req_id=WarmupTensor(torch.int32, (T,)), token_indices=ti,
                      block_table=WarmupTensor(torch.int32, (R, W)),
                      max_num_blocks_per_req=scalar_rep(W, specialize=False))
        if key.has_workspace:
            inputs["prefill_workspace_request_ids"] = WarmupTensor(torch.int32, (T,))
            inputs["prefill_workspace_starts"] = WarmupTensor(torch.int32, (R,))
        return inputs

    @checked_launcher(
        TensorArg("token_indices", 2),
        TensorArg("req_id", 1, length="token_indices.shape[0]", length_of="T (rows of token_indices)"),
        TensorArg("block_table", 2),
        IntArg("block_size", 1, INT32_MAX),
        IntArg("block_stride_rows", 1, INT32_MAX),
        Let("K", "token_indices.shape[1]"),
        Require("token_indices", "K >= 1",
                "needs at least one column (K >= 1), got shape {tuple(token_indices.shape)}"),
        Require("max_num_blocks_per_req",
                "is_int(max_num_blocks_per_req) and 0 <= max_num_blocks_per_req <= block_table.shape[1]",
                "must be an int in [0, block_table.shape[1]={block_table.shape[1]}], got {max_num_blocks_per_req!r}"),
        *DCP,
        Require("compact", "not (compact and dcp_size == 1)",
                "COMPACT_TO_FRONT is a DCP-only flavour: it needs dcp_size > 1"),
        Let("has_workspace", "prefill_workspace_request_ids is not None or prefill_workspace_starts is not None"),
        Require("prefill_workspace_request_ids", "not has_workspace or prefill_workspace_request_ids is not None",
                "pass both prefill workspace tensors or neither"),
        Require("prefill_workspace_starts", "not has_workspace or prefill_workspace_starts is not None",
                "pass both prefill workspace tensors or neither"),
        Require("prefill_workspace_request_ids", "not has_workspace or dcp_size == 1",
                "the prefill workspace is only supported with dcp_size == 1 (got {dcp_size})"),
        TensorArg("prefill_workspace_request_ids", 1, length="token_indices.shape[0]",
                  length_of="T (rows of token_indices)", when="has_workspace"),
        TensorArg("prefill_workspace_starts", 1, when="has_workspace"),
        RowStrideInt32("token_indices"),
        RowStrideInt32("block_table"),
        Let("indices_aligned", "token_indices.data_ptr() % 16 == 0 and token_indices.stride(0) % 4 == 0"),
    )
    def __call__(self, key, constexprs, *, req_id, block_table, token_indices, block_size, block_stride_rows,
                 max_num_blocks_per_req, prefill_workspace_request_ids=None, prefill_workspace_starts=None,
                 dcp_size=1, dcp_rank=0, dcp_interleave=1, count_valid=False, compact=False) -> LaunchSpec:
        """Launch K1; returns ``(out [T, K] int32, valid_counts [T] int32 or None)`` (see the class)."""
        T, K, device = token_indices.shape[0], key.K, token_indices.device
        tiled = key.block_n < K  # several programs per row: they reserve places in a -1 row, add to zeroed counts
        out = (torch.full((T, K), -1, dtype=torch.int32, device=device) if key.compact and tiled
               else torch.empty((T, K), dtype=torch.int32, device=device))
        counts = None
        if key.count_valid or (key.compact and tiled):
            counts = (torch.zeros if tiled else torch.empty)(T, dtype=torch.int32, device=device)
        return LaunchSpec(grid=(T, triton.cdiv(K, key.block_n)), returns=(out, counts if key.count_valid else None),
                          kwargs=dict(constexprs, out=out, valid_counts=counts, ti_stride=token_indices.stride(0),
                                      bt_stride=block_table.stride(0)))


#: The module-level instance serving code launches.
convert_req_index_to_global_index = ConvertReqIndexToGlobalIndex()
