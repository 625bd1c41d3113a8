"""Triton's specialization rules, as values a user can print and compare.

Triton compiles one variant of a ``@triton.jit`` function per *specialization*: per argument, the
binder (``native_specialize_impl``, Triton 3.6-3.9) turns the runtime value into a pair
``(type, attr)``; the list of pairs plus the launch options forms the in-process cache key.
A runtime value in a class that warm-up never produced therefore compiles mid-request.

The classes (the same in Triton 3.6-3.9, ``triton/runtime/jit.py`` and its C++ binder):

* int: ``(width, attr)``; width is ``i32`` for [-2**31, 2**31), ``i64`` for [-2**63, 2**63),
  ``u64`` for [2**63, 2**64); anything else raises ``OverflowError``. attr is ``"D"`` when the
  value is divisible by 16, ``""`` otherwise, and the value 1 becomes ``("constexpr", 1)``.
  ``do_not_specialize`` gives ``(width, None)`` (the width stays part of the key);
  ``do_not_specialize_on_alignment`` drops only the divisibility split (1 stays a constexpr).
  An annotated int (``n: tl.int64``) takes its width from the annotation and keeps its classes
  (the value 1 then becomes ``("i64", 1)``).
* pointer (anything with ``data_ptr()`` and ``dtype``): ``("*" + dtype, "D" | "")`` by whether the
  address is 16-byte aligned; ``"*k..."`` for a ``const`` parameter.
* ``None``: ``("constexpr", None)``; bool: ``("u1", None)``; float: ``("fp32", None)``: never
  specialized on value.
* constexpr parameters: ``("constexpr", value)``.
* launch options (``num_warps``, ``num_stages``, ...) passed to the launch join the key as the
  ``str()`` of the options dict, so passing ``num_warps=4`` explicitly is a different key from
  leaving the default of 4.

``SpecClass`` mirrors Triton's pair exactly; ``classify`` is zerojit's model of the rules, which
the tests check against Triton's own binder; ``bind`` runs Triton's binder itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .triton_compat import bind, param_specialization, tensor_type  # bind: Triton's binder, as run calls it

__all__ = [
    "SpecClass",
    "classify",
    "scalar_rep",
    "WarmupTensor",
    "is_aligned",
    "bind",
    "param_classes",
    "spec_classes",
    "LAUNCH_OPTIONS",
]

#: Launch options that join Triton's cache key when passed to a launch.
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "launch_cooperative_grid", "debug")

_I32 = (-(2**31), 2**31)
_I64 = (-(2**63), 2**63)
_U64 = (2**63, 2**64)
_ALIGNMENT = 16  # bytes; Triton's tt.divisibility for pointers and ints

# One representative per (width, attr): the literal 1 is only ever a representative of itself.
_INT_REPS = {
    ("i32", "D"): 16, ("i32", ""): 17,
    ("i64", "D"): 2**32, ("i64", ""): 2**32 + 1,
    ("u64", "D"): 2**63, ("u64", ""): 2**63 + 1,
}
_FLOAT_REP = 0.5


def _int_width(value: int) -> str:
    if _I32[0] <= value < _I32[1]:
        return "i32"
    if _I64[0] <= value < _I64[1]:
        return "i64"
    if _U64[0] <= value < _U64[1]:
        return "u64"
    raise OverflowError(
        f"integer {value} cannot be passed to a Triton kernel: the valid range is [-2**63, 2**64)"
    )


def is_aligned(tensor: Any) -> bool:
    """True when ``tensor.data_ptr()`` is 16-byte aligned (Triton's pointer divisibility)."""
    return tensor.data_ptr() % _ALIGNMENT == 0


@dataclass(frozen=True)
class SpecClass:
    """One argument's specialization class, exactly Triton's ``(type, attr)`` pair.

    Attributes:
        type: Triton's type string: ``"i32" | "i64" | "u64"`` (ints), ``"*fp16"`` etc. (pointers,
            ``"*k..."`` when const), ``"u1"`` (bool), ``"fp32"`` (float), ``"constexpr"``.
        attr: ``"D"`` (divisible by 16 / 16-byte aligned), ``""`` (neither), ``None``
            (not specialized on value), or the value of a constexpr (1 for an int equal to one).
    """

    type: str
    attr: Any = None

    @classmethod
    def from_triton(cls, entry: tuple[str, Any]) -> "SpecClass":
        """Build from one entry of the specialization list Triton's binder returns."""
        ty, attr = entry
        return cls(str(ty), attr)

    @property
    def kind(self) -> str:
        """``"int" | "pointer" | "bool" | "float" | "none" | "constexpr"``."""
        if self.type == "constexpr":
            return "none" if self.attr is None else "constexpr"
        if self.type.startswith("*"):
            return "pointer"
        if self.type == "u1":
            return "bool"
        if self.type.startswith(("fp", "bf")):
            return "float"
        return "int"

    def describe(self) -> str:
        """The class in the specialization model's words, e.g. ``"i32 divisible-by-16"``."""
        kind = self.kind
        if kind == "constexpr":
            if self.attr == 1 and isinstance(self.attr, int) and not isinstance(self.attr, bool):
                return "equal-to-one (constexpr 1)"
            return f"constexpr {self.attr!r}"
        if kind == "none":
            return "None (constexpr)"
        if kind == "pointer":
            return f"{self.type} " + {"D": "16-byte aligned", "": "unaligned", None: "alignment not specialized"}[self.attr]
        if kind == "int":
            if self.attr == 1:
                return f"{self.type} equal-to-one"
            return f"{self.type} " + {"D": "divisible-by-16", "": "other (not divisible by 16)",
                                      None: "not specialized"}[self.attr]
        return f"{self.type} (never specialized)"

    def __str__(self) -> str:
        return self.describe()


def classify(
    value: Any,
    *,
    do_not_specialize: bool = False,
    do_not_specialize_on_alignment: bool = False,
    annotation: str | None = None,
    is_const: bool = False,
) -> SpecClass:
    """zerojit's model of the class Triton's binder puts ``value`` in.

    Args:
        value: a runtime argument (int, bool, float, None, or a tensor-like with ``data_ptr()``
            and ``dtype``).
        do_not_specialize: the parameter is listed in ``@triton.jit(do_not_specialize=...)``.
        do_not_specialize_on_alignment: listed in ``do_not_specialize_on_alignment``.
        annotation: Triton's normalised type annotation of the parameter (``"i64"``, ``"fp32"``;
            ``KernelParam.annotation_type``), if any.
        is_const: the pointer parameter is annotated ``const``.

    Raises:
        OverflowError: an int outside [-2**63, 2**64) (Triton's int specialization).
        TypeError: a value Triton cannot pass (e.g. a string).
    """
    if annotation:
        # Triton's binder: an annotated parameter takes its type from the annotation; a bool or
        # float annotation is never specialized (the value is not even looked at), any other keeps
        # the attr of the unannotated class (so the int range check still happens).
        if annotation == "u1" or annotation[:2] in ("fp", "bf"):
            return SpecClass(annotation, None)
        base = classify(value, do_not_specialize=do_not_specialize,
                        do_not_specialize_on_alignment=do_not_specialize_on_alignment, is_const=is_const)
        return SpecClass(annotation, base.attr)
    if value is None:
        return SpecClass("constexpr", None)
    if isinstance(value, bool):
        return SpecClass("u1", None)
    if isinstance(value, int):
        width = _int_width(value)
        if do_not_specialize:
            return SpecClass(width, None)
        if value == 1:
            return SpecClass("constexpr", 1)
        if do_not_specialize_on_alignment:
            return SpecClass(width, "")
        return SpecClass(width, "D" if value % _ALIGNMENT == 0 else "")
    if isinstance(value, float):
        return SpecClass("fp32", None)
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        ty = tensor_type(value.dtype)  # Triton's own dtype spelling
        if ty is None:  # Triton's binder refuses it too (KeyError)
            raise TypeError(f"a tensor of dtype {value.dtype} cannot be passed to a Triton kernel")
        ptr = ("*k" if is_const else "*") + ty
        if do_not_specialize:
            return SpecClass(ptr, None)
        if do_not_specialize_on_alignment:
            return SpecClass(ptr, "")
        return SpecClass(ptr, "D" if is_aligned(value) else "")
    raise TypeError(f"a {type(value).__name__} cannot be passed to a Triton kernel: {value!r}")


def scalar_rep(value: Any, *, specialize: bool = True) -> Any:
    """One fixed representative of ``value``'s specialization class.

    Warm-up must use a value in the *same class* as the runtime value: the literal 1 compiles the
    "equal to one" variant, which a runtime 64 never hits. ``scalar_rep(64) == 16``,
    ``scalar_rep(100) == 17``, ``scalar_rep(1) == 1``, ``scalar_rep(2**40) == 2**32``.

    Args:
        value: an int, bool, float or None.
        specialize: False for a ``do_not_specialize`` parameter: only the int width matters, so
            every value of a width maps to one representative (1 included).

    Raises:
        OverflowError: an int outside [-2**63, 2**64), naming the value.
        TypeError: anything but int, bool, float, None.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return _FLOAT_REP if math.isfinite(value) else value
    if isinstance(value, int):
        width = _int_width(value)
        if not specialize:
            return _INT_REPS[(width, "")]
        if value == 1:
            return 1
        return _INT_REPS[(width, "D" if value % _ALIGNMENT == 0 else "")]
    raise TypeError(f"scalar_rep takes an int, bool, float or None, not {type(value).__name__}")


class WarmupTensor:
    """A tensor stand-in for warm-up: dtype, shape, strides and alignment, no memory.

    ``WarmupTensor(dtype, shape=(1,), strides=None, aligned=True)`` returns a ``torch.Tensor`` on
    the ``meta`` device, which Triton's binder accepts like any tensor (its ``data_ptr()`` is the
    storage offset in bytes, so a tensor offset by one element is not 16-byte aligned). It has the
    whole tensor API (``stride()``, ``shape``, ``ndim``, ``is_contiguous()``) and never allocates.

    Args:
        dtype: the torch dtype.
        shape: sizes; default ``(1,)``.
        strides: element strides; default contiguous.
        aligned: False offsets the view by one element so its address is not 16-byte aligned.

    Raises:
        ValueError: ``aligned=False`` for a 16-byte element type (every offset is aligned).
    """

    def __new__(cls, dtype: torch.dtype, shape=(1,), strides=None, aligned: bool = True) -> torch.Tensor:
        shape = tuple(int(s) for s in shape)
        if strides is None:
            strides, acc = [], 1
            for size in reversed(shape):
                strides.append(acc)
                acc *= max(size, 1)
            strides = tuple(reversed(strides))
        offset = 0
        if not aligned:
            itemsize = torch.empty((), dtype=dtype, device="meta").element_size()
            if itemsize % _ALIGNMENT == 0:
                raise ValueError(f"a {dtype} tensor is always 16-byte aligned; aligned=False is impossible")
            offset = 1
        span = 1 + sum((s - 1) * st for s, st in zip(shape, strides) if s > 0) + offset
        base = torch.empty(max(span, 1), dtype=dtype, device="meta")
        return torch.as_strided(base, shape, tuple(strides), offset)


def param_classes(jit_fn: Any, specialization: list[tuple[str, Any]]) -> dict[str, SpecClass]:
    """Name each entry of a Triton specialization list by its kernel parameter."""
    return {p.name: SpecClass.from_triton(entry) for p, entry in zip(jit_fn.params, specialization)}


def spec_classes(jit_fn: Any, specialization: list[tuple[str, Any]]) -> tuple[SpecClass, ...]:
    """One :class:`SpecClass` per kernel parameter, in order, from a :func:`bind` specialization
    (entries Triton adds after the parameters', e.g. 3.7's custom pipeline, are not classes)."""
    return tuple(SpecClass.from_triton(e) for e in param_specialization(jit_fn, specialization))
