"""Compiling for a GPU that is not there: real cubins from a CPU-only machine.

Triton asks its active *driver* for the current target and device; compiling itself (TTIR ->
PTX -> ``ptxas``, shipped in the Triton wheel) needs no GPU. :func:`compile_only` swaps in a
driver that names a fixed target (``cuda:90`` = sm_90, the H100/H200) and cannot launch, so:

* warm-up compiles every key into Triton's in-process cache (and its disk cache) with Triton's
  compile hooks firing as on a GPU machine;
* a *dry launch* (a zerojit launch while this driver is active) runs Triton's binder on real CPU
  tensors, computes the exact runtime key and looks it up, compiling on a miss, executing nothing.
  A raw ``kernel[grid](...)`` launch (and ``triton.autotune`` / ``triton.heuristics``, which call
  ``fn.run``) is a dry launch too: while a block is open, ``JITFunction.run`` turns a launch into
  Triton's ``warmup=True`` run (binder, lookup, compile on a miss, return the ``CompiledKernel``).
  An autotuned launch of a new tuning key "benchmarks" each config by such a dry launch, so every
  config compiles; the tuner's choice is not kept (:meth:`CompileOnlyDriver.get_benchmarker`).

That is what lets CI and GPU-less image builders check the zero-JIT property and coverage.
Triton decides at decoration time whether a function is interpreted (``TRITON_INTERPRET=1``), so
compile-only work and interpreter runs live in separate processes.

The driver is process-wide (Triton's ``driver.active`` is a global), so a compile-only block
affects every thread of the process while it is open.

*The machine view* (``compile_only(target, machine_view=True)``; ``zerojit record`` and ``zerojit
exec`` run programs so, ``zerojit warmup --manifest`` imports their modules so): only Triton's
compilation and launches see the target; everything else that reads ``driver.active`` sees the
machine as it is. A library's hardware probe (FLA's ``fla/utils/hardware.py`` asks Triton's
driver for the backend at import, then calls ``torch.cuda.get_device_name``; at call time
``get_device_properties``) gets the GPU driver on a GPU machine and Triton's "no active driver"
error on a CPU one, so a program that imports and runs here without zerojit imports and records
under a target too. The probes' answers shape the program: FLA picks configs and tiles from them,
so a compile-only recording holds this machine's view of the program (docs/manifest.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import re
import sys
import tempfile
from typing import Any, Iterator

import triton
import triton.language as tl

from . import triton_compat as _tc
from . import watchdog as _watchdog

_TARGET_SCOPE = _tc.TARGET_SCOPE

__all__ = ["CompileOnlyDriver", "CompileOnlyLaunchError", "InterpreterProcessError", "compile_only", "parse_target",
           "refuse_interpreter", "supported_cuda_capabilities", "active_compile_only", "current_target_name",
           "is_target_name", "target_name", "warm_target"]

_TARGET = re.compile(r"^(cuda):(\d+)$|^(hip):(gfx\w+)$")


class CompileOnlyLaunchError(RuntimeError):
    """Something tried to execute a kernel under the compile-only driver."""


class InterpreterProcessError(RuntimeError):
    """:func:`compile_only` in a process where Triton interprets kernels (``TRITON_INTERPRET=1``):
    nothing compiles there. A RuntimeError, as it was before it had a type of its own."""


def refuse_interpreter() -> None:
    """Refuse a compile-only target where Triton interprets kernels.

    Raises:
        InterpreterProcessError: ``TRITON_INTERPRET=1`` in this process (the interpreter compiles
            nothing).
    """
    if _tc.interpreting():
        raise InterpreterProcessError("compile_only() needs a process without TRITON_INTERPRET=1 (the interpreter "
                                      "compiles nothing): unset TRITON_INTERPRET")


#: The lowest compute capability accepted: Triton's NVIDIA backend has code paths down to sm_70
#: (``convert_custom_float8_sm70``) and none below.
MIN_CUDA_CAPABILITY = 70


def parse_target(target: str):
    """Parse ``"cuda:90"`` (compute capability 9.0) or ``"hip:gfx942"`` into a Triton ``GPUTarget``.

    A CUDA capability must be one this Triton can compile for (:func:`supported_cuda_capabilities`):
    an unknown one would otherwise abort the whole process inside LLVM, or fail in ``ptxas``.

    A HIP arch is checked by compiling a one-store probe kernel for it once per process (Triton
    has no list of the gfx archs its AMD backend accepts; an unknown one otherwise fails every key
    of a warm-up with an MLIR dump): about 0.1 s, or a disk-cache hit once the arch compiled.

    Raises:
        ValueError: the string is not of that form, or names a CUDA or HIP architecture this
            Triton cannot compile for (for CUDA the message lists those it can).
        CompileHung: Triton's ``ptxas`` stopped answering when asked (:func:`supported_cuda_capabilities`).
    """
    m = _TARGET.match(target.strip())
    if not m:
        raise ValueError(f"compile-only target {target!r} is not of the form 'cuda:90' (a compute capability) or 'hip:gfx942' (an AMD gfx arch)")
    if m.group(1):
        capability = int(m.group(2))
        supported = supported_cuda_capabilities()
        if supported and capability not in supported:
            why = (f"its NVIDIA backend has no code below sm_{MIN_CUDA_CAPABILITY}" if capability < MIN_CUDA_CAPABILITY
                   else f"its ptxas does not know {_sm_name(capability)}")
            raise ValueError(
                f"compile-only target {target.strip()!r}: Triton {_tc.TRITON_VERSION} cannot compile for "
                f"compute capability {capability} ({why}); supported: {', '.join(f'cuda:{c}' for c in supported)}"
            )
        return _tc.gpu_target("cuda", capability, 32)
    arch = m.group(4)
    target_ = _tc.gpu_target("hip", arch, 32 if _gfx_major(arch) >= 10 else 64)
    problem = _hip_arch_problem(target_)
    if problem:
        raise ValueError(f"compile-only target {target.strip()!r}: Triton {_tc.TRITON_VERSION}'s AMD backend cannot "
                         f"compile for {arch} ({problem})")
    return target_


def _gfx_major(arch: str) -> int:
    """9 for gfx942, 11 for gfx1100 (the digits before the last two), as Triton's AMD backend reads it."""
    digits = re.match(r"gfx(\d+)", arch)
    return int(digits.group(1)[:-2] or 0) if digits and len(digits.group(1)) > 2 else 0


