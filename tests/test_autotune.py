"""Wrapped kernels (zerojit.autotune): heuristics and autotune configs in the key space, the tuning
table and its file, the monitor's benchmark events, launch-option order.

References are Triton's own: its Autotuner run (benchmarking with a ``do_bench`` that reports
fixed timings, so the choice is known) fills its own cache with the tuning keys and configs
zerojit must reproduce; the variants a library call launches are looked up in Triton's own
in-process cache.
"""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from _kernels import SingleKey
from zerojit import kernel as _kernel
from zerojit import triton_compat as _tc
from zerojit.autotune import (TunedKey, TuningError, TuningFileError, TuningPolicy, TuningTable, load_tuning_file,
                              nearest_tuning_key, save_tuning_file)
from zerojit.kernel import KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.monitor import JitMonitor, RuntimeJitError
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import WarmupTensor

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (32, 64, 128) for w in (2, 4)]
# Timings the reference autotuner's do_bench reports, per (BLOCK, num_warps): BLOCK 64 / 4 warps wins.
FAKE_MS = {(32, 2): 5.0, (32, 4): 4.0, (64, 2): 3.0, (64, 4): 1.0, (128, 2): 2.0, (128, 4): 6.0}


def _prune(configs, named_args, **kwargs):
    """No block wider than twice the row (a rule the test can state independently)."""
    return [c for c in configs if c.kwargs["BLOCK"] <= max(32, 2 * named_args["n"])]


@triton.jit(do_not_specialize=["n"])
def _scale_jit(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, HAS_SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_SCALE:
        x = x * scale
    tl.store(out_ptr + offs, x, mask=mask)


def _wrapped(do_bench=None):
    """Heuristics over an Autotuner over the jit function (FLA's order), a fresh autotuner."""
    tuned = triton.autotune(CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _prune},
                            do_bench=do_bench)(_scale_jit)
    return triton.heuristics({"HAS_SCALE": lambda args: args["scale"] is not None})(tuned)


def _fake_bench(kernel_call, quantiles):
    c = _fake_bench.current  # nothing runs: the timings are FAKE_MS
    return [FAKE_MS[(c.kwargs["BLOCK"], c.num_warps)]] * 3


class Scale(TritonJitKernel["Scale.CompileKey"]):
    """out = x * scale (or a copy when scale is None); n is the row length."""

    kernel = _wrapped()
    tuning = TuningPolicy("nearest", config={"BLOCK": 32, "num_warps": 2})

    @dataclass(frozen=True)
    class CompileKey:
        n: int  # a representative row length (its tuning key and pruning)
        has_scale: bool

    def dispatch(self, *, n: int, has_scale: bool) -> "Scale.CompileKey":
        return self.CompileKey(n, has_scale)

    def get_warmup_keys(self, *, sizes=(8, 64)) -> list:
        return [self.CompileKey(n, s) for n in sizes for s in (True, False)]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32), out=WarmupTensor(torch.float32), n=key.n,
                    scale=2.0 if key.has_scale else None)

    @kernel_launcher
    def __call__(self, *, x, out, n, scale) -> LaunchSpec:
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)


@pytest.fixture(autouse=True)
def fresh(compile_only_target):
    Scale._tuning_table.clear()
    Scale._untuned_choice.clear()
    yield compile_only_target


def _table_file(kernel, entries):
    save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), kernel._wrapping.configs, entries)


def _idx(block, warps):
    return next(i for i, c in enumerate(CONFIGS) if c.kwargs["BLOCK"] == block and c.num_warps == warps)


# -- class creation ----------------------------------------------------------------------------

