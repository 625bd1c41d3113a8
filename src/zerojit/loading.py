"""Priming the launch path at the end of a GPU warm-up, so the first request's launch costs what
later ones do (loading each compiled kernel is :func:`zerojit.triton_compat.load_compiled`)."""

from __future__ import annotations

from ._primer import _primer_kernel, primer
from .context import allow_compiles

__all__ = ["prime_launch_path", "prime_raw_launch_path", "primed"]

_primed: set[int] = set()
_raw_primed: set[int] = set()


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


def prime_raw_launch_path() -> None:
    """Launch the primer once more as a raw ``kernel[grid](...)``, once per process and device.

    A raw launch (an unmodified program's, warmed from a manifest) runs code zerojit's own launch
    path skips: Triton's ``JITFunction.run`` with a CUDA tensor (its binder, the stream lookup,
    the launch metadata) and the launcher's Python entry. Their first run in a process costs more
    than later ones (first-use costs: imports, lookups, caches); a manifest warm-up pays them here
    instead of the program's first request. Call after :func:`prime_launch_path` (which compiled
    and loaded the primer; the raw launch is a hit of the same variant).
    """
    import torch

    device = torch.cuda.current_device()
    if device in _raw_primed:
        return
    buf = torch.empty(1, dtype=torch.int32, device=f"cuda:{device}")
    with allow_compiles():
        _primer_kernel[(1,)](buf)
    torch.cuda.synchronize(device)
    _raw_primed.add(device)
