"""The kernel contract: class-creation checks, input -> parameter mapping, compile(key) = launch.

Where a test only needs the key Triton *would* compile, it installs Triton's own
``knobs.runtime.jit_cache_hook`` returning True: Triton computes the key, signature and constants,
calls the hook, and skips the compile (no ``ptxas`` cost). The reference keys come from Triton's
binder called with the kernel's real parameter names.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs
from triton.runtime.jit import compute_cache_key

from zerojit.kernel import (
    CompiledVariant,
    JitKernel,
    KernelDefinitionError,
    KernelInputError,
    LaunchSpec,
    TritonJitKernel,
    kernel_launcher,
    set_launch_observer,
)
from zerojit.specialization import SpecClass, WarmupTensor, bind, param_classes


@pytest.fixture(scope="module", autouse=True)
def co(module_compile_only_target):
    return module_compile_only_target


@pytest.fixture
def captured(monkeypatch):
    """Triton computes each key it would compile, hands it to us, and compiles nothing."""
    seen = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        seen.append(dict(compile, fn=fn.name))
        return True

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", hook)
    return seen


def triton_key(jit_fn, **params):
    """Triton's in-process cache key for a launch with these (parameter-named) arguments."""
    _, spec, opts = bind(jit_fn, **params)
    return compute_cache_key({}, spec, opts)


@triton.jit(do_not_specialize=["n"])
def _axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class Axpy(TritonJitKernel["Axpy.CompileKey"]):
    kernel = _axpy_kernel

    @dataclass(frozen=True)
    class CompileKey:
        x_aligned: bool
        y_dtype: str = "float32"  # "float16" is a deliberately wrong warm-up (the launcher refuses it)
        numel: int = 64  # 0 makes the warm-up launch nothing

    def dispatch(self, *, x_aligned: bool) -> "Axpy.CompileKey":
        return self.CompileKey(x_aligned)

    def get_warmup_keys(self) -> list:
        return [self.CompileKey(True), self.CompileKey(False)]

    def warmup_inputs(self, key) -> dict:
        return dict(
            x=WarmupTensor(torch.float32, (key.numel,), aligned=key.x_aligned),
            y=WarmupTensor(getattr(torch, key.y_dtype), (key.numel,)),
            out=WarmupTensor(torch.float32, (key.numel,)),
            alpha=0.5,
        )

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, y, out, alpha: float, block: int = 64) -> LaunchSpec:
        if y.dtype != x.dtype:
            raise KernelInputError(self.name, "y", f"must have x's dtype {x.dtype}, got {y.dtype}")
        n = x.numel()
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(n=n, BLOCK=block), returns=out)


axpy = Axpy()


def test_inputs_map_to_ptr_parameters_once_at_class_creation():
    assert Axpy._arg_table == (("x", "x_ptr", None), ("y", "y_ptr", None), ("out", "out_ptr", None),
                               ("alpha", "alpha", None))
    assert Axpy.name == "axpy"  # "_axpy_kernel" -> "axpy"


def test_launch_binds_inputs_to_their_parameters(captured):
    x = torch.zeros(101)[1:]  # misaligned: the class of x_ptr shows where x went
    y, out = torch.zeros(100), torch.zeros(100)
    assert axpy(x=x, y=y, out=out, alpha=2.0, block=32) is out
    assert len(captured) == 1
    want = triton_key(_axpy_kernel, x_ptr=x, y_ptr=y, out_ptr=out, n=100, alpha=2.0, BLOCK=32)
    assert captured[0]["key"] == want
    assert captured[0]["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                        "alpha": "fp32", "BLOCK": "constexpr"}
    assert "('*fp32', '')" in want and "('*fp32', 'D')" in want


def test_a_parameter_with_no_value_is_refused_naming_it(co):
    class NoN(Axpy):
        @kernel_launcher
        def __call__(self, *, x, y, out, alpha: float) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=32), returns=out)

    t = torch.zeros(4)
    with pytest.raises(KernelDefinitionError, match=r"parameter 'n' of _axpy_kernel gets no value: no input maps to "
                                                     r"it, LaunchSpec.kwargs \['BLOCK'\]"):
        NoN()(x=t, y=t, out=t, alpha=1.0)