def test_config_naming_no_parameter_is_refused():
    bad = triton.autotune([triton.Config({"BLOCKK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(_scale_jit)
    with pytest.raises(KernelDefinitionError, match=r"config 0 .* sets 'BLOCKK', which names no kernel parameter"):
        type("Bad", (Scale,), {"kernel": triton.heuristics({"HAS_SCALE": lambda a: True})(bad)})


def test_tuning_policy_defaults_to_nearest_and_must_name_one_config():
    assert type("NoPolicy", (Scale,), {"kernel": _wrapped(), "tuning": None}).tuning == TuningPolicy("nearest")
    with pytest.raises(KernelDefinitionError, match=r"tuning = 'nearest' is no TuningPolicy"):
        type("NotAPolicy", (Scale,), {"kernel": _wrapped(), "tuning": "nearest"})
    with pytest.raises(KernelDefinitionError, match="matches 3 of the autotuner's configs"):
        type("Vague", (Scale,), {"kernel": _wrapped(), "tuning": TuningPolicy("default", config={"num_warps": 2})})
    with pytest.raises(ValueError, match="names no config"):
        TuningPolicy("default")


# -- key space and launches --------------------------------------------------------------------

def test_keys_expand_to_the_configs_that_survive_pruning():
    keys = Scale().get_warmup_keys()
    by_key: dict = {}
    for k in keys:
        assert isinstance(k, TunedKey)
        by_key.setdefault(k.key, []).append(dict(k.options)["BLOCK"])
    # n=8: only BLOCK <= 32 survives _prune; n=64: every BLOCK (<= 128), two warps each
    assert by_key == {Scale.CompileKey(8, True): [32, 32], Scale.CompileKey(8, False): [32, 32],
                      Scale.CompileKey(64, True): [32, 32, 64, 64, 128, 128],
                      Scale.CompileKey(64, False): [32, 32, 64, 64, 128, 128]}


def _tune_with_triton(n, scale):
    """Triton's own autotuner, benchmarking with FAKE_MS: its cache is the reference table."""
    ref = _wrapped(do_bench=_fake_bench)
    tuner = _tc.wrapped_function(ref)
    original = type(tuner)._bench

    def bench(self, *args, config, **meta):
        _fake_bench.current = config
        return original(self, *args, config=config, **meta)

    type(tuner)._bench = bench
    try:  # Triton's own run; warmup=True: compile-only has no GPU to launch on (the choice is the same)
        x, out = torch.ones(n), torch.empty(n)
        compiled = ref.run(x, out, n, scale, grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), warmup=True)
    finally:
        type(tuner)._bench = original
    return tuner, compiled


def test_tuning_table_from_file_matches_triton_autotuner_choice():
    """zerojit's tuning key and choice equal what Triton's own autotuner cached for the same call."""
    ref, _ = _tune_with_triton(64, 2.0)
    [(triton_key, triton_config)] = ref.cache.items()
    assert (triton_config.kwargs["BLOCK"], triton_config.num_warps) == (64, 4)
    _table_file(Scale(), [(triton_key, CONFIGS.index(triton_config), 1.0)])
    reg = JitWarmupRegistry()
    with reg.activate():
        Scale().register_warmup()
    reg.warmup(progress=False)
    assert Scale._tuning_table == {triton_key: CONFIGS.index(triton_config)}
    # the autotuner's own cache now holds the choice: the library's own call would not benchmark
    assert Scale.wrapped.fn.cache[triton_key] is CONFIGS[CONFIGS.index(triton_config)]


def _serve(kernel, n, scale):
    x, out = torch.ones(n), torch.empty(n)
    return kernel(x=x, out=out, n=n, scale=scale)


def test_serving_zero_compiles_zero_benchmarks_and_variants_are_hits():
    ref, _ = _tune_with_triton(64, 2.0)
    (triton_key, cfg), = ref.cache.items()
    _table_file(Scale(), [(triton_key, CONFIGS.index(cfg), None)])
    reg = JitWarmupRegistry()
    with reg.activate():
        Scale().register_warmup()
    report = reg.warmup(progress=False)
    k = Scale()
    with JitMonitor("error", report=report) as mon:
        for n in (1, 7, 8, 64, 100, 4096):  # n>=16 classes are other int classes: do_not_specialize
            for scale in (2.0, None):
                _serve(k, n, scale)
                # the tuning key (64, 'torch.float32', ...) -> BLOCK 64 / 4 warps; nearest for others
    counts = mon.counts()
    assert counts.runtime_compiles == 0 and counts.benchmarks == 0
    assert counts.launches == 12


def test_launch_applies_heuristics_and_config_as_triton_does():
    """The variant zerojit launches is the one Triton's own autotuner launches (its in-process
    key), for a tuned key and with heuristics on both sides."""
    ref, compiled = _tune_with_triton(64, None)
    (triton_key, cfg), = ref.cache.items()
    _table_file(Scale(), [(triton_key, CONFIGS.index(cfg), None)])
    reg = JitWarmupRegistry()
    with reg.activate():
        Scale().register_warmup()
    reg.warmup(progress=False)
    seen = []
    from zerojit import kernel as _k
    previous = _k.set_launch_observer(lambda kern, compiled: seen.append(compiled))
    try:
        _serve(Scale(), 64, None)
    finally:
        _k.set_launch_observer(previous)
    device = _tc.current_device()
    cache = _tc.kernel_cache(_scale_jit, device)
    before = dict(cache)
    x, out = torch.ones(64), torch.empty(64)
    ours = Scale.wrapped.run(x, out, 64, None, grid=(2,), warmup=True)  # the library's own path, no benchmark
    assert dict(cache) == before  # Triton found its variant among the warmed ones
    assert Scale.wrapped.fn.best_config is CONFIGS[CONFIGS.index(cfg)]
    assert seen == [compiled] and ours is compiled  # the very variant Triton's own autotuner launched


def test_policies_for_untuned_keys():
    table = {(64, "torch.float32", "torch.float32"): _idx(64, 4)}
    Scale._tuning_table.update(table)
    k = Scale()
    assert k._choose_config((100, "torch.float32", "torch.float32")) == _idx(64, 4)  # nearest
    assert nearest_tuning_key((100, "torch.float16"), list(table)) is None
    Strict = type("Strict", (Scale,), {"kernel": _wrapped(), "tuning": TuningPolicy("error")})
    Strict._tuning_table.update(table)
    with pytest.raises(TuningError, match=r"scale_jit: tuning key \(100, 'torch.float32', 'torch.float32'\) was never"):
        Strict()._choose_config((100, "torch.float32", "torch.float32"))
    Default = type("Default", (Scale,), {"kernel": _wrapped(), "tuning": TuningPolicy("default", config=_idx(128, 2))})
    Default._tuning_table.update(table)
    assert Default()._choose_config((100, "torch.float32", "torch.float32")) == _idx(128, 2)


def test_nearest_metric_is_log2_distance_over_int_entries():
    tuned = [(16, "f32"), (1024, "f32"), (64, "f16")]
    assert nearest_tuning_key((100, "f32"), tuned) == (16, "f32")  # |log2 100 - 4| < |log2 100 - 10|
    assert nearest_tuning_key((600, "f32"), tuned) == (1024, "f32")
    assert nearest_tuning_key((64, "bf16"), tuned) is None


# -- nearest among the configs that survive pruning for the launch --------------------------------

@triton.jit
def _rows_jit(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for start in range(0, N, BLOCK):
        m = start + offs < N
        tl.store(out_ptr + start + offs, tl.load(x_ptr + start + offs, mask=m), mask=m)


ROW_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=1) for b in (32, 64, 128)]


def _no_block_past_the_row(configs, nargs, **kwargs):
    """No BLOCK wider than the row (N arrives as a keyword or positionally, as FLA's prune functions read it)."""
    return [c for c in configs if c.kwargs["BLOCK"] <= {**nargs, **kwargs}["N"]]


class Rows(TritonJitKernel["Rows.CompileKey"]):
    """out = x over one row of N float32 elements; N is a constexpr (each row length compiles its own
    variants) and pruning drops every BLOCK wider than N."""

    kernel = triton.autotune(ROW_CONFIGS, key=["N"], prune_configs_by={"early_config_prune": _no_block_past_the_row})(
        _rows_jit)
    tuning = TuningPolicy("nearest", config={"BLOCK": 32})

    @dataclass(frozen=True)
    class CompileKey:
        N: int

    def dispatch(self, *, N):
        return self.CompileKey(N)

    def get_warmup_keys(self, *, rows=(32, 64, 128)):
        return [self.CompileKey(n) for n in rows]

    def warmup_inputs(self, key):
        return dict(x=WarmupTensor(torch.float32, (key.N,)), out=WarmupTensor(torch.float32, (key.N,)))

    @kernel_launcher
    def __call__(self, *, x, out) -> LaunchSpec:
        return LaunchSpec((1,), dict(N=x.numel()), out)


def test_nearest_chooses_among_the_configs_that_survive_pruning_for_the_launch():
    """At N=64 the nearest tuned key (128: log2 distance 1) chose BLOCK 128, which pruning drops at
    N=64 and warm-up never compiled for it; the next nearest (512: distance 3) chose BLOCK 64,
    which survives. At N=32 no tuned key's config survives: the policy's BLOCK 32."""
    Rows._tuning_table.clear()
    Rows._untuned_choice.clear()
    k = Rows()
    f32 = "torch.float32"
    _table_file(k, [((128, f32, f32), 2, None), ((512, f32, f32), 1, None)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup()
    report = reg.warmup(progress=False)
    assert {(t.key.N, ROW_CONFIGS[t.config].kwargs["BLOCK"]) for t in report.kernels[0].keys} == {
        (32, 32), (64, 32), (64, 64), (128, 32), (128, 64), (128, 128)}  # the prune rule, stated
    with JitMonitor("error", report=report) as mon:
        for n in (64, 32, 128):
            k(x=torch.ones(n), out=torch.empty(n))
    assert mon.counts().runtime_compiles == 0 and mon.counts().benchmarks == 0
    assert Rows._untuned_choice == {(64, f32, f32): 1, (32, f32, f32): 0}


# -- Triton's tuning key follows the call; the library's own path after warm-up ------------------

@triton.jit(do_not_specialize=["n"])
def _cast_jit(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.float32), mask=offs < n)


CAST_CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1)]


def _cast_tuner():
    return triton.autotune(CAST_CONFIGS, key=["n"])(_cast_jit)


def test_tuning_key_follows_the_call_as_triton_autotuner_does():
    """Triton's own Autotuner.run (the key it looks up in its cache) against
    triton_compat.tuning_key_function: the dtypes follow the call, positional arguments first,
    then keywords in the order passed."""
    tuner = _cast_tuner()
    looked_up = []

    class Spy(dict):
        def __contains__(self, key):
            looked_up.append(key)
            return True  # nothing benchmarks

        def __getitem__(self, key):
            return CAST_CONFIGS[0]

    tuner.cache = Spy()
    x, out, grid = torch.ones(64, dtype=torch.float16), torch.empty(64), (2,)
    calls = [((x, out, 64), {}), ((x,), {"out_ptr": out, "n": 64}), ((), {"out_ptr": out, "n": 64, "x_ptr": x}),
             ((), {"n": 64, "x_ptr": x, "out_ptr": out})]
    for args, kwargs in calls:
        tuner[grid](*args, **kwargs)
    f16, f32 = "torch.float16", "torch.float32"
    assert looked_up == [(64, f16, f32), (64, f16, f32), (64, f32, f16), (64, f16, f32)]
    key = _tc.tuning_key_function(tuner)
    names = _tc.layer_arg_names(tuner)
    assert [key(dict(zip(names, a)), {"grid": grid, "warmup": False, **kw}) for a, kw in calls] == looked_up


class Cast(SingleKey):
    """out (float32) = x (float16), n elements."""

    kernel = _cast_tuner()
    tuning = TuningPolicy("nearest", config={"BLOCK": 32})

    def warmup_inputs(self, key):
        return dict(x=WarmupTensor(torch.float16, (64,)), out=WarmupTensor(torch.float32, (64,)))

    @kernel_launcher
    def __call__(self, *, x, out) -> LaunchSpec:
        n = x.numel()
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), dict(n=n), out)


