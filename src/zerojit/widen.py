"""Widening a manifest: the recorded specializations of a kernel, with a parameter set to every
value of an axis (``zerojit manifest widen``).

A constexpr that follows the workload (a batch size ``B`` in a library's kernel nobody can edit)
makes each new value a new kernel: recording values 1, 2, 3 and 64 leaves every other value a
runtime compile. :func:`widen` gives

    {s with PARAM := v : s recorded for KERNEL, v in the axis}

for a constexpr every value (``("constexpr", v)``), for a specialized int every *class* the
values fall in (Triton's int specialization, :mod:`zerojit.specialization`: the value 1 as
``("constexpr", 1)``, divisible by 16 ``"D"``, else ``""``, the width by value range; a
``do_not_specialize`` int by width alone) with its representative (``scalar_rep``) in
``values``; several axes of one kernel as their cross product; deduplicated against the
kernel's specializations, each new one with ``launches`` 0 and ``runs`` ``()`` (no run launched
it). A kernel whose specializations would exceed :data:`zerojit.keyspace.DEFAULT_KEY_BUDGET` is
refused, naming the size. :func:`estimate_seconds` prices the new variants with the compile
times this Triton install remembers (:func:`zerojit.cache.remembered_compile_seconds`).

An int parameter listed in ``do_not_specialize_on_alignment`` looks like a specialized one in a
manifest whose values were all unaligned: widening it may add a divisible-by-16 variant no launch
hits (compiled for nothing, never wrong).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shlex
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from .cache import cache_dir, remembered_compile_seconds
from .keyspace import DEFAULT_KEY_BUDGET
from .manifest import KernelRecord, Manifest, RecordedSpecialization
from .specialization import classify, scalar_rep

__all__ = ["WidenError", "Axis", "parse_axis", "find_kernel", "widen", "widen_warnings", "tuned_parameters",
           "new_specializations", "estimate_seconds", "suggested_values", "widen_command", "widened_path"]

_INT_TYPES = ("i32", "i64", "u64")
# Triton's int widths by value range (zerojit.specialization): the pieces a range is sampled in
_WIDTH_PIECES = ((-(2**31), 2**31 - 1), (-(2**63), -(2**31) - 1), (2**31, 2**63 - 1), (2**63, 2**64 - 1))
_INT_RANGE = (-(2**63), 2**64 - 1)  # inclusive: what Triton's binder takes for an int argument


class WidenError(ValueError):
    """An axis that cannot widen the manifest (malformed, an unknown or ambiguous kernel, an
    unknown parameter, a parameter of a kind widen cannot set, a size above the key budget); the
    message names the axis, the kernel and the parameter."""


@dataclass(frozen=True)
class Axis:
    """``KERNEL:PARAM=VALUES``: the kernel (``module.qualname`` or its qualname), the parameter,
    and its values: ints and ranges ``(low, high)`` (inclusive), or bools."""

    kernel: str
    parameter: str
    items: tuple[Any, ...]  # int, bool, or (low, high)

    @property
    def size(self) -> int:
        """How many values the axis gives (a range counts each of its ints)."""
        return sum(i[1] - i[0] + 1 if isinstance(i, tuple) else 1 for i in self.items)

    def values(self) -> list[Any]:
        """Every value, in order, each once (call only for an axis of a bounded size)."""
        out: dict[Any, None] = {}
        for item in self.items:
            for v in (range(item[0], item[1] + 1) if isinstance(item, tuple) else (item,)):
                out.setdefault(v, None)
        return list(out)

    def samples(self) -> list[int]:
        """Values that reach every int class the axis's values fall in: in each width's piece of
        each range its ends, the two values after the low one, the first multiple of 16 and 1
        (of three consecutive ints at most one is 1 and at most one divisible by 16)."""
        found: set[int] = set()
        for item in self.items:
            if not isinstance(item, tuple):
                found.add(item)
                continue
            for lo, hi in _WIDTH_PIECES:
                a, b = max(lo, item[0]), min(hi, item[1])
                if a > b:
                    continue
                found.update(v for v in (a, a + 1, a + 2, b, -(-a // 16) * 16, 1) if a <= v <= b)
        return sorted(found)

    def __str__(self) -> str:
        words = [f"{i[0]}..{i[1]}" if isinstance(i, tuple) else str(i).lower() for i in self.items]
        return f"{self.kernel}:{self.parameter}={','.join(words)}"


def parse_axis(text: str) -> Axis:
    """``KERNEL:PARAM=VALUES``, VALUES a comma list of ints, inclusive ranges ``A..B`` and
    ``true`` / ``false``: ``fused_recurrent_fwd_kernel:B=1..64``, ``k:USE_G=true,false``.

    Raises:
        WidenError: not of that form, an empty or reversed range, a word that is no int or bool,
            bools mixed with ints.
    """
    head, eq, values = text.partition("=")
    kernel, colon, parameter = head.rpartition(":")
    if not eq or not colon or not kernel or not parameter or not values:
        raise WidenError(f"axis {text!r} is not KERNEL:PARAM=VALUES (e.g. my_kernel:B=1..64 or my_kernel:FLAG=true,false)")
    items: list[Any] = []
    for word in values.split(","):
        word = word.strip()
        low, dots, high = word.partition("..")
        try:
            if word.lower() in ("true", "false"):
                items.append(word.lower() == "true")
            elif dots:
                items.append((int(low), int(high)))
            else:
                items.append(int(word))
        except ValueError:
            raise WidenError(f"axis {text!r}: {word!r} is no int, A..B range, true or false") from None
        # checked outside the try, which would take this WidenError (a ValueError) for a bad word
        if isinstance(items[-1], tuple) and items[-1][0] > items[-1][1]:
            raise WidenError(f"axis {text!r}: range {word!r} is empty (A..B needs A <= B)")
    if len({isinstance(i, bool) for i in items}) > 1:
        raise WidenError(f"axis {text!r} mixes bools and ints")
    return Axis(kernel, parameter, tuple(items))


def find_kernel(manifest: Manifest, name: str) -> KernelRecord:
    """The recorded kernel ``name`` names: its ``module.qualname``, else its qualname.

    Raises:
        WidenError: none does (listing the recorded kernels), or several do (naming them).
    """
    exact = [k for k in manifest.kernels if k.name == name]
    if exact:
        return exact[0]
    found = [k for k in manifest.kernels if k.qualname == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise WidenError(f"kernel {name!r} is ambiguous: it is the qualname of {', '.join(k.name for k in found)}; "
                         "give the full module.qualname")
    held = ", ".join(k.name for k in manifest.kernels) or "no kernel"
    raise WidenError(f"the manifest holds no kernel {name!r}; it holds {held}")


def _choices(record: KernelRecord, axis: Axis) -> tuple[int, list[tuple[tuple[str, Any], Any]]]:
    """The parameter's index and the ``(entry, representative)`` pairs the axis sets it to
    (a constexpr entry is carried by value: its representative is not used).

    Raises:
        WidenError: an unknown parameter, or one of a kind the axis cannot set.
    """
    name = axis.parameter
    if name not in record.parameters:
        raise WidenError(f"kernel {record.name} has no parameter {name!r}; its parameters: "
                         f"{', '.join(record.parameters)}")
    index = record.parameters.index(name)
    entries = [s.specialization[index] for s in record.specializations]
    bools = isinstance(axis.items[0], bool)
    where = f"axis {axis}: {record.name}'s parameter {name!r}"
    if name in record.constexprs:
        kinds = {type(v) for _, v in entries}
        if kinds - {int, bool} or len(kinds) > 1:
            raise WidenError(f"{where} is a constexpr recorded as {sorted({repr(v) for _, v in entries})[:4]}: widen "
                             "sets int and bool constexprs only")
        if kinds and (bool in kinds) != bools:
            raise WidenError(f"{where} is {'a bool' if bool in kinds else 'an int'} constexpr: give "
                             f"{'true,false' if bool in kinds else 'ints'}")
        if not bools and axis.size > DEFAULT_KEY_BUDGET:
            raise WidenError(f"{where}: the axis gives {axis.size} values, above the key budget of "
                             f"{DEFAULT_KEY_BUDGET} (zerojit.keyspace.DEFAULT_KEY_BUDGET): narrow it")
        return index, [(("constexpr", v), None) for v in axis.values()]
    if bools or not all(ty in _INT_TYPES or (ty, v) == ("constexpr", 1) for ty, v in entries):
        kinds = sorted({ty for ty, _ in entries})
        raise WidenError(f"{where} is no int (recorded as {', '.join(kinds)}): widen sets constexprs and "
                         "specialized ints only")
    outside = [str(i) if not isinstance(i, tuple) else f"{i[0]}..{i[1]}" for i in axis.items
               if (i[0] if isinstance(i, tuple) else i) < _INT_RANGE[0] or (i[1] if isinstance(i, tuple) else i) > _INT_RANGE[1]]
    if outside:  # Triton refuses such an int at launch; widen would drop it (a range) or fail (a value)
        raise WidenError(f"{where} is an int: {', '.join(outside)} {'is' if len(outside) == 1 else 'are'} not within the "
                         "ints a Triton kernel takes, [-2**63, 2**64)")
    unspecialized = any(ty in _INT_TYPES and v is None for ty, v in entries)
    annotation = _annotation(record, index)
    pairs: dict[tuple[str, Any], Any] = {}
    for value in axis.samples():
        cls = classify(value, do_not_specialize=unspecialized, annotation=annotation)
        pairs.setdefault((cls.type, cls.attr), scalar_rep(value, specialize=not unspecialized))
    return index, list(pairs.items())


def _annotation(record: KernelRecord, index: int) -> str | None:
    """The int type an annotated parameter (``n: tl.int64``) was recorded with: an i64 / u64 whose
    representative is an i32 value, or a typed equal-to-one class; None for a plain int."""
    name = record.parameters[index]
    for s in record.specializations:
        ty, attr = s.specialization[index]
        rep = dict(s.values).get(name)
        if ty in ("i64", "u64") and (attr == 1 or isinstance(rep, int) and -(2**31) <= rep < 2**31):
            return ty
    return None


def widen(manifest: Manifest, axes: Iterable[Axis | str], *, budget: int = DEFAULT_KEY_BUDGET) -> Manifest:
    """``manifest`` with each axis's kernel widened (the module doc): the recorded
    specializations first, then the new ones in axis order. Axes of one kernel multiply.

    Args:
        axes: :class:`Axis` values or their text (:func:`parse_axis`).
        budget: the most specializations a kernel may end with.

    Raises:
        WidenError: a malformed axis, an unknown or ambiguous kernel, an unknown parameter or one
            widen cannot set, the same parameter twice, more specializations than ``budget``.
    """
    by_kernel: dict[str, list[Axis]] = {}
    for axis in axes:
        axis = parse_axis(axis) if isinstance(axis, str) else axis
        record = find_kernel(manifest, axis.kernel)
        mine = by_kernel.setdefault(record.name, [])
        if any(a.parameter == axis.parameter for a in mine):
            raise WidenError(f"axis {axis}: parameter {axis.parameter!r} of {record.name} is given twice")
        mine.append(axis)
    kernels = []
    for record in manifest.kernels:
        axes_here = by_kernel.get(record.name)
        kernels.append(record if not axes_here else _widened(record, axes_here, budget))
    return dataclasses.replace(manifest, kernels=tuple(kernels))


def tuned_parameters(record: KernelRecord) -> tuple[str, ...]:
    """The constexprs a ``triton.autotune`` config of ``record`` sets (its recorded
    ``autotune_config``s): the tuner's config space, compiled whole, which no workload grows."""
    found = {name for s in record.specializations if s.autotune_config for name, _ in s.autotune_config}
    return tuple(p for p in record.constexprs if p in found)


