"""The fallback: a miss after warm-up that a generic variant serves costs no compile.

:class:`FallbackServer` routes every in-process cache miss of each ``triton.jit`` function that
has generic variants (:func:`zerojit.generic.generic_functions`) through its handler
(:func:`zerojit.triton_compat.intercept_misses`; functions whose generic variants are filed
later are added by :meth:`FallbackServer.refresh`, which runs after each warm-up). For a miss
after warm-up (not :func:`zerojit.context.in_warmup`; Triton's own ``warmup`` flag is no guide:
it is True for every dry launch under compile-only):

1. The miss's classes (:func:`zerojit.monitor.specialization_from_compile_info`) give its group
   (:func:`zerojit.generic.group_of`); :func:`zerojit.generic.lookup` finds the group's generic
   variant on the miss's device.
2. Found: a :class:`FallbackVariant` over it is filed in Triton's in-process cache under the
   miss's key and returned, so Triton launches the generic variant with this launch's
   arguments, and later launches of the key are plain hits: no compile, no module load (the
   generic variant was loaded at warm-up), no lock on the request path. The key goes to the
   background compiler once (:mod:`.background`), the miss is counted as a fallback launch and
   handed to the learned-keys file (:func:`_record_learned`). When the specialized variant is
   ready it replaces the :class:`FallbackVariant` (:mod:`.swap`).
3. Not found (a new dtype, constexpr value, int width or launch option): the handler returns
   None and Triton compiles inline; the monitor's cache hook counts it as a request-path compile
   (warn), or, with ``FallbackOptions(fallback_miss="error")``, raises
   :class:`~zerojit.monitor.RuntimeJitError` before anything compiles (error mode's message).
   While a CUDA-graph capture is open (:mod:`zerojit.capture`) such a miss, and any miss of a
   function without generic variants, raises :class:`~zerojit.monitor.CaptureCompileError` from
   that hook before anything compiles (the monitor does so in every mode): a compile and a
   module load inside a capture would break it. A miss a generic variant serves is served
   during a capture too (nothing loads).

Launching the generic ``CompiledKernel`` through the specialized function's ``run`` is valid: the
two functions have the same parameters, and the generic variant's launcher takes the bound
arguments by its own signature (constexprs ignored), Triton 3.6-3.9.
"""

from __future__ import annotations

import ast
import threading
from typing import Any, Mapping

from .. import generic as _generic
from .. import learned
from .. import triton_compat as _tc
from ..context import in_warmup
from ..monitor import CaptureCompileError, FallbackOptions, JitMonitor, specialization_from_compile_info
from .background import BackgroundCompiler, BackgroundFailure, CompileJob
from .swap import PendingSwap, Swapper

__all__ = ["FallbackVariant", "FallbackServer", "CaptureCompileError", "active_server"]


class FallbackVariant:
    """A generic ``CompiledKernel`` standing in for a specialized key in Triton's in-process cache.

    Exposes what ``JITFunction.run`` reads of a ``CompiledKernel`` to launch it (``run``,
    ``function``, ``packed_metadata``, ``launch_metadata``, ``metadata``) from the generic
    variant, and delegates every other attribute to it. ``key`` is the Triton key it stands in
    for, ``kernel`` its kernel's name. It has no ``result`` (it is no pending async compile).
    """

    __slots__ = ("generic", "jit_fn", "key", "kernel", "served")
    zerojit_fallback = True  #: what the audit asks (it does not import this layer): not an unwarmed variant

    def __init__(self, generic: Any, jit_fn: Any, key: str, kernel: str) -> None:
        self.generic = generic
        self.jit_fn = jit_fn
        self.key = key
        self.kernel = kernel
        self.served = 0  # misses this placeholder served (launches through the handler)

    @property
    def run(self) -> Any:
        return self.generic.run

    @property
    def function(self) -> Any:
        return self.generic.function

    @property
    def packed_metadata(self) -> Any:
        return self.generic.packed_metadata

    @property
    def metadata(self) -> Any:
        return self.generic.metadata

    def launch_metadata(self, grid: Any, stream: Any, *args: Any) -> Any:
        return self.generic.launch_metadata(grid, stream, *args)

    def __getattr__(self, name: str) -> Any:  # only for names not found above
        if name in FallbackVariant.__slots__:  # a slot not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.generic, name)

    def __repr__(self) -> str:
        return f"<FallbackVariant of kernel {self.kernel!r} for key {self.key}>"


_ACTIVE_LOCK = threading.Lock()
_active: "FallbackServer | None" = None


def active_server() -> "FallbackServer | None":
    """The fallback installed now (by a fallback-mode monitor), or None."""
    return _active


