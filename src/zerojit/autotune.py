"""Autotuned and heuristics kernels: what zerojit does with ``@triton.autotune`` / ``@triton.heuristics``.

A :class:`~zerojit.kernel.TritonJitKernel` may set ``kernel`` to an ``Autotuner`` or a
``Heuristics`` object, nested in any order (FLA puts heuristics over an autotuner). The kernel
class then launches the ``triton.jit`` function underneath itself (:class:`Wrapping`):

* **heuristics** are applied as Triton's ``Heuristics.run`` does: each value in decorator order,
  on a dict of every argument by name, outermost decorator first;
* **the autotuner's choice** comes from the kernel's *tuning table* (tuning key -> config), never
  from a benchmark: the tuning key is Triton's (``Autotuner.run``: the values of its ``key``
  arguments, then ``str(dtype)`` of each argument with a dtype, parameter order); a tuning key
  the table lacks is decided by the kernel's :class:`TuningPolicy`. The chosen config's
  meta-parameters and launch options (``Config.all_kwargs``) join the launch, its ``pre_hook``
  runs first (Triton's ``Autotuner.run`` does the same; ``reset_to_zero``/``restore_value`` act
  only while benchmarking, in Triton as here).

Key space: a compile key of a kernel whose autotuner has several configs expands into one
:class:`TunedKey` per config that survives the autotuner's own pruning (``prune_configs_by``:
``early_config_prune``, ``perf_model``/``top_k``; Triton's ``Autotuner.prune_configs``) on the
key's warm-up inputs, then the class's ``restrict_configs``.

Tuning tables are filled at the end of warm-up (``TritonJitKernel.finish_warmup``): from the
kernel's tuning file in Triton's cache folder (:func:`load_tuning_file`; keyed by target, GPU
name, Triton version and the kernel's source hash, refused naming the field that differs), then
on a GPU by benchmarking the tuning keys ``tuning_inputs(key)`` declares, with the autotuner's
own benchmark (``Autotuner._bench``), saving the file again (written atomically).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import triton_compat as _tc

__all__ = ["TunedKey", "TuningPolicy", "TuningError", "TuningFileError", "Wrapping", "unwrap",
           "nearest_tuning_key", "tuning_file_path", "save_tuning_file", "load_tuning_file", "write_atomically",
           "TUNING_FORMAT", "TUNING_FOLDER"]

#: The ``format`` field of a tuning file this zerojit reads and writes.
TUNING_FORMAT = "zerojit-tuning/1"
#: The folder of tuning files inside Triton's cache folder (cache bundles carry it).
TUNING_FOLDER = "zerojit-tuning"


class TuningError(LookupError):
    """A launch's tuning key has no config: not in the tuning table, and the kernel's policy is
    ``error`` (or ``nearest`` with nothing comparable tuned and no default). Names the kernel and
    the tuning key."""


class TuningFileError(ValueError):
    """A tuning file cannot be used: another target, GPU, Triton or kernel source, or corrupted.

    Attributes: ``path``; ``field`` (the field that is wrong); ``found`` and ``expected``.
    """

    def __init__(self, path: str, field: str, found: Any, expected: Any) -> None:
        super().__init__(f"tuning file {path}: field {field!r} is {found!r}, expected {expected!r}; delete the file "
                         "(it is written again after tuning) or use one made for this GPU, Triton and kernel")
        self.path, self.field, self.found, self.expected = path, field, found, expected


@dataclass(frozen=True)
class TunedKey:
    """A compile key under one autotune config: what a wrapped kernel's key space holds.

    Attributes:
        key: the kernel's own ``CompileKey``.
        config: the config's index in the autotuner's ``configs``.
        options: the config's ``Config.all_kwargs()`` items (meta-parameters, then launch options).
    """

    key: Any
    config: int
    options: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        return f"{self.key} @ config {self.config} ({', '.join(f'{k}={v}' for k, v in self.options)})"


_POLICIES = ("nearest", "default", "error")


@dataclass(frozen=True)
class TuningPolicy:
    """What a wrapped kernel launches for a tuning key its tuning table lacks.

    Attributes:
        untuned: ``"nearest"``: the config of the nearest tuned key (:func:`nearest_tuning_key`),
            else ``config`` when one is named, else :class:`TuningError`; ``"default"``: ``config``;
            ``"error"``: raise :class:`TuningError` at the launch.
        config: names one autotune config: its index, or a mapping of ``Config.all_kwargs()``
            items it must match (e.g. ``{"BK": 64, "num_warps": 4, "num_stages": 2}``); it must
            name exactly one config (checked at class creation).

    Raises:
        ValueError: an unknown ``untuned``, or ``"default"`` naming no config.
    """

    untuned: str = "nearest"
    config: int | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.untuned not in _POLICIES:
            raise ValueError(f"TuningPolicy(untuned={self.untuned!r}): choose one of {_POLICIES}")
        if self.untuned == "default" and self.config is None:
            raise ValueError("TuningPolicy(untuned='default') names no config: pass config=<index or "
                             "{meta-parameter: value}>")

    def config_index(self, configs: list[Any]) -> int | None:
        """The index ``config`` names among ``configs`` (None when it names none).

        Raises: ValueError: it matches no config, or several."""
        if self.config is None:
            return None
        if isinstance(self.config, int):
            if not 0 <= self.config < len(configs):
                raise ValueError(f"config index {self.config} is outside the autotuner's {len(configs)} configs")
            return self.config
        want = dict(self.config)
        found = [i for i, c in enumerate(configs)
                 if all(k in (a := _tc.config_arguments(c)) and a[k] == v for k, v in want.items())]
        if len(found) != 1:
            raise ValueError(f"config {want} matches {len(found)} of the autotuner's configs "
                             f"({[str(configs[i]) for i in found] or 'none'}); it must name exactly one")
        return found[0]


def nearest_tuning_key(key: tuple, tuned: list[tuple]) -> tuple | None:
    """The tuned key nearest ``key``, or None when none is comparable.

    Comparable: the same length and equal entries wherever an entry is not an int (dtypes,
    flags, strings, None). Distance: the sum over int entries of ``|log2(max(a, 1)) -
    log2(max(b, 1))|`` (sizes that differ by a factor count the same at every scale); ties go to
    the key tuned first.
    """
    best, best_d = None, math.inf
    for t in tuned:
        if len(t) != len(key):
            continue
        d = 0.0
        for a, b in zip(key, t):
            if type(a) is int and type(b) is int:
                d += abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))
            elif a != b or type(a) is not type(b):
                d = math.inf
                break
        if d < best_d:
            best, best_d = t, d
    return best


class Wrapping:
    """A kernel object's Autotuner/Heuristics layers over its ``triton.jit`` function.

    Attributes:
        layers: ``("heuristics", {name: fn})`` / ``("autotune", autotuner)``, outermost first.
        base: the ``triton.jit`` function underneath (what zerojit launches).
        tuner: the autotuner, or None.
        configs: the autotuner's configs (``[]`` without one).
    """

    def __init__(self, obj: Any) -> None:
        layers = []
        while _tc.is_autotuner(obj) or _tc.is_heuristics(obj):
            layers.append(("autotune", obj) if _tc.is_autotuner(obj) else ("heuristics", _tc.heuristics_values(obj)))
            obj = _tc.wrapped_function(obj)
        self.layers: tuple[tuple[str, Any], ...] = tuple(layers)
        self.base = obj
        tuners = [o for kind, o in layers if kind == "autotune"]
        self.tuner = tuners[0] if tuners else None
        self._tuners = len(tuners)
        self.configs: list[Any] = _tc.autotune_configs(self.tuner) if self.tuner is not None else []

    @property
    def tunes(self) -> bool:
        """True when the autotuner has a choice to make (more than one config)."""
        return len(self.configs) > 1

    def problems(self, params: frozenset[str]) -> list[str]:
        """What makes this wrapping unusable for a kernel with these parameters (empty: fine)."""
        out = []
        if self._tuners > 1:
            out.append(f"{self._tuners} @triton.autotune layers (zerojit takes one)")
        for kind, obj in self.layers:
            if kind == "heuristics":
                out += [f"heuristic {n!r} names no kernel parameter" for n in obj if n not in params]
        for i, c in enumerate(self.configs):
            out += [f"autotune config {i} ({c}) sets {n!r}, which names no kernel parameter"
                    for n in c.kwargs if n not in params]
        return out

    def tuning_key(self, named: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """The autotuner's tuning key for a launch with these arguments (every argument by name),
        and the arguments the autotuner sees (the heuristics above it applied)."""
        call = dict(named)
        for kind, obj in self.layers:
            if kind == "autotune":
                break
            _apply_heuristics(obj, call)
        return _tc.tuning_key(self.tuner, call), call

    def surviving(self, named: dict[str, Any]) -> list[int]:
        """The indices of the configs that survive the autotuner's pruning for these arguments
        (every argument by name; the heuristics above the autotuner are applied first)."""
        if not self.tunes:
            return list(range(len(self.configs)))
        kept = _tc.prune_configs(self.tuner, self.tuning_key(named)[1])
        index = {id(c): i for i, c in enumerate(self.configs)}
        return [index[id(c)] if id(c) in index else self.configs.index(c) for c in kept]

    def resolve(self, named: dict[str, Any], choose: Callable[[tuple, dict], int]) -> tuple[dict, Any, dict | None]:
        """Apply the layers to a launch's arguments (every argument by name, parameter order).

        ``choose(tuning_key, args)`` returns the autotune config's index. Returns the arguments
        with the heuristics' values and the config's ``all_kwargs`` added, the config (or None),
        and the arguments the autotuner launches with (what Triton's ``Autotuner.run`` hands the
        config's ``pre_hook``: the heuristics below it not yet applied; None without a config). Raises KeyError/TypeError from a heuristic as Triton would; ValueError when a
        config sets a meta-parameter the launch passes too (Triton's "Conflicting
        meta-parameters")."""
        call = dict(named)
        config = hook_args = None
        for kind, obj in self.layers:
            if kind == "heuristics":
                _apply_heuristics(obj, call)
            elif self.configs:
                config = self.configs[choose(_tc.tuning_key(obj, call), call) if self.tunes else 0]
                extra = _tc.config_arguments(config)
                conflicts = sorted(set(config.kwargs) & set(call))
                if conflicts:
                    raise ValueError(f"conflicting meta-parameters {conflicts}: the launch passes them and autotune "
                                     f"config {config} sets them")
                call.update(extra)
                hook_args = dict(call)
        return call, config, hook_args


def _apply_heuristics(values: dict[str, Callable[[dict], Any]], call: dict[str, Any]) -> None:
    for name, fn in values.items():  # Triton's Heuristics.run: each sees the values set before it
        call[name] = fn(dict(call))


def unwrap(obj: Any) -> Wrapping | None:
    """The :class:`Wrapping` of an Autotuner/Heuristics object, or None for a plain function."""
    return Wrapping(obj) if _tc.is_autotuner(obj) or _tc.is_heuristics(obj) else None


# -- tuning files ------------------------------------------------------------------------------

def tuning_file_path(kernel: str, source_hash: str) -> str:
    """Where the tuning file of ``kernel`` lives: ``<Triton cache folder>/zerojit-tuning/`` (so a
    cache bundle that carries the folder carries it), one file per kernel name and source hash."""
    return os.path.join(_tc.cache_dir(), TUNING_FOLDER, f"{kernel}-{source_hash[:16]}.json")


def save_tuning_file(path: str, header: dict[str, Any], configs: list[Any],
                     entries: list[tuple[tuple, int, float | None]]) -> None:
    """Write a tuning file atomically (a temporary file in the same folder, then ``os.replace``).

    Args:
        header: ``kernel``, ``target``, ``gpu``, ``triton``, ``source_hash``.
        configs: the autotuner's configs (their ``str`` is recorded, to refuse a changed list).
        entries: ``(tuning key, config index, milliseconds or None)``.
    """
    doc = {"format": TUNING_FORMAT, **header, "configs": [str(c) for c in configs],
           "entries": [{"key": list(k), "config": i, "ms": ms} for k, i, ms in entries]}
    write_atomically(path, json.dumps(doc, indent=1).encode())


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file in the same folder,
    flushed to disk, then ``os.replace``); the folder is created if needed."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tuning-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_tuning_file(path: str, expected: dict[str, Any], configs: list[Any]) -> dict[tuple, int]:
    """Read a tuning file: tuning key -> config index.

    ``expected`` holds the header fields to check (``kernel``, ``target``, ``triton``,
    ``source_hash`` and, on a GPU, ``gpu``; a field left out is not checked).

    Raises:
        TuningFileError: not JSON (field ``json``), another ``format``, a header field that
            differs, a changed config list (``configs``), or a malformed entry (``entries``).
    """
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise TuningFileError(path, "json", f"unreadable ({type(e).__name__}: {e})", "a tuning file") from None
    if not isinstance(doc, dict):
        raise TuningFileError(path, "json", type(doc).__name__, "an object")
    if doc.get("format") != TUNING_FORMAT:
        raise TuningFileError(path, "format", doc.get("format"), TUNING_FORMAT)
    for field_name, want in expected.items():
        if doc.get(field_name) != want:
            raise TuningFileError(path, field_name, doc.get(field_name), want)
    names = [str(c) for c in configs]
    if doc.get("configs") != names:
        raise TuningFileError(path, "configs", doc.get("configs"), names)
    table: dict[tuple, int] = {}
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise TuningFileError(path, "entries", type(entries).__name__, "a list")
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("key"), list) and isinstance(e.get("config"), int)
                and 0 <= e["config"] < len(configs)):
            raise TuningFileError(path, "entries", e, "{'key': [...], 'config': <index of a config>}")
        table[tuple(e["key"])] = e["config"]
    return table
