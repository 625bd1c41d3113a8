"""Autotuned and heuristics kernels: what zerojit does with ``@triton.autotune`` / ``@triton.heuristics``.

A :class:`~zerojit.kernel.TritonJitKernel` may set ``kernel`` to an ``Autotuner`` or a
``Heuristics`` object, nested in any order (FLA puts heuristics over an autotuner). The kernel
class then launches the ``triton.jit`` function underneath itself (:class:`Wrapping`):

* **heuristics** are applied as Triton's ``Heuristics.run`` does: each value in decorator order,
  on a dict of every argument by name, outermost decorator first;
* **the autotuner's choice** comes from the kernel's *tuning table* (tuning key -> config), never
  from a benchmark; a tuning key the table lacks is decided by the kernel's
  :class:`TuningPolicy`. The chosen config's meta-parameters and launch options
  (``Config.all_kwargs``) join the launch, its ``pre_hook`` runs first (Triton's
  ``Autotuner.run`` does the same; ``reset_to_zero``/``restore_value`` act only while
  benchmarking, in Triton as here).

The tuning key is Triton's (:func:`zerojit.triton_compat.tuning_key_function`: the values of the
autotuner's ``key`` arguments, then ``str(dtype)`` of each argument with a dtype, in the order of
the *call*). zerojit's key of a launch is the one Triton computes for the library call that passes
the same arguments in parameter order (positionally, or as keywords in signature order: how FLA
and Liger call their kernels), the values a heuristics layer above the autotuner sets last; tuning
files hold these keys. After warm-up the library's own path (``lib_kernel[grid](...)``) goes
through the same table and policy (``TritonJitKernel.finish_warmup`` wraps the autotuner's
``run``): a call whose keyword order gives Triton another key for the same launch gets the same
config, put in the autotuner's cache under Triton's key, and is not benchmarked.

Key space: a compile key of a kernel whose autotuner has several configs expands into one
:class:`TunedKey` per config that survives the autotuner's own pruning (``prune_configs_by``:
``early_config_prune``, ``perf_model``/``top_k``; Triton's ``Autotuner.prune_configs``) on the
key's warm-up inputs, then the class's ``select_configs``.

Tuning tables are filled at the end of warm-up (``TritonJitKernel.finish_warmup``): from the
kernel's tuning file in Triton's cache folder (:func:`load_tuning_file`; keyed by target, GPU
name, Triton version and the kernel's source hash, refused naming the field that differs), then
on a GPU by benchmarking the tuning keys ``tuning_inputs(key)`` declares, with the autotuner's
own benchmark (``Autotuner._bench``), saving the file again (written atomically). The table
(:class:`TuningTable`) indexes its keys for the ``nearest`` policy there too, so that the first
launch at a tuning key never tuned does one lookup among the tuned keys of its shape and, where
the autotuner prunes, one evaluation of its prune functions (Triton evaluates them at each new
tuning key as well); the choice is then remembered for the key.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import triton_compat as _tc
from .outputs import write_output

__all__ = ["HEURISTIC_ATTRIBUTE", "TunedKey", "TuningPolicy", "TuningCoverage", "TuningError", "TuningFileError",
           "TuningTable", "Wrapping",
           "unwrap", "nearest_tuning_key", "tuning_file_path", "save_tuning_file", "load_tuning_file", "write_atomically",
           "TUNING_FORMAT", "TUNING_FOLDER"]

#: The ``format`` field of a tuning file this zerojit reads and writes.
TUNING_FORMAT = "zerojit-tuning/1"
#: The folder of tuning files inside Triton's cache folder (cache bundles carry it).
TUNING_FOLDER = "zerojit-tuning"


class TuningError(LookupError):
    """A launch's tuning key has no config: not in the tuning table, and the kernel's policy is
    ``error`` (or the autotuner's pruning keeps no config for the launch). Names the kernel and
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

    A kernel class that declares none gets ``TuningPolicy()`` (``"nearest"``, no config), so an
    autotuned kernel needs no extra line.

    Attributes:
        untuned: ``"nearest"`` (the default): the config of the nearest tuned key
            (:func:`nearest_tuning_key`: the same dtypes and non-numeric entries) *among the tuned
            keys whose config survives the autotuner's pruning for this launch*
            (``prune_configs_by`` evaluated on the launch's arguments, as Triton's autotuner
            evaluates it before choosing: a config the autotuner would never run for these
            arguments is not launched, and was not compiled for them either); else ``config``
            when one is named; else the *first surviving config*: the first config, in the
            autotuner's order, that survives pruning for this launch and compiled at warm-up (a
            config whose compile failed, e.g. out of resources, is skipped; before any warm-up,
            or when no surviving config compiled, the first surviving one, which then compiles at
            run time and the monitor reports it). Where heuristics set constexprs (``EVEN``),
            both look first among the configs warm-up compiled for the launch's heuristic
            values (:meth:`zerojit.kernel.TritonJitKernel._choose_untuned`). ``"default"``:
            ``config`` (warm-up compiles it
            for every key, even where pruning drops it). ``"error"``: raise :class:`TuningError`
            at the launch. The choice is made once per tuning key (as Triton's autotuner makes
            it) and remembered.
        config: names one autotune config: its index, or a mapping of ``Config.all_kwargs()``
            items it must match (e.g. ``{"BK": 64, "num_warps": 4, "num_stages": 2}``); it must
            name exactly one config (checked at class creation).

    Raises:
        ValueError: an unknown ``untuned``, ``"default"`` naming no config, or ``"error"`` naming
            one (it would never be chosen).
    """

    untuned: str = "nearest"
    config: int | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.untuned not in _POLICIES:
            raise ValueError(f"TuningPolicy(untuned={self.untuned!r}): choose one of {_POLICIES}")
        if self.untuned == "default" and self.config is None:
            raise ValueError("TuningPolicy(untuned='default') names no config: pass config=<index or "
                             "{meta-parameter: value}>")
        if self.untuned == "error" and self.config is not None:  # it would be warmed for every key, never chosen
            raise ValueError(f"TuningPolicy(untuned='error', config={self.config!r}): the 'error' policy chooses no "
                             "config for an untuned key; drop config=, or use untuned='default' to serve it")

    def serves(self, configs: list[Any], tuned: bool) -> str:
        """How this policy serves a tuning key the table lacks, in the warm-up report's words
        (``tuned``: the table has entries for ``nearest`` to choose from), e.g. ``"first
        surviving config"``."""
        named = self.config_index(configs)
        if self.untuned == "error":
            return "TuningError at launch (policy 'error')"
        fallback = "first surviving config" if named is None else f"config {named} ({configs[named]})"
        return f"nearest tuned key, else {fallback}" if self.untuned == "nearest" and tuned else fallback

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


