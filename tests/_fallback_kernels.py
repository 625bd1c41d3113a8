"""Kernels for tests/test_fallback.py, at module level in a real file: the fallback's background
compile worker imports them by ``module:qualname`` (``tests/`` is on ``sys.path``, which workers
inherit, as for tests/_kernels.py)."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["add_n_kernel", "div_n_kernel"]


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
