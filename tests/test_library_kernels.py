"""Real library kernels, unmodified, as zerojit kernels: FLA's ``chunk_scaled_dot_kkt_fwd_kernel``
(heuristics over a 27-config autotuner) and ``chunk_local_cumsum_scalar_kernel`` (heuristics over
FLA's own ``CachedAutotuner``), and Liger's ``_dyt_fwd_kernel`` (an 18-config autotuner, a grid
that reads the chosen ``BLOCK_N``).

CI (compile-only ``cuda:90``, dry launches): each class warms a few configs (``select_configs``)
over a small key space, the choice comes from a tuning file and the policy, and a spread of
shapes (tokens 1 to 8192, batch sizes, varlen and not) launches with 0 runtime compiles and 0
autotune benchmarks. The reference is Triton's own autotuner run with the library's arguments:
it must find the very variant zerojit launched (no new in-process entry, no benchmark). The GPU
test compares outputs with the library's own call.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from dataclasses import dataclass

import torch
import triton

fla_kkt = pytest.importorskip("fla.ops.common.chunk_scaled_dot_kkt")
fla_cumsum = pytest.importorskip("fla.ops.utils.cumsum")
fla_index = pytest.importorskip("fla.ops.utils.index")
liger_dyt = pytest.importorskip("liger_kernel.ops.dyt")

from zerojit import kernel as _kernel  # noqa: E402
from zerojit import triton_compat as _tc  # noqa: E402
from zerojit.autotune import TuningPolicy, save_tuning_file  # noqa: E402
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher  # noqa: E402
from zerojit.monitor import JitMonitor  # noqa: E402
from zerojit.registry import JitWarmupRegistry  # noqa: E402
from zerojit.specialization import WarmupTensor  # noqa: E402

TOKENS = (1, 7, 64, 100, 1000, 8192)
BATCHES = (1, 2, 4)


def _config(configs, **want):
    return next(i for i, c in enumerate(configs) if all(_tc.config_arguments(c)[k] == v for k, v in want.items()))


def _lens(total: int, parts: int) -> torch.Tensor:
    """cu_seqlens of ``parts`` sequences of about equal length summing to ``total`` (int64, as FLA's LongTensor)."""
    cuts = [round(total * i / parts) for i in range(parts + 1)]
    return torch.tensor(cuts, dtype=torch.long)


# -- FLA chunk_scaled_dot_kkt_fwd ---------------------------------------------------------------

_KKT_CONFIGS = _tc.autotune_configs(_tc.wrapped_function(fla_kkt.chunk_scaled_dot_kkt_fwd_kernel))
_KKT_DEFAULT = _config(_KKT_CONFIGS, BK=64, num_warps=4, num_stages=2)
_KKT_ALT = _config(_KKT_CONFIGS, BK=32, num_warps=2, num_stages=3)


class ChunkScaledDotKKT(TritonJitKernel["ChunkScaledDotKKT.CompileKey"]):
    """A = beta * K K^T per chunk (FLA). k: [B, T, H, K] bf16; g: [B, T, HV] fp32 or None;
    beta: [B, T, HV] bf16; A: [B, T, HV, BT] fp32 (output); varlen: B == 1, cu_seqlens int64 [N+1]
    and chunk_indices int64 [NT, 2] (FLA's prepare_chunk_indices). T is do_not_specialize."""

    kernel = fla_kkt.chunk_scaled_dot_kkt_fwd_kernel
    tuning = TuningPolicy("default", config=_KKT_DEFAULT)

    @dataclass(frozen=True)
    class CompileKey:
        H: int
        HV: int
        K: int
        BT: int
        varlen: bool
        use_g: bool

    def dispatch(self, *, H, HV, K, BT, varlen, use_g):
        return self.CompileKey(H, HV, K, BT, varlen, use_g)

    def get_warmup_keys(self, *, H=4, HV=4, K=64, BT=64):
        return [self.CompileKey(H, HV, K, BT, v, g) for v in (False, True) for g in (False, True)]

    def select_configs(self, key, configs):  # CI: the policy's default and one config the file picks
        return [i for i in configs if i in (_KKT_DEFAULT, _KKT_ALT)]

    def warmup_inputs(self, key):
        B, T = 1, 64
        return dict(k=WarmupTensor(torch.bfloat16, (B, T, key.H, key.K)),
                    g=WarmupTensor(torch.float32, (B, T, key.HV)) if key.use_g else None,
                    beta=WarmupTensor(torch.bfloat16, (B, T, key.HV)),
                    A=WarmupTensor(torch.float32, (B, T, key.HV, key.BT)),
                    cu_seqlens=WarmupTensor(torch.long, (2,)) if key.varlen else None,
                    chunk_indices=WarmupTensor(torch.long, (1, 2)) if key.varlen else None)

    def tuning_inputs(self, key):
        """On a GPU: one tuning key per compile key (T is no part of FLA's tuning key)."""
        if not torch.cuda.is_available():
            return []
        B, T, dev = 1, 4096, "cuda"
        cu = _lens(T, 4).to(dev) if key.varlen else None
        return [dict(k=torch.randn(B, T, key.H, key.K, device=dev, dtype=torch.bfloat16),
                     g=torch.randn(B, T, key.HV, device=dev).cumsum(1) if key.use_g else None,
                     beta=torch.rand(B, T, key.HV, device=dev, dtype=torch.bfloat16),
                     A=torch.empty(B, T, key.HV, key.BT, device=dev), cu_seqlens=cu,
                     chunk_indices=fla_index.prepare_chunk_indices(cu, key.BT) if key.varlen else None)]

    @kernel_launcher
    def __call__(self, *, k, g, beta, A, cu_seqlens=None, chunk_indices=None) -> LaunchSpec:
        B, T, H, K = k.shape
        HV, BT = beta.shape[2], A.shape[3]
        NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
        return LaunchSpec((NT, B * HV), dict(T=T, H=H, HV=HV, K=K, BT=BT), A)


# -- FLA chunk_local_cumsum_scalar --------------------------------------------------------------

_CUMSUM_TUNER = _tc.wrapped_function(fla_cumsum.chunk_local_cumsum_scalar_kernel)
_CUMSUM_DEFAULT = _config(_tc.autotune_configs(_CUMSUM_TUNER), num_warps=4)


class ChunkLocalCumsum(TritonJitKernel["ChunkLocalCumsum.CompileKey"]):
    """o = chunk-local cumsum of s (FLA). s: [B, T, H] fp32, o like s; varlen: B == 1 with
    cu_seqlens / chunk_indices int64. B is a constexpr of the kernel: each batch size compiles."""

    kernel = fla_cumsum.chunk_local_cumsum_scalar_kernel
    tuning = TuningPolicy("default", config=_CUMSUM_DEFAULT)

    @dataclass(frozen=True)
    class CompileKey:
        B: int
        H: int
        BT: int
        varlen: bool

    def dispatch(self, *, B, H, BT, varlen):
        return self.CompileKey(B, H, BT, varlen)

    def get_warmup_keys(self, *, H=4, BT=64):
        return [self.CompileKey(b, H, BT, False) for b in BATCHES] + [self.CompileKey(1, H, BT, True)]

    def select_configs(self, key, configs):
        return [i for i in configs if i == _CUMSUM_DEFAULT]

    def warmup_inputs(self, key):
        return dict(s=WarmupTensor(torch.float32, (key.B, 64, key.H)), o=WarmupTensor(torch.float32, (key.B, 64, key.H)),
                    cu_seqlens=WarmupTensor(torch.long, (2,)) if key.varlen else None,
                    chunk_indices=WarmupTensor(torch.long, (1, 2)) if key.varlen else None, BT=key.BT)

    @kernel_launcher(host_only=("BT",))
    def __call__(self, *, s, o, cu_seqlens=None, chunk_indices=None, BT=64) -> LaunchSpec:
        B, T, H = s.shape
        NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
        return LaunchSpec((NT * B * H,), dict(scale=None, T=T, B=B, H=H, BT=BT, REVERSE=False, USE_GRAPH=False), o)


# -- Liger DyT forward --------------------------------------------------------------------------

_DYT_CONFIGS = _tc.autotune_configs(liger_dyt._dyt_fwd_kernel)
_DYT_DEFAULT = _config(_DYT_CONFIGS, BLOCK_N=1024, num_warps=4, num_stages=1)
_DYT_ALT = _config(_DYT_CONFIGS, BLOCK_N=2048, num_warps=8, num_stages=2)


class DyTForward(TritonJitKernel["DyTForward.CompileKey"]):
    """y = tanh(alpha * x) * gamma (+ beta) (Liger). x, y: [M, N] fp32 (M: tokens); alpha: [1];
    gamma, beta: [N]. N is a constexpr of the kernel (one variant per hidden size)."""

    kernel = liger_dyt._dyt_fwd_kernel
    tuning = TuningPolicy("nearest", config=_DYT_DEFAULT)

    @dataclass(frozen=True)
    class CompileKey:
        N: int
        have_beta: bool

    def dispatch(self, *, N, have_beta):
        return self.CompileKey(N, have_beta)

    def get_warmup_keys(self, *, hidden=(2048,)):
        return [self.CompileKey(n, b) for n in hidden for b in (True, False)]

    def select_configs(self, key, configs):
        return [i for i in configs if i in (_DYT_DEFAULT, _DYT_ALT)]

    def warmup_inputs(self, key):
        return dict(X=WarmupTensor(torch.float32, (16, key.N)), Y=WarmupTensor(torch.float32, (16, key.N)),
                    Alpha=WarmupTensor(torch.float32), Gamma=WarmupTensor(torch.float32, (key.N,)),
                    Beta=WarmupTensor(torch.float32, (key.N,)) if key.have_beta else None)

    def tuning_inputs(self, key):
        """On a GPU: 4096 tokens at the key's hidden size (M is no part of Liger's tuning key)."""
        if not torch.cuda.is_available():
            return []
        x = torch.randn(4096, key.N, device="cuda")
        return [dict(X=x, Y=torch.empty_like(x), Alpha=torch.rand(1, device="cuda"),
                     Gamma=torch.randn(key.N, device="cuda"),
                     Beta=torch.randn(key.N, device="cuda") if key.have_beta else None)]

    @kernel_launcher
    def __call__(self, *, X, Y, Alpha, Gamma, Beta) -> LaunchSpec:
        M, N = X.shape
        return LaunchSpec(lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), M),
                          dict(HAVE_BETA=Beta is not None, N=N), Y)


