"""zerojit: zero JIT compilation at run time for Triton kernels.

Each kernel describes its own compile-key space (:mod:`zerojit.kernel`, :mod:`zerojit.keyspace`);
a registry compiles all of it at start-up and loads every module and launcher
(:mod:`zerojit.registry`); a monitor proves while serving that nothing compiles afterwards
(:mod:`zerojit.monitor`), or serves a miss with a generic variant while the key compiles in the
background (:mod:`zerojit.serving`). Without a GPU, :mod:`zerojit.compile_only` compiles real cubins for a
named target and turns launches into dry launches.
"""

import _zerojit_entry

if _zerojit_entry.launched_as_module():  # `python -m zerojit`: a Ctrl-C in the imports below ends it in one line
    _zerojit_entry.exit_on_interrupt()
del _zerojit_entry

from . import audit  # listens for warm-ups: `zerojit audit`'s child writes its audit at exit
from . import compile_only  # the module: zerojit.compile_only.compile_only("cuda:90")
from ._version import __version__
from .autotune import TunedKey, TuningError, TuningFileError, TuningPolicy
from .inputs import BoolArg, CheckedKernel, IntArg, Let, Require, RowStrideInt32, TensorArg, checked_launcher
from .kernel import CompiledVariant, JitKernel, KernelDefinitionError, KernelInputError, LaunchSpec, TritonJitKernel, kernel_launcher
from .keyspace import KeySpaceError, choices, int_range, trace_dispatch, zip_inputs
from .monitor import CaptureCompileError, JitMonitor, RuntimeJitError  # listens for warm-ups: ZEROJIT_JIT_MONITOR
from .registry import JitWarmupRegistry, NoTargetError, WarmupError, WarmupReport
from . import serving  # registers fallback mode with the monitor: ZEROJIT_JIT_MONITOR=fallback
from . import fleet  # registers redis:// and rediss:// stores with the warm-up: warmup(store=URL)
from .specialization import SpecClass, WarmupTensor, classify, scalar_rep

__all__ = [
    "CompiledVariant",
    "JitKernel",
    "KernelDefinitionError",
    "KernelInputError",
    "LaunchSpec",
    "TritonJitKernel",
    "kernel_launcher",
    "TuningPolicy",
    "TunedKey",
    "TuningError",
    "TuningFileError",
    "CheckedKernel",
    "checked_launcher",
    "TensorArg",
    "IntArg",
    "BoolArg",
    "RowStrideInt32",
    "Require",
    "Let",
    "KeySpaceError",
    "choices",
    "int_range",
    "trace_dispatch",
    "zip_inputs",
    "JitMonitor",
    "RuntimeJitError",
    "CaptureCompileError",
    "JitWarmupRegistry",
    "WarmupError",
    "NoTargetError",
    "WarmupReport",
    "SpecClass",
    "WarmupTensor",
    "classify",
    "scalar_rep",
]
