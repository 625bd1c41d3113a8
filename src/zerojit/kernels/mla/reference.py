"""Plain-PyTorch references of the seven sparse-MLA metadata kernels (K1-K7).

Written from docs KERNELS.md alone, never from the Triton kernels: they are the independent
witness the kernels are tested against, and each Triton kernel must equal its reference
exactly (for K1 with ``compact=True``: the same sorted valid prefix, -1 tail and counts).

Conventions (KERNELS.md "Conventions"): ``T`` tokens in the step, ``R`` requests; -1 means "no
entry"; slots are computed in int64 and then stored in the output dtype (int32 unless said; a
value that does not fit int32 raises ``ValueError`` instead of wrapping). Integer inputs may be
any integer dtype (int32 in practice); every function returns new tensors on the inputs'
device, except K3, which writes into the buffers it is given and returns them.

The references are vectorised over the inner dimension (K columns, window positions) and over
rows in chunks, so a step of ~8192 tokens with K = 2048 takes a few seconds on a CPU. They also
check the preconditions KERNELS.md states (shapes, ``row_stride``, ``swa_offset``, ...) and
raise ``ValueError`` naming the argument to change; a kernel need not check them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .shapes import cdiv, next_power_of_2, padded_width, roundup, swa_width  # noqa: F401

__all__ = [
    "convert_req_index_to_global_index",
    "compressed_slot_mapping",
    "prepare_uniform_decode",
    "build_prefill_chunk_metadata",
    "compute_prefill_metadata",
    "compute_swa_indices_and_lens",
    "combine_topk_swa_indices",
]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_ROW_CHUNK = 1024  # rows processed at once by the wide references (bounds peak memory)


# ---------------------------------------------------------------------------- helpers
def _to_int32(x: Tensor, what: str) -> Tensor:
    """Cast int64 ``x`` to int32, raising if any value does not fit (never wraps)."""
    if x.numel() and (int(x.max()) > _INT32_MAX or int(x.min()) < _INT32_MIN):
        raise ValueError(
            f"{what}: value {int(x.max())} does not fit int32; the configuration or KV cache "
            "is too large for int32 slots (KERNELS.md Conventions)"
        )
    return x.to(torch.int32)


def _check_dcp(fn: str, dcp_size: int, dcp_rank: int, dcp_interleave: int) -> None:
    if dcp_size < 1 or dcp_interleave < 1 or not 0 <= dcp_rank < dcp_size:
        raise ValueError(
            f"{fn}: need dcp_size >= 1, dcp_interleave >= 1 and 0 <= dcp_rank < dcp_size; got "
            f"dcp_size={dcp_size}, dcp_rank={dcp_rank}, dcp_interleave={dcp_interleave}"
        )


def _query_lens(fn: str, query_start_loc: Tensor, n: int) -> Tensor:
    """``qlen_b = query_start_loc[b+1] - query_start_loc[b]`` as int64, checked non-negative."""
    qsl = query_start_loc.to(torch.int64)
    if qsl.dim() != 1 or qsl.numel() != n + 1:
        raise ValueError(
            f"{fn}: query_start_loc must have shape [{n + 1}] (one more than seq_lens), "
            f"got {tuple(query_start_loc.shape)}"
        )
    qlens = qsl[1:] - qsl[:-1]
    if n and (int(qlens.min()) < 0 or int(qsl[0]) < 0):
        raise ValueError(f"{fn}: query_start_loc must be non-negative and non-decreasing")
    return qlens


def _check_seq_ge_qlen(fn: str, seq: Tensor, qlens: Tensor) -> None:
    """``seq_lens`` is the length after this step, so it includes the step's queries."""
    bad = (seq < qlens).nonzero().flatten()
    if bad.numel():
        b = int(bad[0])
        raise ValueError(
            f"{fn}: seq_lens[{b}]={int(seq[b])} is smaller than request {b}'s query length "
            f"{int(qlens[b])}; seq_lens is the length after this step and includes its queries"
        )


def _token_requests(qsl: Tensor, qlens: Tensor) -> tuple[Tensor, Tensor]:
    """(token index t, its request b) for every token ``qsl[0] <= t < qsl[-1]``, int64."""
    n = qlens.numel()
    dev = qsl.device
    b = torch.repeat_interleave(torch.arange(n, device=dev), qlens)
    t = torch.arange(int(qsl[0]), int(qsl[n]), device=dev) if n else b.new_empty(0)
    return t, b


