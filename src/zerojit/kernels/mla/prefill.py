"""Prefill metadata of sparse MLA: K4 ``build_prefill_chunk_metadata`` and K5 ``compute_prefill_metadata``.

Both run once per scheduler step on a chunk of prefill requests (docs KERNELS.md, K4 and K5).

**K4** gives each query row of the chunk the range ``[ks, ke)`` of the indexer's packed
compressed KV it may read, and maps each packed compressed entry to its request
(``token_to_seq``). Query ``i`` of request ``b`` sees ``C = (seq_lens[b] - qlen_b + 1 + i) // c``
compressed entries; under decode-context parallelism (S ranks, interleave I) only the rank-local
part ``C' = q*I + clamp(C - q*I*S - r*I, 0, I)``, ``q = C // (I*S)``, lives on rank r.
``ks = cu_compressed[b]``, ``ke = ks + C'``.

**K5** gives each prefill request the number of tokens its sliding window gathers,
``gather_lens[p] = qlen_b + min(seq_lens[b] - qlen_b, Wn - 1)`` for ``b = num_decodes + p``, and
their exclusive cumsum.

Compile keys (what is constexpr / specialized, and why):

* K4: the ratio c, S and I (configuration), the tile, and whether ``seq_lens`` is 16-byte
  aligned (``seq_lens`` may be an offset view such as ``seq_lens[num_decodes:]``). Everything
  that varies per step (request count, query-slice bounds, ``num_compressed``, the program
  split, the DCP rank r) is ``do_not_specialize``, and the other input pointers are
  ``do_not_specialize_on_alignment`` (a view of them must not compile a new variant).
* K5: the tile only (the next power of two >= ``num_prefills``); ``num_decodes``,
  ``num_prefills`` and ``Wn`` are ``do_not_specialize``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import CheckedKernel, IntArg, Let, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor, scalar_rep

from ._checks import DCP
from ._device import segment_of, segment_search_steps
from .shapes import cdiv, next_power_of_2

__all__ = [
    "BuildPrefillChunkMetadata",
    "build_prefill_chunk_metadata",
    "ComputePrefillMetadata",
    "compute_prefill_metadata",
]

_K4_BLOCK = 1024  # rows / compressed entries per program
_K4_WARPS = 4


# ------------------------------------------------------------------------------- K4
@triton.jit(
    do_not_specialize=["num_reqs", "search_steps", "query_slice_start", "query_slice_stop", "num_compressed",
                       "num_row_programs", "dcp_rank"],
    do_not_specialize_on_alignment=["query_start_loc_ptr", "cu_compressed_ptr"],
)
def _build_prefill_chunk_metadata_kernel(
    query_start_loc_ptr, seq_lens_ptr, cu_compressed_ptr,  # inputs [n+1], [n], [n+1] int32
    ks_ptr, ke_ptr, token_to_seq_ptr,  # outputs [stop-start], [stop-start], [num_compressed] int32
    num_reqs, search_steps, query_slice_start, query_slice_stop, num_compressed, num_row_programs, dcp_rank,
    ratio: tl.constexpr, dcp_size: tl.constexpr, dcp_interleave: tl.constexpr, BLOCK: tl.constexpr,
):
    # Programs [0, num_row_programs) write ks/ke for BLOCK query rows each; the rest write
    # token_to_seq for BLOCK compressed entries each. Each finds its request by binary search.
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    if pid < num_row_programs:
        a = query_slice_start + pid * BLOCK + lanes
        m = a < query_slice_stop
        b = segment_of(query_start_loc_ptr, a, num_reqs, search_steps, m)
        q_start = tl.load(query_start_loc_ptr + b, mask=m, other=0)
        q_stop = tl.load(query_start_loc_ptr + b + 1, mask=m, other=0)
        seq = tl.load(seq_lens_ptr + b, mask=m, other=0)
        # C = (seq - qlen + 1 + i) // c with qlen = q_stop - q_start, i = a - q_start
        C = (seq - q_stop + 1 + a) // ratio
        if dcp_size > 1:
            q = C // (dcp_interleave * dcp_size)
            rest = C - q * dcp_interleave * dcp_size - dcp_rank * dcp_interleave
            C = q * dcp_interleave + tl.minimum(tl.maximum(rest, 0), dcp_interleave)
        ks = tl.load(cu_compressed_ptr + b, mask=m, other=0)
        out = a - query_slice_start
        tl.store(ks_ptr + out, ks, mask=m)
        tl.store(ke_ptr + out, ks + C, mask=m)
    else:
        e = (pid - num_row_programs) * BLOCK + lanes
        m = e < num_compressed
        b = segment_of(cu_compressed_ptr, e, num_reqs, search_steps, m)
        first = tl.load(cu_compressed_ptr)
        owned = (e >= first) & (num_reqs > 0)
        tl.store(token_to_seq_ptr + e, tl.where(owned, b, -1), mask=m)


class BuildPrefillChunkMetadata(CheckedKernel["BuildPrefillChunkMetadata.CompileKey"]):
    """K4: per query row of a prefill chunk, the range of packed compressed KV it may read.

    Call with keyword arguments:
        query_start_loc: ``[n+1]`` int32 token offsets of the chunk's requests (rebased to the
            chunk; non-decreasing).
        seq_lens: ``[n]`` int32 lengths after this step (may be an offset view, e.g.
            ``seq_lens[num_decodes:]``, so possibly not 16-byte aligned; its alignment is part of
            the key).
        cu_compressed: ``[n+1]`` int32 exclusive cumsum of each request's compressed length on
            this rank.
        query_slice_start, query_slice_stop: the query rows ``a`` to compute,
            ``query_start_loc[0] <= start <= stop <= query_start_loc[n]`` (``do_not_specialize``).
        num_compressed: ``cu_compressed[n]`` as the host knows it (length of ``token_to_seq``).
        ratio: the compression ratio c of the indexer layer (constexpr).
        dcp_size, dcp_interleave: S and I (constexpr); dcp_rank: r (``do_not_specialize``).

    Returns:
        ``(ks, ke, token_to_seq)``: ``ks``/``ke`` ``[stop - start]`` int32, row ``a`` at
        ``a - start``, ``ks = cu_compressed[b]``, ``ke = ks + C'`` (see the module docstring);
        ``token_to_seq [num_compressed]`` int32, ``token_to_seq[cu_compressed[b] + j] = b``,
        -1 before ``cu_compressed[0]``.

    Grid: ``cdiv(stop - start, BLOCK) + cdiv(num_compressed, BLOCK)`` programs (live counts),
    each finding its request by binary search in ``query_start_loc`` / ``cu_compressed``. This
    differs from KERNELS.md's ``(n,)`` on purpose: one long prefill (a single request of 8192
    rows and 256K compressed entries) then spreads over the GPU instead of looping in one
    program; every output element is written exactly once.

    Raises:
        KernelInputError: a tensor of the wrong dtype (int32 expected), ndim, length or device,
            a non-contiguous one, a negative count, a slice with ``start > stop``, a ratio < 1,
            ``dcp_rank`` outside ``[0, dcp_size)``. Only metadata is read (no device sync);
            value preconditions (slice within ``query_start_loc``, ``num_compressed ==
            cu_compressed[n]``) are the caller's, as in the reference.
    """

    kernel = _build_prefill_chunk_metadata_kernel  # name: "build_prefill_chunk_metadata"

    @dataclass(frozen=True)
    class CompileKey:
        """ratio: c; dcp_size/dcp_interleave: S/I; seq_lens_aligned: 16-byte aligned seq_lens;
        block: rows (entries) per program; num_warps: launch option."""

        ratio: int
        dcp_size: int
        dcp_interleave: int
        seq_lens_aligned: bool
        block: int = _K4_BLOCK
        num_warps: int = _K4_WARPS

    def dispatch(self, *, ratio: int, dcp_size: int = 1, dcp_interleave: int = 1,
                 seq_lens_aligned: bool = True) -> "BuildPrefillChunkMetadata.CompileKey":
        """The key of a launch: config values and the alignment of ``seq_lens``."""
        return self.CompileKey(ratio=ratio, dcp_size=dcp_size, dcp_interleave=dcp_interleave,
                               seq_lens_aligned=bool(seq_lens_aligned))

    def get_warmup_keys(self, config, *, seq_lens_aligned=(True, False)) -> list["BuildPrefillChunkMetadata.CompileKey"]:
        """Each indexer ratio of ``config`` x each alignment of ``seq_lens`` the caller can pass.

        No indexer layer (``config.indexer_ratios == ()``) gives no key.
        """
        return trace_dispatch(self.dispatch)(ratio=choices(*config.indexer_ratios), dcp_size=config.dcp_size,
                                             dcp_interleave=config.dcp_interleave,
                                             seq_lens_aligned=choices(*seq_lens_aligned))

    def warmup_inputs(self, key: "BuildPrefillChunkMetadata.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory; rank 0 of the DCP ranks)."""
        i32 = scalar_rep(0, specialize=False)  # the do_not_specialize ints: one int32 representative
        return dict(self.fact_inputs(key), query_start_loc=WarmupTensor(torch.int32, (5,)),
                    seq_lens=WarmupTensor(torch.int32, (4,), aligned=key.seq_lens_aligned),
                    cu_compressed=WarmupTensor(torch.int32, (5,)), query_slice_start=i32, query_slice_stop=i32,
                    num_compressed=i32)

    @checked_launcher(
        TensorArg("seq_lens", 1),
        TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
        TensorArg("cu_compressed", 1, length="len(seq_lens) + 1"),
        IntArg("query_slice_start"),
        IntArg("query_slice_stop", low="query_slice_start"),
        IntArg("num_compressed"),
        IntArg("ratio", low=1),
        *DCP,
        Let("seq_lens_aligned", "is_aligned(seq_lens)"),
    )
    def __call__(self, key, constexprs, *, query_start_loc, seq_lens, cu_compressed, query_slice_start: int,
                 query_slice_stop: int, num_compressed: int, ratio: int, dcp_size: int = 1, dcp_rank: int = 0,
                 dcp_interleave: int = 1) -> LaunchSpec:
        """Launch K4; returns ``(ks, ke, token_to_seq)`` (see the class)."""
        n, dev = seq_lens.shape[0], seq_lens.device
        rows = query_slice_stop - query_slice_start
        ks = torch.empty(rows, dtype=torch.int32, device=dev)
        ke = torch.empty(rows, dtype=torch.int32, device=dev)
        token_to_seq = torch.empty(num_compressed, dtype=torch.int32, device=dev)
        row_programs = cdiv(rows, key.block)
        return LaunchSpec(
            grid=(row_programs + cdiv(num_compressed, key.block),),
            kwargs=dict(constexprs, ks=ks, ke=ke, token_to_seq=token_to_seq, num_reqs=n,
                        search_steps=segment_search_steps(n), num_row_programs=row_programs),
            returns=(ks, ke, token_to_seq),
        )


