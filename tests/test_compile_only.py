"""Compile-only targets: real cubins without a GPU, dry launches, and what cannot run.

Uses the example kernel :mod:`zerojit.examples.scale_add`. Checks rest on Triton's artefacts:
the CompiledKernel's ``asm`` (PTX text, cubin ELF header), Triton's in-process cache and its
``jit_post_compile_hook``.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":  # these run in the compile-only pytest session
    pytest.skip("needs a process without TRITON_INTERPRET=1", allow_module_level=True)

import re
import struct

import torch
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

from zerojit.compile_only import CompileOnlyDriver, CompileOnlyLaunchError, active_compile_only, compile_only, parse_target
from zerojit.examples.scale_add import ScaleAdd, _scale_add_kernel, scale_add
from zerojit.kernel import set_launch_observer
from zerojit.registry import JitWarmupRegistry
from zerojit.specialization import SpecClass, bind, param_classes
from zerojit.triton_compat import in_process_key

EM_CUDA = 190  # ELF e_machine of a CUDA cubin


@pytest.fixture(scope="module", autouse=True)
def co(module_compile_only_target):
    return module_compile_only_target


@pytest.fixture(scope="module")
def warmed(co):
    """Warm ScaleAdd for periods of class 16 and aligned x, counting Triton's compile hook."""
    cache = _scale_add_kernel.device_caches[co.device][0]
    cache.clear()
    hooks = []

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
        hooks.append(dict(key=key, fn=fn.jit_function, device=compile["device"], warmup=is_manual_warmup))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knobs.runtime, "jit_post_compile_hook", hook)
        reg = JitWarmupRegistry()
        with reg.activate():
            for _layer in range(4):
                scale_add.register_warmup(periods=(64,))
        report = reg.warmup(progress=False, target="cuda:90", generic=False)
        # snapshots taken right after warm-up, so that the tests do not depend on their order
        yield report, list(hooks), list(cache), cache


def cubin_arch(cubin: bytes) -> int:
    assert cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA
    flags = struct.unpack_from("<I", cubin, 48)[0]  # e_flags: the SM number, where the ABI puts it
    # CUDA's ELF ABI version (e_ident[8]) 8, written by newer ptxas (Triton 3.9's for sm_90, every
    # version's for sm_100), keeps it in bits 8-15; version 7 in bits 0-7
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def test_warmup_produces_real_sm90_cubins(warmed):
    report, _, _, _ = warmed
    assert report.ok and report.target == "cuda:90"
    [variant] = report.variants
    assert variant.key == ScaleAdd.CompileKey(period_class=16, block=256, x_aligned=True)
    asm = variant.compiled.asm
    assert isinstance(asm["cubin"], bytes) and len(asm["cubin"]) > 1000
    assert cubin_arch(asm["cubin"]) == 90
    assert re.search(r"^\.target sm_90a?$", asm["ptx"], re.M)
    assert ".entry _scale_add_kernel" in asm["ptx"]
    assert variant.compiled.metadata.target == GPUTarget("cuda", 90, 32)
    assert not variant.loaded  # nothing to load a module into


def test_in_process_cache_and_post_compile_hook(warmed, co):
    report, hooks, keys, cache = warmed
    [variant] = report.variants
    assert keys == [variant.triton_key] and cache[variant.triton_key] is variant.compiled
    assert [(h["key"], h["fn"], h["device"], h["warmup"]) for h in hooks] == [
        (variant.triton_key, _scale_add_kernel, co.device, True)
    ]


def test_dry_launch_of_a_warmed_specialization_compiles_nothing(warmed):
    report, _, _, cache = warmed
    [variant] = report.variants
    before = set(cache)
    seen = []
    previous = set_launch_observer(lambda k, compiled: seen.append(compiled))
    try:
        for n, period in ((1000, 64), (3, 16), (4097, 2**20)):  # other n, other multiples of 16
            x, bias, out = torch.randn(n), torch.randn(period), torch.full((n,), 5.0)
            assert scale_add(x=x, bias=bias, out=out, period=period, scale=0.25) is out
            assert bool((out == 5.0).all())  # executes nothing
    finally:
        set_launch_observer(previous)
    assert set(cache) == before
    assert seen == [variant.compiled] * 3