@dataclass(frozen=True)
class TuningCoverage:
    """What a wrapped kernel's warm-up left untuned (:meth:`zerojit.kernel.TritonJitKernel.finish_warmup`).

    Attributes:
        tuning_keys: the distinct tuning keys of the compile keys warmed (each key's warm-up
            inputs; under compile-only nothing is benchmarked, so none is tuned unless a tuning
            file says so).
        untuned: how many of them the tuning table lacks.
        served: how the kernel's :class:`TuningPolicy` serves them (:meth:`TuningPolicy.serves`).
    """

    tuning_keys: int
    untuned: int
    served: str


def _shape(key: tuple) -> tuple[tuple, list[float]]:
    """What must match for two keys to be comparable (the length, every non-int entry with its
    type and place) and the log2 of the int entries, in order."""
    fixed, logs = [], []
    for i, v in enumerate(key):
        if type(v) is int:
            logs.append(math.log2(v) if v > 1 else 0.0)
        else:
            fixed.append((i, type(v), v))
    return (len(key), tuple(fixed)), logs


def nearest_tuning_key(key: tuple, tuned: list[tuple]) -> tuple | None:
    """The tuned key nearest ``key``, or None when none is comparable.

    Comparable: the same length and equal entries wherever an entry is not an int (dtypes,
    flags, strings, None). Distance: the sum over int entries of ``|log2(max(a, 1)) -
    log2(max(b, 1))|`` (sizes that differ by a factor count the same at every scale); ties go to
    the key tuned first.
    """
    return TuningTable(dict.fromkeys(tuned, 0)).nearest(key)


