"""Every private Triton surface zerojit reaches, in one module.

zerojit works with Triton's binder, its in-process kernel caches, its compile hooks, its
launchers, its cache manager and the fields of its compiled kernels, none of which is a public
API. Everything that touches them goes through this module, so that a new Triton release is one
file's work. Public API (``triton.jit``, ``triton.cdiv``, ``triton.__version__``,
``triton.language``) is used where it is needed.

A few fields are read where they are used, on hot paths too: they are the same in 3.6-3.9 and
are Triton's kernel model rather than its machinery. ``JITFunction``'s ``fn``, ``params`` (each
``KernelParam``'s ``name``, ``is_constexpr``, ``annotation_type``, ``do_not_specialize`` and
``do_not_specialize_on_alignment``), ``debug``, ``pre_run_hooks``, ``used_global_vals`` and
``run``; ``CompiledKernel.function``; and :data:`DRIVER`'s active slot (:func:`peek_driver`).

Supported: Triton 3.6 to 3.9 (``triton>=3.6,<3.10``; importing this module with another Triton
raises :class:`UnsupportedTritonError`). Each difference is handled where its surface is, and
named after the release that brought it:

* 3.7: the compile hooks' ``_call_hook`` takes the target, and the specialization data they
  carry has a ``target`` field (zerojit reads only its ``options``); with a stages-inspection
  hook set, the in-process key gains a ``("custom_pipeline", hash)`` entry and the disk key the
  hook's key (:func:`bind`, :data:`KEY_KNOBS_SOURCE`, :func:`stages_hook_fingerprint`); NVIDIA's
  launcher is one shared C entry (``driver.active.utils.launch``): no per-signature launcher
  module is built with a C compiler (:data:`BUILDS_LAUNCHERS`); the async compile mode files its
  ``FutureKernel`` in the in-process cache (:func:`resolved`); ``get_group`` returns None for a
  group file that does not parse (3.6 raised).
* 3.8: ``CompiledKernel.__del__`` unloads its module (``kernel_unload_hook``), so a cache entry
  zerojit replaced or dropped would unload a module a launcher still uses: zerojit files variants
  with :func:`file_compiled` (never replacing one) and keeps every ``CompiledKernel`` it hands
  out referenced; ``FileCacheManager.get_group`` returns None when a listed file is missing (it
  dropped the file before); the dependency hash sorts constexpr globals, so ``cache_key`` values
  differ from 3.7's; the native specializer also imports gluon's ``nvidia.rubin`` module.
* 3.9: ``JITFunction.run`` adds ``fpsan_homomorphic_casts`` to the options that form the
  in-process key (:func:`bind`, :data:`KEY_KNOBS_SOURCE`); ``CompiledKernel`` has a
  ``_module_pid`` field (:func:`new_compiled_kernel`); ``AsyncCompileMode.submit`` takes a cleanup
  callback as a fourth argument (zerojit never calls it); the binder refuses a ``**kwargs``
  parameter (``triton.jit`` raises) and takes keyword-only parameters by keyword only
  (:func:`positional_parameters`; earlier code generators cannot compile keyword-only
  parameters at all: :data:`KEYWORD_ONLY_PARAMETERS`); the interpreter's loads and stores refuse
  a mask whose data is not bool, which ``block & (scalar < 0)`` is not there (int32, in every
  version; the compiler takes it): the MLA index kernel uses a select instead.
* Autotuner (``triton.runtime.autotuner``; :func:`prune_configs`, :func:`tuning_key`,
  :func:`bench_config`, :func:`add_bench_listener`): 3.9 checks the ``key``, ``reset_to_zero``
  and ``restore_value`` names at decoration, keeps at least one config under ``top_k``, runs no
  benchmark (calls no ``_bench``) when pruning leaves one config, and calls
  ``knobs.autotuning.listener`` after a benchmark (too late to block one: zerojit wraps
  ``Autotuner._bench`` on every version instead).
* 3.10 (not supported yet): FP fusion will be off by default (3.9 warns when
  ``TRITON_DEFAULT_FP_FUSION`` is unset, once per process: every compile worker too). It bites
  where the default is taken: the compile options a worker is sent and every disk-cache key hash
  ``enable_fp_fusion``, so float kernels compile to other code and may round differently (the MLA
  kernels are integer-only); ``TRITON_DEFAULT_FP_FUSION`` is a cache-invalidating variable, so a
  restore index or bundle made with it unset is refused (``cache_env``) where it is set, and the
  other way round.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import hashlib
import importlib
import inspect
import json
import os
import re
import sys
import sysconfig
import threading
from collections import namedtuple
from typing import Any, Callable, Iterator, Sequence

import triton
from triton import knobs
from triton._C.libtriton import get_cache_invalidating_env_vars
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.compiler.compiler import ASTSource, AsmDict, CompiledKernel, make_backend
from triton.runtime import cache as _tcache
from triton.runtime.driver import driver as DRIVER  # Triton's DriverConfig (see peek_driver)
from triton.runtime.autotuner import Autotuner as _Autotuner

from . import watchdog as _watchdog
from triton.runtime.autotuner import Config
from triton.runtime.autotuner import Heuristics as _Heuristics
from triton.runtime.jit import JITFunction, compute_cache_key

__all__ = [
    # versions and the facts generated code binds
    "UnsupportedTritonError", "TRITON_VERSION", "VERSION", "BUILDS_LAUNCHERS", "KEYWORD_ONLY_PARAMETERS", "DRIVER",
    "KEY_KNOBS_SOURCE", "KEY_KNOBS_NAMESPACE", "CACHE_HOOK_SOURCE", "LISTENER_SOURCE", "RUN_OPTIONS",
    "COMPILED_RUN_CALL", "DIRECT_LAUNCH_CALL", "DEVICE_POINTER_TEST", "HookChain",
    "JITFunction", "GPUTarget", "DriverBase", "AsmDict",
    # knobs and the driver
    "interpreting", "cache_dir", "set_cache_dir", "triton_home", "active_driver", "peek_driver", "set_driver",
    "gpu_driver_available", "TARGET_SCOPE", "target_scope", "patch_compile",
    "current_device", "current_target", "gpu_target", "cache_invalidating_env",
    # compile hooks
    "get_cache_hook", "set_cache_hook", "get_post_compile_hook", "set_post_compile_hook", "get_compile_listener",
    "set_compile_listener", "guard_hook_assignments", "add_load_hooks", "remove_load_hooks", "hook_jit_function", "hook_compile_request",
    "hook_compile_options", "stages_hook_fingerprint",
    # the binder and the in-process cache
    "device_cache", "has_device_cache", "kernel_cache", "key_memo", "every_kernel_cache", "bind", "in_process_key",
    "find_in_process_key", "has_pre_run_hooks", "param_specialization", "positional_parameters", "tensor_type", "file_compiled",
    "resolved", "is_pending", "source_hash", "specialization_hints", "constexpr_parameters",
    "alignment_unspecialized_parameters",
    # raw launches (zerojit record / exec)
    "unwrap_jit_function", "jit_identity", "run_options_removed", "wrap_run", "unwrap_run", "wrapped_run",
    "patch_run_everywhere", "parameter_names", "ordered_constexpr_parameters", "wrapped_config_kwargs",
    "jit_function_tree", "jit_function_scope", "is_jit_function", "is_kernel_function",
    # compiled kernels
    "ast_source", "source_fields", "source_of", "compiled_files", "new_compiled_kernel", "backend_for",
    "compile_source", "disk_cache_hash", "miss_compile_options", "load_compiled", "import_launch_path_modules", "import_compiler_modules",
    # launchers
    "cuda_launchers_in_use", "launcher_key", "launcher_file", "build_launcher", "direct_launch", "launcher_class",
    "set_launcher_class", "launcher_share_key",
    # the disk cache and the toolchain
    "cache_manager", "default_cache_manager", "cache_manager_class", "set_cache_manager_class", "metadata_file_name",
    "group_file_name", "read_group_file", "parse_group_file", "metadata_problem", "BINARY_EXTENSIONS", "build_key_function",
    "set_build_key_function", "backends_in_tree",
    "cuda_backend_available", "ptxas_path", "ptxas_version", "sm_arch", "watch_toolchain", "unwatch_toolchain",
    # autotune and heuristics wrappers
    "Config", "CONFIG_OPTIONS", "is_autotuner", "is_heuristics", "wrapped_function", "heuristics_values",
    "autotune_configs", "config_arguments", "config_pre_hook", "prunes_configs", "prune_configs",
    "tuning_key_function", "tuning_key", "layer_arg_names", "autotuner_cached", "bench_config",
    "fill_autotuner_cache", "drop_autotuner_cache", "autotuner_choices", "find_autotuner", "patch_autotuner_run",
    "benchmarks_with_driver", "tunings_forgotten", "add_bench_listener", "remove_bench_listener",
]


class UnsupportedTritonError(ImportError):
    """The installed Triton is outside the range zerojit supports (3.6 to 3.9)."""


def _minor(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


#: The installed Triton's version string, e.g. ``"3.9.0"``.
TRITON_VERSION: str = triton.__version__
#: ``(major, minor)`` of the installed Triton, e.g. ``(3, 9)``.
VERSION: tuple[int, int] = _minor(TRITON_VERSION)
_OLDEST, _NEWEST = (3, 6), (3, 9)

if not _OLDEST <= VERSION <= _NEWEST:
    raise UnsupportedTritonError(
        f"zerojit supports Triton 3.6 to 3.9 (triton>=3.6,<3.10); this is Triton {TRITON_VERSION}: install a "
        "supported one (zerojit relies on Triton's binder, caches and hooks, which change between minor releases)")

HookChain = knobs.HookChain

# ---------------------------------------------------------------------------------------------
# Knobs and the driver
# ---------------------------------------------------------------------------------------------


def interpreting() -> bool:
    """True when Triton interprets kernels in this process (``TRITON_INTERPRET=1``)."""
    return bool(knobs.runtime.interpret)


def cache_dir() -> str:
    """Triton's disk-cache folder for this process (``TRITON_CACHE_DIR`` / ``knobs.cache.dir``;
    may be empty when the setting is)."""
    return knobs.cache.dir


def set_cache_dir(path: str) -> None:
    """Point Triton's disk cache at ``path`` for this process."""
    knobs.cache.dir = path


def triton_home() -> str:
    """Triton's home folder (``TRITON_HOME``, default ``~``), where its ``.triton`` folder lives."""
    return knobs.cache.home_dir


def active_driver() -> Any:
    """The driver zerojit compiles and launches with: Triton's active driver, the compile-only
    driver while one is set (also under the machine view, whatever the caller's scope), else the
    GPU driver, created when none is active yet.

    Raises:
        RuntimeError: there is no GPU driver to create (no GPU and no compile-only driver).
    """
    drv = DRIVER._active
    return drv if drv is not None else DRIVER.active


