"""Swapping a specialized variant in over the generic one that served its key.

A key the fallback served (:mod:`.fallback`) sits in Triton's in-process cache as a
:class:`~zerojit.serving.fallback.FallbackVariant` (the generic variant, launched with the key's
arguments). Once the background compile (:mod:`.background`) has the key's own specialized
``CompiledKernel`` (built from the disk cache and, on a GPU, loaded), the swap is one dict store,
``kernel_cache[key] = specialized``: the hit path (``JITFunction.run``'s ``kernel_cache.get``)
takes no lock and sees either the whole old entry or the whole new one, and the new one is fully
loaded before it is stored, so no launch sees a half-installed variant. Only the fallback's own
entry is replaced (an entry someone else filed meanwhile is left alone: Triton 3.8 unloads the
module of a ``CompiledKernel`` it drops).

When (``FallbackOptions.swap``):

* ``"between-requests"`` (the default): pending swaps are applied when the engine calls
  :func:`zerojit.serving.between_requests` between requests or steps. A float kernel's generic
  and specialized variants need not be bit-equal (alignment and divisibility assumptions change
  vectorization, hence the order of a reduction's additions); swapping one mid-request would
  make the same request's tokens come from two variants (breaking batch invariance), and, under
  tensor parallelism, ranks whose swaps land at different steps would compute different values
  for one collective. Between requests every rank swaps at the same step boundary the engine
  chose.
* ``"immediate"``: as soon as the variant is ready (from the background thread).
* ``"never"``: the generic variant keeps serving the key (the background compile still fills the
  disk cache, so the next start warms the key from there).

Capture gate (:mod:`.capture`): no swap while a CUDA-graph capture is open; such a swap stays
pending and is applied when the capture ends (immediate mode) or at the next
``between_requests()`` after it.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any

from .. import capture as _capture

__all__ = ["PendingSwap", "Swapper"]

logger = logging.getLogger("zerojit.serving")


@dataclass(frozen=True)
class PendingSwap:
    """One ready specialized variant and where it goes.

    Attributes:
        cache: the ``triton.jit`` function's in-process cache on the key's device.
        key: Triton's in-process key.
        placeholder: the :class:`~zerojit.serving.fallback.FallbackVariant` filed under it.
        specialized: the key's own ``CompiledKernel`` (loaded on a GPU), or a builder of it
            (called when the swap is applied: between requests, on the engine's thread; None
            from it: the build failed, reported, nothing swapped).
        kernel: the kernel's name, for messages.
    """

    cache: dict
    key: str
    placeholder: Any
    specialized: Any
    kernel: str = ""


class Swapper:
    """Applies swaps by one policy (``"immediate" | "between-requests" | "never"``); counts them.

    Thread-safe: :meth:`offer` comes from the background thread, :meth:`apply_pending` from the
    engine's; a lock guards the pending list, never the hit path.
    """

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._pending: list[PendingSwap] = []
        self.swaps = 0
        _capture.add_end_listener(self._capture_ended)

    def close(self) -> None:
        """Forget pending swaps and stop listening for capture ends."""
        _capture.remove_end_listener(self._capture_ended)
        with self._lock:
            self._pending.clear()

    def offer(self, swap: PendingSwap) -> None:
        """A specialized variant is ready: swap it now (immediate, no capture open), keep it
        pending (between-requests, or a capture open), or drop it (never)."""
        if self.policy == "never":
            return
        with self._lock:
            self._pending.append(swap)
        if self.policy == "immediate":
            self.apply_pending()

    def pending(self) -> int:
        """How many swaps wait."""
        with self._lock:
            return len(self._pending)

    def apply_pending(self) -> int:
        """Apply every pending swap unless a CUDA-graph capture is open (then they wait); returns
        how many were applied."""
        if not self._pending or _capture.capturing():  # (an unlocked peek: the engine calls this every step)
            return 0
        with self._lock:
            todo, self._pending = self._pending, []
            applied = 0
            for swap in todo:
                if swap.cache.get(swap.key) is swap.placeholder:
                    specialized = swap.specialized
                    if isinstance(specialized, functools.partial):  # a builder: built and loaded here, first
                        specialized = specialized()
                        if specialized is None:
                            continue
                    swap.cache[swap.key] = specialized  # one store: a launch sees the old entry or the new
                    applied += 1
                else:
                    logger.info("zerojit: kernel %r key %s: its in-process entry changed since the fallback filed it; "
                                "not swapped", swap.kernel, swap.key)
            self.swaps += applied
        return applied

    def _capture_ended(self) -> None:
        if self.policy == "immediate":
            self.apply_pending()
