"""Sliding-window attention indices: K6 ``compute_swa_indices_and_lens``.

Each token row of a step gets the KV-cache slots of its sliding window and their count (docs
KERNELS.md, K6). Row ``pid < num_tokens`` is token ``tok = pid + token_offset``:

* ``slot_mapping[tok] < 0`` (padding): the row is all -1 and its length 0;
* otherwise ``b = token_to_req[tok]``,
  ``pos = seq_lens[b] - qlen_b + (tok - query_start_loc[b])`` and
  - causal: ``s = max(pos - Wn + 1, 0)``, ``len = pos + 1 - s``, ``Wout = Wn``;
  - non-causal (speculative draft rows: every token of a request sees the same window, from
    the first query token's window start to the request's last token):
    ``s = max(seq_lens[b] - qlen_b - Wn + 1, 0)``, ``len = seq_lens[b] - s``,
    ``Wout = roundup(Wn - 1 + Lmax, 64)``, ``Lmax = 1 + num_speculative_tokens``;
* entry ``k < len`` is the slot of position ``p = s + k``:
  ``block_table[b, p // block_size] * block_stride_rows + p % block_size`` (computed in int64,
  stored as int32); every entry from ``len`` to ``Wout`` is -1, written by the kernel on every
  call, so a row never holds a stale value from an earlier step.

Compile key: Wn, block_size, block_stride_rows (the cache layout: it differs from block_size
for a packed cache), causal, Wout and the tile. ``num_tokens``, ``token_offset`` and the block
table's row stride vary per step and are ``do_not_specialize``; the input pointers are
``do_not_specialize_on_alignment`` (views of them must not compile new variants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
import triton
import triton.language as tl

from zerojit import capture as _capture
from zerojit.inputs import BoolArg, CheckedKernel, IntArg, Let, Require, TensorArg, checked_launcher
from zerojit.kernel import KernelInputError, LaunchSpec
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor, scalar_rep
from .shapes import cdiv, next_power_of_2, swa_width

__all__ = ["ComputeSwaIndicesAndLens", "compute_swa_indices_and_lens"]

_TILE_ELEMS = 2048  # rows x columns per program and column tile
_MAX_BLOCK_W = 128
_NUM_WARPS = 4


@triton.jit(
    do_not_specialize=["num_tokens", "token_offset", "block_table_stride"],
    do_not_specialize_on_alignment=["token_to_req_ptr", "slot_mapping_ptr", "seq_lens_ptr", "query_start_loc_ptr",
                                    "block_table_ptr"],
)
def _compute_swa_indices_and_lens_kernel(
    token_to_req_ptr, slot_mapping_ptr, seq_lens_ptr, query_start_loc_ptr, block_table_ptr,  # inputs
    swa_indices_ptr, swa_lens_ptr,  # outputs [num_tokens, WOUT], [num_tokens] int32
    num_tokens, token_offset, block_table_stride,
    sliding_window: tl.constexpr, block_size: tl.constexpr, block_stride_rows: tl.constexpr,
    causal: tl.constexpr, WOUT: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    row_ok = rows < num_tokens
    tok = rows + token_offset
    live = row_ok & (tl.load(slot_mapping_ptr + tok, mask=row_ok, other=-1) >= 0)
    b = tl.load(token_to_req_ptr + tok, mask=live, other=0)
    seq = tl.load(seq_lens_ptr + b, mask=live, other=0)
    q_start = tl.load(query_start_loc_ptr + b, mask=live, other=0)
    qlen = tl.load(query_start_loc_ptr + b + 1, mask=live, other=0) - q_start
    if causal:
        pos = seq - qlen + (tok - q_start)
        start = tl.maximum(pos - sliding_window + 1, 0)
        length = pos + 1 - start
    else:
        start = tl.maximum(seq - qlen - sliding_window + 1, 0)
        length = seq - start
    length = tl.where(live, length, 0)
    tl.store(swa_lens_ptr + rows, length, mask=row_ok)

    table_row = block_table_ptr + b.to(tl.int64) * block_table_stride
    out_row = swa_indices_ptr + rows.to(tl.int64) * WOUT
    for w0 in tl.static_range(0, WOUT, BLOCK_W):
        k = w0 + tl.arange(0, BLOCK_W)
        used = k[None, :] < length[:, None]
        p = start.to(tl.int64)[:, None] + k[None, :]
        block_id = tl.load(table_row[:, None] + p // block_size, mask=used, other=0)
        slot = block_id.to(tl.int64) * block_stride_rows + p % block_size
        slot = tl.where(used, slot, -1)
        tl.store(out_row[:, None] + k[None, :], slot.to(tl.int32), mask=row_ok[:, None] & (k[None, :] < WOUT))


class ComputeSwaIndicesAndLens(CheckedKernel["ComputeSwaIndicesAndLens.CompileKey"]):
    """K6: each token row's sliding-window KV slots and their count (rule: module docstring).

    Call with keyword arguments:
        token_to_req: ``[>= token_offset + num_tokens]`` int32 request of each token.
        slot_mapping: ``[>= token_offset + num_tokens]`` int64; < 0 marks a padding token.
        seq_lens: ``[R]`` int32 lengths after this step. query_start_loc: ``[R+1]`` int32.
        block_table: ``[R', width]`` int32 block ids (rows contiguous; any row stride).
        num_tokens: rows to produce (the grid's live count). token_offset: first token.
        sliding_window: Wn. block_size: tokens per block. block_stride_rows: cache rows between
            consecutive block ids (the allocated cache's stride; block_size only when dense).
        causal: False for the non-causal draft variant (speculative decode rows only).
        num_speculative_tokens: sets ``Lmax = 1 + num_speculative_tokens`` and, non-causal,
            ``Wout``.
        max_query_len: host-side int, the largest query length among the requests of the live
            rows (optional; see below).

    Returns:
        ``(swa_indices [num_tokens, Wout] int32, swa_lens [num_tokens] int32)``.

    Non-causal length check: a non-causal row whose request has ``qlen_b > Lmax`` is an error.
    The kernel cannot raise, so the check runs on the host before the launch: against
    ``max_query_len`` when the caller gives it (the runner knows its query lengths on the host:
    no device access at all), otherwise from the tensors, exactly as the reference does (the
    requests of the rows in range whose ``slot_mapping`` is >= 0). On CPU tensors that is free;
    on a GPU it costs one device sync, so serving code should pass ``max_query_len``.

    Grid ``(cdiv(num_tokens, BLOCK_T),)``: ``BLOCK_T`` token rows per program, columns in tiles
    of ``BLOCK_W`` (Wout need not be a power of two).

    Raises:
        KernelInputError: a tensor of the wrong dtype (int32; slot_mapping int64), ndim, length
            or device, or with a non-contiguous last dimension; negative counts; rows
            ``token_offset + num_tokens`` past ``slot_mapping`` / ``token_to_req``; a
            non-causal row too long (argument ``max_query_len`` or ``query_start_loc``).
    """

    kernel = _compute_swa_indices_and_lens_kernel  # name: "compute_swa_indices_and_lens"

    @dataclass(frozen=True)
    class CompileKey:
        """sliding_window: Wn; block_size; block_stride_rows; causal; wout: output columns;
        block_t/block_w: rows/columns of a tile; num_warps: launch option."""

        sliding_window: int
        block_size: int
        block_stride_rows: int
        causal: bool
        wout: int
        block_t: int
        block_w: int
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, sliding_window: int, block_size: int, block_stride_rows: int, causal: bool = True,
                 num_speculative_tokens: int = 0) -> "ComputeSwaIndicesAndLens.CompileKey":
        """The key of a launch (Wout from ``swa_width``; the tile from Wout)."""
        wout = swa_width(sliding_window, bool(causal), num_speculative_tokens)
        block_w = min(next_power_of_2(wout), _MAX_BLOCK_W)
        return self.CompileKey(sliding_window=sliding_window, block_size=block_size,
                               block_stride_rows=block_stride_rows, causal=bool(causal), wout=wout,
                               block_t=max(_TILE_ELEMS // block_w, 1), block_w=block_w)

    def get_warmup_keys(self, config, *, block_stride_rows: int | Iterable[int],
                        causal=(True,)) -> list["ComputeSwaIndicesAndLens.CompileKey"]:
        """Config Wn/block_size x the registered cache stride(s) x the causal variants used.

        ``causal`` lists the variants the attention backend launches; non-causal needs
        speculative decoding, so ``causal=False`` gives no key when
        ``config.num_speculative_tokens == 0`` (nothing could reach it).
        """
        strides = (block_stride_rows,) if isinstance(block_stride_rows, int) else tuple(block_stride_rows)
        return trace_dispatch(self.dispatch)(
            sliding_window=config.sliding_window, block_size=config.block_size, block_stride_rows=choices(*strides),
            causal=choices(*causal), num_speculative_tokens=config.num_speculative_tokens,
            when=lambda causal, num_speculative_tokens, **_: causal or num_speculative_tokens > 0,
        )

    def warmup_inputs(self, key: "ComputeSwaIndicesAndLens.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory; the host-side query length)."""
        # wout = roundup(Wn - 1 + Lmax, 64) with Lmax = wout - Wn + 1 gives key.wout back.
        spec = 0 if key.causal else key.wout - key.sliding_window
        i32 = scalar_rep(0, specialize=False)  # num_tokens, token_offset, table row stride: do_not_specialize
        return dict(self.fact_inputs(key), token_to_req=WarmupTensor(torch.int32, (64,)),
                    slot_mapping=WarmupTensor(torch.int64, (64,)), seq_lens=WarmupTensor(torch.int32, (4,)),
                    query_start_loc=WarmupTensor(torch.int32, (5,)), block_table=WarmupTensor(torch.int32, (4, i32)),
                    num_tokens=i32, token_offset=i32, num_speculative_tokens=spec, max_query_len=1)

    @checked_launcher(
        TensorArg("slot_mapping", 1, torch.int64),
        TensorArg("token_to_req", 1),
        TensorArg("seq_lens", 1),
        TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
        TensorArg("block_table", 2),
        IntArg("num_tokens"),
        IntArg("token_offset"),
        Require("slot_mapping", "token_offset + num_tokens <= slot_mapping.shape[0]",
                "has {slot_mapping.shape[0]} entries but rows token_offset={token_offset} + "
                "num_tokens={num_tokens} need {token_offset + num_tokens}"),
        Require("token_to_req", "token_offset + num_tokens <= token_to_req.shape[0]",
                "has {token_to_req.shape[0]} entries but rows token_offset={token_offset} + "
                "num_tokens={num_tokens} need {token_offset + num_tokens}"),
        IntArg("sliding_window", low=1),
        IntArg("block_size", low=1),
        IntArg("block_stride_rows", low=1),
        IntArg("num_speculative_tokens"),
        BoolArg("causal"),
        Let("host_qlen", "not causal and num_tokens and max_query_len is not None"),  # Lmax checked on the host
        IntArg("max_query_len", when="host_qlen"),
        Require("max_query_len", "max_query_len <= 1 + num_speculative_tokens",
                "non-causal rows need every query length <= Lmax = 1 + num_speculative_tokens = "
                "{1 + num_speculative_tokens}, got max_query_len={max_query_len}; use the causal variant or raise "
                "num_speculative_tokens", when="host_qlen"),
        host_only=("max_query_len",),
    )
    def __call__(self, key, constexprs, *, token_to_req, slot_mapping, seq_lens, query_start_loc, block_table,
                 num_tokens: int, token_offset: int, sliding_window: int, block_size: int, block_stride_rows: int,
                 causal: bool = True, num_speculative_tokens: int = 0, max_query_len: int | None = None) -> LaunchSpec:
        """Launch K6; returns ``(swa_indices, swa_lens)`` (see the class)."""
        if not causal and num_tokens and max_query_len is None and query_start_loc.shape[0] > 1:
            if _capture.capturing():  # reading query_start_loc on the host would sync the capturing stream
                raise KernelInputError(self.name, "max_query_len", "must be given during a CUDA-graph capture (the "
                                       "largest query length, 1 + num_speculative_tokens for a decode batch): "
                                       "without it the launcher reads query_start_loc on the host, which a capture "
                                       "forbids")
            rows = slice(token_offset, token_offset + num_tokens)  # the requests of the live rows, as the reference
            req = token_to_req[rows][slot_mapping[rows] >= 0].long()
            qlens = (query_start_loc[1:] - query_start_loc[:-1]).long()[req.clamp(0, query_start_loc.shape[0] - 2)]
            if req.numel() and int(qlens.max()) > 1 + num_speculative_tokens:  # a device sync on a GPU
                worst = int(qlens.argmax())
                raise KernelInputError(
                    self.name, "query_start_loc", f"non-causal rows need qlen <= Lmax = 1 + num_speculative_tokens = "
                    f"{1 + num_speculative_tokens}, but request {int(req[worst])} has qlen {int(qlens[worst])}; use "
                    "the causal variant or raise num_speculative_tokens")
        dev = slot_mapping.device
        swa_indices = torch.empty((num_tokens, key.wout), dtype=torch.int32, device=dev)
        swa_lens = torch.empty(num_tokens, dtype=torch.int32, device=dev)
        return LaunchSpec(grid=(cdiv(num_tokens, key.block_t),), returns=(swa_indices, swa_lens), kwargs=dict(
            constexprs, swa_indices=swa_indices, swa_lens=swa_lens, block_table_stride=block_table.stride(0)))


#: The process's K6 launcher.
compute_swa_indices_and_lens = ComputeSwaIndicesAndLens()