@triton.jit
def _probe_kernel(ptr):
    tl.store(ptr, 0)


@functools.lru_cache(maxsize=None)
def _hip_arch_problem(target) -> str | None:
    """None when Triton compiles the probe kernel for ``target``, else the compiler's own error line.

    The compiler's C++ side writes a whole MLIR dump to stderr for an unknown arch; it is captured
    here and only its ``error:`` line kept. In an interpreting process nothing compiles (and
    :func:`compile_only` refuses to run), so nothing is probed there.
    """
    if _tc.interpreting():
        return None
    src = _tc.ast_source(_probe_kernel, {"ptr": "*i32"}, {})
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as captured:
        try:
            os.dup2(captured.fileno(), 2)
            try:
                _tc.compile_source(src, target)
                return None
            except Exception as e:  # the pass manager raises RuntimeError("PassManager::run failed")
                failure = f"{type(e).__name__}: {e}".strip()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        errors = [line.split("error:", 1)[1].strip() for line in captured if "error:" in line]
    return errors[0] if errors else failure


def _sm_name(capability: int) -> str:
    try:
        return _tc.sm_arch(capability)
    except Exception:  # no NVIDIA backend
        return f"sm_{capability}"


@functools.lru_cache(maxsize=None)
def supported_cuda_capabilities() -> tuple[int, ...]:
    """The compute capabilities this Triton installation can compile for, derived from it.

    Triton's NVIDIA backend compiles for capability ``C`` with the ``ptxas`` it picks for ``C``
    (``get_ptxas``: ``ptxas-blackwell`` from 100 on) and the processor name it derives
    (``sm_arch_from_capability``: ``sm_90a`` from 90 on); LLVM's NVPTX target knows every
    processor these ``ptxas`` list. So ``C`` is supported when that ``ptxas --help`` lists that
    name among its ``--gpu-name`` values (and ``C >= MIN_CUDA_CAPABILITY``). With Triton 3.6:
    70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121; 3.7 and 3.8 (CUDA 13's ``ptxas``,
    where sm_101 became sm_110): 101 gives way to 110; 3.9 adds 107.

    Returns ``()`` (no check) when the NVIDIA backend or its ``ptxas`` cannot be asked (none
    there, or it fails: the first compile then fails with Triton's message).

    Each ``ptxas`` run (Triton's ``--version``, this ``--help``) is bounded by the stall rule
    (:func:`zerojit.watchdog.run`), as every compile's ``ptxas`` is from then on
    (:func:`zerojit.triton_compat.watch_toolchain`).

    Raises:
        CompileHung: a ``ptxas`` stopped answering (no CPU time for ``ZEROJIT_COMPILE_STALL_S``
            seconds, or past its wall limit) and was killed; the message names its path and the
            seconds waited. A ``ptxas`` that does not answer its ``--help`` compiles nothing
            either, so compile-only fails at once rather than go on unchecked.
        StallSettingError: ``ZEROJIT_COMPILE_STALL_S`` or ``ZEROJIT_COMPILE_WALL_S`` is not a
            number of seconds above 0.
    """
    if not _tc.cuda_backend_available():
        return ()
    _watchdog.stall_seconds()  # a bad setting is said as such, not taken for a ptxas that cannot be asked
    _watchdog.wall_floor_seconds()
    _tc.watch_toolchain()
    known: dict[str, set[str]] = {}
    for arch in (MIN_CUDA_CAPABILITY, 100):  # the two ptxas Triton picks between
        try:
            path = _tc.ptxas_path(arch)
            if path not in known:
                known[path] = _ptxas_gpu_names(path)
        except _watchdog.CompileHung as e:
            raise _watchdog.CompileHung(
                f"{e}: Triton's ptxas must answer for compile-only to know the GPUs it compiles for, and to "
                "compile (TRITON_PTXAS_PATH, TRITON_PTXAS_BLACKWELL_PATH: the ptxas Triton runs)") from None
        except Exception:
            return ()
    capabilities: set[int] = set()
    for path, names in known.items():
        for name in names:
            m = re.fullmatch(r"sm_(\d+)a?", name)
            if m:
                capabilities.add(int(m.group(1)))
    return tuple(sorted(c for c in capabilities if c >= MIN_CUDA_CAPABILITY
                        and _tc.sm_arch(c) in known.get(_tc.ptxas_path(c), ())))


