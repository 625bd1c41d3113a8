"""Contract kernels inside torch.compile: the seven MLA kernels as ``torch.ops.zerojit.*`` custom ops.

Compile-only (cuda:90): the compiled functions' launches are dry launches on CPU tensors, so
outputs are compared by name, shape and dtype against the eager launchers on the same inputs,
and the fake implementation's metadata against the real launch's. Backends ``eager`` and
``aot_eager`` (Inductor has no CPU backend for these ops' Triton kernels). docs/engine-modes.md.
"""

from __future__ import annotations

import os
import warnings

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1 (Dynamo cannot trace the interpreter)",
                allow_module_level=True)

import torch

from zerojit import torch_compat
from zerojit.kernel import KernelInputError
from zerojit.kernels.mla.backends import KERNEL_NAMES
from zerojit.kernels.mla.ops import OPS
from zerojit.monitor import JitMonitor
from zerojit.runner.metadata import KERNELS, DecodeBuffers, MetadataOps, build_step_inputs, step_metadata
from zerojit.runner.scheduler import Batch

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit(do_not_specialize=["n"])
def _parity_kernel(x_ptr, out_ptr, n, EVEN: tl.constexpr):
    pass


CUSTOM_OPS = MetadataOps(name="custom ops", **{KERNEL_NAMES[k]: op for k, op in OPS.items()})
TOKEN_COUNTS = (1, 2, 3, 16, 17, 1000, 8192)


@pytest.fixture(scope="module")
def warmed(module_compile_only_target):
    """dsv4-like, built and warmed as ``zerojit run`` does (compile-only): (plan, report)."""
    from zerojit.registry import JitWarmupRegistry
    from zerojit.runner import engine
    from zerojit.runner.config import load_config
    from zerojit.runner.kv_cache import allocate_kv_cache
    from zerojit.runner.metadata import MetadataPlan
    from zerojit.runner.model import SparseMLAModel

    cfg = load_config("dsv4-like")
    registry = JitWarmupRegistry()
    with registry.activate():
        model = SparseMLAModel(cfg, None)
        cache = allocate_kv_cache(cfg, engine.kv_blocks_per_rank(cfg, 1 << 16), device="cpu")
        model.bind_kv_cache(cache)
    report = registry.warmup(cfg, progress=False)
    assert not report.failures
    yield MetadataPlan.for_cache(cfg, model.backend, cache), report


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch_compat.reset_dynamo()
    yield
    torch_compat.reset_dynamo()


def mixed_step(plan, *, fill=False):
    """Four speculative decodes, a 300-token prompt and a 17-token continuing prefill (``fill``:
    with values, as a GPU step builds them; the launches stay dry)."""
    from zerojit.runner.engine import _primer_blocks

    lq = plan.config.query_len
    batch = Batch(step=0, request_ids=tuple(range(6)), query_lens=(lq,) * 4 + (300, 17),
                  seq_lens=(lq + 40, lq + 41, lq + 42, lq + 43, 300, 529), num_decodes=4)
    return build_step_inputs(batch, plan, fill=fill, blocks=_primer_blocks(batch, plan) if fill else None)


def launch_counts(monitor) -> dict:
    counts: dict = {}
    for launch in monitor.snapshot().launches:
        counts[launch.kernel.name] = counts.get(launch.kernel.name, 0) + launch.count
    return counts


def runtime_compiles(monitor) -> int:
    snap = monitor.snapshot()
    return sum(m.misses for m in (*snap.misses, *snap.direct))


def test_the_seven_mla_kernels_are_ops_under_their_kernel_names():
    """``torch.ops.zerojit.<kernel name>`` for K1-K7; K3's buffers declared written, nothing else."""
    for number, name in KERNEL_NAMES.items():
        assert OPS[number].op is getattr(torch.ops.zerojit, name)
        schema = getattr(torch.ops.zerojit, name).default._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert written == (["expanded_seq_lens", "expanded_block_table"] if number == "K3" else []), name
    assert len({str(getattr(torch.ops.zerojit, n).default._schema) for n in KERNEL_NAMES.values()}) == 7


