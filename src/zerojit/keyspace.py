"""Declaring a kernel's compile-key space beside its dispatch.

A kernel's ``dispatch(**inputs) -> CompileKey`` is the one function that turns launch inputs into
the compile key; the key space is that function evaluated over every input combination the
configuration allows::

    keys = trace_dispatch(self.dispatch)(
        zip_inputs(dict(count_valid=True, compact=False), dict(count_valid=True, compact=True)),
        ratio=choices(4, 128),            # an axis: each value in turn
        block_size=config.block_size,     # a scalar: fixed by the configuration
        when=lambda ratio, **_: ratio > 1,
    )

Axes multiply (cartesian product), a zip group's rows vary together, ``when`` filters, and the
keys come back deduplicated in first-seen order, so a space reads like ``pytest.mark.parametrize``.
"""

from __future__ import annotations

import inspect
import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

__all__ = ["KeySpaceError", "DEFAULT_KEY_BUDGET", "TRACED_POINTS_LIMIT", "Choices", "choices", "int_range", "ZipGroup",
           "zip_inputs", "trace_dispatch", "take_traced_points"]


class KeySpaceError(ValueError):
    """A key-space declaration is malformed, or its dispatch failed at one point of the space."""


#: The most distinct keys one listing may give (issue 20): a space larger than this is almost
#: always a per-request value left in the key (a token count), not variants anyone means to warm.
#: Raise it per kernel with a ``key_budget`` class attribute, or per call with ``budget=``.
DEFAULT_KEY_BUDGET = 4096


#: The most dispatch points :func:`trace_dispatch` keeps per kernel for the warm-up
#: (:func:`take_traced_points`): the first ones traced; a launch at a point past them learns it
#: on its first launch instead (a few microseconds more, once).
TRACED_POINTS_LIMIT = 4096

_TRACED = "_zerojit_traced_points"  # on the kernel whose bound dispatch was traced


def take_traced_points(kernel: Any) -> dict[tuple, Any]:
    """The points :func:`trace_dispatch` evaluated ``kernel.dispatch`` at since the last call,
    as ``{((input, value), ...) sorted by input: key}`` (at most :data:`TRACED_POINTS_LIMIT`, in
    trace order), and forgets them. The warm-up hands them to a checked launcher, which learns
    their facts before the first launch (:meth:`zerojit.inputs.CheckedKernel.finish_warmup`)."""
    if not hasattr(kernel, "__dict__"):
        return {}
    return kernel.__dict__.pop(_TRACED, None) or {}


def _points_of(dispatch: Callable[..., Any]) -> dict[tuple, Any] | None:
    """Where the points of a bound ``dispatch`` are kept (None: not a kernel's bound method)."""
    owner = getattr(dispatch, "__self__", None)
    if owner is None or not hasattr(owner, "__dict__") or inspect.isclass(owner):
        return None
    return owner.__dict__.setdefault(_TRACED, {})


@dataclass(frozen=True)
class Choices:
    """An axis: the input takes each of ``values`` in turn (order kept)."""

    values: tuple[Any, ...]

    def __iter__(self):
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def choices(*values: Any) -> Choices:
    """An axis over ``values``; ``choices()`` with no value makes the space empty."""
    return Choices(tuple(values))


def int_range(start: int, stop: int, step: int = 1) -> Choices:
    """An axis over ``range(start, stop, step)``.

    Raises:
        KeySpaceError: ``step`` is 0.
    """
    if step == 0:
        raise KeySpaceError("int_range step must not be 0")
    return Choices(tuple(range(start, stop, step)))


@dataclass(frozen=True)
class ZipGroup:
    """Rows of inputs that vary together: each row is one point, never mixed with another row."""

    rows: tuple[Mapping[str, Any], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.rows[0]) if self.rows else ()


def zip_inputs(*rows: Mapping[str, Any]) -> ZipGroup:
    """Group rows (dicts of input name -> value) that vary together.

    Raises:
        KeySpaceError: the rows do not all name the same inputs.
    """
    if rows:
        names = set(rows[0])
        for i, row in enumerate(rows[1:], start=1):
            if set(row) != names:
                raise KeySpaceError(
                    f"zip_inputs row {i} names {sorted(row)} but row 0 names {sorted(names)}: "
                    "every row of a zip group must give the same inputs"
                )
    return ZipGroup(tuple(dict(r) for r in rows))