def _ptxas_gpu_names(path: str) -> set[str]:
    """The ``--gpu-name`` values a ``ptxas`` lists in its ``--help`` (run under the stall rule:
    :class:`~zerojit.watchdog.CompileHung` once it stops answering)."""
    text = _watchdog.run([path, "--help"], capture_output=True, text=True, name=f"{path} --help").stdout
    section = text.partition("--gpu-name")[2].partition("Default value")[0]
    return set(re.findall(r"'(\w+)'", section))


class CompileOnlyDriver(_tc.DriverBase):  # type: ignore[misc]
    """A Triton driver for a named target that compiles and never launches.

    Its device is the string ``"compile-only:<target>"``, so Triton's per-device kernel caches
    never mix compile-only variants with a real GPU's.
    """

    def __init__(self, target: str = "cuda:90", *, gpu_target: Any = None) -> None:
        """``target``: a name :func:`parse_target` checks (``ValueError`` for one this Triton
        cannot compile for). ``gpu_target``: Triton's ``GPUTarget`` itself, taken as it is (a
        compile worker's: its parent's exact target, checked there); ``target`` then only names
        it. The check runs ``ptxas --help`` (two subprocesses, 20-80 ms in a forked worker of a
        large process), which a worker need not repeat."""
        super().__init__()
        self.target_name = target
        self.target = parse_target(target) if gpu_target is None else gpu_target
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
        """The benchmark a ``triton.autotune`` kernel's tuning runs per config (its default
        ``do_bench``): here a dry launch of the config (it compiles, nothing executes) that times
        every config alike. So an autotuned launch under compile-only compiles every config the
        tuner could choose on the GPU, and the tuner's choice (the first config) is forgotten when
        its run ends (:func:`compile_only`): nothing was measured. An autotuner given its own
        ``do_bench`` or ``use_cuda_graph=True`` benchmarks through CUDA and cannot run here."""
        return _dry_benchmark

    @property
    def launcher_cls(self):
        raise CompileOnlyLaunchError(
            f"a kernel was launched for real under compile_only({self.target_name!r}); "
            "only dry launches (zerojit launches, Triton warmup) are possible without a GPU"
        )


def active_compile_only() -> CompileOnlyDriver | None:
    """The compile-only driver if one is active in this process, else None."""
    active = _tc.peek_driver()  # .active would create a GPU driver
    return active if isinstance(active, CompileOnlyDriver) else None


