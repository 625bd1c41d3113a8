"""Loading a warm-up's compiled kernels on the GPU, and priming the launch path at the end of a
GPU warm-up, so the first request's launch costs what later ones do (loading one compiled kernel
is :func:`zerojit.triton_compat.load_compiled`)."""

from __future__ import annotations

import contextvars
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from . import triton_compat as _tc
from ._primer import _primer_kernel, primer
from .context import allow_compiles

__all__ = ["LOAD_THREADS_ENV", "load_all", "load_threads", "prime_launch_path", "prime_raw_launch_path", "primed"]

#: ``ZEROJIT_LOAD_THREADS=N``: how many threads load a warm start's restored kernels on a GPU
#: (:func:`load_all`); 1 loads them one after another in the warm-up's thread.
LOAD_THREADS_ENV = "ZEROJIT_LOAD_THREADS"
DEFAULT_LOAD_THREADS = 4


class LoadSettingError(ValueError):
    """``ZEROJIT_LOAD_THREADS`` holds something other than a whole number >= 1 (the message names
    it; invalid input: the CLI exits 2)."""


def load_threads() -> int:
    """The threads :func:`load_all` uses: ``ZEROJIT_LOAD_THREADS``, default
    :data:`DEFAULT_LOAD_THREADS`.

    Raises:
        LoadSettingError: the variable is set to something other than a whole number >= 1.
    """
    raw = os.environ.get(LOAD_THREADS_ENV, "").strip()
    if not raw:
        return DEFAULT_LOAD_THREADS
    threads = int(raw) if raw.isascii() and raw.isdigit() else 0  # (as ZEROJIT_WORKER_NICE: no "+2", "1_0")
    if threads < 1:
        raise LoadSettingError(f"{LOAD_THREADS_ENV}={os.environ[LOAD_THREADS_ENV]!r}: use a whole number >= 1")
    return threads


def _load_chunk(kernels: Sequence[Any], device: int | None = None) -> list[tuple[BaseException | None, float]]:
    if device is not None:  # a thread of load_all's: CUDA's current device is per thread
        import torch

        try:
            torch.cuda.set_device(device)
        except Exception as e:
            return [(e, 0.0)] * len(kernels)
    done: list[tuple[BaseException | None, float]] = []
    for compiled in kernels:
        start = time.perf_counter()
        try:
            _tc.load_compiled(compiled)
        except Exception as e:  # one kernel's refusal is that kernel's, the rest still load
            done.append((e, time.perf_counter() - start))
        else:
            done.append((None, time.perf_counter() - start))
    return done


def load_all(kernels: Sequence[Any], device: int) -> list[tuple[BaseException | None, float]]:
    """Load each Triton ``CompiledKernel`` of ``kernels`` on CUDA device ``device`` (module,
    function and launcher: :func:`zerojit.triton_compat.load_compiled`); returns, in order, the
    error each load raised (or None) and its seconds.

    The driver's loads (``cuModuleLoadData``, ``cuFuncLoad``) release the GIL, so up to
    :func:`load_threads` threads load contiguous shares of ``kernels`` at once, each thread on
    ``device`` (CUDA's current device is per thread) and in a copy of the caller's context.
    One thread (the caller's) loads them all where there is one kernel or one thread, or where
    Triton's module-load hooks are set (``knobs.runtime.kernel_load_start_hook`` /
    ``kernel_load_end_hook``): those run where a load runs, in the launching thread, as without
    zerojit.

    Raises:
        LoadSettingError: ``ZEROJIT_LOAD_THREADS`` is no whole number >= 1.
    """
    threads = min(load_threads(), len(kernels))
    if threads <= 1 or _tc.load_hooks_set():
        return _load_chunk(kernels)
    size = -(-len(kernels) // threads)
    shares = [kernels[k:k + size] for k in range(0, len(kernels), size)]
    with ThreadPoolExecutor(len(shares), thread_name_prefix="zerojit-load") as pool:
        futures = [pool.submit(contextvars.copy_context().run, _load_chunk, share, device) for share in shares]
        return [done for future in futures for done in future.result()]

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