def _owner_name(dispatch: Callable) -> str:
    owner = getattr(dispatch, "__self__", None)
    if owner is not None:
        return getattr(owner, "name", type(owner).__name__)
    return getattr(dispatch, "__qualname__", repr(dispatch))


def trace_dispatch(dispatch: Callable[..., Any], *, budget: int | None = None) -> Callable[..., list[Any]]:
    """Evaluate ``dispatch`` over a declared space; returns ``space(*groups, when=None, **axes)``.

    Each axis value is a scalar (fixed), a :class:`Choices` (``choices``/``int_range``), and each
    positional group a :class:`ZipGroup`. The returned function gives the keys in first-seen
    order, duplicates dropped (keys must be hashable: frozen dataclasses). With a kernel's bound
    ``dispatch``, the points evaluated are kept on the kernel for its warm-up
    (:func:`take_traced_points`).

    Args:
        dispatch: the kernel's ``dispatch`` (a bound method names the kernel in messages).
        budget: the most distinct keys the space may give; default: the kernel's ``key_budget``
            attribute, else :data:`DEFAULT_KEY_BUDGET`.

    Raises:
        KeySpaceError: an input named twice, an input ``dispatch`` does not take, a ``when`` or
            ``dispatch`` that raises (the message names the kernel and the failing point), more
            distinct keys than the budget (the message gives each axis's size).
    """
    owner = _owner_name(dispatch)
    if budget is None:
        budget = getattr(getattr(dispatch, "__self__", None), "key_budget", DEFAULT_KEY_BUDGET)
    params = inspect.signature(dispatch).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def space(*groups: ZipGroup, when: Callable[..., bool] | None = None, **axes: Any) -> list[Any]:
        seen_names: dict[str, str] = {}
        sources: list[tuple[str, Iterable[Mapping[str, Any]]]] = []
        for gi, group in enumerate(groups):
            if not isinstance(group, ZipGroup):
                raise KeySpaceError(f"{owner}: positional arguments must be zip_inputs(...), got {group!r}")
            for name in group.names:
                if name in seen_names:
                    raise KeySpaceError(f"{owner}: input {name!r} is given twice ({seen_names[name]} and zip group {gi})")
                seen_names[name] = f"zip group {gi}"
            sources.append((f"zip group {gi}", group.rows))
        for name, value in axes.items():
            if name in seen_names:
                raise KeySpaceError(f"{owner}: input {name!r} is given twice ({seen_names[name]} and an axis)")
            seen_names[name] = "an axis"
            values = value.values if isinstance(value, Choices) else (value,)
            sources.append((name, [{name: v} for v in values]))
        if not takes_any:
            unknown = sorted(set(seen_names) - set(params))
            if unknown:
                raise KeySpaceError(
                    f"{owner}: dispatch takes no input named {', '.join(map(repr, unknown))} "
                    f"(it takes {', '.join(params)})"
                )
        keys: dict[Any, None] = {}
        traced = _points_of(dispatch)
        for combo in itertools.product(*(rows for _, rows in sources)):
            point: dict[str, Any] = {}
            for part in combo:
                point.update(part)
            try:
                if when is not None and not when(**point):
                    continue
            except Exception as e:
                raise KeySpaceError(f"{owner}: when() raised at {point}: {e!r}") from e
            try:
                key = dispatch(**point)
            except Exception as e:
                raise KeySpaceError(f"{owner}: dispatch raised at {point}: {e!r}") from e
            keys.setdefault(key, None)
            if traced is not None and len(traced) < TRACED_POINTS_LIMIT:
                try:
                    traced.setdefault(tuple(sorted(point.items())), key)
                except TypeError:  # an unhashable value: that point is learned at its first launch
                    pass
            if len(keys) > budget:
                sizes = " x ".join(f"{name} {len(rows)}" for name, rows in sources)
                sizes += f" = {math.prod(len(rows) for _, rows in sources)} points"
                raise KeySpaceError(
                    f"{owner}: the declared key space gives more than {budget} keys (axes: {sizes}); an axis that "
                    "large is usually a per-request value in the key: pass it to a do_not_specialize parameter or "
                    "bucket it in dispatch; if every key is meant, set key_budget on the kernel class or pass "
                    "trace_dispatch(..., budget=N)")
        return list(keys)

    return space