#: The process's K4 launcher.
build_prefill_chunk_metadata = BuildPrefillChunkMetadata()


# ------------------------------------------------------------------------------- K5
@triton.jit(
    do_not_specialize=["num_decodes", "num_prefills", "sliding_window"],
    do_not_specialize_on_alignment=["seq_lens_ptr", "query_start_loc_ptr"],
)
def _compute_prefill_metadata_kernel(
    seq_lens_ptr, query_start_loc_ptr,  # inputs [R], [R+1] int32
    gather_lens_ptr, cu_gather_lens_ptr,  # outputs [num_prefills], [num_prefills+1] int32
    num_decodes, num_prefills, sliding_window,
    TILE: tl.constexpr,
):
    p = tl.arange(0, TILE)
    m = p < num_prefills
    b = num_decodes + p
    seq = tl.load(seq_lens_ptr + b, mask=m, other=0)
    qlen = tl.load(query_start_loc_ptr + b + 1, mask=m, other=0) - tl.load(query_start_loc_ptr + b, mask=m, other=0)
    gather = qlen + tl.minimum(seq - qlen, sliding_window - 1)
    gather = tl.where(m, gather, 0)
    tl.store(gather_lens_ptr + p, gather, mask=m)
    tl.store(cu_gather_lens_ptr + 1 + p, tl.cumsum(gather, axis=0), mask=m)
    tl.store(cu_gather_lens_ptr + p, tl.zeros_like(gather), mask=p == 0)