def widen_warnings(manifest: Manifest, axes: Iterable[Axis | str]) -> list[str]:
    """What may be wrong with widening ``manifest`` by ``axes`` (each valid for :func:`widen`),
    one line each, not refused:

    * a constexpr that sets a shape or a static loop bound (the kernel's ``shape_constexprs``)
      given values that are not powers of two: ``tl.arange`` bounds and block shapes take powers
      of two only (Triton: "arange's range must be a power of 2"), a ``tl.static_range`` bound
      any int, and the manifest does not tell which;
    * a constexpr a ``triton.autotune`` config sets (:func:`tuned_parameters`): the launches take
      its value from the configs, so a value none of them has is compiled for nothing."""
    found = []
    for axis in axes:
        axis = parse_axis(axis) if isinstance(axis, str) else axis
        record = find_kernel(manifest, axis.kernel)
        name, where = axis.parameter, f"{record.name}'s constexpr {axis.parameter!r}"
        if name not in record.constexprs or isinstance(axis.items[0], bool):
            continue
        if name in (record.shape_constexprs or ()):
            odd = [v for v in axis.values() if v < 1 or v & (v - 1)]
            if odd:
                shown = ", ".join(map(str, odd[:8])) + (f", ... ({len(odd)} in all)" if len(odd) > 8 else "")
                found.append(f"{where} sets a shape or a static loop bound, and {shown} "
                             f"{'is not a power' if len(odd) == 1 else 'are not powers'} of two: a tl.arange bound "
                             "or a block shape needs a power of two (those variants will fail to compile), a "
                             "tl.static_range bound takes any int")
        if name in tuned_parameters(record):
            found.append(f"{where} is set by its triton.autotune configs: widening it adds variants no config "
                         "launches")
    return found