def peek_driver() -> Any | None:
    """The active driver, or None when none was created yet (never creates one).

    Hot paths bind :data:`DRIVER` (Triton's ``DriverConfig``) once and read this slot,
    ``DRIVER._active``, themselves (3.6-3.9 all keep the active driver there). Under the machine
    view (:func:`set_driver`) the slot still holds the compile-only driver."""
    return DRIVER._active


def gpu_driver_available() -> bool:
    """Whether Triton would find a GPU driver to create (one of its backends' drivers is active:
    for NVIDIA and AMD, ``torch.cuda.is_available()``), without creating it: no CUDA context, which
    a process that only starts another (``zerojit record``'s) must not hold on the GPU."""
    from triton.backends import backends

    def active(backend: Any) -> bool:
        try:
            return bool(backend.driver.is_active())
        except Exception:  # a backend whose runtime is missing or broken: Triton cannot use it either
            return False

    return any(active(b) for b in backends.values())


#: True while Triton compiles or launches for zerojit's target: set by zerojit's patches of
#: ``JITFunction.run`` and ``Autotuner.run`` (:mod:`zerojit.compile_only`), by :func:`compile_source`
#: and by ``triton.compile`` while :func:`patch_compile` is in place. Under the machine view,
#: ``driver.active`` is the compile-only driver only where this is True. A context variable:
#: each thread (and each asyncio task) has its own.
TARGET_SCOPE: contextvars.ContextVar[bool] = contextvars.ContextVar("zerojit_target_scope", default=False)

_TRITON_DRIVER_CONFIG = type(DRIVER)
_ABSENT = object()


class _MachineView(_TRITON_DRIVER_CONFIG):  # type: ignore[misc,valid-type]
    """Triton's ``DriverConfig`` whose ``active`` is the compile-only driver (the ``_active`` slot)
    inside :data:`TARGET_SCOPE` only. Anywhere else (a library's hardware probe: FLA's
    ``driver.active.get_current_target()`` at import, its ``get_device_properties`` at call time)
    it is what Triton's own ``DriverConfig`` would give with no compile-only driver: the driver
    active before (``_zerojit_machine``), else the GPU driver Triton creates (kept as Triton keeps
    it), else Triton's own error where there is no GPU (not cached: Triton retries each time too).

    Cost: a read of ``driver.active`` takes what Triton's own takes (about 80 ns either way,
    Triton 3.6 on a 2-core x86 machine); entering the scope is a context-variable set and reset
    (about 110 ns, once per dry launch: :func:`zerojit.compile_only.compile_only`)."""

    @property
    def active(self) -> Any:
        if TARGET_SCOPE.get():
            return self._active
        machine = self._zerojit_machine
        if machine is None:
            machine = self._zerojit_machine = self.default
        return machine


def set_driver(drv: Any | None, *, machine_view: bool = False) -> Callable[[], None]:
    """Make ``drv`` Triton's active driver (None: the next use creates the GPU driver); returns
    the function that puts back exactly what was there (the driver, the ``DriverConfig``'s
    class, the machine's driver): undo nested calls in reverse order.

    ``machine_view=True`` (``drv`` a compile-only driver): only Triton's compilation and launches
    for zerojit (inside :data:`TARGET_SCOPE`) see ``drv``; everything else reading
    ``triton.runtime.driver.active`` sees the machine as it is (:class:`_MachineView`: Triton's
    ``DriverConfig`` class is swapped for the view's subclass, process-wide, until the undo).
    zerojit's own reads (:func:`active_driver`, :func:`peek_driver`, :func:`current_target`,
    :func:`current_device`, :func:`bind`) see ``drv`` in either case."""
    saved_class, saved_active = type(DRIVER), DRIVER._active
    saved_machine = DRIVER.__dict__.get("_zerojit_machine", _ABSENT)
    if machine_view:
        if saved_class is not _MachineView:
            DRIVER._zerojit_machine = saved_active  # what Triton's own class would give from now on
        DRIVER.__class__ = _MachineView
    elif saved_class is _MachineView:
        DRIVER.__class__ = _TRITON_DRIVER_CONFIG
    DRIVER._active = drv

    def restore() -> None:
        DRIVER._active = saved_active
        DRIVER.__class__ = saved_class
        if saved_machine is _ABSENT:
            DRIVER.__dict__.pop("_zerojit_machine", None)
        else:
            DRIVER._zerojit_machine = saved_machine

    return restore


@contextlib.contextmanager
def target_scope() -> Iterator[None]:
    """Inside the block, ``triton.runtime.driver.active`` is the compile-only driver under the
    machine view too (:data:`TARGET_SCOPE`): for zerojit's own calls into Triton's compile and
    launch machinery (binders created, compiles, dry launches)."""
    token = TARGET_SCOPE.set(True)
    try:
        yield
    finally:
        TARGET_SCOPE.reset(token)


def current_device() -> Any:
    """The active driver's current device (an int on a GPU, a string under compile-only)."""
    return active_driver().get_current_device()


def current_target() -> GPUTarget:
    """The active driver's target (``GPUTarget(backend, arch, warp_size)``)."""
    return active_driver().get_current_target()


def gpu_target(backend: str, arch: int | str, warp_size: int) -> GPUTarget:
    """Triton's ``GPUTarget``: e.g. ``gpu_target("cuda", 90, 32)``."""
    return GPUTarget(backend, arch, warp_size)


def cache_invalidating_env() -> dict[str, str]:
    """The environment variables Triton hashes into every disk-cache key, with their values."""
    return dict(get_cache_invalidating_env_vars())


# ---------------------------------------------------------------------------------------------
# Compile hooks
# ---------------------------------------------------------------------------------------------
# ``jit_cache_hook`` is called by ``JITFunction`` on every in-process cache miss, before
# compiling (a true result skips the compile); ``jit_post_compile_hook`` after it; the
# compilation listener after every ``triton.compile`` (``cache_hit``: a disk-cache load). Their
# keyword arguments are the same in 3.6-3.9 (3.7's ``_call_hook`` takes the target, but passes
# the hooks the same ``key``, ``repr``, ``fn``, ``compile``, ``is_manual_warmup`` and
# ``already_compiled``; the ``specialization_data`` JSON gains a ``target`` field).


def get_cache_hook() -> Callable[..., Any] | None:
    """Triton's ``jit_cache_hook`` (called on an in-process cache miss, before compiling)."""
    return knobs.runtime.jit_cache_hook


def set_cache_hook(hook: Callable[..., Any] | None) -> None:
    """Set Triton's ``jit_cache_hook`` (zerojit's own write: no :func:`guard_hook_assignments` guard sees it)."""
    object.__setattr__(knobs.runtime, "jit_cache_hook", hook)


def get_post_compile_hook() -> Callable[..., Any] | None:
    """Triton's ``jit_post_compile_hook`` (called after a ``triton.jit`` compile)."""
    return knobs.runtime.jit_post_compile_hook


def set_post_compile_hook(hook: Callable[..., Any] | None) -> None:
    """Set Triton's ``jit_post_compile_hook``."""
    knobs.runtime.jit_post_compile_hook = hook


def get_compile_listener() -> Callable[..., Any] | None:
    """Triton's compilation listener (called after every ``triton.compile``, with ``cache_hit``)."""
    return knobs.compilation.listener


def set_compile_listener(listener: Callable[..., Any] | None) -> None:
    """Set Triton's compilation listener (zerojit's own write: no guard sees it)."""
    object.__setattr__(knobs.compilation, "listener", listener)


# slot name -> guard(current, new) -> what to store; see guard_hook_assignments
_HOOK_GUARDS: dict[str, Callable[[Any, Any], Any]] = {}


def guard_hook_assignments(cache_hook: Callable[[Any, Any], Any], listener: Callable[[Any, Any], Any]) -> None:
    """Route every later assignment of Triton's ``jit_cache_hook`` and compilation listener by
    another party (``knobs.runtime.jit_cache_hook = f``, as a profiler or tracer does) through a
    guard: ``guard(current, new)`` returns what is stored instead of ``new``. Idempotent per slot
    (a second call replaces the guard).

    Triton 3.6-3.9 keep both in plain attributes of the ``knobs.runtime`` / ``knobs.compilation``
    instances; the instance's class is swapped, once, for a subclass whose ``__setattr__`` asks
    the guard (the knob descriptors are copied, so ``knobs``, ``reset`` and ``scope`` behave as
    before). Writes through :func:`set_cache_hook` / :func:`set_compile_listener` bypass it; so do
    writes straight into the instance's ``__dict__`` (``knobs.runtime.scope()`` restoring it).
    """
    _HOOK_GUARDS["jit_cache_hook"] = cache_hook
    _HOOK_GUARDS["listener"] = listener
    for instance in (knobs.runtime, knobs.compilation):
        cls = type(instance)
        if cls.__dict__.get("_zerojit_guarded"):
            continue

        def __setattr__(self: Any, name: str, value: Any, _base: type = cls) -> None:
            guard = _HOOK_GUARDS.get(name)
            if guard is not None:
                value = guard(getattr(self, name), value)
            _base.__setattr__(self, name, value)

        namespace = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        namespace.update(__setattr__=__setattr__, _zerojit_guarded=True)
        instance.__class__ = type(cls.__name__, (cls,), namespace)


def add_load_hooks(start: Callable[..., Any], end: Callable[..., Any]) -> None:
    """Add ``start``/``end`` to Triton's module-load hook chains (called around each module load
    on a GPU with ``(module, function, name, metadata_group, hash)``)."""
    knobs.runtime.kernel_load_start_hook.add(start)
    knobs.runtime.kernel_load_end_hook.add(end)


def remove_load_hooks(start: Callable[..., Any], end: Callable[..., Any]) -> None:
    """Take ``start``/``end`` out of the module-load hook chains again."""
    knobs.runtime.kernel_load_start_hook.remove(start)
    knobs.runtime.kernel_load_end_hook.remove(end)


#: What a ``jit_cache_hook`` call asks to compile: the ``ASTSource`` arguments and the device.
CompileRequest = namedtuple("CompileRequest", "signature constants attrs device")


def hook_compile_request(compile: dict) -> CompileRequest:
    """The :data:`CompileRequest` in the ``compile`` argument of a ``jit_cache_hook`` call (the
    same dicts Triton then hands ``ASTSource``).

    Raises:
        KeyError, IndexError: ``compile`` is not the dict Triton passes (a foreign caller).
    """
    return CompileRequest(compile["signature"], compile["constants"], compile["configs"][0], compile["device"])


