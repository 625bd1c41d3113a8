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
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Generic, Hashable, Mapping, TypeVar

from triton.runtime.driver import driver as _triton_driver

from . import registry as _registry
from .compile_only import CompileOnlyDriver
from .loading import load_compiled
from .specialization import LAUNCH_OPTIONS, SpecClass

__all__ = [
    "KernelDefinitionError",
    "KernelInputError",
    "LaunchSpec",
    "CompiledVariant",
    "JitKernel",
    "TritonJitKernel",
    "kernel_launcher",
    "set_launch_observer",
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


@dataclass(frozen=True)
class LaunchSpec:
    """What a declarative ``__call__`` returns.

    Attributes:
        grid: the launch grid, from the live counts (never a buffer's capacity). A grid with a 0
            launches nothing.
        kwargs: kernel arguments beyond the mapped inputs (outputs, constexprs, derived ints,
            launch options such as ``num_warps``), named like inputs (``out`` -> ``out_ptr``).
        returns: what the launch returns to the caller (the outputs).
    """

    grid: tuple[int, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    returns: Any = None


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
    """

    kernel: str
    key: Any
    triton_key: str
    specialization: tuple[SpecClass, ...]
    param_names: tuple[str, ...]
    loaded: bool
    compiled: Any = field(default=None, compare=False, repr=False)


# Set inside compile(key): the warm-up launch records its CompiledKernel here instead of launching.
_WARMUP_SINK: contextvars.ContextVar[list | None] = contextvars.ContextVar("zerojit_warmup_sink", default=None)
# Triton creates a kernel's per-device cache lazily (a defaultdict); two warm-up threads creating it
# at once would each get their own and one thread's compiled variants would be lost.
_DEVICE_CACHE_LOCK = threading.Lock()
# Called as observer(kernel, compiled_kernel) after each zerojit launch; the monitor counts hits.
_launch_observer: Callable[[Any, Any], None] | None = None


def set_launch_observer(observer: Callable[[Any, Any], None] | None) -> Callable[[Any, Any], None] | None:
    """Install the process's launch observer (the monitor); returns the previous one."""
    global _launch_observer
    previous, _launch_observer = _launch_observer, observer
    return previous


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
        if key_cls is not None and not (
            dataclasses.is_dataclass(key_cls) and key_cls.__dataclass_params__.frozen
        ):
            raise KernelDefinitionError(f"{cls.__name__}.CompileKey must be a frozen dataclass")

    def dispatch(self, **inputs: Any) -> KeyT:
        """The compile key for these inputs."""
        raise NotImplementedError

    def get_warmup_keys(self, *args: Any, **request: Any) -> list[KeyT]:
        """Every compile key this kernel can need for a configuration / registration request."""
        raise NotImplementedError

    def compile(self, key: KeyT) -> CompiledVariant:
        """Compile (and on a GPU load) the variant of ``key``."""
        raise NotImplementedError

    def register_warmup(self, **request: Any) -> None:
        """Ask the active registry to warm this kernel for ``request`` (no-op when none is active)."""
        _registry.register(self, **request)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} kernel {self.name!r}>"


def kernel_launcher(fn: Callable | None = None, *, host_only: tuple[str, ...] = ()) -> Callable:
    """Turn a declarative ``__call__(self, *, inputs...) -> LaunchSpec`` into the launch entry.

    Args:
        fn: the method; its parameters after ``self`` must be keyword-only.
        host_only: inputs the method consumes itself, which map to no kernel parameter.

    The wrapped call maps inputs to kernel parameters (table built at class creation), adds
    ``LaunchSpec.kwargs`` and launches (real, dry, interpreted or warm-up: see the module doc).
    It returns ``LaunchSpec.returns``.
    """

    def decorate(method: Callable) -> Callable:
        params = list(inspect.signature(method).parameters.values())[1:]
        for p in params:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise KernelDefinitionError(
                    f"{method.__qualname__}: input {p.name!r} must be keyword-only (put '*' before the inputs)"
                )
        inputs = tuple((p.name, p.default if p.default is not inspect.Parameter.empty else _MISSING) for p in params)
        unknown_host = set(host_only) - {n for n, _ in inputs}
        if unknown_host:
            raise KernelDefinitionError(f"{method.__qualname__}: host_only names unknown inputs {sorted(unknown_host)}")

        @functools.wraps(method)
        def launch(self, **kwargs: Any) -> Any:
            spec = method(self, **kwargs)
            args = {param: kwargs.get(name, default) for name, param, default in self._arg_table}
            resolve = self._resolve_kwarg
            for name, value in spec.kwargs.items():
                args[resolve(name)] = value
            return self._launch(spec, args)

        launch._zerojit_inputs = inputs
        launch._zerojit_host_only = tuple(host_only)
        return launch

    return decorate(fn) if fn is not None else decorate


_MISSING = object()


class TritonJitKernel(JitKernel[KeyT]):
    """A :class:`JitKernel` over one ``@triton.jit`` function, launched through ``__call__``.

    Subclasses set ``kernel`` (the ``triton.jit`` function, or the interpreter's function under
    ``TRITON_INTERPRET=1``), define ``CompileKey``, ``dispatch``, ``get_warmup_keys``,
    ``warmup_inputs(key) -> dict`` (inputs in the key's specialization classes: WarmupTensors and
    :func:`zerojit.specialization.scalar_rep` values) and a ``@kernel_launcher __call__``.

    Raises (at class creation): :class:`KernelDefinitionError` when an input maps to no kernel
    parameter and is not ``host_only``.
    """

    kernel: ClassVar[Any] = None
    _arg_table: ClassVar[tuple[tuple[str, str, Any], ...]] = ()
    _kernel_params: ClassVar[frozenset[str]] = frozenset()
    _kwarg_names: ClassVar[dict[str, str]]

    def __init_subclass__(cls, **kw: Any) -> None:
        named = "name" in cls.__dict__
        super().__init_subclass__(**kw)
        if cls.__dict__.get("kernel") is None and "__call__" not in cls.__dict__:
            return
        if cls.kernel is None:
            raise KernelDefinitionError(f"{cls.__name__} must set the class attribute 'kernel' to a @triton.jit function")
        launch = cls.__dict__.get("__call__", getattr(cls, "__call__", None))
        if not hasattr(launch, "_zerojit_inputs"):
            raise KernelDefinitionError(f"{cls.__name__}.__call__ must be decorated with @kernel_launcher")
        kparams = tuple(inspect.signature(cls.kernel.fn).parameters)
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
        if not named:  # "_foo_kernel" -> "foo": the name users know the kernel by
            cls.name = cls.kernel.fn.__name__.strip("_").removesuffix("_kernel")

    @classmethod
    def _resolve_kwarg(cls, name: str) -> str:
        try:
            return cls._kwarg_names[name]
        except KeyError:
            param = name if name in LAUNCH_OPTIONS else _match_param(name, cls._kernel_params)
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

    def _launch(self, spec: LaunchSpec, args: dict[str, Any]) -> Any:
        grid = spec.grid
        if 0 in grid:  # launches (and compiles) nothing, in warm-up as at run time
            return spec.returns
        sink = _WARMUP_SINK.get()
        if sink is not None:
            sink.append((self.kernel.run(grid=grid, warmup=True, **args), args))
            return spec.returns
        dry = isinstance(_triton_driver._active, CompileOnlyDriver)
        compiled = self.kernel.run(grid=grid, warmup=dry, **args)
        observer = _launch_observer
        if observer is not None:
            observer(self, compiled)
        return spec.returns

    def compile(self, key: KeyT) -> CompiledVariant:
        """Compile ``key`` by a fake launch through ``__call__``; on a GPU also load it.

        Raises:
            KernelDefinitionError: ``warmup_inputs(key)`` made ``__call__`` launch nothing, or more
                than once.
            Exception: whatever Triton's compiler raised for this key.
        """
        from triton import knobs

        if knobs.runtime.interpret:
            raise RuntimeError(f"{self.name}: nothing compiles under TRITON_INTERPRET=1")
        with _DEVICE_CACHE_LOCK:
            self.kernel.device_caches[_triton_driver.active.get_current_device()]
        sink: list = []
        token = _WARMUP_SINK.set(sink)
        try:
            self(**self.warmup_inputs(key))
        finally:
            _WARMUP_SINK.reset(token)
        if len(sink) != 1:
            raise KernelDefinitionError(
                f"{self.name}: warmup_inputs({key}) made __call__ launch {len(sink)} times; it must launch once "
                "(a grid with a 0 launches nothing)"
            )
        compiled, args = sink[0]
        if hasattr(compiled, "result"):  # Triton's async compile mode hands back a future
            compiled = compiled.result()
        device = _triton_driver.active.get_current_device()
        kernel_cache, _, _, _, binder = self.kernel.device_caches[device]
        triton_key = next((k for k, v in kernel_cache.items() if v is compiled), "")
        loaded = False
        if not isinstance(_triton_driver.active, CompileOnlyDriver):
            load_compiled(compiled)  # module, function and launcher now, not at the first launch
            loaded = True
        from .specialization import bind

        _, specialization, _ = bind(self.kernel, **args)
        return CompiledVariant(
            kernel=self.name,
            key=key,
            triton_key=triton_key,
            specialization=tuple(SpecClass.from_triton(e) for e in specialization),
            param_names=tuple(p.name for p in self.kernel.params),
            loaded=loaded,
            compiled=compiled,
        )


def _match_param(name: str, params: frozenset[str]) -> str | None:
    if name in params:
        return name
    if f"{name}_ptr" in params:
        return f"{name}_ptr"
    return None
