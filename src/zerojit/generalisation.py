"""How a recording's key space grows (``zerojit record --report``).

From a manifest, each parameter whose class took several values:

* **configuration**: constant within each recorded run, other in another run (a model flag: a
  hidden size, a parallel size). Reported apart: a model setting, not growth. Runs come from
  the manifest's ``runs`` (``zerojit manifest merge`` of one recording per set of flags); a
  manifest of one recording has one run, where nothing is configuration.
* **growth**: several values within one run, the workload's. For an int constexpr the exact
  ``zerojit manifest widen`` command that warms the recorded range rounded up
  (:func:`zerojit.widen.suggested_values`) and how many variants it adds; and, only when it does
  not set a shape (:mod:`zerojit.shapeflow`: a ``tl.arange`` bound, a tile size, which no
  runtime int can be), passing it as a runtime int with ``do_not_specialize`` and what that
  saves. A bool constexpr: both values, with ``widen``. A specialized int or a pointer whose
  16-byte alignment varied: the Triton setting that bounds it (``do_not_specialize``,
  ``do_not_specialize_on_alignment``: Triton's int and pointer specialization,
  :mod:`zerojit.specialization`) and what it saves.

Specializations ``widen`` added (``runs`` ``()``) are no recording: they are left out. Constexprs
a ``triton.autotune`` config sets are the tuner's config space, named apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .manifest import KernelRecord, Manifest
from .widen import WidenError, new_specializations, suggested_values, tuned_parameters, widen, widen_command

__all__ = ["Growth", "Setting", "growth", "settings", "growth_report", "bounded_together", "tuned_parameters"]

_INT_TYPES = ("i32", "i64", "u64")


@dataclass(frozen=True)
class Growth:
    """A parameter whose class took several values within a recorded run.

    Attributes:
        kernel: the recorded kernel (``module.qualname``); parameter: the parameter's name.
        kind: ``"constexpr"`` (an int one), ``"bool"`` (a bool constexpr), ``"int"`` (a
            specialized int) or ``"pointer"``.
        values: the distinct classes or values it took, in words, first seen first.
        variants: the kernel's recorded variants; bounded: how many remain with ``fix``.
        fix: the change to the kernel that bounds it; None where there is none to offer (a
            constexpr that sets a shape, a bool).
        widen: the ``zerojit manifest widen`` command warming its values (constexprs), else None;
            widen_adds: the variants it adds (None: above the key budget).
        shape: a constexpr that sets a shape (True), does not (False), not known (None).
    """

    kernel: str
    parameter: str
    kind: str
    values: tuple[str, ...]
    variants: int
    bounded: int
    fix: str | None
    widen: str | None = None
    widen_adds: int | None = None
    shape: bool | None = None

    @property
    def saves(self) -> int:
        """Variants the fix saves on this recording."""
        return self.variants - self.bounded

    def __str__(self) -> str:
        words = {"constexpr": "constexpr", "bool": "bool constexpr", "int": "int", "pointer": "pointer"}[self.kind]
        head = (f"{self.kernel}: {words} parameter {self.parameter!r} took {len(self.values)} "
                f"{'classes' if self.kind in ('int', 'pointer') else 'values'} ({', '.join(self.values)})")
        if self.widen is None:
            return f"{head}: {self.fix} bounds it; {self.variants} -> {self.bounded} variants (saves {self.saves})"
        adds = ("over the key budget" if self.widen_adds is None
                else f"adds {self.widen_adds} variant{'' if self.widen_adds == 1 else 's'}")
        text = f"{head}: warm every value with `{self.widen}` ({adds})"
        if self.fix is not None:
            if not self.saves:  # it varies only with another parameter: bounding it alone saves nothing
                return text
            return (text + f"; or, {self.fix}: {self.variants} -> {self.bounded} variants (saves {self.saves})")
        if self.shape:  # the manifest's shape_constexprs do not tell a tl.arange bound from a static_range one
            return text + "; it sets a shape or a static loop bound, so it stays a constexpr"
        if self.kind == "constexpr":
            return text + ("; whether it could be a runtime int is not known (the manifest holds no shape analysis: "
                           "record it again)")
        return text


@dataclass(frozen=True)
class Setting:
    """A parameter constant within each recorded run, other across runs: configuration.

    Attributes:
        kernel, parameter: as in :class:`Growth`.
        per_run: ``(run index, value in words)`` for each run that launched the kernel.
    """

    kernel: str
    parameter: str
    per_run: tuple[tuple[int, str], ...]

    def __str__(self) -> str:
        values = ", ".join(f"{v} in run {r}" for r, v in self.per_run)
        return f"{self.kernel}: {self.parameter!r} set per run ({values}): a model setting, not growth"


def _int_words(ty: str, attr: Any) -> str:
    if ty == "constexpr":
        return "equal to 1"
    width = "" if ty == "i32" else f"{ty} "
    return width + {"D": "divisible by 16", "": "not divisible by 16", None: "unspecialized"}[attr]


def _words(entry: tuple[str, Any], constexpr: bool) -> str:
    ty, attr = entry
    if ty == "constexpr" and constexpr:
        return str(attr)
    if ty in _INT_TYPES or ty == "constexpr":
        return _int_words(ty, attr)
    if ty.startswith("*"):
        return f"{ty} {'16-byte aligned' if attr == 'D' else 'not 16-byte aligned'}"
    return ty


def _recorded(record: KernelRecord) -> list:
    """The specializations some run launched (not those ``widen`` added)."""
    return [s for s in record.specializations if s.runs != ()]


def _runs(spec: Any) -> tuple:
    return spec.runs if spec.runs is not None else (None,)  # unknown runs: one run of their own


def _per_run(specs: list, i: int) -> dict[Any, list]:
    """Run -> the distinct entries of parameter ``i`` its specializations hold."""
    found: dict[Any, dict] = {}
    for s in specs:
        for r in _runs(s):
            found.setdefault(r, {}).setdefault(s.specialization[i], None)
    return {r: list(entries) for r, entries in found.items()}


def _axis_kernel(manifest: Manifest, record: KernelRecord) -> str:
    """How an axis names ``record``: its qualname when no other recorded kernel has it."""
    same = [k for k in manifest.kernels if k.qualname == record.qualname]
    return record.qualname if len(same) == 1 else record.name


def _kernel_growth(manifest: Manifest, record: KernelRecord, path: str) -> tuple[list[Growth], list[Setting]]:
    specs = _recorded(record)
    keys = [(s.specialization, s.options) for s in specs]
    tuned = tuned_parameters(record)
    found, settings_found = [], []
    for i, name in enumerate(record.parameters):
        entries = list(dict.fromkeys(s.specialization[i] for s in specs))
        if len(entries) < 2 or name in tuned:
            continue
        per_run = _per_run(specs, i)
        if len(per_run) > 1 and all(len(e) == 1 for e in per_run.values()) and None not in per_run:
            settings_found.append(Setting(record.name, name, tuple((r, _words(e[0], name in record.constexprs))
                                                                 for r, e in sorted(per_run.items()))))
            continue
        types = {ty for ty, _ in entries}
        shape = None
        command = adds = None
        if name in record.constexprs:
            values = [v for _, v in entries]
            if all(type(v) is bool for v in values):
                kind, fix, erased = "bool", None, None
            elif all(type(v) is int for v in values):
                kind = "constexpr"
                shape = None if record.shape_constexprs is None else name in record.shape_constexprs
                erased = ("i32", None)
                fix = None if shape is not False else (
                    f"if it follows the request (not the model or a tile choice), pass it as a runtime int (no "
                    f"tl.constexpr) with do_not_specialize=[{name!r}]")
            else:
                continue  # a dtype or other constexpr: each value is code of its own
            kernel, axis_values = _axis_kernel(manifest, record), suggested_values(values, shape=bool(shape))
            command = widen_command(path, [f"{kernel}:{name}={axis_values}"])
            try:
                adds = sum(new_specializations(manifest, widen(manifest, [f"{kernel}:{name}={axis_values}"])).values())
            except WidenError:  # above the key budget
                adds = None
        elif types <= {*_INT_TYPES, "constexpr"}:
            if any(ty == "constexpr" and v != 1 for ty, v in entries):
                continue
            kind, erased = "int", None
            fix = f"do_not_specialize=[{name!r}]"
        elif len(types) == 1 and next(iter(types)).startswith("*"):
            kind, erased = "pointer", (next(iter(types)), None)
            fix = f"do_not_specialize_on_alignment=[{name!r}]"
        else:
            continue  # another dtype is another kernel: part of the key space, nothing to bound
        bounded = _bounded(keys, {i: erased}) if fix is not None else len(keys)
        found.append(Growth(record.name, name, kind, tuple(_words(e, name in record.constexprs) for e in entries), len(keys), bounded, fix,
                            command, adds, shape))
    return found, settings_found


def _bounded(keys: list, erase: dict[int, Any]) -> int:
    """How many distinct variants remain when parameter ``i``'s entry becomes ``erase[i]`` (None:
    its int width, unspecialized, as Triton's ``do_not_specialize`` keeps it)."""
    def erased(i: int, entry: tuple[str, Any]) -> tuple[str, Any]:
        if i not in erase:
            return entry
        if erase[i] is not None:
            return erase[i]
        return ("i32" if entry[0] == "constexpr" else entry[0], None)

    return len({(tuple(erased(i, e) for i, e in enumerate(spec)), options) for spec, options in keys})


