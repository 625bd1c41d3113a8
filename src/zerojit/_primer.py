"""The one-element kernel :func:`zerojit.loading.prime_launch_path` launches through zerojit's
own launch path at the end of a GPU warm-up (and that bundles carry, so that such a warm-up
compiles nothing)."""

from dataclasses import dataclass

import triton
import triton.language as tl

import torch

from .kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from .specialization import WarmupTensor


@triton.jit
def _primer_kernel(buf_ptr):
    tl.store(buf_ptr, 0)


class Primer(TritonJitKernel["Primer.CompileKey"]):
    """Writes 0 to ``buf[0]`` (an int32 CUDA tensor); exists only to be launched once."""

    kernel = _primer_kernel

    @dataclass(frozen=True)
    class CompileKey:
        pass

    def warmup_inputs(self, key: "Primer.CompileKey") -> dict:
        """An aligned int32 buffer, like the one :func:`~zerojit.loading.prime_launch_path` passes
        (so a warm-up compiles and loads the primer with the other kernels, in parallel)."""
        return dict(buf=WarmupTensor(torch.int32, (1,)))

    @kernel_launcher
    def __call__(self, *, buf) -> LaunchSpec:
        return LaunchSpec(grid=(1,))


primer = Primer()