def test_a_kwarg_of_a_mapped_inputs_parameter_replaces_its_value(captured):
    class Replaced(Axpy):
        @kernel_launcher
        def __call__(self, *, x, y, out, alpha: float) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(n=4, BLOCK=32, out_ptr=torch.zeros(101)[1:]), returns=out)

    t = torch.zeros(64)
    Replaced()(x=t, y=t, out=t, alpha=1.0)
    assert "('*fp32', '')" in captured[-1]["key"]  # the kwarg's misaligned tensor went, not the aligned input


def test_unmapped_input_fails_at_class_creation():
    with pytest.raises(KernelDefinitionError, match=r"input 'scale' maps to no parameter of kernel _axpy_kernel"):
        class Bad(TritonJitKernel):
            kernel = _axpy_kernel

            @kernel_launcher
            def __call__(self, *, x, y, out, alpha, scale) -> LaunchSpec:
                return LaunchSpec(grid=(1,))


def test_host_only_input_is_not_passed_to_the_kernel(captured):
    class Scaled(TritonJitKernel):
        kernel = _axpy_kernel

        @kernel_launcher(host_only=("scale",))
        def __call__(self, *, x, y, out, scale: float) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(alpha=2.0 * scale, n=x.numel(), BLOCK=16))

    assert [name for name, _, _ in Scaled._arg_table] == ["x", "y", "out"]
    t = torch.zeros(16)
    Scaled()(x=t, y=t, out=t, scale=0.25)  # Triton rejects unknown kwargs: scale must not reach it
    assert captured[0]["key"] == triton_key(_axpy_kernel, x_ptr=t, y_ptr=t, out_ptr=t, n=16, alpha=0.5, BLOCK=16)


def test_other_definition_errors():
    with pytest.raises(KernelDefinitionError, match=r"host_only names unknown inputs \['nope'\]"):
        class A(TritonJitKernel):
            kernel = _axpy_kernel

            @kernel_launcher(host_only=("nope",))
            def __call__(self, *, x, y, out, alpha) -> LaunchSpec: ...

    with pytest.raises(KernelDefinitionError, match="keyword-only"):
        class B(TritonJitKernel):
            kernel = _axpy_kernel

            @kernel_launcher
            def __call__(self, x, y, out, alpha) -> LaunchSpec: ...

    with pytest.raises(KernelDefinitionError, match="kernel_launcher"):
        class C(TritonJitKernel):
            kernel = _axpy_kernel

            def __call__(self, *, x, y, out, alpha) -> LaunchSpec: ...

    with pytest.raises(KernelDefinitionError, match="'kernel'"):
        class D(TritonJitKernel):
            @kernel_launcher
            def __call__(self, *, x) -> LaunchSpec: ...


def test_compile_key_must_be_a_frozen_dataclass():
    with pytest.raises(KernelDefinitionError, match="CompileKey must be a frozen dataclass"):
        class NotFrozen(JitKernel):
            @dataclass
            class CompileKey:
                a: int

    with pytest.raises(KernelDefinitionError, match="CompileKey must be a frozen dataclass"):
        class Plain(JitKernel):
            class CompileKey:
                a: int = 0

    with pytest.raises(KernelDefinitionError, match="Triton.CompileKey must be a frozen dataclass"):
        class Triton(TritonJitKernel):
            kernel = _axpy_kernel

            @dataclass(eq=True)
            class CompileKey:
                a: int

            @kernel_launcher
            def __call__(self, *, x, y, out, alpha) -> LaunchSpec: ...

    class Good(JitKernel):
        @dataclass(frozen=True)
        class CompileKey:
            a: int

    assert Good.name == "Good"


def test_unknown_launchspec_kwarg_names_the_kwarg(captured):
    class Typo(TritonJitKernel):
        kernel = _axpy_kernel

        @kernel_launcher
        def __call__(self, *, x, y, out, alpha) -> LaunchSpec:
            return LaunchSpec(grid=(1,), kwargs=dict(n=1, BLOCKSIZE=16))

    t = torch.zeros(4)
    with pytest.raises(KernelDefinitionError, match="'BLOCKSIZE' maps to no parameter"):
        Typo()(x=t, y=t, out=t, alpha=1.0)
    assert captured == []


def test_compile_goes_through_call_and_its_input_checks(captured):
    with pytest.raises(KernelInputError, match=r"axpy: argument 'y': must have x's dtype") as info:
        axpy.compile(Axpy.CompileKey(True, y_dtype="float16"))
    assert info.value.argument == "y"
    assert captured == []  # refused before Triton saw anything


