"""Every private Triton surface zerojit reaches, in one module.

zerojit works with Triton's binder, its in-process kernel caches, its compile hooks, its
launchers and the fields of its compiled kernels, none of which is a public API. Everything
that touches them goes through this module, so that a new Triton release is one file's work;
each version difference is handled here, named after the version that brought it.

Supported: Triton 3.6.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
from typing import Any, Callable

from triton import knobs

__all__ = [
    "get_cache_hook",
    "get_compile_listener",
    "import_launch_path_modules",
    "load_compiled",
    "set_cache_hook",
    "set_compile_listener",
]


# -- compile hooks ------------------------------------------------------------------------------
# ``knobs.runtime.jit_cache_hook`` is called by ``JITFunction`` on every in-process cache miss,
# before compiling; ``knobs.compilation.listener`` after every ``triton.compile``.


def get_cache_hook() -> Callable[..., Any] | None:
    """Triton's ``jit_cache_hook`` (called on an in-process cache miss, before compiling)."""
    return knobs.runtime.jit_cache_hook


def set_cache_hook(hook: Callable[..., Any] | None) -> None:
    """Set Triton's ``jit_cache_hook``."""
    knobs.runtime.jit_cache_hook = hook


def get_compile_listener() -> Callable[..., Any] | None:
    """Triton's compilation listener (called after every ``triton.compile``, with ``cache_hit``)."""
    return knobs.compilation.listener


def set_compile_listener(listener: Callable[..., Any] | None) -> None:
    """Set Triton's compilation listener."""
    knobs.compilation.listener = listener


# -- loading a compiled kernel ------------------------------------------------------------------


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
    """Load ``compiled`` (a Triton ``CompiledKernel``) on the GPU: module, function and launcher.

    Triton's ``CompiledKernel._init_handles()`` loads the cubin (``cuModuleLoadData``), fetches
    the function and builds the launcher. Under CUDA's lazy loading (``CUDA_MODULE_LOADING=LAZY``,
    the default PyTorch sets), the function itself is still only loaded at its first launch; the
    driver's ``cuFuncLoad`` (CUDA 12.4+) finishes that now. Where the call is missing it is
    skipped.

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
    for name in _SPECIALIZER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