def bounded_together(record: KernelRecord, found: Sequence[Growth]) -> int:
    """The variants of ``record`` left when every parameter of ``found`` (its :func:`growth`
    entries) that has a fix is bounded at once (parameters that vary together save only
    together)."""
    keys = [(s.specialization, s.options) for s in _recorded(record)]
    index = {name: i for i, name in enumerate(record.parameters)}
    erase: dict[int, Any] = {}
    for g in found:
        if g.fix is None:
            continue
        i = index[g.parameter]
        erase[i] = ("i32", None) if g.kind == "constexpr" else (keys[0][0][i][0], None) if g.kind == "pointer" else None
    return _bounded(keys, erase)


def growth(manifest: Manifest, path: str = "MANIFEST") -> list[Growth]:
    """Every parameter of every recorded kernel that took more than one class (or constexpr
    value) within a run, the largest saving first; ``path``: the manifest's, for the ``widen``
    commands."""
    found = [g for record in manifest.kernels for g in _kernel_growth(manifest, record, path)[0]]
    return sorted(found, key=lambda g: -g.saves)


def settings(manifest: Manifest) -> list[Setting]:
    """Every parameter constant within each recorded run and other across runs."""
    return [s for record in manifest.kernels for s in _kernel_growth(manifest, record, "MANIFEST")[1]]