def test_the_fake_implementation_returns_the_real_launchs_metadata_and_reads_no_address(warmed):
    """Each launch of a mixed step, run for real (dry) and through the op's fake implementation on
    fake copies of its inputs: the same shapes, dtypes and strides, and no ``data_ptr()`` read
    (a FakeTensor's warns, made an error here)."""
    plan, _ = warmed
    calls = []

    def recorder(number):
        launcher = OPS[number].kernel

        def call(**kw):
            calls.append((number, kw))
            return launcher(**kw)
        return call

    ops = MetadataOps(name="recorder", **{KERNEL_NAMES[k]: recorder(k) for k in OPS})
    step_metadata(mixed_step(plan), plan, ops, DecodeBuffers.allocate(plan))
    assert sorted({n for n, _ in calls}) == sorted(OPS)
    mode = torch_compat.fake_mode()
    for number, kw in calls:
        real = OPS[number].kernel(**kw)
        fake_kw = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        with mode, warnings.catch_warnings():
            warnings.simplefilter("error")
            fake = OPS[number].fake_returns(**fake_kw)
        real, fake = (real if isinstance(real, tuple) else (real,)), (fake if isinstance(fake, tuple) else (fake,))
        assert [None if r is None else (r.shape, r.dtype, r.stride()) for r in real] == \
               [None if f is None else (f.shape, f.dtype, f.stride()) for f in fake], number
        assert all(f is None or torch_compat.is_fake(f) for f in fake)


@pytest.mark.parametrize("backend, fill", [("eager", False), ("aot_eager", True)], ids=["eager-dry", "aot_eager-filled"])
def test_a_compiled_mixed_step_has_no_graph_break_and_launches_the_warmed_variants(warmed, backend, fill):
    """``torch.compile(fullgraph=True)`` of the runner's step through the ops: one graph, no
    break, every kernel of the step launched as often as eagerly, no runtime compile (error
    mode), the same outputs (names, shapes, dtypes) as the eager launchers. Filled inputs trace
    the step's value-building (the prefill workspace) as on a GPU."""
    plan, report = warmed
    inputs = mixed_step(plan, fill=fill)
    with JitMonitor("error", report=report) as eager_mon:
        want = step_metadata(inputs, plan, KERNELS, DecodeBuffers.allocate(plan))
    buffers = DecodeBuffers.allocate(plan)
    compiled = torch.compile(lambda x: step_metadata(x, plan, CUSTOM_OPS, buffers).outputs, fullgraph=True,
                             backend=backend)
    with JitMonitor("error", report=report) as mon:
        got = compiled(inputs)
    assert torch_compat.dynamo_counts() == {"graph_breaks": 0, "unique_graphs": 1}
    assert runtime_compiles(mon) == 0
    assert launch_counts(mon) == launch_counts(eager_mon)
    assert set(launch_counts(mon)) == set(KERNEL_NAMES.values())
    assert {k: (v.shape, v.dtype) for k, v in got.items()} == {k: (v.shape, v.dtype) for k, v in want.outputs.items()}
    assert got["K3 expanded_seq_lens"] is buffers.expanded_seq_lens  # written in place, returned as eagerly


def test_dynamic_token_counts_compile_at_most_three_graphs_and_nothing_else(warmed):
    """K2 (both compressed caches) and K6 over token counts 1 ... 8,192 marked dynamic: at most 3
    graphs (the issue's bound; 2 here: Dynamo specializes size 1, then one dynamic graph), 0 runtime
    compiles, outputs sized by the count."""
    plan, report = warmed
    cfg, R = plan.config, 2
    k2, k6 = OPS["K2"], OPS["K6"]

    def f(token_to_req, slot_mapping, qsl, seq, bt, swa_bt):
        T = token_to_req.shape[0]
        outs = [k2(query_start_loc=qsl, seq_lens=seq, block_table=bt, num_tokens=T, ratio=ratio,
                   block_size=cfg.block_size, block_stride_rows=stride, **plan.dcp)
                for ratio, stride in plan.compressed_caches]
        idx, lens = k6(token_to_req=token_to_req, slot_mapping=slot_mapping, seq_lens=seq, query_start_loc=qsl,
                       block_table=swa_bt, num_tokens=T, token_offset=0, sliding_window=cfg.sliding_window,
                       block_size=cfg.block_size, block_stride_rows=plan.fact("K6", "block_stride_rows"),
                       num_speculative_tokens=cfg.num_speculative_tokens)
        return outs, idx, lens

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    i32 = torch.int32
    with JitMonitor("error", report=report) as mon:
        for T in TOKEN_COUNTS:
            token_to_req, slot_mapping = torch.empty(T, dtype=i32), torch.empty(T, dtype=torch.int64)
            torch._dynamo.mark_dynamic(token_to_req, 0)
            torch._dynamo.mark_dynamic(slot_mapping, 0)
            outs, idx, lens = compiled(token_to_req, slot_mapping, torch.empty(R + 1, dtype=i32),
                                       torch.empty(R, dtype=i32), torch.empty(R, plan.table_width, dtype=i32),
                                       torch.empty(R, plan.swa_table_width, dtype=i32))
            assert [tuple(o.shape) for o in outs] == [(T,)] * len(plan.compressed_caches)
            assert idx.shape[0] == lens.shape[0] == T
    counts = torch_compat.dynamo_counts()
    # the issue allows 3; K2's grid clamps without guards (split_grid), so: size 1, then one dynamic graph
    assert counts["graph_breaks"] == 0 and 1 <= counts["unique_graphs"] <= 2, counts
    assert runtime_compiles(mon) == 0
    assert launch_counts(mon) == {"compressed_slot_mapping": 2 * len(TOKEN_COUNTS),
                                  "compute_swa_indices_and_lens": len(TOKEN_COUNTS)}