@pytest.mark.parametrize(
    "case, param, cls",
    [
        ("misaligned x", "x_ptr", SpecClass("*fp32", "")),
        ("period 1 instead of 16", "period", SpecClass("constexpr", 1)),
        ("i64-sized period", "period", SpecClass("i64", "D")),
    ],
)
def test_dry_launch_of_an_unwarmed_specialization_compiles(warmed, case, param, cls):
    _, _, _, cache = warmed
    x, period = torch.randn(64), 16
    if case == "misaligned x":
        x = torch.randn(65)[1:]
    elif case.startswith("period 1"):
        period = 1
    else:
        period = 2**40
    bias, out = torch.randn(16), torch.empty(64)
    _, spec, opts = bind(_scale_add_kernel, x, bias, out, 64, period, 1.5, BLOCK=256)
    assert param_classes(_scale_add_kernel, spec)[param] == cls  # Triton's binder: another class
    before = set(cache)
    scale_add(x=x, bias=bias, out=out, period=period, scale=1.5)
    new = set(cache) - before
    assert len(new) == 1 and len(cache) == len(before) + 1
    [key] = new
    assert key.startswith(str(spec))  # exactly the key of Triton's binder for this launch


def test_raw_launch_is_a_dry_launch(warmed):
    """A plain Triton launch under compile_only is a dry launch: Triton's binder and lookup, the
    warmed variant returned, nothing compiled or executed (the output keeps its values)."""
    _, _, _, cache = warmed
    x = torch.randn(64)
    out = torch.zeros(64)
    n_before = len(cache)
    _, spec, opts = bind(_scale_add_kernel, x, x, out, 64, 16, 1.5, BLOCK=256)
    compiled = _scale_add_kernel[(1,)](x, x, out, 64, 16, 1.5, BLOCK=256)  # a plain Triton launch, warmed class
    assert len(cache) == n_before
    assert compiled is cache[in_process_key(spec, opts)]
    assert torch.equal(out, torch.zeros(64))


def test_real_launch_is_refused(warmed):
    """What would execute under the compile-only driver (a CompiledKernel's launcher) is refused."""
    _, _, _, cache = warmed
    compiled = next(iter(cache.values()))
    with pytest.raises(CompileOnlyLaunchError, match=r"launched for real under compile_only\('cuda:90'\)"):
        compiled.run


def test_cuda80_target_gives_sm80(co):
    with compile_only("cuda:80") as drv80:
        assert active_compile_only() is drv80 and drv80.device == "compile-only:cuda:80"
        variant = scale_add.compile(ScaleAdd.CompileKey(period_class=16, block=256, x_aligned=True))
        assert driver.active.get_current_target() == GPUTarget("cuda", 80, 32)
    assert active_compile_only() is co  # the outer target is back
    asm = variant.compiled.asm
    assert re.search(r"^\.target sm_80$", asm["ptx"], re.M)
    assert cubin_arch(asm["cubin"]) == 80
    assert variant.triton_key in _scale_add_kernel.device_caches["compile-only:cuda:80"][0]


@pytest.mark.parametrize("target, want", [
    ("cuda:90", GPUTarget("cuda", 90, 32)),
    ("cuda:80", GPUTarget("cuda", 80, 32)),
    (" cuda:100 ", GPUTarget("cuda", 100, 32)),
    ("hip:gfx942", GPUTarget("hip", "gfx942", 64)),
    ("hip:gfx1100", GPUTarget("hip", "gfx1100", 32)),  # RDNA: wave32, as Triton's AMD backend reads gfx11
])
def test_parse_target(target, want):
    assert parse_target(target) == want


@pytest.mark.parametrize("bad", ["", "cuda", "cuda:", "sm_90", "cuda:9.0", "cuda:sm90", "hip:942", "rocm:gfx942",
                                 "CUDA:90"])
def test_parse_target_errors(bad, co):
    with pytest.raises(ValueError, match=r"is not of the form 'cuda:90' \(a compute capability\) or 'hip:gfx942'"):
        parse_target(bad)
    with pytest.raises(ValueError):
        with compile_only(bad):
            pass  # pragma: no cover
    assert active_compile_only() is co  # a bad target leaves the driver alone


@pytest.mark.parametrize("arch", ["gfx123", "gfx9999"])
def test_unknown_hip_arch_is_refused_up_front_in_one_line(arch, capfd):
    # gfx123 matches the form but no AMD backend knows it: refused here, with the compiler's own
    # reason and no MLIR dump, instead of every key of a warm-up failing later
    with pytest.raises(ValueError) as e:
        parse_target(f"hip:{arch}")
    assert str(e.value).startswith(f"compile-only target 'hip:{arch}': Triton ")
    assert f"cannot compile for {arch} (unsupported target: '{arch}')" in str(e.value)
    err = capfd.readouterr().err
    assert "tt.func" not in err and "module attributes" not in err


def test_driver_is_process_wide_and_restored(co):
    assert isinstance(driver._active, CompileOnlyDriver) and driver.active.get_current_device() == co.device
    with compile_only("hip:gfx942") as hip:
        assert driver.active is hip and hip.get_current_target() == GPUTarget("hip", "gfx942", 64)
        with compile_only("cuda:80") as inner:
            assert driver.active is inner
        assert driver.active is hip
    assert driver.active is co
