"""Manifests: what an unmodified program launched, as a file zerojit can warm.

``zerojit record -- CMD`` (:mod:`zerojit.recording`) writes a *manifest*: every ``triton.jit``
function the program launched (directly, through ``triton.heuristics`` or ``triton.autotune``, or
through a zerojit kernel), with its identity (module, qualified name, Triton's source hash) and
every distinct specialization Triton's binder computed for it (the ``(type, attr)`` pair of each
parameter, constexprs by value, the launch options passed) with launch counts. The schema is in
``docs/manifest.md``; :data:`FORMAT` and :data:`VERSION` name it.

:func:`warmup_plan` turns a manifest into :class:`RecordedKernel` objects, one per recorded
function: ordinary :class:`~zerojit.kernel.TritonJitKernel` classes whose ``CompileKey`` is a
:class:`RecordedKey`, so a registry warms them like any contract kernel (worker processes,
restore index, bundles, the monitor's warmed variants, the audit). Each key is reproduced from
the manifest: a pointer as a :class:`~zerojit.specialization.WarmupTensor` of the recorded dtype
and alignment, an int as the recorded representative of its class (``scalar_rep``), a constexpr
by value, the launch options as passed.

A function defined at the top level of the program's ``__main__`` carries its source, lines and
globals (:attr:`KernelRecord.program_source`, :mod:`zerojit.script_kernels`) and is rebuilt from
them instead of imported; such a manifest is code, and a warm-up refuses one that other users can
write to (:func:`read_manifest` with ``to_run``). A kernel that cannot be warmed (its module no
longer imports, its source hash differs, it was defined inside a function or reads a global its
``program_source`` could not carry) is skipped and reported (:class:`ManifestSkip`), never
failing the warm-up; a specialization holding a value JSON cannot carry (a constexpr function, a
tensor descriptor) likewise. A file that is not a manifest, is truncated or corrupted raises
:class:`ManifestError`, and so does a warm-up of a manifest recorded with another Triton version
(its keys and launch options are that Triton's, and Triton's source hash does not include its
version, so no per-kernel check would notice). :func:`write_manifest` writes atomically
(:mod:`zerojit.outputs`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import triton.language as tl

from . import script_kernels as _script
from . import triton_compat as _tc
from .integrity import refuse_irregular
from .kernel import KernelDefinitionError, LaunchSpec, TritonJitKernel, kernel_launcher
from .outputs import atomic_output
from .specialization import SpecClass, WarmupTensor, bind

__all__ = ["FORMAT", "VERSION", "ManifestError", "UntrustedManifestError", "ManifestSkip", "RecordedSpecialization",
           "KernelRecord", "PLAIN_TYPES",
           "Manifest", "RecordedKey", "RecordedKernel", "read_manifest", "write_manifest", "warmup_plan",
           "recorded_kernel_class", "recorded_kernel", "encode_classes", "encode_value", "decode_value", "encode_exact",
           "decode_exact", "encode_exact_text", "decode_exact_text", "encode_specialization", "encode_config",
           "unimportable",
           "SOURCE_CHANGED", "source_changed", "note_unbound", "unbound_reason", "note_bound", "rebuilt_of",
           "RecordedTuning", "restore_tunings",
           "TensorLaunch", "TuningLaunch", "READABLE_VERSIONS", "recorded_autotuner", "RecordedRun", "restore_record_tunings"]

#: The ``format`` field of every manifest.
FORMAT = "zerojit-manifest"
#: The schema version this zerojit writes (version 2 adds each tuning key's ``launch`` and
#: tuning keys with no ``config``).
VERSION = 2
#: The schema versions this zerojit reads (a version 1 manifest is a version 2 one without the
#: fields version 2 added).
READABLE_VERSIONS = (1, 2)

_REPR = "repr"  # a constexpr value JSON cannot carry: kept as text, never warmed
_DTYPE = "triton_dtype"  # a tl.dtype constexpr (e.g. tl.float16), by Triton's name


class ManifestError(ValueError):
    """A file is not a readable manifest (not JSON, truncated, another format or version, a field
    of the wrong type); the message names the file and the field."""


@dataclass(frozen=True)
class ManifestSkip:
    """A recorded kernel (or one of its specializations) that a warm-up skipped, and why."""

    kernel: str
    reason: str

    def __str__(self) -> str:  # (the report's line reads "SKIPPED kernel: reason")
        return f"{self.kernel}: {self.reason}"


SOURCE_CHANGED = "its source changed since recording"  #: how every source-changed reason begins (the monitor's cue)


def source_changed(now: str, recorded: str, compared: str | None = None) -> str:
    """Why a recorded function whose source hash (Triton's ``cache_key``) is ``now``, not the
    ``recorded`` one, is not warmed, naming the file ``compared`` where given: the
    :class:`ManifestSkip` reason of :func:`warmup_plan` and of ``zerojit exec``'s binding of a
    ``__main__`` function (:mod:`zerojit.recording`). Triton's ``cache_key`` covers the
    function's source, its starting line, the functions it calls and the globals it reads (a
    ``BLOCK = tl.constexpr(256)`` above it), so the reason lists each."""
    where = f"; compared: {compared}" if compared else ""
    return (f"{SOURCE_CHANGED} (source hash {now[:12]}... differs from the recorded {recorded[:12]}...: its "
            "source, its starting line (a line added or removed above it counts), a function it calls or a global it "
            f"reads changed{where}): record the program again")


# The program's functions a manifest recorded that zerojit exec could not bind to their warmed
# variants (their source changed since recording): id -> (the function, why), for the monitor's
# explanation of their runtime compiles (a table here: recording and the monitor both import it).
_UNBOUND: dict[int, tuple[Any, str]] = {}


def note_unbound(jit_fn: Any, reason: str | None) -> None:
    """Record why the program's function ``jit_fn``, which a manifest recorded, was not bound to
    its warmed variants (``reason``: a clause, "its source changed since recording (...)"), or
    forget it (None); :func:`unbound_reason` gives it back."""
    if reason is None:
        _UNBOUND.pop(id(jit_fn), None)
    else:
        _UNBOUND[id(jit_fn)] = (jit_fn, reason)  # (the function is kept: its id stays its own)


def unbound_reason(jit_fn: Any) -> str | None:
    """Why ``jit_fn``, which a manifest recorded, was not bound (:func:`note_unbound`), or None."""
    entry = _UNBOUND.get(id(jit_fn))
    return entry[1] if entry is not None and entry[0] is jit_fn else None


# The program's functions zerojit exec bound to the functions a warm-up rebuilt from their
# program_source: id -> (the program's function, the rebuilt one), so the monitor explains a
# bound function's miss against the rebuilt one's warmed keys (both kept: their ids stay theirs).
_BOUND: dict[int, tuple[Any, Any]] = {}


def note_bound(jit_fn: Any, rebuilt: Any | None) -> None:
    """Record that the program's function ``jit_fn`` now launches the variants of ``rebuilt``
    (the ``triton.jit`` function a warm-up rebuilt from its recorded ``program_source``, of the
    same ``cache_key``), or forget it (None); :func:`rebuilt_of` gives it back."""
    if rebuilt is None:
        _BOUND.pop(id(jit_fn), None)
    else:
        _BOUND[id(jit_fn)] = (jit_fn, rebuilt)


def rebuilt_of(jit_fn: Any) -> Any | None:
    """The rebuilt function the program's ``jit_fn`` was bound to (:func:`note_bound`), or None."""
    entry = _BOUND.get(id(jit_fn))
    return entry[1] if entry is not None and entry[0] is jit_fn else None


