"""A minimal self-describing kernel: ``out[i] = x[i] * scale + bias[i % period]``.

It shows the whole contract on one page: the Triton function, its compile key, the key space
declared with :func:`~zerojit.keyspace.trace_dispatch`, warm-up inputs in the right
specialization classes, and the declarative launcher.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.kernel import KernelInputError, LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor, scalar_rep


@triton.jit(do_not_specialize=["n"])
def _scale_add_kernel(x_ptr, bias_ptr, out_ptr, n, period, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % period, mask=mask)
    tl.store(out_ptr + offs, x * scale + b, mask=mask)


class ScaleAdd(TritonJitKernel["ScaleAdd.CompileKey"]):
    """``out = x * scale + bias[i % period]`` over float32 vectors.

    ``n`` (the live length) is ``do_not_specialize``: it varies per call. ``period`` is fixed by
    the "model" and specialized (Triton's int specialization: 1, divisible by 16, other), so it is
    part of the key. Config-free: ``get_warmup_keys(periods=...)`` takes the periods registered.
    """

    kernel = _scale_add_kernel

    @dataclass(frozen=True)
    class CompileKey:
        period_class: int  # scalar_rep of the period: 1, 16 or 17
        block: int
        x_aligned: bool

    def dispatch(self, *, period: int, block: int = 256, x_aligned: bool = True) -> "ScaleAdd.CompileKey":
        return self.CompileKey(period_class=scalar_rep(period), block=block, x_aligned=x_aligned)

    def get_warmup_keys(self, *, periods=(16,), aligned=(True,)) -> list["ScaleAdd.CompileKey"]:
        return trace_dispatch(self.dispatch)(period=choices(*periods), x_aligned=choices(*aligned))

    def warmup_inputs(self, key: "ScaleAdd.CompileKey") -> dict:
        return dict(
            x=WarmupTensor(torch.float32, (64,), aligned=key.x_aligned),
            bias=WarmupTensor(torch.float32, (64,)),
            out=WarmupTensor(torch.float32, (64,)),
            period=key.period_class,
            scale=1.5,
            block=key.block,
        )

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, bias, out, period: int, scale: float, block: int = 256) -> LaunchSpec:
        for name, t in (("x", x), ("bias", bias), ("out", out)):
            if t.dtype != torch.float32:
                raise KernelInputError(self.name, name, f"must be float32, got {t.dtype}")
        n = x.numel()
        return LaunchSpec(grid=(triton.cdiv(n, block),), kwargs=dict(n=n, BLOCK=block), returns=out)


scale_add = ScaleAdd()