def _widened(record: KernelRecord, axes: Sequence[Axis], budget: int) -> KernelRecord:
    sets = [_choices(record, axis) for axis in axes]
    product = math.prod(len(choices) for _, choices in sets)
    existing = {(s.specialization, s.options) for s in record.specializations}
    if product > budget:  # every recorded specialization gives this many distinct ones at least
        raise WidenError(_over(record, f"at least {product}", budget, axes))
    added: dict[tuple, RecordedSpecialization] = {}
    for base in record.specializations:
        for combo in itertools.product(*(choices for _, choices in sets)):
            spec = list(base.specialization)
            values = dict(base.values)
            for (index, _), (entry, rep) in zip(sets, combo):
                spec[index] = entry
                name = record.parameters[index]
                if entry[0] == "constexpr":  # carried by value (the int 1 too), as the recorder keeps it
                    values.pop(name, None)
                else:
                    values[name] = rep
            key = (tuple(spec), base.options)
            if key in existing or key in added:
                continue
            added[key] = RecordedSpecialization(tuple(spec), tuple(sorted(values.items())), base.options, 0,
                                                base.autotune_config, runs=())
            if len(existing) + len(added) > budget:
                raise WidenError(_over(record, f"more than {budget}", budget, axes))
    return dataclasses.replace(record, specializations=record.specializations + tuple(added.values()))


