"""K2 ``compressed_slot_mapping``: where each compressed-KV entry of this step is written.

A layer of compression ratio c keeps one compressed entry per c tokens, in a cache of its own
whose blocks hold ``cbs = block_size // c`` entries and lie ``block_stride_rows`` rows apart
(``cbs`` when the cache is dense). Token i of request b, at position
``pos = seq_lens[b] - qlen_b + i``, completes entry ``e = pos // c`` iff ``(pos + 1) % c == 0``
(docs KERNELS.md, K2)::

    S = 1:  slot = block_table[b, e // cbs] * stride + e % cbs
    S > 1:  v = e % (cbs*S); local iff (v // I) % S == r;
            slot = block_table[b, e // (cbs*S)] * stride + (v // (S*I)) * I + v % I
    otherwise (no entry, another rank's entry, padding): -1

Grid ``(R, splits)``: program ``(b, s)`` handles tiles ``s, s + splits, s + 2*splits, ...`` (of
:data:`TILE` tokens) of request b. KERNELS.md's contract names the grid ``(R,)``, one program
looping over its request's tokens; that serialises a long prefill (``R = 2, T = 8,192``: 64
tiles looped by two programs, 37 % of a copy's speed on an H200), and the spec lets the
implementation choose what a user would expect here: the same outputs and keys, faster.
``splits`` (:func:`split_grid`) comes from R and ``num_tokens`` on the host, no device read,
and reaches the kernel only as ``tl.num_programs(1)``: no argument, so no compile-key or
specialization change.

Every entry of ``slot_mapping[num_tokens]`` is written exactly once with no host-side fill: the
tokens of the requests cover ``[query_start_loc[0], query_start_loc[R])`` without gaps, the
programs of the *last* request also write -1 over the padding ``[query_start_loc[R],
num_tokens)`` and those of the *first* over ``[0, query_start_loc[0])``, each program the same
tiles of the padding as of its request (so a long padding tail is spread too). With ``R = 0``
nothing is launched and the launcher returns a -1 filled tensor (a plain ``torch.full``).

Compile key: ratio, tile, cbs, the compressed stride, S, I (KERNELS.md). The per-step ints (the
block table's row stride, num_tokens, r) are ``do_not_specialize`` and checked to fit int32; the
input pointers are ``do_not_specialize_on_alignment`` (each program reads a few scalars and
gathers block ids, where alignment buys nothing); the output is allocated here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import INT32_MAX, CheckedKernel, IntArg, Require, RowStrideInt32, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec
from zerojit.keyspace import trace_dispatch, zip_inputs
from zerojit.specialization import WarmupTensor, scalar_rep

from ._checks import DCP
from .shapes import cdiv

__all__ = ["MAX_SPLITS", "TILE", "CompressedSlotMapping", "compressed_slot_mapping", "split_grid"]

#: Tokens per loop iteration of one program.
TILE = 128
#: The most programs per request (grid axis 1, whose limit is 65,535): a tile each up to
#: 64K tokens for one request; past that each program loops over several tiles.
MAX_SPLITS = 512


def split_grid(num_reqs: int, num_tokens: int, *, tile: int = TILE, max_splits: int = MAX_SPLITS) -> tuple[int, int]:
    """K2's grid ``(R, splits)`` for a step of ``num_reqs`` requests and ``num_tokens`` tokens.

    ``splits = cdiv(num_tokens, R * tile)`` clamped to ``[1, max_splits]``: about one tile per
    program when the requests are of equal length, which uses the GPU's width on a long
    prefill yet keeps a decode batch (``R = 256, T = 256``) at one program per request. The
    per-request lengths are device values, so the host cannot balance unequal requests; a
    long request among short ones then loops over a few tiles per program. Both ints are
    host values already at hand (no device sync).

    Args:
        num_reqs: R >= 0 (R = 0: ``(0, 1)``, a grid that launches nothing).
        num_tokens: T >= 0, the output length (padding included).
        tile: tokens per loop iteration (the kernel's ``TILE``). max_splits: the cap, >= 1.
    """
    if num_reqs <= 0:
        return (0, 1)
    splits = cdiv(num_tokens, num_reqs * tile)
    if splits.__class__ is not int:  # symbolic (a custom op's fake launch under torch.compile): clamp
        # without comparing, or Dynamo guards on the token count (2 <= T <= R * tile) and recompiles
        return (num_reqs, torch.sym_max(1, torch.sym_min(splits, max_splits)))
    return (num_reqs, max(1, min(splits, max_splits)))


@triton.jit(
    do_not_specialize=["bt_stride", "num_tokens", "dcp_rank"],
    do_not_specialize_on_alignment=["query_start_loc_ptr", "seq_lens_ptr", "block_table_ptr"],
)
def _compressed_slot_mapping_kernel(
    query_start_loc_ptr,  # [R+1] int32
    seq_lens_ptr,  # [R] int32
    block_table_ptr,  # [>=R, W] int32, row stride bt_stride
    slot_mapping_ptr,  # [num_tokens] int64
    bt_stride,
    num_tokens,
    dcp_rank,
    RATIO: tl.constexpr,
    CBS: tl.constexpr,
    BLOCK_STRIDE_ROWS: tl.constexpr,
    DCP_SIZE: tl.constexpr,
    DCP_INTERLEAVE: tl.constexpr,
    TILE: tl.constexpr,
):
    b = tl.program_id(0)
    # Program (b, s) takes tiles s, s + splits, ... of request b; splits is the grid's own width.
    first = tl.program_id(1).to(tl.int64) * TILE
    step = tl.num_programs(1).to(tl.int64) * TILE
    q_start = tl.load(query_start_loc_ptr + b).to(tl.int64)
    q_end = tl.load(query_start_loc_ptr + b + 1).to(tl.int64)
    qlen = q_end - q_start
    first_pos = tl.load(seq_lens_ptr + b).to(tl.int64) - qlen
    bt_row = block_table_ptr + b.to(tl.int64) * bt_stride
    lanes = tl.arange(0, TILE)
    # while-loops, not range(): Triton 3.6's interpreter cannot take a runtime range() bound
    # with NumPy >= 2.4 (it calls int() on a 1-element array); the compiled code is the same.
    i0 = first
    while i0 < qlen:
        i = i0 + lanes
        in_req = i < qlen
        pos = first_pos + i
        has = in_req & (pos >= 0) & ((pos + 1) % RATIO == 0)
        e = pos // RATIO
        if DCP_SIZE > 1:
            v = e % (CBS * DCP_SIZE)
            has = has & ((v // DCP_INTERLEAVE) % DCP_SIZE == dcp_rank)
            blk = e // (CBS * DCP_SIZE)
            off = (v // (DCP_SIZE * DCP_INTERLEAVE)) * DCP_INTERLEAVE + v % DCP_INTERLEAVE
        else:
            blk = e // CBS
            off = e % CBS
        block_id = tl.load(bt_row + blk, mask=has, other=0)
        slot = tl.where(has, block_id.to(tl.int64) * BLOCK_STRIDE_ROWS + off, -1)
        tl.store(slot_mapping_ptr + q_start + i, slot, mask=in_req)
        i0 += step
    # Padding: the last request's programs cover the tail, the first's any head before request
    # 0, with the same tile stride (each padding entry once, a long tail spread over the splits).
    none = tl.full((TILE,), -1, tl.int64)
    if b == tl.num_programs(0) - 1:
        j0 = q_end + first
        while j0 < num_tokens:
            j = j0 + lanes
            tl.store(slot_mapping_ptr + j, none, mask=j < num_tokens)
            j0 += step
    if b == 0:
        j0 = first
        while j0 < q_start:
            j = j0 + lanes
            tl.store(slot_mapping_ptr + j, none, mask=j < q_start)
            j0 += step


class CompressedSlotMapping(CheckedKernel["CompressedSlotMapping.CompileKey"]):
    """K2: ``slot_mapping[t]`` = the compressed-cache slot token t's entry goes to, or -1.

    Call (keyword-only)::

        slot_mapping = compressed_slot_mapping(
            query_start_loc=..., seq_lens=..., block_table=..., num_tokens=T, ratio=4,
            block_size=64, block_stride_rows=16)

    Inputs (int32 tensors on one device):
        query_start_loc: ``[R+1]`` contiguous, non-decreasing token offsets of the requests,
            ``query_start_loc[R] <= num_tokens``.
        seq_lens: ``[R]`` contiguous, each request's length after this step (``>= qlen_b``).
        block_table: ``[>= R, W]`` block ids of the ratio-c compressed cache; columns
            contiguous, any row stride.
        num_tokens: the output length T (the step's tokens, padding included).
        ratio: c >= 1 dividing ``block_size``; ``cbs = block_size // ratio``.
        block_size: tokens per block of the uncompressed cache.
        block_stride_rows: rows of the compressed cache between consecutive block ids.
        dcp_size, dcp_rank, dcp_interleave: S, r, I (``cbs % I == 0`` under DCP).

    Returns:
        ``slot_mapping [num_tokens]`` int64, every entry written: the slot of the entry token t
        completes (rule in the module docstring), else -1 (no entry, another rank's entry, a
        padding token ``>= query_start_loc[R]`` or ``< query_start_loc[0]``).

    Grid ``(R, splits)`` (:func:`split_grid`), not KERNELS.md's ``(R,)``: a long prefill spreads
    over the GPU instead of one program looping over each request; the outputs and the compile
    keys are the same.

    Raises:
        KernelInputError: a wrong dtype, dimension, device or contiguity; ``query_start_loc``
            not of length ``R + 1``; fewer block-table rows than requests; ``num_tokens`` < 0
            or outside int32; a ratio that does not divide ``block_size``; a non-positive
            ``block_stride_rows``; a bad DCP triple (metadata only, no device sync).
    """

    kernel = _compressed_slot_mapping_kernel

    @dataclass(frozen=True)
    class CompileKey:
        """One compiled variant of K2 (each field is the kernel's upper-cased constexpr).

        Attributes:
            ratio: compression ratio c.
            tile: tokens per loop iteration.
            cbs: compressed entries per block, ``block_size // ratio``.
            block_stride_rows: the compressed cache's rows between consecutive block ids.
            dcp_size: S. dcp_interleave: I (1 when S = 1).
        """

        ratio: int
        tile: int
        cbs: int
        block_stride_rows: int
        dcp_size: int
        dcp_interleave: int

    def dispatch(self, *, ratio: int, block_size: int, block_stride_rows: int, dcp_size: int = 1,
                 dcp_interleave: int = 1) -> "CompressedSlotMapping.CompileKey":
        """The compile key of a launch with these layout facts (the launcher calls it too)."""
        return self.CompileKey(ratio=ratio, tile=TILE, cbs=block_size // ratio, block_stride_rows=block_stride_rows,
                               dcp_size=dcp_size, dcp_interleave=dcp_interleave if dcp_size > 1 else 1)

    def get_warmup_keys(self, config, *, compressed_block_strides=()) -> list["CompressedSlotMapping.CompileKey"]:
        """One key per compressed ratio of the model (``config.compressed_ratios``: ratios > 1 and
        ``index_kpool``); none when there is no such ratio.

        Args:
            config: the :class:`~zerojit.kernels.mla.config.ModelConfig`.
            compressed_block_strides: ``((ratio, block_stride_rows), ...)`` of the bound compressed
                caches; a ratio missing from it uses the dense stride ``block_size // ratio``.
        """
        strides = dict(compressed_block_strides)
        caches = [dict(ratio=c, block_stride_rows=strides.get(c, config.block_size // c))  # vary together
                  for c in config.compressed_ratios]
        if not caches:
            return []
        return trace_dispatch(self.dispatch)(zip_inputs(*caches), block_size=config.block_size,
                                             dcp_size=config.dcp_size, dcp_interleave=config.dcp_interleave)

    def warmup_inputs(self, key: "CompressedSlotMapping.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory)."""
        R, W = 4, 17
        return dict(self.fact_inputs(key), query_start_loc=WarmupTensor(torch.int32, (R + 1,)),
                    seq_lens=WarmupTensor(torch.int32, (R,)), block_table=WarmupTensor(torch.int32, (R, W)),
                    num_tokens=scalar_rep(100, specialize=False), block_size=key.cbs * key.ratio)

    @checked_launcher(
        TensorArg("seq_lens", 1),
        TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
        TensorArg("block_table", 2),
        Require("block_table", "block_table.shape[0] >= len(seq_lens)",
                "has {block_table.shape[0]} rows, fewer than the R = {len(seq_lens)} requests"),
        RowStrideInt32("block_table"),
        IntArg("num_tokens", high=INT32_MAX),
        IntArg("block_size", low=1),
        Require("ratio", "is_int(ratio) and ratio >= 1 and block_size % ratio == 0",
                "must be an int >= 1 dividing block_size={block_size}, got {ratio!r}"),
        IntArg("block_stride_rows", 1, INT32_MAX),
        *DCP,
        Require("dcp_interleave", "dcp_size <= 1 or (block_size // ratio) % dcp_interleave == 0",
                "must divide block_size // ratio = {block_size // ratio} under DCP, got {dcp_interleave}"),
    )
    def __call__(self, key, constexprs, *, query_start_loc, seq_lens, block_table, num_tokens, ratio, block_size,
                 block_stride_rows, dcp_size=1, dcp_rank=0, dcp_interleave=1) -> LaunchSpec:
        """Launch K2; returns ``slot_mapping [num_tokens]`` int64 (see the class)."""
        R, device = seq_lens.shape[0], seq_lens.device
        out = (torch.full((num_tokens,), -1, dtype=torch.int64, device=device) if R == 0  # no program: fill here
               else torch.empty((num_tokens,), dtype=torch.int64, device=device))
        return LaunchSpec(grid=split_grid(R, num_tokens),
                          kwargs=dict(constexprs, slot_mapping=out, bt_stride=block_table.stride(0)), returns=out)


#: The module-level instance serving code launches.
compressed_slot_mapping = CompressedSlotMapping()
