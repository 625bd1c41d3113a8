"""The fallback cases of issue 29's correctness tests, shared by the CPU test
(``tests/test_fallback_cases.py``: compile-only dry launches) and the GPU test
(``tests/test_fallback_gpu.py``: real launches, outputs compared).

A :class:`Case` is one kernel with a key space cut by one value class: ``register()`` registers
what warm-up compiles (the class the launch is in is not among it), ``make(device)`` builds the
inputs of a launch in the missing class, ``launch(inputs)`` launches them and returns the
outputs, ``reference(inputs)`` is the independent PyTorch reference.

Which class is missing, and why that one:

* The sparse-MLA kernels (docs KERNELS.md) keep every runtime int ``do_not_specialize`` and
  every input pointer but K4's ``seq_lens`` ``do_not_specialize_on_alignment``: the only value
  classes Triton still specializes are the alignment of the outputs their launchers allocate
  (always 16-byte aligned) and K4's ``seq_lens``. So K4 launches through its zerojit launcher
  with ``seq_lens`` an offset view (``seq_lens[num_decodes:]`` with an odd number of decodes,
  as KERNELS.md says a caller passes it), and K1, K2, K5, K6 and K7 launch their ``triton.jit``
  function directly with the launcher's own arguments (:func:`launch_arguments`) where every
  alignment-specialized pointer is a misaligned twin (a copy at an odd element offset, copied
  back after: :func:`misaligned_launch`), which is what a caller handing in its own output
  buffers could give. K3 specializes nothing on value (all four pointers and all ints are
  exempt): its generic variant is its specialized variant, the launch in an "other" class (a
  misaligned ``seq_lens``, ``query_len`` 1) must be a plain hit (``misses=False``).
* FLA's ``fused_recurrent_fwd_kernel`` (heuristics over an autotuner, the library's decode
  path; B and T are ``do_not_specialize`` upstream): ``q``, ``k`` and ``v`` misaligned views,
  as slices of one packed projection buffer give them. Without a state the generic variant's
  layouts equal the specialized one's (bit-equal); with an aligned initial and final state they
  do not (the state's 2-D loads and stores are vectorized only in the specialized variant, so
  the reduction over K runs in another order): a documented bound (:func:`fla_bound`).
* Liger's ``_rms_norm_forward_kernel`` (plain ``triton.jit``): warmed at hidden sizes
  divisible by 16, launched at an odd hidden size (4095: same ``BLOCK_SIZE``, ``num_warps``);
  its fp32 sum of squares is reduced in another order by the generic variant (one element per
  thread against four): a documented bound (:func:`rmsnorm_bound`).

``compare`` says how the fallback launch's outputs must equal the specialized variant's:
``"exact"`` (integer kernels), ``"bit"`` (float, ``torch.equal``), or a bound function
``(fallback, specialized, inputs) -> figures`` that asserts and returns what it measured.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import triton

from zerojit import generic as _generic
from zerojit import triton_compat as _tc
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor

I32 = torch.int32

__all__ = ["Case", "CASES", "case_ids", "warm", "launch_arguments", "misaligned_launch", "misaligned_copy",
           "outputs_of", "snapshot", "forget_variants", "fla_bound", "rmsnorm_bound", "layouts"]


# ---------------------------------------------------------------------------------------------
# Warm-up with generic variants (the one place to switch when the "generic" part is merged)
# ---------------------------------------------------------------------------------------------


def warm(registry: Any, case: "Case") -> Any:
    """``registry.warmup(config)`` with generic variants and without learned keys (a miss an
    earlier run recorded must not warm the class a test leaves out)."""
    return registry.warmup(case.config(), workers=1, progress=False, generic=True, learned=False)


def forget_variants(jit_fn: Any) -> None:
    """Forget ``jit_fn``'s in-process variants on the current device and its generic variants, so
    a class another test launched is a miss again (Triton's disk cache is kept: a reload is fast)."""
    device = _tc.current_device()
    if device in jit_fn.device_caches:
        _tc.kernel_cache(jit_fn, device).clear()
    _generic.forget(jit_fn)


# ---------------------------------------------------------------------------------------------
# Launch helpers
# ---------------------------------------------------------------------------------------------


def outputs_of(value: Any) -> list[torch.Tensor]:
    """The tensors of a launcher's or reference's return value, in order (None skipped)."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for t in value if t is not None]


def snapshot(value: Any) -> list[torch.Tensor]:
    """A copy of the outputs (a later launch may write into the same buffers)."""
    return [t.clone() for t in outputs_of(value)]


def launch_arguments(kernel: TritonJitKernel, inputs: dict[str, Any]) -> tuple[tuple, dict[str, Any], Any]:
    """``(grid, arguments by parameter name with launch options, returns)`` of the launch the
    zerojit ``kernel`` makes for ``inputs``, launching nothing (its checks and output allocation
    run): what :meth:`TritonJitKernel.select_variant` computes. For a kernel that is not wrapped
    by autotune or heuristics."""
    entry = type(kernel).__call__
    spec = entry._zerojit_method(kernel, **inputs)
    values = tuple(inputs[n] if n in inputs else d for n, d in entry._zerojit_inputs)
    return tuple(spec.grid), kernel._named_args(spec, values), spec.returns


def _alignment_specialized(jit_fn: Any) -> set[str]:
    """Names of the parameters whose 16-byte alignment Triton specializes (pointers among them)."""
    if hasattr(jit_fn, "params"):
        return {p.name for p in jit_fn.params if not p.is_constexpr and not p.do_not_specialize
                and not p.do_not_specialize_on_alignment}
    # TRITON_INTERPRET=1: an InterpretedFunction keeps triton.jit's keyword arguments
    kw = jit_fn.kwargs
    exempt = set(kw.get("do_not_specialize", ())) | set(kw.get("do_not_specialize_on_alignment", ()))
    params = inspect.signature(jit_fn.fn).parameters.values()
    return {p.name for p in params if "constexpr" not in str(p.annotation) and p.name not in exempt}


def misaligned_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` (same shape and strides) whose address is not 16-byte aligned."""
    span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) if t.numel() else 0
    buf = torch.empty(span + 1, dtype=t.dtype, device=t.device)
    twin = buf.as_strided(t.shape, t.stride(), 1)
    twin.copy_(t)
    assert twin.data_ptr() % 16 != 0
    return twin