def _gather_blocks(fn: str, block_table: Tensor, rows: Tensor, blk: Tensor, mask: Tensor) -> Tensor:
    """``block_table[rows, blk]`` as int64 where ``mask``, 0 elsewhere; checks the columns.

    ``rows`` has one fewer dimension than ``blk`` (broadcast along the last) or the same shape.
    Masked-off entries read row 0, column 0 (like a masked load): never out of bounds.
    """
    width = block_table.shape[1]
    zero = torch.zeros((), dtype=torch.int64, device=blk.device)
    blk = torch.where(mask, blk, zero)
    if blk.numel() and int(blk.max()) >= width:
        raise ValueError(
            f"{fn}: block_table has {width} columns but an entry needs block "
            f"{int(blk.max())}; pass a wider block_table"
        )
    if rows.dim() < blk.dim():
        rows = rows.unsqueeze(-1)
    flat = torch.where(mask, rows * width + blk, zero)
    return block_table.to(torch.int64).contiguous().view(-1).take(flat)


# ---------------------------------------------------------------------------- K1
def convert_req_index_to_global_index(
    req_id: Tensor,
    block_table: Tensor,
    token_indices: Tensor,
    *,
    block_size: int,
    block_stride_rows: int,
    max_num_blocks_per_req: int,
    prefill_workspace_request_ids: Tensor | None = None,
    prefill_workspace_starts: Tensor | None = None,
    dcp_size: int = 1,
    dcp_rank: int = 0,
    dcp_interleave: int = 1,
    count_valid: bool = False,
    compact: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """K1: request-local token positions chosen by the indexer -> global KV-cache slots.

    Args:
        req_id: ``[T]`` request (block-table row) of each token.
        block_table: ``[R, max_blocks]`` block ids.
        token_indices: ``[T, K]`` request-local positions, -1 padded (row stride may exceed K).
        block_size: tokens per block. block_stride_rows: cache rows between consecutive block
            ids (slot = ``block_id * block_stride_rows + offset``).
        max_num_blocks_per_req: a position whose block ``>= `` this is invalid (-1).
        prefill_workspace_request_ids: optional ``[T]``, -1 for decode tokens, else the index p
            into ``prefill_workspace_starts`` ``[P]``; such a token maps to
            ``prefill_workspace_starts[p] + tok``. Only with ``dcp_size == 1``.
        dcp_size, dcp_rank, dcp_interleave: S, r, I. With S > 1 a position is kept only on its
            owner rank ``(tok // I) % S`` and mapped to its rank-local position
            ``(tok // (S*I)) * I + tok % I``.
        count_valid: also return ``valid_counts [T]`` int32 (entries != -1 per row).
        compact: COMPACT_TO_FRONT (DCP only): valid entries first, then -1.

    Returns:
        ``(out [T, K] int32, valid_counts [T] int32 or None)``.

    Choices where KERNELS.md leaves room:
        - The bounds check ``blk >= max_num_blocks_per_req`` applies to workspace tokens too
          (validity is decided first, then the valid token is mapped). ``blk`` is computed
          from the rank-local position.
        - With ``compact=True`` the reference keeps the valid entries in their original column
          order (a stable compaction); the kernel may use any order, so compare sorted prefixes.
        - ``compact=True`` with ``dcp_size == 1``, or workspace tensors with ``dcp_size > 1``,
          or only one of the two workspace tensors, raise ``ValueError``.
        - ``max_num_blocks_per_req`` larger than ``block_table.shape[1]`` raises ``ValueError``
          (the kernel would read past the row).
    """
    fn = "convert_req_index_to_global_index"
    _check_dcp(fn, dcp_size, dcp_rank, dcp_interleave)
    if token_indices.dim() != 2:
        raise ValueError(f"{fn}: token_indices must be [T, K], got {tuple(token_indices.shape)}")
    T, K = token_indices.shape
    if req_id.numel() != T:
        raise ValueError(
            f"{fn}: req_id has {req_id.numel()} entries, token_indices has T={T} rows"
        )
    has_ws = prefill_workspace_request_ids is not None or prefill_workspace_starts is not None
    if has_ws and (prefill_workspace_request_ids is None or prefill_workspace_starts is None):
        raise ValueError(
            f"{fn}: pass both prefill_workspace_request_ids and prefill_workspace_starts, "
            "or neither"
        )
    if has_ws and dcp_size > 1:
        raise ValueError(
            f"{fn}: prefill_workspace_request_ids is only supported with dcp_size == 1 "
            f"(got dcp_size={dcp_size}); drop the workspace or use dcp_size=1"
        )
    if compact and dcp_size == 1:
        raise ValueError(f"{fn}: compact=True is a DCP-only flavour; it needs dcp_size > 1")
    if max_num_blocks_per_req > block_table.shape[1]:
        raise ValueError(
            f"{fn}: max_num_blocks_per_req={max_num_blocks_per_req} exceeds block_table's "
            f"{block_table.shape[1]} columns"
        )
    if has_ws and prefill_workspace_request_ids.numel() != T:
        raise ValueError(
            f"{fn}: prefill_workspace_request_ids has {prefill_workspace_request_ids.numel()} "
            f"entries, expected T={T}"
        )

    dev = token_indices.device
    S, r, I = dcp_size, dcp_rank, dcp_interleave
    out = torch.empty((T, K), dtype=torch.int32, device=dev)
    counts = torch.empty(T, dtype=torch.int32, device=dev)
    rows_all = req_id.to(torch.int64)
    if has_ws:
        ws_p_all = prefill_workspace_request_ids.to(torch.int64)
        ws_starts = prefill_workspace_starts.to(torch.int64)

    for lo in range(0, T, _ROW_CHUNK):
        hi = min(lo + _ROW_CHUNK, T)
        tok = token_indices[lo:hi].to(torch.int64)
        valid = tok >= 0
        if S > 1:
            run = tok // I  # which run of I positions; owner = run % S
            rnd = run // S  # which round of S runs
            valid &= run - rnd * S == r  # (tok // I) % S == r
            local = rnd * I + (tok - run * I)  # (tok // (S*I)) * I + tok % I
        else:
            local = tok
        blk = local // block_size
        off = local - blk * block_size  # local % block_size
        valid &= blk < max_num_blocks_per_req
        rows = rows_all[lo:hi]
        slot = _gather_blocks(fn, block_table, rows, blk, valid) * block_stride_rows + off
        if has_ws:
            p = ws_p_all[lo:hi]
            in_ws = p >= 0
            if in_ws.any():
                if int(p.max()) >= ws_starts.numel():
                    raise ValueError(
                        f"{fn}: prefill_workspace_request_ids refers to entry {int(p.max())} but "
                        f"prefill_workspace_starts has {ws_starts.numel()}"
                    )
                start = ws_starts[torch.where(in_ws, p, torch.zeros_like(p))]
                slot = torch.where(in_ws.unsqueeze(1), start.unsqueeze(1) + tok, slot)
        res = torch.where(valid, slot, torch.full_like(slot, -1))
        if compact:  # stable: valid entries keep their column order, then the -1s
            nvalid = valid.sum(1, keepdim=True)
            dest = torch.where(
                valid, valid.cumsum(1) - 1, nvalid + (~valid).cumsum(1) - 1
            )
            res = torch.empty_like(res).scatter_(1, dest, res)
        out[lo:hi] = _to_int32(res, f"{fn}: out")
        counts[lo:hi] = valid.sum(1).to(torch.int32)
    return out, (counts if count_valid else None)


# ---------------------------------------------------------------------------- K2
def compressed_slot_mapping(
    query_start_loc: Tensor,
    seq_lens: Tensor,
    block_table: Tensor,
    *,
    num_tokens: int,
    ratio: int,
    block_size: int,
    block_stride_rows: int,
    dcp_size: int = 1,
    dcp_rank: int = 0,
    dcp_interleave: int = 1,
) -> Tensor:
    """K2: where each compressed-KV entry of this step goes in the ratio-``ratio`` cache.

    Args:
        query_start_loc: ``[R+1]`` token offsets of the requests. seq_lens: ``[R]`` lengths
            after this step. block_table: ``[R, ·]`` block ids of the compressed cache.
        num_tokens: length of the output (tokens of the step, padding included).
        ratio: compression ratio c (divides ``block_size``). block_size: tokens per block of
            the uncompressed cache; the compressed cache has ``cbs = block_size // ratio``
            entries per block. block_stride_rows: the compressed cache's rows between
            consecutive block ids (``cbs`` when dense).
        dcp_size, dcp_rank, dcp_interleave: S, r, I.

    Returns:
        ``slot_mapping [num_tokens]`` int64. Token i of request b at position
        ``pos = seq_lens[b] - qlen_b + i`` gets a slot iff ``(pos + 1) % c == 0`` (entry
        ``e = pos // c``) and, under DCP, the entry is owned by rank r; every other entry is -1,
        including padding tokens at index ``>= query_start_loc[-1]`` (and any before
        ``query_start_loc[0]``).

    Raises ``ValueError`` if ``query_start_loc[-1] > num_tokens``, if ``ratio`` does not divide
    ``block_size``, or if an entry needs a block past the block table's width.
    """
    fn = "compressed_slot_mapping"
    _check_dcp(fn, dcp_size, dcp_rank, dcp_interleave)
    if ratio < 1 or block_size % ratio != 0:
        raise ValueError(f"{fn}: ratio={ratio} must be >= 1 and divide block_size={block_size}")
    R = seq_lens.numel()
    qlens = _query_lens(fn, query_start_loc, R)
    qsl = query_start_loc.to(torch.int64)
    if int(qsl[R]) > num_tokens:
        raise ValueError(
            f"{fn}: query_start_loc[-1]={int(qsl[R])} exceeds num_tokens={num_tokens}"
        )
    seq = seq_lens.to(torch.int64)
    _check_seq_ge_qlen(fn, seq, qlens)
    c, S, r, I = ratio, dcp_size, dcp_rank, dcp_interleave
    cbs = block_size // c
    out = torch.full((num_tokens,), -1, dtype=torch.int64, device=seq_lens.device)
    t, b = _token_requests(qsl, qlens)
    if t.numel() == 0:
        return out
    pos = seq[b] - qlens[b] + (t - qsl[b])
    has = (pos + 1) % c == 0
    e = pos // c
    if S == 1:
        blk = e // cbs
        off = e % cbs
    else:
        v = e % (cbs * S)
        has &= (v // I) % S == r
        blk = e // (cbs * S)
        off = (v // (S * I)) * I + v % I
    slot = _gather_blocks(fn, block_table, b, blk, has) * block_stride_rows + off
    out[t] = torch.where(has, slot, torch.full_like(slot, -1))
    return out


# ---------------------------------------------------------------------------- K3
def prepare_uniform_decode(
    seq_lens: Tensor,
    block_table: Tensor,
    expanded_seq_lens: Tensor,
    expanded_block_table: Tensor,
    *,
    query_len: int,
    num_decode_tokens: int,
) -> tuple[Tensor, Tensor]:
    """K3: flatten a uniform decode batch (query length Lq each) into single-token rows.

    For ``idx < Nd = num_decode_tokens``:
    ``expanded_seq_lens[idx] = max(seq_lens[idx // Lq] - Lq + idx % Lq + 1, 0)`` and
    ``expanded_block_table[idx, :width] = block_table[idx // Lq, :]`` with
    ``width = block_table.shape[1]``. Rows ``>= Nd`` and columns ``>= width`` of the buffers are
    left untouched. Writes into ``expanded_seq_lens`` / ``expanded_block_table`` (cast to their
    dtypes) and returns them.

    KERNELS.md has Lq > 1; the reference also accepts Lq == 1 (a plain copy). It raises
    ``ValueError`` if the buffers are too small or ``Nd`` needs more requests than given.
    """
    fn = "prepare_uniform_decode"
    Lq, Nd = query_len, num_decode_tokens
    if Lq < 1 or Nd < 0:
        raise ValueError(f"{fn}: need query_len >= 1 and num_decode_tokens >= 0, got {Lq}, {Nd}")
    width = block_table.shape[1]
    if expanded_seq_lens.numel() < Nd or expanded_block_table.shape[0] < Nd:
        raise ValueError(
            f"{fn}: buffers hold {expanded_seq_lens.numel()} / {expanded_block_table.shape[0]} "
            f"rows, num_decode_tokens={Nd}"
        )
    if expanded_block_table.shape[1] < width:
        raise ValueError(
            f"{fn}: expanded_block_table has {expanded_block_table.shape[1]} columns, "
            f"block_table has {width}"
        )
    if Nd == 0:
        return expanded_seq_lens, expanded_block_table
    if cdiv(Nd, Lq) > min(seq_lens.numel(), block_table.shape[0]):
        raise ValueError(
            f"{fn}: num_decode_tokens={Nd} with query_len={Lq} needs {cdiv(Nd, Lq)} requests, "
            f"seq_lens has {seq_lens.numel()} and block_table {block_table.shape[0]}"
        )
    idx = torch.arange(Nd, device=seq_lens.device)
    src = idx // Lq
    lens = (seq_lens.to(torch.int64)[src] - Lq + idx % Lq + 1).clamp(min=0)
    expanded_seq_lens[:Nd] = lens.to(expanded_seq_lens.dtype)
    expanded_block_table[:Nd, :width] = block_table[src].to(expanded_block_table.dtype)
    return expanded_seq_lens, expanded_block_table


# ---------------------------------------------------------------------------- K4
def build_prefill_chunk_metadata(
    query_start_loc: Tensor,
    seq_lens: Tensor,
    cu_compressed: Tensor,
    *,
    query_slice_start: int,
    query_slice_stop: int,
    num_compressed: int,
    ratio: int,
    dcp_size: int = 1,
    dcp_rank: int = 0,
    dcp_interleave: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """K4: per query row of a prefill chunk, the range of packed compressed KV it may read.

    Args:
        query_start_loc: ``[n+1]``, rebased to the chunk. seq_lens: ``[n]`` (may be a view).
        cu_compressed: ``[n+1]`` exclusive cumsum of each request's compressed length on this
            rank. query_slice_start / query_slice_stop: rows ``a`` computed,
            ``query_start_loc[0] <= start <= stop <= query_start_loc[n]``.
        num_compressed: ``cu_compressed[n]`` as known by the host (length of token_to_seq).
        ratio: c. dcp_size, dcp_rank, dcp_interleave: S, r, I.

    Returns:
        ``(ks, ke)`` int32 of length ``stop - start`` (row a at ``a - start``) and
        ``token_to_seq [num_compressed]`` int32. For query i of request b,
        ``C = (seq_lens[b] - qlen_b + 1 + i) // c``; with S > 1 the rank-local count is
        ``C' = q*I + clamp(C - q*I*S - r*I, 0, I)``, ``q = C // (I*S)``; ``ks = cu_compressed[b]``,
        ``ke = ks + C'``. ``token_to_seq[cu_compressed[b] + j] = b`` for
        ``j < cu_compressed[b+1] - cu_compressed[b]``.

    Choices: a slice outside ``[query_start_loc[0], query_start_loc[n]]`` or
    ``num_compressed != cu_compressed[n]`` raises ``ValueError``; entries of token_to_seq before
    ``cu_compressed[0]`` (0 in practice) are -1.
    """
    fn = "build_prefill_chunk_metadata"
    _check_dcp(fn, dcp_size, dcp_rank, dcp_interleave)
    if ratio < 1:
        raise ValueError(f"{fn}: ratio={ratio} must be >= 1")
    n = seq_lens.numel()
    qlens = _query_lens(fn, query_start_loc, n)
    qsl = query_start_loc.to(torch.int64)
    cu = cu_compressed.to(torch.int64)
    if cu.numel() != n + 1:
        raise ValueError(f"{fn}: cu_compressed must have shape [{n + 1}], got {tuple(cu.shape)}")
    if int(cu[n]) != num_compressed:
        raise ValueError(
            f"{fn}: num_compressed={num_compressed} but cu_compressed[-1]={int(cu[n])}; "
            "pass num_compressed = cu_compressed[-1]"
        )
    counts = cu[1:] - cu[:-1]
    if int(cu[0]) < 0 or (n and int(counts.min()) < 0):
        raise ValueError(f"{fn}: cu_compressed must be non-negative and non-decreasing")
    lo, hi = int(qsl[0]), int(qsl[n])
    if not lo <= query_slice_start <= query_slice_stop <= hi:
        raise ValueError(
            f"{fn}: need query_start_loc[0]={lo} <= query_slice_start={query_slice_start} <= "
            f"query_slice_stop={query_slice_stop} <= query_start_loc[-1]={hi}"
        )
    seq = seq_lens.to(torch.int64)
    _check_seq_ge_qlen(fn, seq, qlens)
    dev = seq_lens.device
    S, r, I, c = dcp_size, dcp_rank, dcp_interleave, ratio

    a = torch.arange(query_slice_start, query_slice_stop, device=dev)
    b = torch.searchsorted(qsl, a, right=True) - 1  # qsl[b] <= a < qsl[b+1]
    i = a - qsl[b]
    C = (seq[b] - qlens[b] + 1 + i) // c
    if S > 1:
        q = C // (I * S)
        C = q * I + (C - q * I * S - r * I).clamp(0, I)
    ks = cu[b]
    ke = ks + C

    token_to_seq = torch.full((num_compressed,), -1, dtype=torch.int64, device=dev)
    if n:
        token_to_seq[int(cu[0]) : int(cu[n])] = torch.repeat_interleave(
            torch.arange(n, device=dev), counts
        )
    return (
        _to_int32(ks, f"{fn}: ks"),
        _to_int32(ke, f"{fn}: ke"),
        token_to_seq.to(torch.int32),
    )


# ---------------------------------------------------------------------------- K5
def compute_prefill_metadata(
    seq_lens: Tensor,
    query_start_loc: Tensor,
    *,
    num_decodes: int,
    num_prefills: int,
    sliding_window: int,
) -> tuple[Tensor, Tensor]:
    """K5: how many tokens each prefill request gathers for its sliding window.

    Requests ``b = num_decodes + p`` for ``p < num_prefills`` (decodes come first):
    ``gather_lens[p] = qlen_b + min(seq_lens[b] - qlen_b, Wn - 1)`` (the queries plus at most
    ``Wn - 1`` earlier tokens) and ``cu_gather_lens`` its exclusive cumsum,
    ``[0, g0, g0+g1, ...]``.

    Returns ``(gather_lens [num_prefills], cu_gather_lens [num_prefills + 1])`` int32. With
    ``num_prefills == 0`` (where the kernel is not launched) this returns ``([], [0])``.
    """
    fn = "compute_prefill_metadata"
    R = seq_lens.numel()
    qlens = _query_lens(fn, query_start_loc, R)
    if num_decodes < 0 or num_prefills < 0 or num_decodes + num_prefills > R:
        raise ValueError(
            f"{fn}: num_decodes={num_decodes} + num_prefills={num_prefills} must be within the "
            f"{R} requests of seq_lens"
        )
    if sliding_window < 1:
        raise ValueError(f"{fn}: sliding_window={sliding_window} must be >= 1")
    b = slice(num_decodes, num_decodes + num_prefills)
    seq, ql = seq_lens.to(torch.int64)[b], qlens[b]
    _check_seq_ge_qlen(fn, seq, ql)
    gather = ql + torch.minimum(seq - ql, torch.full_like(seq, sliding_window - 1))
    cu = torch.zeros(num_prefills + 1, dtype=torch.int64, device=seq_lens.device)
    cu[1:] = torch.cumsum(gather, 0)
    return _to_int32(gather, f"{fn}: gather_lens"), _to_int32(cu, f"{fn}: cu_gather_lens")


# ---------------------------------------------------------------------------- K6
def compute_swa_indices_and_lens(
    token_to_req: Tensor,
    slot_mapping: Tensor,
    seq_lens: Tensor,
    query_start_loc: Tensor,
    block_table: Tensor,
    *,
    num_tokens: int,
    token_offset: int,
    sliding_window: int,
    block_size: int,
    block_stride_rows: int,
    causal: bool = True,
    num_speculative_tokens: int = 0,
) -> tuple[Tensor, Tensor]:
    """K6: each token's sliding-window KV slots and their count.

    Row ``pid < num_tokens`` is token ``tok = pid + token_offset``. If
    ``slot_mapping[tok] < 0`` (padding) the row is all -1 and its length 0. Otherwise
    ``b = token_to_req[tok]`` and ``pos = seq_lens[b] - qlen_b + (tok - query_start_loc[b])``.
    Causal: ``s = max(pos - Wn + 1, 0)``, ``len = pos + 1 - s``. Non-causal (draft rows): every
    token of request b sees ``s = max(seq_lens[b] - qlen_b - Wn + 1, 0)`` to the request's last
    token, ``len = seq_lens[b] - s``. Entry ``k < len`` is the slot of position ``p = s + k``:
    ``block_table[b, p // block_size] * block_stride_rows + p % block_size``; the rest is -1.

    Returns ``(swa_indices [num_tokens, Wout] int32, swa_lens [num_tokens] int32)`` with
    ``Wout = swa_width(sliding_window, causal, num_speculative_tokens)``.

    Raises ``ValueError`` for a non-causal (non-padding) row of a request with
    ``qlen_b > 1 + num_speculative_tokens`` (naming the request), or for rows past the end of
    ``slot_mapping`` / ``token_to_req``.
    """
    fn = "compute_swa_indices_and_lens"
    Wn = sliding_window
    Wout = swa_width(Wn, causal, num_speculative_tokens)
    dev = slot_mapping.device
    out = torch.full((num_tokens, Wout), -1, dtype=torch.int32, device=dev)
    lens = torch.zeros(num_tokens, dtype=torch.int32, device=dev)
    if num_tokens == 0:
        return out, lens
    last = token_offset + num_tokens
    if token_offset < 0 or last > slot_mapping.numel() or last > token_to_req.numel():
        raise ValueError(
            f"{fn}: rows token_offset={token_offset} .. {last - 1} exceed slot_mapping "
            f"({slot_mapping.numel()}) or token_to_req ({token_to_req.numel()})"
        )
    R = seq_lens.numel()
    qlens = _query_lens(fn, query_start_loc, R)
    qsl = query_start_loc.to(torch.int64)
    seq = seq_lens.to(torch.int64)

    tok_all = torch.arange(token_offset, last, device=dev)
    live = slot_mapping.to(torch.int64)[tok_all] >= 0
    pid = live.nonzero().flatten()
    if pid.numel() == 0:
        return out, lens
    tok = tok_all[pid]
    b = token_to_req.to(torch.int64)[tok]
    if int(b.min()) < 0 or int(b.max()) >= R:
        raise ValueError(f"{fn}: token_to_req names a request outside 0..{R - 1}")
    ql = qlens[b]
    _check_seq_ge_qlen(fn, seq, qlens)
    if causal:
        pos = seq[b] - ql + (tok - qsl[b])
        s = (pos - Wn + 1).clamp(min=0)
        n_ = pos + 1 - s
    else:
        Lmax = 1 + num_speculative_tokens
        bad = (ql > Lmax).nonzero().flatten()
        if bad.numel():
            rb = int(b[bad[0]])
            raise ValueError(
                f"{fn}: non-causal rows need qlen <= Lmax = 1 + num_speculative_tokens = {Lmax}, "
                f"but request {rb} has qlen {int(qlens[rb])}; use the causal variant or raise "
                "num_speculative_tokens"
            )
        s = (seq[b] - ql - Wn + 1).clamp(min=0)
        n_ = seq[b] - s
    k = torch.arange(Wout, device=dev)
    p = s.unsqueeze(1) + k
    m = k < n_.unsqueeze(1)
    slot = _gather_blocks(fn, block_table, b, p // block_size, m) * block_stride_rows
    slot = slot + p % block_size
    res = torch.where(m, slot, torch.full_like(slot, -1))
    out[pid] = _to_int32(res, f"{fn}: swa_indices")
    lens[pid] = n_.to(torch.int32)
    return out, lens


# ---------------------------------------------------------------------------- K7
def combine_topk_swa_indices(
    topk: Tensor | None,
    query_start_loc: Tensor,
    seq_lens: Tensor,
    gather_lens: Tensor,
    *,
    num_tokens: int,
    row_stride: int,
    swa_offset: int,
    top_k: int,
    ratio: int,
    sliding_window: int,
) -> tuple[Tensor, Tensor]:
    """K7: one index row per prefill token: its top-k compressed entries, then its window.

    Request b owns rows ``[b*row_stride, (b+1)*row_stride)`` of the gathered buffer: its
    compressed KV at offsets ``[0, swa_offset)``, its gathered window tokens (the last
    ``gather_lens[b]`` tokens of the sequence) from ``swa_offset`` on. For token t of request b,
    ``pos = seq_lens[b] - qlen_b + (t - query_start_loc[b])``, ``tk = min((pos+1) // c, TOP_K)``,
    ``sw = min(pos + 1, Wn)``:
    ``combined[t, k] = topk[t, k] + row_stride*b`` for ``k < tk`` (-1 stays -1);
    ``combined[t, tk + k] = row_stride*b + swa_offset + (pos - sw + 1 + k)
    - (seq_lens[b] - gather_lens[b])`` for ``k < sw``; ``lens[t] = tk + sw``.

    Args:
        topk: ``[T, >= top_k]`` request-local compressed indices (-1 padded), or None when
            ``top_k == 0`` (ignored then). For indexer-less ratio-128 layers the caller passes
            ``topk[t, k] = k``.
        query_start_loc ``[n+1]``, seq_lens ``[n]``, gather_lens ``[n]`` (K5's output).
        num_tokens: T, rows of the output. row_stride, swa_offset: see above.
        top_k: TOP_K. ratio: c. sliding_window: Wn.

    Returns ``(combined [T, padded_width(top_k, Wn)] int32, lens [T] int32)``; everything not
    written above is -1 (and ``lens`` 0 for rows outside ``query_start_loc``).

    Raises ``ValueError`` (naming the argument) when ``row_stride < swa_offset +
    max(gather_lens)``, when ``top_k > 0`` and ``swa_offset`` is smaller than the largest
    compressed length ``max(seq_lens[b] // c)``, when a used top-k entry is neither -1 nor in
    ``[0, seq_lens[b] // c)`` (the request's compressed length), or when a window position falls
    before the gathered tokens (``gather_lens`` inconsistent with K5).
    """
    fn = "combine_topk_swa_indices"
    Wn, c, T = sliding_window, ratio, num_tokens
    if c < 1 or top_k < 0:
        raise ValueError(f"{fn}: need ratio >= 1 and top_k >= 0, got ratio={c}, top_k={top_k}")
    W = padded_width(top_k, Wn)
    dev = seq_lens.device
    combined = torch.full((T, W), -1, dtype=torch.int32, device=dev)
    lens = torch.zeros(T, dtype=torch.int32, device=dev)
    n = seq_lens.numel()
    qlens = _query_lens(fn, query_start_loc, n)
    qsl = query_start_loc.to(torch.int64)
    if n == 0:
        return combined, lens
    if int(qsl[n]) > T:
        raise ValueError(f"{fn}: query_start_loc[-1]={int(qsl[n])} exceeds num_tokens={T}")
    seq = seq_lens.to(torch.int64)
    gl = gather_lens.to(torch.int64)
    if gl.numel() != n:
        raise ValueError(f"{fn}: gather_lens has {gl.numel()} entries, seq_lens has {n}")
    _check_seq_ge_qlen(fn, seq, qlens)
    if row_stride < swa_offset + int(gl.max()):
        raise ValueError(
            f"{fn}: row_stride={row_stride} must be >= swa_offset + max(gather_lens) = "
            f"{swa_offset} + {int(gl.max())} = {swa_offset + int(gl.max())}"
        )
    if top_k > 0:
        if topk is None:
            raise ValueError(f"{fn}: topk is None but top_k={top_k} > 0; pass the top-k indices")
        if topk.dim() != 2 or topk.shape[0] < int(qsl[n]) or topk.shape[1] < top_k:
            raise ValueError(
                f"{fn}: topk must be [>= {int(qsl[n])}, >= top_k={top_k}], "
                f"got {tuple(topk.shape)}"
            )
        max_comp = int((seq // c).max())
        if swa_offset < max_comp:
            raise ValueError(
                f"{fn}: swa_offset={swa_offset} must be >= the largest compressed length "
                f"max(seq_lens // ratio) = {max_comp}"
            )

    t_all, b_all = _token_requests(qsl, qlens)
    for lo in range(0, t_all.numel(), _ROW_CHUNK):
        t, b = t_all[lo : lo + _ROW_CHUNK], b_all[lo : lo + _ROW_CHUNK]
        pos = seq[b] - qlens[b] + (t - qsl[b])
        tk = torch.clamp((pos + 1) // c, max=top_k)
        sw = torch.clamp(pos + 1, max=Wn)
        base = row_stride * b
        rows = torch.full((t.numel(), W), -1, dtype=torch.int64, device=dev)
        if top_k > 0:
            vals = topk[t, :top_k].to(torch.int64)
            used = torch.arange(top_k, device=dev) < tk.unsqueeze(1)
            comp_len = (seq[b] // c).unsqueeze(1)
            bad = used & (vals != -1) & ((vals < 0) | (vals >= comp_len))
            if bad.any():
                row, col = (int(x) for x in bad.nonzero()[0])
                raise ValueError(
                    f"{fn}: topk[{int(t[row])}, {col}]={int(vals[row, col])} is neither -1 nor "
                    f"in [0, {int(comp_len[row, 0])}) (request {int(b[row])}'s compressed length)"
                )
            keep = used & (vals != -1)
            rows[:, :top_k] = torch.where(keep, vals + base.unsqueeze(1), torch.full_like(vals, -1))
        first = pos - sw + 1  # first window position of the token
        gather_start = seq[b] - gl[b]  # first gathered position of the request
        if bool((first < gather_start).any()):
            j = int((first < gather_start).nonzero()[0])
            raise ValueError(
                f"{fn}: gather_lens[{int(b[j])}]={int(gl[b[j]])} does not cover token "
                f"{int(t[j])}'s window (from position {int(first[j])}); pass K5's gather_lens"
            )
        k = torch.arange(Wn, device=dev)
        swv = (base + swa_offset + first - gather_start).unsqueeze(1) + k
        swv = torch.where(k < sw.unsqueeze(1), swv, torch.full_like(swv, -1))
        rows.scatter_(1, tk.unsqueeze(1) + k, swv)
        combined[t] = _to_int32(rows, f"{fn}: combined")
        lens[t] = (tk + sw).to(torch.int32)
    return combined, lens
