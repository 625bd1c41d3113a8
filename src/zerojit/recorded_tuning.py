"""Autotuned kernels of a recording with nothing declared: their tuning keys' launches, tuned at
warm-up on a GPU, and a default choice where nothing was tuned.

A raw ``triton.autotune`` kernel (no zerojit class, no ``TuningPolicy``) recorded under a
compile-only target holds no choice (nothing was measured there). Three pieces make it run with
0 benchmarks after warm-up anyway:

* :class:`LaunchRecorder` (``zerojit record``): routes ``Autotuner.run``
  (:func:`zerojit.triton_compat.patch_autotuner_run`) so that the first launch at each tuning key
  is kept (:class:`~zerojit.manifest.TuningLaunch`: every int, float and bool argument's value,
  each tensor's dtype, shape, strides, storage offset and storage size, the grid per config);
  :meth:`LaunchRecorder.tunings` merges them with the autotuner's own choices into the
  manifest's ``tunings`` (a key with no choice has ``config`` null).
* :func:`tune_recorded` (``zerojit exec`` and ``zerojit warmup --manifest`` on a GPU): each
  recorded tuning key with no choice is tuned with the autotuner's own benchmarking
  (``Autotuner.run``: its pruning, ``_bench`` per config, hooks) on buffers of the recorded
  layout (:func:`launch_arguments`: zeros, so a kernel that reads indices from a tensor stays in
  bounds), before the program runs; the choices go to the kernel's tuning file
  (:func:`zerojit.autotune.tuning_file_path`: keyed by target, GPU, Triton and source hash), so
  the next start reads them instead of tuning, and into the autotuner's cache.
* :func:`install_default_policy` (``zerojit exec``): a launch at a tuning key the autotuner's
  cache lacks gets the default policy instead of a benchmark. Its candidates: the configs that
  survive the autotuner's pruning for the launch and were compiled at warm-up for it (the
  launch's specialization under that config is a recorded one; where none is, a config any
  recorded specialization carries). It takes the config of the nearest tuned key
  (:meth:`zerojit.autotune.TuningTable.nearest`: same length, dtypes and non-numeric entries)
  among the candidates, else the first candidate in the autotuner's order. The choice goes into the autotuner's cache, as
  :func:`zerojit.manifest.restore_tunings` does, so the launch benchmarks nothing. Under a
  compile-only target launches are dry, so a choice changes nothing measurable there; on a GPU it
  serves a key that was neither recorded nor tuned without a benchmark on the request path.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from . import triton_compat as _tc
from .autotune import TuningFileError, TuningTable, load_tuning_file, save_tuning_file, tuning_file_path
from .context import allow_compiles, in_warmup
from .manifest import (KernelRecord, Manifest, RecordedKernel, RecordedTuning, TensorLaunch, TuningLaunch,
                       decode_value, encode_config, encode_specialization, encode_value, recorded_autotuner)
from .specialization import bind

__all__ = ["LaunchRecorder", "describe_launch", "build_buffer", "launch_arguments", "tune_recorded", "TuningOutcome",
           "install_default_policy", "DefaultPolicy", "untuned_report"]

_CALL_KEYWORDS = ("grid", "warmup")  # what kernel[grid](...) adds to Autotuner.run's keywords


# -- recording --------------------------------------------------------------------------------

def describe_launch(tuner: Any, args: tuple, kwargs: dict[str, Any]) -> TuningLaunch | None:
    """An ``Autotuner.run(*args, **kwargs)`` call as a :class:`~zerojit.manifest.TuningLaunch`, or
    None when an argument cannot be described (a value :func:`~zerojit.manifest.encode_value`
    keeps only as text, a pointer-like object that is no torch tensor). The grid is evaluated per
    config's meta-parameters (``Config.kwargs``; a launch option such as ``num_warps`` is not
    among the arguments Triton hands a grid function); a config whose grid raises has none."""
    named = dict(zip(_tc.layer_arg_names(tuner), args))
    named.update((k, v) for k, v in kwargs.items() if k not in _CALL_KEYWORDS)
    arguments = []
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            arguments.append((name, TensorLaunch(str(value.dtype).removeprefix("torch."), tuple(value.shape),
                                                 tuple(value.stride()), value.storage_offset(),
                                                 value.untyped_storage().nbytes() // value.element_size())))
            continue
        encoded = encode_value(value)
        try:
            decode_value(encoded, name)
        except ValueError:  # kept only as text (a pointer-like object, a constexpr function): cannot be rebuilt
            return None
        arguments.append((name, encoded))
    grid = kwargs.get("grid")
    grids = {}
    for config in _tc.autotune_configs(tuner):
        meta = encode_config(config.kwargs)
        if meta in grids:
            continue
        try:
            g = grid({**named, **config.kwargs}) if callable(grid) else grid
            grids[meta] = tuple(int(v) for v in g)
        except Exception:  # (the launch itself raises what it raises)
            continue
    return TuningLaunch(min(len(args), len(named)), tuple(arguments), tuple(grids.items()))


class LaunchRecorder:
    """Keeps the first launch at each tuning key of every ``triton.autotune`` object while
    installed (see the module doc); launches inside a zerojit warm-up or ``allow_compiles`` block
    are not the program's and are not kept. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._launches: dict[int, dict[tuple, TuningLaunch | None]] = {}  # id(autotuner) -> key -> launch
        self._restore: Callable[[], None] | None = None

    def install(self) -> "LaunchRecorder":
        """Route ``Autotuner.run`` through the recorder (a no-op when installed). Returns self."""
        if self._restore is None:
            self._restore = _tc.patch_autotuner_run(self._wrap)
        return self

    def uninstall(self) -> None:
        """Put the previous ``Autotuner.run`` back."""
        if self._restore is not None:
            self._restore()
            self._restore = None

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            if len(_tc.autotune_configs(tuner)) > 1 and not in_warmup():  # (one config: no choice, no key)
                self._note(tuner, args, kwargs)
            return original(tuner, *args, **kwargs)

        return run

    def _note(self, tuner: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        try:
            key = _tc.tuning_key(tuner, dict(zip(_tc.layer_arg_names(tuner), args)), kwargs)
        except Exception:
            return  # the launch itself raises Triton's error for these arguments
        with self._lock:
            seen = self._launches.setdefault(id(tuner), {})
            if key in seen:
                return
            seen[key] = None  # (described outside the lock below; a racing launch at the key is not kept)
        try:
            launch = describe_launch(tuner, args, kwargs)
        except Exception:  # (a tensor with no storage to measure, e.g. on the meta device): key kept, no launch
            launch = None
        with self._lock:
            self._launches[id(tuner)][key] = launch

    def tunings(self, obj: Any) -> tuple[RecordedTuning, ...]:
        """The tuning keys of the ``triton.autotune`` object ``obj`` is or wraps: each choice in
        its own cache (``Autotuner.cache``) and each key launched while installed, once, with
        the first launch there where it was kept; keys holding anything but JSON scalars are left
        out (none when there is no autotuner)."""
        tuner = _tc.find_autotuner(obj)
        if tuner is None:
            return ()
        with self._lock:
            launches = dict(self._launches.get(id(tuner), {}))
        choices = _tc.autotuner_choices(tuner)
        out = []
        for key in dict.fromkeys([*choices, *launches]):
            if all(v is None or isinstance(v, (bool, int, float, str)) for v in key):
                config = choices.get(key)
                out.append(RecordedTuning(key, None if config is None else encode_config(config.all_kwargs()),
                                          launches.get(key)))
        return tuple(out)


# -- buffers of a recorded launch -------------------------------------------------------------

def build_buffer(tensor: TensorLaunch, device: Any) -> torch.Tensor:
    """A tensor of ``tensor``'s dtype, shape, strides and storage offset over a zero-filled
    storage of its recorded size, on ``device``. Zeros, not random values: a kernel that reads
    indices (or sizes) from a tensor argument stays in bounds, and a benchmark on zeros times
    the same memory traffic.

    Raises:
        ValueError: an unknown dtype name, or a view that does not fit the storage, naming both.
    """
    dtype = getattr(torch, tensor.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"tensor dtype {tensor.dtype!r} is no torch dtype")
    if tensor.shape and min(tensor.shape) > 0:
        last = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.strides))
        if min(tensor.strides) < 0 or last >= tensor.storage:
            raise ValueError(f"a view of shape {list(tensor.shape)}, strides {list(tensor.strides)} and offset "
                             f"{tensor.offset} does not fit a storage of {tensor.storage} elements")
    storage = torch.zeros(tensor.storage, dtype=dtype, device=device)
    return storage.as_strided(tensor.shape, tensor.strides, tensor.offset)


