"""The kernel contract: a kernel that knows its own compile-key space.

A :class:`JitKernel` has a frozen ``CompileKey``, a ``dispatch(**inputs) -> CompileKey``, a
``get_warmup_keys(...)`` giving the whole space (from the model configuration and/or a
registration request), ``compile(key)``, and ``register_warmup(**request)``.

A :class:`TritonJitKernel` wraps one ``@triton.jit`` function. Its ``__call__``, decorated with
:func:`kernel_launcher`, is *declarative*: it validates inputs, allocates outputs and returns a
:class:`LaunchSpec` (grid, extra kernel arguments, what to return). The decorator turns it into
the one launch entry, used by serving code and by warm-up alike: ``compile(key)`` is a fake launch
of ``self(**self.warmup_inputs(key))``, so the runtime key and the warmed key cannot drift apart.

Inputs map to kernel parameters by name once, when the class is created: ``seq_lens`` goes to the
parameter ``seq_lens`` or ``seq_lens_ptr``. An input that maps to no parameter is an error at
class creation unless it is declared ``host_only`` (used by the launcher itself).

Launch modes (chosen per launch, no flag to pass):
* on a GPU: a real launch (``kernel[grid](...)``);
* under :func:`zerojit.compile_only.compile_only`: a *dry launch*, Triton's binder on real CPU
  tensors and a cache lookup, compiling on a miss (which the monitor reports), executing nothing;
* under ``TRITON_INTERPRET=1``: the interpreter executes the kernel on CPU tensors;
* inside ``compile(key)``: a warm-up launch that compiles and, on a GPU, loads the module and
  builds the launcher, so the first real launch costs what the thousandth does.

The launch path (``zerojit._launch``): the launch entry has the method's own signature and passes
the parameter values to ``JITFunction.run`` positionally, in parameter order (the mapping is
generated once per set of ``LaunchSpec.kwargs`` names). A class with ``fast_path = True`` also
records each warm-up launch, and launches a warmed ``CompiledKernel`` directly when the arguments
provably share its specialization classes, skipping Triton's binder and cache-key string
(:meth:`TritonJitKernel.select_variant` shows the choice without launching).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import os
import sys
import threading
import types
import weakref
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Generic, Hashable, Mapping, TypeVar

from . import autotune as _at
from . import context
from . import lint
from . import triton_compat as _tc
from ._launch import SELECT, FastVariant, LaunchState, Plan
from .compile_only import CompileOnlyDriver
from .specialization import LAUNCH_OPTIONS, SpecClass, bind, spec_classes

# Triton's DriverConfig: launches read its ``_active`` slot (the active driver, or None before
# the first launch) without creating a GPU driver (see triton_compat.peek_driver).
_triton_driver = _tc.DRIVER

__all__ = [
    "KernelDefinitionError",
    "KernelInputError",
    "NoDeviceError",
    "LaunchSpec",
    "CompiledVariant",
    "FastVariant",
    "JitKernel",
    "TritonJitKernel",
    "kernel_launcher",
    "set_launch_observer",
    "reset_launch_counters",
    "RETURNS_LAUNCH_COUNTERS",
    "launch_observer",
    "set_hook_pins",
    "check_hook_pins",
]

KeyT = TypeVar("KeyT", bound=Hashable)


class KernelDefinitionError(TypeError):
    """A kernel class is malformed (raised when the class is created or first launched)."""


class KernelInputError(ValueError):
    """A launch input is invalid; the message names the kernel and the argument."""

    def __init__(self, kernel: str, argument: str, problem: str) -> None:
        super().__init__(f"{kernel}: argument {argument!r}: {problem}")
        self.kernel = kernel
        self.argument = argument


class NoDeviceError(RuntimeError):
    """A launch where Triton has nothing to launch on: no GPU is visible, no
    :func:`zerojit.compile_only.compile_only` block is open, and ``TRITON_INTERPRET`` is off."""


_NO_KWARGS: Mapping[str, Any] = MappingProxyType({})


@dataclass(init=False, slots=True)  # frozen by its own __setattr__ (below)
class LaunchSpec:
    """What a declarative ``__call__`` returns.

    Attributes:
        grid: the launch grid, from the live counts (never a buffer's capacity). A grid with a 0
            launches nothing. For a wrapped kernel (``kernel`` an Autotuner/Heuristics) it may be
            a callable of the launch's arguments by name, the chosen config's meta-parameters
            included (``lambda meta: (triton.cdiv(n, meta["BLOCK"]),)``), as with Triton's autotune.
        kwargs: kernel arguments beyond the mapped inputs (outputs, constexprs, derived ints,
            launch options such as ``num_warps``), named like inputs (``out`` -> ``out_ptr``). A
            kwarg for the parameter of a mapped input replaces the input's value (K7's ``topk=None``
            on a window-only layer): the launch passes the kwarg, not the input. Every parameter
            needs a value (an input, a kwarg or its default), else the first launch raises
            :class:`KernelDefinitionError` naming it.
        returns: what the launch returns to the caller (the outputs).

    Built on every launch: ``LaunchSpec(grid, kwargs, returns)`` (positional) costs about 0.1 us
    less than the same with keywords on CPython 3.11 (a class called with keywords gets them as a dict).
    """

    grid: tuple[int, ...] | Callable[[dict[str, Any]], tuple[int, ...]]
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # default: an empty read-only mapping
    returns: Any = None

    def __init__(self, grid: Any, kwargs: Mapping[str, Any] = _NO_KWARGS, returns: Any = None) -> None:
        # Built on every launch: each slot written by its descriptor. (A frozen dataclass's own
        # __init__ pays object.__setattr__ per field, a __dict__ its creation; and Python 3.11's
        # frozen dataclass with slots raises TypeError, not FrozenInstanceError, for other names.)
        _set_grid(self, grid)
        _set_kwargs(self, kwargs)
        _set_returns(self, returns)

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:
        return LaunchSpec, (self.grid, self.kwargs, self.returns)


_set_grid, _set_kwargs, _set_returns = (LaunchSpec.__dict__[f].__set__ for f in ("grid", "kwargs", "returns"))


@dataclass(frozen=True)
class CompiledVariant:
    """One warmed compile key and the Triton variant it compiled.

    Attributes:
        kernel: the zerojit kernel's name.
        key: the zerojit ``CompileKey``.
        triton_key: Triton's in-process cache key (specialization + launch options).
        specialization: each kernel parameter's :class:`SpecClass`, in parameter order.
        param_names: the kernel parameters' names, in order.
        loaded: the module and launcher are loaded (True on a GPU).
        compiled: Triton's ``CompiledKernel`` (not compared).
        generic: a generic variant (:mod:`zerojit.generic`): it serves a group of keys, it is
            none of the warmed keys (the audit and the monitor do not count it as one).
    """

    kernel: str
    key: Any
    triton_key: str
    specialization: tuple[SpecClass, ...]
    param_names: tuple[str, ...]
    loaded: bool
    compiled: Any = field(default=None, compare=False, repr=False)
    generic: bool = False


# Set inside compile(key): the warm-up launch records its CompiledKernel here instead of launching.
_WARMUP_SINK = context.WARMUP_SINK
# Triton creates a kernel's per-device cache lazily (a defaultdict); two warm-up threads creating it
# at once would each get their own and one thread's compiled variants would be lost.
_DEVICE_CACHE_LOCK = threading.Lock()
# Driver class -> whether it is the compile-only driver (an ABC isinstance check costs ~0.5 us a launch).
_DRY_DRIVERS: dict[type, bool] = {}
# (driver, whether it is the compile-only one) of the last launch that reached Triton: the launch
# entry takes its inline path for that driver, known by identity (a class lookup costs more).
_last_driver: tuple[Any, bool] = (object(), False)
# Set inside compile(TunedKey): the autotune config (its index) the warm-up launch compiles.
_FORCED_CONFIG: contextvars.ContextVar[int | None] = contextvars.ContextVar("zerojit_forced_config", default=None)
# Called as observer(kernel, compiled_kernel) after each zerojit launch; the monitor counts hits.
_launch_observer: Callable[[Any, Any], None] | None = None
#: The attribute by which an object says its bound method installed as the launch observer
#: returns *launch counters* (see :func:`set_launch_observer`). On the object, not the function:
#: a wrapper made with ``functools.wraps`` copies a function's attributes, and a wrapper that
#: returns what it wraps returns the counter of an observer that must see every launch.
RETURNS_LAUNCH_COUNTERS = "zerojit_returns_launch_counters"
# While the observer returns launch counters: a token that reset_launch_counters() replaces, else
# None. The fast-path entries holding a counter are in _COUNTED, so that a reset reaches each.
_counter_epoch: object | None = None
_COUNTED: "weakref.WeakSet[Any]" = weakref.WeakSet()
_COUNTER_LOCK = threading.Lock()


def note_driver(drv: Any) -> bool:
    """Remember ``drv`` as the driver of the last launch (the entry's inline path is then taken
    for it) and return whether it is the compile-only driver (its launches are dry)."""
    global _last_driver
    dry = _DRY_DRIVERS.get(drv.__class__)
    if dry is None:
        dry = _DRY_DRIVERS.setdefault(drv.__class__, isinstance(drv, CompileOnlyDriver))
    _last_driver = (drv, dry)
    return dry


def set_launch_observer(observer: Callable[[Any, Any], Any] | None) -> Callable[[Any, Any], Any] | None:
    """Install the process's launch observer (the monitor); returns the previous one.

    The observer is called as ``observer(kernel, compiled)`` after each zerojit launch (``kernel``
    the zerojit kernel, ``compiled`` Triton's ``CompiledKernel`` it launched). An observer that is
    a bound method of an object whose attribute :data:`RETURNS_LAUNCH_COUNTERS` is true (the
    monitor's) may return a *launch counter*: a callable of no arguments that does exactly what
    another call of the observer for ``compiled`` would do (count one launch of it, nothing else),
    best a C function such as ``itertools.count().__next__``. A fast-path launch then calls that
    counter instead of the observer, until the observer changes or :func:`reset_launch_counters`
    is called. Any other observer's return value is ignored.
    """
    global _launch_observer
    counting = bool(getattr(getattr(observer, "__self__", None), RETURNS_LAUNCH_COUNTERS, False))
    with _COUNTER_LOCK:
        previous, _launch_observer = _launch_observer, observer
        _forget_counters(counting)
    return previous


def reset_launch_counters() -> None:
    """Forget every launch counter the observer returned: the next launch of each kernel calls the
    observer again. For an observer whose counts or chain changed (a reset, a mode switch)."""
    with _COUNTER_LOCK:
        _forget_counters(_counter_epoch is not None)


def _forget_counters(counting: bool) -> None:
    global _counter_epoch
    _counter_epoch = object() if counting else None  # first: an epoch read before this holds no counter
    for entry in list(_COUNTED):
        entry.counter = None
    _COUNTED.clear()


def _keep_counter(entry: Any, counter: Any, epoch: object) -> None:
    """Keep ``counter`` (the observer's answer for a launch of ``entry``) on the fast-path entry,
    unless the observer changed or was reset since ``epoch`` was read (before that call)."""
    with _COUNTER_LOCK:
        if epoch is _counter_epoch and callable(counter):
            entry.counter = counter
            _COUNTED.add(entry)


def _observe_fast(kernel: Any, entry: Any) -> None:
    """Report a fast-path launch of ``entry`` (a :mod:`zerojit._launch` table entry) to the
    observer: by the launch counter it gave for that entry, else by a call (keeping the counter it
    returns). The launch entry inlines this. (No observer, no counter: set_launch_observer.)"""
    observer = _launch_observer
    if observer is None:
        return
    count = entry.counter
    if count is not None:
        count()
        return
    epoch = _counter_epoch
    count = observer(kernel, entry.compiled)
    if count is not None and epoch is not None:
        _keep_counter(entry, count, epoch)


def launch_observer() -> Callable[[Any, Any], None] | None:
    """The process's launch observer (None when no monitor is installed), for launch paths outside
    this module that report hits the same way (:func:`zerojit.recording.count_raw_launches`)."""
    return _launch_observer


class JitKernel(Generic[KeyT]):
    """A kernel that describes its own compile-key space.

    Subclasses define a nested frozen dataclass ``CompileKey`` and the methods below. ``name``
    defaults to the class name. Registration (``register_warmup``) is a no-op outside an active
    :class:`zerojit.registry.JitWarmupRegistry`.
    """

    name: ClassVar[str]
    CompileKey: ClassVar[type]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__
        key_cls = getattr(cls, "CompileKey", None)
        problem = None if key_cls is None else lint.check_compile_key(cls.__name__, key_cls)
        if problem:
            raise KernelDefinitionError(problem)

    def dispatch(self, **inputs: Any) -> KeyT:
        """The compile key for these inputs.

        Raises:
            NotImplementedError: the class defines none (the message names it).
        """
        raise NotImplementedError(f"{type(self).__name__} defines no dispatch(): a kernel class maps a launch's "
                                  "inputs to its CompileKey there (docs/migrating-a-kernel.md)")

    def get_warmup_keys(self, *args: Any, **request: Any) -> list[KeyT]:
        """Every compile key this kernel can need for a configuration / registration request.

        Raises:
            NotImplementedError: the class defines none (the message names it; a warm-up reports
                it as the kernel's failure to list its keys).
        """
        raise NotImplementedError(f"{type(self).__name__} defines no get_warmup_keys(): a kernel class lists "
                                  "the CompileKeys a registration request needs there (docs/migrating-a-kernel.md)")

    def compile(self, key: KeyT) -> CompiledVariant:
        """Compile (and on a GPU load) the variant of ``key``."""
        raise NotImplementedError

    def finish_warmup(self, keys: list[KeyT]) -> None:
        """Called once by the warm-up after every key compiled (``keys``: this kernel's keys);
        the default does nothing (a wrapped Triton kernel fills its tuning table here)."""

    def register_warmup(self, **request: Any) -> None:
        """Ask the active registration sink (a :class:`zerojit.registry.JitWarmupRegistry` inside its
        ``activate()`` block) to warm this kernel for ``request``; a no-op when none is active."""
        context.register(self, **request)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kernel {self.name!r}>"


def kernel_launcher(fn: Callable | None = None, *, host_only: tuple[str, ...] = ()) -> Callable:
    """Turn a declarative ``__call__(self, *, inputs...) -> LaunchSpec`` into the launch entry.

    Args:
        fn: the method; its parameters after ``self`` must be keyword-only.
        host_only: inputs the method consumes itself, which map to no kernel parameter.

    The wrapped call maps inputs to kernel parameters (table built at class creation), adds
    ``LaunchSpec.kwargs`` and launches (real, dry, interpreted or warm-up: see the module doc).
    It returns ``LaunchSpec.returns``. The launch entry is generated with the method's own
    signature, so inputs bind once, straight into the method call (no ``**kwargs`` dict).
    """

    def decorate(method: Callable) -> Callable:
        params = list(inspect.signature(method).parameters.values())[1:]
        for p in params:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise KernelDefinitionError(
                    f"{method.__qualname__}: input {p.name!r} must be keyword-only (put '*' before the inputs)"
                )
        inputs = tuple((p.name, p.default if p.default is not inspect.Parameter.empty else _MISSING) for p in params)
        problem = lint.check_host_only(method.__qualname__, host_only, (n for n, _ in inputs))
        if problem:
            raise KernelDefinitionError(problem)
        reserved = [n for n, _ in inputs if n == "self" or n.startswith("_zj_")]
        if reserved:
            raise KernelDefinitionError(f"{method.__qualname__}: input names {reserved} are reserved")

        launch = functools.update_wrapper(_make_entry(method, inputs), method)
        launch._zerojit_inputs = inputs
        launch._zerojit_host_only = tuple(host_only)
        launch._zerojit_method = method
        return launch

    return decorate(fn) if fn is not None else decorate


_MISSING = object()


def _make_entry(method: Callable, inputs: tuple[tuple[str, Any], ...]) -> Callable:
    """Generate the launch entry: the method's own signature, the common launches inline.

    For ``def __call__(self, *, a, b=2)`` it is, in outline::

        def __call__(self, *, a, b=2):
            spec = method(self, a, b)  # the method with its inputs made positional (_positional)
            state = <the class's LaunchState>; <its autotune/heuristics wrapping applied, if any>
            if 0 in spec.grid: return spec.returns
            if <the driver of the last launch, no warm-up in progress>:
                if <fast path on> and (entry := state.fast_call(dry, driver, spec.grid, spec.kwargs, a, b)):
                    <entry.counter() if the observer gave one, else observer(self, entry.compiled)>
                    return spec.returns
                <the monitor's hooks still in Triton's slots, else repaired: this launch may compile>
                compiled = state.run_call(spec.grid, dry, spec.kwargs, a, b)
                <observer>(self, compiled); return spec.returns
            return self._zerojit_launch(spec, (a, b), plan)  # warm-up, another driver than the last

    ``state.run_call`` / ``fast_call`` are the plan used last (:class:`~zerojit._launch.LaunchState`).
    The inputs bind once, into locals, and reach the plan without a dict or a tuple.
    """
    body = _positional(method, inputs)
    namespace: dict[str, Any] = {
        "_zj_method": method if body is None else body, "_zj_sink": _WARMUP_SINK, "_zj_driver": _triton_driver,
        "_zj_kmod": sys.modules[__name__], **_tc.KEY_KNOBS_NAMESPACE,
    }
    sig = []
    for i, (name, default) in enumerate(inputs):
        if default is _MISSING:
            sig.append(name)
        else:
            namespace[f"_zj_d{i}"] = default
            sig.append(f"{name}=_zj_d{i}")
    head = f"def __call__(self, *, {', '.join(sig)}):" if inputs else "def __call__(self):"
    call = "".join(f", {n}" for n, _ in inputs) if body is not None else "".join(f", {n}={n}" for n, _ in inputs)
    values = "".join(f", {n}" for n, _ in inputs)
    as_tuple = f"({values[2:]}{',' if len(inputs) == 1 else ''})"
    src = f"""{head}
    _zj_spec = _zj_method(self{call})
    _zj_state = self._launch_state
    if _zj_state.wrapping is not None:
        _zj_spec = self._wrapped_spec(_zj_spec, {as_tuple})
    _zj_grid = _zj_spec.grid
    if 0 in _zj_grid:  # launches (and compiles) nothing, in warm-up as at run time
        _zj_state.plan(tuple(_zj_spec.kwargs))  # its kwargs names still checked
        return _zj_spec.returns
    _zj_drv = _zj_driver._active
    _zj_known = _zj_kmod._last_driver
    if _zj_known[0] is _zj_drv and _zj_sink.get() is None:
        _zj_warmup = _zj_known[1]
        if self.fast_path:
            _zj_entry = _zj_state.fast_call(_zj_warmup, _zj_drv, _zj_grid, _zj_spec.kwargs{values})
            if _zj_entry is not None:
                _zj_observer = _zj_kmod._launch_observer
                if _zj_observer is not None:  # (_observe_fast, inline)
                    _zj_count = _zj_entry.counter
                    if _zj_count is not None:
                        _zj_count()  # the observer's own count of this launch
                    else:
                        _zj_epoch = _zj_kmod._counter_epoch
                        _zj_count = _zj_observer(self, _zj_entry.compiled)
                        if _zj_count is not None and _zj_epoch is not None:
                            _zj_kmod._keep_counter(_zj_entry, _zj_count, _zj_epoch)
                return _zj_spec.returns
        _zj_pins = _zj_kmod._hook_pins
        if _zj_pins is not None and ({_tc.CACHE_HOOK_SOURCE} is not _zj_pins[0] or {_tc.LISTENER_SOURCE} is not _zj_pins[1]):
            _zj_pins[2]()
        _zj_compiled = _zj_state.run_call(_zj_grid, _zj_warmup, _zj_spec.kwargs{values})
        _zj_observer = _zj_kmod._launch_observer
        if _zj_observer is not None:
            _zj_observer(self, _zj_compiled)
        return _zj_spec.returns
    _zj_names = tuple(_zj_spec.kwargs)
    return self._zerojit_launch(_zj_spec, {as_tuple}, _zj_state.plans.get(_zj_names) or _zj_state.plan(_zj_names))
"""
    exec(compile(src, f"<zerojit launch entry of {method.__qualname__}>", "exec"), namespace)
    entry = namespace["__call__"]
    entry._zerojit_source = src
    return entry


def _positional(method: Callable, inputs: tuple[tuple[str, Any], ...]) -> Callable | None:
    """``method`` with its keyword-only inputs made positional (same code, same order of locals),
    which the entry calls with the values it already bound (binding keywords a second time
    costs more than the rest of the call); None where its code is not the plain
    ``(self, *, inputs...)`` (e.g. a decorator's ``*args, **kwargs``): the entry passes keywords."""
    code = getattr(method, "__code__", None)
    names = tuple(n for n, _ in inputs)
    if (code is None or code.co_argcount != 1 or code.co_posonlyargcount or code.co_kwonlyargcount != len(names)
            or code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
            or code.co_varnames[1:1 + len(names)] != names):
        return None
    clone = types.FunctionType(code.replace(co_argcount=1 + len(names), co_kwonlyargcount=0), method.__globals__,
                               method.__name__, None, method.__closure__)
    clone.__qualname__ = method.__qualname__
    return clone


# What Triton's two compile-hook slots must hold while a JIT monitor is installed, and what to call
# when they do not: (jit_cache_hook, compile listener, repair) or None. The normal path checks it
# before Triton runs (a launch that may compile); the fast path cannot compile and does not.
_hook_pins: tuple[Any, Any, Callable[[], None]] | None = None


def set_hook_pins(pins: tuple[Any, Any, Callable[[], None]] | None) -> None:
    """Set what the launch path checks Triton's ``jit_cache_hook`` and compile listener against
    before a launch that may compile (the monitor's links), and the repair to call when another
    party wrote past them: ``(cache_hook, listener, repair)``, or None to check nothing."""
    global _hook_pins
    _hook_pins = pins


def check_hook_pins() -> None:
    """The entry's check, for launch paths outside it that may compile (:func:`zerojit.recording`)."""
    pins = _hook_pins
    if pins is not None and (_tc.get_cache_hook() is not pins[0] or _tc.get_compile_listener() is not pins[1]):
        pins[2]()


class TritonJitKernel(JitKernel[KeyT]):
    """A :class:`JitKernel` over one ``@triton.jit`` function, launched through ``__call__``.

    Subclasses set ``kernel`` (the ``triton.jit`` function, or the interpreter's function under
    ``TRITON_INTERPRET=1``), define ``CompileKey``, ``dispatch``, ``get_warmup_keys``,
    ``warmup_inputs(key) -> dict`` (inputs in the key's specialization classes: WarmupTensors and
    :func:`zerojit.specialization.scalar_rep` values) and a ``@kernel_launcher __call__``.

    ``kernel`` may also be a ``@triton.autotune`` / ``@triton.heuristics`` object, nested in any
    order (:mod:`zerojit.autotune`): ``kernel`` then becomes the ``triton.jit`` function underneath
    and ``wrapped`` the object given; heuristics and the autotune config join every launch; an
    autotuner with several configs chooses by the tuning table, then by ``tuning`` (a
    :class:`~zerojit.autotune.TuningPolicy`; default ``TuningPolicy()``: the nearest tuned key,
    else the first surviving config), and expands each warm-up key into one
    :class:`~zerojit.autotune.TunedKey` per surviving config (:meth:`select_configs` can narrow
    them); :meth:`tuning_inputs` declares the tuning keys a GPU warm-up benchmarks.

    ``generic_keep`` names int parameters whose equal-to-one class the kernel's generic variants
    keep (:mod:`zerojit.generic`).

    Raises (at class creation): :class:`KernelDefinitionError` when an input maps to no kernel
    parameter and is not ``host_only``, or ``generic_keep`` names no plain parameter; for a wrapped kernel, when a heuristic or an autotune
    config names no kernel parameter, there are two autotuners, or ``tuning`` is not a
    :class:`~zerojit.autotune.TuningPolicy` (or None) or names no single config.
    """

    kernel: ClassVar[Any] = None
    #: The Autotuner/Heuristics object ``kernel`` was set to (None for a plain ``triton.jit``).
    wrapped: ClassVar[Any] = None
    #: What to launch for a tuning key never tuned (None: ``TuningPolicy()``, see zerojit.autotune).
    tuning: ClassVar[_at.TuningPolicy | None] = None
    _wrapping: ClassVar[_at.Wrapping | None] = None
    _tuning_table: ClassVar[_at.TuningTable] = _at.TuningTable()
    _untuned_choice: ClassVar[dict[tuple, int]] = {}
    _policy_config: ClassVar[int | None] = None  # the index the tuning policy's config names
    # the configs (indices) some warmed key compiled, once a warm-up finished (None: none finished)
    _compiled_configs: ClassVar[frozenset[int] | None] = None
    # the constexpr parameters a heuristic sets (what tells a launch's variants apart beyond its config)
    # and the (config, those values) pairs warmed keys compiled (read only while _compiled_configs is not None)
    _variant_names: ClassVar[tuple[str, ...]] = ()
    _compiled_variants: ClassVar[frozenset[tuple[int, tuple]]] = frozenset()
    # the configs compiled for every variant warm-up saw: a new tuning key that chooses one needs no variant check
    _universal_configs: ClassVar[frozenset[int]] = frozenset()
    #: Launch warmed variants directly, skipping Triton's binder (see :meth:`select_variant`).
    #: Set it on the class (or the instance) before warm-up: warm-up launches record the variants.
    fast_path: ClassVar[bool] = False
    #: Names of int parameters whose equal-to-one class the kernel's generic variants keep
    #: (:mod:`zerojit.generic`: a stride of 1 that vectorizes); checked at class creation.
    generic_keep: ClassVar[tuple[str, ...]] = ()
    _arg_table: ClassVar[tuple[tuple[str, str, Any], ...]] = ()
    _launch_state: ClassVar[LaunchState | None] = None
    _kernel_params: ClassVar[frozenset[str]] = frozenset()
    _kwarg_names: ClassVar[dict[str, str]]

    def __init_subclass__(cls, **kw: Any) -> None:
        named = "name" in cls.__dict__
        super().__init_subclass__(**kw)
        if cls.__dict__.get("kernel") is None and "__call__" not in cls.__dict__:
            return
        if cls.kernel is None:
            raise KernelDefinitionError(f"{cls.__name__} must set the class attribute 'kernel' to a @triton.jit function")
        if "kernel" in cls.__dict__:
            wrapping = _at.unwrap(cls.__dict__["kernel"])
            cls._wrapping, cls.wrapped = wrapping, cls.__dict__["kernel"] if wrapping is not None else None
            if wrapping is not None:
                cls.kernel = wrapping.base
        if not _tc.is_kernel_function(cls.kernel):
            held = f"{type(cls.kernel).__name__} {cls.kernel!r:.60}"
            raise KernelDefinitionError(f"{cls.__name__}.kernel is {held}: set it to a @triton.jit function (or a "
                                        "triton.autotune / triton.heuristics of one)")
        launch = cls.__dict__.get("__call__", getattr(cls, "__call__", None))
        if not hasattr(launch, "_zerojit_inputs"):
            raise KernelDefinitionError(f"{cls.__name__}.__call__ must be decorated with @kernel_launcher")
        signature = inspect.signature(cls.kernel.fn).parameters
        variadic = [p for p in signature.values() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if variadic:  # inputs map to parameters by name; Triton 3.9 refuses **kwargs, 3.6/3.7 bind no *args
            raise KernelDefinitionError(
                f"{cls.__name__}: kernel {cls.kernel.fn.__name__} has a variadic parameter ({variadic[0]}); a zerojit "
                "kernel's parameters are named, one each (keyword-only ones are fine)")
        keyword_only = [p.name for p in signature.values() if p.kind is p.KEYWORD_ONLY]
        if keyword_only and not _tc.KEYWORD_ONLY_PARAMETERS:
            raise KernelDefinitionError(
                f"{cls.__name__}: kernel {cls.kernel.fn.__name__} has keyword-only parameters {keyword_only}, which "
                f"Triton {_tc.TRITON_VERSION} cannot compile (Triton 3.9 can): make them positional")
        problem = (lint.check_specialization_hints(cls.__name__, cls.kernel)
                   or lint.check_generic_keep(cls.__name__, cls.kernel, cls.generic_keep))
        if problem:
            raise KernelDefinitionError(problem)
        kparams = tuple(signature)
        cls._kernel_params = frozenset(kparams)
        table = []
        for name, default in launch._zerojit_inputs:
            if name in launch._zerojit_host_only:
                continue
            param = _match_param(name, cls._kernel_params)
            if param is None:
                raise KernelDefinitionError(
                    f"{cls.__name__}: input {name!r} maps to no parameter of kernel "
                    f"{cls.kernel.fn.__name__}({', '.join(kparams)}); rename it or list it in host_only"
                )
            table.append((name, param, None if default is _MISSING else default))
        cls._arg_table = tuple(table)
        cls._kwarg_names = {}
        if cls._wrapping is not None:
            cls._check_wrapping()
        cls._launch_state = LaunchState(cls, launch._zerojit_inputs, cls._arg_table, KernelDefinitionError)
        lint.record_dispatch(cls)
        if not named:  # "_foo_kernel" -> "foo": the name users know the kernel by
            cls.name = cls.kernel.fn.__name__.strip("_").removesuffix("_kernel")

    @classmethod
    def _check_wrapping(cls) -> None:
        wrapping = cls._wrapping
        problems = wrapping.problems(cls._kernel_params)
        if problems:
            raise KernelDefinitionError(f"{cls.__name__}: kernel {cls.kernel.fn.__name__}: {'; '.join(problems)}")
        cls._tuning_table, cls._untuned_choice, cls._compiled_configs = _at.TuningTable(), {}, None
        cls._compiled_variants = cls._universal_configs = frozenset()
        if not wrapping.tunes:
            return
        constexprs = _tc.constexpr_parameters(wrapping.base)
        cls._variant_names = tuple(dict.fromkeys(
            n for kind, obj in wrapping.layers if kind == "heuristics" for n in obj if n in constexprs))
        if cls.tuning is None:  # nothing declared: the default policy
            cls.tuning = _at.TuningPolicy()
        if not isinstance(cls.tuning, _at.TuningPolicy):
            raise KernelDefinitionError(
                f"{cls.__name__}: kernel {cls.kernel.fn.__name__}: tuning = {cls.tuning!r} is no TuningPolicy: "
                "leave it out (the default, TuningPolicy('nearest')) or set e.g. "
                "TuningPolicy('default', config={...}) or TuningPolicy('error')")
        try:
            cls._policy_config = cls.tuning.config_index(wrapping.configs)
        except ValueError as e:
            raise KernelDefinitionError(f"{cls.__name__}: tuning policy {cls.tuning}: {e}") from None
        keys = cls.get_warmup_keys
        if not getattr(keys, "_zerojit_tuned", False):
            @functools.wraps(keys)
            def get_warmup_keys(self, *args: Any, **request: Any) -> list:
                return self.tuned_keys(keys(self, *args, **request))

            get_warmup_keys._zerojit_tuned = True
            cls.get_warmup_keys = get_warmup_keys

    def _named_args(self, spec: LaunchSpec, inputs: tuple) -> dict[str, Any]:
        """Every argument of a launch by parameter name, in parameter order, launch options last."""
        state = self._launch_state
        given = {param: inputs[state.input_index[name]] for name, param, _ in self._arg_table}
        for k, v in spec.kwargs.items():
            given[self._resolve_kwarg(k)] = v
        named = {p: given.pop(p) for p in state.param_names if p in given}
        named.update(given)
        return named

    def _choose_config(self, tuning_key: tuple, survivors: Callable[[], list[int]] | None = None,
                       call: dict[str, Any] | None = None) -> int:
        """The autotune config (index) a launch at ``tuning_key`` uses: forced inside a warm-up of
        a :class:`~zerojit.autotune.TunedKey`, else the tuning table's, else the one chosen for
        this tuning key before, else the policy's (:class:`~zerojit.autotune.TuningPolicy`;
        ``survivors()``: the configs that survive the autotuner's pruning for this launch, which
        ``nearest`` chooses among; ``call``: the arguments the autotuner sees, the heuristics above
        it applied, from which the policy learns the launch's variant, see :meth:`_choose_untuned`).
        A policy's choice is remembered and put in the autotuner's own cache too.

        Raises: zerojit.autotune.TuningError: the policy has no config for this tuning key."""
        forced = _FORCED_CONFIG.get()
        if forced is not None:
            return forced
        cls = type(self)
        found = cls._tuning_table.get(tuning_key)
        if found is None:
            found = cls._untuned_choice.get(tuning_key)
        if found is not None:
            return found
        return self._choose_untuned(tuning_key, survivors, call=call)

    def _choose_untuned(self, tuning_key: tuple, survivors: Callable[[], list[int]] | None,
                        record: bool = True, call: dict[str, Any] | None = None) -> int:
        """The policy's choice at a tuning key the table lacks (once per tuning key): an index
        lookup and, where the autotuner prunes, one evaluation of its pruning. ``record=False``
        (the warm-up's priming, :mod:`zerojit.launch_priming`): the choice is made, not kept.

        The launch's *variant*: the values the kernel's heuristics set for its constexpr
        parameters under each config (:meth:`_variant`, from ``call``: the arguments the
        autotuner sees, the heuristics above it applied). When warm-up compiled some surviving
        config for this variant, ``nearest`` and the first surviving config choose among those
        only (a config compiled only under other heuristic values, e.g. ``EVEN`` true, would
        compile at run time for this launch); when it compiled none, or without heuristics on
        constexprs, among all the survivors. Cost: nothing when the nearest tuned key's config
        was compiled for every variant warm-up saw (``tuned_scale``: every config); else a tuple
        and a set lookup per survivor, and with heuristics below the autotuner those heuristics
        once per survivor."""
        cls = type(self)
        policy = cls.tuning
        table = cls._tuning_table
        wrapping = cls._wrapping
        alive: list[int] | None = None
        mine: list[int] | None = None
        variants = call is not None and cls._variant_names and cls._compiled_configs is not None

        def surviving() -> list[int]:  # the pruning evaluated once, whoever asks first
            nonlocal alive
            if alive is None:
                alive = survivors() if survivors is not None and wrapping.prunes else list(range(len(wrapping.configs)))
            return alive

        def candidates() -> list[int]:  # the survivors compiled for this launch's variant, else every survivor
            nonlocal mine
            if mine is None:
                mine = surviving()
                if variants:
                    compiled = cls._compiled_variants
                    if wrapping.below:  # heuristics below the autotuner: their values may follow the config
                        mine = [i for i in mine if (i, self._variant(call, i)) in compiled] or mine
                    else:  # one variant for every config
                        variant = self._variant(call)
                        mine = [i for i in mine if (i, variant) in compiled] or mine
            return mine

        found = None
        if policy.untuned == "nearest" and table:
            near = table.nearest(tuning_key, surviving if wrapping.prunes else None)
            # (a config compiled for every variant warm-up saw needs no check: the common case, no cost)
            if near is not None and variants and table[near] not in cls._universal_configs \
                    and table[near] not in candidates():
                near = table.nearest(tuning_key, candidates)  # its config compiled only for other heuristic values
            if near is not None:
                found = table[near]
        if found is None and policy.untuned != "error":
            found = cls._policy_config
        if found is None and policy.untuned == "nearest":
            found = self._first_surviving(candidates())
        if found is None:
            why = ("the autotuner's pruning keeps no config for this launch" if policy.untuned == "nearest"
                   else "the policy is 'error' (TuningPolicy('error'): every tuning key must be tuned)")
            raise _at.TuningError(
                f"{self.name}: tuning key {tuning_key} was never tuned and {why}: "
                f"tune it at warm-up (tuning_inputs) or put it in the tuning file ({len(table)} tuned)")
        if not record:
            return found
        cls._untuned_choice[tuning_key] = found
        # the autotuner's own run (the library's call path) now makes the same choice, unbenchmarked
        _tc.fill_autotuner_cache(cls._wrapping.tuner, tuning_key, cls._wrapping.configs[found])
        return found

    def _first_surviving(self, alive: list[int]) -> int | None:
        """The first config in the autotuner's order among ``alive`` (the survivors of pruning, in
        any order: a ``perf_model`` reorders them) that a warmed key compiled; the first of
        ``alive`` when none did or no warm-up finished (it compiles at run time, which the
        monitor reports); None when ``alive`` is empty."""
        compiled = type(self)._compiled_configs
        ordered = sorted(alive)
        return next((i for i in ordered if compiled is None or i in compiled), ordered[0] if ordered else None)

    def _variant(self, call: dict[str, Any], config: int | None = None) -> tuple:
        """The values the heuristics set for the kernel's constexpr parameters in a launch of
        ``call`` (the arguments the autotuner sees: the heuristics above it applied) under
        ``config``: the heuristics below the autotuner applied to ``call`` with the config's
        arguments, as :meth:`zerojit.autotune.Wrapping.resolve` applies them (``config`` None:
        there are none below, the values are the same under every config)."""
        if self._wrapping.below and config is not None:
            call = self._wrapping.apply_below(call, config)
        values = tuple(map(call.get, self._variant_names))
        try:
            hash(values)
        except TypeError:  # a constexpr value Python cannot hash: compared by its repr
            values = tuple(map(repr, values))
        return values

    def _wrapped_spec(self, spec: LaunchSpec, inputs: tuple, hooks: bool = True) -> LaunchSpec:
        """``spec`` with the wrapping applied: heuristics, the chosen config's ``all_kwargs`` (its
        ``pre_hook`` called when ``hooks``, except in a warm-up launch), the grid resolved if it
        is a callable."""
        named = self._named_args(spec, inputs)
        call, config, hook_args = self._wrapping.resolve(named, self._choose_config, spec.grid)
        kwargs = dict(spec.kwargs)
        for k, v in call.items():
            if k not in named:
                kwargs[k] = v
            elif v is not named[k]:  # a heuristic replaced a value the launch passed (Triton does too)
                aliases = {self._resolve_kwarg(a): a for a in spec.kwargs}
                if k not in aliases:
                    raise KernelDefinitionError(f"{self.name}: heuristic {k!r} replaces the launch input of that "
                                                "parameter; pass it in LaunchSpec.kwargs instead")
                kwargs[aliases[k]] = v
        grid = spec.grid(call) if callable(spec.grid) else spec.grid
        if hook_args is not None and hooks and _WARMUP_SINK.get() is None:
            _tc.config_pre_hook(config)(hook_args)
        return LaunchSpec(tuple(grid), kwargs, spec.returns)

    def select_configs(self, key: KeyT, configs: list[int]) -> list[int]:
        """The autotune configs (indices) warmed for ``key``, from those that survive the
        autotuner's pruning on ``key``'s warm-up inputs. Default: all of them; override to compile
        fewer (CI), keeping every config the tuning table and the policy can choose."""
        return configs

    def tuned_keys(self, keys: list) -> list:
        """``keys`` expanded to one :class:`~zerojit.autotune.TunedKey` per config that survives
        the autotuner's pruning (``Autotuner.prune_configs``) on each key's warm-up inputs, then
        :meth:`select_configs`, plus the ``tuning`` policy's config (what an untuned tuning key
        launches) where pruning dropped it. Keys of a kernel whose autotuner has one config are
        returned as is."""
        wrapping = self._wrapping
        if wrapping is None or not wrapping.tunes:
            return list(keys)
        out = []
        for key in keys:
            if isinstance(key, _at.TunedKey):
                out.append(key)
                continue
            named, grid = self._warmup_named(self.warmup_inputs(key))
            configs = self.select_configs(key, wrapping.surviving(named, grid))
            default = self._policy_config
            if default is not None and default not in configs:  # what an untuned key launches
                configs = [*configs, default]
            for i in configs:
                out.append(_at.TunedKey(key, i, tuple(_tc.config_arguments(wrapping.configs[i]).items())))
        return out

    def _warmup_named(self, inputs: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """A launch's arguments by name (before the wrapping) and its grid, launching nothing."""
        spec, values = self._declared_spec(inputs)
        return self._named_args(spec, values), spec.grid

    def tuning_inputs(self, key: KeyT) -> list[dict[str, Any]]:
        """Launch inputs, one dict per tuning key to benchmark at a GPU warm-up of ``key`` (real
        tensors on the GPU: the benchmark runs the kernel). Default: none (the tuning file and
        the policy decide)."""
        return []

    def tuning_header(self) -> dict[str, Any]:
        """The fields a tuning file of this kernel must carry here: ``kernel``, ``target``
        (``"cuda:90"``; ``"interpreter"`` under ``TRITON_INTERPRET=1``), ``triton`` (version), ``source_hash`` (Triton's ``cache_key`` of the
        ``triton.jit`` function) and, on a GPU, ``gpu`` (the device name)."""
        if _tc.interpreting():
            target = "interpreter"
        else:
            t = _tc.current_target()
            target = f"{t.backend}:{t.arch}"
        header = {"kernel": self.name, "target": target, "triton": _tc.TRITON_VERSION,
                  "source_hash": _tc.source_hash(self.kernel)}
        if target != "interpreter" and not isinstance(_tc.active_driver(), CompileOnlyDriver):
            import torch  # imported by the launch path already; here only to name the GPU

            header["gpu"] = torch.cuda.get_device_name()
        return header

    def tuning_file(self) -> str:
        """This kernel's tuning file (:func:`zerojit.autotune.tuning_file_path`)."""
        return _at.tuning_file_path(self.name, _tc.source_hash(self.kernel))

    def finish_warmup(self, keys: list) -> _at.TuningCoverage | None:
        """Fill the tuning table once every key compiled (called by the registry's warm-up);
        ``keys``: the keys that compiled (a config whose compile failed, e.g. out of resources,
        is not among them, and the first-surviving-config policy skips it).

        Reads the tuning file (:func:`zerojit.autotune.load_tuning_file`); where kernels run (a
        GPU, or the interpreter under ``TRITON_INTERPRET=1``) benchmarks
        each tuning key :meth:`tuning_inputs` declares that the table lacks, over the configs warmed
        for its key (and for every other warmed compile key of that tuning key: one choice serves
        them all) that survive pruning on those inputs (all warmed ones if none does; a config
        never warmed is never chosen, so another process with the file compiles nothing more),
        with the autotuner's own benchmark, and saves the file (atomically); then builds the
        table's nearest-key index (:class:`~zerojit.autotune.TuningTable`), puts the table in the
        autotuner's own cache and routes the library's own path through this kernel
        (:meth:`serve_library_path`), so calls through it do not benchmark either.

        Returns: for a kernel whose autotuner has several configs, what the warmed keys leave
        untuned (:class:`~zerojit.autotune.TuningCoverage`, for the warm-up report); else None.

        Raises:
            zerojit.autotune.TuningFileError: the file is for another target, GPU, Triton or
                kernel source, or is corrupted.
            zerojit.autotune.TuningError: the file chooses, for a tuning key of warmed compile keys
                (their warm-up inputs'), a config not compiled for every one of them (pruning or
                :meth:`select_configs` left it out for one); for another tuning key, a config no
                warmed key compiled.
        """
        wrapping = self._wrapping
        if wrapping is None:
            return None
        if not wrapping.tunes:
            self.serve_library_path()
            return None
        cls = type(self)
        compiled = frozenset(k.config for k in keys if isinstance(k, _at.TunedKey))
        cls._compiled_configs = compiled | (cls._compiled_configs or frozenset())  # earlier warm-ups' stay loaded
        per_key: dict[Any, set[int]] = {}  # each warmed compile key -> the configs compiled for it
        for k in keys:
            if isinstance(k, _at.TunedKey):
                per_key.setdefault(k.key, set()).add(k.config)
        # each tuning key of a warmed compile key (from its warm-up inputs) -> the configs compiled for every
        # compile key of that tuning key (a launch of any of them takes the one choice made for the tuning key)
        by_tuning_key: dict[tuple, set[int]] = {}
        variants = set(cls._compiled_variants)  # earlier warm-ups' stay loaded
        for base, configs in per_key.items():
            tk, call = wrapping.tuning_key(self._warmup_named(self.warmup_inputs(base))[0])
            by_tuning_key[tk] = by_tuning_key[tk] & configs if tk in by_tuning_key else set(configs)
            if cls._variant_names:
                variants.update((i, self._variant(call, i)) for i in configs)
        cls._compiled_variants = frozenset(variants)
        # with heuristics below the autotuner a config's variant follows the config: no shortcut there
        seen = {v for _, v in variants}
        cls._universal_configs = frozenset() if wrapping.below else frozenset(
            i for i in {i for i, _ in variants} if all((i, v) in variants for v in seen))
        header = self.tuning_header()
        path = self.tuning_file()
        timings: dict[tuple, float | None] = {}
        if os.path.exists(path):
            loaded = _at.load_tuning_file(path, header, wrapping.configs)
            # a config compiled for another compile key does not serve this tuning key's keys
            unwarmed = {tk: i for tk, i in loaded.items() if i not in by_tuning_key.get(tk, compiled)}
            if unwarmed:
                tk, i = next(iter(unwarmed.items()))
                mine = by_tuning_key.get(tk)
                which = ("no warmed key compiled" if mine is None else
                         f"is not compiled for every warmed compile key of that tuning key (configs compiled for all "
                         f"of them: {sorted(mine)}; the autotuner's pruning or select_configs left it out)")
                raise _at.TuningError(
                    f"{self.name}: tuning file {path} chooses config {i} ({wrapping.configs[i]}) for tuning key {tk}, "
                    f"which {which} ({len(unwarmed)} such entries): it would compile at run time; warm it "
                    "(select_configs, the key space) or tune again")
            cls._tuning_table.update(loaded)
            timings.update(dict.fromkeys(loaded))
        if _tc.interpreting() or not isinstance(_tc.active_driver(), CompileOnlyDriver):  # kernels run here
            tuned = False
            with context.allow_compiles():
                warmed: dict[Any, list[int]] = {}  # key -> the configs warmed for it: the only candidates
                for k in keys:
                    if isinstance(k, _at.TunedKey):
                        warmed.setdefault(k.key, []).append(k.config)
                for key, configs in warmed.items():
                    for inputs in self.tuning_inputs(key):
                        named, grid = self._warmup_named(inputs)
                        tuning_key, call = wrapping.tuning_key(named)
                        if tuning_key in cls._tuning_table:
                            continue
                        # one choice serves every compile key of this tuning key: only a config compiled for
                        # all of them (else the next warm-up refuses the file this one writes)
                        shared = by_tuning_key.get(tuning_key)
                        allowed = [i for i in configs if shared is None or i in shared] or configs
                        candidates = [i for i in wrapping.surviving(named, grid) if i in allowed] or allowed
                        ms = {i: _tc.bench_config(wrapping.tuner, call, wrapping.configs[i], grid) for i in candidates}
                        best = min(ms, key=ms.get)
                        cls._tuning_table[tuning_key] = best
                        timings[tuning_key] = ms[best]
                        tuned = True
            if tuned:
                _at.save_tuning_file(path, header, wrapping.configs,
                                     [(k, i, timings.get(k)) for k, i in cls._tuning_table.items()])
        cls._untuned_choice.clear()
        cls._tuning_table.index()  # built now, not at the first launch at an untuned tuning key
        for tuning_key, i in cls._tuning_table.items():
            _tc.fill_autotuner_cache(wrapping.tuner, tuning_key, wrapping.configs[i])
        self.serve_library_path()
        space = set(by_tuning_key)  # the key space's tuning keys
        return _at.TuningCoverage(len(space), sum(tk not in cls._tuning_table for tk in space),
                                  cls.tuning.serves(wrapping.configs, bool(cls._tuning_table)))

    def serve_library_path(self) -> None:
        """Route launches through the library's own path (``wrapped[grid](...)``, ``wrapped.run``)
        through this kernel: each is a hit for the monitor and the audit, like a zerojit launch
        (the launch observer gets the ``CompiledKernel`` the library's call launched; a
        ``warmup=True`` call launches nothing and is not counted), and the autotuner takes this
        kernel's choice at a tuning key its cache lacks (the tuning table, else the policy, among
        the configs that survive its pruning for that call) instead of benchmarking. The
        autotuner's key is computed as Triton does for the very call (keyword order included,
        :func:`zerojit.triton_compat.tuning_key_function`) and the choice made at zerojit's key
        for it (:meth:`zerojit.autotune.Wrapping.canonical_key`).

        Called at the end of warm-up (:meth:`finish_warmup`); the last zerojit kernel to warm the
        same library object is the one its path goes through. Calls through an inner layer
        (``wrapped.fn``) are not seen. Cost per library launch: one call frame and, with an
        autotuner, Triton's key computed once more (a few microseconds).

        Raises (at such a call): zerojit.autotune.TuningError where the policy is ``error`` and
        the tuning key was never tuned, as at a zerojit launch."""
        wrapping = self._wrapping
        if wrapping is None:
            return
        outer = type(self).wrapped
        tuner = wrapping.tuner if wrapping.tunes else None
        if tuner is not None:
            _tc.wrap_run(tuner, _library_run(self, wrapping, tuner, observe=outer is tuner))
        if outer is not tuner:
            _tc.wrap_run(outer, _library_run(self, wrapping, None, observe=True))

    @classmethod
    def _resolve_kwarg(cls, name: str) -> str:
        try:
            return cls._kwarg_names[name]
        except KeyError:
            param = name if name in LAUNCH_OPTIONS or name in _tc.CONFIG_OPTIONS else _match_param(name, cls._kernel_params)
            if param is None:
                raise KernelDefinitionError(
                    f"{cls.__name__}: LaunchSpec kwarg {name!r} maps to no parameter of {cls.kernel.fn.__name__} "
                    "and is no launch option"
                ) from None
            cls._kwarg_names[name] = param
            return param

    def warmup_inputs(self, key: KeyT) -> dict[str, Any]:
        """Launch inputs whose every argument lies in ``key``'s specialization class."""
        raise NotImplementedError

    def _zerojit_launch(self, spec: LaunchSpec, inputs: tuple, plan: Plan) -> Any:
        """The launch behind ``__call__`` where its inline paths do not apply (warm-up, first use).

        ``inputs`` are the launcher's inputs, in order; ``plan`` the class's :class:`Plan` for
        ``spec.kwargs``; the grid has no 0 (``__call__`` returned before). Normal path: Triton's
        ``JITFunction.run`` with the parameter values passed positionally (what Triton's binder
        would bind). Fast path (``fast_path``, a recorded warm-up variant whose classes the
        arguments provably share): the warmed kernel directly.
        """
        state = self._launch_state
        sk = spec.kwargs
        grid = spec.grid
        if _WARMUP_SINK.get() is not None:
            return self._warmup_launch(spec, plan.args(sk, *inputs))
        drv = _triton_driver._active
        dry = False
        if drv is None and not _tc.interpreting():  # the first launch: create the GPU driver, or say why not
            try:
                drv = _tc.active_driver()
            except RuntimeError as e:
                raise NoDeviceError(
                    f"{self.name}: cannot launch: no GPU is visible and no compile-only target is active "
                    f"(Triton: {e}). Launch on a GPU; for a dry launch with no GPU, launch inside "
                    "`with zerojit.compile_only.compile_only(\"cuda:90\"):` (after warming up there); to run "
                    "the kernel on CPU tensors, set TRITON_INTERPRET=1 before importing Triton") from None
        if drv is not None:
            dry = note_driver(drv)
            launcher = state.fast_launcher(plan) if self.fast_path else None
            if launcher is not None:
                entry = launcher(dry, drv, grid, sk, *inputs)
                if entry is not None:
                    _observe_fast(self, entry)
                    return spec.returns
        check_hook_pins()
        if dry:  # Triton's run asks driver.active for the device: the target's, under the machine view too
            with _tc.target_scope():
                compiled = plan.run(grid, dry, sk, *inputs)
        else:
            compiled = plan.run(grid, dry, sk, *inputs)
        observer = _launch_observer
        if observer is not None:
            observer(self, compiled)
        return spec.returns

    def _warmup_launch(self, spec: LaunchSpec, planned: tuple) -> Any:
        """A launch inside ``compile(key)``: compile (never execute), hand the result to the sink."""
        check = lint.WARMUP_CHECK.get()
        if check is not None:  # before Triton compiles: a key warmed by the wrong inputs costs no compile
            problem = lint.check_warmup_key(self.name, check.key, self._dispatched_key(check))
            if problem:
                raise KernelDefinitionError(problem)
        args, options, otoken = planned
        state = self._launch_state
        sink = _WARMUP_SINK.get()
        named = dict(zip(state.param_names, args), **options)
        sink.append((None, named))  # before Triton runs: a compile deferred to a worker leaves these
        positional, keywords = state.binder_args(args)
        compiled = self.kernel.run(*positional, grid=spec.grid, warmup=True, **keywords, **options)
        sink[-1] = (compiled, named)
        if self.fast_path:
            state.record(self, _tc.current_device(), compiled, args, options, otoken)
        return spec.returns

    def _dispatched_key(self, check: lint.WarmupKeyCheck) -> Any:
        """The key the warm-up launch being checked dispatched: the last key ``dispatch`` returned
        during it, or None when the launcher called no ``dispatch``."""
        return check.dispatched[-1] if check.dispatched else None

    def _declared_spec(self, inputs: Mapping[str, Any]) -> tuple[LaunchSpec, tuple]:
        """``__call__``'s body run on these inputs (its ``LaunchSpec``, nothing launched), and the
        inputs in ``__call__``'s order, defaults filled in (what the launch entry passes on)."""
        entry = type(self).__call__
        values = tuple(inputs[name] if name in inputs else default for name, default in entry._zerojit_inputs)
        return entry._zerojit_method(self, **inputs), values

    def select_variant(self, **inputs: Any) -> FastVariant | None:
        """The warmed variant the fast path would launch for these inputs, or None (normal path).

        Runs ``__call__``'s own checks and the very selection a launch runs (the same generated
        fast launcher, in its dry mode) on the current device, launching nothing; so it works
        under :func:`~zerojit.compile_only.compile_only`. None also when ``fast_path`` is off, no
        warm-up recorded a variant, a warm-up is in progress, or the grid has a 0.
        """
        spec, values = self._declared_spec(inputs)
        if self._wrapping is not None:
            spec = self._wrapped_spec(spec, values, hooks=False)  # launches nothing: no pre_hook
        state = self._launch_state
        sk = spec.kwargs
        plan = state.plan(tuple(sk))
        drv = _triton_driver._active
        if (0 in spec.grid or state.fast is None or drv is None or not self.fast_path
                or _WARMUP_SINK.get() is not None):
            return None
        found = state.fast_launcher(plan)(SELECT, drv, spec.grid, sk, *values)
        return None if found is None else found.variant

    def fast_variants(self, device: Any = None) -> tuple[FastVariant, ...]:
        """The variants the fast path can launch (on ``device``, or on every device), warm-up order."""
        fast = self._launch_state.fast if self._launch_state is not None else None
        return () if fast is None else fast.variants(device)

    def compile(self, key: KeyT) -> CompiledVariant:
        """Compile ``key`` by a fake launch through ``__call__``; on a GPU also load it.

        Raises:
            KernelDefinitionError: ``warmup_inputs(key)`` made ``__call__`` launch nothing, or more
                than once, or dispatch another key than ``key`` (naming the fields that differ).
            Exception: whatever Triton's compiler raised for this key.
        """
        if _tc.interpreting():
            raise RuntimeError(f"{self.name}: nothing compiles under TRITON_INTERPRET=1")
        device = _tc.current_device()
        with _DEVICE_CACHE_LOCK:
            _tc.device_cache(self.kernel, device)
        sink: list = []
        base = key.key if isinstance(key, _at.TunedKey) else key  # an autotune config's key: its compile key
        inputs = self.warmup_inputs(base)
        check = lint.WARMUP_CHECK.set(lint.WarmupKeyCheck(base, inputs))
        token = _WARMUP_SINK.set(sink)
        forced = _FORCED_CONFIG.set(key.config if isinstance(key, _at.TunedKey) else None)
        try:
            self(**inputs)
        finally:
            _FORCED_CONFIG.reset(forced)
            _WARMUP_SINK.reset(token)
            lint.WARMUP_CHECK.reset(check)
        if len(sink) != 1:
            raise KernelDefinitionError(
                f"{self.name}: warmup_inputs({key}) made __call__ launch {len(sink)} times; it must launch once "
                "(a grid with a 0 launches nothing)"
            )
        compiled, args = sink[0]
        compiled = _tc.resolved(compiled)  # Triton's async compile mode hands back a future
        triton_key = _tc.find_in_process_key(self.kernel, compiled, device) or ""
        loaded = False
        if not isinstance(_tc.active_driver(), CompileOnlyDriver):
            _tc.load_compiled(compiled)  # module, function and launcher now, not at the first launch
            loaded = True
        _, specialization, _ = bind(self.kernel, **args)
        return CompiledVariant(
            kernel=self.name,
            key=key,
            triton_key=triton_key,
            specialization=spec_classes(self.kernel, specialization),
            param_names=tuple(p.name for p in self.kernel.params),
            loaded=loaded,
            compiled=compiled,
        )


def _library_run(kernel: TritonJitKernel, wrapping: _at.Wrapping, tuner: Any,
                 observe: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``run`` of one layer of a library object after warm-up (see
    :meth:`TritonJitKernel.serve_library_path`): with ``tuner``, the autotuner's choice from
    ``kernel``; with ``observe``, the launch reported to the launch observer."""
    configs = wrapping.configs
    names = _tc.layer_arg_names(tuner) if tuner is not None else ()  # what Autotuner.run binds args to
    triton_key = _tc.tuning_key_function(tuner) if tuner is not None else None

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if tuner is not None:
                nargs = dict(zip(names, args))
                key = triton_key(nargs, kwargs)
                if not _tc.autotuner_cached(tuner, key):
                    i = kernel._choose_config(wrapping.canonical_key(nargs, kwargs),
                                              lambda: wrapping.survivors(nargs, kwargs), {**nargs, **kwargs})
                    _tc.fill_autotuner_cache(tuner, key, configs[i])
            if observe:
                check_hook_pins()  # the monitor still in Triton's slots before a launch that may compile
            compiled = original(*args, **kwargs)
            if observe and compiled is not None and not kwargs.get("warmup"):
                observer = _launch_observer
                if observer is not None and not context.in_warmup():
                    observer(kernel, compiled)
            return compiled

        return run

    return make


def _match_param(name: str, params: frozenset[str]) -> str | None:
    if name in params:
        return name
    if f"{name}_ptr" in params:
        return f"{name}_ptr"
    return None