def test_a_traced_launch_that_would_read_tensor_values_names_the_host_value_to_pass(warmed):
    """K7 on CPU tensors without ``max_gather_len`` reads ``max(gather_lens)`` eagerly; traced, the
    fake implementation cannot, and says which argument to pass."""
    plan, _ = warmed
    cfg = plan.config
    mode = torch_compat.fake_mode()
    with mode:
        i32 = torch.int32
        kw = dict(topk=None, query_start_loc=torch.empty(3, dtype=i32), seq_lens=torch.empty(2, dtype=i32),
                  gather_lens=torch.empty(2, dtype=i32), num_tokens=5, row_stride=300, swa_offset=0, top_k=0,
                  ratio=1, sliding_window=cfg.sliding_window)
        with pytest.raises(KernelInputError, match="max_gather_len"):
            OPS["K7"].fake_returns(**kw)
        combined, lens = OPS["K7"].fake_returns(**kw, max_gather_len=200)
    assert combined.shape[0] == lens.shape[0] == 5


def test_a_written_input_must_be_declared_and_then_traces_and_launches(compile_only_target):
    """The guide's ScaleAdd writes into ``out`` and returns it: without ``mutates_args`` the first
    trace refuses it (naming mutates_args); declared, the op returns nothing, the wrapper hands
    ``out`` back, and the compiled call launches the variant an eager call compiled."""
    from zerojit.engine_modes import as_custom_op
    from zerojit.examples.scale_add import scale_add
    from zerojit.kernel import KernelDefinitionError

    undeclared = as_custom_op(scale_add, "scale_add_undeclared")
    declared = as_custom_op(scale_add, "scale_add_declared", mutates_args=("out",),
                            restore=lambda outs, inputs: inputs["out"])
    assert declared.schema.endswith("Tensor(a!) out, SymInt period, float scale, SymInt block=256) -> ()")
    with pytest.raises(ValueError, match="cannot be redefined"):
        as_custom_op(scale_add, "scale_add_declared")
    x, bias, out = torch.empty(1000), torch.empty(1000), torch.empty(1000)
    with pytest.raises(Exception, match="mutates_args") as failure:
        torch.compile(lambda x, b, o: undeclared(x=x, bias=b, out=o, period=16, scale=0.5), fullgraph=True,
                      backend="eager")(x, bias, out)
    assert isinstance(failure.value, KernelDefinitionError) or "KernelDefinitionError" in str(failure.value)
    torch_compat.reset_dynamo()
    scale_add(x=x, bias=bias, out=out, period=16, scale=0.5)  # eagerly: compiles the variant
    compiled = torch.compile(lambda x, b, o: declared(x=x, bias=b, out=o, period=16, scale=0.5), fullgraph=True,
                             backend="aot_eager")
    with JitMonitor("error", report=()) as mon:
        assert compiled(x, bias, out) is out
    assert runtime_compiles(mon) == 0 and launch_counts(mon) == {"scale_add": 1}
    assert torch_compat.dynamo_counts() == {"graph_breaks": 0, "unique_graphs": 1}