def encode_value(value: Any) -> Any:
    """A constexpr value as JSON: ints, floats, strings, bools and None as themselves, a
    ``tl.dtype`` as ``{"triton_dtype": "fp16"}``, anything else as ``{"repr": "..."}`` (recorded,
    but never reproduced)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tl.dtype):
        return {_DTYPE: str(value)}
    return {_REPR: repr(value)}


def decode_value(value: Any, where: str) -> Any:
    """The constexpr value :func:`encode_value` wrote.

    Raises:
        ValueError: a ``{"repr": ...}`` value (nothing to rebuild it from), naming ``where``.
    """
    if isinstance(value, dict):
        if _DTYPE in value:
            return tl.dtype(value[_DTYPE])
        raise ValueError(f"{where} was recorded as {value.get(_REPR)!r}, which a manifest cannot reproduce")
    return value


_TUPLE = "tuple"  # encode_exact's tags: a tuple, a dict of any keys
#: The types :func:`decode_exact` returns as they are (with None): a caller that meets one skips the call.
PLAIN_TYPES = frozenset((bool, int, float, str))
_DICT = "dict"


@functools.lru_cache(maxsize=1)
def _dtypes() -> dict[str, Any]:
    # triton.language's own dtype objects by name (tl.float16 is "fp16"): the only ones decoded
    return {str(d): d for d in vars(tl).values() if type(d) is tl.dtype}


def encode_exact(value: Any) -> Any:
    """``value`` as JSON that :func:`decode_exact` turns back into an equal value of the same
    types (what zerojit's restore index keeps of a compiled variant: Triton's ``ASTSource``
    arguments, specializations): None, bools, ints, strings and finite floats as themselves, a
    list as a list, a ``tl.dtype`` as :func:`encode_value` writes it, a tuple as
    ``{"tuple": [...]}``, a dict (keys of any of these types) as ``{"dict": [[key, value], ...]}``.

    Raises:
        TypeError: a value with no exact JSON form (a constexpr function, a tensor descriptor, a
            pointer or block type, a NaN or infinite float, ...), naming its type.
    """
    if value is None or type(value) in (bool, int, str):  # exact types: an IntEnum would come back an int
        return value
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is list:
        return [encode_exact(v) for v in value]
    if type(value) is tuple:
        return {_TUPLE: [encode_exact(v) for v in value]}
    if type(value) is dict:
        return {_DICT: [[encode_exact(k), encode_exact(v)] for k, v in value.items()]}
    if type(value) is tl.dtype and _dtypes().get(str(value)) == value:
        return encode_value(value)
    raise TypeError(f"a {type(value).__module__}.{type(value).__qualname__} value ({_brief(value)}) has no exact "
                    "JSON form")


def decode_exact(data: Any, where: str) -> Any:
    """The value :func:`encode_exact` wrote, from parsed JSON; strict: anything it never writes
    is refused. Each object is read bottom-up by the rule :func:`decode_exact_text` applies as
    ``json`` parses (:func:`_untagged`), so the two readers cannot drift apart.

    Raises:
        ValueError: ``data`` is no :func:`encode_exact` form (an object with another tag or more
            than one, a dict entry that is not a pair or whose key is a list or dict, an unknown
            dtype name), naming ``where``.
    """
    try:
        return _untagged_tree(data)
    except _NotExact as e:
        raise ValueError(f"{where}: {e}") from None


def _untagged_tree(data: Any) -> Any:
    if data is None or type(data) in PLAIN_TYPES:
        return data
    if type(data) is list:
        return [v if v is None or type(v) in PLAIN_TYPES else _untagged_tree(v) for v in data]
    if type(data) is dict:
        return _untagged({k: _untagged_tree(v) for k, v in data.items()})
    raise _NotExact(f"{_brief(data)} is not an encoded value")


def encode_exact_text(value: Any) -> str:
    """:func:`encode_exact` of ``value`` as compact JSON text, read back by :func:`decode_exact_text`.

    Raises:
        TypeError: as :func:`encode_exact`.
    """
    return json.dumps(encode_exact(value), separators=(",", ":"), allow_nan=False)


def decode_exact_text(text: str, where: str) -> Any:
    """The value :func:`encode_exact_text` wrote: :func:`decode_exact`'s reading done while
    ``json`` parses (each tagged object becomes its value as it closes), and stricter where JSON
    text allows what :func:`encode_exact` never writes: ``NaN``, ``Infinity`` and a number too
    large for a float are refused. A restore index keeps its nested fields as such text: read
    this way they leave no parsed tree behind (half the new objects of a warm start, so Python's
    collector runs less), at about the time of parsing and walking the tree.

    Raises:
        ValueError: ``text`` is no JSON (``json.JSONDecodeError``), holds a form
            :func:`encode_exact` never writes, or a number Python refuses (an int past its digit
            limit), naming ``where``.
    """
    if type(text) is not str:
        raise ValueError(f"{where}: {_brief(text)} is not the JSON text of an encoded value")
    try:
        return _EXACT_DECODER.decode(text)
    except _NotExact as e:
        raise ValueError(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {_brief(text)} is no JSON text ({e.msg})") from None
    except ValueError as e:  # int(): more digits than sys.get_int_max_str_digits()
        raise ValueError(f"{where}: {e}") from None


class _NotExact(ValueError):
    """A form :func:`encode_exact` never writes, met by :data:`_EXACT_DECODER` (``where`` is added
    by :func:`decode_exact_text`)."""


def _no_constant(name: str) -> Any:
    raise _NotExact(f"{name} is no finite number")  # encode_exact never writes NaN or Infinity


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: a float too large, read as infinity
        raise _NotExact(f"{text} is no finite number")
    return value


def _untagged(data: dict) -> Any:
    # json's object_hook: called for each object once its members are decoded (inside out)
    if len(data) == 1:
        (tag, inner), = data.items()
        if tag == _TUPLE and type(inner) is list:
            return tuple(inner)
        if tag == _DICT and type(inner) is list:
            out = {}
            for pair in inner:
                if type(pair) is not list or len(pair) != 2:
                    raise _NotExact(f"dict entry {_brief(pair)} is not a [key, value] pair")
                try:
                    out[pair[0]] = pair[1]
                except TypeError:  # a list key: never written
                    raise _NotExact(f"dict key {_brief(pair[0])} is not hashable") from None
            return out
        if tag == _DTYPE and type(inner) is str and inner in _dtypes():
            return tl.dtype(inner)  # as decode_value: an equal dtype
    raise _NotExact(f"{_brief(data)} is not an encoded value")


# One decoder for every call (json.loads with a hook builds one per call: ~3 us).
_EXACT_DECODER = json.JSONDecoder(object_hook=_untagged, parse_float=_finite, parse_constant=_no_constant)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def encode_specialization(jit_fn: Any, specialization: list) -> tuple[tuple[str, Any], ...]:
    """A :func:`~zerojit.specialization.bind` specialization as a manifest holds it: one
    ``(type, attr)`` pair per parameter (entries Triton adds after them dropped), constexpr
    values through :func:`encode_value`, hashable."""
    return encode_classes(_tc.param_specialization(jit_fn, specialization))


def encode_classes(pairs: Any) -> tuple[tuple[str, Any], ...]:
    """``(type, attr)`` pairs (or :class:`~zerojit.specialization.SpecClass` values, one per
    parameter) as a manifest holds them: constexpr values through :func:`encode_value`, hashable."""
    pairs = [(p.type, p.attr) if isinstance(p, SpecClass) else p for p in pairs]
    return tuple((ty, _hashable(encode_value(attr)) if ty == "constexpr" else attr) for ty, attr in pairs)


@dataclass(frozen=True)
class RecordedSpecialization:
    """One distinct specialization a recorded function was launched with.

    Attributes:
        specialization: Triton's binder output, one ``(type, attr)`` pair per parameter in order
            (``("*fp16", "D")``: a 16-byte-aligned fp16 pointer; ``("i32", "")``: an int not
            divisible by 16; ``("constexpr", 64)``; constexpr values as :func:`encode_value`).
        values: a representative of each int, float and bool argument's class (``scalar_rep``),
            by parameter name: what a warm-up passes.
        options: the launch options passed (``num_warps``, ``num_stages``, ...), as passed and in
            the order passed (Triton's key holds ``str()`` of the options dict: order counts).
        launches: how many of the program's launches had this specialization while recording (a
            compile-only autotune benchmark's dry launches are not the program's: 0 for a config only
            they launched).
        autotune_config: for a ``triton.autotune`` kernel, the chosen config's keyword arguments
            (``Config.all_kwargs()``, values through :func:`encode_value`) that this
            specialization carries; None otherwise.
        runs: the indexes, into :attr:`Manifest.runs`, of the recorded runs that launched it
            (``()``: none, a specialization ``zerojit manifest widen`` added); None: not known
            (a manifest written without runs, a learned key).
    """

    specialization: tuple[tuple[str, Any], ...]
    values: tuple[tuple[str, Any], ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    launches: int = 0
    autotune_config: tuple[tuple[str, Any], ...] | None = None
    runs: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"specialization": [list(e) for e in self.specialization], "values": dict(self.values),
                "options": dict(self.options), "launches": self.launches,
                "autotune_config": None if self.autotune_config is None else dict(self.autotune_config),
                **({} if self.runs is None else {"runs": list(self.runs)})}


@dataclass(frozen=True)
class TensorLaunch:
    """A tensor argument of a recorded launch, as much as a buffer of its layout needs (the
    values are not recorded).

    Attributes:
        dtype: the torch dtype's name (``"float32"``: ``str(dtype)`` without ``torch.``).
        shape, strides: ``tensor.shape`` and ``tensor.stride()`` (strides in elements).
        offset: ``tensor.storage_offset()``, in elements.
        storage: the size of the tensor's storage, in elements (``untyped_storage().nbytes()``
            divided by the element size): a buffer of this many elements holds the view.
    """

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    storage: int

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": {"dtype": self.dtype, "shape": list(self.shape), "strides": list(self.strides),
                           "offset": self.offset, "storage": self.storage}}


@dataclass(frozen=True)
class TuningLaunch:
    """One launch of a ``triton.autotune`` kernel at a tuning key, as its ``Autotuner.run``
    received it: enough to run the autotuner's own benchmarking on buffers of the same layout
    (:mod:`zerojit.recorded_tuning`).

    Attributes:
        positional: how many of ``arguments`` the call passed positionally (the first ones); the
            rest were keywords, in the order passed (Triton's tuning key lists the tensors'
            dtypes in call order).
        arguments: every argument the autotuner received but ``grid`` and ``warmup``, by name, in
            call order (a heuristics layer above it adds its values last): a
            :class:`TensorLaunch` for a tensor, else the value (int, float, bool, str, None, or a
            ``tl.dtype`` through :func:`encode_value`).
        grids: per config (its ``Config.all_kwargs()`` as :func:`encode_config` writes it), the
            launch grid the call's grid gave for it, as ints.
    """

    positional: int
    arguments: tuple[tuple[str, Any], ...]
    grids: tuple[tuple[tuple[tuple[str, Any], ...], tuple[int, ...]], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"positional": self.positional,
                "arguments": {n: v.to_dict() if isinstance(v, TensorLaunch) else v for n, v in self.arguments},
                "grids": [{"config": dict(c), "grid": list(g)} for c, g in self.grids]}


@dataclass(frozen=True)
class RecordedTuning:
    """A tuning key of the kernel's ``triton.autotune`` object met while recording, with the
    choice it made there (what its own cache, ``Autotuner.cache``, held when the program ended)
    where it kept one, and one launch at that key. ``zerojit exec`` puts a choice back into the
    autotuner's cache before the program runs, so the key is not benchmarked while serving; a key
    with no choice (a compile-only recording: nothing was measured) is tuned at a GPU warm-up on
    buffers of the launch's layout (:mod:`zerojit.recorded_tuning`).

    Attributes:
        key: the tuning key (``Autotuner.run``'s: the ``key`` arguments' values, then each tensor
            argument's ``str(dtype)``); JSON scalars only (a key holding anything else is not
            recorded).
        config: the chosen config's keyword arguments (``Config.all_kwargs()``, values through
            :func:`encode_value`), sorted by name; None when no choice was kept.
        launch: one launch at this key (the first), or None (not recorded: a manifest of
            version 1, or an argument that cannot be described).
    """

    key: tuple[Any, ...]
    config: tuple[tuple[str, Any], ...] | None
    launch: TuningLaunch | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"key": list(self.key), "config": None if self.config is None else dict(self.config)}
        if self.launch is not None:
            out["launch"] = self.launch.to_dict()
        return out


@dataclass(frozen=True)
class KernelRecord:
    """One recorded ``triton.jit`` function.

    Attributes:
        module, qualname: where the Python function is defined (``fn.__module__``,
            ``fn.__qualname__``); the module attribute of that name may be the ``triton.jit``
            function or an autotune / heuristics object wrapping it.
        source_hash: Triton's hash of the function's source and dependencies (``cache_key``).
        parameters: the parameter names, in order; constexprs: those that are ``tl.constexpr``.
        specializations: every distinct specialization, first launched first.
        tunings: a ``triton.autotune`` kernel's tuning keys, each once: the choice made there
            when the program ended (none under a compile-only target: nothing was measured
            there) and one launch at the key.
        shape_constexprs: the constexprs whose value flows into a shape argument
            (:func:`zerojit.shapeflow.shape_parameters`), which can never be runtime ints; None:
            not known (a manifest written without it).
        program_source: for a function defined at the top level of the program's ``__main__``,
            what rebuilding it needs (its source, lines, globals: :mod:`zerojit.script_kernels`),
            or why it cannot be carried (its ``skipped`` field); None for every other function.
    """

    module: str
    qualname: str
    source_hash: str
    parameters: tuple[str, ...]
    constexprs: tuple[str, ...]
    specializations: tuple[RecordedSpecialization, ...]
    tunings: tuple[RecordedTuning, ...] = ()
    shape_constexprs: tuple[str, ...] | None = None
    program_source: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def name(self) -> str:
        """``module.qualname``: the kernel's name in reports."""
        return f"{self.module}.{self.qualname}"

    @property
    def launches(self) -> int:
        return sum(s.launches for s in self.specializations)

    def to_dict(self) -> dict[str, Any]:
        return {"module": self.module, "qualname": self.qualname, "source_hash": self.source_hash,
                "parameters": list(self.parameters), "constexprs": list(self.constexprs),
                "specializations": [s.to_dict() for s in self.specializations],
                "tunings": [t.to_dict() for t in self.tunings],
                **({} if self.shape_constexprs is None else {"shape_constexprs": list(self.shape_constexprs)}),
                **({} if self.program_source is None else {"program_source": self.program_source})}