class TuningTable(dict):
    """A wrapped kernel's tuning table: tuning key -> config index (a ``dict``), that also answers
    :meth:`nearest` from an index of its keys built once after each change (at the end of warm-up,
    :meth:`index`), so that a launch at a tuning key never tuned compares it only with the tuned
    keys of its own shape, whose logarithms are already taken."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._index: dict[tuple, list[tuple[tuple, tuple[float, ...]]]] | None = None

    def __setitem__(self, key: tuple, value: int) -> None:
        self._index = None
        super().__setitem__(key, value)

    def __delitem__(self, key: tuple) -> None:
        self._index = None
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._index = None
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self._index = None
        super().clear()

    def pop(self, *args: Any) -> Any:
        self._index = None
        return super().pop(*args)

    def popitem(self) -> tuple:
        self._index = None
        return super().popitem()

    def setdefault(self, key: tuple, default: Any = None) -> Any:
        self._index = None
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> "TuningTable":
        self._index = None
        return super().__ior__(other)

    def index(self) -> dict[tuple, list[tuple[tuple, list[float]]]]:
        """The tuned keys grouped by shape (see :func:`nearest_tuning_key`), each with the log2 of its
        int entries, in table order; built here when the table changed since."""
        if self._index is None:
            index: dict[tuple, list[tuple[tuple, list[float]]]] = {}
            for t in self:
                shape, logs = _shape(t)
                index.setdefault(shape, []).append((t, logs))
            self._index = index
        return self._index

    def nearest(self, key: tuple, survivors: Callable[[], list[int]] | None = None) -> tuple | None:
        """The tuned key nearest ``key`` (the metric of :func:`nearest_tuning_key`), or None when none
        is comparable; with ``survivors`` (a function returning config indices, called at most
        once and only when some tuned key is comparable), the nearest whose config is among them.
        Cost: one pass over the tuned keys of ``key``'s shape (and a sort of them when the nearest
        one's config does not survive)."""
        index = self._index if self._index is not None else self.index()
        shape, mine = _shape(key)
        group = index.get(shape)
        if not group:
            return None
        best, best_d = None, math.inf
        for t, logs in group:
            d = 0.0
            for a, b in zip(mine, logs):
                d += abs(a - b)
            if d < best_d:
                best, best_d = t, d
        if survivors is None:
            return best
        alive = set(survivors())
        if self[best] in alive:
            return best
        ranked = sorted(range(len(group)), key=lambda j: (sum(abs(a - b) for a, b in zip(mine, group[j][1])), j))
        return next((group[j][0] for j in ranked if self[group[j][0]] in alive), None)


