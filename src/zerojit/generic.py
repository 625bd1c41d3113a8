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

The warm-up (:meth:`zerojit.registry.JitWarmupRegistry.warmup`, ``generic=True``) makes them:
:func:`plan` groups the warmed keys' variants; a group one of them already serves (its classes
are the generic ones) is filed as it is; each other group becomes a job of a
:class:`GenericKernel` (the generic function as a zerojit kernel, keyed by the group's classes
and launch options), run by the same warm-up session as the keys (worker processes, restore
index, bundles: a worker compiles the original function's source for the generic signature,
the same disk entry, as ``cache_key`` is shared); :func:`file_variants` checks each result
against its group and files it.
"""

from __future__ import annotations

import ast
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Sequence

from . import script_kernels as _script
from . import triton_compat as _tc
from .kernel import CompiledVariant, TritonJitKernel
from .manifest import KernelRecord, RecordedKernel, RecordedKey, encode_classes, recorded_kernel_class
from .specialization import SpecClass

__all__ = ["GenericGroup", "generic_classes", "options_text", "group_of", "register", "lookup", "generic_functions",
           "forget", "adopt", "keep_one_of", "generic_function_of", "GenericKernel", "GenericPlan", "plan",
           "file_variants"]

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


def adopt(source: Any, target: Any) -> int:
    """File every generic variant of ``source`` for ``target`` too (the same ``CompiledKernel``
    objects, with ``source``'s ``generic_keep`` names): ``target`` is a twin of ``source``, a
    ``triton.jit`` function of the same ``cache_key`` (``zerojit exec`` binding the program's
    ``__main__`` function to the one a warm-up rebuilt from its source). Returns how many."""
    with _LOCK:
        mine = [(device, group, compiled) for (_, device, group), (fn, compiled) in _TABLE.items() if fn is source]
        if mine:
            _KEEP[id(target)] = _KEEP.get(id(source), frozenset())
        for device, group, compiled in mine:
            _TABLE.setdefault((id(target), device, group), (target, compiled))
    return len(mine)


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
        source = _script.program_source_of(jit_fn)
        if source is not None:  # a __main__ kernel's: a compile worker rebuilds it from the same source
            _script.mark_rebuilt(fn, source)
    return fn


# One value of each int width, none equal to 1 nor divisible by 16 (any value of the width is
# in the generic class; a generic_keep int's class is then "not one"). An annotated int of
# another type (tl.uint8, ...) takes its type from the annotation: 17 then.
_INT_VALUE = {"i32": 17, "i64": 2**32 + 1, "u64": 2**63 + 1}


def _scalar_value(spec: SpecClass) -> Any:
    """A value in the generic class ``spec`` of an int, float or bool parameter."""
    if spec.kind == "int":
        return 1 if spec.attr == 1 else _INT_VALUE.get(spec.type, 17)
    return True if spec.kind == "bool" else 0.5


class GenericKernel(RecordedKernel):
    """The generic function of a kernel's ``triton.jit`` function (:func:`generic_function_of`)
    as a zerojit kernel, made by :func:`plan`: one key per group (a :class:`RecordedKey` of the
    group's generic classes and launch options); ``warmup_inputs`` builds arguments in those
    classes. Named ``"<kernel name> [generic]"``; never registered, its variants are no keys."""

    #: Marks the generic kernels (the warm-up makes no generic variant of them).
    generic: ClassVar[bool] = True
    #: The specialized ``triton.jit`` function whose generic variants this kernel compiles.
    source: ClassVar[Any] = None
    #: The ``generic_keep`` names.
    keep_one: ClassVar[tuple[str, ...]] = ()

    def scalar_values(self, key: RecordedKey) -> dict[str, Any]:
        """A value in each int, float and bool parameter's generic class, by name."""
        return {name: _scalar_value(SpecClass(ty, attr))
                for name, (ty, attr) in zip(self.record.parameters, key.specialization)
                if ty != "constexpr" and not ty.startswith("*")}


_KERNELS_LOCK = threading.Lock()


def _generic_kernel(name: str, jit_fn: Any, keep_one: tuple[str, ...]) -> GenericKernel:
    """The :class:`GenericKernel` of ``jit_fn`` and ``keep_one`` named after the zerojit kernel
    ``name`` (made once)."""
    with _KERNELS_LOCK:
        made = jit_fn.__dict__.setdefault("_zerojit_generic_kernels", {})
        kernel = made.get((keep_one, name))
        if kernel is None:
            module, qualname = _tc.jit_identity(jit_fn)
            record = KernelRecord(module, qualname, _tc.source_hash(jit_fn), _tc.parameter_names(jit_fn),
                                  _tc.ordered_constexpr_parameters(jit_fn), ())
            cls = recorded_kernel_class(generic_function_of(jit_fn, keep_one), f"{name} [generic]", record,
                                        base=GenericKernel, prefix="Generic", source=jit_fn, keep_one=keep_one,
                                        __module__=__name__)
            kernel = made[keep_one, name] = cls()
        return kernel


def _launch_options(group: GenericGroup) -> tuple[tuple[str, Any], ...]:
    """The launch options a launch passes to reach ``group``'s options text (those
    ``JITFunction.run`` adds itself left out), in order.

    Raises:
        ValueError: the text is no dict of literals."""
    options = ast.literal_eval(group.options) if group.options else {}
    if not isinstance(options, dict):
        raise ValueError(f"launch options {group.options!r} are no dict")
    return tuple(_tc.run_options_removed(options).items())


@dataclass
class GenericPlan:
    """What a warm-up does for generic variants (:func:`plan`).

    Attributes:
        jobs: ``(GenericKernel, RecordedKey)`` warm-up jobs, one per group no warmed variant serves.
        groups: ``(jit function, keep_one, group)`` of each job, in job order.
        served: ``(jit function, keep_one, group, variant)`` of each group a warmed key's variant
            serves (its classes are the generic ones): filed as it is, no compile.
        notes: groups that get no generic variant, and why (for the report's notes).
    """

    jobs: list[tuple[GenericKernel, RecordedKey]] = field(default_factory=list)
    groups: list[tuple[Any, tuple[str, ...], GenericGroup]] = field(default_factory=list)
    served: list[tuple[Any, tuple[str, ...], GenericGroup, CompiledVariant]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _groups(jobs: Sequence[tuple[Any, Any]], variants: Sequence[CompiledVariant | None]) -> dict[tuple, list]:
    """``(id(fn), keep_one, group) -> [zerojit kernel, fn, keep_one, group, serving variant]``
    over the warmed variants of Triton kernels, first seen first."""
    found: dict[tuple, list] = {}
    for (kernel, _), variant in zip(jobs, variants):
        if variant is None or not isinstance(kernel, TritonJitKernel) or getattr(kernel, "generic", False):
            continue
        fn = _tc.unwrap_jit_function(kernel.kernel)
        if fn is None:  # (the interpreter's function: nothing compiles)
            continue
        keep = tuple(sorted(kernel.generic_keep))
        group = group_of(fn, variant.specialization, variant.triton_key, keep)
        slot = found.setdefault((id(fn), keep, group), [kernel, fn, keep, group, None])
        if slot[4] is None and variant.specialization == group.classes:
            slot[4] = variant
    return found


def plan(jobs: Sequence[tuple[Any, Any]], variants: Sequence[CompiledVariant | None]) -> GenericPlan:
    """The generic variants of a warm-up's ``jobs`` (``variants[i]``: job i's warmed variant,
    None when it failed): one per group of each ``triton.jit`` function (:func:`group_of`, with
    its zerojit kernel's ``generic_keep``). Kernels that are no :class:`TritonJitKernel` (or are
    generic kernels) have none."""
    out = GenericPlan()
    for kernel, fn, keep, group, variant in _groups(jobs, variants).values():
        if variant is not None:
            out.served.append((fn, keep, group, variant))
            continue
        try:
            job = (_generic_kernel(kernel.name, fn, keep), RecordedKey(encode_classes(group.classes),
                                                                      _launch_options(group)))
        except Exception as e:  # (a launcher parameter zerojit reserves, options that are no literals)
            out.notes.append(f"{kernel.name}: no generic variant for launch options {group.options}: "
                             f"{type(e).__name__}: {e}")
            continue
        out.jobs.append(job)
        out.groups.append((fn, keep, group))
    return out


def file_variants(generic: GenericPlan, results: Sequence[CompiledVariant | BaseException],
                  device: Any) -> tuple[list[CompiledVariant], list[str]]:
    """File every generic variant of ``generic`` in the process's table (:func:`register`):
    the served groups' warmed variants, and each job's result (``results[i]``: job i's variant,
    or the error it failed with) when its classes and launch options are its group's.

    Returns the variants filed (marked ``generic``, served groups first) and a note for each
    job that failed or came out in another group (a miss of that group then compiles).
    """
    filed, notes = [], []
    for fn, keep, group, variant in generic.served:
        register(fn, device, group, variant.compiled, keep)
        filed.append(dataclasses.replace(variant, generic=True))
    for (kernel, key), (fn, keep, group), result in zip(generic.jobs, generic.groups, results):
        if isinstance(result, BaseException):
            notes.append(f"{kernel.name}: no generic variant for {key}: {type(result).__name__}: {result}")
            continue
        got = GenericGroup(result.specialization, options_text(result.triton_key))
        if got != group:
            notes.append(f"{kernel.name}: the generic variant compiled for {key} serves another group "
                         f"({[str(c) for c in got.classes]}, {got.options}); not filed")
            continue
        register(fn, device, group, result.compiled, keep)
        filed.append(dataclasses.replace(result, generic=True))
    return filed, notes