def launch_arguments(launch: TuningLaunch, device: Any) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of an ``Autotuner.run`` call like the recorded one:
    a :func:`build_buffer` tensor per tensor argument, every other value as recorded, the keywords
    in the recorded order after ``grid`` (a function of the launch's meta-parameters giving the
    recorded grid of the config that sets them) and ``warmup=False``.

    Raises:
        ValueError: a value that cannot be rebuilt (see :func:`build_buffer`), naming the argument.
    """
    values = []
    for name, value in launch.arguments:
        try:
            values.append(build_buffer(value, device) if isinstance(value, TensorLaunch)
                          else decode_value(value, f"argument {name!r}"))
        except ValueError as e:
            raise ValueError(f"argument {name!r}: {e}") from None
    grids = [({n: decode_value(v, "grid") for n, v in meta}, g) for meta, g in launch.grids]

    def grid(meta: dict[str, Any]) -> tuple[int, ...]:
        for sets, g in grids:
            if all(k in meta and meta[k] == v for k, v in sets.items()):
                return g
        raise LookupError(f"no recorded grid for the meta-parameters {meta}")

    positional = values[:launch.positional]
    keywords = {"grid": grid, "warmup": False}
    keywords.update((name, v) for (name, _), v in list(zip(launch.arguments, values))[launch.positional:])
    return positional, keywords


# -- tuning at warm-up ------------------------------------------------------------------------

def autotuner_benchmark(tuner: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The autotuner's own choice for a call: Triton's ``Autotuner.run`` (pruning, ``_bench`` of
    each surviving config with its hooks, the minimum kept in its cache) called past any wrapper
    zerojit put on the instance; returns the config its cache then holds at the call's key."""
    type(tuner).run(tuner, *args, **kwargs)
    key = _tc.tuning_key(tuner, dict(zip(_tc.layer_arg_names(tuner), args)), kwargs)
    return _tc.autotuner_choices(tuner)[key]