def hook_compile_options(compile: dict) -> dict:
    """The compile options in the ``compile`` argument of a ``jit_cache_hook`` call, as
    ``JITFunction.preload`` reads them from its ``specialization_data`` JSON (3.7 adds a
    ``target`` field beside them there).

    Raises:
        KeyError, ValueError: ``compile`` is not the dict Triton passes.
    """
    options = json.loads(compile["specialization_data"])["options"]
    return {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}


def hook_jit_function(fn: Any) -> Any:
    """The ``triton.jit`` function behind the ``fn`` argument of a hook call (a ``JitFunctionInfo``)."""
    return fn.jit_function


def stages_hook_fingerprint() -> str | None:
    """What a stages-inspection hook adds to Triton's keys: None when none is set or on 3.6
    (whose keys ignore the hook); else its ``(key, hash)`` as a string.

    3.7: ``knobs.runtime.add_stages_inspection_hook()`` returns ``(key, hash)``; the disk key gains
    the key and the in-process key a ``("custom_pipeline", hash)`` entry.
    """
    hook = knobs.runtime.add_stages_inspection_hook
    if hook is None or VERSION < (3, 7):
        return None
    return repr(tuple(hook()))


# ---------------------------------------------------------------------------------------------
# The binder and the in-process cache
# ---------------------------------------------------------------------------------------------
# ``jit_fn.device_caches[device]`` (a defaultdict, created at first use) is
# ``(kernel_cache, kernel_key_cache, target, backend, binder)`` in 3.6-3.9: the in-process cache
# (Triton key -> CompiledKernel), the memo ``(specialization, options) -> key``, the target, the
# backend and the binder (Triton's generated ``dynamic_func`` over ``native_specialize_impl``).

DeviceCache = namedtuple("DeviceCache", "kernel_cache key_memo target backend binder")


def device_cache(jit_fn: Any, device: Any) -> DeviceCache:
    """``jit_fn``'s per-device cache for ``device`` (created, with its binder, on first use; the
    caller serializes creation where threads race: two creators would each get their own)."""
    return DeviceCache(*_device_caches(jit_fn, device))


def _device_caches(jit_fn: Any, device: Any) -> list:
    caches = jit_fn.device_caches
    if device in caches:
        return caches[device]
    with target_scope():  # created: Triton's create_binder asks driver.active for the target
        return caches[device]


def has_device_cache(jit_fn: Any, device: Any) -> bool:
    """True when ``jit_fn`` already has a per-device cache for ``device``."""
    return device in jit_fn.device_caches


def kernel_cache(jit_fn: Any, device: Any) -> dict:
    """``jit_fn``'s in-process cache on ``device`` (Triton key -> ``CompiledKernel``)."""
    return _device_caches(jit_fn, device)[0]


def key_memo(jit_fn: Any, device: Any) -> dict:
    """Triton's memo of in-process keys on ``device``: ``(tuple(specialization), str(options))`` ->
    key (filled by ``compute_cache_key`` at each launch; empty when there is no device cache)."""
    return jit_fn.device_caches[device][1] if device in jit_fn.device_caches else {}


def every_kernel_cache(jit_fn: Any) -> list[dict]:
    """``jit_fn``'s in-process caches, one per device it has run on."""
    return [caches[0] for caches in list(jit_fn.device_caches.values())]


#: Source of the knob reads that join Triton's in-process key besides the arguments, for
#: generated code: an expression list over ``_KR`` (``knobs.runtime``), ``_KC``
#: (``knobs.compilation``) and ``_UNPROVABLE`` (the caller's token for "no key can be proven":
#: 3.7's custom pipeline, which only the hook itself can name). Bound at generation time
#: (:data:`KEY_KNOBS_NAMESPACE`), so a launch reads only the knobs themselves.
KEY_KNOBS_SOURCE = "_KR.debug, _KC.instrumentation_mode"
if VERSION >= (3, 7):  # 3.7: a stages-inspection hook adds ("custom_pipeline", hash) to the key
    KEY_KNOBS_SOURCE += ", (_KR.add_stages_inspection_hook is None or _UNPROVABLE)"
if VERSION >= (3, 9):  # 3.9: run adds fpsan_homomorphic_casts to the options in the key
    KEY_KNOBS_SOURCE += ", _KC.fpsan_homomorphic_casts"
KEY_KNOBS_NAMESPACE = {"_KR": knobs.runtime, "_KC": knobs.compilation}
#: Source of the reads of Triton's ``jit_cache_hook`` and compilation listener (:func:`get_cache_hook`,
#: :func:`get_compile_listener`) for generated code, over :data:`KEY_KNOBS_NAMESPACE` (3.6-3.9).
CACHE_HOOK_SOURCE = "_KR.jit_cache_hook"
LISTENER_SOURCE = "_KC.listener"


#: The options ``JITFunction.run`` adds to a launch's before binding (part of the in-process key,
#: never passed by a launch). 3.9 adds ``fpsan_homomorphic_casts``.
RUN_OPTIONS = ("debug", "instrumentation_mode") + (("fpsan_homomorphic_casts",) if VERSION >= (3, 9) else ())


def _run_options(jit_fn: Any, kwargs: dict) -> dict:
    """``kwargs`` with the options ``JITFunction.run`` adds before binding."""
    kwargs["debug"] = kwargs.get("debug", jit_fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    if VERSION >= (3, 9):  # 3.9: part of the options that form the in-process key
        kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    return kwargs


def bind(jit_fn: Any, *args: Any, **kwargs: Any) -> tuple[dict, list, dict]:
    """Run Triton's own binder for ``jit_fn`` on the current driver's device.

    Returns ``(bound_args, specialization, options)`` exactly as ``JITFunction.run`` computes them:
    the options ``run`` adds are filled in (``debug``, ``instrumentation_mode``; 3.9:
    ``fpsan_homomorphic_casts``) and, 3.7: with a stages-inspection hook set, the specialization
    ends with run's ``'("custom_pipeline", hash)'`` entry (:func:`param_specialization` drops it).

    Raises:
        TypeError, KeyError, OverflowError: what Triton's binder raises for these arguments.
    """
    binder = _device_caches(jit_fn, active_driver().get_current_device())[4]
    bound, specialization, options = binder(*args, **_run_options(jit_fn, kwargs))
    hook = knobs.runtime.add_stages_inspection_hook if VERSION >= (3, 7) else None
    if hook is not None:
        specialization.append(f'("custom_pipeline", {hook()[1]})')
    return bound, specialization, options


def in_process_key(specialization: list, options: dict) -> str:
    """The in-process cache key ``JITFunction.run`` looks up for a :func:`bind` result."""
    return compute_cache_key({}, specialization, options)


def find_in_process_key(jit_fn: Any, compiled: Any, device: Any = None) -> str | None:
    """The key ``compiled`` is filed under in ``jit_fn``'s in-process cache (on ``device``, or on
    any device when None), or None."""
    caches = [kernel_cache(jit_fn, device)] if device is not None else every_kernel_cache(jit_fn)
    for cache in caches:
        for k, v in list(cache.items()):
            if v is compiled:
                return k
    return None


def has_pre_run_hooks(jit_fn: Any) -> bool:
    """True when ``JITFunction.run`` calls hooks of ``jit_fn`` with the launch's arguments before
    it binds them (``pre_run_hooks``, 3.6-3.9)."""
    return bool(jit_fn.pre_run_hooks)


def param_specialization(jit_fn: Any, specialization: list) -> list:
    """The parameters' entries of a specialization list (without 3.7's custom-pipeline entry)."""
    return specialization[:len(jit_fn.params)]


def specialization_hints(jit_fn: Any) -> tuple[tuple[int | str, ...], tuple[int | str, ...]]:
    """The ``do_not_specialize`` and ``do_not_specialize_on_alignment`` entries given to
    ``triton.jit`` (parameter names or indexes, as written), stored on the ``JITFunction`` (3.6-3.9)
    or, for the interpreter's function, in its ``kwargs``. Triton itself never checks them: an entry
    that names no parameter is ignored."""
    stored = getattr(jit_fn, "kwargs", None) if not isinstance(jit_fn, JITFunction) else None
    if stored is not None:  # InterpretedFunction keeps triton.jit's keyword arguments as given
        dns, dnsoa = stored.get("do_not_specialize"), stored.get("do_not_specialize_on_alignment")
    else:
        dns, dnsoa = getattr(jit_fn, "do_not_specialize", None), getattr(jit_fn, "do_not_specialize_on_alignment", None)
    return tuple(dns or ()), tuple(dnsoa or ())


def alignment_unspecialized_parameters(jit_fn: Any) -> frozenset[str]:
    """The names of the parameters listed in ``jit_fn``'s ``do_not_specialize_on_alignment`` (by
    name or index): Triton passes such a pointer with the attribute of an unaligned one."""
    import inspect

    names = tuple(inspect.signature(jit_fn.fn).parameters)
    entries = specialization_hints(jit_fn)[1]
    return frozenset(e if isinstance(e, str) else names[e] for e in entries
                     if (isinstance(e, str) and e in names) or (isinstance(e, int) and 0 <= e < len(names)))


def constexpr_parameters(jit_fn: Any) -> frozenset[str]:
    """The names of ``jit_fn``'s ``tl.constexpr`` parameters (Triton's ``KernelParam.is_constexpr``;
    the interpreter's function has no ``params``: read from the annotations the same way)."""
    import inspect

    params = getattr(jit_fn, "params", None)
    if params is not None:
        return frozenset(p.name for p in params if p.is_constexpr)
    return frozenset(p.name for p in inspect.signature(jit_fn.fn).parameters.values()
                     if "constexpr" in str(p.annotation))


#: 3.9: keyword-only kernel parameters compile (earlier code generators do not see them: a
#: ``NameError`` at compile time).
KEYWORD_ONLY_PARAMETERS = VERSION >= (3, 9)


def positional_parameters(jit_fn: Any) -> int:
    """How many leading parameters Triton's binder takes positionally; the rest (keyword-only
    ones) go by keyword. 3.9: the binder keeps the keyword-only separator and refuses them
    positionally; earlier binders ignore parameter kinds, so by keyword is right on 3.6-3.9."""
    import inspect

    params = list(inspect.signature(jit_fn.fn).parameters.values())  # (an interpreted function has no .params)
    return next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.KEYWORD_ONLY), len(params))


def tensor_type(dtype: Any) -> str | None:
    """Triton's type name for a tensor dtype (``torch.float16`` -> ``"fp16"``), or None when the
    binder refuses such a tensor."""
    from triton._utils import type_canonicalisation_dict
    from triton.runtime.jit import _normalize_ty

    ty = _normalize_ty(str(dtype).removeprefix("torch."))
    return ty if ty in type_canonicalisation_dict else None