@dataclass(frozen=True)
class RecordedRun:
    """One recorded run of the program (``zerojit record``): its command. A manifest of one
    recording has one; ``zerojit manifest merge`` keeps each input's, so that a value constant
    within each run (a model flag) reads as configuration, not growth."""

    command: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"command": list(self.command)}


@dataclass(frozen=True)
class Manifest:
    """A recording: the Triton version it was made with, the target its launches were keyed for
    (``"cuda:90"`` under a compile-only target, ``"device"`` on a GPU), the command, every
    recorded kernel, and the program's folder (absolute; its ``sys.path[0]``, where its own
    modules imported from: the script's folder, else the current one; None when not known), which
    a warm-up puts on ``sys.path`` to import the recorded kernels' modules (:func:`warmup_plan`),
    and the recorded runs (:class:`RecordedRun`; each specialization's ``runs`` index them;
    None: not known)."""

    triton_version: str
    target: str
    command: tuple[str, ...]
    kernels: tuple[KernelRecord, ...]
    program_folder: str | None = None
    runs: tuple[RecordedRun, ...] | None = None

    @property
    def carries_source(self) -> list[str]:
        """The kernels whose ``program_source`` carries their source (code a warm-up runs)."""
        return [k.name for k in self.kernels if k.program_source is not None and "skipped" not in k.program_source]

    @property
    def num_specializations(self) -> int:
        return sum(len(k.specializations) for k in self.kernels)

    def to_dict(self) -> dict[str, Any]:
        kernels = [k.to_dict() for k in self.kernels]
        if self.runs is None:  # (a manifest built without runs from recorded kernels: their indexes mean nothing)
            for k in kernels:
                for s in k["specializations"]:
                    s.pop("runs", None)
        return {"format": FORMAT, "version": VERSION, "triton_version": self.triton_version, "target": self.target,
                "command": list(self.command), "kernels": kernels,
                "program_folder": self.program_folder,
                **({} if self.runs is None else {"runs": [r.to_dict() for r in self.runs]})}

    def summary(self) -> str:
        """One line per kernel: specializations and launches."""
        lines = [f"manifest: {len(self.kernels)} kernel(s), {self.num_specializations} specialization(s), "
                 f"Triton {self.triton_version}, target {self.target}"]
        lines += [f"  {k.name:<60} {len(k.specializations):>4} spec  {k.launches:>7} launches" for k in self.kernels]
        return "\n".join(lines)


