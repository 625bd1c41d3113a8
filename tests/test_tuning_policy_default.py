"""Autotuned contract kernels with nothing declared (issue 30, section 4): the default
``TuningPolicy()`` serves a tuning key never tuned with the nearest tuned key's config among keys
of the same dtypes and flags, else the first config, in the autotuner's order, that survives
pruning for the launch and compiled at warm-up; the warm-up report says how untuned keys are
served; warn mode logs an autotune benchmark once per tuning key and counts every one.

Compile-only (``cuda:90``): warm-ups compile real cubins, launches are dry.
"""

from __future__ import annotations

import logging
import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import torch
import triton
import triton.language as tl

from zerojit import kernel as _kernel
from zerojit import triton_compat as _tc
from zerojit.autotune import TuningError, TuningPolicy, save_tuning_file
from zerojit.examples import tuned_scale as example
from zerojit.examples.tuned_scale import TunedScale, tuned_scale_kernel
from zerojit.monitor import JitMonitor
from zerojit.registry import JitWarmupRegistry

F32 = "torch.float32"
CONFIGS = tuned_scale_kernel.fn.configs  # the autotuner's configs, in its order (Heuristics -> Autotuner)
SIZES = [n for k in range(21) for n in (2**k - 1, 2**k, 2**k + 1)]  # the sweep: 63 sizes


def _first_surviving(n: int) -> triton.Config:
    """The expected choice, computed from the autotuner's configs and the example's own prune
    function (every config compiled at the warm-up at 4096, where none is pruned)."""
    return example._prune_wide_blocks(list(CONFIGS), {"n": n})[0]


def _reset(cls) -> None:
    cls._tuning_table.clear()
    cls._untuned_choice.clear()
    cls._compiled_configs = None
    tuned_scale_kernel.fn.cache.clear()  # the autotuner's own cache: zerojit puts its choices there


@pytest.fixture(autouse=True)
def fresh(compile_only_target):
    _reset(TunedScale)
    yield compile_only_target
    _reset(TunedScale)


def _warm(sizes=(4096,)):
    reg = JitWarmupRegistry()
    with reg.activate():
        TunedScale().register_warmup(sizes=sizes)
    return reg.warmup(progress=False)


def _config_of_variants(report) -> dict[int, int]:
    """id(compiled kernel) -> the autotune config index it was warmed for."""
    return {id(v.compiled): v.key.config for k in report.kernels for v in k.variants}


def test_tuned_scale_without_policy_serves_every_size_with_no_compile_no_benchmark_no_error():
    """The must-show: warmed under compile-only, dry-launched at 2^k - 1, 2^k, 2^k + 1 for
    k = 0..20 in error mode: 0 compiles, 0 benchmarks, 0 errors; each tuning key gets the first
    config that survives pruning, and the launch runs that config's warmed variant."""
    assert TunedScale.tuning == TuningPolicy("nearest") and TunedScale.tuning.config is None
    report = _warm()
    assert report.ok and len(report.kernels[0].keys) == 2 * len(CONFIGS)  # 2 scale flags x 6 configs
    # the report: one tuning key (4096, f32, f32) for both flags, none tuned under compile-only
    assert "  1 tuning key untuned: first surviving config (tuned_scale)" in report.summary().splitlines()
    assert report.to_dict()["kernels"]["tuned_scale"]["tuning"] == {
        "tuning_keys": 1, "untuned": 1, "served": "first surviving config"}
    variant_config = _config_of_variants(report)
    x, out = torch.ones(SIZES[-1]), torch.empty(SIZES[-1])
    errors = []
    with JitMonitor("error", report=report) as mon:
        for n in SIZES:
            for scale in (2.0, None):
                try:
                    TunedScale()(x=x[:n], out=out[:n], scale=scale)
                except Exception as e:  # counted: the issue asks for 0
                    errors.append((n, scale, e))
    counts = mon.counts()
    assert errors == []
    assert counts.runtime_compiles == 0 and counts.direct_compiles == 0 and counts.benchmarks == 0
    assert counts.launches == 2 * (len(SIZES) - 1)  # n = 0 launches nothing (a grid of 0)
    choices = _tc.autotuner_choices(tuned_scale_kernel.fn)
    for n in SIZES:
        assert choices[(n, F32, F32)] is _first_surviving(n), n
    # the variant launched is the one warmed for that config
    seen = []
    previous = _kernel.set_launch_observer(lambda kern, compiled: seen.append(variant_config.get(id(compiled))))
    try:
        for n in SIZES[1:]:
            TunedScale()(x=x[:n], out=out[:n], scale=2.0)
    finally:
        _kernel.set_launch_observer(previous)
    assert seen == [CONFIGS.index(_first_surviving(n)) for n in SIZES[1:]]