@dataclass
class TuningOutcome:
    """What :func:`tune_recorded` did: ``tuned`` keys benchmarked now, ``loaded`` keys read from
    tuning files, ``notes`` (a key not tuned and why, a tuning file not used and why), ``files``
    written."""

    tuned: int = 0
    loaded: int = 0
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def line(self) -> str | None:
        """One line for the warm-up's report, or None when there was nothing to tune."""
        if not (self.tuned or self.loaded):
            return None
        return (f"{self.tuned + self.loaded} recorded tuning key(s) with no choice tuned at warm-up "
                f"({self.tuned} benchmarked now, {self.loaded} from tuning files)")


def tuning_header(record: KernelRecord, target: str, gpu: str | None) -> dict[str, Any]:
    """The header of a recorded kernel's tuning file (:func:`zerojit.autotune.save_tuning_file`):
    the kernel's name, the target (``"cuda:90"``), the GPU's name, Triton's version and the
    recorded source hash."""
    header = {"kernel": record.name, "target": target, "triton": _tc.TRITON_VERSION, "source_hash": record.source_hash}
    if gpu is not None:
        header["gpu"] = gpu
    return header


def tune_recorded(kernels: Sequence[RecordedKernel], *, target: str, gpu: str | None, device: Any = "cuda",
                  benchmark: Callable[[Any, list[Any], dict[str, Any]], Any] = autotuner_benchmark) -> TuningOutcome:
    """Tune each recorded tuning key that holds no choice but a launch (see the module doc), and
    put every choice (read from the kernel's tuning file, or benchmarked now) into the
    autotuner's cache. Call after the warm-up compiled the recorded specializations, before the
    program runs; compiles it causes are deliberate (:func:`zerojit.context.allow_compiles`).

    Args:
        target, gpu: the tuning file's header fields (``"cuda:90"``, the device name).
        device: where the buffers are built.
        benchmark: ``benchmark(autotuner, args, kwargs) -> Config``: the choice for one call
            (default :func:`autotuner_benchmark`, the autotuner's own).

    A tuning file for another GPU, Triton, source or config list is not used (a note names the
    field) and is written again; a key whose launch cannot be rebuilt, whose rebuilt call has
    another tuning key, or whose benchmark raised, is noted and left to the default policy.
    """
    outcome = TuningOutcome()
    for kernel in kernels:
        record = kernel.record
        wanted = [t for t in record.tunings if t.config is None and t.launch is not None]
        if not wanted:
            continue
        tuner = recorded_autotuner(record)
        if tuner is None:
            continue
        configs = _tc.autotune_configs(tuner)
        header = tuning_header(record, target, gpu)
        path = tuning_file_path(record.name, record.source_hash)
        table: dict[tuple, int] = {}
        if os.path.exists(path):
            try:
                table.update(load_tuning_file(path, header, configs))
            except TuningFileError as e:
                outcome.notes.append(f"{record.name}: {e.path}: field {e.field!r} differs: tuned again")
        before = len(table)
        for tuning in wanted:
            if tuning.key in table:
                outcome.loaded += 1
                continue
            try:
                args, kwargs = launch_arguments(tuning.launch, device)
            except ValueError as e:
                outcome.notes.append(f"{record.name}: tuning key {tuning.key}: {e}: not tuned")
                continue
            key = _tc.tuning_key(tuner, dict(zip(_tc.layer_arg_names(tuner), args)), kwargs)
            if key != tuning.key:
                outcome.notes.append(f"{record.name}: the recorded launch at tuning key {tuning.key} gives key {key} "
                                     "here: not tuned")
                continue
            try:
                with allow_compiles():
                    config = benchmark(tuner, args, kwargs)
            except Exception as e:  # (every config out of resources, a kernel that fails on zeros, ...)
                outcome.notes.append(f"{record.name}: tuning key {tuning.key}: the autotuner's benchmark failed "
                                     f"({type(e).__name__}: {e}): left to the default policy")
                continue
            table[key] = configs.index(config)
            outcome.tuned += 1
        if len(table) > before:
            save_tuning_file(path, header, configs, [(k, i, None) for k, i in table.items()])
            outcome.files.append(path)
        for key, i in table.items():
            _tc.fill_autotuner_cache(tuner, key, configs[i])
    return outcome


