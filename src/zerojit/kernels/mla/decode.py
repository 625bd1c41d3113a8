"""K3 ``prepare_uniform_decode``: flatten a uniform decode batch into single-token rows.

Every decode request has the same query length ``Lq = 1 + num_speculative_tokens``. The batch
becomes ``Nd = num_decodes * Lq`` rows, one per query token (docs KERNELS.md, K3)::

    expanded_seq_lens[idx]          = max(seq_lens[idx // Lq] - Lq + idx % Lq + 1, 0)
    expanded_block_table[idx, :W]   = block_table[idx // Lq, :]          # W = block_table width

for ``idx < Nd`` only: rows ``>= Nd`` and columns ``>= W`` of the (maximum-sized) buffers are never
touched. Grid ``(Nd,)`` from the live count, never from the buffers' capacity.

Config-free: nothing of the model shapes the code. The compile key is the tile size and the one
alignment fact that matters, whether both block tables' rows start on 16-byte boundaries (then
the copy uses 128-bit vectors); every int (row strides, W, Lq) is ``do_not_specialize`` and
checked to fit int32, every pointer is ``do_not_specialize_on_alignment``. So the kernel can be
registered with no request at all and warmed for the alignments the runner can produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import INT32_MAX, CheckedKernel, IntArg, Let, Require, RowStrideInt32, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor, scalar_rep

__all__ = ["TILE", "PrepareUniformDecode", "prepare_uniform_decode"]

#: Block-table columns copied per loop iteration.
TILE = 512


@triton.jit(
    do_not_specialize=["bt_stride", "ebt_stride", "width", "query_len"],
    do_not_specialize_on_alignment=[
        "seq_lens_ptr",
        "block_table_ptr",
        "expanded_seq_lens_ptr",
        "expanded_block_table_ptr",
    ],
)
def _prepare_uniform_decode_kernel(
    seq_lens_ptr,  # [num_decodes] int32
    block_table_ptr,  # [>= num_decodes, W] int32, row stride bt_stride
    expanded_seq_lens_ptr,  # [>= Nd] int32
    expanded_block_table_ptr,  # [>= Nd, >= W] int32, row stride ebt_stride
    bt_stride,
    ebt_stride,
    width,
    query_len,
    TILE: tl.constexpr,
    ALIGNED: tl.constexpr,
):
    idx = tl.program_id(0)
    req = idx // query_len
    seq = tl.load(seq_lens_ptr + req)
    tl.store(expanded_seq_lens_ptr + idx, tl.maximum(seq - query_len + (idx - req * query_len) + 1, 0))

    src = block_table_ptr + req.to(tl.int64) * bt_stride
    dst = expanded_block_table_ptr + idx.to(tl.int64) * ebt_stride
    if ALIGNED:  # both rows start on 16-byte boundaries: 128-bit vectors
        src = tl.multiple_of(src, 16)
        dst = tl.multiple_of(dst, 16)
    cols = tl.arange(0, TILE)
    full = (width // TILE) * TILE
    # Whole tiles unmasked (vectorisable), then the masked tail. A while-loop, not range():
    # Triton 3.6's interpreter cannot take a runtime range() bound with NumPy >= 2.4.
    c0 = 0
    while c0 < full:
        c = c0 + cols
        tl.store(dst + c, tl.load(src + c))
        c0 += TILE
    c = full + cols
    m = c < width
    tl.store(dst + c, tl.load(src + c, mask=m), mask=m)


class PrepareUniformDecode(CheckedKernel["PrepareUniformDecode.CompileKey"]):
    """K3: expand ``num_decodes`` requests of query length Lq into ``Nd`` single-token rows.

    Call (keyword-only)::

        expanded_seq_lens, expanded_block_table = prepare_uniform_decode(
            seq_lens=..., block_table=..., expanded_seq_lens=buf_s, expanded_block_table=buf_bt,
            query_len=Lq, num_decode_tokens=Nd)

    Inputs (int32 tensors on one device):
        seq_lens: ``[>= cdiv(Nd, Lq)]`` contiguous, each request's length after this step.
        block_table: ``[>= cdiv(Nd, Lq), W]`` columns contiguous, any row stride.
        expanded_seq_lens: ``[>= Nd]`` contiguous output buffer.
        expanded_block_table: ``[>= Nd, >= W]`` output buffer, columns contiguous.
        query_len: Lq >= 1 (KERNELS.md has Lq > 1; Lq = 1 is a plain copy).
        num_decode_tokens: Nd >= 0, the live row count (the grid).

    Returns:
        ``(expanded_seq_lens, expanded_block_table)``, the buffers given, written in place for
        ``idx < Nd`` by the rule in the module docstring; nothing else in them changes.

    Raises:
        KernelInputError: a wrong dtype, dimension, device or contiguity; buffers with fewer
            than Nd rows or fewer than W columns; fewer requests than ``cdiv(Nd, Lq)``;
            ``query_len`` < 1 or ``num_decode_tokens`` < 0; an int or row stride outside int32
            (metadata only, no device sync).
    """

    kernel = _prepare_uniform_decode_kernel

    @dataclass(frozen=True)
    class CompileKey:
        """One compiled variant of K3 (each field is the kernel's upper-cased constexpr).

        Attributes:
            tile: block-table columns per loop iteration.
            aligned: both block tables' rows start on 16-byte boundaries (base addresses aligned
                and row strides multiples of 4 elements).
        """

        tile: int
        aligned: bool

    def dispatch(self, *, aligned: bool = True) -> "PrepareUniformDecode.CompileKey":
        """The compile key of a launch whose block-table rows are (not) 16-byte aligned."""
        return self.CompileKey(tile=TILE, aligned=bool(aligned))

    def get_warmup_keys(self, *, aligned: tuple[bool, ...] = (True,)) -> list["PrepareUniformDecode.CompileKey"]:
        """One key per alignment class of the block tables the caller can produce.

        Config-free (no ``config`` parameter), so ``register_warmup()`` with no request warms the
        aligned variant.
        """
        return trace_dispatch(self.dispatch)(aligned=choices(*aligned))

    def warmup_inputs(self, key: "PrepareUniformDecode.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory)."""
        R, Lq, W = 4, 2, 20  # W a multiple of 4: rows of a contiguous table stay aligned
        return dict(seq_lens=WarmupTensor(torch.int32, (R,)), expanded_seq_lens=WarmupTensor(torch.int32, (R * Lq,)),
                    block_table=WarmupTensor(torch.int32, (R, W), aligned=key.aligned),
                    expanded_block_table=WarmupTensor(torch.int32, (R * Lq, W)),
                    query_len=scalar_rep(Lq, specialize=False), num_decode_tokens=R * Lq)

    @checked_launcher(
        TensorArg("seq_lens", 1),
        TensorArg("block_table", 2),
        TensorArg("expanded_seq_lens", 1),
        TensorArg("expanded_block_table", 2),
        IntArg("query_len", 1, INT32_MAX),
        IntArg("num_decode_tokens", high=INT32_MAX),
        Require("expanded_seq_lens", "expanded_seq_lens.shape[0] >= num_decode_tokens",
                "holds {expanded_seq_lens.shape[0]} rows, num_decode_tokens={num_decode_tokens}"),
        Require("expanded_block_table", "expanded_block_table.shape[0] >= num_decode_tokens",
                "holds {expanded_block_table.shape[0]} rows, num_decode_tokens={num_decode_tokens}"),
        Require("expanded_block_table", "expanded_block_table.shape[1] >= block_table.shape[1]",
                "has {expanded_block_table.shape[1]} columns, block_table has {block_table.shape[1]}"),
        Let("need", "-(-num_decode_tokens // query_len)"),  # requests the live rows come from
        Require("seq_lens", "seq_lens.shape[0] >= need", "has {seq_lens.shape[0]} requests but "
                "num_decode_tokens={num_decode_tokens} with query_len={query_len} needs {need}"),
        Require("block_table", "block_table.shape[0] >= need", "has {block_table.shape[0]} requests but "
                "num_decode_tokens={num_decode_tokens} with query_len={query_len} needs {need}"),
        RowStrideInt32("block_table"),
        RowStrideInt32("expanded_block_table"),
        Let("aligned", "block_table.data_ptr() % 16 == 0 and block_table.stride(0) % 4 == 0"
                       " and expanded_block_table.data_ptr() % 16 == 0 and expanded_block_table.stride(0) % 4 == 0"),
        host_only=("num_decode_tokens",),
    )
    def __call__(self, key, constexprs, *, seq_lens, block_table, expanded_seq_lens, expanded_block_table, query_len,
                 num_decode_tokens) -> LaunchSpec:
        """Launch K3 over the ``num_decode_tokens`` live rows; returns the two buffers (see the class)."""
        return LaunchSpec(
            grid=(num_decode_tokens,),
            kwargs=dict(constexprs, bt_stride=block_table.stride(0), ebt_stride=expanded_block_table.stride(0),
                        width=block_table.shape[1]),
            returns=(expanded_seq_lens, expanded_block_table),
        )


#: The module-level instance serving code launches.
prepare_uniform_decode = PrepareUniformDecode()