KERNELS = (ChunkScaledDotKKT, ChunkLocalCumsum, DyTForward)


# -- the serving spread, as the libraries would launch it ---------------------------------------

def _kkt_launches():
    """(zerojit inputs, the library's own kernel keyword arguments, grid) over the spread."""
    H = HV = 4
    K = BT = 64
    for varlen in (False, True):
        for use_g in (False, True):
            for T in TOKENS:
                for B in ((1,) if varlen else BATCHES):
                    cu = _lens(T, 3 if T >= 3 else 1) if varlen else None
                    ci = fla_index.prepare_chunk_indices(cu, BT) if varlen else None
                    k = torch.empty(B, T, H, K, dtype=torch.bfloat16)
                    g = torch.empty(B, T, HV) if use_g else None
                    beta = torch.empty(B, T, HV, dtype=torch.bfloat16)
                    A = torch.empty(B, T, HV, BT)
                    NT = triton.cdiv(T, BT) if cu is None else len(ci)
                    library = dict(k=k, g=g, beta=beta, A=A, cu_seqlens=cu, chunk_indices=ci, T=T, H=H, HV=HV, K=K,
                                   BT=BT)
                    yield dict(k=k, g=g, beta=beta, A=A, cu_seqlens=cu, chunk_indices=ci), library, (NT, B * HV)