@contextlib.contextmanager
def compile_only(target: str = "cuda:90", *, machine_view: bool = False) -> Iterator[CompileOnlyDriver]:
    """Make Triton compile for ``target`` with no GPU while the block is open.

    Yields the driver. Restores the previous driver (and Triton's ``DriverConfig`` class) on exit,
    exceptions included; nesting works.

    ``machine_view=True``: ``triton.runtime.driver.active`` is the compile-only driver only where
    Triton compiles or launches (inside ``JITFunction.run``, ``Autotuner.run``, ``triton.compile``,
    and zerojit's own compiles and dry launches: :data:`zerojit.triton_compat.TARGET_SCOPE`);
    everywhere else it is what Triton gives with no compile-only driver (the GPU driver, or on a
    machine with no GPU, Triton's ``RuntimeError``). :func:`active_compile_only`,
    :func:`current_target_name` and :func:`warm_target` still name the compile-only target. What
    it costs: about 0.1 us a dry launch (the scope's context variable set and reset around it,
    110 ns; a read of ``driver.active`` costs what Triton's does, ~80 ns; a dry launch takes 4-5
    us; Triton 3.6 on a 2-core x86 machine). Without it, every reader of ``driver.active`` sees the
    target (a library probing the GPU at import then takes its GPU path and fails on a machine
    without one).

    From then on Triton runs ``ptxas`` under the stall rule (:func:`zerojit.triton_compat.watch_toolchain`).

    Raises:
        ValueError: a malformed target (see :func:`parse_target`).
        CompileHung: Triton's ``ptxas`` stopped answering when asked which GPUs it compiles for
            (see :func:`supported_cuda_capabilities`).
        InterpreterProcessError: Triton was imported with ``TRITON_INTERPRET=1`` (nothing
            compiles there).
    """
    refuse_interpreter()
    new = CompileOnlyDriver(target)
    _tc.watch_toolchain()  # every ptxas the block's compiles run: the stall rule
    restore_driver = _tc.set_driver(new, machine_view=machine_view)
    restore_compile = _tc.patch_compile()
    restore_run = _tc.patch_run_everywhere(_dry_run)
    restore_tuning = _tc.patch_autotuner_run(_untuned_run)
    try:
        yield new
    finally:
        restore_tuning()
        restore_run()
        restore_compile()
        restore_driver()


def _dry_run(original):
    """``JITFunction.run`` where a launch under the compile-only driver is a dry launch."""

    def run(jit_fn, *args, grid, warmup, **kwargs):
        if not warmup and isinstance(_tc.peek_driver(), CompileOnlyDriver):
            warmup = True  # Triton's warm-up run: binder, lookup, compile on a miss; nothing executes
        token = _TARGET_SCOPE.set(True)  # Triton's launch path sees the target (the machine view)
        try:
            return original(jit_fn, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _TARGET_SCOPE.reset(token)

    return run


_DRY_BENCHMARK: contextvars.ContextVar[bool] = contextvars.ContextVar("zerojit_dry_benchmark", default=False)


def in_dry_benchmark() -> bool:
    """True inside a compile-only autotune benchmark's dry launch (a launch of the tuner's, not
    of the program: ``zerojit record`` records its specialization but does not count it)."""
    return _DRY_BENCHMARK.get()


def _dry_benchmark(kernel_call, quantiles=None, **_options):
    """``do_bench`` under compile-only: the config's kernel call once (a dry launch), every config
    the same time (0.0 ms; the quantiles' list when asked for quantiles, as Triton's do_bench)."""
    token = _DRY_BENCHMARK.set(True)
    try:
        kernel_call()
    finally:
        _DRY_BENCHMARK.reset(token)
    return [0.0] * len(quantiles) if quantiles else 0.0


def _untuned_run(original):
    """``Autotuner.run`` where, under the compile-only driver, the tuning it did with the driver's
    benchmarker (every config a dry launch, see :meth:`CompileOnlyDriver.get_benchmarker`) is not
    kept: no choice stays in the autotuner's cache, none goes to Triton's disk cache, so a later
    run on a GPU tunes. An autotuner with a ``do_bench`` of its own keeps what that measured."""

    def run(self, *args, **kwargs):
        token = _TARGET_SCOPE.set(True)  # its benchmarker and disk-cache key ask driver.active (the machine view)
        try:
            if not isinstance(_tc.peek_driver(), CompileOnlyDriver) or not _tc.benchmarks_with_driver(self):
                return original(self, *args, **kwargs)  # (a do_bench of its own measures: its choice stays)
            with _tc.tunings_forgotten(self):
                return original(self, *args, **kwargs)
        finally:
            _TARGET_SCOPE.reset(token)

    return run


def target_name(target) -> str:
    """``"cuda:90"`` for Triton's ``GPUTarget("cuda", 90, 32)``, ``"hip:gfx942"`` for HIP."""
    return f"{target.backend}:{target.arch}"


def is_target_name(target) -> bool:
    """True when ``target`` is a compile-only target name (``"cuda:90"``), which a message may
    suggest to :func:`compile_only`; ``"device"`` and anything else are not."""
    try:
        parse_target(target)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def current_target_name() -> str | None:
    """The target this process compiles for: the compile-only target, else the GPU's; None when
    there is neither (no GPU and no :func:`compile_only` block)."""
    co = active_compile_only()
    if co is not None:
        return co.target_name
    try:
        return target_name(_tc.current_target())
    except Exception:
        return None


def warm_target():
    """(Triton's current ``GPUTarget``, whether it is the compile-only driver's), or (None, True)
    when no driver can start (no GPU and no compile-only target: nothing will compile anyway)."""
    try:
        active = _tc.active_driver()
        return active.get_current_target(), isinstance(active, CompileOnlyDriver)
    except Exception:
        return None, True
