import os, sys, time, random
import torch, triton
from triton.testing import do_bench
sys.path.insert(0, "tests/kernels/mla")
import test_index_kernel as T1, test_slot_mapping_kernel as T2, test_decode_kernel as T3
from zerojit.kernels.mla import reference as ref
import zerojit.kernels.mla.index as m1
from zerojit.kernels.mla.index import convert_req_index_to_global_index as k1
from zerojit.kernels.mla.slot_mapping import compressed_slot_mapping as k2
from zerojit.kernels.mla.decode import prepare_uniform_decode as k3
dev = "cuda"
print(torch.__version__, triton.__version__, torch.cuda.get_device_name())

def to_dev(case):
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}

# ---------------- GPU correctness vs reference
rng = random.Random(0); bad = 0; n = 0
for i in range(300):
    S = rng.choice([1, 1, 2, 4, 8]); I = rng.choice([1, 8]) if S > 1 else 1
    bs = rng.choice([16, 64, 256]); W = rng.randint(1, 40)
    fl = rng.choice(["plain", "count", "compact", "ws"])
    case = T1.make_case(seed=i, T=rng.randint(0, 300), K=rng.choice([1, 3, 16, 100, 128, 200, 512, 1000, 2048, 4096]),
        R=rng.randint(1, 8), W=W, max_blocks=rng.randint(0, W), block_size=bs, stride=rng.choice([bs, 3 * bs, bs + 16]),
        S=S, rank=rng.randint(0, S - 1), I=I, workspace=fl == "ws" and S == 1, ti_extra_cols=rng.choice([0, 4, 5]),
        ti_offset=rng.choice([0, 1]), count_valid=fl != "plain" or rng.random() < .5, compact=fl == "compact" and S > 1)
    out, cnt = k1(**to_dev(case)); ro, rc = ref.convert_req_index_to_global_index(**case)
    out = out.cpu(); n += 1
    if case["count_valid"] and not torch.equal(cnt.cpu(), rc): bad += 1; print("K1 count mismatch", i); continue
    if case["compact"]:
        nv = (ro != -1).sum(1)
        ok = all(torch.equal(out[t, :nv[t]].sort().values, ro[t, :nv[t]].sort().values) and bool((out[t, nv[t]:] == -1).all()) for t in range(out.shape[0]))
    else:
        ok = torch.equal(out, ro)
    if not ok: bad += 1; print("K1 mismatch", i, {k: v for k, v in case.items() if not isinstance(v, torch.Tensor)})
print(f"K1 GPU vs reference: {n - bad}/{n} ok")
bad = n = 0
for i in range(200):
    bs = rng.choice([16, 64, 256]); c = rng.choice([x for x in (2, 4, 8, 128) if bs % x == 0]); cbs = bs // c
    S = rng.choice([1, 2, 4, 8]); I = rng.choice([x for x in (1, 8) if cbs % x == 0]) if S > 1 else 1
    R = rng.randint(0, 20)
    case = T2.make_case(seed=i, qlens=[rng.choice([0, 1, 2, 5, 300, 2000]) for _ in range(R)], contexts=[rng.randint(0, 5000) for _ in range(R)],
        ratio=c, block_size=bs, stride=rng.choice([cbs, 3 * cbs + 4]), S=S, rank=rng.randint(0, S - 1), I=I, pad=rng.choice([0, 5, 500]), head=rng.choice([0, 0, 3]))
    n += 1
    if not torch.equal(k2(**to_dev(case)).cpu(), ref.compressed_slot_mapping(**case)): bad += 1; print("K2 mismatch", i)
print(f"K2 GPU vs reference: {n - bad}/{n} ok")
bad = n = 0
for i in range(100):
    nd = rng.randint(0, 40); lq = rng.randint(1, 5)
    case = T3.make_case(seed=i, num_decodes=nd, query_len=lq, width=rng.choice([0, 1, 17, 512, 513, 2000]), extra_rows=3, extra_cols=5, bt_extra_cols=rng.choice([0, 3]))
    rc = T3.clone_outputs(case); a, b = ref.prepare_uniform_decode(**rc)
    x, y = k3(**to_dev(case)); n += 1
    if not (torch.equal(x.cpu(), a) and torch.equal(y.cpu(), b)): bad += 1; print("K3 mismatch", i)
