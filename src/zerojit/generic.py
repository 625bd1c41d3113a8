"""Generic variants: one compiled variant per group of warmed keys that serves every value class.

Triton's specializations only narrow what a variant accepts (an int divisible by 16, a 16-byte
aligned pointer, an int equal to 1 folded into a constexpr). A variant compiled with none of them
(:func:`zerojit.triton_compat.generic_function`: every non-constexpr parameter unspecialized) is
valid for every launch whose dtypes, constexprs, int widths and launch options are those it was
compiled for. Those four make a *group* (:class:`GenericGroup`); the value classes of its ints
and pointers do not count.

The rules of a group (Triton's ``native_specialize_impl``, 3.6-3.9):

* an int keeps its width (i32, i64 and u64 stay apart: 2**31 is i64, 2**63 u64); the value 1,
  which Triton turns into ``("constexpr", 1)`` for a non-constexpr parameter, is an i32;
* a pointer keeps its dtype (and ``const``-ness), not its alignment;
* constexpr parameters (and ``None``, Triton's constexpr None) keep their values, floats and
  bools are never specialized anyway;
* ``generic_keep`` names ints whose equal-to-one class the generic variant keeps (a stride of 1
  that vectorizes): for them "is 1" is part of the group, every other value is one class.

This module holds the process's table of generic variants (filled by the warm-up, read by
:mod:`zerojit.serving`): :func:`register`, :func:`lookup`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable

from . import triton_compat as _tc
from .specialization import SpecClass

__all__ = ["GenericGroup", "generic_classes", "options_text", "group_of", "register", "lookup", "generic_functions",
           "forget"]

_INT_TYPES = ("i32", "i64", "u64")


def _is_one(spec: SpecClass) -> bool:
    return spec.type == "constexpr" and spec.attr == 1 and type(spec.attr) is int


def generic_classes(jit_fn: Any, spec: Iterable[SpecClass], keep_one: Iterable[str] = ()) -> tuple[SpecClass, ...]:
    """The classes the generic variant of ``spec``'s group has, one per parameter in order: what
    Triton's binder gives :func:`~zerojit.triton_compat.generic_function`'s function for any
    launch of the group (tests check it against the binder).

    ``spec``: one :class:`SpecClass` per parameter (Triton's ``(type, attr)`` pairs).
    ``keep_one``: the ``generic_keep`` names.
    """
    keep = frozenset(keep_one)
    out = []
    for p, s in zip(jit_fn.params, spec):
        if p.is_constexpr or s.kind in ("none", "bool", "float"):
            out.append(s)
        elif _is_one(s):  # a non-constexpr int equal to 1
            out.append(s if p.name in keep else SpecClass("i32", None))
        elif s.kind == "int":
            if p.name in keep:
                out.append(s if s.attr == 1 else SpecClass(s.type, ""))  # (an annotated int's 1 is (i64, 1))
            else:
                out.append(SpecClass(s.type, None))
        elif s.kind == "pointer":
            out.append(SpecClass(s.type, None))
        else:  # a tuple argument or a type zerojit does not model: kept as is
            out.append(s)
    return tuple(out)


def options_text(triton_key: str) -> str:
    """The launch-options part of Triton's in-process key (``str(specialization) + str(options)``):
    the options passed to the launch and those ``JITFunction.run`` adds (``debug``, ...), as text."""
    _, sep, tail = triton_key.rpartition("]{")
    return "{" + tail if sep else ""


@dataclass(frozen=True)
class GenericGroup:
    """Keys that one generic variant serves: the generic classes (:func:`generic_classes`) and
    the launch options (:func:`options_text` of Triton's key)."""

    classes: tuple[SpecClass, ...]
    options: str


def group_of(jit_fn: Any, spec: Iterable[SpecClass], triton_key: str, keep_one: Iterable[str] = ()) -> GenericGroup:
    """The :class:`GenericGroup` of a specialization of ``jit_fn`` and its Triton key."""
    return GenericGroup(generic_classes(jit_fn, spec, keep_one), options_text(triton_key))


_LOCK = threading.Lock()
# (id(jit function), device, group) -> (the jit function, kept alive; the generic CompiledKernel)
_TABLE: dict[tuple[int, Any, GenericGroup], tuple[Any, Any]] = {}
_KEEP: dict[int, frozenset[str]] = {}  # id(jit function) -> its generic_keep names


def register(jit_fn: Any, device: Any, group: GenericGroup, compiled: Any, keep_one: Iterable[str] = ()) -> None:
    """File ``compiled`` (a loaded ``CompiledKernel``) as the generic variant of ``group`` of the
    specialized function ``jit_fn`` on ``device`` (Triton's device id; a string under
    compile-only). A group filed again keeps its first variant."""
    with _LOCK:
        _KEEP[id(jit_fn)] = frozenset(keep_one)
        _TABLE.setdefault((id(jit_fn), device, group), (jit_fn, compiled))


def keep_one_of(jit_fn: Any) -> frozenset[str]:
    """The ``generic_keep`` names the generic variants of ``jit_fn`` were filed with."""
    return _KEEP.get(id(jit_fn), frozenset())


def lookup(jit_fn: Any, device: Any, group: GenericGroup) -> Any | None:
    """The generic ``CompiledKernel`` that serves ``group`` of ``jit_fn`` on ``device``, or None."""
    found = _TABLE.get((id(jit_fn), device, group))
    return None if found is None or found[0] is not jit_fn else found[1]


def generic_functions() -> tuple[Any, ...]:
    """Every specialized ``triton.jit`` function that has a generic variant filed, once each."""
    with _LOCK:
        return tuple({id(fn): fn for fn, _ in _TABLE.values()}.values())


def forget(jit_fn: Any | None = None) -> None:
    """Forget the generic variants of ``jit_fn`` (every function's when None): tests, a new warm-up."""
    with _LOCK:
        for k in [k for k, (fn, _) in _TABLE.items() if jit_fn is None or fn is jit_fn]:
            del _TABLE[k]
        if jit_fn is None:
            _KEEP.clear()
        else:
            _KEEP.pop(id(jit_fn), None)


def generic_function_of(jit_fn: Any, keep_one: Iterable[str] = ()) -> Any:
    """The generic ``triton.jit`` function of ``jit_fn`` (:func:`~zerojit.triton_compat.generic_function`),
    made once per function and ``keep_one`` and kept on it."""
    keep = tuple(sorted(keep_one))
    made = jit_fn.__dict__.setdefault("_zerojit_generic", {})
    fn = made.get(keep)
    if fn is None:
        fn = made.setdefault(keep, _tc.generic_function(jit_fn, keep))
    return fn