def _field(data: dict, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(data, dict) or name not in data:
        raise ManifestError(f"{where}: field {name!r} is missing")
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        article = "an" if names[0] in "aeiou" else "a"
        raise ManifestError(f"{where}: field {name!r} must be {article} {names}, not {type(value).__name__}")
    return value


def _manifest_from(data: Any, path: str) -> Manifest:
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: not a zerojit manifest (a JSON {type(data).__name__}, not an object)")
    if data.get("format") != FORMAT:
        raise ManifestError(f"{path}: not a zerojit manifest (format {data.get('format')!r}, expected {FORMAT!r})")
    version = _field(data, "version", int, path)
    if version not in READABLE_VERSIONS:
        raise ManifestError(f"{path}: manifest schema version {version}; this zerojit reads versions "
                            f"{', '.join(map(str, READABLE_VERSIONS))}: record the program again")
    runs = _runs(data, path)
    kernels = []
    for i, k in enumerate(_field(data, "kernels", list, path)):
        where = f"{path}: kernels[{i}]"
        params = tuple(_field(k, "parameters", list, where))
        specs = []
        for j, s in enumerate(_field(k, "specializations", list, where)):
            sw = f"{where}.specializations[{j}]"
            entries = _field(s, "specialization", list, sw)
            if len(entries) != len(params) or not all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                                      for e in entries):
                raise ManifestError(f"{sw}: field 'specialization' must hold one [type, attr] pair per parameter "
                                    f"({len(params)})")
            specs.append(RecordedSpecialization(
                specialization=tuple((e[0], _hashable(e[1])) for e in entries),
                values=tuple(sorted(_field(s, "values", dict, sw).items())),
                options=_options(s, sw),
                launches=_count(s, "launches", sw),
                autotune_config=_autotune_config(s, sw),
                runs=_run_indexes(s, sw, runs)))
        kernels.append(KernelRecord(module=_field(k, "module", str, where), qualname=_field(k, "qualname", str, where),
                                    source_hash=_field(k, "source_hash", str, where), parameters=params,
                                    constexprs=tuple(_field(k, "constexprs", list, where)),
                                    specializations=tuple(specs), tunings=_tunings(k, where),
                                    shape_constexprs=_names(k, "shape_constexprs", where, params),
                                    program_source=_program_source(k, where)))
    folder = data.get("program_folder")
    if folder is not None and not isinstance(folder, str):
        raise ManifestError(f"{path}: field 'program_folder' must be a string or null, not {type(folder).__name__}")
    return Manifest(triton_version=_field(data, "triton_version", str, path), target=_field(data, "target", str, path),
                    command=tuple(_field(data, "command", list, path)), kernels=tuple(kernels), program_folder=folder,
                    runs=runs)