def _cumsum_launches():
    H, BT = 4, 64
    for varlen in (False, True):
        for T in TOKENS:
            for B in ((1,) if varlen else BATCHES):
                cu = _lens(T, 2 if T >= 2 else 1) if varlen else None
                ci = fla_index.prepare_chunk_indices(cu, BT) if varlen else None
                s, o = torch.empty(B, T, H), torch.empty(B, T, H)
                NT = triton.cdiv(T, BT) if cu is None else len(ci)
                library = dict(s=s, o=o, scale=None, cu_seqlens=cu, chunk_indices=ci, T=T, B=B, H=H, BT=BT,
                               REVERSE=False, USE_GRAPH=False)
                yield dict(s=s, o=o, cu_seqlens=cu, chunk_indices=ci), library, (NT * B * H,)


def _dyt_launches():
    N = 2048
    for M in TOKENS:
        for beta in (True, False):
            x, y = torch.empty(M, N), torch.empty(M, N)
            a, gm, b = torch.empty(1), torch.empty(N), torch.empty(N) if beta else None
            library = (x, y, a, gm, b, beta, N)  # Liger passes them positionally
            yield dict(X=x, Y=y, Alpha=a, Gamma=gm, Beta=b), library, (lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), M))


LAUNCHES = {ChunkScaledDotKKT: _kkt_launches, ChunkLocalCumsum: _cumsum_launches, DyTForward: _dyt_launches}


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """Warm the three kernels once under compile-only, with tuning files for two of them."""
    from triton import knobs

    from zerojit.compile_only import compile_only

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.cache, "dir", str(tmp_path_factory.mktemp("triton-cache-library")))
        with compile_only("cuda:90"):
            kkt, dyt = ChunkScaledDotKKT(), DyTForward()
            # A tuning file as a GPU warm-up would leave it: one tuned key each picks the other config
            kkt_key = (4, 4, 64, 64, False, "torch.bfloat16", "torch.float32", "torch.bfloat16", "torch.float32")
            save_tuning_file(kkt.tuning_file(), kkt.tuning_header(), _KKT_CONFIGS, [(kkt_key, _KKT_ALT, 0.01)])
            dyt_key = (2048, "torch.float32", "torch.float32", "torch.float32", "torch.float32", "torch.float32")
            save_tuning_file(dyt.tuning_file(), dyt.tuning_header(), _DYT_CONFIGS, [(dyt_key, _DYT_ALT, 0.01)])
            reg = JitWarmupRegistry()
            with reg.activate():
                for cls in KERNELS:
                    cls().register_warmup()
            report = reg.warmup(progress=False)
            yield report, {ChunkScaledDotKKT: kkt_key, DyTForward: dyt_key}


