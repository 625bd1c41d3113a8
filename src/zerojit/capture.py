"""CUDA-graph captures in progress, process-wide: the gate for compiles, loads and swaps.

Compiling a kernel or loading a module (``cuModuleLoadData``, what
:func:`zerojit.triton_compat.load_compiled` does) while a stream capture is open is an operation
CUDA does not allow during a capture: it fails the capture (``cudaErrorStreamCaptureUnsupported``
/ ``...Invalidated``, "operation not permitted when stream is capturing"), and a compile would
stall it besides. So the JIT monitor (:mod:`zerojit.monitor`, every mode) refuses a miss while
:func:`capturing` is true, before Triton compiles or loads anything
(:class:`zerojit.monitor.CaptureCompileError`); a hit (a warmed variant, loaded at warm-up, or
a generic variant the fallback files) launches and is captured. Swapping a variant into Triton's
in-process cache during a capture would make one graph record two variants of a kernel, so the
fallback (:mod:`zerojit.serving.fallback`) and the background compiler
(:mod:`zerojit.serving.background`) ask :func:`capturing` too: a load waits for the capture to
end (:func:`wait_until_no_capture`, with a deadline), a swap stays pending until it has. A graph
captured while a generic variant served its key keeps launching that variant until it is
captured again (the graph holds the launch, not Triton's cache).

How a capture is seen:

* :func:`install` wraps ``torch.cuda.CUDAGraph.capture_begin`` / ``capture_end`` (what
  ``torch.cuda.graph(...)`` and ``make_graphed_callables`` call) once per process, keeping a
  process-wide count of open captures: a capture on any thread or stream counts, so the
  background thread (which has no capturing stream of its own) sees it. This is the one place
  zerojit patches torch; :meth:`zerojit.monitor.JitMonitor.install` installs it (any mode but
  ``off``), and with it the fallback.
* :func:`capturing` also asks ``torch.cuda.is_current_stream_capturing()`` (once CUDA is
  initialized): a capture begun on the calling thread's current stream by other means
  (``torch.cuda.graphs`` internals, a raw ``cudaStreamBeginCapture`` through torch's stream).
* :func:`capture_started` / :func:`capture_ended` are what the wrappers call; an engine that
  captures by other means (its own CUDA calls) calls them around its capture.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

__all__ = ["install", "capture_started", "capture_ended", "capturing", "open_captures", "wait_until_no_capture",
           "no_capture", "add_end_listener", "remove_end_listener"]

_CONDITION = threading.Condition()
_open = 0
_end_listeners: list[Callable[[], None]] = []
_installed = False


def capture_started() -> None:
    """Count a CUDA-graph capture as open (the ``capture_begin`` wrapper calls it first)."""
    global _open
    with _CONDITION:
        _open += 1


def capture_ended() -> None:
    """Count one open capture as ended; when none is left open, wake the loads waiting for that
    (:func:`wait_until_no_capture`) and call the end listeners (pending swaps).

    Raises:
        RuntimeError: no capture is open (an unbalanced call).
    """
    global _open
    with _CONDITION:
        if _open <= 0:
            raise RuntimeError("zerojit: capture_ended() without an open capture (capture_started() was not called)")
        _open -= 1
        done = _open == 0
        if done:
            _CONDITION.notify_all()
        listeners = list(_end_listeners) if done else []
    for listener in listeners:
        listener()


def open_captures() -> int:
    """How many captures are open now (counted by the wrappers and :func:`capture_started`)."""
    return _open


def _stream_capturing() -> bool:
    """torch's own answer for the calling thread's current stream (False before CUDA is
    initialized: no capture can be open then, and asking would initialize it)."""
    import torch

    try:
        return bool(torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing())
    except Exception:  # a torch without CUDA support
        return False


def capturing() -> bool:
    """True while a CUDA-graph capture is open: counted process-wide, or on this thread's
    current stream (torch)."""
    return _open > 0 or _stream_capturing()


def _wait(deadline: float) -> bool:
    """(Holding ``_CONDITION``.) Wait until no counted capture is open or ``deadline`` passes."""
    while _open > 0:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        _CONDITION.wait(left)
    return True


def wait_until_no_capture(timeout: float) -> bool:
    """Wait until no counted capture is open, at most ``timeout`` seconds; True when none is.
    (A capture seen only on another thread's current stream is not counted: the wrappers count
    every capture made through torch.)"""
    with _CONDITION:
        return _wait(time.monotonic() + timeout)


@contextlib.contextmanager
def no_capture(timeout: float) -> Iterator[None]:
    """Run the block while no counted capture is open: wait for open ones to end (at most
    ``timeout`` seconds), then hold off new ones until the block ends (a ``capture_begin``
    waits; keep the block short: a module load).

    Raises:
        TimeoutError: a capture stayed open for ``timeout`` seconds (the block did not run).
    """
    with _CONDITION:
        if not _wait(time.monotonic() + timeout):
            raise TimeoutError(f"a CUDA-graph capture stayed open for {timeout:.0f} s")
        yield


def add_end_listener(listener: Callable[[], None]) -> None:
    """Call ``listener()`` each time the last open capture ends (from the ending thread)."""
    with _CONDITION:
        if listener not in _end_listeners:
            _end_listeners.append(listener)


def remove_end_listener(listener: Callable[[], None]) -> None:
    with _CONDITION:
        if listener in _end_listeners:
            _end_listeners.remove(listener)


def install() -> None:
    """Wrap ``torch.cuda.CUDAGraph.capture_begin`` / ``capture_end`` to count captures (once per
    process; the wrappers stay: they cost a lock per capture). A torch without ``CUDAGraph`` is
    left alone."""
    global _installed
    with _CONDITION:
        if _installed:
            return
        _installed = True
    import torch

    graph = getattr(torch.cuda, "CUDAGraph", None)
    if graph is None:
        return
    begin, end = graph.capture_begin, graph.capture_end

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        capture_started()  # before it begins: a load racing it waits
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            capture_ended()
            raise

    def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return end(self, *args, **kwargs)
        finally:
            capture_ended()

    capture_begin.__wrapped__ = begin  # type: ignore[attr-defined]
    capture_end.__wrapped__ = end  # type: ignore[attr-defined]
    graph.capture_begin, graph.capture_end = capture_begin, capture_end