def test_nearest_tuned_key_among_same_dtypes_else_first_surviving():
    """A tuning file tunes (4096, f32, f32) -> BLOCK 1024 / 4 warps, (2^20, f32, f32) -> BLOCK 256 /
    2 warps, and (100000, f16, f16) -> BLOCK 64 / 4 warps: an untuned float32 key takes the
    nearest float32 key's config in log2 distance (never the float16 one, however close); where
    pruning drops every tuned config (a short row), the first surviving config."""
    k = TunedScale()
    idx = {(c.kwargs["BLOCK"], c.num_warps): i for i, c in enumerate(CONFIGS)}
    save_tuning_file(k.tuning_file(), k.tuning_header(), list(CONFIGS), [
        ((4096, F32, F32), idx[(1024, 4)], None), ((1 << 20, F32, F32), idx[(256, 2)], None),
        ((100_000, "torch.float16", "torch.float16"), idx[(64, 4)], None)])
    report = _warm(sizes=(64, 4096))  # tuning keys 64 (untuned) and 4096 (tuned)
    assert "  1 tuning key untuned: nearest tuned key, else first surviving config (tuned_scale)" in \
        report.summary().splitlines()
    x, out = torch.ones(200_000), torch.empty(200_000)
    cases = {  # n -> expected config, by hand: |log2 n - log2 4096| vs |log2 n - 20|
        100_000: CONFIGS[idx[(256, 2)]],   # 16.6: 3.4 from 2^20, 4.6 from 4096
        10_000: CONFIGS[idx[(1024, 4)]],   # 13.3: 1.3 from 4096
        400: CONFIGS[idx[(256, 2)]],       # nearest 4096 (3.4 vs 11.4), its BLOCK 1024 pruned (> 800)
        100: CONFIGS[0],                   # both pruned (BLOCK > 200): the first surviving, BLOCK 64 / 2
    }
    with JitMonitor("error", report=report) as mon:
        for n in cases:
            k(x=x[:n], out=out[:n], scale=2.0)
    assert mon.counts().runtime_compiles == 0 and mon.counts().benchmarks == 0
    choices = _tc.autotuner_choices(tuned_scale_kernel.fn)
    assert {n: choices[(n, F32, F32)] for n in cases} == cases


def test_policies_side_by_side_default_named_and_error():
    """No policy: the first surviving config; a named config (``nearest`` + config) still wins
    over it; ``error`` still raises TuningError at the launch, naming the kernel and the key."""
    key, few = (3, F32, F32), lambda: [1, 0]  # survivors at n = 3 (BLOCK 64), in a pruner's order
    Plain = type("Plain", (TunedScale,), {"kernel": tuned_scale_kernel, "tuning": None})
    assert Plain()._choose_config(key, few) == 0
    Named = type("Named", (TunedScale,), {"kernel": tuned_scale_kernel,
                                          "tuning": TuningPolicy("nearest", config={"BLOCK": 256, "num_warps": 4})})
    assert Named()._choose_config(key, few) == next(
        i for i, c in enumerate(CONFIGS) if c.kwargs["BLOCK"] == 256 and c.num_warps == 4)
    Strict = type("Strict", (TunedScale,), {"kernel": tuned_scale_kernel, "tuning": TuningPolicy("error")})
    with pytest.raises(TuningError, match=r"tuned_scale: tuning key \(5, 'torch.float32', 'torch.float32'\) was "
                                          r"never tuned and the policy is 'error' \(TuningPolicy\('error'\): every "
                                          r"tuning key must be tuned\): tune it at warm-up"):
        Strict()(x=torch.ones(5), out=torch.empty(5), scale=2.0)  # raised before anything compiles
    # a config that failed to compile at warm-up (e.g. out of resources) is skipped
    Plain._compiled_configs = frozenset({1, 2, 3})
    assert Plain()._choose_config((7, F32, F32), few) == 1