def _runs(data: dict, where: str) -> tuple[RecordedRun, ...] | None:
    """The top-level ``runs`` (optional on reading: None)."""
    if data.get("runs") is None:
        return None
    runs = _field(data, "runs", list, where)
    out = []
    for i, run in enumerate(runs):
        command = _field(run, "command", list, f"{where}: runs[{i}]")
        if not all(isinstance(c, str) for c in command):
            raise ManifestError(f"{where}: runs[{i}]: field 'command' must hold strings only")
        out.append(RecordedRun(tuple(command)))
    return tuple(out)


def _run_indexes(data: dict, where: str, runs: tuple[RecordedRun, ...] | None) -> tuple[int, ...] | None:
    """A specialization's ``runs`` (optional on reading: None): indexes into the top-level runs."""
    if data.get("runs") is None:
        return None
    value = _field(data, "runs", list, where)
    count = len(runs) if runs is not None else 0
    if not all(type(i) is int and 0 <= i < count for i in value):
        raise ManifestError(f"{where}: field 'runs' must hold indexes of the manifest's top-level runs "
                            f"(0..{count - 1})" if count else f"{where}: field 'runs' is set, but the manifest has no "
                            "top-level 'runs'")
    return tuple(value)


def _names(data: dict, name: str, where: str, parameters: tuple[str, ...]) -> tuple[str, ...] | None:
    """An optional list of parameter names (None when absent)."""
    if data.get(name) is None:
        return None
    value = _field(data, name, list, where)
    unknown = [v for v in value if v not in parameters]
    if unknown:
        raise ManifestError(f"{where}: field {name!r} names {unknown[0]!r}, which is no parameter of the kernel")
    return tuple(value)


#: The launch options whose value is an int (``maxnreg`` also None): what a warm-up passes Triton.
_INT_OPTIONS = {"num_warps": False, "num_stages": False, "num_ctas": False, "maxnreg": True}


def _options(data: dict, where: str) -> tuple[tuple[str, Any], ...]:
    """A specialization's ``options``, each int option an int (an edited ``"four"`` is named here,
    not by Triton's compiler at warm-up)."""
    options = _field(data, "options", dict, where)
    for name, value in options.items():
        if name in _INT_OPTIONS and not (type(value) is int or value is None and _INT_OPTIONS[name]):
            raise ManifestError(f"{where}: field 'options': {name!r} must be an int, not {type(value).__name__}")
    return tuple((n, _hashable(v)) for n, v in options.items())


def _count(data: dict, name: str, where: str) -> int:
    value = _field(data, name, int, where)
    if value < 0:
        raise ManifestError(f"{where}: field {name!r} must be >= 0, not {value}")
    return value


def _tunings(data: dict, where: str) -> tuple[RecordedTuning, ...]:
    """A kernel's ``tunings`` (optional on reading: manifests written before it have none; each
    entry's ``config`` may be null or absent, its ``launch`` absent)."""
    value = data.get("tunings", [])
    if not isinstance(value, list):
        raise ManifestError(f"{where}: field 'tunings' must be a list, not {type(value).__name__}")
    out = []
    for i, t in enumerate(value):
        tw = f"{where}.tunings[{i}]"
        key = _field(t, "key", list, tw)
        if not all(v is None or isinstance(v, (bool, int, float, str)) for v in key):
            raise ManifestError(f"{tw}: field 'key' must hold JSON scalars only")
        config = t.get("config")
        if config is not None and not isinstance(config, dict):
            raise ManifestError(f"{tw}: field 'config' must be an object or null, not {type(config).__name__}")
        launch = t.get("launch")
        out.append(RecordedTuning(tuple(key), None if config is None else
                                  tuple((n, _hashable(v)) for n, v in sorted(config.items())),
                                  None if launch is None else _launch(launch, f"{tw}.launch")))
    return tuple(out)


def _launch(data: Any, where: str) -> TuningLaunch:
    """A tuning's ``launch`` (see :class:`TuningLaunch`), every field checked."""
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: must be an object, not {type(data).__name__}")
    positional = _count(data, "positional", where)
    arguments = []
    for name, value in _field(data, "arguments", dict, where).items():
        aw = f"{where}.arguments.{name}"
        if isinstance(value, dict) and "tensor" in value:
            t = _field(value, "tensor", dict, aw)
            tw = f"{aw}.tensor"
            shape, strides = _field(t, "shape", list, tw), _field(t, "strides", list, tw)
            if not all(type(v) is int and v >= 0 for v in shape):
                raise ManifestError(f"{tw}: field 'shape' must hold ints >= 0")
            if len(strides) != len(shape) or not all(type(v) is int for v in strides):
                raise ManifestError(f"{tw}: field 'strides' must hold one int per dimension ({len(shape)})")
            value = TensorLaunch(_field(t, "dtype", str, tw), tuple(shape), tuple(strides), _count(t, "offset", tw),
                                 _count(t, "storage", tw))
        elif isinstance(value, (list, dict)) and not (isinstance(value, dict) and _DTYPE in value):
            raise ManifestError(f"{aw}: must be a tensor ({{'tensor': ...}}), a JSON scalar or a triton dtype")
        else:
            value = _hashable(value)
        arguments.append((name, value))
    if positional > len(arguments):
        raise ManifestError(f"{where}: field 'positional' is {positional}, more than the {len(arguments)} arguments")
    grids = []
    listed = data.get("grids", [])
    if not isinstance(listed, list):
        raise ManifestError(f"{where}: field 'grids' must be a list, not {type(listed).__name__}")
    for j, g in enumerate(listed):
        gw = f"{where}.grids[{j}]"
        grid = _field(g, "grid", list, gw)
        if not 1 <= len(grid) <= 3 or not all(type(v) is int and v >= 0 for v in grid):
            raise ManifestError(f"{gw}: field 'grid' must hold 1 to 3 ints >= 0")
        grids.append((tuple((n, _hashable(v)) for n, v in sorted(_field(g, "config", dict, gw).items())), tuple(grid)))
    return TuningLaunch(positional, tuple(arguments), tuple(grids))


def _program_source(data: dict, where: str) -> dict[str, Any] | None:
    """A kernel's ``program_source`` (optional: only ``__main__`` kernels have one), validated."""
    value = data.get("program_source")
    if value is None:
        return None
    try:
        _script.validate(value, f"{where}.program_source")
    except ValueError as e:
        raise ManifestError(str(e)) from None
    return value


def _autotune_config(data: dict, where: str) -> tuple[tuple[str, Any], ...] | None:
    value = data.get("autotune_config")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: field 'autotune_config' must be an object or null, not {type(value).__name__}")
    return tuple((k, _hashable(v)) for k, v in sorted(value.items()))


def _hashable(value: Any) -> Any:
    """JSON values as hashable ones (lists as tuples, dicts as sorted item tuples wrapped back on decode)."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return _FrozenDict(value)
    return value


class _FrozenDict(dict):
    """A dict that hashes (an encoded constexpr value inside a frozen key)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