# -- the default policy for untuned keys ------------------------------------------------------

class DefaultPolicy:
    """The default policy installed on the recorded kernels' autotuners (see the module doc and
    :func:`install_default_policy`); :attr:`decisions` holds each tuning key it decided and how
    (``"nearest"`` or ``"first"``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.decisions: dict[tuple[str, tuple], str] = {}
        self._wrapped: list[Any] = []

    def restore(self) -> None:
        """Take the wrappers off the autotuners (their cache keeps the choices made)."""
        for tuner in self._wrapped:
            _tc.unwrap_run(tuner)
        self._wrapped.clear()

    def line(self, compile_only: bool) -> str | None:
        """The report's line, or None when the policy decided nothing."""
        if not self.decisions:
            return None
        kinds = list(self.decisions.values())
        where = "under compile-only" if compile_only else "(neither recorded nor tuned at warm-up)"
        return (f"{len(kinds)} tuning key(s) untuned {where}: default policy ({kinds.count('nearest')} nearest tuned, "
                f"{kinds.count('first')} first surviving config), 0 benchmarks")

    def install(self, record: KernelRecord, tuner: Any | None) -> None:
        """Serve ``tuner`` (the ``triton.autotune`` object of ``record``'s function; None: it has
        none) by the policy; a no-op for an autotuner with one config, or one whose ``run`` is
        wrapped already (a zerojit kernel class serves it). :func:`install_default_policy` calls it
        per recorded kernel; ``zerojit exec`` also for the autotuner of a ``__main__`` kernel,
        which exists only once the program made it (:mod:`zerojit.script_kernels`), at its first
        launch."""
        if tuner is None or len(_tc.autotune_configs(tuner)) < 2 or _tc.wrapped_run(tuner):
            return
        carried = {s.autotune_config for s in record.specializations if s.autotune_config is not None}
        compiled = frozenset(i for i, c in enumerate(_tc.autotune_configs(tuner))
                             if encode_config(c.all_kwargs()) in carried)
        warmed = frozenset((s.specialization, s.options) for s in record.specializations)
        self._wrap(record.name, tuner, compiled, warmed)

    def _wrap(self, name: str, tuner: Any, compiled: frozenset[int], warmed: frozenset[tuple]) -> None:
        configs = _tc.autotune_configs(tuner)
        arguments = [_tc.config_arguments(c) for c in configs]
        jit_fn = _tc.unwrap_jit_function(tuner)
        arg_names = _tc.layer_arg_names(tuner)
        key_of = _tc.tuning_key_function(tuner)
        index = {id(c): i for i, c in enumerate(configs)}
        tuned = TuningTable({k: index[id(c)] for k, c in _tc.autotuner_choices(tuner).items() if id(c) in index})
        prunes = _tc.prunes_configs(tuner)

        def warmed_for(i: int, args: tuple, kwargs: dict[str, Any]) -> bool:
            """Whether the variant config ``i`` launches for this call was warmed (a recorded
            specialization, as the recorder keys it); False where the binder refuses the call."""
            try:
                _, spec, options = bind(jit_fn, *args, **{k: v for k, v in kwargs.items() if k not in _CALL_KEYWORDS},
                                        **arguments[i])
            except Exception:  # (a heuristics layer below the autotuner: its values are not here)
                return False
            return (encode_specialization(jit_fn, spec), tuple(_tc.run_options_removed(options).items())) in warmed

        def choose(key: tuple, args: tuple, nargs: dict[str, Any], kwargs: dict[str, Any]) -> None:
            usable: list[int] | None = None

            def candidates() -> list[int]:
                # of the configs that survive pruning for this call: those whose variant for it was
                # warmed, else those compiled for any recorded launch, else all of them
                nonlocal usable
                if usable is None:
                    alive = (list(range(len(configs))) if not prunes else
                             [index[id(c)] if id(c) in index else configs.index(c)
                              for c in _tc.prune_configs(tuner, nargs, kwargs)])
                    usable = ([i for i in alive if warmed_for(i, args, kwargs)]
                              or [i for i in alive if i in compiled] or alive)
                return usable

            near = tuned.nearest(key, candidates) if tuned else None
            if near is not None:
                i, how = tuned[near], "nearest"
            else:
                i, how = candidates()[0], "first"
            with self._lock:
                _tc.fill_autotuner_cache(tuner, key, configs[i])
                self.decisions[(name, key)] = how

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                nargs = dict(zip(arg_names, args))
                key = key_of(nargs, kwargs)
                if not _tc.autotuner_cached(tuner, key) and not in_warmup():
                    choose(key, args, nargs, kwargs)
                return original(*args, **kwargs)

            return run

        _tc.wrap_run(tuner, make)
        self._wrapped.append(tuner)