def _over(record: KernelRecord, size: str, budget: int, axes: Sequence[Axis]) -> str:
    return (f"kernel {record.name}: widening by {', '.join(map(str, axes))} gives {size} specializations "
            f"({len(record.specializations)} recorded), above the key budget of {budget} "
            "(zerojit.keyspace.DEFAULT_KEY_BUDGET): narrow the axes")


def new_specializations(before: Manifest, after: Manifest) -> dict[str, int]:
    """Per kernel (``module.qualname``), how many specializations ``after`` holds that ``before``
    does not (kernels with none left out)."""
    old = {k.name: {(s.specialization, s.options) for s in k.specializations} for k in before.kernels}
    counts = {k.name: sum((s.specialization, s.options) not in old.get(k.name, ()) for s in k.specializations)
              for k in after.kernels}
    return {name: n for name, n in counts.items() if n}


def estimate_seconds(counts: Mapping[str, int], *, remembered: Mapping[str, float] | None = None,
                     folder: str | None = None) -> tuple[float | None, str]:
    """What compiling ``counts`` (kernel ``module.qualname`` -> new variants) takes on one
    worker, from the compile seconds this Triton install remembers (``remembered``, default
    :func:`zerojit.cache.remembered_compile_seconds`: entry folder -> seconds): per kernel the
    median of its remembered entries (found in the cache folder ``folder``, default Triton's, by
    their metadata file, named after the function), else the median over everything remembered,
    which the words say may be far off (a heavy kernel compiles 10x longer than the median).
    Returns the seconds (None when nothing is remembered) and how they were estimated, in words."""
    remembered = remembered_compile_seconds() if remembered is None else remembered
    if not remembered:
        return None, "no compile time is remembered on this install (a warm-up with workers remembers them)"
    folder = cache_dir() if folder is None else folder
    overall = statistics.median(remembered.values())
    total, words = 0.0, []
    for name, n in counts.items():
        file = f"{name.rpartition('.')[2][:150]}.json"  # Triton's metadata file: the function's name
        own = [s for entry, s in remembered.items() if os.path.exists(os.path.join(folder, entry, file))]
        each = statistics.median(own) if own else overall
        total += n * each
        how = (f"median of its {len(own)} remembered compiles" if own else
               "none of its own remembered: the median of other kernels' compiles, which may be far off for this "
               "one (a heavy kernel can take 10x as long)")
        words.append(f"{name}: {n} x {each:.2f} s ({how})")
    return total, "; ".join(words)


def suggested_values(values: Iterable[Any], *, shape: bool = False) -> str:
    """An axis's VALUES covering recorded values, rounded up: ``true,false`` for bools; for a
    constexpr that sets a shape (``shape``) whose every value is a power of two (a tile size:
    ``tl.arange`` takes powers of two only), the powers of two from the smallest to the largest
    (``16,32,64``); else ``LOW..HIGH`` from 1 (or the smallest, when below 1) to the largest
    rounded up to a power of two (``1..64`` for 1, 2, 3, 64)."""
    values = list(values)
    if any(isinstance(v, bool) for v in values):
        return "true,false"
    low, high = min(values), max(values)
    if shape and low >= 1 and all(v & (v - 1) == 0 for v in values):
        return ",".join(str(1 << e) for e in range(low.bit_length() - 1, high.bit_length()))
    top = 1 << max(high - 1, 0).bit_length() if high >= 1 else high
    return f"{min(low, 1)}..{max(top, 1)}"


def widened_path(path: str) -> str:
    """Where the widened manifest of ``path`` goes by default: ``m.json`` -> ``m-widened.json``."""
    stem, ext = os.path.splitext(path)
    return f"{stem}-widened{ext or '.json'}"


def widen_command(path: str, axes: Sequence[str]) -> str:
    """The ``zerojit manifest widen`` command line for ``axes`` (``KERNEL:PARAM=VALUES`` each), each
    argument quoted for a POSIX shell (``shlex.quote``: a path with a space, a ``<locals>`` kernel)."""
    axis_words = " ".join(f"--axis {shlex.quote(a)}" for a in axes)
    return f"zerojit manifest widen {shlex.quote(path)} {axis_words} -o {shlex.quote(widened_path(path))}"
