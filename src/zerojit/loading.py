"""Finishing a compiled kernel's load on the GPU, so its first launch costs what later ones do.

Triton's ``CompiledKernel._init_handles()`` loads the cubin (``cuModuleLoadData``), fetches the
function and builds the launcher. Under CUDA's lazy loading (``CUDA_MODULE_LOADING=LAZY``, the
default PyTorch sets), the function itself is still only loaded at its first launch; the driver's
``cuFuncLoad`` (CUDA 12.4+) finishes that now. Where the call is missing it is skipped.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

__all__ = ["load_compiled", "import_launch_path_modules", "prime_launch_path"]


@functools.lru_cache(maxsize=1)
def _cu_func_load():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuFuncLoad
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def load_compiled(compiled: Any) -> None:
    """Load ``compiled`` (a Triton ``CompiledKernel``): module, function and launcher.

    Raises:
        RuntimeError: the driver refused to load the function (its CUDA error code is given).
        triton.runtime.errors.OutOfResources: the kernel needs more shared memory or threads than
            the device has (Triton's own check).
    """
    compiled._init_handles()
    func_load = _cu_func_load()
    if func_load is not None and compiled.function:
        rc = func_load(ctypes.c_void_p(compiled.function))
        if rc != 0:
            raise RuntimeError(f"cuFuncLoad failed for kernel {compiled.name!r} with CUDA error {rc}")


# What Triton 3.6's native specializer (``native_specialize_impl``) imports on its first call with
# a tensor argument: the Python types it checks arguments against (names found in libtriton).
_SPECIALIZER_MODULES = (
    "triton.language", "triton.runtime.jit", "triton.tools.tensor_descriptor",
    "triton.experimental.gluon.language._layouts", "triton.experimental.gluon.language.amd._layouts",
    "triton.experimental.gluon.language.nvidia.blackwell", "triton.experimental.gluon.nvidia.hopper",
)


def import_launch_path_modules() -> None:
    """Import what Triton's launch path imports lazily on a process's first launch with a tensor
    argument (its native specializer's modules, ~50-120 ms in all). A warm-up whose variants
    were all restored (:mod:`zerojit.restore`) runs no launch, so without this the first request
    would pay it. A module this Triton lacks is skipped (its specializer cannot import it either).
    """
    import importlib

    for name in _SPECIALIZER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_primed: set[int] = set()


def prime_launch_path() -> None:
    """Launch one tiny kernel for real through zerojit's launch path, once per process and device.

    The first launch of *any* kernel in a process pays one-time costs that no per-kernel load
    removes (the launch path's first run, the driver's first launch on the context): about
    0.1 ms more than a steady launch on an H200. Warm-up pays them here instead.
    """
    import torch

    from ._primer import primer

    device = torch.cuda.current_device()
    if device in _primed:
        return
    from .monitor import allow_compiles

    buf = torch.empty(1, dtype=torch.int32, device=f"cuda:{device}")
    with allow_compiles():  # still warm-up: the primer's own compile is no runtime compile
        primer(buf=buf)
    torch.cuda.synchronize(device)
    _primed.add(device)