class Wrapping:
    """A kernel object's Autotuner/Heuristics layers over its ``triton.jit`` function.

    Attributes:
        layers: ``("heuristics", {name: fn})`` / ``("autotune", autotuner)``, outermost first.
        base: the ``triton.jit`` function underneath (what zerojit launches).
        tuner: the autotuner, or None.
        configs: the autotuner's configs (``[]`` without one).
        arg_names: the kernel's parameters, in order.
        prunes: True when the autotuner has a choice to make and ``prune_configs_by`` can drop configs.
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
        self.arg_names: tuple[str, ...] = _tc.layer_arg_names(obj)
        above = []  # the heuristics layers above the autotuner (their values reach it as keywords)
        for kind, o in layers:
            if kind == "autotune":
                break
            above.append(o)
        self._above: tuple[dict[str, Callable[[dict], Any]], ...] = tuple(above)
        self._set_above = tuple(dict.fromkeys(n for values in above for n in values))
        #: the heuristics layers below the autotuner, outermost first (they see the config's values)
        self.below: tuple[dict[str, Callable[[dict], Any]], ...] = tuple(
            o for kind, o in layers[len(above) + 1:] if kind == "heuristics") if self.tuner is not None else ()
        self._key = _tc.tuning_key_function(self.tuner) if self.tuner is not None else None
        self.prunes = self.tunes and _tc.prunes_configs(self.tuner)
        self._index = {id(c): i for i, c in enumerate(self.configs)}
        # read once: each config's all_kwargs, meta-parameter names and pre_hook (what every launch adds)
        self._arguments = [_tc.config_arguments(c) for c in self.configs]
        self._meta = [frozenset(c.kwargs) for c in self.configs]
        self._hooks = [_tc.config_pre_hook(c) for c in self.configs]

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
        if self.tunes:  # 3.6-3.8 drop such a name from the tuning key without a word (3.9 refuses it): a typo
            out += [f"autotune key {n!r} names no kernel parameter (Triton would leave it out of the tuning key)"
                    for n in _tc.autotuner_key_names(self.tuner) if n not in params]
        return out

    def tuning_key(self, named: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """zerojit's tuning key for a launch with these arguments (every argument by name, in
        parameter order), and the arguments the autotuner sees (the heuristics above it applied,
        their values last): the key Triton's ``Autotuner.run`` computes for the library call
        that passes the arguments in parameter order (see the module doc)."""
        call = dict(named)
        for values in self._above:
            _apply_heuristics(values, call)
        return self._key(call, {}), call

    def canonical_key(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> tuple:
        """zerojit's tuning key (:meth:`tuning_key`) of an ``Autotuner.run(*args, **kwargs)`` call
        of the library's own path (``nargs``: its positional arguments by name), whatever the
        order of its keywords: the kernel's parameters in parameter order, the values the
        heuristics above the autotuner set last, in decorator order."""
        every = {**nargs, **kwargs}
        ordered = {n: every[n] for n in self.arg_names if n in every and n not in self._set_above}
        ordered.update((n, every[n]) for n in self._set_above if n in every)
        return self._key(ordered, {})

    def autotuner_call(self, call: dict[str, Any], grid: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """What Triton's ``Autotuner.run`` receives for a launch of ``call`` (the arguments the
        autotuner sees, :meth:`tuning_key`) made as the library call ``wrapped[grid](*arguments in
        parameter order)``: the positional arguments by name (the longest run of parameters from
        the first that the launch passes and no heuristic above sets), and the keywords:
        ``grid``, ``warmup=False`` (what ``kernel[grid]`` adds), then the rest in order (later
        parameters, launch options, the heuristics' values). Prune functions get exactly these."""
        nargs: dict[str, Any] = {}
        for n in self.arg_names:
            if n not in call or n in self._set_above:
                break
            nargs[n] = call[n]
        kwargs = {"grid": grid, "warmup": False}
        for k, v in call.items():
            if k not in nargs:
                kwargs[k] = v
        return nargs, kwargs

    def survivors(self, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[int]:
        """The indices of the configs that survive the autotuner's pruning for an
        ``Autotuner.run(*args, **kwargs)`` call (``nargs``: its positional arguments by name)."""
        if not self.prunes:
            return list(range(len(self.configs)))
        kept = _tc.prune_configs(self.tuner, nargs, kwargs)
        return [self._index[id(c)] if id(c) in self._index else self.configs.index(c) for c in kept]

    def surviving(self, named: dict[str, Any], grid: Any = None) -> list[int]:
        """The indices of the configs that survive the autotuner's pruning for a launch with these
        arguments (every argument by name; the heuristics above the autotuner are applied first,
        the call made as :meth:`autotuner_call` says)."""
        if not self.prunes:
            return list(range(len(self.configs)))
        return self.survivors(*self.autotuner_call(self.tuning_key(named)[1], grid))

    def apply_below(self, call: dict[str, Any], config: int) -> dict[str, Any]:
        """``call`` (the arguments the autotuner sees) with autotune config ``config``'s arguments
        and the heuristics below the autotuner applied, as :meth:`resolve` applies them (a new
        dict). Raises what a heuristic raises, named as :func:`_apply_heuristics` names it."""
        call = {**call, **self._arguments[config]}
        for values in self.below:
            _apply_heuristics(values, call)
        return call

    def resolve(self, named: dict[str, Any], choose: Callable[[tuple, Callable[[], list[int]], dict], int],
                grid: Any = None) -> tuple[dict, Any, dict | None]:
        """Apply the layers to a launch's arguments (every argument by name, parameter order).

        ``choose(tuning_key, survivors, call)`` returns the autotune config's index;
        ``survivors()`` evaluates the autotuner's pruning for this launch (``grid``: the launch's
        grid, which Triton hands the prune functions too) when the choice needs it; ``call`` is
        what the autotuner sees (the arguments, the heuristics above it applied: a new tuning
        key's choice reads their values), passed as it is. Returns the arguments
        with the heuristics' values and the config's ``all_kwargs`` added, the config (or None),
        and the arguments the autotuner launches with (what Triton's ``Autotuner.run`` hands the
        config's ``pre_hook``: the heuristics below it not yet applied; None without a config or
        without a ``pre_hook``). Raises KeyError/TypeError from a heuristic as Triton would;
        ValueError when a config sets a meta-parameter the launch passes too (Triton's
        "Conflicting meta-parameters")."""
        call = dict(named)
        config = hook_args = None
        for kind, obj in self.layers:
            if kind == "heuristics":
                _apply_heuristics(obj, call)
            elif self.configs:
                if self.tunes:  # survivors() runs inside choose(), before call takes the config's values
                    i = choose(self._key(call, {}), lambda: self.survivors(*self.autotuner_call(call, grid)), call)
                else:
                    i = 0
                config = self.configs[i]
                if not self._meta[i].isdisjoint(call):
                    raise ValueError(f"conflicting meta-parameters {sorted(self._meta[i] & set(call))}: the launch "
                                     f"passes them and autotune config {config} sets them")
                call.update(self._arguments[i])
                if self._hooks[i] is not None:
                    hook_args = dict(call)
        return call, config, hook_args


#: The attribute a heuristic's exception gets: the heuristic's name (the warm-up names it, with
#: the meta-tensor rule when it read tensor data: zerojit.registry). The exception itself is
#: Triton's: same type, same message.
HEURISTIC_ATTRIBUTE = "zerojit_heuristic"


def _apply_heuristics(values: dict[str, Callable[[dict], Any]], call: dict[str, Any]) -> None:
    for name, fn in values.items():  # Triton's Heuristics.run: each sees the values set before it
        try:
            call[name] = fn(dict(call))
        except Exception as e:
            try:
                setattr(e, HEURISTIC_ATTRIBUTE, name)
            except AttributeError:  # (an exception type with __slots__)
                pass
            raise


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
    """Write ``data`` to ``path`` whole or not at all (:func:`zerojit.outputs.write_output`: a
    temporary file in the same folder, flushed to disk, then ``os.replace``); the folder is
    created if needed.

    Raises:
        zerojit.outputs.OutputError: the folder cannot be written, or ``path`` is not a regular file.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_output(path, data)


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
    except (OSError, ValueError, RecursionError) as e:  # (nested too deep: RecursionError, no ValueError)
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
    want = "{'key': [ints, strs, ...], 'config': <index of a config>, 'ms': <milliseconds or null>}"
    for e in entries:
        # a tuning key holds what Triton's autotuner keys on (ints, dtype strings, ...): JSON scalars only
        # (a nested list is unhashable); a bool is no config index, though Python's bool is an int
        if not (isinstance(e, dict) and isinstance(e.get("key"), list)
                and all(v is None or type(v) in (int, float, str, bool) for v in e["key"])
                and type(e.get("config")) is int and 0 <= e["config"] < len(configs)
                and (e.get("ms") is None or type(e["ms"]) in (int, float))):
            raise TuningFileError(path, "entries", e, want)
        key = tuple(e["key"])
        if key in table:  # an edited file: which of the two choices was meant is unknowable
            raise TuningFileError(path, "entries", e, f"one entry per tuning key (key {list(key)} is given twice)")
        table[key] = e["config"]
    return table