def file_compiled(cache: dict, key: str, compiled: Any) -> Any:
    """File ``compiled`` under ``key`` in an in-process cache unless an entry is there; returns
    the entry filed. Never replaces one: 3.8's ``CompiledKernel.__del__`` unloads the module of
    a dropped entry, which a launcher handed out earlier may still use."""
    return cache.setdefault(key, compiled)


def is_pending(obj: Any) -> bool:
    """True for an async compile's ``FutureKernel`` (``triton.runtime._async_compile``)."""
    return hasattr(obj, "result") and not isinstance(obj, CompiledKernel)


def resolved(obj: Any) -> Any:
    """The ``CompiledKernel`` of ``obj``: ``obj`` itself, or an async compile's result (waiting
    for it). 3.7: the ``FutureKernel`` also sits in the in-process cache until it resolves.

    Raises:
        Exception: whatever the async compile raised.
    """
    return obj.result() if is_pending(obj) else obj


# ---------------------------------------------------------------------------------------------
# Compiled kernels
# ---------------------------------------------------------------------------------------------


def ast_source(jit_fn: Any, signature: dict, constants: dict | None = None, attrs: dict | None = None) -> Any:
    """Triton's ``ASTSource`` of ``jit_fn`` for a signature, constexprs and attributes."""
    return ASTSource(jit_fn, signature, constants, attrs)


def source_fields(src: Any) -> tuple[Any, dict, dict, dict] | None:
    """``(jit_fn, signature, constants, attrs)`` of an ``ASTSource`` (the ``src`` a compilation
    listener is called with), or None for IR text or anything else."""
    if not isinstance(src, ASTSource):
        return None
    return src.fn, src.signature, src.constants, src.attrs


def source_of(compiled: Any) -> tuple[Any, dict, dict, dict] | None:
    """:func:`source_fields` of the source ``compiled`` was compiled from, or None (compiled from
    IR text, or not a ``CompiledKernel``)."""
    return source_fields(getattr(compiled, "src", None))


def compiled_files(compiled: Any) -> dict[str, str]:
    """The files of ``compiled``'s disk-cache entry: file name -> absolute path (its
    ``metadata_group``; empty when it has none)."""
    return dict(getattr(compiled, "metadata_group", None) or {})


def backend_for(target: GPUTarget, backends: dict) -> Any:
    """Triton's compiler backend for ``target``, made once per ``backends`` dict (a cache)."""
    backend = backends.get(target)
    if backend is None:
        backend = backends[target] = make_backend(target)
    return backend


def new_compiled_kernel(*, jit_fn: Any, src: tuple, metadata: Any, metadata_group: dict[str, str], asm: dict,
                        backend: Any) -> Any:
    """A ``CompiledKernel`` with the fields Triton's own ``__init__`` sets on a disk-cache hit,
    made from values the caller already holds (no file is read here).

    Args:
        jit_fn: the ``triton.jit`` function; src: its ``(signature, constants, attrs)``.
        metadata: the entry's ``KernelMetadata`` namedtuple (``target`` a ``GPUTarget``).
        metadata_group: the entry's files, name -> path. asm: an ``AsmDict`` holding at least the
            binary (``backend.binary_ext``). backend: Triton's backend for the target.

    3.9: sets ``_module_pid`` (read by ``__del__``). The module, function and launcher load later
    (:func:`load_compiled`). Raises KeyError when ``asm`` lacks the binary.
    """
    compiled = CompiledKernel.__new__(CompiledKernel)
    compiled.metadata = metadata
    compiled.packed_metadata = backend.pack_metadata(metadata)
    compiled.src = ASTSource(jit_fn, *src)
    compiled.hash = metadata.hash
    compiled.name = metadata.name
    compiled.asm = asm
    compiled.metadata_group = metadata_group
    compiled.kernel = asm[backend.binary_ext]
    compiled.module = None
    compiled.function = None
    compiled._run = None
    if VERSION >= (3, 9):  # 3.9: __del__ unloads only in the process that loaded the module
        compiled._module_pid = None
    return compiled


def compile_source(src: Any, target: GPUTarget, options: dict | None = None) -> Any:
    """``triton.compile(src, target=target, options=options)``: the disk cache first, else compile
    (in :data:`TARGET_SCOPE`: the code generator asks ``driver.active`` for the target too)."""
    with target_scope():
        return triton.compile(src, target=target, options=options)


_TRITON_COMPILE = triton.compiler.compile


def _scoped_compile(*args: Any, **kwargs: Any) -> Any:
    token = TARGET_SCOPE.set(True)
    try:
        return _TRITON_COMPILE(*args, **kwargs)
    finally:
        TARGET_SCOPE.reset(token)


def patch_compile() -> Callable[[], None]:
    """Make ``triton.compile`` run in :data:`TARGET_SCOPE` wherever it is called from: a binder
    created now (``JITFunction.create_binder`` binds ``triton.compiler.compile``), a compile in
    another thread (Triton's async compile mode, where the launch's scope does not reach), the
    program's own ``triton.compile`` with no target. Returns the undo (binders created meanwhile
    keep the scoped function, which only sets the scope). 3.6-3.9."""
    saved = (triton.compile, triton.compiler.compile)
    triton.compile = triton.compiler.compile = _scoped_compile

    def restore() -> None:
        triton.compile, triton.compiler.compile = saved

    return restore


def disk_cache_hash(src: Any, target: GPUTarget, options: dict | None = None) -> str:
    """The SHA-256 hex digest under which :func:`compile_source` (``triton.compile``) files
    ``src`` for ``target`` with ``options`` in the disk cache (its entry folder is the digest in
    base 32, :func:`zerojit.cache.entry_name`): Triton's ``get_cache_key`` over the backend's
    parsed options and the cache-invalidating environment, as ``compile`` computes it (3.6-3.9).
    Compiles nothing."""
    backend = make_backend(target)
    parsed = backend.parse_options(dict(options or {}, **src.parse_options()))
    key = _tcache.get_cache_key(src, backend, parsed, env_vars=get_cache_invalidating_env_vars())
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def miss_compile_options(options: Any) -> dict:
    """The compile options of an in-process miss as a plain dict: ``_do_compile`` gets the
    backend's parsed options object and hands ``triton.compile`` its ``__dict__`` (3.6-3.9);
    this is what a compile worker is sent (picklable)."""
    return dict(options.__dict__)


@functools.lru_cache(maxsize=1)
def _cu_func_load():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuFuncLoad
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def load_compiled(compiled: Any) -> None:
    """Load ``compiled`` (a Triton ``CompiledKernel``) on the GPU: module, function and launcher.

    Triton's ``CompiledKernel._init_handles()`` loads the cubin (``cuModuleLoadData``), fetches
    the function and builds the launcher. Under CUDA's lazy loading (``CUDA_MODULE_LOADING=LAZY``,
    the default PyTorch sets), the function itself is still only loaded at its first launch; the
    driver's ``cuFuncLoad`` (CUDA 12.4+) finishes that now. Where the call is missing it is
    skipped.

    Raises:
        RuntimeError: the driver refused to load the function (its CUDA error code is given).
        triton.runtime.errors.OutOfResources: the kernel needs more shared memory or threads than
            the device has (Triton's own check).
    """
    compiled._init_handles()
    func_load = _cu_func_load()
    if func_load is not None and compiled.function:
        rc = func_load(ctypes.c_void_p(compiled.function))
        if rc != 0:
            raise RuntimeError(f"cuFuncLoad failed for kernel {compiled.name!r} with CUDA error {rc}")


# What the native specializer (``native_specialize_impl``) imports on its first call with a tensor
# argument: the Python types it checks arguments against (names found in libtriton).
_SPECIALIZER_MODULES = (
    "triton.language", "triton.runtime.jit", "triton.tools.tensor_descriptor",
    "triton.experimental.gluon.language._layouts", "triton.experimental.gluon.language.amd._layouts",
    "triton.experimental.gluon.language.nvidia.blackwell", "triton.experimental.gluon.nvidia.hopper",
)
if VERSION >= (3, 8):  # 3.8: gluon's Rubin layouts join them
    _SPECIALIZER_MODULES += ("triton.experimental.gluon.language.nvidia.rubin",)


# What Triton's compile front end imports at a process's first compile (its code generator and
# the language's semantic layer, ~20-40 ms on the CI machine): a forked compile worker inherits them.
_COMPILER_MODULES = ("triton.compiler.code_generator", "triton.language.semantic")


def import_compiler_modules() -> None:
    """Import what Triton's compiler imports lazily at a process's first compile (a module this
    Triton lacks is skipped), so that worker processes forked afterwards do not each import them."""
    for name in _COMPILER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def prime_backend_hash(target: Any) -> None:
    """Compute the compiler backend's hash for ``target`` once, as the first compile of a process
    does: part of every cache key; NVIDIA's runs ``ptxas --version`` (a subprocess, ~6-15 ms, kept
    by Triton's ``lru_cache``), so workers forked afterwards inherit it. Errors are left to the
    compile that needs it (a missing ``ptxas`` fails there, with Triton's message)."""
    try:
        make_backend(target).hash()
    except Exception:
        pass


def watch_toolchain() -> None:
    """Have Triton's NVIDIA backend run its tools (``ptxas`` for each cubin and ``--version``
    probes: ``subprocess.run`` / ``check_output`` in ``triton.backends.nvidia.compiler`` and
    ``triton.knobs``) through :func:`zerojit.watchdog.run` and ``check_output``; everything else
    of ``subprocess`` there stays. Triton calls them with no timeout, so a stopped ``ptxas``
    would stop its compile for good; there one is killed and raises
    :class:`~zerojit.watchdog.CompileHung` (its temporary files removed: :func:`_run_tool`). For the whole process, from the first warm-up or
    compile-only block on (:func:`unwatch_toolchain` undoes it); a later call changes nothing.
    Without the NVIDIA backend, nothing to do."""
    import subprocess
    import types

    for module in _toolchain_modules():
        if isinstance(getattr(module, "subprocess", None), types.ModuleType):  # not watched yet
            watched = types.SimpleNamespace(**vars(subprocess))
            watched.run, watched.check_output = _run_tool, _watchdog.check_output
            module.subprocess = watched


