"""Serving: a miss after warm-up that costs nothing (the JIT monitor's ``fallback`` mode).

A miss that a generic variant serves (:mod:`zerojit.generic`; warm-up compiles and loads them)
launches it at once: no compile and no module load on the request path. The key's specialized
variant compiles in a background worker process and replaces the generic one later. Layers
(docs/architecture.md): this package is above the monitor (observation) and below the
applications; the monitor does not import it, it registers itself with
:func:`zerojit.monitor.set_fallback_provider` when imported (``import zerojit`` imports it).

* :mod:`.fallback`: the miss handler and :class:`~.fallback.FallbackVariant`;
* :mod:`.background`: the background compile workers;
* :mod:`.swap`: when the specialized variant replaces the generic one;
* :mod:`zerojit.capture` (contract layer): no module load and no swap while a CUDA-graph capture
  is open.

Using it (engines, the CLI, tests)::

    from zerojit import JitMonitor, serving
    from zerojit.monitor import FallbackOptions

    # install: a fallback-mode monitor (or ZEROJIT_JIT_MONITOR=fallback, or
    # zerojit.monitor.configure("fallback", fallback=FallbackOptions(...)), then warm up: the
    # process monitor is installed at the end of the warm-up)
    monitor = JitMonitor("fallback", fallback=FallbackOptions(
        swap="between-requests",   # | "immediate" | "never" (see zerojit.serving.swap for why)
        fallback_miss="compile",   # | "error": a miss no generic variant serves
        workers=1, nice=19))       # background compile processes and their niceness
    monitor.install()
    ...
    serving.between_requests()     # the engine, between requests / steps: apply ready swaps
    ...
    serving.wait_idle(60.0)        # tests, benchmarks: wait (at most 60 s) for background work;
                                   # True when none is left (then between_requests() to swap)
    counts = monitor.counts()      # request_path_compiles, fallback_launches, background_compiles,
                                   # swaps (and the monitor's other counts)
    serving.failures()             # background compiles that failed (kernel, key, error)
    monitor.uninstall()            # releases the functions, stops the workers

Fallback mode's exit status (``zerojit run`` / ``exec``): 0 iff ``request_path_compiles == 0``;
background compiles are reported, not failures.
"""

from __future__ import annotations

from typing import Any

from .. import monitor as _monitor
from .. import registry as _registry
from ..monitor import FallbackOptions
from .background import BackgroundFailure
from .fallback import CaptureCompileError, FallbackServer, FallbackVariant, active_server

__all__ = ["FallbackOptions", "FallbackServer", "FallbackVariant", "BackgroundFailure", "CaptureCompileError",
           "between_requests", "wait_idle", "failures", "refresh", "active_server"]


def between_requests() -> int:
    """Apply the swaps that are ready (``swap="between-requests"``; also any immediate swap a
    CUDA-graph capture held back); returns how many. Engines call it between requests or steps;
    cheap when none waits (no lock taken on the launch path). 0 without a fallback installed, or
    while a capture is open (they wait for the next call)."""
    server = active_server()
    return server.swapper.apply_pending() if server is not None else 0


def wait_idle(timeout: float) -> bool:
    """Wait until every background compile submitted so far has finished (ready or failed), at
    most ``timeout`` seconds; True when none is left (also without a fallback installed)."""
    server = active_server()
    return server.background.wait_idle(timeout) if server is not None else True


def failures() -> tuple[BackgroundFailure, ...]:
    """The background compiles of the installed fallback that failed (empty without one)."""
    server = active_server()
    return server.failures() if server is not None else ()


def refresh() -> int:
    """Route the misses of functions whose generic variants were filed since the fallback was
    installed (a warm-up does this itself at its end); returns how many were added."""
    server = active_server()
    return server.refresh() if server is not None else 0


def _on_warmup_complete(report: Any) -> None:
    # A warm-up listener registered after the monitor's (this package imports the monitor first),
    # so a process monitor the warm-up installed in fallback mode sees its new generic variants.
    refresh()


_monitor.set_fallback_provider(FallbackServer)
_registry.add_warmup_listener(_on_warmup_complete)
