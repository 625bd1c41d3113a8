"""Hand-computed cases for the PyTorch references of the sparse-MLA kernels (KERNELS.md K1-K7).

Every expected value below was worked out by hand from KERNELS.md; the comments show the
arithmetic so a reader can check it without running anything.
"""

from __future__ import annotations

import pytest
import torch

from zerojit.kernels.mla import reference as ref
from zerojit.kernels.mla.shapes import cdiv, next_power_of_2, padded_width, roundup, swa_width


def i32(x):
    return torch.tensor(x, dtype=torch.int32)


def i64(x):
    return torch.tensor(x, dtype=torch.int64)


# ---------------------------------------------------------------------------- shapes
def test_shape_helpers():
    assert (cdiv(7, 2), cdiv(8, 2), cdiv(0, 5)) == (4, 4, 0)
    assert (roundup(130, 128), roundup(128, 128), roundup(0, 64)) == (256, 128, 0)
    assert [next_power_of_2(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 4, 8, 8, 16]
    assert padded_width(2048, 128) == 2176  # roundup(2176, 128)
    assert padded_width(0, 128) == 128
    assert padded_width(3, 4) == 128
    assert swa_width(128) == 128  # causal: Wn
    assert swa_width(128, causal=False, num_speculative_tokens=3) == 192  # roundup(127 + 4, 64)
    assert swa_width(3, causal=False, num_speculative_tokens=1) == 64  # roundup(2 + 2, 64)


# ---------------------------------------------------------------------------- K1
# block_size 4, a packed cache: 10 rows between consecutive block ids.
K1_BT = i32([[3, 7, 1], [5, 2, 9]])


def test_k1_plain_packed_stride_and_row_stride():
    # Row 0 (req 0): 0 -> blk0 off0 -> 3*10+0 = 30; 5 -> blk1 off1 -> 71; -1; 11 -> blk2 off3
    # -> 1*10+3 = 13; 12 -> blk3 >= 3 -> -1.
    # Row 1 (req 1): 3 -> 5*10+3 = 53; 4 -> 2*10+0 = 20; 9 -> 9*10+1 = 91; -1; 100 -> blk25 -> -1.
    wide = torch.full((2, 8), 999, dtype=torch.int32)  # row stride 8 > K = 5
    wide[:, :5] = i32([[0, 5, -1, 11, 12], [3, 4, 9, -1, 100]])
    out, counts = ref.convert_req_index_to_global_index(
        i32([0, 1]), K1_BT, wide[:, :5],
        block_size=4, block_stride_rows=10, max_num_blocks_per_req=3, count_valid=True,
    )
    assert out.dtype == torch.int32 and counts.dtype == torch.int32
    assert out.tolist() == [[30, 71, -1, 13, -1], [53, 20, 91, -1, -1]]
    assert counts.tolist() == [3, 3]

    # max_num_blocks_per_req = 2 invalidates block 2 (tokens 11 and 9); no counts asked.
    out, counts = ref.convert_req_index_to_global_index(
        i32([0, 1]), K1_BT, wide[:, :5],
        block_size=4, block_stride_rows=10, max_num_blocks_per_req=2,
    )
    assert out.tolist() == [[30, 71, -1, -1, -1], [53, 20, -1, -1, -1]]
    assert counts is None


def test_k1_prefill_workspace():
    # Row 1 has workspace entry p = 1: tok -> 2000 + tok (the bounds check still applies, so
    # 100 with block 25 >= 3 stays -1). Row 0 is a decode token (-1): block table as before.
    out, counts = ref.convert_req_index_to_global_index(
        i32([0, 1]), K1_BT, i32([[0, 5, -1, 11, 12], [3, 4, 9, -1, 100]]),
        block_size=4, block_stride_rows=10, max_num_blocks_per_req=3,
        prefill_workspace_request_ids=i32([-1, 1]), prefill_workspace_starts=i32([1000, 2000]),
        count_valid=True,
    )
    assert out.tolist() == [[30, 71, -1, 13, -1], [2003, 2004, 2009, -1, -1]]
    assert counts.tolist() == [3, 3]


def test_k1_dcp_s2_i2_ownership_and_compact():
    # S=2, I=2: owner = (tok // 2) % 2; tokens 0,1,4,5 -> rank 0; 2,3,6,7,10 -> rank 1.
    # Rank 1 local = (tok // 4) * 2 + tok % 2: 2->0, 3->1, 6->2, 7->3, 10->4 (block 1, off 0).
    # Slots (block_size 4, stride 10, req 0 blocks [3, 7, 1]): 30, 31, 32, 33, 70.
    toks = i32([[0, 1, 2, 3, 4, 5, 6, 7, -1, 10]])
    kw = dict(block_size=4, block_stride_rows=10, max_num_blocks_per_req=3, dcp_size=2,
              dcp_interleave=2, count_valid=True)
    out, counts = ref.convert_req_index_to_global_index(i32([0]), K1_BT, toks, dcp_rank=1, **kw)
    assert out.tolist() == [[-1, -1, 30, 31, -1, -1, 32, 33, -1, 70]]
    assert counts.tolist() == [5]
    out, counts = ref.convert_req_index_to_global_index(
        i32([0]), K1_BT, toks, dcp_rank=1, compact=True, **kw
    )
    assert out.tolist() == [[30, 31, 32, 33, 70, -1, -1, -1, -1, -1]]
    assert counts.tolist() == [5]
    # Rank 0: 0->0, 1->1, 4->2, 5->3.
    out, counts = ref.convert_req_index_to_global_index(i32([0]), K1_BT, toks, dcp_rank=0, **kw)
    assert out.tolist() == [[30, 31, -1, -1, 32, 33, -1, -1, -1, -1]]
    assert counts.tolist() == [4]


def test_k1_argument_errors():
    toks = i32([[0, 1]])
    with pytest.raises(ValueError, match="prefill_workspace_request_ids"):
        ref.convert_req_index_to_global_index(
            i32([0]), K1_BT, toks, block_size=4, block_stride_rows=10, max_num_blocks_per_req=3,
            prefill_workspace_request_ids=i32([0]), prefill_workspace_starts=i32([0]), dcp_size=2,
        )
    with pytest.raises(ValueError, match="compact"):
        ref.convert_req_index_to_global_index(
            i32([0]), K1_BT, toks, block_size=4, block_stride_rows=10, max_num_blocks_per_req=3,
            compact=True,
        )


# ---------------------------------------------------------------------------- K2
def test_k2_two_requests_packed_compressed_stride_and_padding():
    # block_size 8, ratio 2 -> cbs 4; compressed stride 5 (packed). num_tokens 9 (2 padding).
    # Req 0: qlen 3, seq 6 -> positions 3,4,5; entries where (pos+1) % 2 == 0: pos 3 -> e=1 ->
    #   block 0 off 1 -> 4*5+1 = 21; pos 5 -> e=2 -> 22.
    # Req 1: qlen 4, seq 12 -> positions 8..11; pos 9 -> e=4 -> block 1 off 0 -> 3*5 = 15;
    #   pos 11 -> e=5 -> 16.
    sm = ref.compressed_slot_mapping(
        i32([0, 3, 7]), i32([6, 12]), i32([[4, 6, 8], [1, 3, 7]]),
        num_tokens=9, ratio=2, block_size=8, block_stride_rows=5,
    )
    assert sm.dtype == torch.int64
    assert sm.tolist() == [21, -1, 22, -1, 15, -1, 16, -1, -1]
    # Ratio 4 (cbs 2): req 0 pos 3 -> e=0 -> 4*5 = 20; req 1 pos 11 -> e=2 -> block 1 -> 15.
    sm = ref.compressed_slot_mapping(
        i32([0, 3, 7]), i32([6, 12]), i32([[4, 6, 8], [1, 3, 7]]),
        num_tokens=9, ratio=4, block_size=8, block_stride_rows=5,
    )
    assert sm.tolist() == [20, -1, -1, -1, -1, -1, 15, -1, -1]


def test_k2_dcp_s2_i2():
    # block_size 8, ratio 2 -> cbs 4, cbs*S = 8. One request, qlen 12, seq 24: positions
    # 12..23; entries at odd pos: e = 6..11 at tokens 1,3,5,7,9,11.
    # v = e % 8 = 6,7,0,1,2,3; owner (v // 2) % 2 = 1,1,0,0,1,1.
    # Rank 1: e6 -> block 0, off (6//4)*2 + 0 = 2 -> 4*5+2 = 22; e7 -> 23;
    #         e10 -> block 1, off 0 -> 6*5 = 30; e11 -> 31.
    # Rank 0: e8 -> block 1 off 0 -> 30; e9 -> 31.
    kw = dict(num_tokens=12, ratio=2, block_size=8, block_stride_rows=5, dcp_size=2,
              dcp_interleave=2)
    args = (i32([0, 12]), i32([24]), i32([[4, 6, 8]]))
    assert ref.compressed_slot_mapping(*args, dcp_rank=1, **kw).tolist() == [
        -1, 22, -1, 23, -1, -1, -1, -1, -1, 30, -1, 31
    ]
    assert ref.compressed_slot_mapping(*args, dcp_rank=0, **kw).tolist() == [
        -1, -1, -1, -1, -1, 30, -1, 31, -1, -1, -1, -1
    ]


# ---------------------------------------------------------------------------- K3
def test_k3_uniform_decode_leaves_sentinels():
    # Lq 3: idx -> request idx // 3; len = max(seq - 3 + idx % 3 + 1, 0).
    # seq [5, 9] -> [3, 4, 5, 7, 8, 9]; seq [1, 9] -> [max(-1,0), 0, 1, 7, 8, 9].
    for seq, want in (([5, 9], [3, 4, 5, 7, 8, 9]), ([1, 9], [0, 0, 1, 7, 8, 9])):
        esl = torch.full((8,), 77, dtype=torch.int32)
        ebt = torch.full((8, 3), 77, dtype=torch.int32)
        a, b = ref.prepare_uniform_decode(
            i32(seq), i32([[1, 2], [3, 4]]), esl, ebt, query_len=3, num_decode_tokens=6
        )
        assert a is esl and b is ebt
        assert esl.tolist() == want + [77, 77]
        assert ebt.tolist() == [[1, 2, 77]] * 3 + [[3, 4, 77]] * 3 + [[77, 77, 77]] * 2


# ---------------------------------------------------------------------------- K4
def test_k4_prefill_chunk_no_dcp():
    # c 4. Req 0: qlen 3, seq 9: C = (9-3+1+i)//4 = 7//4, 8//4, 9//4 = 1, 2, 2.
    # Req 1: qlen 2, seq 5: C = 4//4, 5//4 = 1, 1. Compressed lengths 9//4 = 2, 5//4 = 1.
    args = (i32([0, 3, 5]), i32([9, 5]), i32([0, 2, 3]))
    ks, ke, t2s = ref.build_prefill_chunk_metadata(
        *args, query_slice_start=0, query_slice_stop=5, num_compressed=3, ratio=4
    )
    assert ks.tolist() == [0, 0, 0, 2, 2]
    assert ke.tolist() == [1, 2, 2, 3, 3]
    assert t2s.tolist() == [0, 0, 1]
    assert ks.dtype == ke.dtype == t2s.dtype == torch.int32
    # A slice of rows 1..3 is written from 0.
    ks, ke, _ = ref.build_prefill_chunk_metadata(
        *args, query_slice_start=1, query_slice_stop=4, num_compressed=3, ratio=4
    )
    assert ks.tolist() == [0, 0, 2] and ke.tolist() == [2, 2, 3]


def test_k4_prefill_chunk_dcp_s2_i2():
    # c 1, one request qlen 10 seq 10: C = 1..10. q = C // 4, C' = 2q + clamp(C - 4q - 2r, 0, 2).
    # r=0: 1,2,2,2,3,4,4,4,5,6   r=1: 0,0,1,2,2,2,3,4,4,4   (they sum to C).
    for r, want, total in ((0, [1, 2, 2, 2, 3, 4, 4, 4, 5, 6], 6),
                           (1, [0, 0, 1, 2, 2, 2, 3, 4, 4, 4], 4)):
        ks, ke, t2s = ref.build_prefill_chunk_metadata(
            i32([0, 10]), i32([10]), i32([0, total]), query_slice_start=0, query_slice_stop=10,
            num_compressed=total, ratio=1, dcp_size=2, dcp_rank=r, dcp_interleave=2,
        )
        assert ks.tolist() == [0] * 10
        assert ke.tolist() == want
        assert t2s.tolist() == [0] * total
    # c 2, qlen 4, seq 12: C = (9+i)//2 = 4,5,5,6 -> r=0: 2,3,3,4; r=1: 2,2,2,2; behind 3 entries.
    for r, want in ((0, [2, 3, 3, 4]), (1, [2, 2, 2, 2])):
        ks, ke, _ = ref.build_prefill_chunk_metadata(
            i32([0, 1, 5]), i32([1, 12]), i32([0, 3, 3 + want[-1]]), query_slice_start=1,
            query_slice_stop=5, num_compressed=3 + want[-1], ratio=2, dcp_size=2, dcp_rank=r,
            dcp_interleave=2,
        )
        assert ks.tolist() == [3] * 4
        assert ke.tolist() == [3 + w for w in want]


# ---------------------------------------------------------------------------- K5
def test_k5_prefill_gather_lens():
    # 1 decode then 2 prefills, Wn 128. b=1: qlen 3, seq 7 -> 3 + min(4, 127) = 7;
    # b=2: qlen 100, seq 300 -> 100 + min(200, 127) = 227.
    gl, cu = ref.compute_prefill_metadata(
        i32([50, 7, 300]), i32([0, 1, 4, 104]), num_decodes=1, num_prefills=2, sliding_window=128
    )
    assert gl.tolist() == [7, 227] and cu.tolist() == [0, 7, 234]
    assert gl.dtype == cu.dtype == torch.int32
    gl, cu = ref.compute_prefill_metadata(
        i32([50]), i32([0, 1]), num_decodes=1, num_prefills=0, sliding_window=128
    )
    assert gl.tolist() == [] and cu.tolist() == [0]


# ---------------------------------------------------------------------------- K6
# block_size 4, stride 10, Wn 3. Req 0: qlen 2, seq 5 (positions 3, 4); req 1: qlen 1, seq 2
# (position 1); token 3 is padding (slot_mapping < 0).
K6_ARGS = (i32([0, 0, 1, 0]), i64([5, 6, 7, -1]), i32([5, 2]), i32([0, 2, 3]),
           i32([[3, 7], [5, 2]]))
K6_KW = dict(sliding_window=3, block_size=4, block_stride_rows=10)


def test_k6_causal():
    # tok0 pos 3: s=1, len 3 -> positions 1,2,3 -> 31,32,33.
    # tok1 pos 4: s=2 -> positions 2,3,4 -> 32,33, block 1 (7) off 0 -> 70.
    # tok2 (req 1) pos 1: s=0, len 2 -> 50, 51. tok3: padding.
    idx, lens = ref.compute_swa_indices_and_lens(*K6_ARGS, num_tokens=4, token_offset=0, **K6_KW)
    assert idx.dtype == lens.dtype == torch.int32
    assert idx.tolist() == [[31, 32, 33], [32, 33, 70], [50, 51, -1], [-1, -1, -1]]
    assert lens.tolist() == [3, 3, 2, 0]
    idx, lens = ref.compute_swa_indices_and_lens(*K6_ARGS, num_tokens=2, token_offset=1, **K6_KW)
    assert idx.tolist() == [[32, 33, 70], [50, 51, -1]]
    assert lens.tolist() == [3, 2]


def test_k6_non_causal_draft():
    # Lmax 2, Wout = roundup(3 - 1 + 2, 64) = 64.
    # Req 0: s = max(5-2-3+1, 0) = 1, len = 5-1 = 4 -> positions 1..4 -> 31,32,33,70 (both rows).
    # Req 1: s = max(2-1-3+1, 0) = 0, len 2 -> 50, 51.
    idx, lens = ref.compute_swa_indices_and_lens(
        *K6_ARGS, num_tokens=4, token_offset=0, causal=False, num_speculative_tokens=1, **K6_KW
    )
    assert idx.shape == (4, 64)
    assert idx[:, :4].tolist() == [[31, 32, 33, 70], [31, 32, 33, 70], [50, 51, -1, -1],
                                   [-1, -1, -1, -1]]
    assert (idx[:, 4:] == -1).all()
    assert lens.tolist() == [4, 4, 2, 0]
    with pytest.raises(ValueError, match="request 0"):  # qlen 2 > Lmax 1
        ref.compute_swa_indices_and_lens(
            *K6_ARGS, num_tokens=4, token_offset=0, causal=False, num_speculative_tokens=0,
            **K6_KW,
        )


# ---------------------------------------------------------------------------- K7
# c 4, TOP_K 3, Wn 4 -> width roundup(7, 128) = 128. Req 0: qlen 2, seq 10 (positions 8, 9);
# req 1: qlen 1, seq 3 (position 2). gather_lens (K5, Wn 4): 2 + min(8, 3) = 5 and
# 1 + min(2, 3) = 3. row_stride 20, swa_offset 8 (>= compressed lengths 10//4 = 2, 3//4 = 0).
K7_QSL, K7_SEQ, K7_GL = i32([0, 2, 3]), i32([10, 3]), i32([5, 3])


def test_k7_gather_lens_match_k5():
    gl, _ = ref.compute_prefill_metadata(
        K7_SEQ, K7_QSL, num_decodes=0, num_prefills=2, sliding_window=4
    )
    assert gl.tolist() == K7_GL.tolist()


def test_k7_topk_with_minus_one_padding():
    topk = i32([[1, -1, 0, 9], [0, 1, -1, 9], [-1, -1, -1, -1]])
    comb, lens = ref.combine_topk_swa_indices(
        topk, K7_QSL, K7_SEQ, K7_GL, num_tokens=5, row_stride=20, swa_offset=8, top_k=3, ratio=4,
        sliding_window=4,
    )
    assert comb.shape == (5, 128) and comb.dtype == lens.dtype == torch.int32
    # tok0 pos 8: tk = min(9//4, 3) = 2, sw = 4: topk [1, -1]; window positions 5..8, gathered
    #   from 10-5 = 5: 0*20 + 8 + (5+k) - 5 = 8, 9, 10, 11.
    # tok1 pos 9: tk 2: [0, 1]; window 6..9 -> 9, 10, 11, 12.
    # tok2 (req 1) pos 2: tk = min(3//4, 3) = 0, sw 3: 20 + 8 + (0+k) - 0 = 28, 29, 30.
    assert comb[:, :8].tolist() == [
        [1, -1, 8, 9, 10, 11, -1, -1],
        [0, 1, 9, 10, 11, 12, -1, -1],
        [28, 29, 30, -1, -1, -1, -1, -1],
        [-1] * 8,
        [-1] * 8,
    ]
    assert (comb[:, 8:] == -1).all()
    assert lens.tolist() == [6, 6, 3, 0, 0]


def test_k7_window_only_layer():
    comb, lens = ref.combine_topk_swa_indices(
        None, K7_QSL, K7_SEQ, K7_GL, num_tokens=3, row_stride=20, swa_offset=8, top_k=0, ratio=1,
        sliding_window=4,
    )
    assert comb.shape == (3, 128)
    assert comb[:, :5].tolist() == [[8, 9, 10, 11, -1], [9, 10, 11, 12, -1], [28, 29, 30, -1, -1]]
    assert (comb[:, 5:] == -1).all()
    assert lens.tolist() == [4, 4, 3]


def test_k7_argument_errors():
    topk = i32([[1, -1, 0], [0, 1, -1], [-1, -1, -1]])
    kw = dict(num_tokens=3, top_k=3, ratio=4, sliding_window=4)
    with pytest.raises(ValueError, match="row_stride=12"):  # needs >= 8 + max(5, 3) = 13
        ref.combine_topk_swa_indices(topk, K7_QSL, K7_SEQ, K7_GL, row_stride=12, swa_offset=8,
                                     **kw)
    with pytest.raises(ValueError, match="swa_offset=1"):  # largest compressed length is 2
        ref.combine_topk_swa_indices(topk, K7_QSL, K7_SEQ, K7_GL, row_stride=20, swa_offset=1,
                                     **kw)
    with pytest.raises(ValueError, match="topk"):
        ref.combine_topk_swa_indices(None, K7_QSL, K7_SEQ, K7_GL, row_stride=20, swa_offset=8,
                                     **kw)
