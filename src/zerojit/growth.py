"""Unbounded key growth at run time: a parameter that takes ever new values after warm-up.

A request-dependent value left in the compile key (a token count as a ``tl.constexpr``, a bound
that grows with the block-table width) compiles a new variant for every value: no warm-up can
cover it, and a log line per value buries the one fact that matters. :class:`GrowthTracker`
counts, per (kernel, parameter), the distinct specialization classes that runtime compiles
brought (a constexpr's class is its value); when one exceeds the limit it reports the parameter
once, with the change that bounds it, and from then on tells the monitor that a miss new only in
such parameters is counted, not logged.

The fixes come from Triton's specialization rules: an int parameter is specialized on its value
(equal to 1, divisible by 16) unless listed in ``do_not_specialize``; a pointer on its 16-byte
alignment unless listed in ``do_not_specialize_on_alignment``; a ``tl.constexpr`` is always
part of the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

__all__ = ["DEFAULT_GROWTH_LIMIT", "GrowingParameter", "GrowthTracker"]

#: Distinct runtime values of one parameter of one kernel beyond which it is reported as growing.
DEFAULT_GROWTH_LIMIT = 8


@dataclass(frozen=True)
class GrowingParameter:
    """One parameter of one kernel whose runtime values keep growing the key space.

    Attributes:
        kernel: the zerojit kernel's name.
        parameter: the Triton parameter's name.
        count: distinct values (specialization classes) it took after warm-up.
        fix: the change that bounds it, in words.
    """

    kernel: str
    parameter: str
    count: int
    fix: str

    def summary(self, limit: int) -> str:
        """The one log line: kernel, parameter, count and fix (the count when it crossed ``limit``)."""
        return (f"kernel {self.kernel!r}: parameter {self.parameter!r} has taken more than {limit} distinct values "
                f"after warm-up ({self.count} so far), so every new value compiles: {self.fix}; further values of "
                "it are counted, not logged")


def bounding_fix(parameter: str, kind: str, constexpr: bool) -> str:
    """The change that bounds a growing parameter.

    Args:
        parameter: its name.
        kind: a :attr:`zerojit.specialization.SpecClass.kind` it took (``"pointer"``, ``"int"``, ...).
        constexpr: it is declared ``tl.constexpr``.
    """
    if constexpr:
        return (f"move the bound out of the key: make {parameter!r} a plain int parameter listed in triton.jit's "
                "do_not_specialize (or bucket it to a few values in dispatch)")
    if kind == "pointer":
        return f"list {parameter!r} in triton.jit's do_not_specialize_on_alignment"
    return f"list {parameter!r} in triton.jit's do_not_specialize"


class GrowthTracker:
    """Counts each (kernel, parameter)'s distinct runtime classes; not thread-safe (the monitor
    calls it under its lock).

    Args:
        limit: a parameter is growing once it has taken more than ``limit`` distinct values.
    """

    def __init__(self, limit: int = DEFAULT_GROWTH_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"growth limit must be >= 1, got {limit}")
        self.limit = limit
        self._values: dict[tuple[str, str], set[Any]] = {}
        self._kinds: dict[tuple[str, str], tuple[str, bool]] = {}
        self._growing: dict[tuple[str, str], None] = {}  # in the order they crossed the limit

    def observe(self, kernel: str, params: Iterable[str], spec: Iterable[Any],
                constexprs: frozenset[str] = frozenset()) -> tuple[list[GrowingParameter], bool]:
        """Count one distinct runtime compile of ``kernel``.

        Args:
            params: the parameters' names, in order; spec: each one's SpecClass, same order.
            constexprs: the names of the kernel's ``tl.constexpr`` parameters.

        Returns:
            the parameters that crossed the limit with this compile, and whether the compile is
            *quiet*: every parameter that took a new value with it is growing (its own log line
            would only repeat the growth line).
        """
        crossed, new_in = [], []
        for name, cls in zip(params, spec):
            ident = (kernel, name)
            seen = self._values.setdefault(ident, set())
            if cls in seen:
                continue
            seen.add(cls)
            self._kinds[ident] = (cls.kind, name in constexprs)
            new_in.append(ident)
            if len(seen) > self.limit and ident not in self._growing:
                self._growing[ident] = None
                crossed.append(self._parameter(ident))
        quiet = bool(new_in) and all(i in self._growing for i in new_in)
        return crossed, quiet

    def growing(self) -> tuple[GrowingParameter, ...]:
        """Every growing parameter, with its count now, in the order they crossed the limit."""
        return tuple(self._parameter(i) for i in self._growing)

    def reset(self) -> None:
        """Forget every count."""
        self._values.clear()
        self._kinds.clear()
        self._growing.clear()

    def _parameter(self, ident: tuple[str, str]) -> GrowingParameter:
        kind, constexpr = self._kinds[ident]
        return GrowingParameter(ident[0], ident[1], len(self._values[ident]), bounding_fix(ident[1], kind, constexpr))
