"""Key-space lint: the checks a kernel class passes when it is created (DESIGN.md point 13).

Each check returns the problem as a message (a ``str``) or None; the contract
(:mod:`zerojit.kernel`) raises :class:`zerojit.kernel.KernelDefinitionError` with it, so this
module needs nothing from the kernel module. Every message names the offending name and what
it could have been (the kernel's parameters, the launcher's inputs) and says what to change.

The rules:

* Triton's ``do_not_specialize`` / ``do_not_specialize_on_alignment`` take parameter names or
  indexes; Triton ignores an entry that is neither, so a typo (``num_tokenz``) silently
  specializes the parameter meant. An entry naming a ``tl.constexpr`` is refused by Triton 3.6
  only when it compiles; a constexpr is always part of the key.
* ``generic_keep`` (:mod:`zerojit.generic`) names plain (non-constexpr) parameters: a typo would
  silently drop the equal-to-one class of the stride meant from the kernel's generic variants.
* ``host_only`` (:func:`zerojit.kernel.kernel_launcher`) names inputs the launcher takes.
* A ``CompileKey`` is a dictionary key of the registry, the audit and the monitor: a frozen
  dataclass compared by value (``eq=True``), hashable, with no field of a mutable container type.

And one check a warm-up runs on itself: the launch ``compile(key)`` makes must dispatch ``key``
(:func:`check_warmup_key`); the kernel records what its ``dispatch`` returned during that launch
(:func:`record_dispatch`, :data:`WARMUP_CHECK`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import typing
from typing import Any, Iterable

from . import triton_compat as _tc

__all__ = ["check_specialization_hints", "check_generic_keep", "check_host_only", "check_compile_key", "check_warmup_key",
           "WarmupKeyCheck", "WARMUP_CHECK", "record_dispatch"]

# Field types whose values cannot be hashed: a key with one fails the first time it is looked up.
_UNHASHABLE = (list, dict, set, bytearray)
_UNHASHABLE_NAMES = frozenset(t.__name__ for t in _UNHASHABLE) | {"List", "Dict", "Set", "MutableMapping"}


def check_specialization_hints(kernel_cls: str, jit_fn: Any) -> str | None:
    """The first problem with ``jit_fn``'s ``do_not_specialize`` / ``do_not_specialize_on_alignment``
    entries (Triton's ``triton.jit`` arguments), or None.

    Args:
        kernel_cls: the zerojit class's name, for the message.
        jit_fn: the ``triton.jit`` function (or the interpreter's function).

    A problem is an entry that is no parameter name and no index in range, or one that names a
    ``tl.constexpr`` parameter.
    """
    names = _parameter_names(jit_fn)
    constexprs = _tc.constexpr_parameters(jit_fn)
    listing = f"{jit_fn.fn.__name__}({', '.join(names)})"
    for option, entries in zip(("do_not_specialize", "do_not_specialize_on_alignment"),
                               _tc.specialization_hints(jit_fn)):
        for entry in entries:
            name = _entry_name(entry, names)
            if name is None:
                return (f"{kernel_cls}: {option} names {entry!r}, which is no parameter of kernel {listing}; "
                        f"Triton ignores it, so the parameter meant is still specialized: spell it as a parameter")
            if name in constexprs:
                return (f"{kernel_cls}: {option} names {name!r}, a tl.constexpr parameter of kernel {listing}; a "
                        f"constexpr is always part of the compile key (Triton fails when it compiles): drop it "
                        f"from {option}, or make {name!r} a plain parameter")
    return None


def check_generic_keep(kernel_cls: str, jit_fn: Any, keep: Any) -> str | None:
    """The problem with a kernel class's ``generic_keep`` (names of ints whose equal-to-one class
    its generic variants keep, :mod:`zerojit.generic`), or None: it must be a tuple of names of
    non-constexpr parameters of ``jit_fn`` (a typo would silently unspecialize the stride meant)."""
    names = _parameter_names(jit_fn)
    listing = f"{jit_fn.fn.__name__}({', '.join(names)})"
    if not isinstance(keep, tuple) or not all(isinstance(n, str) for n in keep):
        return f"{kernel_cls}: generic_keep must be a tuple of parameter names, not {keep!r}"
    constexprs = _tc.constexpr_parameters(jit_fn)
    for name in keep:
        if name not in names or name in constexprs:
            what = "a tl.constexpr parameter" if name in constexprs else "no parameter"
            return (f"{kernel_cls}: generic_keep names {name!r}, {what} of kernel {listing}; it names ints whose "
                    "equal-to-one class the generic variant keeps: spell a plain parameter")
    return None


def check_host_only(launcher: str, host_only: Iterable[str], inputs: Iterable[str]) -> str | None:
    """The problem with ``host_only`` names the launcher ``launcher`` does not take, or None."""
    taken = list(inputs)
    unknown = sorted(set(host_only) - set(taken))
    if not unknown:
        return None
    return (f"{launcher}: host_only names unknown inputs {unknown}; the launcher's inputs are "
            f"({', '.join(taken)}): list only those")


def check_compile_key(kernel_cls: str, key_cls: type) -> str | None:
    """The problem with a kernel's ``CompileKey`` class, or None: it must be a frozen dataclass
    compared by value, hashable, with no field typed as a mutable container (list, dict, set,
    bytearray), whose values would make every key unhashable."""
    if not (dataclasses.is_dataclass(key_cls) and key_cls.__dataclass_params__.frozen):
        return (f"{kernel_cls}.CompileKey must be a frozen dataclass: decorate it with "
                "@dataclass(frozen=True)")
    if not key_cls.__dataclass_params__.eq or getattr(key_cls, "__hash__", None) is None:
        return (f"{kernel_cls}.CompileKey must be hashable and compared by value: use @dataclass(frozen=True) "
                "without eq=False and without __hash__ = None")
    try:
        hints = typing.get_type_hints(key_cls)
    except Exception:  # an annotation that does not resolve: judge it by its written name
        hints = {}
    for f in dataclasses.fields(key_cls):
        written = hints.get(f.name, f.type)
        if _unhashable(written):
            shown = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", repr(f.type))
            return (f"{kernel_cls}.CompileKey field {f.name!r} is typed {shown}, which is not hashable: "
                    "use a tuple or a frozenset")
    return None


def _unhashable(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.split("[", 1)[0].rsplit(".", 1)[-1].strip() in _UNHASHABLE_NAMES
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, _UNHASHABLE)


def _parameter_names(jit_fn: Any) -> tuple[str, ...]:
    return tuple(inspect.signature(jit_fn.fn).parameters)


def _entry_name(entry: int | str, names: tuple[str, ...]) -> str | None:
    """The parameter an entry names (Triton accepts a name or an index), or None."""
    if isinstance(entry, str):
        return entry if entry in names else None
    if isinstance(entry, int) and 0 <= entry < len(names):
        return names[entry]
    return None


class WarmupKeyCheck:
    """What ``compile(key)`` checks its one warm-up launch against: the key being warmed, the
    ``warmup_inputs(key)`` launched, and each key ``dispatch`` returned during the launch."""

    def __init__(self, key: Any, inputs: dict[str, Any]) -> None:
        self.key = key
        self.inputs = inputs
        self.dispatched: list[Any] = []


#: Set by ``TritonJitKernel.compile(key)`` around its warm-up launch; None otherwise.
WARMUP_CHECK: contextvars.ContextVar[WarmupKeyCheck | None] = contextvars.ContextVar(
    "zerojit_warmup_check", default=None)


def record_dispatch(cls: type) -> None:
    """Wrap the ``dispatch`` that ``cls`` defines (if any) so that, inside a warm-up launch, each
    key it returns is recorded in :data:`WARMUP_CHECK`; outside one it only returns the key. The
    wrapper keeps the signature (``inspect.signature`` follows ``__wrapped__``)."""
    method = cls.__dict__.get("dispatch")
    if method is None or not callable(method) or hasattr(method, "__wrapped__"):
        return

    @functools.wraps(method)
    def dispatch(self: Any, *args: Any, **inputs: Any) -> Any:
        key = method(self, *args, **inputs)
        check = WARMUP_CHECK.get()
        if check is not None:
            check.dispatched.append(key)
        return key

    cls.dispatch = dispatch


def check_warmup_key(kernel: str, key: Any, dispatched: Any) -> str | None:
    """The problem when a warm-up launch of ``key`` dispatched another key, or None (``dispatched``
    is None: the launcher called no ``dispatch``, nothing to compare).

    The message names both keys and each field that differs; the usual slip is a
    ``scalar_rep(v)`` (a representative of v's specialization class) fed where dispatch needs v.
    """
    if dispatched is None or dispatched == key:
        return None
    if type(dispatched) is type(key) and dataclasses.is_dataclass(key):
        differs = [f"field {f.name!r} differs (warmed {getattr(key, f.name)!r}, the launch dispatched "
                   f"{getattr(dispatched, f.name)!r})" for f in dataclasses.fields(key)
                   if getattr(key, f.name) != getattr(dispatched, f.name)]
        what = "; ".join(differs)
    else:
        what = f"the launch dispatched a {type(dispatched).__name__}, not a {type(key).__name__}"
    return (f"{kernel}: the warm-up launch of key {key} dispatched key {dispatched}: {what}. warmup_inputs(key) "
            "must give inputs that dispatch to the key being warmed: pass the key's own value where dispatch reads "
            "it (scalar_rep(v) stands for v's specialization class, not for v)")