class UntrustedManifestError(ManifestError):
    """A manifest that carries program source (code a warm-up runs) is a file other users can
    write to: refused, as the program itself would be (invalid input: exit 2 at the CLI)."""


_NESTED_TOO_DEEP = "{path}: not a readable manifest (nested too deep: not a manifest zerojit wrote); record it again"


def read_manifest(path: str | os.PathLike, *, to_run: bool = False) -> Manifest:
    """Read and validate a manifest file.

    ``to_run``: the manifest is read to be warmed (a warm-up, ``zerojit exec``). One that carries
    a ``program_source`` is code then (rebuilding the function runs its ``def``, and Triton runs
    its constexpr code while compiling), trusted like the program: it is refused when other
    users can write to the file (:func:`zerojit.script_kernels.writable_by_others`).

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: the file cannot be opened.
        zerojit.integrity.NotRegularFileError: a FIFO, device or socket (an OSError).
        ManifestError: not UTF-8 text or not JSON (a truncated or corrupted file), not a zerojit
            manifest, another schema version, or a field missing or of the wrong type (each named).
        UntrustedManifestError: ``to_run``, the manifest carries program source and other users
            can write to the file.
    """
    path = os.fspath(path)
    refuse_irregular(path)  # (a FIFO's open would wait for a writer)
    with open(path, encoding="utf-8") as f:
        st = os.fstat(f.fileno())  # the file read, whatever replaces the path meanwhile
        try:
            data = json.loads(f.read())
        except UnicodeDecodeError as e:  # (a ValueError too) a binary file, or text in another encoding
            raise ManifestError(f"{path}: not a readable manifest (not UTF-8 text: byte {e.start} is "
                                f"{e.object[e.start:e.start + 1]!r}); record it again") from None
        except ValueError as e:
            raise ManifestError(f"{path}: not a readable manifest (truncated or corrupted JSON: {e}); "
                                "record it again") from None
        except RecursionError:  # JSON nested deeper than Python's parser goes (no ValueError)
            raise ManifestError(_NESTED_TOO_DEEP.format(path=path)) from None
    try:
        manifest = _manifest_from(data, path)
    except RecursionError:  # a value nested deep, parsed: its frozen form recurses
        raise ManifestError(_NESTED_TOO_DEEP.format(path=path)) from None
    carried = manifest.carries_source
    why = _script.writable_by_others(st) if to_run and carried else None
    if why is not None:
        raise UntrustedManifestError(f"{path}: refused: it carries program source ({', '.join(carried)}), which a "
                                     f"warm-up runs as code, and {why}: make it writable by its owner only "
                                     "(chmod go-w) and owned by you")
    return manifest