def _run_tool(*popenargs: Any, **kwargs: Any) -> Any:
    """:func:`zerojit.watchdog.run` for Triton's NVIDIA backend. When the run is cut short (a
    ``ptxas`` killed as hung, Ctrl-C, SIGTERM), the temporary files ``make_cubin`` made for it
    are removed: 3.6-3.9 write the PTX to a ``NamedTemporaryFile(delete=False)`` in the temporary
    folder, run ``ptxas ... <ptx> -o <ptx>.o`` with stderr to another (``.log``), and remove them
    only once ``ptxas`` has returned (after a failure it returns from, Triton keeps the PTX for its
    repro command: left as it is)."""
    import subprocess

    try:
        return _watchdog.run(*popenargs, **kwargs)
    except subprocess.CalledProcessError:
        raise
    except BaseException:
        argv = popenargs[0] if popenargs else kwargs.get("args")
        _remove_ptxas_temporaries(argv if isinstance(argv, (list, tuple)) else (), kwargs.get("stderr"))
        raise


def _remove_ptxas_temporaries(argv: Sequence[Any], stderr: Any) -> None:
    import tempfile

    folder = os.path.realpath(tempfile.gettempdir())
    argv = [str(a) for a in argv]
    output = argv[argv.index("-o") + 1] if "-o" in argv[:-1] else None
    paths = [output, output[:-len(".o")]] if output is not None and output.endswith(".ptx.o") \
        and output[:-len(".o")] in argv else []
    log = getattr(stderr, "name", None)
    if isinstance(log, str) and log.endswith(".log"):
        paths.append(log)
    for path in paths:  # Triton's own temporaries only: in the temporary folder, nowhere else
        if os.path.dirname(os.path.realpath(path)) == folder:
            try:
                os.remove(path)
            except OSError:  # never made (the .o), or gone
                pass


def unwatch_toolchain() -> None:
    """Undo :func:`watch_toolchain` (a forked compile worker: the warm-up watches it whole)."""
    import subprocess

    for module in _toolchain_modules():
        module.subprocess = subprocess


def _toolchain_modules() -> list:
    try:
        from triton.backends.nvidia import compiler as nvidia_compiler
    except ImportError:
        return []
    return [nvidia_compiler, knobs]


def import_launch_path_modules() -> None:
    """Import what Triton's launch path imports lazily on a process's first launch with a tensor
    argument (its native specializer's modules, ~50-120 ms in all). A warm-up whose variants
    were all restored (:mod:`zerojit.restore`) runs no launch, so without this the first request
    would pay it. A module this Triton lacks is skipped (its specializer cannot import it either).
    """
    for name in _SPECIALIZER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


# ---------------------------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------------------------

#: 3.6 builds one C launcher module per kernel signature (``make_launcher`` +
#: ``compile_module_from_src``, a C compiler run each) when a kernel first loads. 3.7: NVIDIA and
#: AMD launch through one shared entry (``driver.active.utils.launch``): no launchers to build, to
#: remember or to ship to compile workers.
BUILDS_LAUNCHERS = VERSION < (3, 7)

try:
    from triton.backends.nvidia.driver import CudaLauncher as _CudaLauncher
except ImportError:  # pragma: no cover - a Triton without the NVIDIA backend
    _CudaLauncher = None

#: The fast path's launch of a ``CompiledKernel`` ``_c``, in generated code: exactly what
#: ``JITFunction.run`` passes (3.6-3.9): the grid, the stream, the function and packed metadata,
#: no launch metadata, no launch hooks (the fast path runs only when none is set), then
#: ``{args}``, the kernel arguments in parameter order, constexprs included.
COMPILED_RUN_CALL = "_c.run(_gx, _gy, _gz, _stream, _c.function, _c.packed_metadata, None, None, None{args})"

#: The call the fast path makes instead of ``CudaLauncher.__call__``, in generated code (two lines):
#: ``_d`` is :func:`direct_launch`'s tuple, ``_gx/_gy/_gz`` the grid, ``_stream`` the stream,
#: ``{args}`` the kernel arguments (each preceded by a comma) and ``{arg_tuple}`` them as a tuple.
#: 3.6 (the kernel's own C entry): the grid, the stream, the function, the cooperative-grid and
#: PDL flags, the two scratch buffers (None: the kernel has none), the packed metadata, the launch
#: metadata and the two launch hooks (None), then the arguments. 3.7 (the shared C entry
#: ``utils.launch``): the same up to the PDL flag, the packed metadata, the launch metadata and
#: hooks, the two scratch buffers, the argument annotations and the signature, then the
#: arguments as one tuple.
if VERSION < (3, 7):
    DIRECT_LAUNCH_CALL = ("_launch, _function, _cooperative, _pdl, _metadata = _d\n"
                          "_launch(_gx, _gy, _gz, _stream, _function, _cooperative, _pdl, None, None, _metadata, "
                          "None, None, None{args})")
else:
    DIRECT_LAUNCH_CALL = ("_launch, _function, _cooperative, _pdl, _metadata, _annotations, _signature = _d\n"
                          "_launch(_gx, _gy, _gz, _stream, _function, _cooperative, _pdl, _metadata, None, None, "
                          "None, None, None, _annotations, _signature, {arg_tuple})")

#: The test, in generated code, that lets the fast path pass the tensor ``{tensor}`` as its address
#: (its ``data_ptr()``, already read for its alignment class). Every launcher of 3.6-3.9 takes an
#: int pointer as is; given a tensor it calls ``data_ptr()`` and asks the driver whether the
#: address is device-accessible (``cuPointerGetAttribute``: a driver call per pointer per launch),
#: which for a CUDA tensor it always is, at the same address (unified addressing). A launch with
#: any other tensor (CPU, pinned, meta) passes its tensors as they are, so the launcher accepts or
#: refuses them as it does for Triton.
DEVICE_POINTER_TEST = "{tensor}.is_cuda"


def direct_launch(compiled: Any) -> tuple | None:
    """:data:`DIRECT_LAUNCH_CALL`'s tuple when ``compiled``'s launcher is a ``CudaLauncher`` whose
    ``__call__`` only forwards to its C entry: no scratch memory to allocate (3.8: and no GSan
    instrumentation); else None (call ``compiled.run``). 3.6: ``(launch, function,
    cooperative_grid, pdl, packed_metadata)``; 3.7: also ``arg_annotations`` and
    ``kernel_signature``. Loads the module and builds the launcher if that has not happened."""
    launcher = compiled.run
    if (_CudaLauncher is None or type(launcher) is not _CudaLauncher or launcher.global_scratch_size != 0
            or launcher.profile_scratch_size != 0 or getattr(launcher, "gsan_enabled", False)):
        return None
    found = (launcher.launch, compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
             compiled.packed_metadata)
    if VERSION >= (3, 7):
        found += (launcher.arg_annotations, launcher.kernel_signature)
    return found


def cuda_launchers_in_use() -> bool:
    """True when this process loads kernels with a per-signature CUDA launcher module that a
    worker could build ahead (a GPU, not compile-only, and :data:`BUILDS_LAUNCHERS`)."""
    if not BUILDS_LAUNCHERS or _CudaLauncher is None:
        return False
    try:
        return DRIVER.active.launcher_cls is _CudaLauncher
    except Exception:
        return False


def launcher_file() -> str:
    """The file name of a launcher module in Triton's cache: ``__triton_launcher<EXT_SUFFIX>``."""
    return f"__triton_launcher{sysconfig.get_config_var('EXT_SUFFIX')}"


def _launcher_source(types: tuple) -> str:
    from triton.backends.nvidia.driver import make_launcher

    return make_launcher({}, dict(enumerate(types)), None)  # what CudaLauncher builds


def launcher_key(types: tuple) -> str | None:
    """The disk-cache key of the CUDA launcher module of a kernel whose signature types are
    ``types`` (3.6: SHA-256 of its generated source and the platform); None when there is no such
    module to build ahead: 3.7 and later, or a tensor-descriptor argument (its launcher depends on
    compile results)."""
    if not BUILDS_LAUNCHERS or any(isinstance(t, str) and t.startswith("tensordesc") for t in _flat(types)):
        return None
    import hashlib

    from triton.runtime.build import platform_key

    return hashlib.sha256((_launcher_source(types) + platform_key()).encode("utf-8")).hexdigest()


def build_launcher(types: tuple) -> None:
    """Build (into the disk cache) the CUDA launcher module of signature ``types``, as 3.6's
    ``CudaLauncher`` does at a kernel's first load.

    Raises:
        RuntimeError: on 3.7 and later (no such module exists).
        Exception: the C compiler's failure.
    """
    if not BUILDS_LAUNCHERS:
        raise RuntimeError(f"Triton {TRITON_VERSION} builds no launcher modules")
    from triton.backends.nvidia.driver import include_dirs, libraries, library_dirs
    from triton.runtime.build import compile_module_from_src

    compile_module_from_src(src=_launcher_source(types), name="__triton_launcher", library_dirs=library_dirs(),
                            include_dirs=include_dirs, libraries=libraries)


def _flat(values) -> list:
    out = []
    for v in values:
        out += _flat(v) if isinstance(v, tuple) else [v]
    return out


def launcher_class(drv: Any) -> Any:
    """The launcher class of driver ``drv`` (called as ``cls(src, metadata)`` at each load)."""
    return drv.launcher_cls


def set_launcher_class(drv: Any, cls: Any) -> None:
    """Make driver ``drv`` build launchers with ``cls``."""
    drv.launcher_cls = cls


# What a CUDA launcher keeps of a kernel besides its signature (3.6-3.9).
_LAUNCHER_FIELDS = ("num_ctas", "global_scratch_size", "global_scratch_align", "profile_scratch_size",
                    "profile_scratch_align", "launch_cooperative_grid", "launch_pdl")


def launcher_share_key(src: Any, metadata: Any) -> str | None:
    """A key under which kernels may share one launcher object: their signature and the metadata
    fields a CUDA launcher keeps (constexprs are typed ``"constexpr"``); None when the launcher
    depends on more (tensor descriptors)."""
    if getattr(metadata, "tensordesc_meta", None):
        return None
    return repr((sorted(src.signature.items()), [getattr(metadata, f, None) for f in _LAUNCHER_FIELDS]))


# ---------------------------------------------------------------------------------------------
# The disk cache
# ---------------------------------------------------------------------------------------------
# An entry is a folder named by the base32 of its key, holding the IR files, the binary, a
# metadata JSON and ``__grp__<metadata>.json`` (``{"child_paths": {name: absolute path}}``,
# written last). 3.8: ``get_group`` returns None if a listed file is missing (3.6/3.7 dropped it
# and reported the rest); either way zerojit treats such an entry as a miss.

default_cache_manager = _tcache.FileCacheManager


def cache_manager(key: str) -> Any:
    """Triton's cache manager for the entry of disk-cache key ``key`` (``get_cache_manager``)."""
    return _tcache.get_cache_manager(key)


def cache_manager_class() -> type | None:
    """The cache manager class set (``TRITON_CACHE_MANAGER`` / ``knobs.cache.manager_class``), or
    None for Triton's default (:data:`default_cache_manager`)."""
    return knobs.cache.manager_class