class ComputePrefillMetadata(CheckedKernel["ComputePrefillMetadata.CompileKey"]):
    """K5: tokens each prefill request gathers for its sliding window, and their cumsum.

    Call with keyword arguments:
        seq_lens: ``[R]`` int32 lengths after this step (decodes first, then prefills).
        query_start_loc: ``[R+1]`` int32 token offsets.
        num_decodes, num_prefills: requests ``[num_decodes, num_decodes + num_prefills)`` are
            the prefills (``do_not_specialize``).
        sliding_window: the window Wn (``do_not_specialize``, as KERNELS.md lists it).

    Returns:
        ``(gather_lens [num_prefills], cu_gather_lens [num_prefills + 1])`` int32 with
        ``gather_lens[p] = qlen_b + min(seq_lens[b] - qlen_b, Wn - 1)``, ``b = num_decodes + p``,
        and ``cu_gather_lens = [0, g0, g0 + g1, ...]``. With ``num_prefills == 0`` nothing is
        launched and the result is ``([], [0])``, as the reference's.

    Grid ``(1,)``; the tile is the next power of two >= ``num_prefills``, so the key space is
    the powers of two up to ``next_power_of_2(config.max_num_seqs)``.

    Raises:
        KernelInputError: wrong dtype (int32 expected), ndim, length or device; negative
            counts or ``num_decodes + num_prefills > R``; ``sliding_window < 1``.
    """

    kernel = _compute_prefill_metadata_kernel  # name: "compute_prefill_metadata"

    @dataclass(frozen=True)
    class CompileKey:
        """tile: next power of two >= num_prefills; num_warps: launch option (from the tile)."""

        tile: int
        num_warps: int

    def dispatch(self, *, num_prefills: int) -> "ComputePrefillMetadata.CompileKey":
        """The key of a launch with ``num_prefills`` prefill requests."""
        tile = next_power_of_2(num_prefills)
        return self.CompileKey(tile=tile, num_warps=min(max(tile // 64, 1), 8))

    def get_warmup_keys(self, config) -> list["ComputePrefillMetadata.CompileKey"]:
        """One key per power of two up to ``next_power_of_2(config.max_num_seqs)``."""
        top = next_power_of_2(config.max_num_seqs)
        return trace_dispatch(self.dispatch)(
            num_prefills=choices(*(1 << i for i in range(top.bit_length())))
        )

    def warmup_inputs(self, key: "ComputePrefillMetadata.CompileKey") -> dict:
        i32 = scalar_rep(0, specialize=False)  # the do_not_specialize ints: one int32 representative
        R = i32 + key.tile  # num_prefills = tile dispatches to this key
        return dict(
            seq_lens=WarmupTensor(torch.int32, (R,)),
            query_start_loc=WarmupTensor(torch.int32, (R + 1,)),
            num_decodes=i32,
            num_prefills=key.tile,
            sliding_window=i32,
        )

    @checked_launcher(
        TensorArg("seq_lens", 1),
        TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
        IntArg("num_decodes", high="len(seq_lens)"),
        IntArg("num_prefills", high="len(seq_lens) - num_decodes"),
        IntArg("sliding_window", low=1),
    )
    def __call__(self, key, constexprs, *, seq_lens, query_start_loc, num_decodes: int, num_prefills: int,
                 sliding_window: int) -> LaunchSpec:
        """Launch K5; returns ``(gather_lens, cu_gather_lens)`` (see the class)."""
        dev = seq_lens.device
        gather_lens = torch.empty(num_prefills, dtype=torch.int32, device=dev)
        if num_prefills == 0:  # nothing launches: the cumsum of no request is [0]
            cu_gather_lens = torch.zeros(1, dtype=torch.int32, device=dev)
        else:
            cu_gather_lens = torch.empty(num_prefills + 1, dtype=torch.int32, device=dev)
        return LaunchSpec(grid=(1 if num_prefills else 0,), kwargs=dict(constexprs, gather_lens=gather_lens,
                          cu_gather_lens=cu_gather_lens), returns=(gather_lens, cu_gather_lens))


#: The process's K5 launcher.
compute_prefill_metadata = ComputePrefillMetadata()
