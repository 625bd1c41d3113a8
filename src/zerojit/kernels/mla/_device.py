"""Triton device helpers shared by the MLA kernels, with the host-side values they need.

K4 (``build_prefill_chunk_metadata``) and K7 (``combine_topk_swa_indices``) launch over live
token (or compressed-entry) counts, not over requests, so each row finds its request with
:func:`segment_of`, whose search length the launcher computes with :func:`segment_search_steps`.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["segment_of", "segment_search_steps"]


@triton.jit
def segment_of(bounds_ptr, x, num_segments, search_steps, mask):
    """For each ``x``, the largest ``b`` in ``[0, num_segments)`` with ``bounds[b] <= x``.

    ``bounds`` is a non-decreasing ``[num_segments + 1]`` array (``query_start_loc``,
    ``cu_compressed``) and ``x >= bounds[0]``; empty segments are skipped because the *last* of
    equal bounds wins. A vectorised binary search of ``search_steps = (num_segments - 1).bit_length()``
    steps (host-computed by :func:`segment_search_steps`, ``>= ceil(log2(num_segments))``); 0
    when ``num_segments <= 1``.
    """
    lo = tl.zeros_like(x)
    hi = tl.zeros_like(x) + num_segments
    step = 0
    while step < search_steps:  # a while loop, not range(search_steps): see segment_search_steps
        step += 1
        go = mask & (hi - lo > 1)
        mid = (lo + hi) // 2
        v = tl.load(bounds_ptr + mid, mask=go, other=0)
        right = v <= x
        lo = tl.where(go & right, mid, lo)
        hi = tl.where(go & (v > x), mid, hi)
    return lo


def segment_search_steps(num_segments: int) -> int:
    """Binary-search steps :func:`segment_of` needs for ``num_segments`` segments.

    The loop over them is a ``while`` because Triton 3.6's interpreter cannot take a runtime
    ``range`` bound with NumPy >= 2.4 (it calls ``int()`` on a one-element 1-D array).
    """
    return max(num_segments - 1, 0).bit_length()
