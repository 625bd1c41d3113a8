"""What the contract layer reads from the context it runs in: the active registration sink, the
warm-up launch in progress, and deliberate compiles.

These are context variables (per thread and per ``contextvars`` context) owned by the lowest layer
that needs them, so that the layers above communicate through them without importing each other
(docs/architecture.md):

* **registration sink**: ``kernel.register_warmup(**request)`` hands its request to whatever sink
  is active (:func:`registering_into`); the warm-up registry activates itself as one in
  :meth:`zerojit.registry.JitWarmupRegistry.activate`. Outside any, registration is a no-op.
* **warm-up sink** (:data:`WARMUP_SINK`): set by ``TritonJitKernel.compile(key)`` around its
  warm-up launch; the launch records its ``CompiledKernel`` there instead of executing.
* **deliberate compiles** (:func:`allow_compiles`): compiles a caller means to make after warm-up
  (a late warm-up by hand, the launch-path primer, a test's own set-up).

:func:`in_warmup` is what the runtime monitor asks before counting a compile as a runtime one.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Protocol

__all__ = ["RegistrationSink", "WARMUP_SINK", "active_sink", "allow_compiles", "in_warmup", "register",
           "registering_into"]


class RegistrationSink(Protocol):
    """Anything that takes warm-up requests: ``register(kernel, **request)`` (the registry)."""

    def register(self, kernel: Any, **request: Any) -> None: ...


_SINK: contextvars.ContextVar[RegistrationSink | None] = contextvars.ContextVar("zerojit_registration_sink",
                                                                                   default=None)

#: Set inside ``compile(key)``: the warm-up launch appends ``(CompiledKernel, named args)`` here.
WARMUP_SINK: contextvars.ContextVar[list | None] = contextvars.ContextVar("zerojit_warmup_sink", default=None)

_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("zerojit_allow_compiles", default=False)


def active_sink() -> RegistrationSink | None:
    """The registration sink active in this context, or None."""
    return _SINK.get()


@contextlib.contextmanager
def registering_into(sink: RegistrationSink) -> Iterator[RegistrationSink]:
    """Make ``sink`` the one ``register_warmup`` calls reach inside the block (nests; per context)."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def register(kernel: Any, **request: Any) -> None:
    """Hand ``kernel`` and ``request`` to the active sink; a no-op when none is active."""
    sink = _SINK.get()
    if sink is not None:
        sink.register(kernel, **request)


@contextlib.contextmanager
def allow_compiles() -> Iterator[None]:
    """Compiles inside the block (this thread/context) are deliberate: not counted, not blocked.

    For a late warm-up done by hand, a test's own set-up, or a path that is allowed to compile.
    zerojit's own warm-up launches need no such block.
    """
    token = _ALLOWED.set(True)
    try:
        yield
    finally:
        _ALLOWED.reset(token)


def in_warmup() -> bool:
    """True inside a warm-up launch or an :func:`allow_compiles` block (in this context)."""
    return WARMUP_SINK.get() is not None or _ALLOWED.get()