def test_a_length_check_keeps_a_dynamic_size_symbolic(compile_only_target):
    """The guide's ScaleAdd checks ``out`` with ``length="len(x)"``: traced with fake tensors that
    check reads the first size, not the builtin ``len`` (which must return an int, so it pins the
    size: ``mark_dynamic`` then raised ConstraintViolationError, and each size was a new graph).
    Four sizes marked dynamic: one graph; unmarked: Dynamo's own two (static, then dynamic); a
    mismatched ``out`` is still refused, naming it (the sizes by their symbols: the trace is dynamic by then)."""
    from zerojit.engine_modes import as_custom_op
    from zerojit.examples.scale_add import scale_add

    op = as_custom_op(scale_add, "scale_add_sized", mutates_args=("out",))
    bias = torch.empty(16)
    scale_add(x=torch.empty(64), bias=bias, out=torch.empty(64), period=16, scale=0.5)  # compiles the variant
    compiled = torch.compile(lambda x, b, o: op(x=x, bias=b, out=o, period=16, scale=0.5), fullgraph=True,
                             backend="eager")
    with JitMonitor("error", report=()) as mon:
        for n in (64, 128, 256, 1024):
            x, out = torch.empty(n), torch.empty(n)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(out, 0)
            compiled(x, bias, out)
    assert torch_compat.dynamo_counts() == {"graph_breaks": 0, "unique_graphs": 1}
    assert runtime_compiles(mon) == 0 and launch_counts(mon) == {"scale_add": 4}
    torch_compat.reset_dynamo()
    for n in (64, 128, 256, 1024):
        compiled(torch.empty(n), bias, torch.empty(n))
    assert torch_compat.dynamo_counts() == {"graph_breaks": 0, "unique_graphs": 2}
    with pytest.raises(Exception, match="argument 'out': must have len\\(x\\) = s\\d+ entries, got s\\d+"):  # (traced: sizes)
        compiled(torch.empty(96), bias, torch.empty(95))


def test_a_fact_from_a_dynamic_size_picks_its_key_with_a_guard(compile_only_target, caplog):
    """A fact computed from ``len(x)`` (its parity) under a dynamic trace is a SymBool: decided
    there (a guard), so each parity is one graph and the facts memo works (a SymBool in it made
    torch log a failed evaluate_expr on every trace)."""
    import logging
    from dataclasses import dataclass as frozen_key

    from zerojit.engine_modes import as_custom_op
    from zerojit.inputs import CheckedKernel, Let, TensorArg, checked_launcher
    from zerojit.kernel import LaunchSpec
    from zerojit.registry import JitWarmupRegistry
    from zerojit.specialization import WarmupTensor

    class Parity(CheckedKernel["Parity.CompileKey"]):
        kernel = _parity_kernel

        @frozen_key(frozen=True)
        class CompileKey:
            even: bool

        def dispatch(self, *, even):
            return self.CompileKey(bool(even))

        def get_warmup_keys(self):
            return [self.CompileKey(True), self.CompileKey(False)]

        def warmup_inputs(self, key):
            t = WarmupTensor(torch.float32, (64 if key.even else 65,))
            return dict(x=t, out=t)

        @checked_launcher(TensorArg("x", 1, torch.float32), TensorArg("out", 1, torch.float32, length="len(x)"),
                          Let("even", "len(x) % 2 == 0"))
        def __call__(self, key, constexprs, *, x, out):
            return LaunchSpec(grid=(1,), kwargs=dict(constexprs, n=x.shape[0]), returns=out)

    parity = Parity()
    registry = JitWarmupRegistry()
    with registry.activate():
        parity.register_warmup()
    report = registry.warmup(workers=1, progress=False)
    op = as_custom_op(parity, "parity_sized", mutates_args=("out",))
    compiled = torch.compile(lambda x, o: op(x=x, out=o), backend="eager", fullgraph=True)
    with caplog.at_level(logging.WARNING), JitMonitor("error", report=report) as mon:
        for n in (64, 65, 66, 67):
            x, out = torch.empty(n), torch.empty(n)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(out, 0)
            compiled(x, out)
    assert torch_compat.dynamo_counts() == {"graph_breaks": 0, "unique_graphs": 2}
    assert runtime_compiles(mon) == 0 and launch_counts(mon) == {"parity": 4}
    assert not [r for r in caplog.records if "evaluate_expr" in r.getMessage()]


def test_an_input_sized_by_tensor_values_is_named_when_traced(warmed):
    """K5 given ``seq_lens`` from ``repeat_interleave`` without ``output_size`` (an unbacked size,
    which its length check cannot compare): the traced call names ``seq_lens``."""
    plan, _ = warmed

    def f(lens, qsl):
        seq = torch.repeat_interleave(torch.arange(2, dtype=torch.int32), lens)
        return OPS["K5"](seq_lens=seq, query_start_loc=qsl, num_decodes=0, num_prefills=2,
                         sliding_window=plan.config.sliding_window)

    with pytest.raises(Exception, match="argument 'seq_lens': its checks compare a size that depends on tensor values"):
        torch.compile(f, fullgraph=True, backend="eager")(torch.tensor([1, 1]), torch.empty(3, dtype=torch.int32))