def misaligned_launch(kernel: TritonJitKernel, inputs: dict[str, Any]) -> Any:
    """Launch ``kernel``'s ``triton.jit`` function with the zerojit launcher's own arguments for
    ``inputs`` (:func:`launch_arguments`), every 16-byte aligned tensor whose parameter Triton
    specializes on alignment replaced by a misaligned twin (:func:`misaligned_copy`), copied back
    after the launch; returns the launcher's return value (its outputs, now written)."""
    grid, named, returns = launch_arguments(kernel, inputs)
    twins = []
    for name in _alignment_specialized(kernel.kernel):
        v = named.get(name)
        if isinstance(v, torch.Tensor) and v.data_ptr() % 16 == 0:
            named[name] = misaligned_copy(v)
            twins.append((v, named[name]))
    assert twins, f"{kernel.name}: no aligned pointer Triton specializes: nothing to misalign"
    kernel.kernel[grid](**named)
    for v, twin in twins:
        v.copy_(twin)
    return returns


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One kernel, its key space cut by one value class, and a launch in that class (module doc)."""

    name: str
    jit_fn: Any  #: the triton.jit function whose miss a generic variant serves
    kernel_name: str  #: the zerojit kernel's registry name (its report entries)
    register: Callable[[], None]  #: registers the cut key space, under ``registry.activate()``
    make: Callable[[Any], dict]  #: ``make(device)``: the launch inputs, in the missing class
    launch: Callable[[dict], Any]
    reference: Callable[[dict], Any]
    missing: str  #: the class left out, in words
    compare: Any = "exact"  #: "exact", "bit", or a bound function (module doc)
    config: Callable[[], Any] = lambda: None  #: ``registry.warmup(config())``
    misses: bool = True  #: False: the launch must be a plain hit (K3)
    keep_one: tuple[str, ...] = ()
    kernel: Any = None  #: the zerojit kernel instance that launches it
    tolerance: dict = field(default_factory=dict)  #: assert_close's, for a float kernel against its reference


# -- sparse MLA ---------------------------------------------------------------------------------

_MLA_STEPS: dict[tuple[str, str], Any] = {}


@dataclass
class _Step:
    config: Any
    plan: Any
    x: Any  # StepInputs


def _mla_step(config_name: str, device: Any) -> _Step:
    """A small mixed step (3 decodes, then 2 prefills) of a shipped config, max_num_seqs cut to 8
    (K5's key space: 4 tiles). An odd number of decodes makes ``seq_lens[3:]`` misaligned."""
    key = (config_name, str(device))
    if key in _MLA_STEPS:
        return _MLA_STEPS[key]
    from zerojit.kernels.mla.backends import default_backend
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import MetadataPlan, build_step_inputs
    from zerojit.runner.scheduler import Batch

    config = load_config(config_name, max_num_seqs=8)
    lq = config.query_len
    qlens = (lq, lq, lq, 37, 70)
    seqs = (301, 700, 1000, 37, 200)
    per_block = config.block_size * config.dcp_size
    need = [-(-s // per_block) for s in seqs]
    num_blocks = 4 * sum(need) + 8
    g = torch.Generator().manual_seed(29)
    perm = (torch.randperm(num_blocks - 1, generator=g) + 1).tolist()
    blocks, at = [], 0
    for n in need:
        blocks.append(perm[at: at + n])
        at += n
    batch = Batch(step=0, request_ids=tuple(range(len(seqs))), query_lens=qlens, seq_lens=seqs, num_decodes=3)
    cache = allocate_kv_cache(config, num_blocks, device="meta")
    plan = MetadataPlan.for_cache(config, default_backend(config), cache)
    x = build_step_inputs(batch, plan, blocks=blocks, fill=True, seed=29, device=device)
    _MLA_STEPS[key] = step = _Step(config, plan, x)
    return step


def _register(config_name: str, number: str, **override: Any) -> Callable[[], None]:
    def register() -> None:
        step = _mla_step(config_name, "cpu")
        entry = step.plan.step_launches[number]
        request = {**dict(entry.request), **override}
        entry.kernel.register_warmup(**request)

    return register


def _k1_inputs(device: Any) -> dict:
    step = _mla_step("deepseek-v3.2", device)
    from zerojit.kernels.mla.index import FLAVOUR_INPUTS

    cfg, plan, x = step.config, step.plan, step.x
    spec = FLAVOUR_INPUTS[plan.index_flavours[0]]
    return dict(req_id=x.token_to_req, block_table=x.block_table, token_indices=x.token_indices,
                block_size=cfg.block_size, block_stride_rows=plan.block_stride_rows,
                max_num_blocks_per_req=plan.table_width, count_valid=spec["count_valid"], compact=spec["compact"])


def _k2_inputs(device: Any) -> dict:
    step = _mla_step("deepseek-v3.2", device)
    cfg, plan, x = step.config, step.plan, step.x
    ratio = 4
    return dict(query_start_loc=x.query_start_loc, seq_lens=x.seq_lens, block_table=x.block_table,
                num_tokens=x.num_tokens, ratio=ratio, block_size=cfg.block_size,
                block_stride_rows=dict(plan.compressed_block_strides)[ratio], **plan.dcp)


def _k3_inputs(device: Any) -> dict:
    from zerojit.runner.metadata import DecodeBuffers

    step = _mla_step("dsv4-like", device)
    x, nd = step.x, step.x.num_decodes
    bufs = DecodeBuffers.allocate(step.plan, device=device, fill=-7)
    seq_lens = misaligned_copy(x.seq_lens[:nd])  # an "other" class K3 does not specialize on
    return dict(seq_lens=seq_lens, block_table=x.block_table[:nd], query_len=1, num_decode_tokens=nd,
                expanded_seq_lens=bufs.expanded_seq_lens, expanded_block_table=bufs.expanded_block_table)


def _chunk(x: Any) -> tuple[int, torch.Tensor, torch.Tensor, int]:
    """The prefill chunk of the step: ``(num_decodes, query_start_loc rebased, seq_lens view, tokens)``."""
    nd = x.num_decodes
    qsl = x.query_start_loc[nd:] - x.query_start_loc[nd]
    return nd, qsl, x.seq_lens[nd:], int(qsl[-1])


def _k4_inputs(device: Any) -> dict:
    step = _mla_step("deepseek-v3.2", device)
    x, plan = step.x, step.plan
    nd, qsl, seq_lens, T = _chunk(x)
    assert seq_lens.data_ptr() % 16 != 0  # the class the key space leaves out
    cu = [0]
    for s in x.seq_lens_host[nd:]:
        cu.append(cu[-1] + plan.compressed_len(s, 4))
    return dict(query_start_loc=qsl, seq_lens=seq_lens, cu_compressed=torch.tensor(cu, dtype=I32, device=device),
                query_slice_start=0, query_slice_stop=T, num_compressed=cu[-1], ratio=4, **plan.dcp)


def _k5_inputs(device: Any) -> dict:
    step = _mla_step("deepseek-v3.2", device)
    x = step.x
    return dict(seq_lens=x.seq_lens, query_start_loc=x.query_start_loc, num_decodes=x.num_decodes,
                num_prefills=x.num_prefills, sliding_window=step.config.sliding_window)


def _k6_inputs(device: Any) -> dict:
    step = _mla_step("deepseek-v3.2", device)
    cfg, x = step.config, step.x
    return dict(token_to_req=x.token_to_req, slot_mapping=x.swa_slot_mapping, seq_lens=x.seq_lens,
                query_start_loc=x.query_start_loc, block_table=x.swa_block_table, num_tokens=x.num_tokens,
                token_offset=0, sliding_window=cfg.sliding_window, block_size=cfg.block_size,
                block_stride_rows=step.plan.swa_block_stride_rows, causal=True,
                num_speculative_tokens=cfg.num_speculative_tokens)


def _k7_inputs(device: Any) -> dict:
    from zerojit.kernels.mla import reference

    step = _mla_step("deepseek-v3.2", device)
    cfg, x = step.config, step.x
    nd, qsl, seq_lens, T = _chunk(x)
    ratio, Wn = 4, cfg.sliding_window
    ctx = x.seq_lens_host[nd:]
    qlens = x.query_lens[nd:]
    gathered = [q + min(s - q, Wn - 1) for q, s in zip(qlens, ctx)]
    gather_lens, _ = reference.compute_prefill_metadata(x.seq_lens, x.query_start_loc, num_decodes=nd,
                                                        num_prefills=len(ctx), sliding_window=Wn)
    swa_offset = max(s // ratio for s in ctx)
    return dict(topk=x.compressed_topk[:T], query_start_loc=qsl, seq_lens=seq_lens, gather_lens=gather_lens,
                num_tokens=T, row_stride=swa_offset + max(gathered), swa_offset=swa_offset,
                top_k=cfg.topk_width(ratio), ratio=ratio, sliding_window=Wn, max_gather_len=max(gathered),
                max_compressed_len=swa_offset)


_K7_HINTS = ("max_gather_len", "max_compressed_len")


def _mla_cases() -> list[Case]:
    from zerojit.kernels.mla import reference
    from zerojit.kernels.mla.combine import combine_topk_swa_indices as k7
    from zerojit.kernels.mla.decode import prepare_uniform_decode as k3
    from zerojit.kernels.mla.index import convert_req_index_to_global_index as k1
    from zerojit.kernels.mla.prefill import build_prefill_chunk_metadata as k4
    from zerojit.kernels.mla.prefill import compute_prefill_metadata as k5
    from zerojit.kernels.mla.slot_mapping import compressed_slot_mapping as k2
    from zerojit.kernels.mla.swa import compute_swa_indices_and_lens as k6

    def ref(fn: Callable, drop: tuple[str, ...] = ()) -> Callable[[dict], Any]:
        return lambda inputs: fn(**{k: v for k, v in inputs.items() if k not in drop})

    def k3_reference(inputs: dict) -> Any:
        return reference.prepare_uniform_decode(**{**inputs, "expanded_seq_lens": inputs["expanded_seq_lens"].clone(),
                                                   "expanded_block_table": inputs["expanded_block_table"].clone()})

    outputs = "the outputs misaligned (the launcher allocates them 16-byte aligned)"
    v32, v4 = "deepseek-v3.2", "dsv4-like"

    def case(name: str, kernel: Any, config: str, make: Callable, launch: Callable, reference: Callable, missing: str,
             **over: Any) -> Case:
        return Case(name, kernel.kernel, kernel.name, _register(config, name, **over.pop("request", {})), make, launch,
                    reference, missing, config=lambda: _mla_step(config, "cpu").config, kernel=kernel, **over)

    return [
        case("K1", k1, v32, _k1_inputs, lambda i: misaligned_launch(k1, i),
             ref(reference.convert_req_index_to_global_index), outputs),
        case("K2", k2, v32, _k2_inputs, lambda i: misaligned_launch(k2, i), ref(reference.compressed_slot_mapping),
             outputs),
        case("K3", k3, v4, _k3_inputs, lambda i: k3(**i), k3_reference,
             "none: K3 specializes no argument on its value (a misaligned seq_lens, query_len 1 are hits)",
             misses=False),
        case("K4", k4, v32, _k4_inputs, lambda i: k4(**i), ref(reference.build_prefill_chunk_metadata),
             "seq_lens misaligned (seq_lens[3:] after 3 decodes): warmed aligned only",
             request=dict(seq_lens_aligned=(True,))),
        case("K5", k5, v32, _k5_inputs, lambda i: misaligned_launch(k5, i), ref(reference.compute_prefill_metadata),
             outputs),
        case("K6", k6, v32, _k6_inputs, lambda i: misaligned_launch(k6, i),
             ref(reference.compute_swa_indices_and_lens), outputs),
        case("K7", k7, v32, _k7_inputs, lambda i: misaligned_launch(k7, i),
             ref(reference.combine_topk_swa_indices, _K7_HINTS), outputs),
    ]


# -- FLA fused recurrent ------------------------------------------------------------------------


def _fla_cases() -> list[Case]:
    try:
        from fla.ops.common import fused_recurrent as fla_fr
    except ImportError:
        return []
    from dataclasses import dataclass as _dc

    from zerojit.autotune import TuningPolicy

    configs = _tc.autotune_configs(_tc.find_autotuner(fla_fr.fused_recurrent_fwd_kernel))
    default = next(i for i, c in enumerate(configs) if _tc.config_arguments(c).get("num_warps") == 4)

    class FusedRecurrentFwd(TritonJitKernel["FusedRecurrentFwd.CompileKey"]):
        """o[t] = (q[t] * scale) @ S[t], S[t] = S[t-1] + k[t]^T v[t] (FLA's fused recurrent forward,
        no gates). q, k: [B, T, H, K] bf16; v: [B, T, H, V] bf16; o: [B, T, H, V] fp32 (output);
        h0, ht: [B, H, K, V] fp32 or None. K, V <= 64 (one tile: NK = NV = 1)."""

        kernel = fla_fr.fused_recurrent_fwd_kernel
        tuning = TuningPolicy("default", config=default)

        @_dc(frozen=True)
        class CompileKey:
            H: int
            K: int
            V: int
            state: bool

        def dispatch(self, *, H, K, V, state):
            return self.CompileKey(H, K, V, state)

        def get_warmup_keys(self, *, H=4, K=64, V=64):
            return [self.CompileKey(H, K, V, s) for s in (False, True)]

        def select_configs(self, key, configs):
            return [i for i in configs if i == default]

        def warmup_inputs(self, key):
            B, T = 2, 16
            st = WarmupTensor(torch.float32, (B, key.H, key.K, key.V)) if key.state else None
            return dict(q=WarmupTensor(torch.bfloat16, (B, T, key.H, key.K)),
                        k=WarmupTensor(torch.bfloat16, (B, T, key.H, key.K)),
                        v=WarmupTensor(torch.bfloat16, (B, T, key.H, key.V)),
                        o=WarmupTensor(torch.float32, (B, T, key.H, key.V)), h0=st, ht=st, scale=0.125)

        @kernel_launcher
        def __call__(self, *, q, k, v, o, h0=None, ht=None, scale=0.125) -> LaunchSpec:
            B, T, H, K = q.shape
            V = v.shape[-1]
            return LaunchSpec((B * H,), dict(g=None, g_gamma=None, gk=None, gv=None, cu_seqlens=None, B=B, T=T, H=H,
                                             K=K, V=V, BK=triton.next_power_of_2(K), BV=triton.next_power_of_2(V),
                                             REVERSE=False, USE_G=False, USE_G_GAMMA=False, USE_GK=False,
                                             USE_GV=False, STATE_V_FIRST=False), (o, ht))

    kernel = FusedRecurrentFwd()

    def make(state: bool) -> Callable[[Any], dict]:
        def build(device: Any) -> dict:
            g = torch.Generator().manual_seed(7)
            B, T, H, K, V = 3, 33, 4, 64, 64
            packed = torch.randn(B * T * H * (2 * K + V) + 3, generator=g).to(torch.bfloat16)

            packed = packed.to(device)

            def view(at: int, shape: tuple) -> torch.Tensor:  # a slice of one packed buffer: odd offsets
                return packed[at: at + math.prod(shape)].view(shape)

            q = view(1, (B, T, H, K))
            k = view(1 + B * T * H * K, (B, T, H, K))
            v = view(1 + 2 * B * T * H * K, (B, T, H, V))
            out = dict(q=q, k=k, v=v, o=torch.empty(B, T, H, V, device=device), scale=K ** -0.5)
            if state:
                out.update(h0=(0.1 * torch.randn(B, H, K, V, generator=g)).to(device),
                           ht=torch.empty(B, H, K, V, device=device))
            return out
        return build

    def launch(inputs: dict) -> Any:
        return kernel(**inputs)

    def reference(inputs: dict) -> Any:  # in fp64, returned in fp32
        q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
        B, T, H, K = q.shape
        S = inputs["h0"].double() if inputs.get("h0") is not None else q.new_zeros(B, H, K, v.shape[-1])
        o = []
        for t in range(T):
            S = S + k[:, t, :, :, None] * v[:, t, :, None, :]
            o.append(((q[:, t] * inputs["scale"])[..., None] * S).sum(-2))
        return (torch.stack(o, 1).float(), S.float() if inputs.get("ht") is not None else None)

    def register() -> None:
        kernel.register_warmup()

    why = "q, k, v misaligned views (slices of one packed buffer at odd offsets): warmed aligned only"
    tol = dict(rtol=1e-4, atol=1e-4)  # fp32 sums of bf16 products against an fp64 reference, |o| <= ~40
    jit_fn = _tc.unwrap_jit_function(kernel.kernel)
    return [
        Case("FLA fused_recurrent", jit_fn, kernel.name, register, make(False), launch, reference, why, "bit",
             kernel=kernel, tolerance=tol),
        Case("FLA fused_recurrent + state", jit_fn, kernel.name, register, make(True), launch, reference,
             why + "; initial and final state aligned", fla_bound, kernel=kernel, tolerance=tol),
    ]


def _ulp_diff(a: torch.Tensor, b: torch.Tensor) -> int:
    """Most fp32 ulps between two tensors' elements (their bit patterns' distance, same sign)."""
    ia = a.float().contiguous().view(torch.int32).to(torch.int64)
    ib = b.float().contiguous().view(torch.int32).to(torch.int64)
    return int((ia - ib).abs().max()) if a.numel() else 0


U = 2.0 ** -24  # fp32 unit roundoff


def fla_bound(fallback: list[torch.Tensor], specialized: list[torch.Tensor], inputs: dict) -> dict:
    """FLA fused recurrent with an aligned state: ``o`` of the generic and the specialized variant
    may differ, by at most ``2 * gamma_K * sum_k |S[k, v] q[k] scale|`` per element (gamma_n = n u /
    (1 - n u), u = 2^-24): the two sum the same K = 64 fp32 products, each in its own order (the
    specialized variant's state loads and stores are 128-bit vectors, so its [K, V] layout holds 4
    elements per thread along V and splits K over other threads than the generic's one-element
    layout), and any order's error is at most gamma_{K-1} times the sum of magnitudes (Higham,
    Accuracy and Stability of Numerical Algorithms, 4.2). The bound uses |S| <= |h0| + sum |k^T v|
    in fp64. The state ``ht`` is elementwise the same arithmetic in both: it must be bit-equal."""
    q, k, v = (inputs[n].double() for n in ("q", "k", "v"))
    B, T, H, K = q.shape
    S = inputs["h0"].double().abs().clone()
    mag = []
    for t in range(T):
        S = S + (k[:, t, :, :, None] * v[:, t, :, None, :]).abs()
        mag.append(((q[:, t] * inputs["scale"]).abs()[..., None] * S).sum(-2))
    mag = torch.stack(mag, 1)
    gamma = K * U / (1 - K * U)
    o_f, ht_f = fallback
    o_s, ht_s = specialized
    diff = (o_f.double() - o_s.double()).abs()
    ratio = float((diff / (2 * gamma * mag).clamp_min(1e-300)).max())
    assert ratio <= 1.0, f"o differs by {ratio:.3g}x the bound 2*gamma_K*sum|S q|"
    assert torch.equal(ht_f, ht_s), f"the final state differs by {_ulp_diff(ht_f, ht_s)} ulp"
    return dict(o_max_abs=float(diff.max()), o_max_ulp=_ulp_diff(o_f, o_s), o_of_bound=ratio,
                o_equal=bool(torch.equal(o_f, o_s)))


# -- Liger RMSNorm ------------------------------------------------------------------------------

RMSNORM_REL = 2.0 ** -18  # 64 u


def rmsnorm_bound(fallback: list[torch.Tensor], specialized: list[torch.Tensor], inputs: dict) -> dict:
    """Liger RMSNorm at an odd hidden size: ``Y`` and ``RSTD`` of the generic and the specialized
    variant may differ, each element by at most 2^-18 (64 u) of its value. Why: the specialized
    variant reduces the fp32 sum of squares in a layout of 4 contiguous elements per thread (its
    ``W`` load and ``X`` row keep Triton's 4-wide layout), the generic variant in one of 1 per
    thread: other partial sums. Each order is a tree of depth <= 24 (16 elements per thread,
    5 shuffle levels, 3 warp levels at 8 warps over 4096 columns), so each sum is within gamma_24
    (~24 u) of the exact one relative to itself (all terms are squares, >= 0): the two sums within
    ~48 u, rsqrt halves that (~24 u) and adds its own rounding (<= 2 u), the two products by RSTD
    and (offset + W) add <= 2 u: <= ~28 u < 64 u."""
    out = {}
    for name, f, s in zip(("Y", "RSTD"), fallback, specialized):
        rel = float(((f.double() - s.double()).abs() / s.double().abs().clamp_min(1e-30)).max())
        assert rel <= RMSNORM_REL, f"{name} differs by {rel:.3g} of its value (bound 2^-18)"
        out.update({f"{name}_max_rel": rel, f"{name}_max_ulp": _ulp_diff(f, s),
                    f"{name}_equal": bool(torch.equal(f, s))})
    return out


def _liger_cases() -> list[Case]:
    try:
        from liger_kernel.ops import rms_norm as liger_rms
    except ImportError:
        return []
    from dataclasses import dataclass as _dc

    llama = 0  # Liger's _CASTING_MODE_LLAMA

    class RMSNormForward(TritonJitKernel["RMSNormForward.CompileKey"]):
        """Liger's RMSNorm forward (llama casting): X, Y: [M, N] fp32, W: [N], RSTD: [M] fp32.
        Warm-up hidden sizes ``hidden`` (divisible by 16); BLOCK_SIZE and num_warps by Liger's
        ``calculate_settings``."""

        kernel = liger_rms._rms_norm_forward_kernel

        @_dc(frozen=True)
        class CompileKey:
            block: int
            num_warps: int
            hidden: int  # the warm-up inputs' hidden size: its class (divisible by 16 or not)

        def dispatch(self, *, n_cols):
            block, warps = liger_rms.calculate_settings(n_cols)
            return self.CompileKey(block, warps, n_cols)

        def get_warmup_keys(self, *, hidden=(4096,)):
            return [self.dispatch(n_cols=n) for n in hidden]

        def warmup_inputs(self, key):
            M, N = 16, key.hidden
            return dict(X=WarmupTensor(torch.float32, (M, N)), Y=WarmupTensor(torch.float32, (M, N)),
                        W=WarmupTensor(torch.float32, (N,)), RSTD=WarmupTensor(torch.float32, (M,)), eps=1e-6,
                        offset=0.0)

        @kernel_launcher
        def __call__(self, *, X, Y, W, RSTD, eps=1e-6, offset=0.0) -> LaunchSpec:
            M, N = X.shape
            block, warps = liger_rms.calculate_settings(N)
            return LaunchSpec((M,), dict(Y_row_stride=Y.stride(0), X_row_stride=X.stride(0), W_row_stride=W.stride(0),
                                         RSTD_row_stride=RSTD.stride(0), n_cols=N, casting_mode=llama,
                                         elementwise_affine=True, BLOCK_SIZE=block, num_warps=warps), (Y, RSTD))

    kernel = RMSNormForward()

    def make(device: Any) -> dict:
        g = torch.Generator().manual_seed(11)
        M, N = 64, 4095
        X = torch.randn(M, N, generator=g).to(device)
        return dict(X=X, Y=torch.empty_like(X), W=(1 + 0.1 * torch.randn(N, generator=g)).to(device),
                    RSTD=torch.empty(M, device=device), eps=1e-6, offset=0.0)

    def reference(inputs: dict) -> Any:
        X, W = inputs["X"].double(), inputs["W"].double()
        rstd = torch.rsqrt(X.pow(2).mean(-1) + inputs["eps"])
        return ((X * rstd[:, None]) * (inputs["offset"] + W)).float(), rstd.float()

    def register() -> None:
        kernel.register_warmup(hidden=(4096,))

    return [Case("Liger rms_norm", kernel.kernel, kernel.name, register, make, lambda i: kernel(**i), reference,
                 "hidden size 4095 (n_cols and row strides not divisible by 16): warmed at 4096 only",
                 rmsnorm_bound, kernel=kernel, tolerance=dict(rtol=1e-5, atol=1e-5))]


def _all_cases() -> list[Case]:
    return _mla_cases() + _fla_cases() + _liger_cases()


CASES: list[Case] = _all_cases()


def case_ids(case: Case) -> str:
    return case.name.replace(" ", "-").replace("+", "").replace("--", "-")


def layouts(compiled: Any) -> list[str]:
    """The layout definitions of a compiled variant's TTGIR (``#blocked = ...`` lines): where two
    variants' are equal, their reductions run in the same order."""
    return [line for line in compiled.asm["ttgir"].splitlines() if line.startswith("#") and " = #ttg." in line]
