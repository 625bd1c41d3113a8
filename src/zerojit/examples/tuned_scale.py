"""A wrapped kernel: ``@triton.heuristics`` over ``@triton.autotune`` over ``@triton.jit``.

``out[i] = x[i] * scale`` (or a copy when ``scale`` is None) over float32 vectors, the layout
FLA uses: a heuristic turns ``scale is None`` into a constexpr, the autotuner picks ``BLOCK`` and
``num_warps`` per row length ``n`` and prunes blocks wider than the row. The zerojit class sets
``kernel`` to the decorated object (docs/migrating-a-kernel.md, "Wrapped kernels"): warming a key
compiles every config that survives pruning; the choice comes from the tuning table (benchmarked
on a GPU warm-up at the tuning keys ``tuning_inputs`` declares, or read from the tuning file) or,
for a tuning key never tuned, from the default policy (no ``tuning`` line: ``TuningPolicy()``,
the nearest tuned key's config, else the first config that survives pruning for the launch and
compiled at warm-up).

This module is deliberately written without ``from __future__ import annotations``: its
``torch.Tensor | None`` annotation is evaluated when the module is imported, as in real libraries
(compile workers import it too).
"""

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from zerojit.kernel import LaunchSpec, TritonJitKernel, kernel_launcher
from zerojit.specialization import WarmupTensor

__all__ = ["TunedScale", "tuned_scale_kernel", "scaled"]


def _prune_wide_blocks(configs, named_args, **kwargs):
    """No block wider than twice the row (at least the narrowest)."""
    return [c for c in configs if c.kwargs["BLOCK"] <= max(64, 2 * named_args["n"])]


@triton.heuristics({"HAS_SCALE": lambda args: args["scale"] is not None})
@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 256, 1024) for w in (2, 4)],
                 key=["n"], prune_configs_by={"early_config_prune": _prune_wide_blocks})
@triton.jit(do_not_specialize=["n"])
def tuned_scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr, HAS_SCALE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_SCALE:
        x = x * scale
    tl.store(out_ptr + offs, x, mask=mask)


class TunedScale(TritonJitKernel["TunedScale.CompileKey"]):
    """``out = x * scale`` over float32 vectors of ``n`` elements; name ``"tuned_scale"``.

    Call: ``TunedScale()(x=x, out=out, scale=2.0)`` (``scale=None``: a copy). Key space: a row
    length per tuning key (``sizes``: the row lengths the server sees; 4096 by default) times
    scale/no scale; each key compiles under every config that survives pruning at its size.
    """

    kernel = tuned_scale_kernel

    @dataclass(frozen=True)
    class CompileKey:
        n: int  # the row length the key is warmed (and pruned) at
        has_scale: bool

    def dispatch(self, *, n: int, has_scale: bool) -> "TunedScale.CompileKey":
        return self.CompileKey(n, has_scale)

    def get_warmup_keys(self, *, sizes=(4096,)) -> list:
        return [self.CompileKey(n, s) for n in sizes for s in (True, False)]

    def warmup_inputs(self, key) -> dict:
        return dict(x=WarmupTensor(torch.float32, (key.n,)), out=WarmupTensor(torch.float32, (key.n,)),
                    scale=2.0 if key.has_scale else None)

    def tuning_inputs(self, key) -> list:
        """On a GPU warm-up: real tensors at the key's size (the benchmark runs the kernel)."""
        x = torch.randn(key.n, device="cuda")
        return [dict(x=x, out=torch.empty_like(x), scale=2.0 if key.has_scale else None)]

    @kernel_launcher
    def __call__(self, *, x: torch.Tensor, out: torch.Tensor, scale: float | None) -> LaunchSpec:
        n = x.numel()
        return LaunchSpec(lambda meta: (triton.cdiv(n, meta["BLOCK"]),), dict(n=n), out)


def scaled(x: torch.Tensor, scale: float | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """``x * scale`` (a copy when ``scale`` is None) through :class:`TunedScale`; x: float32, 1-D;
    ``out``: where to write (a new tensor like ``x`` when None). Returns ``out``."""
    return TunedScale()(x=x, out=torch.empty_like(x) if out is None else out, scale=scale)