def test_compile_of_misaligned_key_compiles_the_misaligned_class(captured):
    variant = axpy.compile(Axpy.CompileKey(False))
    assert len(captured) == 1 and captured[0]["signature"]["x_ptr"] == "*fp32"
    x = torch.zeros(65)[1:]
    t = torch.zeros(64)
    want = triton_key(_axpy_kernel, x_ptr=x, y_ptr=t, out_ptr=t, n=64, alpha=0.5, BLOCK=64)
    assert captured[0]["key"] == want
    assert variant.specialization[0] == SpecClass("*fp32", "")
    assert variant.param_names == ("x_ptr", "y_ptr", "out_ptr", "n", "alpha", "BLOCK")


def test_warmup_inputs_that_launch_nothing(captured, co):
    with pytest.raises(KernelDefinitionError, match=r"made __call__ launch 0 times"):
        axpy.compile(Axpy.CompileKey(True, numel=0))  # grid (0,): a launch that launches nothing
    assert captured == []
    t = torch.zeros(0)
    assert axpy(x=t, y=t, out=t, alpha=1.0) is t  # and at run time it is a no-op too
    assert captured == []


def test_compile_then_dry_launch_hits_the_same_entry(co):
    """One real compile: compile(key) fills exactly the entry a runtime launch in its class uses."""
    cache = _axpy_kernel.device_caches[co.device][0]
    cache.clear()
    variant = axpy.compile(Axpy.CompileKey(True))
    assert isinstance(variant, CompiledVariant) and variant.kernel == "axpy" and not variant.loaded
    assert list(cache) == [variant.triton_key] and cache[variant.triton_key] is variant.compiled
    x, y, out = torch.randn(1000), torch.randn(1000), torch.full((1000,), 7.0)
    assert variant.triton_key == triton_key(_axpy_kernel, x_ptr=x, y_ptr=y, out_ptr=out, n=1000, alpha=3.0,
                                            BLOCK=64)
    _, spec, _ = bind(_axpy_kernel, x, y, out, 1000, 3.0, 64)
    assert dict(zip(variant.param_names, variant.specialization)) == param_classes(_axpy_kernel, spec)
    seen = []
    previous = set_launch_observer(lambda kernel, compiled: seen.append((kernel, compiled)))
    try:
        axpy(x=x, y=y, out=out, alpha=3.0)  # a different n and alpha: same classes
    finally:
        set_launch_observer(previous)
    assert len(cache) == 1
    assert seen == [(axpy, variant.compiled)]
    assert bool((out == 7.0).all())  # a dry launch executes nothing: out is left as it was


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the launch has a driver")
def test_a_launch_with_no_gpu_and_no_compile_only_target_says_what_to_do():
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from zerojit.kernel import NoDeviceError\n"
        "from zerojit.examples.scale_add import scale_add\n"
        "x = torch.zeros(64)\n"
        "try:\n"
        "    scale_add(x=x, bias=torch.zeros(16), out=torch.zeros(64), period=16, scale=2.0)\n"
        "except NoDeviceError as e:\n"
        "    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("scale_add: cannot launch: no GPU is visible and no compile-only target is active")
    assert 'compile_only("cuda:90")' in out.stdout and "TRITON_INTERPRET=1" in out.stdout


def test_a_kernel_registered_with_no_key_is_flagged_and_its_launch_explained(co):
    """An empty key space is no registration that was never reached: the report flags the kernel,
    and the monitor's error says its get_warmup_keys returned no key."""
    from zerojit import JitMonitor, JitWarmupRegistry, RuntimeJitError

    class Empty(Axpy):
        kernel = triton.jit(_axpy_kernel.fn, do_not_specialize=["n"])  # a function of its own, as a real kernel has

        def get_warmup_keys(self) -> list:
            return []

    registry = JitWarmupRegistry()
    with registry.activate():
        Empty().register_warmup()
    report = registry.warmup(progress=False)
    assert report.ok and report.num_keys == 0
    assert "registered, but get_warmup_keys gave no key" in report.summary()
    t = torch.zeros(64)
    with JitMonitor("error", report=report):
        with pytest.raises(RuntimeJitError, match="it was registered, but its get_warmup_keys returned no key"):
            Empty()(x=t, y=t, out=t, alpha=1.0, block=16)