@triton.jit
def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_warn_mode_logs_each_tuning_key_once_and_counts_every_benchmark(caplog):
    """A plain autotuner under compile-only keeps no choice, so it benchmarks at every launch:
    warn mode logs one line per tuning key (2 here, for 10 launches), the counts have all 10."""
    plain = triton.autotune([triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(_copy)
    x, out = torch.ones(64), torch.empty(64)
    with caplog.at_level(logging.WARNING, logger="zerojit"), JitMonitor("warn", report=()) as mon:
        for _ in range(5):
            for n in (16, 48):
                plain[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    lines = [r.getMessage() for r in caplog.records if "autotune benchmark" in r.getMessage()]
    assert lines == [f"zerojit: autotune benchmark of _copy at tuning key ({n}, 'torch.float32', 'torch.float32') "
                     "(2 configs) after warm-up (logged once per tuning key; all counted)" for n in (16, 48)]
    assert mon.counts().benchmarks == 10
    assert sorted((r.tuning_key[0], c) for r, c in mon.benchmarks()) == [(16, 5), (48, 5)]


def test_a_config_that_cannot_run_is_skipped_at_warm_up_and_never_chosen(monkeypatch):
    """A config whose warm-up raises OutOfResources (as loading it on a GPU with too little shared
    memory does) is skipped, as Triton's autotuner skips it, when another config of its key
    compiled: the warm-up succeeds and names it, and the first surviving config that compiled
    is chosen."""
    from triton.runtime.errors import OutOfResources

    compile_ = TunedScale.compile

    def compile(self, key):
        if key.config == 0:
            raise OutOfResources(232448, 166912, "shared memory")
        return compile_(self, key)

    monkeypatch.setattr(TunedScale, "compile", compile)
    reg = JitWarmupRegistry()
    with reg.activate():
        TunedScale().register_warmup(sizes=(64,))  # BLOCK 64 only: configs 0 and 1
    report = reg.warmup(progress=False, workers=1)
    assert report.ok and [t.config for t in report.kernels[0].keys] == [1, 1]
    skipped = report.kernels[0].skipped_configs
    assert len(skipped) == 2 and all("@ config 0 " in c and "OutOfResources" in c for c in skipped)
    assert sum("config skipped (cannot run here" in line for line in report.summary().splitlines()) == 2
    with JitMonitor("error", report=report) as mon:
        for n in (3, 50, 64):
            TunedScale()(x=torch.ones(n), out=torch.empty(n), scale=2.0)
    assert mon.counts().runtime_compiles == 0 and mon.counts().launches == 3
    choices = _tc.autotuner_choices(tuned_scale_kernel.fn)
    expected = [c for c in example._prune_wide_blocks(list(CONFIGS), {"n": 50}) if c is not CONFIGS[0]][0]
    assert {choices[(n, F32, F32)] for n in (3, 50, 64)} == {expected}


def test_a_run_whose_id_a_freed_run_reused_is_counted_as_a_new_one():
    """The bench listener names a run by the id of its argument dict, which Python may reuse once
    the last run's dict is freed: two runs under one id (each benchmarking the same configs) are
    two benchmarks, and one run's second config is no second benchmark."""
    plain = triton.autotune([triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])(_copy)
    first, second = plain.configs
    named = {"x_ptr": torch.ones(64), "out_ptr": torch.empty(64), "n": 16}
    with JitMonitor("warn", report=()) as mon:
        for _ in range(3):  # three runs, every one under the same reused id
            mon._on_bench(plain, first, named, 12345)
            mon._on_bench(plain, second, named, 12345)
    assert mon.counts().benchmarks == 3
