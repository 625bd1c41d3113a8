"""Tuning at warm-up where kernels run (the interpreter here; a GPU in production): zerojit's
benchmark is the autotuner's own (``Autotuner._bench``: ``reset_to_zero``, hooks, ``do_bench``),
so its choice, tuning key and side effects equal those of Triton's own autotuner on the same inputs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import torch
import triton
import triton.language as tl

from zerojit.autotune import TuningPolicy
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher

pytestmark = pytest.mark.interpreter

CONFIGS = [triton.Config({"BLOCK": b}) for b in (4, 8, 16)]
FAKE_MS = {4: 3.0, 8: 1.0, 16: 2.0}  # BLOCK 8 wins


@triton.jit
def _accumulate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


def _bench_recorder(log):
    def do_bench(kernel_call, quantiles):
        kernel_call()  # runs in the interpreter: out += x after reset_to_zero
        block = do_bench.last_config.kwargs["BLOCK"]
        log.append(block)
        return [FAKE_MS[block]] * 3
    return do_bench


def _tuner(log):
    at = triton.autotune(CONFIGS, key=["n"], reset_to_zero=["out_ptr"], do_bench=_bench_recorder(log))(_accumulate_kernel)
    original = type(at)._bench

    def bench(self, *args, config, **meta):  # tell the fake do_bench which config it times
        self._do_bench.last_config = config
        return original(self, *args, config=config, **meta)

    return at, original, bench


def _accumulate_class(tuner):
    class Accumulate(TritonJitKernel["Accumulate.CompileKey"]):
        """out += x over n float32 elements, autotuned over BLOCK (key: n)."""

        kernel = tuner
        tuning = TuningPolicy("error")

        @dataclass(frozen=True)
        class CompileKey:
            n: int

        def dispatch(self, *, n):
            return self.CompileKey(n)

        def get_warmup_keys(self):
            return [self.CompileKey(40)]

        def warmup_inputs(self, key):
            return dict(x=torch.ones(key.n), out=torch.zeros(key.n), n=key.n)

        def tuning_inputs(self, key):
            self.tuning_out = torch.full((key.n,), 5.0)
            return [dict(x=torch.ones(key.n), out=self.tuning_out, n=key.n)]

        @kernel_launcher
        def __call__(self, *, x, out, n) -> LaunchSpec:
            return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)

    return Accumulate


def test_tuning_at_warmup_is_triton_autotuners_benchmark(tmp_path, monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    ours_log, ref_log = [], []
    at, original, bench = _tuner(ours_log)
    monkeypatch.setattr(type(at), "_bench", bench)
    cls = _accumulate_class(at)
    k = cls()
    keys = k.get_warmup_keys()
    k.finish_warmup(keys)
    # the reference: Triton's own autotuner on the same inputs
    ref, _, _ = _tuner(ref_log)
    x, out = torch.ones(40), torch.full((40,), 5.0)
    ref[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](x, out, 40)
    assert ours_log == ref_log == [4, 8, 16]
    # reset_to_zero acted before each config (else 5 + 3): one accumulation left, as in Triton's run
    assert torch.equal(k.tuning_out, torch.ones(40)) and torch.equal(out, torch.ones(40))
    [(ref_key, ref_config)] = ref.cache.items()
    assert cls._tuning_table == {ref_key: CONFIGS.index(ref_config)} == {(40, "torch.float32", "torch.float32"): 1}
    assert at.cache[ref_key] is ref_config  # the autotuner's own cache holds the choice
    doc = json.load(open(k.tuning_file()))
    assert doc["entries"] == [{"key": [40, "torch.float32", "torch.float32"], "config": 1, "ms": 1.0}]
    assert doc["target"] == "interpreter" and doc["triton"] == triton.__version__
    # serving: the tuned config, no benchmark; the launch output is the kernel's (out += x once)
    out = torch.full((40,), 5.0)
    k(x=torch.ones(40), out=out, n=40)
    assert ours_log == [4, 8, 16] and torch.equal(out, torch.full((40,), 6.0))
    # a second process reads the file instead of benchmarking
    cls._tuning_table.clear()
    k.finish_warmup(keys)
    assert ours_log == [4, 8, 16] and cls._tuning_table == {ref_key: 1}
    assert not [p for p in os.listdir(os.path.dirname(k.tuning_file())) if p.endswith(".tmp")]


@triton.jit
def _flagged_kernel(x_ptr, out_ptr, n, flag: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + flag, mask=mask)


def test_tuning_chooses_a_config_compiled_for_every_compile_key_of_its_tuning_key(tmp_path, monkeypatch):
    """Keys (40, flag 0) and (40, flag 1) share a tuning key; select_configs leaves BLOCK 8 (the
    fastest) out for flag 1. The benchmark chooses among the configs both compiled, so a flag-1
    launch compiles nothing at run time and the next warm-up accepts the file this one wrote."""
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))
    log: list = []
    at = triton.autotune(CONFIGS, key=["n"], do_bench=_bench_recorder(log))(_flagged_kernel)
    original = type(at)._bench

    def bench(self, *args, config, **meta):
        self._do_bench.last_config = config
        return original(self, *args, config=config, **meta)

    monkeypatch.setattr(type(at), "_bench", bench)

    class Flagged(TritonJitKernel["Flagged.CompileKey"]):
        kernel = at

        @dataclass(frozen=True)
        class CompileKey:
            n: int
            flag: int

        def dispatch(self, *, n, flag):
            return self.CompileKey(n, flag)

        def get_warmup_keys(self):
            return [self.CompileKey(40, 0), self.CompileKey(40, 1)]

        def select_configs(self, key, configs):
            return [i for i in configs if not (key.flag and CONFIGS[i].kwargs["BLOCK"] == 8)]

        def warmup_inputs(self, key):
            return dict(x=torch.ones(key.n), out=torch.zeros(key.n), n=key.n, flag=key.flag)

        def tuning_inputs(self, key):
            return [self.warmup_inputs(key)]

        @kernel_launcher
        def __call__(self, *, x, out, n, flag) -> LaunchSpec:
            return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)

    k = Flagged()
    keys = k.get_warmup_keys()
    k.finish_warmup(keys)
    assert Flagged._tuning_table == {(40, "torch.float32", "torch.float32"): 2}  # BLOCK 16: BLOCK 8 is flag 0's only
    Flagged._tuning_table.clear()
    k.finish_warmup(keys)  # the file it wrote is accepted
    assert Flagged._tuning_table == {(40, "torch.float32", "torch.float32"): 2}