def growth_report(manifest: Manifest, path: str = "MANIFEST") -> str:
    """:func:`growth` as text: one line per parameter, or a line saying nothing grows; then the
    configuration (:func:`settings`) with the runs' commands; then a line per autotuned kernel
    naming the constexprs its configs set (:func:`tuned_parameters`), not counted as growth.
    ``path``: the manifest's, for the ``widen`` commands."""
    found = growth(manifest, path)
    configured = settings(manifest)
    tuned = [f"  {r.name}: {', '.join(tuned_parameters(r))} set by its triton.autotune configs: the tuner's config "
             "space (every config is compiled), not growth" for r in manifest.kernels if tuned_parameters(r)]
    if not found:
        lines = [f"generalisation: no parameter took more than one class within a run over "
                 f"{manifest.num_specializations} recorded specialization(s): the key space does not grow with this "
                 "workload"]
    else:
        # a bound that saves nothing alone (the parameter varies only with others) is no suggestion:
        # left out, and counted in the kernel's bounded-together line, where it may save
        shown = [g for g in found if g.widen is not None or g.saves]
        hidden = len(found) - len(shown)
        lines = [f"generalisation: {len(found)} parameter(s) make the key space grow with the workload"
                 + (f" ({hidden} not listed: bounding it alone saves nothing)" if hidden else "") + ":"]
        lines += [f"  {g}" for g in shown]
        for record in manifest.kernels:
            mine = [g for g in found if g.kernel == record.name and g.fix is not None]
            left = bounded_together(record, mine) if len(mine) > 1 else None
            total = len(_recorded(record))
            if left is not None and left < total:
                lines.append(f"  {record.name}: {', '.join(repr(g.parameter) for g in mine)} bounded together: {total} "
                             f"-> {left} variants (saves {total - left})")
    if configured:
        runs = manifest.runs or ()
        lines.append(f"configuration: {len(configured)} parameter(s) constant within each of the {len(runs)} recorded "
                     "runs, set per run:")
        lines += [f"  {s}" for s in configured]
        lines += [f"  run {i}: {' '.join(r.command)}" for i, r in enumerate(runs)]
    return "\n".join(lines + tuned)