def test_key_spaces_are_the_selected_configs(warmed):
    report, _ = warmed
    by_kernel = {k.kernel: len(k.keys) for k in report.kernels}
    assert by_kernel == {"chunk_scaled_dot_kkt_fwd": 4 * 2, "chunk_local_cumsum_scalar": 4, "dyt_fwd": 2 * 2}


@pytest.mark.parametrize("cls", KERNELS, ids=lambda c: c.__name__)
def test_serving_spread_zero_compiles_zero_benchmarks(warmed, cls):
    report, _ = warmed
    k = cls()
    launched = 0
    with JitMonitor("error", report=report) as mon:
        for inputs, _, _ in LAUNCHES[cls]():
            k(**inputs)
            launched += 1
    counts = mon.counts()
    assert (counts.runtime_compiles, counts.benchmarks, counts.launches) == (0, 0, launched)


@pytest.mark.parametrize("cls", KERNELS, ids=lambda c: c.__name__)
def test_library_path_finds_the_variant_zerojit_launched(warmed, cls):
    """Triton's own autotuner (the library's call, with the library's arguments: a dry launch under
    compile-only) picks, without benchmarking, the config zerojit chose: the same CompiledKernel,
    nothing new in Triton's in-process cache; and the library's launch is a hit as zerojit's is."""
    report, tuned = warmed
    k = cls()
    base = k.kernel
    cache = _tc.kernel_cache(base, _tc.current_device())
    before = len(cache)
    seen = []
    previous = _kernel.set_launch_observer(lambda kern, compiled: seen.append(compiled))
    try:
        with JitMonitor("error", report=report) as mon:
            for inputs, library, grid in LAUNCHES[cls]():
                del seen[:]
                k(**inputs)
                if isinstance(library, tuple):
                    ours = cls.wrapped[grid](*library)
                else:
                    ours = cls.wrapped[grid](**library)
                assert seen == [ours, ours]
    finally:
        _kernel.set_launch_observer(previous)
    assert len(cache) == before and mon.counts().benchmarks == 0 and mon.counts().runtime_compiles == 0
    if cls in tuned:  # the tuning file's key picked the other config, as Triton's autotuner cache says
        tuner = _tc.wrapped_function(cls.wrapped) if _tc.is_heuristics(cls.wrapped) else cls.wrapped
        assert _tc.autotune_configs(tuner).index(tuner.cache[tuned[cls]]) == cls._tuning_table[tuned[cls]]