class FallbackServer:
    """Serves misses with generic variants for one fallback-mode monitor (see the module doc).

    Made and closed by the monitor (through the provider :mod:`zerojit.serving` registers,
    :func:`zerojit.monitor.set_fallback_provider`); one at a time per process.

    Raises:
        RuntimeError: another fallback-mode monitor is installed already.
    """

    def __init__(self, monitor: JitMonitor) -> None:
        global _active
        with _ACTIVE_LOCK:
            if _active is not None:
                raise RuntimeError(f"zerojit: a fallback is installed already (by {_active.monitor!r}); uninstall that "
                                   "monitor first")
            _active = self
        options: FallbackOptions = monitor.fallback_options
        self.monitor = monitor
        self.options = options
        self._lock = threading.Lock()
        self._intercepted: dict[int, Any] = {}  # id(jit function) -> it
        self._placeholders: dict[tuple[int, Any, str], FallbackVariant] = {}  # (id(fn), device, key) -> it
        self._base = {"background_compiles": 0, "swaps": 0, "background_failures": 0}  # counted before the last reset()
        self.swapper = Swapper(options.swap)
        self.background = BackgroundCompiler(workers=options.workers, nice=options.nice, on_ready=self._ready,
                                             build=options.swap != "never",
                                             defer_build=options.swap == "between-requests")
        learned.start_writer()  # (its thread start is not the first miss's)
        try:
            target = _tc.current_target()
        except Exception:  # no GPU and no compile-only target: a worker starts at the first request, if any
            target = None
        if target is not None:
            self.background.start(target)
        self.refresh()

    # -- installing ------------------------------------------------------------------------------

    def refresh(self) -> int:
        """Route the misses of every function with generic variants filed now through the
        fallback (those not routed yet); returns how many were added."""
        added = 0
        for jit_fn in _generic.generic_functions():
            with self._lock:
                if id(jit_fn) in self._intercepted:
                    continue
                self._intercepted[id(jit_fn)] = jit_fn
            _tc.intercept_misses(jit_fn, self._on_miss)
            added += 1
        return added

    def close(self) -> None:
        """Release every function, stop the background workers, forget pending swaps. Keys
        already served keep their :class:`FallbackVariant` in Triton's cache (the generic variant,
        still valid) and swaps already made stay."""
        global _active
        with self._lock:
            functions, self._intercepted = list(self._intercepted.values()), {}
        for jit_fn in functions:
            _tc.release_misses(jit_fn)
        self.background.close()
        self.swapper.close()
        with _ACTIVE_LOCK:
            if _active is self:
                _active = None

    # -- the attachment protocol (zerojit.monitor.set_fallback_provider) --------------------------

    def detach(self) -> None:
        self.close()

    def counts(self, launches: Mapping[int, int]) -> dict[str, int]:
        """``fallback_launches`` (per served key: the launches zerojit's launch path reported of
        its :class:`FallbackVariant`, or the misses it served where that is more: a raw launch
        reports no hit), ``background_compiles``, ``swaps`` and ``background_failures``, since
        the last :meth:`reset`."""
        with self._lock:
            placeholders = list(self._placeholders.values())
        return {"fallback_launches": sum(max(p.served, launches.get(id(p), 0)) for p in placeholders),
                "background_compiles": self.background.compiled - self._base["background_compiles"],
                "swaps": self.swapper.swaps - self._base["swaps"],
                "background_failures": len(self.background.failures) - self._base["background_failures"]}

    def reset(self) -> None:
        """Count from zero again (the monitor's reset, which forgets the launches it saw too)."""
        with self._lock:
            for p in self._placeholders.values():
                p.served = 0
            self._base = {"background_compiles": self.background.compiled, "swaps": self.swapper.swaps,
                          "background_failures": len(self.background.failures)}

    # -- serving ---------------------------------------------------------------------------------

    def _on_miss(self, jit_fn: Any, key: Any, signature: dict, device: Any, constexprs: dict, options: Any,
                 attrs: dict, warmup: Any) -> Any:
        """The miss handler (:func:`zerojit.triton_compat.intercept_misses`): the
        :class:`FallbackVariant` filed under ``key``, or None (Triton compiles; see the module doc).

        """
        if in_warmup() or not isinstance(key, str):
            return None
        spec = specialization_from_compile_info(jit_fn, signature, constexprs, attrs)
        group = _generic.group_of(jit_fn, spec, key, _generic.keep_one_of(jit_fn))
        generic = _generic.lookup(jit_fn, device, group)
        if generic is None:  # Triton compiles: its cache hook (the monitor, which refuses it in a capture) first
            return None
        name = self.monitor.kernel_name(jit_fn)
        cache = _tc.kernel_cache(jit_fn, device)
        placeholder = FallbackVariant(generic, jit_fn, key, name)
        filed = _tc.file_compiled(cache, key, placeholder)  # another thread's, if it filed one first
        if filed is not placeholder:
            if isinstance(filed, FallbackVariant):
                with self._lock:
                    filed.served += 1
            return filed
        with self._lock:
            placeholder.served += 1
            self._placeholders[(id(jit_fn), device, key)] = placeholder
        self.background.submit(CompileJob(jit_fn, key, device, signature, constexprs, attrs,
                                          _tc.miss_compile_options(options), _tc.device_cache(jit_fn, device).target,
                                          name))
        if self.monitor.learn:
            _record_learned(jit_fn, spec, key, name)
        return placeholder

    def _ready(self, job: CompileJob, compiled: Any) -> None:
        """The background compiler's variant for ``job`` (built, loaded; or, between requests,
        its builder, :class:`BackgroundCompiler`'s ``defer_build``): offered to the swap."""
        with self._lock:
            placeholder = self._placeholders.get((id(job.jit_fn), job.device, job.key))
        if placeholder is None:
            return
        self.swapper.offer(PendingSwap(_tc.kernel_cache(job.jit_fn, job.device), job.key, placeholder, compiled,
                                       job.kernel))

    # -- results ---------------------------------------------------------------------------------

    def failures(self) -> tuple[BackgroundFailure, ...]:
        """Every background compile that failed, in order."""
        return tuple(self.background.failures)

    def notes(self) -> tuple[str, ...]:
        """What went wrong in the background and was recovered from (a worker replaced)."""
        return tuple(self.background.notes)


def _record_learned(jit_fn: Any, spec: tuple, key: str, name: str) -> None:
    """Hand a served miss to the learned-keys file (:func:`zerojit.learned.record_miss`, which
    never raises into a launch), the one place the fallback does: the monitor's cache hook, which
    records the misses it sees, never sees one the fallback served."""
    try:
        launch_options = _tc.run_options_removed(ast.literal_eval(_generic.options_text(key) or "{}"))
    except (ValueError, SyntaxError):
        launch_options = {}
    learned.record_miss(jit_fn, spec, launch_options, kernel_name=name, background=True)