def set_cache_manager_class(cls: type | None) -> Callable[[], None]:
    """Make Triton use cache manager ``cls``; returns a function that restores what was set
    before (including "nothing set": the environment's again)."""
    was_set = "manager_class" in knobs.cache.__dict__
    previous = knobs.cache.manager_class
    knobs.cache.manager_class = cls

    def restore() -> None:
        if knobs.cache.manager_class is cls:
            if was_set:
                knobs.cache.manager_class = previous
            else:
                del knobs.cache.manager_class

    return restore


def metadata_file_name(jit_fn: Any) -> str:
    """The metadata file of ``jit_fn``'s disk-cache entries: its name (cut to 150 characters, as
    ``triton.compile`` does) plus ``.json``; the name ``get_group`` is asked for."""
    return f"{jit_fn.__name__[:150]}.json"


def group_file_name(filename: str) -> str:
    """The group file of an entry whose metadata file is ``filename``: ``__grp__<filename>``."""
    return f"__grp__{filename}"


def read_group_file(path: str) -> dict[str, str]:
    """The files a group file lists (name -> absolute path).

    Raises:
        OSError: it cannot be read. ValueError, KeyError, TypeError: it is not a group file.
    """
    with open(path, "rb") as f:
        return parse_group_file(f.read())


def parse_group_file(data: bytes) -> dict[str, str]:
    """The files group file content ``data`` lists (name -> absolute path).

    Raises:
        ValueError (``UnicodeDecodeError`` too), KeyError, TypeError: it is not a group file.
    """
    try:
        children = json.loads(data.decode("utf-8"))["child_paths"]
    except RecursionError:  # JSON nested deeper than Python's parser goes: every caller catches ValueError
        raise ValueError("the group file is nested too deep (not one Triton wrote)") from None
    if not isinstance(children, dict):
        raise TypeError("child_paths is not a mapping")
    return children


#: The extensions of the binaries Triton's backends write into an entry (NVIDIA: ``cubin``, AMD:
#: ``hsaco``), both ELF files; the other members are text (IR) and the metadata JSON.
BINARY_EXTENSIONS = ("cubin", "hsaco")


def metadata_problem(metadata: Any) -> str | None:
    """What is wrong with an entry's parsed metadata JSON for Triton 3.6-3.9 (the fields a
    ``CompiledKernel`` and the backends' ``pack_metadata`` read, each with a sane value), or None.
    A structural check only: a stray edit that keeps every field sane is not caught."""
    if not isinstance(metadata, dict):
        return f"a JSON {type(metadata).__name__}, not an object"
    target = metadata.get("target")
    if not (isinstance(target, dict) and isinstance(target.get("backend"), str)
            and isinstance(target.get("arch"), (int, str)) and _positive_int(target.get("warp_size"))):
        return "its 'target' is not {backend, arch, warp_size}"
    for name in ("name", "hash"):
        if not (isinstance(metadata.get(name), str) and metadata[name]):
            return f"its {name!r} is not a name"
    warps = metadata.get("num_warps")
    if not (_positive_int(warps) and warps & (warps - 1) == 0):
        return f"'num_warps' is {warps!r}, not a power of two"
    if not _positive_int(metadata.get("num_ctas")):
        return f"'num_ctas' is {metadata.get('num_ctas')!r}, not a positive whole number"
    shared = metadata.get("shared")
    if not (isinstance(shared, int) and not isinstance(shared, bool) and shared >= 0):
        return f"'shared' is {shared!r}, not a byte count"
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def build_key_function() -> Callable[[], str]:
    """The function Triton calls for its build key (``triton_key()``: its version, compiler
    sources and ``libtriton``, hashed into every disk-cache key; Triton's own hashes the whole
    build on its first call in a process), or one set by :func:`set_build_key_function`."""
    return _tcache.triton_key


def set_build_key_function(fn: Callable[[], str]) -> None:
    """Make Triton use ``fn()`` as its build key (``triton.runtime.cache.triton_key``)."""
    _tcache.triton_key = fn


def source_hash(jit_fn: Any) -> str:
    """``jit_fn``'s source hash over its dependencies (Triton's ``cache_key``; 3.8: constexpr
    globals are sorted first, so the values differ from 3.7's for the same source). Under
    ``TRITON_INTERPRET=1`` (an ``InterpretedFunction`` has no ``cache_key``): the SHA-256 of the
    function's own source."""
    key = getattr(jit_fn, "cache_key", None)
    if key is None and interpreting():
        key = hashlib.sha256(inspect.getsource(jit_fn.fn).encode()).hexdigest()
    return key


# ---------------------------------------------------------------------------------------------
# Raw launches: ``kernel[grid](...)`` of a function zerojit did not wrap (record / exec)
# ---------------------------------------------------------------------------------------------
# ``JITFunction.__getitem__`` returns ``lambda *a, **kw: self.run(grid=grid, warmup=False, *a, **kw)``
# and ``Autotuner.run`` / ``Heuristics.run`` call ``self.fn.run(...)`` (3.6-3.9): both look ``run``
# up on the instance at each launch, so an instance attribute ``run`` sees every raw launch. A
# zerojit kernel class binds ``cls.kernel.run`` once, at class creation (``_launch.LaunchState``):
# its launches are seen by the class-level patch only when it is made before the class exists.


def unwrap_jit_function(obj: Any) -> Any | None:
    """The ``JITFunction`` behind ``obj``: ``obj`` itself, or what a ``triton.autotune`` /
    ``triton.heuristics`` object wraps (their ``fn``, nested); None when there is none."""
    for _ in range(16):  # autotune(heuristics(jit(f))) nests a few levels at most
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def find_autotuner(obj: Any) -> Any | None:
    """The ``triton.autotune`` object ``obj`` is or wraps (through ``fn``, nested: a heuristics
    layer above it), else None."""
    for _ in range(16):
        if isinstance(obj, _Autotuner):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def wrapped_config_kwargs(obj: Any) -> list[dict] | None:
    """The keyword arguments of each config (``Config.all_kwargs()``: its constexprs and
    ``num_warps``, ``num_stages``, ...) of the ``triton.autotune`` object ``obj`` is or wraps
    (through ``fn``, nested), in order; None when there is no autotuner."""
    tuner = find_autotuner(obj)
    return None if tuner is None else [c.all_kwargs() for c in tuner.configs]


def jit_identity(jit_fn: Any) -> tuple[str, str]:
    """``(module, qualified name)`` of the Python function a ``triton.jit`` function compiles."""
    return jit_fn.fn.__module__, jit_fn.fn.__qualname__


def jit_function_tree(jit_fn: Any) -> Any | None:
    """The ``ast.FunctionDef`` of ``jit_fn``'s source, as Triton parses it to compile
    (``JITFunction.parse()``: the ``def`` without decorators); None when there is none to parse
    (an ``InterpretedFunction``, a source that does not parse)."""
    try:
        return jit_fn.parse().body[0]
    except Exception:  # (no parse method, or a SyntaxError Triton would raise at compile)
        return None


def jit_function_scope(jit_fn: Any) -> dict[str, Any]:
    """The names ``jit_fn``'s source resolves when compiled: its globals and closure variables
    (``JITFunction.get_capture_scope``'s view)."""
    return {**jit_fn.fn.__globals__, **inspect.getclosurevars(jit_fn.fn).nonlocals}


def is_jit_function(obj: Any) -> bool:
    """``obj`` is a ``triton.jit`` function (a kernel or a device function it calls)."""
    return isinstance(obj, JITFunction)


def is_kernel_function(obj: Any) -> bool:
    """``obj`` is what ``triton.jit`` returns in this process: a ``JITFunction``, or under
    ``TRITON_INTERPRET=1`` an ``InterpretedFunction`` (no subclass of it)."""
    if isinstance(obj, JITFunction):
        return True
    interpreter = sys.modules.get("triton.runtime.interpreter")  # (none can exist before it is imported)
    return interpreter is not None and isinstance(obj, interpreter.InterpretedFunction)


def parameter_names(jit_fn: Any) -> tuple[str, ...]:
    """The names of ``jit_fn``'s parameters, in order (``JITFunction.params``)."""
    return tuple(p.name for p in jit_fn.params)


def ordered_constexpr_parameters(jit_fn: Any) -> tuple[str, ...]:
    """The names of ``jit_fn``'s ``tl.constexpr`` parameters, in parameter order."""
    return tuple(p.name for p in jit_fn.params if p.is_constexpr)


def run_options_removed(options: dict) -> dict:
    """A :func:`bind` ``options`` dict without the options ``JITFunction.run`` adds itself
    (:data:`RUN_OPTIONS`): what the launch passed (``num_warps``, ``num_stages``, ...)."""
    return {k: v for k, v in options.items() if k not in RUN_OPTIONS}


