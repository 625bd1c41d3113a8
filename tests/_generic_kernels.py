"""Kernels of tests/test_generic.py (generic variants), at module level in a real file: compile
workers import a kernel's module by name (see tests/_kernels.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.autotune import TuningPolicy
from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor, scalar_rep


@triton.jit
def _add_n_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask) + n, mask=mask)


class AddN(TritonJitKernel["AddN.CompileKey"]):
    """``out[i] = x[i * stride] + n`` (float32); one key per class of ``n`` and ``stride`` (a
    representative value each: ``scalar_rep``)."""

    kernel = _add_n_kernel

    @dataclass(frozen=True)
    class CompileKey:
        n: int
        stride: int = 1

    def dispatch(self, *, n: int, stride: int = 1) -> "AddN.CompileKey":
        return self.CompileKey(scalar_rep(n), scalar_rep(stride))

    def get_warmup_keys(self, *, ns=(16,), strides=(1,)) -> list:
        return [self.dispatch(n=n, stride=s) for n in ns for s in strides]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)), n=key.n,
                    stride=key.stride)

    @kernel_launcher
    def __call__(self, *, x, out, n: int, stride: int = 1) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(out.numel(), 64),), kwargs=dict(BLOCK=64), returns=out)


class AddNKeepStride(AddN):
    """:class:`AddN` whose generic variants keep ``stride``'s equal-to-one class."""

    kernel = _add_n_kernel
    name = "add_n_keep_stride"
    generic_keep = ("stride",)


@triton.jit(do_not_specialize=["x_ptr", "n"])
def _fill_kernel(x_ptr, n):
    tl.store(x_ptr + tl.program_id(0), n)


class Fill(TritonJitKernel["Fill.CompileKey"]):
    """``x[i] = n`` (int32): every argument unspecialized already, so its warmed variant is its
    generic one."""

    kernel = _fill_kernel

    @dataclass(frozen=True)
    class CompileKey:
        pass

    def dispatch(self, *, n: int = 0) -> "Fill.CompileKey":
        return self.CompileKey()

    def get_warmup_keys(self) -> list:
        return [self.CompileKey()]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.int32, (4,)), n=16)

    @kernel_launcher
    def __call__(self, *, x, n: int) -> LaunchSpec:
        return LaunchSpec(grid=(x.numel(),), returns=x)


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, HAS_SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_SCALE:
        x = x * scale
    tl.store(out_ptr + offs, x, mask=mask)


CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)]


class Scale(TritonJitKernel["Scale.CompileKey"]):
    """``out = x * scale`` (or a copy when scale is None), autotuned over two configs under a
    heuristic; one key per class of ``n``."""

    kernel = triton.heuristics({"HAS_SCALE": lambda args: args["scale"] is not None})(
        triton.autotune(CONFIGS, key=["n"])(_scale_kernel))
    tuning = TuningPolicy("default", config={"BLOCK": 32, "num_warps": 2})

    @dataclass(frozen=True)
    class CompileKey:
        n: int

    def dispatch(self, *, n: int) -> "Scale.CompileKey":
        return self.CompileKey(scalar_rep(n))

    def get_warmup_keys(self, *, ns=(16,)) -> list:
        return [self.dispatch(n=n) for n in ns]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32), out=WarmupTensor(torch.float32), n=key.n, scale=2.0)

    @kernel_launcher
    def __call__(self, *, x, out, n, scale) -> LaunchSpec:
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), {}, out)


@triton.jit
def _halve_kernel(x_ptr, n, EVEN: tl.constexpr):
    offs = tl.arange(0, 16)
    mask = offs < n
    if EVEN:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) // 2)
    else:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) // 2, mask=mask)


class Halve(TritonJitKernel["Halve.CompileKey"]):
    """``x //= 2`` on the first 16 of ``n`` int32 elements, under a heuristic (``EVEN``)."""

    kernel = triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})(_halve_kernel)

    @dataclass(frozen=True)
    class CompileKey:
        n: int

    def dispatch(self, *, n: int) -> "Halve.CompileKey":
        return self.CompileKey(n)  # one key per value: keys of one group

    def get_warmup_keys(self, *, ns=(16,)) -> list:
        return [self.dispatch(n=n) for n in ns]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.int32, (16,)), n=key.n)

    @kernel_launcher
    def __call__(self, *, x, n) -> LaunchSpec:
        return LaunchSpec(grid=(1,), returns=x)


@triton.jit
def _first_n_kernel(x_ptr, n):
    tl.store(x_ptr + tl.arange(0, n), 0)  # compiles only where n is a constant: Triton's equal-to-one class


class FirstN(TritonJitKernel["FirstN.CompileKey"]):
    """``x[:n] = 0`` for ``n = 1`` only: its generic variant (``n`` a plain i32) cannot compile."""

    kernel = _first_n_kernel

    @dataclass(frozen=True)
    class CompileKey:
        pass

    def dispatch(self) -> "FirstN.CompileKey":
        return self.CompileKey()

    def get_warmup_keys(self) -> list:
        return [self.CompileKey()]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.int32, (4,)))

    @kernel_launcher
    def __call__(self, *, x) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(n=1), returns=x)
