"""The runtime JIT monitor: proof, while serving, that nothing compiles after warm-up.

A *runtime compile* is any miss of a ``@triton.jit`` function's in-process cache after warm-up,
whether Triton then compiles the variant or loads it from its disk cache: both stall the request
(a disk load still builds IR objects, reads files and, on a GPU, loads a module). The monitor
counts the two apart, and also sees compiles that never pass through a ``triton.jit`` launch (a
direct ``triton.compile``).

Modes (``JitMonitor(mode)``, the environment variable ``ZEROJIT_JIT_MONITOR=off|warn|error|fallback``,
or the CLI flag ``--jit-monitor-mode``):

* ``off``: nothing is installed.
* ``warn``: the compile goes ahead; one ``logging`` line (logger ``"zerojit.monitor"``, level
  WARNING) per distinct runtime compile (kernel, Triton key); every occurrence is counted.
* ``error``: :class:`RuntimeJitError` is raised *before* the compile, so a server in error mode
  never stalls on one. The message names the kernel, the runtime specialization of every argument,
  the nearest warmed key of that kernel and each argument whose class differs, in the words of
  :mod:`zerojit.specialization` ("block_size: warmed as equal-to-one, called as divisible-by-16").
  A kernel warmed from a manifest (whose key names every parameter) leads with the arguments that
  differ, then, for an int or bool constexpr, the ``zerojit manifest widen`` command that warms it
  (:mod:`zerojit.widen`), then the nearest warmed variant in one line. Nothing is compiled or cached, so the process stays usable: warmed variants still launch.
  A direct ``triton.compile`` gives no hook before it runs; in error mode it raises *after* the
  compile (the only point Triton reports it), still naming what compiled.
* ``fallback``: a miss that a *generic variant* serves (:mod:`zerojit.generic`) launches it at
  once, with no compile and no module load on the request path, while the specialized key
  compiles in a background worker process and is swapped in later (:mod:`zerojit.serving`, which
  this module does not import: it registers itself with :func:`set_fallback_provider`). A miss no
  generic variant serves behaves as in warn mode (compiles inline, logged once, counted in
  ``request_path_compiles``), or as in error mode with ``FallbackOptions(fallback_miss="error")``.
  The options: ``JitMonitor("fallback", fallback=FallbackOptions(...))``.

CUDA-graph capture, in every mode: while a capture is open (:mod:`zerojit.capture`, which counts
captures on every thread; :meth:`JitMonitor.install` wraps ``torch.cuda.CUDAGraph.capture_begin``
/ ``capture_end`` to count them) a miss raises :class:`CaptureCompileError` from the cache hook
before Triton compiles or loads anything, and an autotuner benchmark is refused the same way: a
compile or module load inside a capture breaks it. Hits (warmed variants, generic variants the
fallback serves) launch and are captured.

How it hooks in (Triton 3.6-3.9, through :mod:`zerojit.triton_compat`):

* ``triton.knobs.runtime.jit_cache_hook`` is called by ``JITFunction._do_compile`` on every
  in-process cache miss, before compiling; raising there aborts the launch and leaves Triton's
  caches untouched. The hook's ``compile`` info (signature, constants, attrs) is turned back into
  one :class:`~zerojit.specialization.SpecClass` per parameter.
* ``triton.knobs.compilation.listener`` is called after every ``triton.compile`` with
  ``cache_hit`` (True: loaded from the disk cache). A listener call that follows one of our
  cache-miss hook calls splits that miss into compile vs disk load; any other is a direct compile.
* Hits: Triton calls no hook on a hit, so zerojit's launch path reports every launch to
  :func:`zerojit.kernel.set_launch_observer`; launches are mapped back to warmed keys at audit time
  by the identity of the compiled kernel (:attr:`CompiledVariant.compiled`). The library's own
  launches of an autotuner or heuristics object a zerojit kernel wraps report there after its
  warm-up (:meth:`~zerojit.kernel.TritonJitKernel.serve_library_path`). Raw launches of the
  functions a manifest warmed report there too under ``zerojit exec``
  (:func:`zerojit.recording.count_raw_launches`); a raw launch no manifest warmed is explained as
  such (record the program, or, when a manifest recorded its function but its warm-up skipped it
  or exec could not bind it, why: "the manifest recorded it, but its source changed since
  recording"), not as a dropped registration.

Error mode never degrades silently: another party that assigns Triton's ``jit_cache_hook`` or
compile listener after install (a profiler, a tracer) does not take the monitor out; the
assignment goes through a guard (:func:`zerojit.triton_compat.guard_hook_assignments`) that keeps
the monitor on top, calling the new hook first, and warn/error mode log once that it happened. A
write past the guard (into ``knobs.runtime.__dict__``) is found before the next zerojit launch
that may compile (the normal path checks that Triton's two slots hold what the monitor left
there, :func:`zerojit.kernel.set_hook_pins`; a fast-path launch cannot compile and checks
nothing), or at the next compile, which puts the monitor back on top; :attr:`JitMonitor.installed`
says False until then.

Each of the three is *chained*: the monitor keeps the hook, listener or observer that was set before
it and calls it first (a user ``jit_cache_hook`` that returns True makes Triton skip the compile;
the monitor then neither counts nor blocks anything). :meth:`JitMonitor.uninstall` restores the
previous one when the monitor is still on top; when something else was chained on top since, the
monitor unlinks itself from a chain of monitors, or else stays in place as a pass-through.

Growth: when one parameter of one kernel has taken more than ``growth_limit`` (8) distinct values
after warm-up, warn and error mode log one line naming it, the count and the change that bounds
it, and no longer one line per new value (:mod:`zerojit.growth`; :meth:`JitMonitor.growing`).

Warm-up awareness: hook calls made inside a zerojit warm-up launch (``kernel.compile(key)``, in
whatever thread the registry runs it) or inside :func:`allow_compiles` are ignored, so a second
registry warming later is not a runtime compile. The monitor listens for warm-ups
(:func:`zerojit.registry.add_warmup_listener`; the registry never imports the monitor): at the end
of each, :func:`on_warmup_complete` installs the *process monitor* when ``ZEROJIT_JIT_MONITOR`` (or
:func:`configure`) asks for warn, error or fallback, and hands the warm-up report to every installed monitor
(warmed keys for the nearest-key explanation and the audit). A monitor you build yourself starts
with every warm-up this process has completed and is armed as soon as it is installed.

Learning: warn and error mode append each distinct miss (a blocked one too) to the learned-keys
file beside Triton's cache (:func:`zerojit.learned.record_miss`: under a file lock, each key once,
never raising into the launch), which the next warm-up warms; ``JitMonitor(learn=False)`` or
``ZEROJIT_LEARN=0`` turns it off.

Async compile mode (``triton.runtime._async_compile``) is not specially supported: misses are
seen, but a compile finished on another thread may be counted as a direct compile (and from Triton
3.7 on, a launch that finds the pending ``FutureKernel`` in the in-process cache is a hit).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable

from . import triton_compat as _tc
from . import capture as _capture
from . import kernel as _kernel
from . import generic as _generic
from . import learned as _learned
from . import registry as _registry
from .context import allow_compiles, in_warmup
from .growth import DEFAULT_GROWTH_LIMIT, GrowingParameter, GrowthTracker
from .kernel import TritonJitKernel
from .manifest import SOURCE_CHANGED, RecordedKey, rebuilt_of, unbound_reason
from .shapeflow import shape_parameters
from .specialization import SpecClass
from .widen import suggested_values, widen_command
from .triton_compat import alignment_unspecialized_parameters, constexpr_parameters, guard_hook_assignments
from .triton_compat import (RUN_OPTIONS, find_in_process_key, hook_compile_request, hook_jit_function, source_fields,
                            source_of)
from .triton_compat import get_cache_hook as _get_cache_hook, get_compile_listener as _get_listener
from .triton_compat import set_cache_hook as _set_cache_hook, set_compile_listener as _set_listener

__all__ = [
    "MODES",
    "ENV_VAR",
    "CHAINED_TO",
    "JitMonitor",
    "RuntimeJitError",
    "CaptureCompileError",
    "MonitorModeError",
    "RuntimeCompile",
    "RuntimeBenchmark",
    "ArgDifference",
    "MissCount",
    "MonitorCounts",
    "MonitorSnapshot",
    "allow_compiles",
    "configure",
    "configured_mode",
    "current",
    "on_warmup_complete",
    "shutdown",
    "installed_monitors",
    "class_words",
    "specialization_from_compile_info",
    "FallbackOptions",
    "SWAP_POLICIES",
    "FALLBACK_MISSES",
    "set_fallback_provider",
]

#: The monitor modes.
MODES = ("off", "warn", "error", "fallback")
#: The environment variable that turns the process monitor on after warm-up.
ENV_VAR = "ZEROJIT_JIT_MONITOR"

logger = logging.getLogger("zerojit.monitor")


class MonitorModeError(ValueError):
    """A monitor mode (``JitMonitor(mode)``, :func:`configure`, ``ZEROJIT_JIT_MONITOR``) other than
    off, warn, error or fallback; the message names where it came from."""


def _check_mode(mode: str, where: str = "JitMonitor mode", hint: str = "") -> str:
    if mode not in MODES:
        raise MonitorModeError(f"{where} must be one of {', '.join(MODES)}, not {mode!r}{hint}")
    return mode


# ---------------------------------------------------------------------------------------------
# Fallback mode: its options, and the serving layer that provides it
# ---------------------------------------------------------------------------------------------

#: ``FallbackOptions.swap`` values (see :mod:`zerojit.serving.swap` for what each means and why
#: the default is ``"between-requests"``).
SWAP_POLICIES = ("immediate", "between-requests", "never")
#: ``FallbackOptions.fallback_miss`` values: what a miss no generic variant serves does.
FALLBACK_MISSES = ("compile", "error")


@dataclass(frozen=True)
class FallbackOptions:
    """How a monitor in ``fallback`` mode serves misses (:mod:`zerojit.serving`).

    Attributes:
        swap: when a specialized variant compiled in the background replaces the generic one
            that served its key: ``"between-requests"`` (default: when the engine calls
            :func:`zerojit.serving.between_requests`, so no request sees two variants of one
            kernel), ``"immediate"`` (as soon as it is ready), ``"never"`` (the generic variant
            keeps serving; the background compile still fills the disk cache for the next start).
        fallback_miss: a miss no generic variant serves (a new dtype, constexpr or launch
            option): ``"compile"`` (default: compiles inline, as warn mode, counted in
            ``request_path_compiles``) or ``"error"`` (:class:`RuntimeJitError` before anything
            compiles, as error mode).
        workers: background compile worker processes (default 1).
        nice: the workers' niceness (default 19, the lowest CPU priority: the serving process's
            threads come first); 0 leaves it as the serving process's.

    Raises:
        ValueError: a value out of range; the message names the field.
    """

    swap: str = "between-requests"
    fallback_miss: str = "compile"
    workers: int = 1
    nice: int = 19

    def __post_init__(self) -> None:
        if self.swap not in SWAP_POLICIES:
            raise ValueError(f"FallbackOptions.swap must be one of {', '.join(SWAP_POLICIES)}, not {self.swap!r}")
        if self.fallback_miss not in FALLBACK_MISSES:
            raise ValueError(f"FallbackOptions.fallback_miss must be one of {', '.join(FALLBACK_MISSES)}, "
                             f"not {self.fallback_miss!r}")
        if type(self.workers) is not int or self.workers < 1:
            raise ValueError(f"FallbackOptions.workers must be an int of at least 1, not {self.workers!r}")
        if type(self.nice) is not int or not 0 <= self.nice <= 19:
            raise ValueError(f"FallbackOptions.nice must be an int from 0 to 19, not {self.nice!r}")


_fallback_provider: Callable[["JitMonitor"], Any] | None = None


def set_fallback_provider(provider: Callable[["JitMonitor"], Any] | None) -> None:
    """Register what serves misses in fallback mode (:mod:`zerojit.serving` does, at import).

    ``provider(monitor)`` is called when a fallback-mode monitor is installed and returns an
    *attachment* with ``detach()`` (called at uninstall), ``counts(launches)`` (``launches``:
    ``id(compiled kernel)`` -> launches zerojit's launch path reported; returns a mapping with
    ``fallback_launches``, ``background_compiles`` and ``swaps``) and ``reset()``. The monitor
    (observation layer) cannot import the serving layer above it (docs/architecture.md), hence
    this slot.
    """
    global _fallback_provider
    _fallback_provider = provider


# ---------------------------------------------------------------------------------------------
# Specialization classes, in words
# ---------------------------------------------------------------------------------------------

_INT_WORDS = {"D": "divisible-by-16", "": "not-divisible-by-16", None: "unspecialized"}
_PTR_WORDS = {"D": "16-byte-aligned", "": "unaligned", None: "alignment-unspecialized"}


def class_words(spec: SpecClass, *, width: bool = True, constexpr: bool = False,
                alignment_specialized: bool = True) -> str:
    """One argument's class in the specialization model's words.

    ``"equal-to-one"``, ``"i32 divisible-by-16"`` (``"divisible-by-16"`` with ``width=False``),
    ``"i64 not-divisible-by-16"``, ``"i32 unspecialized"`` (``do_not_specialize``),
    ``"*fp32 16-byte-aligned"``, ``"*fp16 unaligned"``, ``"constexpr 24"``, ``"None"``,
    ``"u1"`` / ``"fp32"`` (never specialized).

    Args:
        constexpr: the parameter is declared ``tl.constexpr``: a value 1 is ``"constexpr 1"``
            (Triton gives an int equal to one and a constexpr 1 the same class).
        alignment_specialized: False for a pointer in ``do_not_specialize_on_alignment``: Triton
            passes it like an unaligned one; it is ``"*fp32 alignment not specialized"``.
    """
    kind = spec.kind
    if kind == "constexpr":
        if type(spec.attr) is int and spec.attr == 1 and not constexpr:
            return "equal-to-one"
        return f"constexpr {spec.attr!r}"
    if kind == "none":
        return "None"
    if kind == "int":
        prefix = f"{spec.type} " if width else ""
        if spec.attr == 1:
            return prefix + "equal-to-one"
        return prefix + _INT_WORDS.get(spec.attr, repr(spec.attr))
    if kind == "pointer":
        if not alignment_specialized:
            return f"{spec.type} alignment not specialized"
        return f"{spec.type} " + _PTR_WORDS.get(spec.attr, repr(spec.attr))
    return spec.type


def specialization_from_compile_info(
    jit_fn: Any, signature: dict, constants: dict, attrs: dict
) -> tuple[SpecClass, ...]:
    """Rebuild Triton's ``(type, attr)`` pair of every parameter from a compile request.

    ``signature`` maps parameter name -> type (``"constexpr"`` for constexprs), ``constants`` maps
    ``(index,)`` -> value, ``attrs`` maps ``(index,)`` -> parsed attributes
    (``[["tt.divisibility", 16]]`` for ``"D"``, ``[]`` for ``""``), as Triton's ``jit_cache_hook``
    and ``ASTSource`` carry them. A parameter absent from ``attrs`` had a non-string attr: ``None``
    (``do_not_specialize``, bool, float) or, for an annotated int, the value 1.
    """
    out = []
    for i, p in enumerate(jit_fn.params):
        ty = signature.get(p.name)
        if ty == "constexpr":
            out.append(SpecClass("constexpr", constants.get((i,))))
            continue
        if not isinstance(ty, str):  # a tuple argument: keep its type, no attr
            out.append(SpecClass(str(ty), None))
            continue
        parsed = attrs.get((i,))
        if parsed is not None:
            divisible = any(list(a)[:2] == ["tt.divisibility", 16] for a in parsed)
            attr: Any = "D" if divisible else ""
        elif p.do_not_specialize or not (ty[:1] in "iu" and ty != "u1"):
            attr = None
        else:
            attr = 1  # an annotated int (n: tl.int64) equal to one
        out.append(SpecClass(ty, attr))
    return tuple(out)


def _options_part(triton_key: str) -> str | None:
    """The launch-options part of a Triton cache key (``str(spec list) + str(options dict)``)."""
    head, sep, tail = triton_key.rpartition("]{")
    return "{" + tail if sep else None


def _parse_options(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


_HIDDEN_OPTIONS = RUN_OPTIONS  # added by Triton's run, not passed by the launch


def _shown_options(options: dict | None) -> str:
    if not options:
        return ""
    return ", ".join(f"{k}={v!r}" for k, v in options.items() if k not in _HIDDEN_OPTIONS)


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


def _settable(c: SpecClass) -> bool:
    """A constexpr class of an int or bool value (one a widen axis can list)."""
    return c.kind == "constexpr" and type(c.attr) in (int, bool)


#: A widen hint's range of at least this many values lists the values instead (:meth:`JitMonitor._widen`).
_WIDEN_RANGE_MAX = 64


@dataclass(frozen=True)
class ArgDifference:
    """One argument whose class differs between the nearest warmed key and the runtime call."""

    name: str
    warmed: SpecClass
    called: SpecClass
    constexpr: bool = False  #: the parameter is declared tl.constexpr

    def __str__(self) -> str:
        # an int's width is named when the widths differ or it is not the usual i32
        w, c = self.warmed, self.called
        widths_differ = w.kind == c.kind == "int" and w.type != c.type
        # ... and when the other side is no int at all (a float parameter passed an int: "i32 ...")
        w_width = w.kind == "int" and (widths_differ or w.type != "i32" or c.kind not in ("int", "constexpr"))
        c_width = c.kind == "int" and (widths_differ or c.type != "i32" or w.kind not in ("int", "constexpr"))
        return (f"{self.name}: warmed as {class_words(w, width=w_width, constexpr=self.constexpr)}, "
                f"called as {class_words(c, width=c_width, constexpr=self.constexpr)}")

    @property
    def widenable(self) -> bool:
        """An int or bool constexpr on both sides: ``zerojit manifest widen`` can warm its values."""
        return self.constexpr and _settable(self.warmed) and _settable(self.called)

    @property
    def hint(self) -> str:
        """What to change, for the usual causes of this difference (Triton's specialization of
        ints on 1 and on divisibility by 16, of pointers on 16-byte alignment)."""
        w, c = self.warmed, self.called
        w_one = not self.constexpr and w.kind == "constexpr" and type(w.attr) is int and w.attr == 1
        c_one = not self.constexpr and c.kind == "constexpr" and type(c.attr) is int and c.attr == 1
        if w_one and c.kind == "int":
            return ("warm-up passed the literal 1, which compiles the equal-to-one variant that no other "
                    "value hits; warm with a value of the runtime class (scalar_rep(64) == 16)")
        if c_one and w.kind == "int":
            return (f"the run passed 1, which Triton compiles as its own equal-to-one variant; if {self.name!r} "
                    f"varies per request (a token count), list it in triton.jit's do_not_specialize (one variant "
                    "for every value); otherwise warm a key with it equal to 1 too (scalar_rep(1) == 1)")
        if w.kind == "constexpr" and c.kind == "constexpr":
            return ("a constexpr that varies with the request recompiles for every value: make a "
                    "request-dependent bound a do_not_specialize int, or put every value in the key space")
        if w.kind == "int" and c.kind == "int":
            if w.type != c.type:
                return "the int width differs: warm with a value of the runtime width too (scalar_rep(2**40) is an i64)"
            if w.attr is None or c.attr is None:
                return "the parameter's do_not_specialize setting changed between warm-up and run"
            return ("divisibility by 16 differs: warm both classes (scalar_rep gives one value of each) "
                    "or list the parameter in do_not_specialize")
        if w.kind == "pointer" and c.kind == "pointer":
            if w.type != c.type:
                return "a tensor of another dtype: add the dtype to the kernel's key space"
            return "16-byte alignment differs: warm with WarmupTensor(..., aligned=False) as well"
        if "none" in (w.kind, c.kind):
            return "an optional argument is None in one and not the other: warm both"
        if w.kind == "float" and c.kind in ("int", "constexpr"):
            return (f"a float parameter was passed a Python int, which Triton types as an int (another variant): "
                    f"pass a float (float({self.name})), or refuse an int in the launcher "
                    f"(Require({self.name!r}, 'type({self.name}) is float', ...))")
        if w.kind in ("int", "constexpr") and c.kind == "float":
            return ("warm-up passed an int where the run passes a float (another variant): warm with a float "
                    "(1.5, never a literal 1)")
        return "warm a key in the runtime class"


@dataclass(frozen=True)
class RuntimeCompile:
    """One distinct runtime compile (kernel, Triton key), explained.

    Attributes:
        kernel: the zerojit kernel's name (or the Triton function's name for a kernel zerojit
            does not know).
        function: the Triton function, ``module.qualname``.
        param_names: the kernel parameters, in order.
        specialization: the runtime class of every parameter.
        triton_key: Triton's in-process cache key (empty for a direct compile).
        options: the launch options passed (``num_warps=8``), as text; empty when none.
        nearest_key: ``repr`` of the nearest warmed zerojit key, or None when none was warmed.
        nearest_index: its 1-based warm-up position among ``warmed_count`` keys of this kernel.
        warmed_count: how many keys of this kernel were warmed.
        registered_without_keys: a warm-up had the kernel registered, with no key (its
            ``get_warmup_keys`` returned none).
        differences: each argument whose class differs from the nearest warmed key.
        option_difference: the launch-option difference from it, if any.
        direct: a direct ``triton.compile`` (no ``triton.jit`` launch).
        no_warmup: set when no zerojit warm-up ran before it (the monitor held no warmed key
            of any kernel): says so, e.g. ``"no zerojit warm-up ran (--warmup none)"``.
        unmigrated: the Triton function is launched raw (no zerojit kernel class wraps it) and
            no manifest warmed it: the fix is to record the program, not a registration.
        recorded: the nearest warmed key came from a manifest (``zerojit record``).
        widen: for a recorded kernel whose int or bool constexprs differ, the ``zerojit manifest
            widen`` command that warms their values (the warmed ones and this call's, rounded
            up: :func:`zerojit.widen.suggested_values`); None otherwise.
        skipped: for a raw launch of a function a manifest recorded but nothing warmed, why (a
            warm-up's ``ManifestSkip``, or ``zerojit exec``'s binding of a ``__main__`` function:
            :func:`zerojit.manifest.note_unbound`), as a clause after "the manifest recorded it,
            but": "its source changed since recording (...): record the program again", or "its
            warm-up skipped it: " and the warm-up's reason; each says what to change. None when
            no manifest recorded it.
        constexprs / alignment_unspecialized: the kernel's ``tl.constexpr`` parameters and those in
            ``do_not_specialize_on_alignment`` (for the words: "constexpr 1", "alignment not
            specialized").
        fallback: a miss seen in fallback mode, which no generic variant served
            (:mod:`zerojit.serving`); no_generic: the warm-up filed no generic variant of this
            function at all (``generic=False``, or their compiles failed), which the message says.
        unguarded: a ``triton.jit`` compile Triton's listener reported while the monitor's
            ``jit_cache_hook`` had been replaced past its guard, so nothing could block it
            (``direct`` is True: it was seen only after it ran); the chain is repaired since.
    """

    kernel: str
    function: str
    param_names: tuple[str, ...]
    specialization: tuple[SpecClass, ...]
    triton_key: str = ""
    options: str = ""
    nearest_key: str | None = None
    nearest_index: int | None = None
    warmed_count: int = 0
    registered_without_keys: bool = False
    differences: tuple[ArgDifference, ...] = ()
    option_difference: str | None = None
    direct: bool = False
    no_warmup: str | None = None
    unmigrated: bool = False
    recorded: bool = False
    skipped: str | None = None
    widen: str | None = None

    @property
    def unwarmed_reason(self) -> str:
        """Why no key of this kernel was warmed, and what to do (for a miss without a nearest key)."""
        if self.unmigrated and self.skipped is not None:
            return f"the manifest recorded it, but {self.skipped}"
        if self.unmigrated:
            return (f"{self.kernel!r} is launched raw (not a zerojit kernel) and no manifest warmed it: record the "
                    "program (zerojit record -- CMD) and run it with zerojit exec --manifest, or migrate the kernel")
        return f"{self.kernel!r} has no warmed key (was its registration dropped?)"

    @property
    def record_hint(self) -> str | None:
        """For a kernel warmed from a manifest, how to cover this call (None otherwise)."""
        if not self.recorded:
            return None
        def int_like(c: SpecClass) -> bool:  # an int argument: a class, or the literal 1 (a constexpr)
            return c.kind == "int" or c.kind == "constexpr" and type(c.attr) is int and c.attr == 1

        ints = [d.name for d in self.differences if int_like(d.warmed) and int_like(d.called)
                and not (d.warmed.kind == d.called.kind == "int" and d.warmed.type != d.called.type)]
        aligned = [d.name for d in self.differences if d.called.kind == "pointer" and d.warmed.type == d.called.type]
        bounds = ([f"do_not_specialize={ints!r}"] if ints else []) + (
            [f"do_not_specialize_on_alignment={aligned!r}"] if aligned else [])
        text = "this kernel was warmed from a manifest: record the program again with this workload (zerojit record)"
        return text + (f", or bound the argument{'s' if len(ints) + len(aligned) > 1 else ''} in its triton.jit "
                       f"decorator ({', '.join(bounds)}) so one variant serves every value" if bounds else "")
    unguarded: bool = False
    fallback: bool = False  #: seen in fallback mode: no generic variant served it
    no_generic: bool = False  #: ... and the warm-up filed none of this function at all
    constexprs: frozenset[str] = frozenset()
    alignment_unspecialized: frozenset[str] = frozenset()

    def _words(self, name: str, spec: SpecClass) -> str:
        return class_words(spec, constexpr=name in self.constexprs,
                           alignment_specialized=name not in self.alignment_unspecialized)

    @property
    def arguments(self) -> str:
        """Every argument's runtime class: ``"x_ptr: *fp32 16-byte-aligned, n: i32 unspecialized"``."""
        return ", ".join(f"{n}: {self._words(n, s)}" for n, s in zip(self.param_names, self.specialization))

    @property
    def difference_lines(self) -> list[str]:
        lines = [str(d) for d in self.differences]
        if self.option_difference:
            lines.append(self.option_difference)
        return lines

    def summary(self) -> str:
        """One line: what compiled and why (the warn-mode log line)."""
        rest = [d.name for d in self.differences if not d.widenable] + (
            ["the launch options"] if self.option_difference else [])
        only = f" (the constexprs only: {', '.join(rest)} {'differs' if len(rest) == 1 else 'differ'} too)" if rest else ""
        what = "direct triton.compile" if self.direct else "runtime JIT compile"
        if self.unguarded:
            what = "runtime JIT compile (seen only after it ran: Triton's jit_cache_hook had been replaced; repaired)"
        when = "" if self.no_warmup else " after warm-up"
        if self.recorded and (self.differences or self.option_difference):  # its key repeats every argument
            return (f"{what} of kernel {self.kernel!r}{when}: {'; '.join(self.difference_lines)} (nearest warmed "
                    f"variant: warm-up #{self.nearest_index} of {self.warmed_count})"
                    + (f"; warm it: {self.widen}{only}" if self.widen else ""))
        if self.unmigrated and self.skipped is not None and not self.no_warmup:  # no variant of it: why, not its key
            return f"{what} of kernel {self.kernel!r}{when}: {self.unwarmed_reason}"
        text = f"{what} of kernel {self.kernel!r}{when} ({self.arguments})"
        if self.options:
            text += f" [{self.options}]"
        if self.no_warmup:
            return text + f"; {self.no_warmup}"
        if self.nearest_key is None:
            return text + f"; {self.unwarmed_reason}"
        diffs = "; ".join(self.difference_lines) or "no argument class differs"
        return text + f"; nearest warmed key {self.nearest_key}: {diffs}"

    def explain(self, *, blocked: bool = False, capture_mode: str | None = None) -> str:
        """The full multi-line explanation (the :class:`RuntimeJitError` message); ``capture_mode``:
        the monitor's mode when the miss was refused because a CUDA-graph capture was open."""
        if self.no_warmup:
            head = (f"zerojit: kernel {self.kernel!r} {'would compile' if blocked else 'compiled'} at run time; "
                    f"{self.no_warmup}")
        elif self.unguarded:
            head = (f"zerojit: kernel {self.kernel!r} compiled at run time, after warm-up, while another party had "
                    "replaced Triton's jit_cache_hook past the monitor, which could not block it; the monitor has put "
                    "itself back on top, so the next one is blocked before it compiles")
        elif self.direct:
            head = (f"zerojit: direct triton.compile of {self.kernel!r} after warm-up (Triton reports a direct "
                    "compile only after it ran)")
        elif blocked and capture_mode is not None:
            head = (f"zerojit: kernel {self.kernel!r} would compile at run time, after warm-up, during a CUDA-graph "
                    f"capture; the JIT monitor (in {capture_mode} mode) refuses every compile while a capture is "
                    "open, so nothing was compiled")
        elif blocked and self.fallback:
            why = ("the warm-up filed no generic variant of this function (warmed with generic=False / "
                   "--no-generic, or its generic variants failed to compile: see the warm-up's notes)"
                   if self.no_generic else
                   "no generic variant serves this key (another dtype, constexpr, int width or launch option than "
                   "the warmed keys)")
            head = (f"zerojit: kernel {self.kernel!r} would compile at run time, after warm-up; {why} and the JIT "
                    "monitor's fallback_miss is 'error', so nothing was compiled")
        elif blocked:
            head = (f"zerojit: kernel {self.kernel!r} would compile at run time, after warm-up; the JIT monitor "
                    "is in error mode, so nothing was compiled")
        else:
            head = f"zerojit: kernel {self.kernel!r} compiled at run time, after warm-up"
        if self.recorded and (self.differences or self.option_difference):
            return "\n".join([head, *self._recorded_lines()])
        lines = [head]
        if self.nearest_key is None and self.unmigrated and not self.no_warmup:
            lines.append(f"  {self.unwarmed_reason}")  # why, first; the arguments below, once
        lines.append(f"  Triton function: {self.function}")
        lines.append("  runtime specialization:")
        lines += [f"    {n}: {self._words(n, s)}" for n, s in zip(self.param_names, self.specialization)]
        if self.options:
            lines.append(f"    launch options: {self.options}")
        if self.no_warmup:
            pass  # the head says why no key is warmed; there is no nearest one to name
        elif self.nearest_key is None and self.unmigrated:
            pass  # said above
        elif self.nearest_key is None and self.registered_without_keys:
            lines.append(f"  no key of {self.kernel!r} was warmed: it was registered, but its get_warmup_keys returned "
                         "no key for the requests registered (an empty choices(), or requests that reach none): widen "
                         "its key space to hold this launch's key.")
        elif self.nearest_key is None:
            lines.append(f"  no key of {self.kernel!r} was warmed: its registration was never reached. Call "
                         f"register_warmup for it under registry.activate() where the model or KV cache is built.")
        else:
            lines.append(f"  nearest warmed key: {self.nearest_key} (warm-up #{self.nearest_index} of "
                         f"{self.warmed_count} for this kernel)")
            if self.differences or self.option_difference:
                n = len(self.differences) + (1 if self.option_difference else 0)
                lines.append(f"  differs in {n} argument{'s' if n != 1 else ''}:")
                for d in self.differences:
                    lines.append(f"    {d}")
                    if not self.recorded:  # a recorded kernel's fix is the record hint below, not its key space
                        lines.append(f"      -> {d.hint}")
                if self.option_difference:
                    lines.append(f"    {self.option_difference}")
                    lines.append("      -> Triton keys on the launch options passed; pass the same ones at warm-up")
            else:
                lines.append("  no argument class differs from it (the kernel's source or globals changed?)")
            if self.record_hint:
                lines.append(f"  {self.record_hint}")
        return "\n".join(lines)

    def _recorded_lines(self) -> list[str]:
        """A recorded kernel's miss, led by what differs (a recorded key repeats every parameter:
        about 25 for FLA's fused recurrent): the differing arguments, how to warm them, then the
        nearest warmed variant in one line."""
        n = len(self.differences) + (1 if self.option_difference else 0)
        lines = [f"  differs from the nearest warmed variant in {n} argument{'s' if n != 1 else ''}:"]
        lines += [f"    {d}" for d in self.differences]
        if self.option_difference:
            lines.append(f"    {self.option_difference}")
        if self.widen:
            lines.append(f"  warm it: {self.widen}, then exec with the widened manifest (or record the program again "
                         "with this workload: zerojit record)")
            others = [d.name for d in self.differences if not d.widenable]
            if others or self.option_difference:
                rest = others + (["the launch options"] if self.option_difference else [])
                verb = "differs" if len(rest) == 1 and others else "differ"
                lines.append(f"  (that warms the constexprs only: {', '.join(rest)} {verb} too, and the call still "
                             "misses after it; recording this workload warms them all)")
        elif self.record_hint:
            lines.append(f"  {self.record_hint}")
        same = len(self.param_names) - len(self.differences)
        lines.append(f"  nearest warmed variant: warm-up #{self.nearest_index} of {self.warmed_count} for this kernel; "
                     f"the other {same} argument{'s' if same != 1 else ''} as called"
                     + (f"; launch options: {self.options}" if self.options else ""))
        lines.append(f"  Triton function: {self.function}")
        return lines

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class RuntimeBenchmark:
    """An autotune benchmark after warm-up: an autotuner met a tuning key it had no choice for
    and started benchmarking its configs on the request path (hundreds of ms).

    Attributes:
        kernel: the kernel's name (zerojit's, else the ``triton.jit`` function's).
        tuning_key: the autotuner's tuning key (``key`` argument values, then argument dtypes).
        configs: how many configs the autotuner had to benchmark.
        skipped: why the manifest that recorded the kernel did not warm it, so it was neither
            warmed nor given its recorded tuning choices (as :attr:`RuntimeCompile.skipped`);
            None when no manifest recorded it.
    """

    kernel: str
    tuning_key: tuple
    configs: int
    direct: bool = False  # RuntimeJitError's question: blocked before it ran (always)
    skipped: str | None = None

    def summary(self) -> str:
        return f"autotune benchmark of {self.kernel} at tuning key {self.tuning_key} ({self.configs} configs)"

    def explain(self, *, blocked: bool = False) -> str:
        verb = "blocked" if blocked else "ran"
        if self.skipped is not None:
            return (f"{self.summary()} {verb} after warm-up: none of its recorded tuning choices was restored: the "
                    f"manifest recorded it, but {self.skipped}")
        return (f"{self.summary()} {verb} after warm-up: wrap the kernel in a zerojit kernel class and warm it "
                "(zerojit.autotune: an untuned key then takes the nearest tuned key's config, else the first "
                "surviving one), or tune this key at warm-up, so the choice is known before serving (a kernel "
                "nobody rewrote: record the program on a GPU, whose manifest then holds its choices for zerojit exec)")

    def __str__(self) -> str:
        return self.summary()


class RuntimeJitError(RuntimeError):
    """A compile after warm-up under a monitor in error mode. ``.compile`` is the :class:`RuntimeCompile`."""

    def __init__(self, record: RuntimeCompile) -> None:
        super().__init__(record.explain(blocked=not record.direct))
        self.compile = record


class CaptureCompileError(RuntimeJitError):
    """A miss (or an autotuner benchmark) during a CUDA-graph capture, in any monitor mode: compiling
    or loading a module inside a capture breaks it (CUDA refuses the operation while a stream is
    capturing), so the monitor refused it before Triton compiled or loaded anything
    (:mod:`zerojit.capture` counts the captures open, on every thread). The message names the
    kernel, its Triton key and the runtime specialization; ``.compile`` is the record. Warm the
    key before capturing (a generic variant the fallback serves is a hit and is captured). ``mode``:
    the monitor's mode, named in the message. The refused miss is counted as a blocked miss
    (:attr:`MonitorCounts.blocked`, in the runtime compiles), in every mode."""

    def __init__(self, record: Any, mode: str = "error") -> None:
        compile_miss = isinstance(record, RuntimeCompile)
        what = (f"missed Triton key {record.triton_key}" if compile_miss
                else f"would benchmark its configs for tuning key {record.tuning_key}")
        RuntimeError.__init__(self, (
            f"zerojit: kernel {record.kernel!r} {what} during a CUDA-graph capture: "
            "a CUDA-graph capture forbids compiling or loading a module (it would break the capture), so nothing "
            "was compiled or loaded; warm this key before capturing (a generic variant, in fallback mode, serves a "
            "key of its group).\n"
            + (record.explain(blocked=True, capture_mode=mode) if compile_miss else record.explain(blocked=True))))
        self.compile = record


@dataclass(frozen=True)
class MissCount:
    """How often one distinct runtime compile happened, and how it ended.

    ``misses == compiled + disk_loads + blocked`` (plus any miss whose compile raised).
    """

    compile: RuntimeCompile
    misses: int
    compiled: int
    disk_loads: int
    blocked: int
    thread: str = ""  #: the name of the thread of the latest miss
    thread_id: int = 0  #: its ``threading.get_ident()``


@dataclass(frozen=True)
class MonitorCounts:
    """The monitor's totals: ``runtime_compiles`` is every in-process cache miss after warm-up."""

    runtime_compiles: int = 0
    compiled: int = 0
    disk_loads: int = 0
    blocked: int = 0
    distinct: int = 0
    direct_compiles: int = 0
    direct_disk_loads: int = 0
    launches: int = 0
    benchmarks: int = 0  #: autotune benchmarks after warm-up (runtime events of their own kind)

    #: misses that compiled or loaded from Triton's disk cache on the request path, plus direct
    #: compiles (``compiled + disk_loads + direct_compiles + direct_disk_loads``): what a request
    #: waited for. Fallback mode's exit status is 0 iff this is 0.
    request_path_compiles: int = 0
    fallback_launches: int = 0  #: launches a generic variant served in place of a missing key (fallback mode)
    #: specialized keys a background worker made ready (compiled, or found on disk) (fallback mode)
    background_compiles: int = 0
    swaps: int = 0  #: specialized variants swapped in over the generic one (fallback mode)
    #: background compiles that gave no variant (failed twice, or the compile failed): their
    #: generic variant keeps serving (fallback mode; each is a ``zerojit.serving.failures()`` entry)
    background_failures: int = 0

    @property
    def any_runtime_compile(self) -> bool:
        return bool(self.runtime_compiles or self.direct_compiles or self.direct_disk_loads)


@dataclass
class _Stats:  # mutable, only touched under the monitor's lock
    record: RuntimeCompile
    jit_fn: Any = None
    misses: int = 0
    compiled: int = 0
    disk_loads: int = 0
    blocked: int = 0
    thread: tuple[str, int] = ("", 0)

    def frozen(self) -> MissCount:
        return MissCount(self.record, self.misses, self.compiled, self.disk_loads, self.blocked, *self.thread)


@dataclass
class _Launches:
    kernel: Any
    compiled: Any
    count: int
    triton_key: str | None  # found when first seen, for a variant that was not warmed
    #: the triton.jit function whose in-process cache holds it under ``triton_key``: the kernel's
    #: own, or a program's ``__main__`` function ``zerojit exec`` launched as the kernel
    jit_fn: Any = None


class _LaunchCounter:
    """One compiled kernel's launches: ``next(counter)`` per launch (atomic in CPython, so the
    launch path counts without a lock), its value read back from the counter's repr."""

    __slots__ = ("kernel", "compiled", "counter", "triton_key", "jit_fn")

    def __init__(self, kernel: Any, compiled: Any, triton_key: str | None, jit_fn: Any = None) -> None:
        self.kernel, self.compiled, self.triton_key, self.jit_fn = kernel, compiled, triton_key, jit_fn
        self.counter = itertools.count()

    @property
    def count(self) -> int:
        return int(repr(self.counter)[6:-1])  # "count(N)": N launches counted so far

    def frozen(self) -> _Launches:
        return _Launches(self.kernel, self.compiled, self.count, self.triton_key, self.jit_fn)


@dataclass(frozen=True)
class MonitorSnapshot:
    """A consistent copy of what a monitor saw, for :mod:`zerojit.audit`."""

    mode: str
    variants: tuple[Any, ...]
    misses: tuple[MissCount, ...]
    miss_fns: tuple[Any, ...]
    direct: tuple[MissCount, ...]
    launches: tuple[_Launches, ...] = ()
    benchmarks: tuple[tuple[RuntimeBenchmark, int], ...] = ()  #: each distinct one and how often
    growing: tuple[GrowingParameter, ...] = ()


# ---------------------------------------------------------------------------------------------
# Hook chains
# ---------------------------------------------------------------------------------------------


class _Link:
    """One monitor's place in a hook chain: the hook set before it runs first, then the monitor.

    ``replaced``: hooks another party assigned over this link after it was installed, newest
    first (:func:`_guard`, :meth:`JitMonitor._repair`). The link stays on top and calls the newest
    one; a replacement that calls the hook it read (this link) reaches the next older one, and
    the oldest reaches ``previous``; the monitor's handler runs once, after the outermost call.
    """

    __slots__ = ("handler", "previous", "enabled", "owner", "replaced", "depth")

    def __init__(self, handler: Callable[..., Any], previous: Callable[..., Any] | None, owner: "JitMonitor") -> None:
        self.handler = handler
        self.previous = previous
        self.enabled = True
        self.owner = owner
        self.replaced: list[Any] = []
        self.depth = threading.local()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.replaced:
            return self._call_replaced(args, kwargs)
        previous = self.previous
        result = previous(*args, **kwargs) if previous is not None else None
        if self.enabled:
            self.handler(result, *args, **kwargs)
        return result

    def _call_replaced(self, args: tuple, kwargs: dict) -> Any:
        depth = getattr(self.depth, "n", 0)
        chain = [*self.replaced, self.previous]
        target = chain[depth] if depth < len(chain) else None
        self.depth.n = depth + 1
        try:
            result = target(*args, **kwargs) if target is not None else None
        finally:
            self.depth.n = depth
        if depth == 0 and self.enabled:
            self.handler(result, *args, **kwargs)
        return result

    def __repr__(self) -> str:
        return f"<zerojit monitor hook of {self.owner!r}>"


class _ObserverLink(_Link):
    """The launch observer's link. Called on every zerojit launch, so what Triton-free code holds
    as the observer is :attr:`observe` (a bound method: no instance-call dispatch), which counts a
    launch of a compiled kernel seen before with one dict lookup and one C call; ``handler``
    sees the first launch of each (``counters``: compiled kernel -> its counter's ``__next__``).

    With nothing below it in the chain, :attr:`observe` returns that ``__next__`` (a launch
    counter, :func:`zerojit.kernel.set_launch_observer`), which the fast path then calls instead
    of the observer. A reset and a switch to mode off forget the counters handed out
    (:func:`zerojit.kernel.reset_launch_counters`, after this link's are cleared), as does every
    change of the observer; a link with another observer below it hands out none, so taking that
    one out needs no reset."""

    __slots__ = ("counters", "observe")

    def __init__(self, handler: Callable[..., Any], previous: Callable[..., Any] | None, owner: "JitMonitor") -> None:
        super().__init__(handler, previous, owner)
        self.counters: dict[Any, Any] = {}
        self.observe = self._observe

    def __call__(self, kernel: Any, compiled: Any) -> Any:
        return self._observe(kernel, compiled)

    def _observe(self, kernel: Any, compiled: Any) -> Any:
        previous = self.previous
        if previous is not None:  # (what is below must see every launch: no counter is returned)
            (previous.observe if previous.__class__ is _ObserverLink else previous)(kernel, compiled)
        if self.enabled:
            count = self.counters.get(compiled)
            if count is None:
                self.handler(None, kernel, compiled)
                count = self.counters.get(compiled)  # None where it did not count (mode off)
            else:
                count()
            if previous is None:
                return count
        return None


setattr(_ObserverLink, _kernel.RETURNS_LAUNCH_COUNTERS, True)  # observe returns launch counters


def _unlink(link: _Link, get: Callable[[], Any], set_: Callable[[Any], Any]) -> None:
    top = get()
    if top is link and link.replaced:  # the newest replacement goes back on top; it may call this link
        newest = link.replaced[0]
        link.replaced = []
        link.enabled = False  # a pass-through to what was below it at install
        set_(newest)
        return
    if top is link:
        set_(link.previous)
        return
    node = top
    while isinstance(node, _Link):
        if node.previous is link:
            node.previous = link.previous
            return
        node = node.previous
    link.enabled = False  # a foreign hook wraps ours: stay in its chain as a pass-through


def _get_observer():
    observer = _kernel.launch_observer()
    link = getattr(observer, "__self__", None)  # a link is installed as its bound ``observe``
    return link if link.__class__ is _ObserverLink and link.observe is observer else observer


def _set_observer(observer):
    _kernel.set_launch_observer(observer.observe if observer.__class__ is _ObserverLink else observer)


def _repin() -> None:
    """Tell the launch path what Triton's two compile-hook slots hold while a monitor is
    installed (:func:`zerojit.kernel.set_hook_pins`), so it notices a write past the guard."""
    with _CHAIN_LOCK:
        _kernel.set_hook_pins((_get_cache_hook(), _get_listener(), _repair_installed) if _INSTALLED else None)


def _repair_installed() -> None:
    """Every installed monitor back on top of Triton's slots (in install order), then pinned anew."""
    with _CHAIN_LOCK:
        for monitor in list(_INSTALLED):
            monitor._repair()
        _repin()


#: The attribute by which a ``jit_cache_hook`` that is no monitor's link but calls the hook it
#: replaced first (zerojit's own, e.g. the runner's request-path clock) names that hook. A monitor
#: below such a hook still finds itself in the chain through it, so two monitors with it between
#: them do not take each other for a replacement (a foreign hook hides what it calls).
CHAINED_TO = "zerojit_chained_to"


def _reaches(top: Any, link: _Link) -> bool:
    """``link`` is ``top`` or below it through zerojit links and hooks that name the hook they
    call (:data:`CHAINED_TO`)."""
    node, seen = top, set()
    while node is not None and id(node) not in seen:  # (a chain that names itself ends the walk)
        if node is link:
            return True
        seen.add(id(node))
        node = node.previous if isinstance(node, _Link) else getattr(node, CHAINED_TO, None)
    return False


def _guard(slot: str) -> Callable[[Any, Any], Any]:
    """The guard of one Triton hook slot (:func:`zerojit.triton_compat.guard_hook_assignments`):
    another party's assignment over an installed monitor's link keeps the link on top, calling the
    new hook first (error mode still blocks before Triton compiles); assigning the link back (the
    hook that party read) ends its replacement."""

    def guard(current: Any, new: Any) -> Any:
        with _CHAIN_LOCK:
            if not (isinstance(current, _Link) and current.enabled and current.owner._links is not None):
                return new
            if new is current:
                if current.replaced:
                    current.replaced.pop(0)
                return current
            current.replaced.insert(0, new)
        current.owner._note_replaced(slot, new)
        return current

    return guard


_CHAIN_LOCK = threading.RLock()
_INSTALLED: list["JitMonitor"] = []


# ---------------------------------------------------------------------------------------------
# The monitor
# ---------------------------------------------------------------------------------------------


def _is_contract_function(jit_fn: Any) -> bool:
    """True when a zerojit kernel class (not one made from a manifest) wraps ``jit_fn``."""
    stack = list(TritonJitKernel.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__dict__.get("kernel") is jit_fn and cls.CompileKey is not RecordedKey:
            return True
        stack.extend(cls.__subclasses__())
    return False


_PROCESS_WARMUPS: Any = object()  # JitMonitor(report=...) left out: this process's warm-ups


class JitMonitor:
    """Counts (warn) or blocks (error) every compile after warm-up, or serves misses with generic
    variants (fallback); see the module doc.

    Args:
        mode: ``"off" | "warn" | "error" | "fallback"`` (``"off"``: :meth:`install` installs nothing).
        report: a :class:`~zerojit.registry.WarmupReport` (or a list of them; more via
            :meth:`add_report`) whose warmed keys explain misses and are audited. Left out: every
            warm-up this process has completed so far (:func:`zerojit.registry.warmup_reports`),
            so that a monitor built after ``registry.warmup()`` names the nearest warmed key;
            ``report=()`` starts with none.
        no_warmup_note: why nothing was warmed, when that is deliberate (``"--warmup none"``):
            while the monitor holds no warmed key at all, a runtime compile is explained as
            "no zerojit warm-up ran (<note>)" instead of as a dropped registration.
        growth_limit: distinct runtime values of one parameter of one kernel after which the
            monitor logs one line naming it and the fix, and no longer one line per new value
            (:mod:`zerojit.growth`; default :data:`~zerojit.growth.DEFAULT_GROWTH_LIMIT`).
        fallback: the :class:`FallbackOptions` of fallback mode (None: the defaults); kept, and
            used, only while the mode is ``"fallback"``.
        learn: append each distinct miss (warn and error mode) to the learned-keys file, which
            the next warm-up warms (:mod:`zerojit.learned`; off also with ``ZEROJIT_LEARN=0``).

    Usable as a context manager (install on enter, uninstall on exit). Thread-safe: counters and
    records are updated under one lock; warn mode logs once per distinct (kernel, Triton key).
    """

    def __init__(self, mode: str = "warn", *, report: Any = _PROCESS_WARMUPS, no_warmup_note: str | None = None,
                 growth_limit: int = DEFAULT_GROWTH_LIMIT, fallback: FallbackOptions | None = None,
                 learn: bool = True) -> None:
        self._mode = _check_mode(mode)
        if fallback is not None and not isinstance(fallback, FallbackOptions):
            raise TypeError(f"JitMonitor(fallback=...) takes a FallbackOptions, not {type(fallback).__name__}")
        self._fallback = fallback or FallbackOptions()
        self._attachment: Any = None  # the serving layer's, while installed in fallback mode
        self._fallback_done = {"fallback_launches": 0, "background_compiles": 0, "swaps": 0,  # of past attachments
                               "background_failures": 0}
        self._learn = learn
        self._growth = GrowthTracker(growth_limit)
        self._no_warmup_note = no_warmup_note
        self._lock = threading.RLock()
        self._links: tuple[_Link, _Link, _Link] | None = None
        self._reports: list[Any] = []
        self._variants: list[Any] = []  # warmed CompiledVariants, warm-up order, deduplicated
        self._variant_ids: dict[int, Any] = {}
        self._by_fn: dict[int, list[Any]] = {}
        self._names: dict[int, str] = {}  # id(jit function) -> zerojit kernel name
        self._misses: dict[tuple[int, str], _Stats] = {}
        self._direct: dict[Any, _Stats] = {}
        self._pending: dict[int, tuple[Any, _Stats]] = {}  # id(signature dict) -> (dict, stats)
        self._launches: dict[int, _LaunchCounter] = {}
        self._benchmarks: dict[tuple[int, tuple], list] = {}  # (id(autotuner), tuning key) -> [record, count]
        # id(autotuner) -> (the run last counted, the ids of the configs it benchmarked so far)
        self._bench_runs: dict[int, tuple[int, set[int]]] = {}
        self._replaced_slots: set[str] = set()
        if report is _PROCESS_WARMUPS:
            report = _registry.warmup_reports()
        if report is None or isinstance(report, (list, tuple)):
            for r in report or ():
                self.add_report(r)
        else:
            self.add_report(report)

    # -- configuration ---------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        self._mode = _check_mode(mode)
        if self._links is not None and self._mode == "fallback":
            self._attach()
        elif self._links is not None:
            self._detach()
        links = self._links
        if links is not None and self._mode == "off":  # counted no more: launches go to _on_launch
            links[2].counters.clear()
            _kernel.reset_launch_counters()  # (after the clear: the fast path asks the link again)

    @property
    def fallback_options(self) -> FallbackOptions:
        """The :class:`FallbackOptions` of fallback mode."""
        return self._fallback

    def _attach(self) -> None:
        """Install the serving layer's fallback for this monitor (fallback mode, once).

        Raises:
            RuntimeError: no provider is registered, or it refused (another fallback-mode
                monitor is installed).
        """
        with self._lock:
            if self._attachment is not None:
                return
            if _fallback_provider is None:
                raise RuntimeError("zerojit: fallback mode needs zerojit.serving, which registers it when imported "
                                   "(import zerojit does)")
            self._attachment = _fallback_provider(self)

    def _detach(self) -> None:
        with self._lock:
            attachment, self._attachment = self._attachment, None
            if attachment is not None:
                for k, v in attachment.counts(self._launch_counts()).items():
                    self._fallback_done[k] += v
        if attachment is not None:
            attachment.detach()

    @property
    def learn(self) -> bool:
        """Whether this monitor's misses (and, in fallback mode, the misses it serves) go to the
        learned-keys file (``JitMonitor(learn=...)``; ``ZEROJIT_LEARN=0`` turns it off too)."""
        return self._learn

    @property
    def installed(self) -> bool:
        """The monitor is in Triton's hook chains now: its cache hook and listener are reachable
        from Triton's slots (a hook written past the guard, e.g. into ``knobs.runtime.__dict__``,
        takes it out until the next launch or compile repairs the chain)."""
        links = self._links
        return links is not None and _reaches(_get_cache_hook(), links[0]) and _reaches(_get_listener(), links[1])

    def add_report(self, report: Any) -> None:
        """Add a warm-up report's variants (or any iterable of CompiledVariants) to the warmed set
        (a report already added is not added again)."""
        variants = report.variants if hasattr(report, "variants") else list(report)
        with self._lock:
            if hasattr(report, "variants"):
                if any(r is report for r in self._reports):
                    return
                self._reports.append(report)
            for v in variants:
                compiled = getattr(v, "compiled", None)
                if compiled is None or id(compiled) in self._variant_ids:
                    continue
                self._variant_ids[id(compiled)] = v
                self._variants.append(v)
                source = source_of(compiled)
                fn = source[0] if source is not None else None
                if fn is not None:
                    self._by_fn.setdefault(id(fn), []).append(v)
                    self._names.setdefault(id(fn), v.kernel)

    @property
    def reports(self) -> tuple[Any, ...]:
        return tuple(self._reports)

    @property
    def warmed_variants(self) -> tuple[Any, ...]:
        """Every warmed CompiledVariant known to the monitor, in warm-up order."""
        with self._lock:
            return tuple(self._variants)

    # -- install / uninstall ---------------------------------------------------------------------

    def install(self) -> "JitMonitor":
        """Chain onto Triton's cache hook and compile listener and zerojit's launch observer.

        A no-op in ``off`` mode or when already installed. Returns self.
        """
        if self._mode == "off":
            return self
        with _CHAIN_LOCK:
            if self._links is not None:
                return self
            cache = _Link(self._on_cache_miss, _get_cache_hook(), self)
            listen = _Link(self._on_compiled, _get_listener(), self)
            observe = _ObserverLink(self._on_launch, _get_observer(), self)
            _set_cache_hook(cache)
            _set_listener(listen)
            _set_observer(observe)
            self._links = (cache, listen, observe)
            _tc.add_bench_listener(self._on_bench)
            _INSTALLED.append(self)
            guard_hook_assignments(_guard("jit_cache_hook"), _guard("compile listener"))
            _repin()
        _capture.install()  # captures on every thread are counted from now on (the miss gate below)
        if self._mode == "fallback":
            try:
                self._attach()
            except BaseException:  # (another fallback installed): not installed at all
                self.uninstall()
                raise
        return self

    def _note_replaced(self, slot: str, new: Any) -> None:
        """Log, once per slot, that another party replaced Triton's ``slot`` after install."""
        with self._lock:
            if slot in self._replaced_slots:
                return
            self._replaced_slots.add(slot)
        who = getattr(new, "__qualname__", None) or repr(new)
        logger.warning("zerojit: Triton's %s was replaced after the JIT monitor was installed (by %s); the monitor "
                       "keeps its place on top and calls the new one first, so %s mode still sees every compile",
                       slot, who, self._mode)

    def _repair(self) -> set[str]:
        """Put the monitor's links back on top of Triton's slots where a write past the guard took
        them out, wrapping what is there now; returns the slots repaired."""
        links = self._links
        repaired: set[str] = set()
        if links is None:
            return repaired
        with _CHAIN_LOCK:
            for link, get, set_, slot in ((links[0], _get_cache_hook, _set_cache_hook, "jit_cache_hook"),
                                          (links[1], _get_listener, _set_listener, "compile listener")):
                top = get()
                if not _reaches(top, link):
                    link.replaced.insert(0, top)
                    set_(link)
                    repaired.add(slot)
                    self._note_replaced(slot, top)
            if repaired:
                _repin()
        return repaired

    def uninstall(self) -> None:
        """Take the monitor out of the chains (restoring what was there before when on top)."""
        with _CHAIN_LOCK:
            if self._links is None:
                return
            cache, listen, observe = self._links
            _unlink(cache, _get_cache_hook, _set_cache_hook)
            _unlink(listen, _get_listener, _set_listener)
            _unlink(observe, _get_observer, _set_observer)
            self._links = None
            _tc.remove_bench_listener(self._on_bench)
            if self in _INSTALLED:
                _INSTALLED.remove(self)
            _repin()
        self._detach()

    def __enter__(self) -> "JitMonitor":
        return self.install()

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "not installed"
        return f"<JitMonitor mode={self._mode!r} {state}, {len(self._variants)} warmed variants>"

    # -- results ---------------------------------------------------------------------------------

    def misses(self) -> tuple[MissCount, ...]:
        """Every distinct runtime compile (through a triton.jit launch), first seen first."""
        with self._lock:
            return tuple(s.frozen() for s in self._misses.values())

    def direct_compiles(self) -> tuple[MissCount, ...]:
        """Every distinct direct ``triton.compile`` after warm-up (``blocked`` is always 0)."""
        with self._lock:
            return tuple(s.frozen() for s in self._direct.values())

    @property
    def runtime_compiles(self) -> tuple[RuntimeCompile, ...]:
        """The distinct runtime compiles, then the distinct direct compiles."""
        return tuple(m.compile for m in self.misses() + self.direct_compiles())

    def counts(self) -> MonitorCounts:
        """The totals (:class:`MonitorCounts`); ``fallback_launches``, ``background_compiles``,
        ``swaps`` and ``background_failures`` include those of earlier fallback-mode installs of
        this monitor."""
        with self._lock:
            misses = list(self._misses.values())
            direct = list(self._direct.values())
            served = dict(self._fallback_done)
            if self._attachment is not None:
                for k, v in self._attachment.counts(self._launch_counts()).items():
                    served[k] += v
            compiled, disk_loads = sum(s.compiled for s in misses), sum(s.disk_loads for s in misses)
            direct_compiles, direct_loads = sum(s.compiled for s in direct), sum(s.disk_loads for s in direct)
            return MonitorCounts(
                runtime_compiles=sum(s.misses for s in misses),
                compiled=compiled,
                disk_loads=disk_loads,
                blocked=sum(s.blocked for s in misses),
                distinct=len(misses),
                direct_compiles=direct_compiles,
                direct_disk_loads=direct_loads,
                launches=sum(e.count for e in self._launches.values()),
                benchmarks=sum(c for _, c in self._benchmarks.values()),
                request_path_compiles=compiled + disk_loads + direct_compiles + direct_loads,
                **served,
            )

    def _launch_counts(self) -> dict[int, int]:
        """id(compiled kernel) -> its launches seen so far (under the lock)."""
        return {ident: entry.count for ident, entry in self._launches.items()}

    def benchmarks(self) -> tuple[tuple[RuntimeBenchmark, int], ...]:
        """Every distinct autotune benchmark after warm-up and how often it ran, first seen first."""
        with self._lock:
            return tuple((r, c) for r, c in self._benchmarks.values())

    def snapshot(self) -> MonitorSnapshot:
        with self._lock:
            return MonitorSnapshot(
                mode=self._mode,
                variants=tuple(self._variants),
                misses=tuple(s.frozen() for s in self._misses.values()),
                miss_fns=tuple(s.jit_fn for s in self._misses.values()),
                direct=tuple(s.frozen() for s in self._direct.values()),
                launches=tuple(e.frozen() for e in self._launches.values()),
                benchmarks=tuple((r, c) for r, c in self._benchmarks.values()),
                growing=self._growth.growing(),
            )

    def growing(self) -> tuple[GrowingParameter, ...]:
        """Every parameter whose runtime values keep growing the key space (:mod:`zerojit.growth`)."""
        with self._lock:
            return self._growth.growing()

    def reset(self) -> None:
        """Forget counts and records (warmed variants are kept)."""
        with self._lock:
            self._misses.clear()
            self._direct.clear()
            self._pending.clear()
            self._launches.clear()
            if self._links is not None:
                self._links[2].counters.clear()
                _kernel.reset_launch_counters()
            self._benchmarks.clear()
            self._bench_runs.clear()
            self._growth.reset()
            self._fallback_done = dict.fromkeys(self._fallback_done, 0)
            if self._attachment is not None:
                self._attachment.reset()

    # -- naming and explaining -------------------------------------------------------------------

    def kernel_name(self, jit_fn: Any) -> str:
        """The zerojit name of a Triton function: from warmed variants, launches, or kernel classes."""
        name = self._names.get(id(jit_fn))
        if name is not None:
            return name
        rebuilt = rebuilt_of(jit_fn)  # a __main__ function zerojit exec bound: the rebuilt one's name
        if rebuilt is not None:
            return self.kernel_name(rebuilt)
        stack = list(TritonJitKernel.__subclasses__())
        while stack:
            cls = stack.pop()
            if cls.__dict__.get("kernel") is jit_fn:
                self._names[id(jit_fn)] = cls.name
                return cls.name
            stack.extend(cls.__subclasses__())
        fn = getattr(jit_fn, "fn", None)
        return getattr(fn, "__name__", None) or getattr(jit_fn, "__name__", repr(jit_fn))

    def _candidates(self, jit_fn: Any, name: str) -> list[Any]:
        found = self._by_fn.get(id(jit_fn)) if jit_fn is not None else None
        if not found and jit_fn is not None:  # a __main__ function zerojit exec bound: the rebuilt one's keys
            rebuilt = rebuilt_of(jit_fn)
            found = self._by_fn.get(id(rebuilt)) if rebuilt is not None else None
        return list(found) if found else [v for v in self._variants if v.kernel == name]

    def _explain(self, jit_fn: Any, name: str, spec: tuple[SpecClass, ...], triton_key: str, direct: bool) -> RuntimeCompile:
        """The runtime compile of ``jit_fn`` with classes ``spec``, explained against the nearest
        warmed key of the kernel: the one with the fewest arguments whose class differs (a launch
        option that differs counts as one), then the fewest ints that differ only in width (an
        i64 ``n`` divisible by 16 is nearer the i32 divisible-by-16 key, one value range away,
        than the equal-to-one key: Triton's value classes are what a key space chooses, a width
        follows the value's size), then the first warmed."""
        params = tuple(p.name for p in jit_fn.params) if jit_fn is not None else ()
        fn = getattr(jit_fn, "fn", None)
        function = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else name
        options = _parse_options(_options_part(triton_key)) if triton_key else None
        candidates = self._candidates(jit_fn, name)
        constexprs = constexpr_parameters(jit_fn) if jit_fn is not None else frozenset()
        unaligned_ok = alignment_unspecialized_parameters(jit_fn) if jit_fn is not None else frozenset()
        best = None
        for order, v in enumerate(candidates, start=1):
            diffs = tuple(ArgDifference(n, w, c, n in constexprs)
                          for n, w, c in zip(params or v.param_names, v.specialization, spec) if w != c)
            opt_diff = None
            if triton_key and v.triton_key:
                warmed_text, called_text = _options_part(v.triton_key), _options_part(triton_key)
                if warmed_text != called_text:
                    wo, co = _parse_options(warmed_text) or {}, _parse_options(called_text) or {}
                    names = [k for k in dict.fromkeys([*wo, *co]) if wo.get(k, "<default>") != co.get(k, "<default>")]
                    opt_diff = ("launch options: warmed with " + (", ".join(f"{k}={wo[k]!r}" for k in names if k in wo) or "defaults")
                                + ", called with " + (", ".join(f"{k}={co[k]!r}" for k in names if k in co) or "defaults"))
                    if not names:  # the same options, passed in another order: Triton keys on str(options)
                        opt_diff = f"launch options in another order: warmed with {warmed_text}, called with {called_text}"
            widths = sum(d.warmed.kind == d.called.kind == "int" and d.warmed.attr == d.called.attr for d in diffs)
            # ties go to the nearest constexpr values (B=17 after 1..16 warmed: B=16, not B=1)
            apart = sum(abs(d.warmed.attr - d.called.attr) for d in diffs
                        if type(d.warmed.attr) is int and type(d.called.attr) is int)
            score = (len(diffs) - widths + (opt_diff is not None), widths, apart)
            if best is None or score < best[0]:
                best = (score, order, v, diffs, opt_diff)
        record = RuntimeCompile(
            kernel=name, function=function, param_names=params, specialization=spec, triton_key=triton_key,
            options=_shown_options(options), warmed_count=len(candidates), direct=direct,
            registered_without_keys=not candidates and any(
                k.kernel == name and not k.keys for r in self._reports for k in getattr(r, "kernels", ())),
            constexprs=constexprs, alignment_unspecialized=unaligned_ok,
        )
        if not self._variants and self._no_warmup_note is not None:
            record = dataclasses.replace(record, no_warmup=f"no zerojit warm-up ran ({self._no_warmup_note})")
        if best is not None:
            _, order, v, diffs, opt_diff = best
            recorded = isinstance(v.key, RecordedKey)
            record = dataclasses.replace(record, nearest_key=repr(v.key), nearest_index=order,
                                         differences=diffs, option_difference=opt_diff, recorded=recorded,
                                         widen=self._widen(function, jit_fn, params or v.param_names, diffs,
                                                           candidates)
                                         if recorded else None)
        elif jit_fn is not None and not direct and not _is_contract_function(jit_fn):
            record = dataclasses.replace(record, unmigrated=True, skipped=self._skipped(jit_fn, function))
        return record

    def _skipped(self, jit_fn: Any, function: str) -> str | None:
        """Why ``jit_fn`` (``module.qualname``: ``function``), which a manifest recorded, was not
        warmed, as a clause after "the manifest recorded it, but" (:attr:`RuntimeCompile.skipped`);
        None when no manifest recorded it."""
        unbound = unbound_reason(jit_fn)  # zerojit exec's binding of a __main__ function
        if unbound is not None:
            return unbound
        skips = [skip.reason for r in self._reports for skip in getattr(r, "skipped", ()) if skip.kernel == function]
        if not skips:
            return None
        return skips[-1] if skips[-1].startswith(SOURCE_CHANGED) else f"its warm-up skipped it: {skips[-1]}"

    def _widen(self, function: str, jit_fn: Any, params: tuple[str, ...], diffs: tuple[ArgDifference, ...],
               candidates: list[Any]) -> str | None:
        """The ``zerojit manifest widen`` command warming each int or bool constexpr of ``diffs``
        over the values warmed and called (None when no such constexpr differs); the manifest is
        the last one warmed (``MANIFEST`` when not known). A constexpr that sets a shape
        (:func:`zerojit.shapeflow.shape_parameters` of ``jit_fn``; any, where its source cannot be
        read) gets powers of two only where its values are (``tl.arange`` compiles no others).
        A range of :data:`_WIDEN_RANGE_MAX` values or more (a hidden size: 4090 called, 4096
        warmed) is the values themselves instead (``4090,4096``): a range would be thousands of
        variants for one miss, past the key budget ``widen`` refuses."""
        shapes = None
        if jit_fn is not None:
            try:
                shapes = shape_parameters(jit_fn)
            except Exception:  # a source Triton parses but this reading does not: shape not known
                shapes = None
        axes = []
        for d in diffs:
            if not d.widenable:
                continue
            i = params.index(d.name)
            values = {v.specialization[i].attr for v in candidates if _settable(v.specialization[i])} | {d.called.attr}
            shape = shapes is None or d.name in shapes
            suggested = suggested_values(values, shape=shape)
            low, dots, high = suggested.partition("..")
            if dots and int(high) - int(low) >= _WIDEN_RANGE_MAX:  # (1..4096 for 4090 and 4096: 4096 variants)
                suggested = ",".join(str(v) for v in sorted(values))
            axes.append(f"{function}:{d.name}={suggested}")
        if not axes:
            return None
        path = next((r.manifest for r in reversed(self._reports) if getattr(r, "manifest", None)), "MANIFEST")
        return widen_command(path, axes)

    # -- the three handlers ----------------------------------------------------------------------

    def _on_bench(self, tuner: Any, config: Any, named: dict, run: int) -> None:
        """Before each config benchmark of any autotuner (zerojit.triton_compat.add_bench_listener):
        one event per autotuner run, counted; error mode raises before the first config runs;
        warn mode logs once per autotuner and tuning key (an autotuner under compile-only keeps
        no choice from a dry benchmark, so it benchmarks at every launch: a line each would bury
        the log), the count is in :meth:`benchmarks` and the counts."""
        if self._mode == "off" or in_warmup():
            return
        capturing = _capture.capturing()
        with self._lock:
            last = self._bench_runs.get(id(tuner))
            # The run's next config: counted with its first. A config seen again starts a new run
            # even under the same ``run`` (an id of the run's argument dict, which a later run's
            # dict may reuse once the earlier one is freed: one run in ten went uncounted so).
            if last is not None and last[0] == run and id(config) not in last[1] and not capturing:
                last[1].add(id(config))
                return
            self._bench_runs[id(tuner)] = (run, {id(config)})
            key = _tc.tuning_key(tuner, named)
            entry = self._benchmarks.get((id(tuner), key))
            first = entry is None
            if first:
                fn = tuner
                while not isinstance(fn, _tc.JITFunction) and hasattr(fn, "fn"):
                    fn = fn.fn
                name = self.kernel_name(fn) if isinstance(fn, _tc.JITFunction) else repr(tuner)
                function = ".".join(_tc.jit_identity(fn)) if isinstance(fn, _tc.JITFunction) else None
                skipped = self._skipped(fn, function) if function is not None else None
                entry = self._benchmarks[(id(tuner), key)] = [
                    RuntimeBenchmark(name, key, len(_tc.autotune_configs(tuner)), skipped=skipped), 0]
            entry[1] += 1
            record = entry[0]
        if capturing:  # a benchmark launches, times and synchronizes: not inside a capture
            logger.error("zerojit: blocked %s during a CUDA-graph capture", record.summary())
            raise CaptureCompileError(record, self._mode)
        if self._mode == "error":
            logger.error("zerojit: blocked %s", record.summary())
            raise RuntimeJitError(record)
        if first:
            logger.warning("zerojit: %s after warm-up (logged once per tuning key; all counted)", record.summary())

    def _on_cache_miss(self, previous_result: Any, *, key: str, fn: Any, compile: dict, **_: Any) -> None:
        if previous_result or self._mode == "off" or in_warmup():
            return  # a user hook took the compile over, or this compile is deliberate
        jit_fn = hook_jit_function(fn)
        # every mode: nothing compiles or loads inside a CUDA-graph capture; the refusal is counted
        # (a blocked miss), so a caller asserting 0 runtime compiles / 0 blocked sees it
        capturing = _capture.capturing()
        mode = self._mode
        fallback = mode == "fallback"
        if fallback:  # a miss no generic variant served (zerojit.serving): as warn, or error when asked
            mode = "error" if self._fallback.fallback_miss == "error" else "warn"
        with self._lock:
            ident = (id(jit_fn), key)
            stats = self._misses.get(ident)
            first = stats is None
            request = hook_compile_request(compile)
            crossed, quiet = [], False
            if first:
                spec = specialization_from_compile_info(jit_fn, request.signature, request.constants, request.attrs)
                record = self._explain(jit_fn, self.kernel_name(jit_fn), spec, key, direct=False)
                if fallback:
                    record = dataclasses.replace(record, fallback=True, no_generic=not any(
                        fn is jit_fn for fn in _generic.generic_functions()))
                stats = self._misses[ident] = _Stats(record, jit_fn)
                crossed, quiet = self._growth.observe(record.kernel, record.param_names, spec,
                                                      constexpr_parameters(jit_fn))
            stats.misses += 1
            stats.thread = (threading.current_thread().name, threading.get_ident())
            if mode == "error" or capturing:
                stats.blocked += 1
            else:  # the listener call that follows carries this very signature dict
                self._pending[id(request.signature)] = (request.signature, stats)
        if first and self._learn:  # (never raises: an unwritable file is one warning)
            options = _tc.run_options_removed(_parse_options(_options_part(key)) or {})
            _learned.record_miss(jit_fn, stats.record.specialization, options, kernel_name=stats.record.kernel,
                                 background=True)
        log = logger.error if mode == "error" or capturing else logger.warning
        for growing in crossed:
            log("zerojit: %s", growing.summary(self._growth.limit))
        if capturing:
            logger.error("zerojit: blocked %s during a CUDA-graph capture", stats.record.summary())
            raise CaptureCompileError(stats.record, self._mode)
        if mode == "error":
            if first and not quiet:
                logger.error("zerojit: blocked %s", stats.record.summary())
            raise RuntimeJitError(stats.record)
        if first and not quiet:
            logger.warning("zerojit: %s", stats.record.summary())

    def _on_compiled(self, previous_result: Any, *, src: Any, metadata: Any = None, cache_hit: bool = False, **_: Any) -> None:
        source = source_fields(src)
        signature = source[1] if source is not None else None
        with self._lock:
            pending = self._pending.get(id(signature)) if signature is not None else None
            if pending is not None and pending[0] is signature:
                del self._pending[id(signature)]
                if cache_hit:
                    pending[1].disk_loads += 1
                else:
                    pending[1].compiled += 1
                return
        if self._mode == "off" or in_warmup():
            return
        unguarded = "jit_cache_hook" in self._repair()  # a compile the cache hook never saw: it was replaced
        jit_fn = source[0] if source is not None else None
        if jit_fn is not None and hasattr(jit_fn, "params"):
            name = self.kernel_name(jit_fn)
            spec = specialization_from_compile_info(*source)
            ident: Any = (id(jit_fn), spec)
        else:
            jit_fn, name, spec = None, str(getattr(src, "name", src)), ()
            ident = ("ir", name)
        mode = self._mode
        with self._lock:
            stats = self._direct.get(ident)
            first = stats is None
            if first:
                record = self._explain(jit_fn, name, spec, "", direct=True)
                if unguarded:
                    record = dataclasses.replace(record, unguarded=True)
                stats = self._direct[ident] = _Stats(record, jit_fn)
            stats.misses += 1
            stats.thread = (threading.current_thread().name, threading.get_ident())
            if cache_hit:
                stats.disk_loads += 1
            else:
                stats.compiled += 1
        if first:
            (logger.error if mode == "error" else logger.warning)("zerojit: %s", stats.record.summary())
        if mode == "error":
            raise RuntimeJitError(stats.record)

    def _on_launch(self, previous_result: Any, kernel: Any, compiled: Any) -> None:
        """The first launch of ``compiled`` (each later one is a call of its counter's ``__next__``
        in the observer link, or on the fast path): its record, found Triton key and counter."""
        links = self._links
        if compiled is None or self._mode == "off" or links is None:
            return
        counters = links[2].counters
        with self._lock:
            entry = self._launches.get(id(compiled))
        if entry is None:
            jit_fn = launched = getattr(kernel, "kernel", None)
            triton_key = None
            if id(compiled) not in self._variant_ids and jit_fn is not None:  # once per variant: its Triton key
                triton_key = find_in_process_key(jit_fn, compiled)
                if triton_key is None:
                    launched, triton_key = self._missed_by(compiled, jit_fn)
            with self._lock:
                if jit_fn is not None:
                    self._names.setdefault(id(jit_fn), kernel.name)
                entry = self._launches.setdefault(id(compiled), _LaunchCounter(kernel, compiled, triton_key, launched))
        with self._lock:
            counters.setdefault(compiled, entry.counter.__next__)
        next(entry.counter)

    def _missed_by(self, compiled: Any, jit_fn: Any) -> tuple[Any, str | None]:
        """The function a runtime miss compiled ``compiled`` into, and its key there; else
        ``(jit_fn, None)``. A program's ``__main__`` function that ``zerojit exec`` launches as the
        recorded kernel of ``jit_fn`` (bound to it or not: :mod:`zerojit.recording`) compiles its
        misses into its own in-process cache, not into ``jit_fn``'s, and its miss is filed under it."""
        with self._lock:
            fns = {id(s.jit_fn): s.jit_fn for s in self._misses.values()
                   if s.jit_fn is not None and s.jit_fn is not jit_fn}
        for fn in fns.values():
            key = find_in_process_key(fn, compiled)
            if key is not None:
                return fn, key
        return jit_fn, None


# ---------------------------------------------------------------------------------------------
# The process monitor (installed at the end of warm-up)
# ---------------------------------------------------------------------------------------------

_STATE_LOCK = threading.RLock()
_configured: str | None = None
_configured_fallback: FallbackOptions | None = None
_process_monitor: JitMonitor | None = None


def configure(mode: str | None, *, fallback: FallbackOptions | None = None) -> None:
    """Set the process monitor's mode for warm-ups to come (None: follow ``ZEROJIT_JIT_MONITOR``).

    ``"off"`` also uninstalls a process monitor already installed; ``"warn"``/``"error"``/
    ``"fallback"`` switch an installed one's mode at once. ``fallback``: the
    :class:`FallbackOptions` of a process monitor made from now on (None: the defaults).
    """
    global _configured, _configured_fallback
    if mode is not None:
        _check_mode(mode, "--jit-monitor-mode")
    with _STATE_LOCK:
        _configured = mode
        _configured_fallback = fallback
        if _process_monitor is not None and mode is not None:
            if mode == "off":
                shutdown(keep_configuration=True)
            else:
                _process_monitor.mode = mode


def configured_mode() -> str:
    """The mode :func:`on_warmup_complete` will use: :func:`configure`'s, else the env var, else off.

    Raises:
        MonitorModeError: ``ZEROJIT_JIT_MONITOR`` holds something other than off, warn, error or fallback.
    """
    if _configured is not None:
        return _configured
    value = os.environ.get(ENV_VAR, "").strip().lower()
    return _check_mode(value, ENV_VAR, f": unset {ENV_VAR} or set it to one of them") if value else "off"


def current() -> JitMonitor | None:
    """The process monitor installed by warm-up, or None."""
    return _process_monitor


def on_warmup_complete(report: Any) -> JitMonitor | None:
    """Called by :meth:`JitWarmupRegistry.warmup` at its end; returns the process monitor.

    Installs the process monitor when the configured mode is warn/error/fallback (once; later warm-ups add
    their reports to it) and gives ``report`` to every installed monitor. The registry calls it
    (a warm-up listener, :func:`zerojit.registry.add_warmup_listener`) after recording ``report``
    among this process's warm-ups.
    """
    global _process_monitor
    mode = configured_mode()
    with _STATE_LOCK:
        if mode != "off":
            if _process_monitor is None:  # armed from this warm-up on, as before any user monitor
                _process_monitor = JitMonitor(mode, report=(), fallback=_configured_fallback)
            else:
                _process_monitor.mode = mode
            _process_monitor.add_report(report)
            _process_monitor.install()
        with _CHAIN_LOCK:
            others = [m for m in _INSTALLED if m is not _process_monitor]
    for m in others:
        m.add_report(report)
    return _process_monitor


_registry.add_warmup_listener(on_warmup_complete)


def shutdown(*, keep_configuration: bool = False) -> None:
    """Uninstall and forget the process monitor (and, unless asked, the configured mode)."""
    global _process_monitor, _configured, _configured_fallback
    with _STATE_LOCK:
        if _process_monitor is not None:
            _process_monitor.uninstall()
            _process_monitor = None
        if not keep_configuration:
            _configured = None
            _configured_fallback = None


def installed_monitors() -> tuple[JitMonitor, ...]:
    """Every monitor currently installed, oldest first."""
    with _CHAIN_LOCK:
        return tuple(_INSTALLED)