print(f"K3 GPU vs reference: {n - bad}/{n} ok")

# ---------------- K1 bandwidth
def k1_case(T, K, S=1, I=1, rank=0, ws=False, count=True, compact=False, stride=128):
    g = torch.Generator(device=dev).manual_seed(0)
    ti = torch.randint(0, 65536, (T, K), device=dev, dtype=torch.int32, generator=g)
    ti[torch.rand((T, K), device=dev, generator=g) < 0.1] = -1
    c = dict(req_id=torch.randint(0, 64, (T,), device=dev, dtype=torch.int32, generator=g),
             block_table=torch.randint(0, 100000, (64, 1024), device=dev, dtype=torch.int32, generator=g),
             token_indices=ti, block_size=64, block_stride_rows=stride, max_num_blocks_per_req=1024,
             dcp_size=S, dcp_rank=rank, dcp_interleave=I, count_valid=count, compact=compact)
    if ws:
        c["prefill_workspace_request_ids"] = torch.randint(-1, 4, (T,), device=dev, dtype=torch.int32, generator=g)
        c["prefill_workspace_starts"] = torch.randint(0, 10000, (4,), device=dev, dtype=torch.int32, generator=g)
    return c

src = torch.randint(0, 100, (8192, 2048), device=dev, dtype=torch.int32); dst = torch.empty_like(src)
t_copy = do_bench(lambda: dst.copy_(src), warmup=50, rep=300)
nbytes = 2 * src.numel() * 4
print(f"torch copy 8192x2048 int32: {t_copy*1e3:.1f} us  {nbytes / t_copy / 1e6:.0f} GB/s")
for name, kw in [("plain", dict(count=False)), ("count_valid", {}), ("workspace_count_valid", dict(ws=True)),
                 ("dcp_count_valid S4 I8", dict(S=4, I=8, rank=1)), ("dcp_compact S4 I8", dict(S=4, I=8, rank=1, count=False, compact=True)),
                 ("K=1000 count_valid (tiled)", dict(K=1000)), ("K=1000 dcp_compact (tiled)", dict(K=1000, S=4, I=8, rank=1, count=False, compact=True)),
                 ("K=512 count_valid", dict(K=512)), ("K=1024 count_valid", dict(K=1024))]:
    K = kw.pop("K", 2048)
    c = k1_case(8192, K, **kw)
    for w in ([None, 4, 16] if name == "count_valid" else [None]):
        if w is not None:
            m1._num_warps = lambda bn, w=w: w
        k1(**c); torch.cuda.synchronize()
        t = do_bench(lambda: k1(**c), warmup=50, rep=300)
        if w is not None:
            import importlib; m1._num_warps = _orig
        else:
            _orig = m1._num_warps
        b = 2 * 8192 * K * 4
        print(f"K1 {name:30s} T=8192 K={K} warps={w or 'default'}: {t*1e3:.1f} us  {b / t / 1e6:.0f} GB/s  ({b / t / 1e6 / (nbytes / t_copy / 1e6) * 100:.0f}% of copy)")
# launch overhead: small decode step
c = k1_case(64, 2048)
for _ in range(100): k1(**c)
torch.cuda.synchronize(); t0 = time.perf_counter()
for _ in range(2000): k1(**c)
t1 = time.perf_counter(); torch.cuda.synchronize()
print(f"K1 host time per launch (T=64): {(t1 - t0) / 2000 * 1e6:.1f} us")
# ---------------- K2 / K3 timings
qlens = [2048] * 3 + [1] * 256; ctx = [0, 10000, 60000] + [random.Random(1).randint(0, 60000) for _ in range(256)]
c2 = to_dev(T2.make_case(seed=0, qlens=qlens, contexts=ctx, ratio=4, block_size=64, stride=48, pad=100))
k2(**c2); print(f"K2 R=259 T={sum(qlens)}: {do_bench(lambda: k2(**c2), warmup=50, rep=200)*1e3:.1f} us")
for W in (1024, 16384):
    c3 = to_dev(T3.make_case(seed=0, num_decodes=256, query_len=2, width=W))
    k3(**c3); t = do_bench(lambda: k3(**c3), warmup=50, rep=200)
    print(f"K3 Nd=512 W={W}: {t*1e3:.1f} us  {2*512*W*4 / t / 1e6:.0f} GB/s")
