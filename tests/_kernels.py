"""Small kernels that several test files use, defined once.

Triton reads a ``@triton.jit`` function's source from its file and compile workers import a
kernel's module by name, so these live at module level in a real file. Test files import it as
a sibling module (``from _kernels import LastBlock``): ``tests/`` has no ``__init__.py``, so
pytest's default ``prepend`` import mode puts the folder on ``sys.path``, which compile workers
inherit; a child process (``tests/test_pytest_plugin.py``) puts it on its ``PYTHONPATH``.

Other test files launch the same functions: a test that counts compiles empties the function's
in-process cache first (``fn.device_caches.clear()``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor

__all__ = ["LastBlock", "PagedScale", "SingleKey", "StoreN", "ramp_kernel"]


@triton.jit
def ramp_kernel(out_ptr, value, BLOCK: tl.constexpr):
    """``out[i] = i * value`` for ``i < BLOCK``; a BLOCK that is no power of two fails to compile."""
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty) * value)


class SingleKey(TritonJitKernel["SingleKey.CompileKey"]):
    """Base of a kernel with one compile key and no key fields: ``dispatch`` and the warm-up
    key list. A subclass sets ``kernel`` and defines ``warmup_inputs`` and its launcher."""

    @dataclass(frozen=True)
    class CompileKey:
        pass

    def dispatch(self) -> "SingleKey.CompileKey":
        return self.CompileKey()

    def get_warmup_keys(self) -> list:
        return [self.CompileKey()]


@triton.jit
def _store_n_kernel(x_ptr, n):
    tl.store(x_ptr + tl.program_id(0), n)


class StoreN(SingleKey):
    """``x[i] = n`` for each element of ``x`` (int32), one program each. Warmed with ``n = 16``
    (Triton's divisible-by-16 class): an ``n`` of another class (1, 17) compiles another variant."""

    kernel = _store_n_kernel

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.int32, (4,)), n=16)

    @kernel_launcher
    def __call__(self, *, x, n: int) -> LaunchSpec:
        return LaunchSpec(grid=(x.numel(),), returns=x)


@triton.jit(do_not_specialize=["n"])
def _paged_scale_kernel(x_ptr, out_ptr, n, block_size, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * block_size, mask=mask)


class PagedScale(TritonJitKernel["PagedScale.CompileKey"]):
    """``out = x * block_size`` (float32, ``n = x.numel()``), one key per ``BLOCK``.

    Its bug: ``warmup_inputs`` passes the literal 1 for ``block_size`` (Triton's equal-to-one
    class), so a run that passes 64 (divisible-by-16) needs a variant the warm-up never built.
    """

    kernel = _paged_scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        block: int = 64

    def dispatch(self, *, block: int = 64) -> "PagedScale.CompileKey":
        return self.CompileKey(block)

    def get_warmup_keys(self, *, block: int = 64) -> list:
        return [self.dispatch(block=block)]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (64,)), out=WarmupTensor(torch.float32, (64,)),
                    block_size=1, block=key.block)  # the bug: 1, not scalar_rep(block_size)

    @kernel_launcher(host_only=("block",))
    def __call__(self, *, x, out, block_size: int, block: int = 64) -> LaunchSpec:
        return LaunchSpec(grid=(triton.cdiv(x.numel(), block),), kwargs=dict(n=x.numel(), BLOCK=block), returns=out)


@triton.jit(do_not_specialize=["num_seqs"])
def _last_block_kernel(block_table_ptr, out_ptr, num_seqs, MAX_BLOCKS: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(out_ptr + pid, tl.load(block_table_ptr + pid * MAX_BLOCKS + MAX_BLOCKS - 1))


class LastBlock(TritonJitKernel["LastBlock.CompileKey"]):
    """``out[s] = block_table[s, -1]`` (int32, one program per sequence).

    Its bug: the block-table width, a per-request bound, is the constexpr ``MAX_BLOCKS``, so every
    new width compiles a new variant.
    """

    kernel = _last_block_kernel

    @dataclass(frozen=True)
    class CompileKey:
        max_blocks: int

    def dispatch(self, *, max_blocks: int) -> "LastBlock.CompileKey":
        return self.CompileKey(max_blocks)

    def get_warmup_keys(self, *, max_blocks: int) -> list:
        return [self.dispatch(max_blocks=max_blocks)]

    def warmup_inputs(self, key) -> dict:
        return dict(block_table=WarmupTensor(torch.int32, (4, key.max_blocks)), out=WarmupTensor(torch.int32, (4,)))

    @kernel_launcher
    def __call__(self, *, block_table, out) -> LaunchSpec:
        seqs, width = block_table.shape
        return LaunchSpec(grid=(seqs,), kwargs=dict(num_seqs=seqs, MAX_BLOCKS=width), returns=out)