def wrap_run(jit_fn: Any, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Route every raw launch of ``jit_fn`` (``jit_fn[grid](...)``, autotune, heuristics) through
    ``make(original_run)``, a callable with ``JITFunction.run``'s signature ``(*args, grid,
    warmup, **kwargs)``. Wrapping a function already wrapped replaces the wrapper (the original
    is kept). Cost: one Python call frame per launch, plus what the wrapper does.

    ``jit_fn`` may also be an ``Autotuner`` or ``Heuristics`` object: their ``run(*args,
    **kwargs)`` (``grid`` and ``warmup`` among the keywords) is what ``obj[grid](...)`` and the
    layer above call (``KernelInterface.__getitem__``, ``Heuristics.run``: ``self.fn.run``), so
    the instance attribute set here sees every launch through that layer."""
    original = jit_fn.__dict__.get("_zerojit_original_run") or jit_fn.run
    jit_fn._zerojit_original_run = original
    jit_fn.run = make(original)


_SOURCE_LINES_LOCK = threading.RLock()
_ABSENT = object()


@contextlib.contextmanager
def _source_lines_of(jit_fn: Any) -> Iterator[None]:
    """Within this block, ``inspect.getsourcelines(jit_fn.fn)`` answers ``jit_fn``'s own lines and
    first line number (other objects as usual). ``JITFunction.__init__`` (3.6-3.9:
    ``JITCallable.__init__``) calls it for the function it wraps, and it re-tokenizes the
    function's whole body each time: ~1-3 ms a kernel on the CI machine, paid once per kernel
    by every warm start that makes the kernel's generic function (:func:`generic_function`).
    The answer is what Triton read when ``jit_fn`` was made, from the very function object."""
    fn, lines, first = jit_fn.fn, list(jit_fn.raw_src), jit_fn.starting_line_number
    with _SOURCE_LINES_LOCK:
        real = inspect.getsourcelines

        def known(obj: Any) -> tuple[list[str], int]:
            return (list(lines), first) if obj is fn else real(obj)

        inspect.getsourcelines = known
        try:
            yield
        finally:
            inspect.getsourcelines = real


def generic_function(jit_fn: Any, keep_one: tuple[str, ...] | frozenset[str] = ()) -> JITFunction:
    """A second ``triton.jit`` function over ``jit_fn``'s Python function that specializes no
    argument on its value: its *generic* variant serves every value class of a group of keys.

    Every non-constexpr parameter goes into ``do_not_specialize`` (an int keeps only its width,
    i32 / i64 / u64; a pointer drops its 16-byte alignment assumption: Triton's binder treats a
    pointer named there like one named in ``do_not_specialize_on_alignment``), except the names in
    ``keep_one``, which go into ``do_not_specialize_on_alignment`` only (the value 1 stays a
    constexpr, every other value is one class). ``triton.jit`` refuses a ``JITFunction``, so the
    Python function is taken from ``jit_fn.fn``; the kernel's ``debug``, ``noinline``, ``repr``
    and ``launch_metadata`` are kept, and its own do-not-specialize lists are contained in the
    new ones. The new function has its own in-process caches (``device_caches``) and the same
    ``cache_key`` as ``jit_fn`` (same source, same dependencies: Triton's disk cache entries of
    the two are keyed alike). It is made from ``jit_fn``'s source lines (:func:`_source_lines_of`)
    and, when its source and first line are ``jit_fn``'s and the globals ``jit_fn``'s hash read
    still hold their values, takes ``jit_fn``'s ``cache_key`` and globals instead of walking the
    source again (~2 ms a kernel); else (``jit_fn``'s source was replaced, or such a global
    changed) its own is computed and checked, :class:`ValueError` when they differ.

    Raises:
        TypeError: ``jit_fn`` is not a ``triton.jit`` function (unwrap an autotuner or
            heuristics object first: :func:`unwrap_jit_function`).
        ValueError: a ``keep_one`` name is no non-constexpr parameter of ``jit_fn``, or the two
            functions' ``cache_key`` differ.
    """
    if not isinstance(jit_fn, JITFunction):
        raise TypeError(f"generic_function needs a triton.jit function, not {type(jit_fn).__name__}")
    free = [p.name for p in jit_fn.params if not p.is_constexpr]
    keep = set(keep_one)
    unknown = sorted(keep - set(free))
    if unknown:
        raise ValueError(f"{jit_fn.fn.__qualname__}: generic_keep names {unknown}, which are not non-constexpr "
                         f"parameters (those are {free})")
    with _source_lines_of(jit_fn):
        generic = triton.jit(
            jit_fn.fn,
            do_not_specialize=[n for n in free if n not in keep],
            do_not_specialize_on_alignment=free,
            debug=jit_fn.debug,
            noinline=jit_fn.noinline,
            repr=getattr(jit_fn, "_repr", None),
            launch_metadata=getattr(jit_fn, "launch_metadata", None),
        )
    key = jit_fn.cache_key  # (fills jit_fn.used_global_vals)
    if (generic.src == jit_fn.src and generic.starting_line_number == jit_fn.starting_line_number
            and all(g.get(name, _ABSENT) == value for (name, _), (value, g) in jit_fn.used_global_vals.items())):
        # Same function object, source and first line, and the globals it read unchanged since
        # its hash: Triton's cache_key walks the same source with the same globals and nonlocals,
        # so take jit_fn's instead of walking it again.
        generic.hash, generic.used_global_vals = key, dict(jit_fn.used_global_vals)
    elif generic.cache_key != key:  # jit_fn's src was replaced, or a global it reads
        raise ValueError(f"{jit_fn.fn.__qualname__}: its generic function hashes to another cache_key "
                         f"({generic.cache_key[:12]}... vs {key[:12]}...)")
    return generic


def intercept_misses(jit_fn: Any, handler: Callable[..., Any]) -> None:
    """Route every in-process cache miss of ``jit_fn`` through ``handler`` before Triton compiles.

    ``JITFunction.run`` calls ``self._do_compile(key, signature, device, constexprs, options,
    attrs, warmup)`` on a miss of its in-process cache (Triton 3.6-3.9), then launches what it
    returns. Here that method is replaced on the instance by one calling ``handler(jit_fn, key,
    signature, device, constexprs, options, attrs, warmup)``: a ``CompiledKernel`` (or an object
    with its launch fields: ``run``, ``function``, ``packed_metadata``, ``launch_metadata``)
    returned is launched with this launch's arguments and nothing compiles; None lets Triton's
    own ``_do_compile`` run (its ``jit_cache_hook``, then the compile). ``key`` is Triton's
    in-process key string (``str(specialization) + str(options)``). Intercepting a function
    already intercepted replaces the handler. Hits cost nothing extra.
    """
    original = jit_fn.__dict__.get("_zerojit_original_do_compile") or jit_fn._do_compile

    def _do_compile(key: Any, signature: Any, device: Any, constexprs: Any, options: Any, attrs: Any,
                    warmup: Any) -> Any:
        served = handler(jit_fn, key, signature, device, constexprs, options, attrs, warmup)
        if served is not None:
            return served
        return original(key, signature, device, constexprs, options, attrs, warmup)

    jit_fn._zerojit_original_do_compile = original
    jit_fn._do_compile = _do_compile


def release_misses(jit_fn: Any) -> None:
    """Undo :func:`intercept_misses` (a no-op when ``jit_fn`` is not intercepted)."""
    if "_zerojit_original_do_compile" in jit_fn.__dict__:
        del jit_fn.__dict__["_do_compile"]
        del jit_fn.__dict__["_zerojit_original_do_compile"]


def misses_intercepted(jit_fn: Any) -> bool:
    """True when :func:`intercept_misses` routes ``jit_fn``'s misses."""
    return "_zerojit_original_do_compile" in jit_fn.__dict__


def jit_source(jit_fn: Any) -> tuple[str, int, int]:
    """``(src, starting_line, def_line)`` of a ``triton.jit`` function: its source as Triton holds
    and hashes it (``JITFunction.src``: dedented, from ``def`` on), the line its source block
    starts at in its file (``starting_line_number``: the first decorator's, part of its
    ``cache_key``) and the line of its ``def`` (what Triton's code generator numbers lines from,
    ``get_jit_fn_file_line``)."""
    start = jit_fn.starting_line_number
    offset = next((i for i, line in enumerate(jit_fn.raw_src) if line.strip().startswith("def ")), 0)
    return jit_fn.src, start, start + offset


#: The ``triton.jit`` options that change what a function compiles to or how its launches bind
#: (``JITFunction.__init__``'s, 3.6-3.9), as :func:`jit_options` reads them.
JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline")


def jit_options(jit_fn: Any) -> dict[str, Any]:
    """The :data:`JIT_OPTIONS` ``jit_fn`` was made with, by name (the do-not-specialize lists as
    lists of the names or indices given), plus ``"repr": True`` when it was given a ``repr``
    callable (which names its compiled kernels)."""
    options = {name: getattr(jit_fn, name) for name in JIT_OPTIONS}
    options["do_not_specialize"] = list(options["do_not_specialize"])
    options["do_not_specialize_on_alignment"] = list(options["do_not_specialize_on_alignment"])
    if getattr(jit_fn, "_repr", None) is not None:
        options["repr"] = True
    return options


def adopt_compiled(source: Any, target: Any) -> int:
    """Give ``target`` (a ``triton.jit`` function of the same source, parameters and options)
    every variant ``source`` holds in its in-process caches, on every device: Triton's key ->
    ``CompiledKernel`` entries (the same objects, so launches of ``target`` are hits of what
    ``source`` compiled) and its memo of keys. ``target``'s own entries are kept. Returns how
    many variants it got."""
    added = 0
    for device, caches in list(source.device_caches.items()):
        with target_scope():  # a binder made now asks the driver for the target (the machine view's)
            mine = target.device_caches[device]  # (created with its own binder on first use)
        for key, kernel in caches[0].items():
            if key not in mine[0]:
                mine[0][key] = kernel
                added += 1
        for key, value in caches[1].items():
            mine[1].setdefault(key, value)
    return added


def wrapped_run(jit_fn: Any) -> bool:
    """True when :func:`wrap_run` wrapped ``jit_fn``."""
    return "_zerojit_original_run" in jit_fn.__dict__


def unwrap_run(jit_fn: Any) -> None:
    """Undo :func:`wrap_run` (a no-op when ``jit_fn`` is not wrapped)."""
    if "_zerojit_original_run" in jit_fn.__dict__:
        del jit_fn.__dict__["run"]
        del jit_fn.__dict__["_zerojit_original_run"]


def patch_run_everywhere(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Replace ``JITFunction.run`` for every ``triton.jit`` function by ``make(original)``, whose
    result takes ``(self, *args, grid, warmup, **kwargs)``; returns the function that restores
    Triton's. Seen: raw launches, autotune and heuristics, and zerojit kernel classes created
    after this call (those created before bound Triton's ``run`` already)."""
    original = JITFunction.run
    JITFunction.run = make(original)

    def restore() -> None:
        JITFunction.run = original

    return restore


@functools.lru_cache(maxsize=1)
def backends_in_tree() -> bool:
    """True when the backends Triton found are exactly those shipped inside Triton (so its
    ``TRITON_BACKENDS_IN_TREE=1`` finds the same ones without reading every installed package's
    entry points)."""
    try:
        import triton.backends as tb

        root = os.path.dirname(tb.__file__)
        shipped = {n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)) and not n.startswith("__")}
        return set(tb.backends) == shipped and all(
            b.compiler.__module__ == f"triton.backends.{name}.compiler" for name, b in tb.backends.items())
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------
# The NVIDIA toolchain
# ---------------------------------------------------------------------------------------------


def cuda_backend_available() -> bool:
    """True when this Triton has its NVIDIA backend."""
    return _CudaLauncher is not None