def install_default_policy(kernels: Sequence[RecordedKernel]) -> DefaultPolicy:
    """Install the default policy on the ``triton.autotune`` object of each recorded kernel that
    has a choice to make (more than one config), at the instance (its ``run``, through
    :func:`zerojit.triton_compat.wrap_run`); an autotuner a zerojit kernel class already serves
    (its ``run`` wrapped at that kernel's warm-up) keeps that kernel's policy. The keys already in
    its cache when installed (restored, tuned at warm-up) are the tuned keys the nearest rule
    compares with; a config counts as compiled for a launch when Triton's binder gives the
    launch under it a recorded specialization (else, where no config does, when a recorded
    specialization carries it: ``autotune_config``). Call after the warm-up and the restoring of
    choices. Cost per launch through the autotuner: its tuning key computed once more (a few
    microseconds); at the first launch of an untuned key, one binder call per surviving config."""
    policy = DefaultPolicy()
    for kernel in kernels:
        policy.install(kernel.record, recorded_autotuner(kernel.record))
    return policy


# -- record --report --------------------------------------------------------------------------

def untuned_report(manifest: Manifest) -> str | None:
    """One line when the manifest holds tuning keys with no choice (a compile-only recording:
    nothing measured), saying how to give them; None otherwise."""
    untuned = [(k.name, t) for k in manifest.kernels for t in k.tunings if t.config is None]
    if not untuned:
        return None
    kernels = len({name for name, _ in untuned})
    return (f"tuning: {len(untuned)} tuning key(s) of {kernels} autotuned kernel(s) hold no choice (nothing was "
            "measured while recording): record on a GPU, or fill each entry's 'config' in the manifest's 'tunings' "
            "(docs/manifest.md), or let 'zerojit exec' / 'zerojit warmup --manifest' tune them at warm-up on a GPU; "
            "until then exec gives them the default policy (nearest tuned key, else the first surviving config)")