def write_manifest(manifest: Manifest, path: str | os.PathLike) -> None:
    """Write ``manifest`` to ``path`` whole or not at all (:func:`zerojit.outputs.atomic_output`:
    a temporary file in the same folder, fsync-ed, then renamed), so a reader never sees half a
    manifest and a failed write leaves the previous one. One that carries program source is
    written writable by its owner only (a warm-up refuses it otherwise: :func:`read_manifest`).

    Raises:
        zerojit.outputs.OutputError: the folder is missing or not writable, the disk is full, or
            ``path`` is not a regular file (a device, a FIFO, a symbolic link: never replaced).
    """
    with atomic_output(path, owner_writes_only=bool(manifest.carries_source)) as f:
        json.dump(manifest.to_dict(), f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------
# Warming a manifest: one RecordedKernel class per recorded function
# ---------------------------------------------------------------------------------------------


_INT_TYPES = ("i32", "i64", "u64")  # Triton's int widths, by value range


@dataclass(frozen=True, repr=False)
class RecordedKey:
    """The compile key of a recorded specialization: Triton's ``(type, attr)`` pairs and the
    launch options passed (the two parts of Triton's in-process key). Its repr shows each pair
    as ``*fp32:D`` (``:D``: 16-byte aligned, or an int divisible by 16, Triton's mark), ``i32``
    (neither), ``i32:nospec`` (``do_not_specialize``), ``fp32`` (a float) or ``=128`` (a constexpr),
    then the options:
    ``RecordedKey(*fp32:D, *fp32:D, i32, =128; num_warps=4)``."""

    specialization: tuple[tuple[str, Any], ...]
    options: tuple[tuple[str, Any], ...] = ()

    def __repr__(self) -> str:
        def word(ty: str, attr: Any) -> str:
            if ty == "constexpr":
                return f"={attr!r}"
            if attr is None and not (ty.startswith("*") or ty in _INT_TYPES):
                return ty  # a float or bool: never specialized
            return ty + {"D": ":D", "": "", None: ":nospec"}.get(attr, f":{attr}")

        options = "".join(f"; {k}={v!r}" for k, v in self.options)
        return f"RecordedKey({', '.join(word(ty, attr) for ty, attr in self.specialization)}{options})"


def _torch_dtypes() -> dict[str, torch.dtype]:
    found = {}
    for value in vars(torch).values():
        if isinstance(value, torch.dtype):
            ty = _tc.tensor_type(value)
            if ty is not None:
                found.setdefault(ty, value)
    return found


class RecordedKernel(TritonJitKernel[RecordedKey]):
    """A recorded ``triton.jit`` function as a zerojit kernel (made by :func:`warmup_plan`).

    Its keys are the manifest's specializations; ``warmup_inputs(key)`` rebuilds arguments in
    each class. Launching it by hand takes every kernel parameter by name plus ``zj_grid`` and
    ``zj_options`` (a dict of launch options).
    """

    CompileKey = RecordedKey
    record: KernelRecord
    _dtypes: dict[str, torch.dtype] | None = None

    def dispatch(self, **inputs: Any) -> RecordedKey:
        """The key of a launch with these kernel arguments (and launch options), by Triton's binder."""
        options = {k: inputs.pop(k) for k in list(inputs) if k not in self.record.parameters}
        _, specialization, bound_options = bind(self.kernel, **inputs, **options)
        return RecordedKey(encode_specialization(self.kernel, specialization),
                           tuple(_tc.run_options_removed(bound_options).items()))

    def get_warmup_keys(self) -> list[RecordedKey]:
        """Every recorded specialization that can be reproduced, in recording order."""
        return [RecordedKey(s.specialization, s.options) for s in self.record.specializations]

    def scalar_values(self, key: RecordedKey) -> dict[str, Any]:
        """The int, float and bool arguments of ``key``, by parameter name: the recorded
        representatives of their classes."""
        spec = next(s for s in self.record.specializations if s.specialization == key.specialization
                    and s.options == key.options)
        return dict(spec.values)

    def warmup_inputs(self, key: RecordedKey) -> dict[str, Any]:
        """Arguments in ``key``'s classes: WarmupTensors of the recorded dtype and alignment, the
        recorded representative ints, constexprs by value, the recorded launch options.

        Raises:
            ValueError: a value the manifest cannot reproduce (a tensor descriptor, a constexpr
                function), naming the parameter.
        """
        values = self.scalar_values(key)
        inputs: dict[str, Any] = {}
        if RecordedKernel._dtypes is None:
            RecordedKernel._dtypes = _torch_dtypes()
        for name, (ty, attr) in zip(self.record.parameters, key.specialization):
            where = f"{self.name}: parameter {name!r}"
            if ty == "constexpr":
                inputs[name] = decode_value(attr, where)
            elif ty.startswith("*"):
                dtype = RecordedKernel._dtypes.get(ty.lstrip("*").removeprefix("k"))
                if dtype is None:
                    raise ValueError(f"{where}: pointer type {ty!r} has no torch dtype to warm it with")
                inputs[name] = WarmupTensor(dtype, aligned=attr != "")
            elif name in values:
                inputs[name] = values[name]
            else:
                raise ValueError(f"{where}: type {ty!r} cannot be reproduced from a manifest")
        return {"zj_grid": (1,), "zj_options": dict(key.options), **inputs}


_LAUNCHER_NAMES = ("zj_grid", "zj_options", "zj_launch_spec")  # the generated __call__'s own names


def _launcher(parameters: tuple[str, ...]):
    """A ``@kernel_launcher __call__`` taking every kernel parameter by name, the grid and options."""
    signature = ", ".join(_LAUNCHER_NAMES[:2] + parameters)
    namespace: dict[str, Any] = {"zj_launch_spec": LaunchSpec}
    exec(f"def __call__(self, *, {signature}):\n    return zj_launch_spec(zj_grid, zj_options)\n", namespace)
    return kernel_launcher(namespace["__call__"], host_only=_LAUNCHER_NAMES[:2])


def recorded_kernel_class(jit_fn: Any, name: str, record: KernelRecord, base: type = RecordedKernel,
                          prefix: str = "Recorded", **attrs: Any) -> type:
    """A ``base`` (:class:`RecordedKernel`) class over ``jit_fn`` named ``name`` in reports, whose
    launcher takes every parameter of ``record`` by name (``attrs``: more class attributes). Its
    class name (``<prefix>_<qualname>``) and module are fixed: the restore index stamps a kernel
    class by them.

    Raises:
        KernelDefinitionError: a parameter zerojit's launch path cannot take (variadic, reserved).
    """
    return type(f"{prefix}_{record.qualname.replace('.', '_')}", (base,), {
        "kernel": jit_fn, "name": name, "__call__": _launcher(record.parameters), "record": record,
        "__module__": __name__, **attrs})


def unimportable(record: KernelRecord) -> str | None:
    """Why no warm-up can import ``record``'s function, wherever it runs, or None: it is defined
    inside a function (of a module, or of the program's ``__main__``), or at the top level of
    ``__main__`` (the script itself) without a usable :attr:`~KernelRecord.program_source` (none
    recorded, or a global it could not carry), which do not exist before the program runs. A
    top-level ``__main__`` function with one is rebuilt from it (:func:`warmup_plan`): None. The
    reason says what to change (for a function of ``__main__``: moving it to the script's top level)."""
    if "<locals>" in record.qualname:
        where = ("inside a function of the program's __main__ (the script itself)" if record.module == "__main__"
                 else "inside a function")
        to = "the script's top level" if record.module == "__main__" else "a module's top level"
        return (f"defined {where}, which does not exist before the program runs: move the kernel to {to}, then "
                "record the program again")
    if record.program_source is not None:
        return _script.skipped_reason(record.program_source)
    if record.module == "__main__":
        return ("defined in the program's __main__ (the script itself), which cannot be imported before the program "
                "runs: move the kernel into a module the script imports, then record the program again")
    return None


def _recorded_object(record: KernelRecord) -> Any:
    """What the recorded function's module holds under its name (the ``triton.jit`` function, or
    an autotune / heuristics object around it), imported again; raises LookupError naming what
    failed."""
    why = unimportable(record)
    if why is not None:
        raise LookupError(why)
    if record.program_source is not None:
        raise LookupError("defined in the program's __main__: rebuilt from its program_source, not imported")
    try:
        obj = importlib.import_module(record.module)
    except Exception as e:
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name == record.module.split(".")[0]:
            hint = "; put the module's folder on PYTHONPATH (or run from it)"
        raise LookupError(f"module {record.module!r} does not import here ({type(e).__name__}: {e}){hint}") from None
    for part in record.qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise LookupError(f"module {record.module!r} has no {record.qualname!r} any more")
    return obj


def _module_file(module: str) -> str:
    """The file module ``module`` (imported) was loaded from, as a skip reason names it: which
    copy of the program's code a source check compared."""
    return str(getattr(sys.modules.get(module), "__file__", None) or f"module {module!r}")


def _import_function(record: KernelRecord, scripts: _script.Rebuilder | None = None) -> Any:
    """The recorded ``triton.jit`` function, imported again (a ``__main__`` one: rebuilt from its
    program source, in ``scripts``'s namespace); raises LookupError naming what failed."""
    if record.program_source is not None and unimportable(record) is None:
        try:
            return (scripts or _script.Rebuilder()).function(record.program_source)
        except _script.ScriptError as e:
            raise LookupError(f"defined in the program's __main__, and its recorded program_source cannot be rebuilt "
                              f"here: {e}") from None
    obj = _recorded_object(record)
    jit_fn = _tc.unwrap_jit_function(obj)
    if jit_fn is None:
        raise LookupError(f"{record.module}.{record.qualname} is a {type(obj).__name__}, not a triton.jit function")
    return jit_fn


def encode_config(config_kwargs: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A config's keyword arguments (``Config.all_kwargs()``) as a manifest holds them: sorted by
    name, values through :func:`encode_value`, hashable (what :attr:`RecordedTuning.config` reads
    back as)."""
    return tuple((n, _hashable(encode_value(v))) for n, v in sorted(config_kwargs.items()))


def recorded_autotuner(record: KernelRecord) -> Any | None:
    """The ``triton.autotune`` object of ``record``'s function (what its module holds under its
    name, or what that wraps), imported again; None when it is none or does not import."""
    try:
        return _tc.find_autotuner(_recorded_object(record))
    except LookupError:  # (warmup_plan imported it moments ago)
        return None


def restore_tunings(kernels: Sequence["RecordedKernel"]) -> tuple[int, list[str]]:
    """Put each recorded kernel's :attr:`~KernelRecord.tunings` back into its ``triton.autotune``
    object's own cache (``Autotuner.cache``), so a launch at a recorded tuning key runs the
    recorded choice and benchmarks nothing, as the recorded program's later launches did.

    Returns how many choices were restored and a note for each that could not be: the kernel is
    no autotuned one any more, or the recorded config is not among the autotuner's configs (they
    changed since recording: ``zerojit exec`` gives that key the default policy,
    :func:`zerojit.recorded_tuning.install_default_policy`). Tuning keys recorded with no choice
    are left out (:func:`zerojit.recorded_tuning.tune_recorded` tunes them on a GPU).
    """
    restored, notes = 0, []
    for kernel in kernels:
        record = kernel.record
        if not any(t.config is not None for t in record.tunings):  # (the others: zerojit.recorded_tuning)
            continue
        if record.program_source is not None:  # its autotuner is the program's: restored at its first launch
            continue
        n, why = restore_record_tunings(record, recorded_autotuner(record))
        restored += n
        notes += why
    return restored, notes


def restore_record_tunings(record: KernelRecord, tuner: Any | None) -> tuple[int, list[str]]:
    """Put ``record``'s recorded choices into ``tuner`` (its function's ``triton.autotune``
    object; None: it has none any more), as :func:`restore_tunings` does per kernel; ``zerojit
    exec`` calls it for a ``__main__`` kernel's autotuner at its first launch (it exists only once
    the program made it). Returns how many were restored and a note for each that was not."""
    chosen = [t for t in record.tunings if t.config is not None]
    if not chosen:
        return 0, []
    if tuner is None:
        return 0, [f"{record.name}: {len(chosen)} recorded tuning choices, but it is no triton.autotune kernel any more"]
    restored, notes = 0, []
    configs = {encode_config(c.all_kwargs()): c for c in tuner.configs}
    for tuning in chosen:
        config = configs.get(tuning.config)
        if config is None:
            notes.append(f"{record.name}: the config chosen at tuning key {tuning.key} ({dict(tuning.config)}) is "
                         "none of its configs any more: that key gets the default policy")
            continue
        _tc.fill_autotuner_cache(tuner, tuple(tuning.key), config)
        restored += 1
    return restored, notes


def _check_triton_version(manifest: Manifest, where: str = "manifest") -> None:
    """Refuse ``manifest`` unless it was recorded with this Triton's version, exactly
    (``triton.__version__``): its specializations and launch options are keys of the Triton that
    recorded them, and Triton's source hash does not include its version, so the per-kernel
    source check would pass a manifest of another Triton.

    Raises:
        ManifestError: another version, naming ``where`` (the file), the field and both values.
    """
    if manifest.triton_version != _tc.TRITON_VERSION:
        raise ManifestError(f"{where}: field 'triton_version' is {manifest.triton_version!r}, but this is Triton "
                            f"{_tc.TRITON_VERSION!r}: a manifest warms only with the Triton it was recorded with; "
                            "record the program again with this Triton")


def warmup_plan(manifest: Manifest, *, where: str = "manifest",
                program_folder: bool = True) -> tuple[list[RecordedKernel], list[ManifestSkip], float]:
    """One :class:`RecordedKernel` per recorded function that can be warmed here, a
    :class:`ManifestSkip` for each kernel (or specialization) that cannot, and the seconds spent
    importing the recorded functions' modules (most of the time, when they import torch).

    With ``program_folder`` (warmup, bundle export: no program runs), the program's folder
    (:attr:`Manifest.program_folder`, where it still exists) goes first on ``sys.path``, as it was
    for the program. Without it the modules import from ``sys.path`` as the caller set it up:
    ``zerojit exec`` puts the folder of the program it is about to run there, as ``python app.py``
    does, so a copy of the program warms (and source-checks) the copy's own kernels, not the
    recorded folder's. A ``__main__`` kernel is rebuilt from its ``program_source`` (all of them
    in one namespace). A kernel is skipped when its function does not import (or rebuild) any
    more, is defined inside a function or in ``__main__`` without a usable ``program_source``, or
    its source hash differs from the recorded one (:func:`source_changed`). A
    specialization is skipped when it holds a value a manifest cannot
    reproduce. Nothing raises for one kernel's problem.

    Raises:
        ManifestError: the manifest was recorded with another Triton version
            (``where``: the file, for the message): its keys and launch options are that
            Triton's, and Triton's source hash does not include its version, so the per-kernel
            source check would pass them.
    """
    _check_triton_version(manifest, where)
    kernels: list[RecordedKernel] = []
    skipped: list[ManifestSkip] = []
    folder = manifest.program_folder
    if program_folder and folder and os.path.isdir(folder) and folder not in sys.path:
        sys.path.insert(0, folder)  # where the program's modules imported from
    import_seconds = 0.0
    scripts = _script.Rebuilder()  # the __main__ kernels' one namespace, as the program had
    for record in manifest.kernels:
        t0 = time.perf_counter()
        try:
            jit_fn = _import_function(record, scripts)
        except LookupError as e:
            skipped.append(ManifestSkip(record.name, str(e)))
            continue
        finally:
            import_seconds += time.perf_counter() - t0
        now = _tc.source_hash(jit_fn)
        if now != record.source_hash:
            compared = ("its program_source, rebuilt" if record.program_source is not None
                        else _module_file(record.module))
            skipped.append(ManifestSkip(record.name, source_changed(now, record.source_hash, compared)))
            continue
        if _tc.parameter_names(jit_fn) != record.parameters:
            skipped.append(ManifestSkip(record.name, f"parameters {list(_tc.parameter_names(jit_fn))} differ from the "
                                        f"recorded {list(record.parameters)}: record the program again"))
            continue
        usable = []
        for s in record.specializations:
            bad = [f"{n} ({v.get(_REPR)})" for n, (_, v) in zip(record.parameters, s.specialization)
                   if isinstance(v, dict) and _REPR in v]
            if bad:
                skipped.append(ManifestSkip(record.name, f"a specialization holds values a manifest cannot "
                                            f"reproduce: {', '.join(bad)}"))
            else:
                usable.append(s)
        try:
            kernels.append(recorded_kernel(dataclasses.replace(record, specializations=tuple(usable)), jit_fn))
        except KernelDefinitionError as e:  # a parameter zerojit's launch path cannot take (variadic, reserved)
            skipped.append(ManifestSkip(record.name, str(e)))
    return kernels, skipped, import_seconds


def recorded_kernel(record: KernelRecord, jit_fn: Any, *, name: str | None = None) -> RecordedKernel:
    """A :class:`RecordedKernel` (a class of its own, and its instance) warming ``record``'s
    specializations of ``jit_fn`` (the function ``record`` names, already checked against it),
    named ``name`` (default :attr:`KernelRecord.name`): what :func:`warmup_plan` makes per
    recorded function, and the warm-up of learned keys (:mod:`zerojit.learned`) per function.

    Raises:
        KernelDefinitionError: a parameter zerojit's launch path cannot take (variadic, reserved,
            or one of the recorded launcher's own names).
    """
    clash = [p for p in record.parameters if p in _LAUNCHER_NAMES]
    if clash:
        raise KernelDefinitionError(f"parameter {clash[0]!r} clashes with a name zerojit's recorded launcher uses; "
                                    "rename the parameter")
    return recorded_kernel_class(jit_fn, name or record.name, record)()