def test_library_path_after_warmup_takes_zerojit_choice_and_counts_as_hits():
    """The library's own calls: the tuned key passed with its tensors in another keyword order (another
    Triton key for the same launch) and a tuning key never tuned both launch zerojit's choice
    without benchmarking, and every launch is a hit in the audit."""
    from zerojit.audit import build_audit

    Cast._tuning_table.clear()
    Cast._untuned_choice.clear()
    k = Cast()
    f16, f32 = "torch.float16", "torch.float32"
    _table_file(k, [((64, f16, f32), 1, None)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup()
    report = reg.warmup(progress=False)
    x, out = torch.ones(64, dtype=torch.float16), torch.empty(64)
    grid = lambda meta: (triton.cdiv(64, meta["BLOCK"]),)  # noqa: E731
    seen = []
    previous = _kernel.set_launch_observer(lambda kern, compiled: seen.append(compiled))
    try:
        with JitMonitor("error", report=report) as mon:
            k(x=x, out=out)
            theirs = Cast.wrapped[grid](out_ptr=out, n=64, x_ptr=x)  # Triton's key: (64, float32, float16)
            new = Cast.wrapped[grid](x, out, 4096)  # never tuned: the policy's nearest (64) -> BLOCK 64
            Cast.wrapped.run(x, out, 64, grid=grid, warmup=True)  # Triton's warm-up run launches nothing
    finally:
        _kernel.set_launch_observer(previous)
    assert seen == [theirs, theirs, new] and new is theirs  # one variant: BLOCK 64 (n is do_not_specialize)
    assert mon.counts().benchmarks == 0 and mon.counts().runtime_compiles == 0
    assert Cast.wrapped.cache[(64, f32, f16)] is CAST_CONFIGS[1]
    cov = build_audit(report, mon).kernel("cast_jit")
    assert [(w.fields["config"], w.hits) for w in cov.hit] == [(1, 3)]
    assert [w.fields["config"] for w in cov.dead] == [0]


def test_library_path_repairs_a_write_past_the_guard_before_it_compiles():
    """A library call may compile, so like a zerojit launch on the normal path it first puts the
    monitor back into Triton's slot when another party wrote past the guard: blocked, not compiled."""
    from triton import knobs

    Cast._tuning_table.clear()
    Cast._untuned_choice.clear()
    k = Cast()
    _table_file(k, [((64, "torch.float16", "torch.float32"), 1, None)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup()
    report = reg.warmup(progress=False)
    grid = lambda meta: (triton.cdiv(64, meta["BLOCK"]),)  # noqa: E731
    try:
        with JitMonitor("error", report=report) as mon:
            knobs.runtime.__dict__["jit_cache_hook"] = None  # e.g. knobs.runtime.scope() restoring its dict
            assert not mon.installed
            with pytest.raises(RuntimeJitError, match="so nothing was compiled"):
                Cast.wrapped[grid](torch.ones(64), torch.empty(64), 64)  # float32 x: never warmed
            assert mon.installed and mon.counts().blocked == 1 and mon.counts().compiled == 0
    finally:
        knobs.runtime.__dict__.pop("jit_cache_hook", None)


def test_tuning_table_index_follows_changes_and_nearest_takes_survivors():
    """Distances by hand: log2 100 = 6.64; to 16: 2.64, to 128: 0.36, to 1024: 3.36."""
    t = TuningTable({(16, "f32"): 0, (1024, "f32"): 1})
    assert t.nearest((100, "f32")) == (16, "f32")
    t[(128, "f32")] = 2  # a change rebuilds the index
    assert t.nearest((100, "f32")) == (128, "f32")
    evaluated = []

    def pruned_to(*alive):
        return lambda: evaluated.append(alive) or list(alive)

    assert t.nearest((100, "f32"), pruned_to(0, 1)) == (16, "f32")  # 128's config 2 pruned: the next nearest
    assert t.nearest((100, "f32"), pruned_to(2)) == (128, "f32")
    assert t.nearest((100, "f32"), pruned_to(3)) is None  # no tuned key's config survives
    assert t.nearest((100, "f16"), pruned_to(0)) is None  # nothing comparable: pruning not evaluated
    assert evaluated == [(0, 1), (2,), (3,)]
    del t[(16, "f32")]
    assert t.nearest((100, "f32"), pruned_to(0, 1)) == (1024, "f32")
    t.clear()
    assert t.nearest((100, "f32")) is None


# -- tuning files ------------------------------------------------------------------------------

def test_tuning_file_refused_naming_the_field(tmp_path):
    k = Scale()
    header = k.tuning_header()
    path = str(tmp_path / "t.json")
    save_tuning_file(path, header, CONFIGS, [((64, "torch.float32"), 3, 1.5)])
    assert load_tuning_file(path, header, CONFIGS) == {(64, "torch.float32"): 3}
    for field, value in (("triton", "3.0.0"), ("source_hash", "0" * 64), ("target", "cuda:80"), ("gpu", "X")):
        with pytest.raises(TuningFileError, match=f"field '{field}'") as e:
            load_tuning_file(path, {**header, field: value}, CONFIGS)
        assert e.value.field == field
    with pytest.raises(TuningFileError, match="field 'configs'"):
        load_tuning_file(path, header, CONFIGS[:3])
    with open(path, "w") as f:
        f.write('{"format": "zerojit-tuning/1", "ent')
    with pytest.raises(TuningFileError, match="field 'json'"):
        load_tuning_file(path, header, CONFIGS)
    with open(path, "w") as f:  # nested too deep: json raises RecursionError, no ValueError
        f.write("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TuningFileError, match="field 'json'"):
        load_tuning_file(path, header, CONFIGS)
    doc = {"format": "zerojit-tuning/1", **header, "configs": [str(c) for c in CONFIGS],
           "entries": [{"key": [1], "config": 99}]}
    with open(path, "w") as f:
        json.dump(doc, f)
    with pytest.raises(TuningFileError, match="field 'entries'"):
        load_tuning_file(path, header, CONFIGS)
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_warmup_with_a_foreign_tuning_file_fails_naming_the_field():
    k = Scale()
    save_tuning_file(k.tuning_file(), {**k.tuning_header(), "triton": "3.0.0"}, CONFIGS, [])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup()
    report = reg.warmup(progress=False, raise_on_failure=False)
    assert [f.kernel for f in report.failures] == ["scale_jit"]
    assert "field 'triton' is '3.0.0'" in report.failures[0].error


# -- the monitor: a plain Triton autotuner benchmarking after warm-up ---------------------------

def test_plain_autotuner_benchmark_is_counted_and_blocked_before_it_runs():
    ran = []

    def bench(kernel_call, quantiles):
        ran.append(1)
        return [1.0, 1.0, 1.0]

    plain = triton.autotune(CONFIGS[:2], key=["n"], do_bench=bench)(_scale_jit)
    x, out = torch.ones(8), torch.empty(8)
    with JitMonitor("error", report=()) as mon:
        with pytest.raises(RuntimeJitError, match=r"autotune benchmark of scale_jit at tuning key \(8, 'torch.float32'"):
            plain.run(x, out, 8, 1.0, HAS_SCALE=True, grid=(1,), warmup=True)
    assert ran == [] and mon.counts().benchmarks == 1 and mon.counts().runtime_compiles == 0
    with JitMonitor("warn", report=()) as mon:
        plain.run(x, out, 8, 1.0, HAS_SCALE=True, grid=(1,), warmup=True)  # warn: the benchmark runs
    assert len(ran) == 2 and mon.counts().benchmarks == 1
    [(record, count)] = mon.benchmarks()
    assert record.tuning_key == (8, "torch.float32", "torch.float32") and record.configs == 2 and count == 1


# -- compile workers ------------------------------------------------------------------------------

def test_workers_compile_a_wrapped_kernel_of_a_library_style_module():
    """The module binds the kernel's name to a Heuristics object and evaluates a
    ``torch.Tensor | None`` annotation at import: a worker compiles it all the same."""
    from zerojit.examples.tuned_scale import TunedScale

    reg = JitWarmupRegistry()
    with reg.activate():
        TunedScale().register_warmup(sizes=(64,))  # prune: BLOCK 64 (two num_warps); no policy config to add
    report = reg.warmup(workers=2, progress=False)
    assert [len(k.keys) for k in report.kernels] == [4]
    assert list(report.stats.recovered) == [] and report.stats.worker_compiled == 4
    with JitMonitor("error", report=report) as mon:
        for n in (1, 64, 100):
            for scale in (2.0, None):
                TunedScale()(x=torch.ones(n), out=torch.empty(n), scale=scale)
    assert mon.counts().runtime_compiles == 0 and mon.counts().benchmarks == 0


# -- the audit ----------------------------------------------------------------------------------

def test_audit_counts_chosen_configs_as_hits_and_names_benchmarks():
    from zerojit.audit import build_audit

    Scale._tuning_table[(64, "torch.float32", "torch.float32")] = _idx(64, 4)
    reg = JitWarmupRegistry()
    with reg.activate():
        Scale().register_warmup(sizes=(64,))
    report = reg.warmup(progress=False)
    plain = triton.autotune(CONFIGS[:2], key=["n"], do_bench=lambda call, quantiles: [1.0] * 3)(_scale_jit)
    with JitMonitor("warn", report=report) as mon:
        _serve(Scale(), 64, 2.0)  # the tuned key: BLOCK 64, 4 warps
        plain.run(torch.ones(8), torch.empty(8), 8, 1.0, HAS_SCALE=True, grid=(1,), warmup=True)
    audit = build_audit(report, mon)
    cov = audit.kernel("scale_jit")
    hit = [w for w in cov.hit]
    assert [(w.fields["config"], w.hits) for w in hit] == [(_idx(64, 4), 1)]
    assert hit[0].fields["key"] == str({"n": 64, "has_scale": True})
    assert len(cov.dead) == 11  # the other configs (and the no-scale key) were compiled, not chosen
    assert [(b.kernel, b.tuning_key, b.configs, b.runs) for b in audit.benchmarks] == [
        ("scale_jit", "(8, 'torch.float32', 'torch.float32')", 2, 1)]
    assert not audit.ok and "autotune benchmark after warm-up: scale_jit" in audit.table()
    assert type(audit).from_dict(audit.to_dict()) == audit


# -- bundles carry tuning files -----------------------------------------------------------------

def test_bundle_carries_the_tuning_file(tmp_path, monkeypatch):
    from triton import knobs

    from zerojit.cache import export_bundle, import_bundle

    k = Scale()
    _table_file(k, [((64, "torch.float32", "torch.float32"), _idx(64, 4), 0.5)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup(sizes=(64,))
    report = reg.warmup(progress=False)
    bundle = str(tmp_path / "b.tar.gz")
    manifest = export_bundle(report, bundle)
    name = os.path.basename(k.tuning_file())
    assert list(manifest.tuning) == [name]
    original = open(k.tuning_file(), "rb").read()
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path / "fresh-cache"))
    import_bundle(bundle, target="cuda:90")
    assert open(k.tuning_file(), "rb").read() == original
    Scale._tuning_table.clear()
    k.finish_warmup(k.get_warmup_keys(sizes=(64,)))
    assert Scale._tuning_table == {(64, "torch.float32", "torch.float32"): _idx(64, 4)}


def test_tuning_file_choosing_an_unwarmed_config_fails_the_warmup():
    k = Scale()
    _table_file(k, [((64, "torch.float32", "torch.float32"), _idx(128, 4), 0.5)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup(sizes=(8,))  # pruning keeps BLOCK 32 only
    report = reg.warmup(progress=False, raise_on_failure=False)
    assert [f.kernel for f in report.failures] == ["scale_jit"]
    assert f"chooses config {_idx(128, 4)} (BLOCK: 128" in report.failures[0].error
    assert Scale._tuning_table == {}


def test_tuning_file_choosing_a_config_compiled_only_for_another_tuning_key_fails_the_warmup():
    """BLOCK 64 compiles for n=64 but pruning drops it for n=8: a file choosing it at n=8's tuning
    key would compile at run time there, whatever the other key compiled."""
    k = Scale()
    f32 = "torch.float32"
    _table_file(k, [((64, f32, f32), _idx(64, 4), 0.5), ((8, f32, f32), _idx(64, 4), 0.5)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup(sizes=(8, 64))
    report = reg.warmup(progress=False, raise_on_failure=False)
    assert [f.kernel for f in report.failures] == ["scale_jit"]
    error = report.failures[0].error
    assert f"chooses config {_idx(64, 4)} (BLOCK: 64" in error and "for tuning key (8, 'torch.float32'" in error
    assert "configs compiled for all of them: [0, 1]" in error
    assert Scale._tuning_table == {}
    # a tuning key no warmed key has (n=100 is served by the unspecialized n): any warmed config
    _table_file(k, [((100, f32, f32), _idx(64, 4), 0.5)])
    Scale._compiled_configs = None
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup(sizes=(8, 64))
    reg.warmup(progress=False)
    assert Scale._tuning_table == {(100, f32, f32): _idx(64, 4)}


def test_tuning_file_choice_must_be_compiled_for_every_key_of_its_tuning_key():
    """(64, scale) and (64, None) share one tuning key, so one choice serves both: a config only
    the first compiled would compile at run time for the second."""

    class NoWideUnscaled(Scale):
        kernel = _wrapped()

        def select_configs(self, key, configs):
            return [i for i in configs if key.has_scale or CONFIGS[i].kwargs["BLOCK"] < 128]

    k = NoWideUnscaled()
    _table_file(k, [((64, "torch.float32", "torch.float32"), _idx(128, 2), 0.5)])
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup(sizes=(64,))
    report = reg.warmup(progress=False, raise_on_failure=False)
    assert len(report.failures) == 1
    assert "is not compiled for every warmed compile key of that tuning key" in report.failures[0].error


# -- the other nesting order, and a config's pre_hook --------------------------------------------

@triton.jit(do_not_specialize=["n"])
def _even_jit(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


HOOKED: list = []
INNER_CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1, pre_hook=lambda args: HOOKED.append(dict(args))),
                 triton.Config({"BLOCK": 64}, num_warps=2)]


def _inner_heuristics():
    """Autotuner over Heuristics: the heuristic sees the config's BLOCK (Triton's order)."""
    even = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(_even_jit)
    return triton.autotune(INNER_CONFIGS, key=["n"])(even)


class _EvenKeys(TritonJitKernel["_EvenKeys.CompileKey"]):
    """The key space of the kernels over ``_even_jit``: two row lengths, one a multiple of BLOCK
    (64) and one not (40). Subclasses set ``kernel`` and the launcher."""

    @dataclass(frozen=True)
    class CompileKey:
        n: int

    def dispatch(self, *, n):
        return self.CompileKey(n)

    def get_warmup_keys(self):
        return [self.CompileKey(64), self.CompileKey(40)]

    def warmup_inputs(self, key):
        return dict(x=WarmupTensor(torch.float32, (key.n,)), out=WarmupTensor(torch.float32, (key.n,)), n=key.n)


class Even(_EvenKeys):
    """out = x (n float32 elements), masked unless n is a multiple of the chosen BLOCK."""

    kernel = _inner_heuristics()
    tuning = TuningPolicy("default", config=0)

    @kernel_launcher
    def __call__(self, *, x, out, n) -> LaunchSpec:
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)


def _no_block_past(configs, nargs, **kwargs):
    """No BLOCK wider than the row (n), as the trial's prune rule."""
    return [c for c in configs if c.kwargs["BLOCK"] <= {**nargs, **kwargs}["n"]]


def _even_over_tuner():
    """EVEN (n a multiple of 64) set by heuristics over a pruning autotuner (FLA's order)."""
    tuner = triton.autotune(ROW_CONFIGS, key=["n"], prune_configs_by={"early_config_prune": _no_block_past})(_even_jit)
    return triton.heuristics({"EVEN": lambda a: a["n"] % 64 == 0})(tuner)


class EvenRows(_EvenKeys):
    """out = x over n float32 elements; warm keys n=128 (EVEN: BLOCK 32, 64, 128 survive) and
    n=80 (not EVEN: BLOCK 32, 64)."""

    kernel = _even_over_tuner()

    def get_warmup_keys(self):
        return [self.CompileKey(128), self.CompileKey(80)]

    @kernel_launcher
    def __call__(self, *, x, out, n) -> LaunchSpec:
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)


def _warm_even(cls, entries):
    cls._tuning_table.clear()
    cls._untuned_choice.clear()
    cls._compiled_configs = None
    k = cls()
    if entries:
        _table_file(k, entries)
    reg = JitWarmupRegistry()
    with reg.activate():
        k.register_warmup()
    return k, reg.warmup(progress=False)


def test_nearest_prefers_a_config_compiled_for_the_launchs_heuristic_values():
    """At n=200 and 1000 (not multiples of 64: EVEN false) the nearest tuned key is 128, whose
    BLOCK 128 compiled only with EVEN true; the nearest tuned key whose config compiled with EVEN
    false is 80 (BLOCK 64). At n=256 (EVEN true) 128's BLOCK 128 compiled for it."""
    f32 = "torch.float32"
    k, report = _warm_even(EvenRows, [((128, f32, f32), 2, None), ((80, f32, f32), 1, None)])
    with JitMonitor("error", report=report) as mon:
        for n in (200, 1000, 256):
            k(x=torch.ones(n), out=torch.empty(n), n=n)
    assert mon.counts().runtime_compiles == 0
    assert EvenRows._untuned_choice == {(200, f32, f32): 1, (1000, f32, f32): 1, (256, f32, f32): 2}
    # the library's own path chooses by the same rule
    EvenRows._untuned_choice.clear()
    _tc.drop_autotuner_cache(EvenRows._wrapping.tuner, (300, f32, f32))
    x, out = torch.ones(300), torch.empty(300)
    with JitMonitor("error", report=report) as mon:
        EvenRows.wrapped[(10,)](x, out, 300)
    assert mon.counts().runtime_compiles == 0 and EvenRows._untuned_choice == {(300, f32, f32): 1}


def test_first_surviving_config_is_one_compiled_for_the_launchs_heuristic_values():
    """No tuning file; the EVEN key skips BLOCK 32 (select_configs): at n=192 (EVEN, every BLOCK
    survives) the first surviving config compiled for EVEN is BLOCK 64, not BLOCK 32 (compiled
    only for n=80, not EVEN)."""

    class NoNarrowEven(EvenRows):
        kernel = _even_over_tuner()

        def select_configs(self, key, configs):
            return [i for i in configs if key.n % 64 or ROW_CONFIGS[i].kwargs["BLOCK"] > 32]

    k, report = _warm_even(NoNarrowEven, None)
    with JitMonitor("error", report=report) as mon:
        for n in (192, 100):
            k(x=torch.ones(n), out=torch.empty(n), n=n)
    assert mon.counts().runtime_compiles == 0
    assert NoNarrowEven._untuned_choice == {(192, "torch.float32", "torch.float32"): 1,
                                            (100, "torch.float32", "torch.float32"): 0}


def test_autotuner_over_heuristics_and_config_pre_hook_as_triton():
    from zerojit import kernel as _k

    reg = JitWarmupRegistry()
    with reg.activate():
        Even().register_warmup()
    report = reg.warmup(progress=False)
    assert len(report.kernels[0].keys) == 4  # 2 keys x 2 configs (no pruning)
    seen = []
    previous = _k.set_launch_observer(lambda kern, compiled: seen.append(compiled))
    try:
        with JitMonitor("error", report=report) as mon:
            for n in (64, 40, 128):
                del HOOKED[:]
                x, out = torch.ones(n), torch.empty(n)
                Even()(x=x, out=out, n=n)
                ours = dict(HOOKED[0])
                tuner = Even.wrapped  # Triton's own run: the policy's choice is in its cache, no benchmark
                compiled = tuner.run(x, out, n, grid=lambda m: (triton.cdiv(n, m["BLOCK"]),), warmup=True)
                assert seen[-1] is compiled
                # the pre_hook saw what Triton's Autotuner.run hands it: the arguments and the config's
                # all_kwargs (Triton's also holds its run's own grid and warmup keywords)
                assert HOOKED[-1].keys() - {"grid", "warmup"} == ours.keys() >= {"x_ptr", "n", "BLOCK", "num_warps"}
                assert "EVEN" not in ours  # the heuristic below the autotuner runs after the hook
                assert ours["BLOCK"] == 32 and ours["x_ptr"] is x
                assert compiled.src.constants[_even_jit.arg_names.index("EVEN"),] == (n % 32 == 0)
    finally:
        _k.set_launch_observer(previous)
    assert mon.counts().runtime_compiles == 0 and mon.counts().benchmarks == 0


def test_heuristics_alone_as_triton():
    from zerojit import kernel as _k

    wrapped = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(_even_jit)

    class EvenOnly(_EvenKeys):
        """out = x, BLOCK 32, masked unless n is a multiple of 32 (no autotuner: no policy needed)."""

        kernel = wrapped

        @kernel_launcher
        def __call__(self, *, x, out, n) -> LaunchSpec:
            return LaunchSpec((triton.cdiv(n, 32),), dict(BLOCK=32, num_warps=1), out)

    assert EvenOnly().get_warmup_keys() == [EvenOnly.CompileKey(64), EvenOnly.CompileKey(40)]  # not expanded
    reg = JitWarmupRegistry()
    with reg.activate():
        EvenOnly().register_warmup()
    report = reg.warmup(progress=False)
    seen = []
    previous = _k.set_launch_observer(lambda kern, compiled: seen.append(compiled))
    try:
        with JitMonitor("error", report=report) as mon:
            for n in (64, 40, 96, 7):
                x, out = torch.ones(n), torch.empty(n)
                EvenOnly()(x=x, out=out, n=n)
                assert seen[-1] is wrapped.run(x, out, n, BLOCK=32, num_warps=1, grid=(1,), warmup=True)
    finally:
        _k.set_launch_observer(previous)
    assert mon.counts().runtime_compiles == 0


WORKER_REFUSED_MODULE = '''
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.autotune import TuningPolicy
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor

if os.environ.get("CUDA_VISIBLE_DEVICES") == "":  # a compile worker (the parent hides its GPUs)
    raise RuntimeError("this library needs a GPU driver at import")


@triton.autotune([triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def refused_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


class Refused(TritonJitKernel["Refused.CompileKey"]):
    kernel = refused_kernel
    tuning = TuningPolicy("default", config=0)

    @dataclass(frozen=True)
    class CompileKey:
        dtype: str

    def dispatch(self, *, dtype):
        return self.CompileKey(dtype)

    def get_warmup_keys(self):
        return [self.CompileKey("float32"), self.CompileKey("float16")]

    def warmup_inputs(self, key):
        return dict(x=WarmupTensor(getattr(torch, key.dtype), (64,)), n=64)

    @kernel_launcher
    def __call__(self, *, x, n) -> LaunchSpec:
        return LaunchSpec((1,), {}, x)
'''


def test_a_kernel_no_worker_can_take_is_reported_once_naming_it(tmp_path, monkeypatch):
    from zerojit import precompile

    monkeypatch.setenv(precompile.WORKER_START_ENV, "spawn")  # a forked worker has the module this process imported
    monkeypatch.setattr(precompile, "_COMPILE_WHILE_BOOTING", False)  # each key goes to a worker
    (tmp_path / "zj_refused_lib.py").write_text(WORKER_REFUSED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    from zj_refused_lib import Refused

    reg = JitWarmupRegistry()
    with reg.activate():
        Refused().register_warmup()
    report = reg.warmup(workers=2, progress=False)
    assert report.ok and len(report.kernels[0].keys) == 4  # compiled in this process instead
    [note] = [r for r in report.stats.recovered if "refused" in r]
    assert note.startswith("kernel 'refused' (zj_refused_lib:refused_kernel) cannot be loaded in a worker "
                           "(RuntimeError: this library needs a GPU driver at import)")
