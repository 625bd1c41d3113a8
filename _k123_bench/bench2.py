import sys, torch, triton, triton.language as tl
from triton.testing import do_bench
dev = "cuda"
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
def _variant_kernel(
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
    LOAD_CM: tl.constexpr, STORE_CM: tl.constexpr, EVICT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_row = cols < K

    ti_row = token_indices_ptr + row * ti_stride
    if INDICES_ALIGNED:  # row start is 16-byte aligned: 128-bit loads
        ti_row = tl.multiple_of(ti_row, 16)
    tok = tl.load(ti_row + cols, mask=in_row, other=-1, cache_modifier=LOAD_CM, eviction_policy=EVICT)

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
        from_table = valid & (p < 0)
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
        if BLOCK_N >= K:  # the whole row in this program: write the -1 tail too
            tl.store(out_row + rank, res, mask=valid)
            tl.store(out_row + cols, -1, mask=in_row & (cols >= n_valid))
        else:  # reserve n_valid places of the row; the launcher pre-filled it with -1
            base = tl.atomic_add(valid_counts_ptr + row, n_valid)
            tl.store(out_row + base + rank, res, mask=valid)
    else:
        tl.store(out_row + cols, res, mask=in_row, cache_modifier=STORE_CM)
        if COUNT_VALID:
            if BLOCK_N >= K:
                tl.store(valid_counts_ptr + row, n_valid)
            else:
                tl.atomic_add(valid_counts_ptr + row, n_valid)
    if COMPACT and COUNT_VALID and BLOCK_N >= K:
        tl.store(valid_counts_ptr + row, n_valid)



def run(c, K, LOAD_CM="", STORE_CM="", EVICT=""):
    T = c["token_indices"].shape[0]
    out = torch.empty((T, K), dtype=torch.int32, device=dev); cnt = torch.empty(T, dtype=torch.int32, device=dev)
    _variant_kernel[(T, 1)](c["req_id"], c["block_table"], c["token_indices"], out, cnt, None, None,
        c["token_indices"].stride(0), c["block_table"].stride(0), 1024, 0,
        BLOCK_SIZE=64, BLOCK_STRIDE_ROWS=128, K=K, BLOCK_N=K, HAS_WORKSPACE=False, COUNT_VALID=True, COMPACT=False,
        DCP_SIZE=1, DCP_INTERLEAVE=1, INDICES_ALIGNED=True, LOAD_CM=LOAD_CM, STORE_CM=STORE_CM, EVICT=EVICT, num_warps=8)
src = torch.randint(0, 100, (8192, 2048), device=dev, dtype=torch.int32); dst = torch.empty_like(src)
tc = do_bench(lambda: dst.copy_(src), warmup=50, rep=300); print(f"copy {tc*1e3:.1f} us")
g = torch.Generator(device=dev).manual_seed(0)
for label, ctx, R, sortreq in [("random req, 64K ctx", 65536, 64, False), ("sorted req (32 req x 256 tok), 64K ctx", 65536, 32, True), ("sorted req, 8K ctx", 8192, 32, True)]:
    T, K = 8192, 2048
    ti = torch.randint(0, ctx, (T, K), device=dev, dtype=torch.int32, generator=g)
    ti[torch.rand((T, K), device=dev, generator=g) < 0.1] = -1
    req = torch.randint(0, R, (T,), device=dev, dtype=torch.int32, generator=g)
    if sortreq: req = req.sort().values
    c = dict(req_id=req, block_table=torch.randint(0, 100000, (R, 1024), device=dev, dtype=torch.int32, generator=g), token_indices=ti)
    for v in [dict(), dict(LOAD_CM=".cg"), dict(LOAD_CM=".cg", STORE_CM=".cs"), dict(EVICT="evict_first", STORE_CM=".cs"), dict(STORE_CM=".cs")]:
        run(c, K, **v); t = do_bench(lambda: run(c, K, **v), warmup=50, rep=300)
        print(f"{label:40s} {str(v):60s} {t*1e3:.1f} us  {tc/t*100:.0f}% of copy")
