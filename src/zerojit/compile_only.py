"""Compiling for a GPU that is not there: real cubins from a CPU-only machine.

Triton asks its active *driver* for the current target and device; compiling itself (TTIR ->
PTX -> ``ptxas``, shipped in the Triton wheel) needs no GPU. :func:`compile_only` swaps in a
driver that names a fixed target (``cuda:90`` = sm_90, the H100/H200) and cannot launch, so:

* warm-up compiles every key into Triton's in-process cache (and its disk cache) with Triton's
  compile hooks firing as on a GPU machine;
* a *dry launch* (a zerojit launch while this driver is active) runs Triton's binder on real CPU
  tensors, computes the exact runtime key and looks it up, compiling on a miss, executing nothing.

That is what lets CI and GPU-less image builders check the zero-JIT property and coverage.
Triton decides at decoration time whether a function is interpreted (``TRITON_INTERPRET=1``), so
compile-only work and interpreter runs live in separate processes.

The driver is process-wide (Triton's ``driver.active`` is a global), so a compile-only block
affects every thread of the process while it is open.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

__all__ = ["CompileOnlyDriver", "CompileOnlyLaunchError", "compile_only", "parse_target", "active_compile_only"]

_TARGET = re.compile(r"^(cuda):(\d+)$|^(hip):(gfx\w+)$")


class CompileOnlyLaunchError(RuntimeError):
    """Something tried to execute a kernel under the compile-only driver."""


def parse_target(target: str):
    """Parse ``"cuda:90"`` (compute capability 9.0) or ``"hip:gfx942"`` into a Triton ``GPUTarget``.

    Raises:
        ValueError: the string is not of that form.
    """
    from triton.backends.compiler import GPUTarget

    m = _TARGET.match(target.strip())
    if not m:
        raise ValueError(f"compile-only target {target!r} is not of the form 'cuda:90' or 'hip:gfx942'")
    if m.group(1):
        return GPUTarget("cuda", int(m.group(2)), 32)
    return GPUTarget("hip", m.group(4), 64)


def _driver_base():
    from triton.backends.driver import DriverBase

    return DriverBase


class CompileOnlyDriver(_driver_base()):  # type: ignore[misc]
    """A Triton driver for a named target that compiles and never launches.

    Its device is the string ``"compile-only:<target>"``, so Triton's per-device kernel caches
    never mix compile-only variants with a real GPU's.
    """

    def __init__(self, target: str = "cuda:90") -> None:
        super().__init__()
        self.target_name = target
        self.target = parse_target(target)
        self.device = f"compile-only:{target}"

    @classmethod
    def is_active(cls) -> bool:  # never chosen by Triton's driver discovery
        return False

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise CompileOnlyLaunchError("the compile-only driver builds no launcher")

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> str:
        return self.device

    def set_current_device(self, device) -> None:
        pass

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        raise CompileOnlyLaunchError("the compile-only driver cannot benchmark")

    @property
    def launcher_cls(self):
        raise CompileOnlyLaunchError(
            f"a kernel was launched for real under compile_only({self.target_name!r}); "
            "only dry launches (zerojit launches, Triton warmup) are possible without a GPU"
        )


def active_compile_only() -> CompileOnlyDriver | None:
    """The compile-only driver if one is active in this process, else None."""
    from triton.runtime.driver import driver

    active = driver._active  # reading the private slot: .active would create a GPU driver
    return active if isinstance(active, CompileOnlyDriver) else None


@contextlib.contextmanager
def compile_only(target: str = "cuda:90") -> Iterator[CompileOnlyDriver]:
    """Make Triton compile for ``target`` with no GPU while the block is open.

    Yields the driver. Restores the previous driver on exit (nesting works).

    Raises:
        ValueError: a malformed target (see :func:`parse_target`).
        RuntimeError: Triton was imported with ``TRITON_INTERPRET=1`` (nothing compiles there).
    """
    from triton import knobs
    from triton.runtime.driver import driver

    if knobs.runtime.interpret:
        raise RuntimeError("compile_only() needs a process without TRITON_INTERPRET=1")
    new = CompileOnlyDriver(target)
    previous = driver._active
    driver.set_active(new)
    try:
        yield new
    finally:
        driver._active = previous
