"""Top-k + sliding-window index rows for prefill: K7 ``combine_topk_swa_indices``.

For a chunk of prefill requests, each token gets one index row over a gathered attention
buffer in which request ``b`` owns rows ``[b*row_stride, (b+1)*row_stride)``: its compressed KV
at offsets ``[0, swa_offset)``, its gathered window tokens (the last ``gather_lens[b]`` tokens
of the sequence, K5's output) from ``swa_offset`` on (docs KERNELS.md, K7).

Token ``t`` of request ``b``: ``pos = seq_lens[b] - qlen_b + (t - query_start_loc[b])``,
``tk = min((pos + 1) // c, TOP_K)``, ``sw = min(pos + 1, Wn)``;

* ``combined[t, k] = topk[t, k] + row_stride*b`` for ``k < tk`` (a -1 stays -1);
* ``combined[t, tk + k] = row_stride*b + swa_offset + (pos - sw + 1 + k) - (seq_lens[b] -
  gather_lens[b])`` for ``k < sw``;
* -1 everywhere else (rows outside the requests included), ``lens[t] = tk + sw`` (0 outside).

Window-only layers (c = 1) have ``TOP_K = 0`` and no top-k input; ratio-128 layers have no
indexer: ``TOP_K = cdiv(max_model_len, 128)`` and the caller passes ``topk[t, k] = k`` (an
``arange(TOP_K).expand(T, TOP_K)`` view with row stride 0 is fine).

Compile key: TOP_K, c, Wn (configuration, constexpr), the padded width
``roundup(TOP_K + Wn, 128)`` and the tile. Token and request counts, the top-k row stride,
``row_stride`` and ``swa_offset`` vary per step and are ``do_not_specialize``; input pointers
are ``do_not_specialize_on_alignment``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import CheckedKernel, IntArg, Require, TensorArg, checked_launcher
from zerojit.kernel import KernelInputError, LaunchSpec
from zerojit.keyspace import trace_dispatch, zip_inputs
from zerojit.specialization import WarmupTensor, scalar_rep
from ._device import segment_of, segment_search_steps
from .shapes import cdiv, padded_width

__all__ = ["CombineTopkSwaIndices", "combine_topk_swa_indices"]

_BLOCK_T = 16  # token rows per tile
_BLOCK_W = 128  # columns per tile (the padded width is a multiple of 128)
_NUM_WARPS = 4


@triton.jit(
    do_not_specialize=["num_tokens", "num_reqs", "search_steps", "topk_stride", "row_stride", "swa_offset"],
    do_not_specialize_on_alignment=["topk_ptr", "query_start_loc_ptr", "seq_lens_ptr", "gather_lens_ptr"],
)
def _combine_topk_swa_indices_kernel(
    topk_ptr, query_start_loc_ptr, seq_lens_ptr, gather_lens_ptr,  # inputs (topk None when top_k == 0)
    combined_ptr, lens_ptr,  # outputs [num_tokens, WIDTH], [num_tokens] int32
    num_tokens, num_reqs, search_steps, topk_stride, row_stride, swa_offset,
    top_k: tl.constexpr, ratio: tl.constexpr, sliding_window: tl.constexpr, WIDTH: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr,
):
    # Program (i, j): token rows [i*BLOCK_T, (i+1)*BLOCK_T) x columns [j*BLOCK_W, (j+1)*BLOCK_W).
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < num_tokens
    in_req = t_ok & (t >= tl.load(query_start_loc_ptr)) & (t < tl.load(query_start_loc_ptr + num_reqs))
    b = segment_of(query_start_loc_ptr, t, num_reqs, search_steps, in_req)
    q_start = tl.load(query_start_loc_ptr + b, mask=in_req, other=0)
    qlen = tl.load(query_start_loc_ptr + b + 1, mask=in_req, other=0) - q_start
    seq = tl.load(seq_lens_ptr + b, mask=in_req, other=0)
    gathered = tl.load(gather_lens_ptr + b, mask=in_req, other=0)
    pos = seq - qlen + (t - q_start)
    tk = tl.where(in_req, tl.minimum((pos + 1) // ratio, top_k), 0)
    sw = tl.where(in_req, tl.minimum(pos + 1, sliding_window), 0)
    if tl.program_id(1) == 0:
        tl.store(lens_ptr + t, tk + sw, mask=t_ok)

    base = b.to(tl.int64) * row_stride
    window0 = base + swa_offset + (pos - sw + 1 - (seq - gathered))  # combined value at column tk
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    val = tl.full((BLOCK_T, BLOCK_W), -1, tl.int64)
    if top_k > 0:
        in_topk = cols < tk[:, None]
        picked = tl.load(topk_ptr + t.to(tl.int64)[:, None] * topk_stride + cols, mask=in_topk, other=-1)
        val = tl.where(in_topk & (picked != -1), picked.to(tl.int64) + base[:, None], val)
    rel = cols - tk[:, None]
    in_window = (rel >= 0) & (rel < sw[:, None])
    val = tl.where(in_window, window0[:, None] + rel, val)
    out = combined_ptr + t.to(tl.int64)[:, None] * WIDTH + cols
    tl.store(out, val.to(tl.int32), mask=t_ok[:, None] & (cols < WIDTH))


class CombineTopkSwaIndices(CheckedKernel["CombineTopkSwaIndices.CompileKey"]):
    """K7: one index row per prefill token, its top-k compressed entries then its window.

    Call with keyword arguments:
        topk: ``[>= num_tokens, >= top_k]`` int32 request-local compressed indices, -1 padded
            (columns contiguous, any row stride), or None when ``top_k == 0`` (ignored then).
        query_start_loc: ``[n+1]`` int32. seq_lens, gather_lens: ``[n]`` int32.
        num_tokens: T, rows of the output (the grid's live count).
        row_stride, swa_offset: the gathered buffer's layout (``do_not_specialize``).
        top_k: TOP_K. ratio: c. sliding_window: Wn (constexpr).
        max_gather_len: host-side ``max(gather_lens)`` (optional).
        max_compressed_len: host-side largest compressed length ``max(seq_lens // ratio)``
            (optional).

    Returns:
        ``(combined [num_tokens, roundup(top_k + Wn, 128)] int32, lens [num_tokens] int32)``
        (rule: module docstring).

    Layout checks: ``row_stride >= swa_offset + max(gather_lens)`` and, when ``top_k > 0``,
    ``swa_offset >= max(seq_lens // ratio)``. They need values that live in device memory, so
    they run against ``max_gather_len`` / ``max_compressed_len`` when the caller passes them (no
    device access), and are derived from the tensors when those live on the CPU (free: dry
    launches, the interpreter); on a GPU without them they are skipped (no hidden sync).

    Grid ``(cdiv(T, 16), width // 128)``: tiles of 16 tokens x 128 columns, each token finding
    its request by binary search in ``query_start_loc``. KERNELS.md says ``(n, tiles)``; a
    token-major grid follows the live token count instead, so one long prefill spreads over the
    GPU, and it writes every output element exactly once (no separate -1 fill).

    Raises:
        KernelInputError: ``top_k > 0`` with ``topk`` None; a tensor of the wrong dtype (int32),
            ndim, shape or device, or with non-contiguous columns; negative ints; ``row_stride``
            too small (argument ``row_stride``); ``swa_offset`` below the largest compressed
            length (argument ``swa_offset``).
    """

    kernel = _combine_topk_swa_indices_kernel  # name: "combine_topk_swa_indices"

    @dataclass(frozen=True)
    class CompileKey:
        """top_k: TOP_K; ratio: c; sliding_window: Wn; width: padded output columns;
        block_t/block_w: tile; num_warps: launch option."""

        top_k: int
        ratio: int
        sliding_window: int
        width: int
        block_t: int = _BLOCK_T
        block_w: int = _BLOCK_W
        num_warps: int = _NUM_WARPS

    def dispatch(self, *, top_k: int, ratio: int, sliding_window: int) -> "CombineTopkSwaIndices.CompileKey":
        """The key of a launch for a layer of ratio c with TOP_K and window Wn."""
        return self.CompileKey(top_k=top_k, ratio=ratio, sliding_window=sliding_window,
                               width=padded_width(top_k, sliding_window))

    def get_warmup_keys(self, config) -> list["CombineTopkSwaIndices.CompileKey"]:
        """Each distinct (c, TOP_K) pair of the config's layers (``config.topk_width(c)``)."""
        pairs = dict.fromkeys((c, config.topk_width(c)) for c in config.compress_ratios)
        return trace_dispatch(self.dispatch)(zip_inputs(*(dict(ratio=c, top_k=k) for c, k in pairs)),
                                             sliding_window=config.sliding_window)

    def warmup_inputs(self, key: "CombineTopkSwaIndices.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory; no top-k input when TOP_K = 0)."""
        i32 = scalar_rep(0, specialize=False)  # num_tokens, row_stride, swa_offset, top-k row stride
        return dict(self.fact_inputs(key), topk=WarmupTensor(torch.int32, (i32, key.top_k)) if key.top_k else None,
                    query_start_loc=WarmupTensor(torch.int32, (5,)), seq_lens=WarmupTensor(torch.int32, (4,)),
                    gather_lens=WarmupTensor(torch.int32, (4,)), num_tokens=i32, row_stride=i32, swa_offset=i32)

    @checked_launcher(
        TensorArg("seq_lens", 1),
        TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
        TensorArg("gather_lens", 1, length="len(seq_lens)"),
        IntArg("num_tokens"),
        IntArg("row_stride"),
        IntArg("swa_offset"),
        IntArg("top_k"),
        IntArg("ratio", low=1),
        IntArg("sliding_window", low=1),
        Require("topk", "top_k <= 0 or topk is not None",
                "is None but top_k={top_k} > 0; pass the top-k indices (topk[t, k] = k for a layer without indexer)"),
        TensorArg("topk", 2, when="top_k > 0"),
        Require("topk", "top_k <= 0 or (topk.shape[0] >= num_tokens and topk.shape[1] >= top_k)",
                "must be [>= num_tokens={num_tokens}, >= top_k={top_k}], got {tuple(topk.shape)}"),
        host_only=("max_gather_len", "max_compressed_len"),
    )
    def __call__(self, key, constexprs, *, topk, query_start_loc, seq_lens, gather_lens, num_tokens: int,
                 row_stride: int, swa_offset: int, top_k: int, ratio: int, sliding_window: int,
                 max_gather_len: int | None = None, max_compressed_len: int | None = None) -> LaunchSpec:
        """Launch K7; returns ``(combined, lens)`` (see the class)."""
        n, dev = seq_lens.shape[0], seq_lens.device
        on_cpu = dev.type == "cpu"  # the layout checks read tensor values only where that is free
        if max_gather_len is None and on_cpu and n:
            max_gather_len = int(gather_lens.max())
        if max_gather_len is not None and row_stride < swa_offset + max_gather_len:
            raise KernelInputError(self.name, "row_stride", f"row_stride={row_stride} must be >= swa_offset + "
                                   f"max(gather_lens) = {swa_offset} + {max_gather_len} = {swa_offset + max_gather_len}")
        if top_k > 0:
            if max_compressed_len is None and on_cpu and n:
                max_compressed_len = int((seq_lens // ratio).max())
            if max_compressed_len is not None and swa_offset < max_compressed_len:
                raise KernelInputError(self.name, "swa_offset", f"swa_offset={swa_offset} must be >= the largest "
                                       f"compressed length max(seq_lens // ratio) = {max_compressed_len}")
        else:
            topk = None  # window-only layer: no top-k part (and a None pointer in the key)
        combined = torch.empty((num_tokens, key.width), dtype=torch.int32, device=dev)
        lens = torch.empty(num_tokens, dtype=torch.int32, device=dev)
        return LaunchSpec(
            grid=(cdiv(num_tokens, key.block_t), key.width // key.block_w),
            kwargs=dict(constexprs, topk=topk, combined=combined, lens=lens, num_reqs=n,
                        search_steps=segment_search_steps(n), topk_stride=topk.stride(0) if topk is not None else 0),
            returns=(combined, lens),
        )


#: The process's K7 launcher.
combine_topk_swa_indices = CombineTopkSwaIndices()