def ptxas_path(capability: int) -> str:
    """The ``ptxas`` Triton runs for compute capability ``capability`` (``ptxas-blackwell`` from
    100 on). Raises: RuntimeError, ImportError: no NVIDIA backend or no ``ptxas``."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(capability).path


def ptxas_version(capability: int) -> str:
    """The version line of the ``ptxas`` Triton runs for ``capability``.

    Raises: ImportError, RuntimeError, OSError: no NVIDIA backend, or ``ptxas`` cannot be run.
    """
    from triton.backends.nvidia.compiler import get_ptxas_version

    return get_ptxas_version(capability).strip().splitlines()[-1]


def sm_arch(capability: int) -> str:
    """The processor name Triton compiles ``capability`` for (``sm_90a`` for 90). Raises
    ImportError without the NVIDIA backend."""
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    return sm_arch_from_capability(capability)



# ---------------------------------------------------------------------------------------------
# Autotune and heuristics wrappers (triton.runtime.autotuner; the same surface in 3.6 to 3.9,
# except where named: 3.9 checks `key` names at decoration and skips benchmarking when pruning
# leaves one config, and calls knobs.autotuning.listener after a benchmark)
# ---------------------------------------------------------------------------------------------

#: The launch options of a ``triton.Config`` in the order ``Config.all_kwargs`` lists them (read
#: from Triton, not restated): ``("num_warps", "num_ctas", "num_stages", "maxnreg", "ir_override")``.
CONFIG_OPTIONS: tuple[str, ...] = tuple(
    Config({}, num_warps=1, num_stages=1, num_ctas=1, maxnreg=1, ir_override="x").all_kwargs())


def is_autotuner(obj: Any) -> bool:
    """True for a ``@triton.autotune`` object (Triton's ``Autotuner`` or a subclass, e.g. FLA's)."""
    return isinstance(obj, _Autotuner)


def is_heuristics(obj: Any) -> bool:
    """True for a ``@triton.heuristics`` object."""
    return isinstance(obj, _Heuristics)


def wrapped_function(obj: Any) -> Any:
    """The object an Autotuner or Heuristics wraps (its ``fn``)."""
    return obj.fn


def heuristics_values(obj: Any) -> dict[str, Callable[[dict], Any]]:
    """A Heuristics' ``{meta-parameter: function(args dict)}``, in decorator order."""
    return dict(obj.values)


def autotune_configs(tuner: Any) -> list[Any]:
    """The autotuner's configs (Triton puts one default ``Config`` there when given none)."""
    return list(tuner.configs)


def config_arguments(config: Any) -> dict[str, Any]:
    """``config.all_kwargs()``: its meta-parameters, then its launch options (``None`` ones left
    out), in Triton's order."""
    return config.all_kwargs()


def config_pre_hook(config: Any) -> Callable[[dict], Any] | None:
    """The config's ``pre_hook`` (called with every argument by name before the launch), or None."""
    return config.pre_hook


def prunes_configs(tuner: Any) -> bool:
    """True when ``Autotuner.prune_configs`` can drop a config (``prune_configs_by`` gave an
    ``early_config_prune`` or a ``perf_model``); otherwise every config survives every launch."""
    return bool(tuner.early_config_prune or tuner.perf_model)


def prune_configs(tuner: Any, nargs: dict[str, Any], kwargs: dict[str, Any]) -> list[Any]:
    """The configs that survive ``Autotuner.prune_configs`` (``prune_configs_by``: its
    ``early_config_prune``, then ``perf_model`` and ``top_k``) for an ``Autotuner.run(*args,
    **kwargs)`` call: ``nargs`` its positional arguments by name (Triton's ``self.nargs``),
    ``kwargs`` its keyword arguments (``grid`` and ``warmup`` included, as ``kernel[grid](...)``
    passes them). Triton hands ``early_config_prune(configs, nargs, **kwargs)`` exactly these.

    Raises: whatever the prune functions raise; ``AutotunerError`` when none survives.
    """
    early = tuner.early_config_prune
    if early is not None and tuner.perf_model is None:  # Triton's prune_configs, minus its frame
        kept = early(tuner.configs, nargs, **kwargs)
        if kept:
            return list(kept)
    saved = tuner.nargs if hasattr(tuner, "nargs") else None
    tuner.nargs = dict(nargs)
    try:
        return list(tuner.prune_configs(dict(kwargs)))
    finally:
        tuner.nargs = saved


def autotuner_key_names(tuner: Any) -> tuple[str, ...]:
    """The names an ``Autotuner`` keys on (its ``key=``), in order (Triton 3.6-3.9: ``keys``)."""
    return tuple(tuner.keys)


def tuning_key_function(tuner: Any) -> Callable[[dict[str, Any], dict[str, Any]], tuple]:
    """The key ``Autotuner.run`` caches its choice under, as a function ``key(nargs, kwargs)`` of
    the run's positional arguments by name (Triton's ``self.nargs``) and its keyword arguments, in
    the order the run received them. The names are read from the autotuner once, here.

    Triton 3.6-3.9 (``Autotuner.run``, the same code in each): ``all_args = {**nargs, **kwargs}``
    restricted to the kernel's parameters (``arg_names``); the key is the values of the ``key``
    arguments present, in ``key`` order, then ``str(arg.dtype)`` of each of those arguments that
    has a ``dtype``, in ``all_args`` order. So the dtypes follow the *call*: positional arguments
    in parameter order, then keyword arguments in the order passed (a heuristics layer above the
    autotuner adds its values last, in decorator order); one launch called with its tensors as
    keywords in two orders has two keys.
    """
    names = frozenset(tuner.arg_names)
    keys = autotuner_key_names(tuner)

    def key(nargs: dict[str, Any], kwargs: dict[str, Any]) -> tuple:
        every = {**nargs, **kwargs} if kwargs else nargs
        args = {k: v for k, v in every.items() if k in names}
        out = [args[k] for k in keys if k in args]
        out += [str(v.dtype) for v in args.values() if hasattr(v, "dtype")]
        return tuple(out)

    return key


def tuning_key(tuner: Any, nargs: dict[str, Any], kwargs: dict[str, Any] | None = None) -> tuple:
    """``tuning_key_function(tuner)(nargs, kwargs or {})``: the key of one ``Autotuner.run`` call."""
    return tuning_key_function(tuner)(nargs, kwargs or {})


def layer_arg_names(obj: Any) -> tuple[str, ...]:
    """The parameter names a ``triton.jit`` function (compiled or interpreted), an ``Autotuner``
    or a ``Heuristics`` binds positional arguments to, in order (``arg_names``)."""
    return tuple(obj.arg_names)


def config_cannot_run(error: BaseException) -> bool:
    """True for an error that Triton's autotuner takes to mean "this config cannot run here" and
    skips while benchmarking (``Autotuner._bench`` times it as ``inf``; Triton 3.6):
    ``OutOfResources`` (shared memory, threads), ``PTXASError``, ``CompileTimeAssertionFailure``."""
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    return isinstance(error, (OutOfResources, PTXASError, CompileTimeAssertionFailure))


def autotuner_cached(tuner: Any, key: tuple) -> bool:
    """True when the autotuner's own cache has a choice for ``key`` (its ``run`` will not benchmark)."""
    return key in tuner.cache


def bench_config(tuner: Any, named: dict[str, Any], config: Any, grid: Any) -> float:
    """Benchmark one config as the autotuner does (``Autotuner._bench``: the config's
    ``pre_hook``, the autotuner's ``pre_hook``/``post_hook`` with ``reset_to_zero`` and
    ``restore_value``, its ``do_bench``); returns the median in milliseconds (``inf`` where
    Triton's benchmark reports the config cannot run: out of resources, a failed assertion)."""
    saved = tuner.nargs if hasattr(tuner, "nargs") else None
    tuner.nargs = dict(named)
    try:
        meta = {k: v for k, v in named.items() if k not in config.kwargs}
        timings = tuner._bench(config=config, grid=grid, warmup=False, **meta)
    finally:
        tuner.nargs = saved
    return float(timings[0] if isinstance(timings, (list, tuple)) else timings)


def autotuner_choices(tuner: Any) -> dict[tuple, Any]:
    """The autotuner's own cache: tuning key -> the ``Config`` it chose (``Autotuner.cache``)."""
    return dict(tuner.cache)


def fill_autotuner_cache(tuner: Any, key: tuple, config: Any) -> None:
    """Put ``config`` in the autotuner's own cache under ``key``: its ``run`` then launches it
    without benchmarking (``Autotuner.cache``)."""
    tuner.cache[key] = config


def drop_autotuner_cache(tuner: Any, key: tuple) -> None:
    """Remove ``key`` from the autotuner's own cache (nothing when it is not there)."""
    tuner.cache.pop(key, None)


def patch_autotuner_run(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Route ``Autotuner.run`` (the class's, so every autotuner whose class does not override it;
    3.6-3.9) through ``make(original)``, a function with its signature ``(self, *args, **kwargs)``.
    Returns the undo (patches nest: undo them in reverse order)."""
    original = _Autotuner.run
    _Autotuner.run = make(original)

    def restore() -> None:
        _Autotuner.run = original

    return restore


def benchmarks_with_driver(tuner: Any) -> bool:
    """True when the autotuner times its configs with the active driver's benchmarker (no
    ``do_bench`` of its own, no ``use_cuda_graph``: ``Autotuner._do_bench`` is None, 3.6-3.9)."""
    return getattr(tuner, "_do_bench", None) is None


@contextlib.contextmanager
def tunings_forgotten(tuner: Any) -> Iterator[None]:
    """While the block runs, the autotuner writes no tuning to Triton's disk cache (its
    ``cache_results``); at its end, the choices it made in the block leave its own cache
    (``Autotuner.cache``), those made before stay."""
    before = set(tuner.cache)
    saved = tuner.__dict__.get("cache_results", None)
    if saved:
        tuner.cache_results = False
    try:
        yield
    finally:
        if saved:
            tuner.cache_results = saved
        for key in [k for k in tuner.cache if k not in before]:
            del tuner.cache[key]


_BENCH_LISTENERS: list[Callable[[Any, Any, dict, int], None]] = []
_ORIGINAL_BENCH = _Autotuner._bench


def _listened_bench(self: Any, *args: Any, config: Any, **meta: Any) -> Any:
    named = {**(getattr(self, "nargs", None) or {}), **meta}
    for listener in tuple(_BENCH_LISTENERS):
        listener(self, config, named, id(getattr(self, "nargs", None)))  # may raise: nothing ran yet
    return _ORIGINAL_BENCH(self, *args, config=config, **meta)


def add_bench_listener(listener: Callable[[Any, Any, dict, int], None]) -> None:
    """Call ``listener(autotuner, config, named_args, run)`` before every config benchmark of every
    autotuner (``Autotuner._bench``, which ``run`` calls for each config of a new tuning key;
    ``named_args``: the run's arguments by name; ``run``: the same int for every config of one run).
    A listener that raises stops the benchmark before it starts."""
    if listener not in _BENCH_LISTENERS:
        _BENCH_LISTENERS.append(listener)
    _Autotuner._bench = _listened_bench


def remove_bench_listener(listener: Callable[[Any, Any, dict, int], None]) -> None:
    """Undo :func:`add_bench_listener` (the autotuner's own ``_bench`` is back with the last one)."""
    if listener in _BENCH_LISTENERS:
        _BENCH_LISTENERS.remove(listener)
    if not _BENCH_LISTENERS:
        _Autotuner._bench = _ORIGINAL_BENCH
