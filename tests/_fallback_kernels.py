"""Kernels for tests/test_fallback.py, at module level in a real file: the fallback's background
compile worker imports them by ``module:qualname`` (``tests/`` is on ``sys.path``, which workers
inherit, as for tests/_kernels.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor

__all__ = ["AddN", "add_n_kernel", "div_n_kernel"]


@triton.jit
def add_n_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out[i] = x[i] + n`` for ``i < n``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + n, mask=mask)


@triton.jit
def div_n_kernel(x_ptr, n):
    """``x[pid] = 100 // (n - 1)``: with ``n`` unspecialized a division at run time; Triton
    specializes ``n == 1`` into the constexpr 1, whose compile divides by zero and fails."""
    tl.store(x_ptr + tl.program_id(0), 100 // (n - 1))


class AddN(TritonJitKernel["AddN.CompileKey"]):
    """``add_n_kernel`` through zerojit's launch path (one key: float32, ``n`` = 16, BLOCK 64)."""

    kernel = add_n_kernel

    @dataclass(frozen=True)
    class CompileKey:
        pass

    def dispatch(self) -> "AddN.CompileKey":
        return self.CompileKey()

    def get_warmup_keys(self) -> list:
        return [self.CompileKey()]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)), n=16)

    @kernel_launcher
    def __call__(self, *, x, out, n: int) -> LaunchSpec:
        return LaunchSpec(grid=(1,), kwargs=dict(BLOCK=64), returns=out)
