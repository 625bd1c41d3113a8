"""Priming the launch path at the end of a GPU warm-up, so the first request's launch costs what
later ones do (loading each compiled kernel is :func:`zerojit.triton_compat.load_compiled`)."""

from __future__ import annotations

from ._primer import primer
from .context import allow_compiles

__all__ = ["prime_launch_path", "primed"]

_primed: set[int] = set()


def primed(device: int) -> bool:
    """True once :func:`prime_launch_path` ran on CUDA device ``device`` in this process."""
    return device in _primed


def prime_launch_path() -> None:
    """Launch one tiny kernel for real through zerojit's launch path, once per process and device.

    The first launch of *any* kernel in a process pays one-time costs that no per-kernel load
    removes (the launch path's first run, the driver's first launch on the context): about
    0.1 ms more than a steady launch on an H200. Warm-up pays them here instead.
    """
    import torch  # a GPU warm-up has it imported already; kept out of a compile worker's imports

    device = torch.cuda.current_device()
    if device in _primed:
        return
    buf = torch.empty(1, dtype=torch.int32, device=f"cuda:{device}")
    with allow_compiles():  # still warm-up: the primer's own compile is no runtime compile
        primer(buf=buf)
    torch.cuda.synchronize(device)
    _primed.add(device)