@pytest.mark.gpu
def test_gpu_outputs_equal_the_library_call():
    """Real launches after a GPU warm-up (benchmarking the declared tuning keys): 0 compiles, 0
    benchmarks, outputs equal to the library's own functions."""
    for cls in KERNELS:
        cls._tuning_table.clear()
    reg = JitWarmupRegistry()
    with reg.activate():
        for cls in KERNELS:
            cls().register_warmup()
    report = reg.warmup(progress=False)
    assert len(ChunkScaledDotKKT._tuning_table) == 4 and len(DyTForward._tuning_table) == 2  # benchmarked
    assert os.path.exists(ChunkScaledDotKKT().tuning_file())
    dev = "cuda"
    torch.manual_seed(0)
    cases = []
    for T in (1, 100, 8192):
        k = torch.randn(2, T, 4, 64, device=dev, dtype=torch.bfloat16)
        g = torch.randn(2, T, 4, device=dev).cumsum(1)
        beta = torch.rand(2, T, 4, device=dev, dtype=torch.bfloat16)
        s = torch.randn(2, T, 4, device=dev)
        x = torch.randn(T, 2048, device=dev)
        a, gm, b = torch.rand(1, device=dev), torch.randn(2048, device=dev), torch.randn(2048, device=dev)
        # the libraries' own calls (after the warm-up they take zerojit's choices, unbenchmarked; outside the monitor)
        refs = (fla_kkt.chunk_scaled_dot_kkt_fwd(k=k, g=g, beta=beta, chunk_size=64),
                fla_cumsum.chunk_local_cumsum_scalar(s, chunk_size=64), liger_dyt.liger_dyt_fwd(x, a, gm, b))
        cases.append(((k, g, beta, s, x, a, gm, b), refs))
    with JitMonitor("error", report=report) as mon:
        for (k, g, beta, s, x, a, gm, b), refs in cases:
            ours = (ChunkScaledDotKKT()(k=k, g=g, beta=beta, A=torch.empty(2, k.shape[1], 4, 64, device=dev)),
                    ChunkLocalCumsum()(s=s, o=torch.empty_like(s)),
                    DyTForward()(X=x, Y=torch.empty_like(x), Alpha=a, Gamma=gm, Beta=b))
            torch.cuda.synchronize()
            for got, want in zip(ours, refs):
                torch.testing.assert_close(got, want)
    assert mon.counts().runtime_compiles == 0 and mon.counts().benchmarks == 0
