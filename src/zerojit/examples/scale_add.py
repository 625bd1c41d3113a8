"""A minimal self-describing kernel: ``out[i] = x[i] * scale + bias[i % period]``.

It shows the whole contract on one page (docs/migrating-a-kernel.md walks through it): the
Triton function, its compile key, the key space declared with
:func:`~zerojit.keyspace.trace_dispatch`, warm-up inputs in the right specialization classes, and
the launch signature stated once, in ``__call__``, with its input checks beside it
(:mod:`zerojit.inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.inputs import CheckedKernel, IntArg, Let, Require, TensorArg, checked_launcher
from zerojit.kernel import LaunchSpec
from zerojit.keyspace import choices, trace_dispatch
from zerojit.specialization import WarmupTensor, scalar_rep

__all__ = ["ScaleAdd", "scale_add"]


@triton.jit(do_not_specialize=["n"])
def _scale_add_kernel(x_ptr, bias_ptr, out_ptr, n, period, scale, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % period, mask=mask)
    tl.store(out_ptr + offs, x * scale + b, mask=mask)


class ScaleAdd(CheckedKernel["ScaleAdd.CompileKey"]):
    """``out = x * scale + bias[i % period]`` over float32 vectors; its name is ``"scale_add"``.

    Call (keyword-only)::

        out = scale_add(x=x, bias=bias, out=out, period=16, scale=0.5)

    Inputs:
        x, out: ``[n]`` float32, contiguous, on one device; ``n`` (the live length) is
            ``do_not_specialize``: it varies per call.
        bias: float32, contiguous, on the same device; the kernel reads ``bias[i % period]`` (its
            length is the caller's contract: the host never reads values).
        period: an int >= 1 fixed by the "model", specialized the way Triton specializes ints
            (1, divisible by 16, other; and its width), so its class is part of the key.
        scale: a float (never specialized).
        block: elements per program, a power of two >= 16 (a launch-configuration choice).

    Returns:
        ``out``, written for ``i < n``.

    Config-free: ``get_warmup_keys(periods=..., aligned=...)`` takes the periods and the
    alignments of ``x`` registered, so ``register_warmup(periods=(16, 7))`` needs no config.

    Raises:
        KernelInputError: ``x``, ``bias`` or ``out`` not a contiguous 1-D float32 tensor on the
            device of ``x``; ``out`` not as long as ``x``; ``period`` not an int >= 1; ``block``
            not a power of two >= 16; ``scale`` not a float (Triton's fp32 argument: an int, a
            tensor or None would launch another signature, a compile at run time).
    """

    kernel = _scale_add_kernel

    @dataclass(frozen=True)
    class CompileKey:
        """period_class: ``scalar_rep(period)`` (1, 16 or 17 for an int32 period); block: BLOCK;
        x_aligned: ``x`` starts on a 16-byte boundary (Triton specializes pointers on it)."""

        period_class: int
        block: int
        x_aligned: bool

    def dispatch(self, *, period: int, block: int = 256, x_aligned: bool = True) -> "ScaleAdd.CompileKey":
        """The key of a launch: the period's specialization class, the block, x's alignment."""
        return self.CompileKey(period_class=scalar_rep(period), block=block, x_aligned=bool(x_aligned))

    def get_warmup_keys(self, *, periods=(16,), aligned=(True,)) -> list["ScaleAdd.CompileKey"]:
        """One key per (period class, alignment of x) the caller registers."""
        return trace_dispatch(self.dispatch)(period=choices(*periods), x_aligned=choices(*aligned))

    def warmup_inputs(self, key: "ScaleAdd.CompileKey") -> dict:
        """Launch inputs in ``key``'s classes (meta tensors, no memory)."""
        return dict(self.fact_inputs(key), x=WarmupTensor(torch.float32, (64,), aligned=key.x_aligned),
                    bias=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)),
                    period=key.period_class, scale=1.5)

    @checked_launcher(
        TensorArg("x", 1, torch.float32),
        TensorArg("bias", 1, torch.float32),
        TensorArg("out", 1, torch.float32, length="len(x)"),
        IntArg("period", low=1),
        Require("block", "is_int(block) and block >= 16 and block & (block - 1) == 0",
                "must be a power of two >= 16, got {block!r}"),
        Let("x_aligned", "is_aligned(x)"),
        # a Python float is Triton's fp32 argument; an int, a tensor or None is another signature
        Require("scale", "type(scale) is float", "must be a float, got {type(scale).__name__}"),
    )
    def __call__(self, key, constexprs, *, x, bias, out, period: int, scale: float, block: int = 256) -> LaunchSpec:
        """Launch over ``n = len(x)`` elements; returns ``out`` (see the class)."""
        n = x.shape[0]
        return LaunchSpec(grid=(triton.cdiv(n, key.block),), kwargs=dict(constexprs, n=n), returns=out)


#: The process's instance, the one serving code calls.
scale_add = ScaleAdd()
