"""The warm-up runs each warmed key's launch path dry (zerojit.launch_priming).

Under ``compile_only("cuda:90")`` (no GPU): what a primed first launch no longer runs (the entry's
first-use path ``_zerojit_launch``, the plan resolution) is counted with spies, against the same
kernel warmed with ``ZEROJIT_PRIME_KERNELS=0``; that priming launches and compiles nothing is
checked on Triton's in-process cache and the launch observer; each primed launch's Triton key is
checked against Triton's own binder.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # runs in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit import JitWarmupRegistry, launch_priming
from zerojit import triton_compat as tc
from zerojit.autotune import TunedKey, save_tuning_file
from zerojit.examples.scale_add import ScaleAdd
from zerojit.examples.tuned_scale import TunedScale
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher, set_launch_observer
from zerojit.specialization import WarmupTensor

SIZES = (4096, 1 << 20)


@pytest.fixture(autouse=True)
def _fresh_in_process_caches():
    """The library kernels warmed here leave no variant in Triton's in-process caches: another
    test module's warm-up of them must compile (its workers' counts are checked)."""
    yield
    for kernel in (TunedScale, ScaleAdd):
        kernel.kernel.device_caches.clear()


def _tuned(name: str, **attributes) -> TunedScale:
    """A fresh TunedScale class (its own launch state, plans and tables; ``attributes`` set on it),
    tuned by a file that chooses BLOCK 1024 / 4 warps at each of SIZES."""
    cls = type(name, (TunedScale,), {"kernel": TunedScale.wrapped, **attributes})  # a launch state of its own
    kernel = cls()
    configs = kernel._wrapping.configs
    best = next(i for i, c in enumerate(configs) if c.kwargs["BLOCK"] == 1024 and c.num_warps == 4)
    save_tuning_file(kernel.tuning_file(), kernel.tuning_header(), configs,
                     [((n, "torch.float32", "torch.float32"), best, None) for n in SIZES])
    return kernel


def _warm(kernel, **request):
    registry = JitWarmupRegistry()
    with registry.activate():
        kernel.register_warmup(**request)
    report = registry.warmup(progress=False, workers=1)
    assert not report.failures
    return report


class _Spy:
    """Counts calls of a method, calling through."""

    def __init__(self, monkeypatch, owner, name):
        self.calls = 0
        original = getattr(owner, name)

        def spy(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)


@pytest.mark.parametrize("prime", [True, False])
def test_a_primed_wrapped_kernel_s_first_launch_takes_the_steady_path(compile_only_target, monkeypatch, prime):
    if not prime:
        monkeypatch.setenv(launch_priming.PRIME_ENV, "0")
    kernel = _tuned(f"TunedPrimed{prime}")
    _warm(kernel, sizes=SIZES)
    state = kernel._launch_state
    # the plan the entry calls: a plan's run once primed, else still the resolver (first launch)
    assert (state.run_call.__name__ == "_zj_run") is prime
    slow = _Spy(monkeypatch, TritonJitKernel, "_zerojit_launch")
    x = torch.randn(4096)
    paths = []
    for _ in range(3):
        before = slow.calls
        kernel(x=x, out=torch.empty_like(x), scale=2.0)
        paths.append(slow.calls - before)
    # primed: the inline path from the first launch on; not primed: the first-use path first
    assert paths == ([0, 0, 0] if prime else [1, 0, 0])
    assert state.run_call.__name__ == "_zj_run"


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _fast_copy(name: str) -> TritonJitKernel:
    """A fast-path kernel class of its own (launch state, fast tables): a copy of n floats."""

    @dataclass(frozen=True)
    class CompileKey:
        n_class: int  # the specialization class of n (1, divisible by 16, other)

    def warmup_inputs(self, key):
        return dict(x=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)), n=key.n_class)

    @kernel_launcher
    def __call__(self, *, x, out, n) -> LaunchSpec:
        return LaunchSpec(((n + 63) // 64,), {"BLOCK": 64}, out)

    cls = type(name, (TritonJitKernel,), dict(
        kernel=_copy_kernel, fast_path=True, CompileKey=CompileKey, warmup_inputs=warmup_inputs, __call__=__call__,
        get_warmup_keys=lambda self: [CompileKey(16), CompileKey(7)]))
    return cls()


@pytest.mark.parametrize("prime", [True, False])
def test_a_primed_fast_path_kernel_s_first_launch_takes_the_steady_path(compile_only_target, monkeypatch, prime):
    if not prime:
        monkeypatch.setenv(launch_priming.PRIME_ENV, "0")
    kernel = _fast_copy(f"FastCopy{prime}")
    _warm(kernel)
    state = kernel._launch_state
    assert len(kernel.fast_variants()) == 2
    # the fast launcher the entry calls: the plan's own once primed, else still the resolver
    assert (state.fast_call.__name__ == "_zj_fast") is prime
    slow = _Spy(monkeypatch, TritonJitKernel, "_zerojit_launch")
    x = torch.randn(48)
    kernel(x=x, out=torch.empty_like(x), n=48)
    kernel(x=x, out=torch.empty_like(x), n=7)
    assert slow.calls == (0 if prime else 1)
    assert state.fast_call.__name__ == "_zj_fast"


def test_priming_counts_every_warmed_key_and_launches_and_compiles_nothing(compile_only_target):
    kernel = _tuned("TunedCounted")
    report = _warm(kernel, sizes=SIZES)
    keys = [k for kw in report.kernels for k in kw.keys]
    assert keys and all(isinstance(k, TunedKey) for k in keys)
    jit = type(kernel)._wrapping.base
    cache = tc.kernel_cache(jit, tc.current_device())
    before = dict(cache)
    seen = []
    previous = set_launch_observer(lambda k, compiled: seen.append(compiled))
    try:
        assert launch_priming.prime_kernel(kernel, keys) == len(keys)
    finally:
        set_launch_observer(previous)
    assert seen == [] and cache == before  # no launch observed, no variant added


def test_a_key_that_never_warmed_is_not_primed_and_nothing_compiles(compile_only_target):
    kernel = ScaleAdd()
    _warm(kernel, periods=(64, 7))
    new = kernel.dispatch(period=64, block=128)  # BLOCK 128 never compiled
    cache = tc.kernel_cache(kernel.kernel, tc.current_device())
    before = dict(cache)
    assert launch_priming.prime_kernel(kernel, [new]) == 0
    assert cache == before
    warmed = [kernel.dispatch(period=p) for p in (64, 7)]
    assert launch_priming.prime_kernel(kernel, warmed) == 2


def test_a_key_whose_prime_raises_is_skipped_and_launches_as_before(compile_only_target, monkeypatch):
    class Fussy(ScaleAdd):
        """Its warm-up inputs can be made once per key: the second time (the prime) raises."""

        made: set = set()

        def warmup_inputs(self, key):
            if key in self.made:
                raise RuntimeError("warm-up inputs made twice")
            self.made.add(key)
            return super().warmup_inputs(key)

    primed = []
    original = launch_priming.prime_kernel
    monkeypatch.setattr(launch_priming, "prime_kernel", lambda k, keys: primed.append(original(k, keys)) or primed[-1])
    kernel = Fussy()
    report = _warm(kernel, periods=(64,))
    assert [len(k.keys) for k in report.kernels] == [1]  # warmed, and the failed prime is no failure
    assert primed == [0]
    x, bias = torch.randn(1024), torch.randn(64)
    out = torch.empty_like(x)
    kernel(x=x, bias=bias, out=out, period=64, scale=1.5)  # a dry launch: selected, nothing runs


def test_priming_runs_the_new_tuning_key_path_at_unseen_keys_and_undoes_its_records(compile_only_target,
                                                                                   monkeypatch):
    calls = []
    original = TritonJitKernel._choose_untuned

    def spy(self, tuning_key, survivors, record=True, **rest):
        calls.append((tuning_key, record))
        return original(self, tuning_key, survivors, record, **rest)

    monkeypatch.setattr(TritonJitKernel, "_choose_untuned", spy)
    kernel = _tuned("TunedNewKeyPath")
    report = _warm(kernel, sizes=SIZES)
    cls = type(kernel)
    tuned = set(cls._tuning_table)
    assert tuned == {(n, "torch.float32", "torch.float32") for n in SIZES}
    # the launch path's own choice (recorded, as at a real new key), at keys no table or cache holds
    assert len(calls) == launch_priming.NEW_KEY_RUNS and all(record for _, record in calls)
    fakes = [k for k, _ in calls]
    assert len(set(fakes)) == len(fakes) and not tuned & set(fakes)
    assert all(k[1:] == ("torch.float32", "torch.float32") and k[0] > 1 << 64 for k in fakes)  # no launch makes them
    # nothing of it stays: no remembered choice, no autotuner cache entry, the table as tuned
    tuner = cls._wrapping.tuner
    assert cls._untuned_choice == {} and not set(fakes) & set(tuner.cache)
    state = (dict(cls._tuning_table), dict(tuner.cache))
    keys = [k for kw in report.kernels for k in kw.keys]
    assert launch_priming.prime_kernel(kernel, keys) == len(keys)
    assert (dict(cls._tuning_table), dict(tuner.cache)) == state and cls._untuned_choice == {}
    # a real new tuning key still decides (once) and takes the tuned config, as unprimed
    x = torch.randn(100_000)
    kernel(x=x, out=torch.empty_like(x), scale=2.0)
    new = (100_000, "torch.float32", "torch.float32")
    assert calls[-1] == (new, True)
    assert cls._untuned_choice == {new: cls._tuning_table[(1 << 20, "torch.float32", "torch.float32")]}


def test_a_policy_that_refuses_new_tuning_keys_primes_no_new_key(compile_only_target, monkeypatch):
    from zerojit.autotune import TuningError, TuningPolicy

    decided = []
    original = TritonJitKernel._choose_untuned
    monkeypatch.setattr(TritonJitKernel, "_choose_untuned",
                        lambda self, *args, **kwargs: decided.append(args[0]) or original(self, *args, **kwargs))
    kernel = _tuned("TunedStrict", tuning=TuningPolicy("error"))
    report = _warm(kernel, sizes=SIZES)
    assert decided == []  # a new tuning key raises TuningError there: no path to prime
    cls = type(kernel)
    keys = [k for kw in report.kernels for k in kw.keys]
    cache = dict(cls._wrapping.tuner.cache)  # (the autotuner is TunedScale's, shared by the test classes)
    assert launch_priming.prime_kernel(kernel, keys) == len(keys)
    assert cls._untuned_choice == {} and dict(cls._wrapping.tuner.cache) == cache
    x = torch.randn(4096)
    kernel(x=x, out=torch.empty_like(x), scale=2.0)  # a tuned key launches
    with pytest.raises(TuningError, match="never tuned"):  # a new one is refused, as unprimed
        kernel(x=x[:100], out=torch.empty_like(x[:100]), scale=2.0)


def test_the_switch_turns_priming_off(compile_only_target, monkeypatch):
    kernel = ScaleAdd()
    _warm(kernel, periods=(64,))
    monkeypatch.setenv(launch_priming.PRIME_ENV, "off")
    assert launch_priming.prime_kernel(kernel, [kernel.dispatch(period=64)]) == 0
    monkeypatch.setenv(launch_priming.PRIME_ENV, "1")
    assert launch_priming.prime_kernel(kernel, [kernel.dispatch(period=64)]) == 1


@pytest.mark.gpu
def test_on_a_gpu_primed_first_launches_take_the_steady_path_and_compute_right(monkeypatch):
    """Real launches after a GPU warm-up: the fast path's launcher calls are resolved at warm-up,
    and each kernel's first launch takes the inline path and writes what torch computes."""
    fast, tuned = _fast_copy("FastCopyGpu"), _tuned("TunedGpu")
    registry = JitWarmupRegistry()
    with registry.activate():
        fast.register_warmup()
        tuned.register_warmup(sizes=SIZES)
    report = registry.warmup(progress=False)
    assert not report.failures and all(v.loaded for v in report.variants)
    entries = [e for table in type(fast)._launch_state.fast.current[1].values() for e in table.values()]
    assert len(entries) == 2 and all(e.direct is not None for e in entries)
    slow = _Spy(monkeypatch, TritonJitKernel, "_zerojit_launch")
    x = torch.randn(4096, device="cuda")
    copied = fast(x=x[:48], out=torch.empty(48, device="cuda"), n=48)
    scaled = tuned(x=x, out=torch.empty_like(x), scale=2.0)
    torch.cuda.synchronize()
    assert slow.calls == 0
    assert torch.equal(copied, x[:48]) and torch.equal(scaled, x * 2.0)

