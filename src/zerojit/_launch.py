"""The launch path behind ``@kernel_launcher``: argument plans and the fast path.

**Plans.** A launch maps the declarative ``__call__``'s inputs and ``LaunchSpec.kwargs`` to the
Triton function's parameters. For each kernel class and each tuple of ``LaunchSpec.kwargs`` names
a :class:`Plan` is generated once: a function that calls ``JITFunction.run`` with the parameter
values *positionally*, in parameter order, the kernel's own defaults filled in (exactly the
``bound_args`` Triton's binder builds), and the launch options as keywords in one order whatever
order they are given in (Triton's key spells them in call order; zerojit uses ``Config.all_kwargs``'
order, then the other options), so one set of options is one variant. Binding nine keywords twice (into ``run``, then into its binder)
costs more than the rest of zerojit's wrapper.

**The fast path** (``fast_path = True`` on a kernel class). Every warm-up launch of such a kernel
records its arguments with the ``CompiledKernel`` Triton returned for them (checked against
Triton's own key). A generated *key function* turns arguments into a tuple that refines Triton's
specialization: equal tuples imply equal Triton keys (same dtype, same 16-byte alignment where
specialized, same int class: equal to one / divisible by 16 / other, and the width i32 / i64 /
u64; same constexpr values *and types*; same launch options; same debug knobs). Each plan gets a
generated *fast launcher* built from the same guard and slot expressions: at run time a launch
whose tuple was recorded on the current device launches that kernel directly,
``compiled.run(grid, stream, function, packed_metadata, None, None, None, *args)`` with ``args``
the parameter values in order (constexprs included), exactly what ``JITFunction.run`` passes
(launch metadata and the two hooks are None: none is set, see below). Triton's binder, cache-key
string, launch metadata and option parsing are skipped. Anything unproven takes the normal path:

* an argument of a type the key does not model (a tensor subclass, a numpy scalar, a tuple), of a
  kind never seen at warm-up for that parameter, or of a class no warmed variant has;
* a constexpr of another type than at warm-up (``False`` where ``0`` was warmed), or one that is
  not an int, bool, str, None, float or ``tl.dtype``;
* other launch options, or ``TRITON_DEBUG`` / instrumentation / the function's ``debug`` changed;
* launch hooks set (``knobs.runtime.launch_enter_hook``/``launch_exit_hook`` not empty),
  ``pre_run_hooks`` on the function, or a global the kernel reads that changed since it compiled
  (Triton raises there; the normal path lets it); Triton 3.7 and later: a stages-inspection hook
  (it adds a custom-pipeline entry to Triton's key);
* a device that was not warmed, a warm-up in progress.

The knobs that join Triton's key and the launcher shortcut are Triton facts, bound from
:mod:`zerojit.triton_compat` when the code is generated (:data:`~zerojit.triton_compat.KEY_KNOBS_SOURCE`,
:func:`~zerojit.triton_compat.direct_launch`, :data:`~zerojit.triton_compat.DEVICE_POINTER_TEST`): a
``CudaLauncher`` without scratch memory has its C entry called directly, with the arguments
``CudaLauncher.__call__`` would pass it (3.6: the kernel's own entry; 3.7 and later: the shared
one), any other launcher through ``compiled.run``; a CUDA tensor goes as its address (the
``data_ptr()`` its alignment class was read from), which spares the launcher a driver query per
pointer, any other tensor as is.

**Finding the plan.** The launch entry calls the run (and fast launcher) of the plan used last;
each checks that ``LaunchSpec.kwargs`` has its names (their number, then each name) and hands a
launch with other names to the plan of those names, which then becomes the one called. So a call
site's plan costs one length test, not a tuple of names and a dict lookup per launch.

**The last hits.** A fast launcher remembers its last two hits and the table they came from, as
one value, and compares the next key with theirs before it looks in the table: a key launched
again (or one of two launched in turn) costs a tuple comparison instead of its hash and a lookup;
a third key pays the two comparisons on top. A record that gives a key another ``CompiledKernel``
replaces the device's table instead of changing it, so a remembered hit of the old one is never
used again.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import triton

from . import triton_compat as _tc
from .specialization import LAUNCH_OPTIONS, SpecClass, bind, spec_classes

__all__ = ["FastVariant", "LaunchState", "Plan", "FAST_PATH_ENV", "current_device"]

#: ``ZEROJIT_FAST_PATH=0`` turns the fast path off for the whole process (nothing is recorded).
FAST_PATH_ENV = "ZEROJIT_FAST_PATH"

_NO_OPTIONS: dict = {}  # shared, never mutated
_UNPROVABLE = object()  # a token no recorded key contains
_NOT_PRESENT = object()
_SAFE_CONST = frozenset({int, bool, str, type(None)})
_FAST_LOCK = threading.Lock()
# Launch options in the order a launch passes them: Config.all_kwargs' order, then the rest.
_OPTION_RANK = {o: i for i, o in enumerate(dict.fromkeys(_tc.CONFIG_OPTIONS + LAUNCH_OPTIONS))}


_torch_cuda = torch.cuda
# (driver, device getter) of the last driver asked; forgotten in a forked child (below).
_last_device_getter: tuple[Any, Callable] = (None, bool)


def current_device(drv: Any) -> Any:
    """``drv.get_current_device()``, the same value by a shorter route for Triton's CUDA driver.

    Triton's CUDA driver asks ``torch.cuda.current_device()``: two Python frames that end in
    ``torch._C._cuda_getDevice()`` once CUDA is initialized and the process is not a child forked
    after that (torch's "bad fork", where ``current_device`` raises). Once both hold, the launch
    path calls the C function itself. A forked child forgets it (:func:`os.register_at_fork`), so
    its first launch asks torch's fork check again: torch marks a child forked after CUDA was
    initialized in its own at-fork handler (``pthread_atfork``), which runs inside ``fork()``,
    before any Python code of the child.
    """
    global _last_device_getter
    last = _last_device_getter
    if last[0] is drv:
        return last[1]()
    get = drv.get_current_device
    if get is getattr(_torch_cuda, "current_device", None):
        bad_fork = getattr(_torch_cuda, "_is_in_bad_fork", None)
        c_get = getattr(torch._C, "_cuda_getDevice", None)
        if not (getattr(_torch_cuda, "_initialized", False) and callable(bad_fork) and callable(c_get)) or bad_fork():
            return get()  # not initialized yet (it initializes), or a bad fork (it raises): torch's own way
        get = c_get
    _last_device_getter = (drv, get)
    return get()


def _forget_device_getter() -> None:
    global _last_device_getter
    _last_device_getter = (None, bool)


if hasattr(os, "register_at_fork"):  # (no fork, nothing to forget: Windows)
    os.register_at_fork(after_in_child=_forget_device_getter)


def _fast_path_disabled() -> bool:
    return os.environ.get(FAST_PATH_ENV, "").strip().lower() in ("0", "off", "false", "no")


@dataclass(frozen=True)
class FastVariant:
    """A warmed Triton variant the fast path launches directly (recorded by a warm-up launch).

    Attributes:
        kernel: the zerojit kernel's name.
        triton_key: Triton's in-process cache key of the variant (what the normal path looks up).
        specialization: each kernel parameter's :class:`SpecClass`, in parameter order.
        param_names: the kernel parameters' names, in order.
        device: the device it was warmed on (Triton's device id; a string under compile-only).
        compiled: Triton's ``CompiledKernel`` (the same object the warm-up's
            :class:`~zerojit.kernel.CompiledVariant` holds; not compared).
    """

    kernel: str
    triton_key: str
    specialization: tuple[SpecClass, ...]
    param_names: tuple[str, ...]
    device: Any
    compiled: Any = field(default=None, compare=False, repr=False)


class _Entry:
    """A table entry: the variant and, once first launched, how to call its launcher and the
    launch observer's counter of it (:func:`zerojit.kernel.set_launch_observer`; None: call the observer)."""

    __slots__ = ("variant", "compiled", "direct", "counter", "__weakref__")

    def __init__(self, variant: FastVariant) -> None:
        self.variant = variant
        self.compiled = variant.compiled
        self.direct: Any = None  # None: not resolved; False: compiled.run(...); else see resolve()
        self.counter: Any = None

    def resolve(self) -> Any:
        """:func:`zerojit.triton_compat.direct_launch`'s tuple (the launcher's C entry is called
        directly), else False (``compiled.run(...)``). Loads the module and builds the launcher
        if warm-up did not."""
        direct = _tc.direct_launch(self.compiled)
        self.direct = False if direct is None else direct
        return self.direct


def _wide(v: int) -> Any:
    """The width token of an int outside int32 (2: i64, 3: u64; unprovable: Triton raises)."""
    if -(2**63) <= v < 2**63:
        return 2
    if 2**63 <= v < 2**64:
        return 3
    return _UNPROVABLE


def _const_token(v: Any) -> Any:
    c = v.__class__
    if c in _SAFE_CONST:
        return (c, v)
    if c is float:  # 0.0 == -0.0 but Triton's key spells them apart
        return (c, repr(v))
    if c is triton.language.dtype:
        return (c, v)
    return _UNPROVABLE


def _value_token(v: Any, specialize: bool, align: bool, annotated: bool) -> Any:
    """The class token of a non-constexpr argument whose kind varies between warm-ups."""
    c = v.__class__
    if c is torch.Tensor:
        return ("t", v.dtype, (not v.data_ptr() & 15) if specialize and align else None)
    if c is int:
        if annotated:
            width = True if -(2**63) <= v < 2**64 else _UNPROVABLE
        else:
            width = True if -(2**31) <= v < 2**31 else _wide(v)
        if not specialize:
            return ("i", width)
        return ("i", width, v == 1 if not align else ("one" if v == 1 else v & 15 == 0))
    if c is bool:
        return "b"
    if c is float:
        return "f"
    if v is None:
        return "n"
    return _UNPROVABLE


def _kind(kp: Any, v: Any) -> str:
    if kp.is_constexpr:
        return "const" if v.__class__ in _SAFE_CONST else "const*"
    ann = kp.annotation_type
    if ann and (ann == "u1" or ann[:2] in ("fp", "bf")):
        return "free"  # Triton never looks at the value
    c = v.__class__
    if c is torch.Tensor:
        return "tensor"
    if c is int:
        return "int"
    if c is bool:
        return "bool"
    if c is float:
        return "float"
    if v is None:
        return "none"
    return "any"


def _merge_kind(a: str | None, b: str) -> str:
    if a is None or a == b:
        return b
    return "const*" if b.startswith("const") else "any"


def _guards_and_slots(jit_fn: Any, kinds: list[str], values: list[str],
                      pointers: Mapping[int, str] | None = None) -> tuple[list[str], list[str]]:
    """Per parameter ``i`` (its value in the expression ``values[i]``, a local or a constant's
    name; a tensor's ``data_ptr()`` in the local ``pointers[i]`` where given): the type guards
    and the key slots.

    A guard proves the value is of the parameter's kind (what the slots assume); the slots then
    hold what Triton's specialization reads of it. The key function that records warm-ups and the
    fast launchers that look them up are generated from these same strings.
    """
    guards: list[str] = []
    slots: list[str] = []
    for i, (kp, kind, a) in enumerate(zip(jit_fn.params, kinds, values)):
        specialize = not kp.do_not_specialize
        align = not kp.do_not_specialize_on_alignment
        annotated = bool(kp.annotation_type)
        if kind == "const":  # every warm-up value was an int, bool, str or None: a value of
            slots += [f"{a}.__class__", a]  # another class cannot equal a recorded (class, value)
        elif kind == "const*":
            slots.append(f"_const_token({a})")
        elif kind == "free":
            pass
        elif kind == "tensor":
            guards.append(f"{a}.__class__ is _Tensor")
            slots.append(f"{a}.dtype")
            if specialize and align:
                slots.append(f"not {pointers[i] if pointers else f'{a}.data_ptr()'} & 15")
        elif kind == "int":
            guards.append(f"{a}.__class__ is _int")
            if annotated:
                slots.append(f"(-9223372036854775808 <= {a} <= 18446744073709551615 or _UNPROVABLE)")
            else:
                slots.append(f"(-2147483648 <= {a} <= 2147483647 or _wide({a}))")
            if specialize:
                slots.append(f"{a} == 1" if not align else f"('one' if {a} == 1 else {a} & 15 == 0)")
        elif kind == "bool":
            guards.append(f"{a}.__class__ is _bool")
        elif kind == "float":
            guards.append(f"{a}.__class__ is _float")
        elif kind == "none":
            guards.append(f"{a} is None")
        else:
            slots.append(f"_value_token({a}, {specialize}, {align}, {annotated})")
    return guards, slots


def _key_expr(slots: list[str], option_token: str) -> str:
    # the knobs of Triton's key (debug, instrumentation; 3.9: fpsan) come from triton_compat
    return "(" + "".join(f"{s}, " for s in slots) + f"{_tc.KEY_KNOBS_SOURCE}, _J.debug, {option_token})"


def _namespace(jit_fn: Any) -> dict[str, Any]:
    import sys

    return dict(
        _Tensor=torch.Tensor, _int=int, _bool=bool, _float=float, _wide=_wide,
        _UNPROVABLE=_UNPROVABLE, _const_token=_const_token, _value_token=_value_token, _J=jit_fn,
        _HookChain=_tc.HookChain, _NOT_PRESENT=_NOT_PRESENT, _zj_mod=sys.modules[__name__],
        _current_device=current_device, **_tc.KEY_KNOBS_NAMESPACE,
    )


def build_key_fn(jit_fn: Any, kinds: list[str]) -> Callable[[tuple, tuple], Any]:
    """``key(args, option_token)``: the hashable key a warm-up launch is recorded under (None when
    an argument is not of its parameter's kind). Equal keys imply equal Triton cache keys."""
    names = [f"_a{i}" for i in range(len(kinds))]
    guards, slots = _guards_and_slots(jit_fn, kinds, names)
    unpack = f"    {', '.join(names)}, = _p\n" if names else ""
    guard = f"    if not ({' and '.join(guards)}):\n        return None\n" if guards else ""
    src = f"def _zj_key(_p, _ot):\n{unpack}{guard}    return {_key_expr(slots, '_ot')}\n"
    namespace = _namespace(jit_fn)
    exec(compile(src, f"<zerojit fast-path key of {jit_fn.fn.__name__}>", "exec"), namespace)
    fn = namespace["_zj_key"]
    fn.source = src
    return fn


#: ``fast(SELECT, ...)`` selects the entry and launches nothing (:meth:`TritonJitKernel.select_variant`).
SELECT = object()


def _no_fast(*_: Any) -> None:
    """:attr:`LaunchState.fast_call` before any warm-up recorded a variant: the normal path."""

_FAST_TEMPLATE = """def _zj_fast(_dry, _drv, _grid, _sk{inputs}):
{names}{guard}    _getter = _zj_mod._last_device_getter
    _dev = _getter[1]() if _getter[0] is _drv else _current_device(_drv)
    _table = _tables.get(_dev)
    if _table is None:
        return None
    _key = {key}
    _hits = _last_hits[0]  # (table, key, entry, key, entry): its last two hits, one value
    try:
        if _hits[0] is not _table:
            _e = _table.get(_key)
            if _e is None:
                return None
            _last_hits[0] = (_table, _key, _e, None, None)
        elif _hits[1] == _key:  # the key of a recent hit: no hash to compute
            _e = _hits[2]
        elif _hits[3] == _key:
            _e = _hits[4]
        else:
            _e = _table.get(_key)
            if _e is None:
                return None
            _last_hits[0] = (_table, _key, _e, _hits[1], _hits[2])
    except TypeError:  # an unhashable constexpr or option value
        return None
    if _J.pre_run_hooks:
        return None
    _used = _J.used_global_vals
    if _used:  # Triton's check of the globals the kernel read, inline
        for (_name, _), (_value, _globals) in _used.items():
            if _globals.get(_name, _NOT_PRESENT) != _value:
                return None  # Triton raises "Global variable ... has changed": the normal path lets it
    _enter = _KR.launch_enter_hook
    _exit = _KR.launch_exit_hook
    if ((_enter is not None and (_enter.__class__ is not _HookChain or _enter.calls))
            or (_exit is not None and (_exit.__class__ is not _HookChain or _exit.calls))):
        return None  # hooks want launch metadata: the normal path builds it
    if not _dry:
        _stream = _drv.get_current_stream(_dev)
        _n = len(_grid)
        if _n == 1:
            _gx, = _grid
            _gy = _gz = 1
        else:
            _gx = _grid[0]
            _gy = _grid[1] if _n > 1 else 1
            _gz = _grid[2] if _n > 2 else 1
        _d = _e.direct
        if _d is None:
            _d = _e.resolve()
{launch}
    return _e
"""


def _names_check(plan: "Plan", retry: str) -> str:
    """Source that proves ``_sk`` has exactly ``plan``'s names (else ``retry``, another plan's
    turn) and reads their values: its length, then each name (a ``KeyError``: another name)."""
    src = f"    if len(_sk) != {len(plan.names)}:\n        return {retry}\n"
    if plan.names:
        reads = "".join(f"        _s{j} = _sk[{k!r}]\n" for j, k in enumerate(plan.names))
        src += f"    try:\n{reads}    except KeyError:\n        return {retry}\n"
    return src


def _launch_source(values: list[str], pointers: Mapping[int, str]) -> str:
    """The fast launcher's launch of the entry ``_e`` (``_d``: its direct-launch tuple or False),
    the arguments ``values``: when every tensor parameter holds a CUDA tensor, those go as their
    addresses (``pointers``, :data:`~zerojit.triton_compat.DEVICE_POINTER_TEST`); else all as they are."""
    def calls(args: list[str], indent: str) -> str:
        flat = "".join(f", {v}" for v in args)
        direct = _tc.DIRECT_LAUNCH_CALL.format(args=flat, arg_tuple="(" + "".join(f"{v}, " for v in args) + ")")
        return (f"{indent}if _d is False:\n{indent}    _c = _e.compiled\n{indent}    {_tc.COMPILED_RUN_CALL.format(args=flat)}\n"
                f"{indent}else:  # exactly the call the launcher's __call__ makes of its C entry (triton_compat)\n"
                + "".join(f"{indent}    {line}\n" for line in direct.splitlines()))

    if not pointers:
        return calls(values, "        ").rstrip("\n")
    on_device = " and ".join(_tc.DEVICE_POINTER_TEST.format(tensor=values[i]) for i in pointers)
    addresses = [pointers[i] if i in pointers else v for i, v in enumerate(values)]
    return (f"        if {on_device}:\n{calls(addresses, '            ')}"
            f"        else:\n{calls(values, '            ')}").rstrip("\n")


def build_fast_fn(jit_fn: Any, kinds: list[str], plan: "Plan", tables: dict, resolve: Callable) -> Callable:
    """The fast launcher of one plan: ``fast(dry, driver, grid, spec_kwargs, *inputs)``.

    Proves ``spec_kwargs`` has the plan's names (else hands the call to ``resolve``, which finds
    the plan of those names), builds the parameter values as the plan does, proves their classes
    (the guards and slots of :func:`build_key_fn`) and looks them up in ``tables[current
    device]``. Returns the table entry, or None (normal path) when there is none or the process
    state is not the one the variants were warmed in (launch hooks, ``pre_run_hooks``, changed
    globals, debug knobs). Unless ``dry`` (a compile-only driver, or :data:`SELECT`), it launches
    the entry's kernel with the parameter values in order, exactly the arguments
    ``JITFunction.run`` passes its launcher (launch metadata and hooks None).
    """
    inputs = "".join(f", _i{i}" for i in range(plan.num_inputs))
    retry = f"_resolve(_dry, _drv, _grid, _sk{inputs})"
    values = plan.values("_s")
    pointers = {i: f"_p{i}" for i, kind in enumerate(kinds) if kind == "tensor"}
    guards, slots = _guards_and_slots(jit_fn, kinds, values, pointers)
    guard = f"    if not ({' and '.join(guards)}):\n        return None\n" if guards else ""
    guard += "".join(f"    {p} = {values[i]}.data_ptr()\n" for i, p in pointers.items())
    options = [f"_s{plan.names.index(k)}" for k in plan.option_names]
    src = _FAST_TEMPLATE.format(inputs=inputs, names=_names_check(plan, retry), guard=guard,
                                key=_key_expr(slots, plan.option_token_of(options)),
                                launch=_launch_source(values, pointers))
    namespace = _namespace(jit_fn)
    namespace.update(plan.defaults, _tables=tables, _resolve=resolve, _last_hits=[(None,)])
    exec(compile(src, f"<zerojit fast path of {jit_fn.fn.__name__}>", "exec"), namespace)
    fn = namespace["_zj_fast"]
    fn.source = src
    return fn


def _provable(key: Any) -> bool:
    return key is not None and not any(t is _UNPROVABLE for t in key)


class _FastTables:
    """The fast path of one kernel class: recorded warm-up launches and the lookup tables.

    ``current`` is ``(kinds, tables, fast launchers by plan names)``, replaced as one value when a
    record brings a new kind for some parameter, so a reader always sees a consistent triple.
    """

    def __init__(self, state: "LaunchState") -> None:
        self.state = state  # whose plans' cached fast launchers a new kind invalidates
        self.jit_fn = state.jit_fn
        self.kinds: list[str | None] = [None] * len(self.jit_fn.params)
        self.key_fn: Callable | None = None
        self.records: list[tuple[Any, tuple, tuple, FastVariant]] = []
        self.current: tuple[list, dict, dict] = ([], {}, {})

    def record(self, device: Any, args: tuple, otoken: tuple, variant: FastVariant) -> None:
        with _FAST_LOCK:
            kinds = [_merge_kind(k, _kind(kp, v)) for k, kp, v in zip(self.kinds, self.jit_fn.params, args)]
            self.records.append((device, args, otoken, variant))
            if kinds != self.kinds:  # a new kind for some parameter: regenerate, re-key every record
                self.kinds = kinds
                self.key_fn = build_key_fn(self.jit_fn, kinds)
                tables: dict = {}
                for dev, a, ot, v in self.records:
                    self._put(tables, dev, a, ot, v)
                self.current = (kinds, tables, {})
                for plan in self.state.plans.values():  # launchers of the old tables: generate anew
                    plan.fast = None
                self.state.fast_call = self.state.resolve_fast
            else:
                self._put(self.current[1], device, args, otoken, variant)

    def _put(self, tables: dict, device: Any, args: tuple, otoken: tuple, variant: FastVariant) -> None:
        key = self.key_fn(args, otoken)
        if not _provable(key):
            return
        table = tables.setdefault(device, {})
        try:
            found = table.get(key)
        except TypeError:  # an unhashable option value: never fast
            return
        if found is None:
            table[key] = _Entry(variant)  # (no fast launcher can remember a key the table lacks)
        elif found.compiled is variant.compiled:
            found.variant = variant
        else:  # a new table: a fast launcher's last hit of this key is of the table it replaces
            tables[device] = {**table, key: _Entry(variant)}

    def launcher(self, plan: "Plan") -> Callable:
        """The fast launcher of ``plan`` for the current tables (generated once per plan, and kept
        on the plan until a record brings a new kind and regenerates the tables)."""
        kinds, tables, fns = self.current
        fn = fns.get(plan.names)
        if fn is None:
            fn = fns.setdefault(plan.names, build_fast_fn(self.jit_fn, kinds, plan, tables, self.state.resolve_fast))
        with _FAST_LOCK:  # keep it on the plan unless a record replaced the tables meanwhile
            if self.current[2] is fns:
                plan.fast = fn
        return fn

    def variants(self, device: Any = None) -> tuple[FastVariant, ...]:
        with _FAST_LOCK:
            return tuple(v for dev, _, _, v in self.records if device is None or dev == device)


class Plan:
    """How one kernel class maps inputs and ``LaunchSpec.kwargs`` with these names to parameters.

    Attributes:
        names: the ``LaunchSpec.kwargs`` names, in order (their values are read into the locals
            ``_s0, _s1, ...`` in that order).
        run: ``run(grid, warmup, spec_kwargs, *inputs)`` calls Triton's ``JITFunction.run`` with
            every parameter value positionally, in parameter order (the kernel's defaults filled
            in: what Triton's binder would bind), and the launch options as keywords in one order
            (part of Triton's key, order included). It first proves ``spec_kwargs`` has exactly
            these names; when not, it hands the launch to the plan of its names
            (:meth:`LaunchState.resolve_run`), so any plan's ``run`` launches any kwargs right.
        args: ``args(spec_kwargs, *inputs)`` returns ``(args, options, option_token)``: those
            values as a tuple, the options, and a hashable token of the options with their types.
        positional: the source of each parameter value, as ``("input", j)``, ``("kwarg", j)``
            (``names[j]``) or ``("default", name)`` (a parameter without any is refused when the
            plan is made: :meth:`LaunchState.plan`).
        option_names: the ``LaunchSpec.kwargs`` names that are launch options, in the order they
            are passed (``Config.all_kwargs``' order first). options: launch option -> its name.
        defaults: the kernel defaults the values refer to. num_inputs: the launcher's inputs.
        fast: the plan's fast launcher (see :func:`build_fast_fn`) once generated, else None.
    """

    __slots__ = ("names", "run", "args", "positional", "options", "option_names", "defaults", "num_inputs", "fast")

    def values(self, kwarg_prefix: str) -> list[str]:
        """Source of each parameter value: ``_i{j}`` (an input), ``{kwarg_prefix}{j}`` (a kwargs
        value read into a local) or the name of a kernel default."""
        return [f"_i{v}" if k == "input" else f"{kwarg_prefix}{v}" if k == "kwarg" else v for k, v in self.positional]

    def option_token_of(self, option_values: list[str]) -> str:
        """Source of the hashable token of the launch options (name, type, value each)."""
        return "(" + "".join(f"{o!r}, {v}.__class__, {v}, " for o, v in zip(self.options, option_values)) + ")"


class LaunchState:
    """Per kernel class: argument plans (one per set of ``LaunchSpec.kwargs`` names) and the fast path.

    The launch entry calls :attr:`run_call` and (fast path) :attr:`fast_call`: the functions of
    the plan used last, which check the kwargs names themselves and hand a launch with other
    names to :meth:`resolve_run` / :meth:`resolve_fast` (which then make that plan's the one
    called), so the common launch spends nothing on finding its plan.

    Args:
        cls: the :class:`~zerojit.kernel.TritonJitKernel` subclass.
        inputs: the launcher's inputs, ``(name, default)`` in order.
        arg_table: ``(input, parameter, default)`` of the inputs that map to kernel parameters.
        definition_error: the exception class of a kernel definition that cannot launch
            (:class:`~zerojit.kernel.KernelDefinitionError`, passed in: that module imports this one).
    """

    def __init__(self, cls: type, inputs: tuple, arg_table: tuple,
                 definition_error: type[Exception] = TypeError) -> None:
        self.cls = cls
        self.definition_error = definition_error
        self.jit_fn = cls.kernel
        self.wrapping = cls._wrapping  # an autotune/heuristics wrapping (the entry applies it), or None
        self.run = cls.kernel.run  # JITFunction.run, bound once
        self.param_names = tuple(inspect_params(cls.kernel))
        self.param_defaults = inspect_defaults(cls.kernel)
        # Triton 3.9's binder takes keyword-only parameters by keyword only (triton_compat)
        self.num_positional = _tc.positional_parameters(cls.kernel)
        self.input_index = {name: i for i, (name, _) in enumerate(inputs)}
        self.arg_table = arg_table
        self.plans: dict[tuple, Plan] = {}
        self.fast: _FastTables | None = None
        self.run_call: Callable[..., Any] = self.resolve_run
        self.fast_call: Callable[..., Any] = _no_fast

    def binder_args(self, args: tuple) -> tuple[tuple, dict]:
        """Parameter values in order (``Plan.args``) as ``(positional, keywords)`` for Triton's
        binder: keyword-only parameters by name."""
        n = self.num_positional
        if n == len(args):
            return args, {}
        return args[:n], dict(zip(self.param_names[n:], args[n:]))

    def cached(self, args: tuple, options: Mapping, device: Any) -> tuple[str, list, Any]:
        """Triton's own lookup of a launch with these parameter values (``Plan.args``) and
        options on ``device``: ``(in-process key, specialization, CompiledKernel or None)``.

        Raises: what Triton's binder raises for these arguments."""
        positional, keywords = self.binder_args(args)
        _, specialization, opts = bind(self.jit_fn, *positional, **keywords, **options)
        triton_key = _tc.in_process_key(specialization, opts)
        return triton_key, specialization, _tc.kernel_cache(self.jit_fn, device).get(triton_key)

    def fast_launcher(self, plan: Plan) -> Callable | None:
        """``plan``'s fast launcher, or None when no warm-up recorded a variant of this class."""
        fast = self.fast
        return None if fast is None else fast.launcher(plan)

    def resolve_run(self, grid: Any, warmup: Any, sk: Mapping, *inputs: Any) -> Any:
        """``Plan.run`` of the plan of ``sk``'s names, which becomes :attr:`run_call`."""
        plan = self.plan(tuple(sk))
        self.run_call = plan.run
        return plan.run(grid, warmup, sk, *inputs)

    def resolve_fast(self, dry: Any, drv: Any, grid: Any, sk: Mapping, *inputs: Any) -> Any:
        """The fast launcher of the plan of ``sk``'s names (which becomes :attr:`fast_call`), called."""
        plan = self.plan(tuple(sk))
        fast = self.fast_launcher(plan)
        if fast is None:
            return None
        with _FAST_LOCK:  # only a launcher of the current tables (a record may have replaced them)
            if plan.fast is fast:
                self.fast_call = fast
        return fast(dry, drv, grid, sk, *inputs)

    # -- argument plans ----------------------------------------------------------------------------

    def plan(self, sk_names: tuple) -> Plan:
        """The :class:`Plan` for ``LaunchSpec.kwargs`` with these names (generated once).

        Raises:
            KernelDefinitionError: a ``LaunchSpec.kwargs`` name maps to no parameter or option,
                or a kernel parameter gets no value (no input, no kwarg, no default).
        """
        found = self.plans.get(sk_names)
        if found is not None:
            return found
        resolve = self.cls._resolve_kwarg
        params = self.param_names
        source: dict[str, tuple] = {}
        for name, param, _ in self.arg_table:
            source[param] = ("input", self.input_index[name])
        options: dict[str, int] = {}
        fn_name = self.jit_fn.fn.__name__
        for j, k in enumerate(sk_names):
            target = resolve(k)
            if target in params:
                source[target] = ("kwarg", j)  # (a kwarg of a mapped input's parameter replaces its value)
            else:
                options[target] = j
        # One variant whatever the order the options come in: Triton's Config.all_kwargs order first.
        options = dict(sorted(options.items(), key=lambda kv: _OPTION_RANK.get(kv[0], len(_OPTION_RANK))))
        defaults: dict[str, Any] = {}
        positional: list[tuple] = []
        for i, p in enumerate(params):
            if p in source:
                positional.append(source[p])
            elif p in self.param_defaults:
                defaults[f"_d{i}"] = self.param_defaults[p]
                positional.append(("default", f"_d{i}"))
            else:
                raise self.definition_error(
                    f"{self.cls.__name__}: parameter {p!r} of {fn_name} gets no value: no input maps to it, "
                    f"LaunchSpec.kwargs {list(sk_names)} has no {p!r} (nor a name that maps to it) and it has no "
                    "default; pass it in LaunchSpec.kwargs")
        plan = Plan()
        plan.names, plan.positional, plan.defaults = sk_names, positional, defaults
        plan.options = {o: sk_names[j] for o, j in options.items()}
        plan.option_names = tuple(plan.options.values())
        plan.num_inputs, plan.fast = len(self.input_index), None
        inputs = "".join(f", _i{i}" for i in range(plan.num_inputs))
        retry = f"_resolve(_grid, _warmup, _sk{inputs})"
        opt_kw = "".join(f", {o}=_s{j}" for o, j in options.items())
        run = [f"def _zj_run(_grid, _warmup, _sk{inputs}):", _names_check(plan, retry).rstrip("\n")]
        args = [f"def _zj_args(_sk{inputs}):"] + [f"    _s{j} = _sk[{k!r}]" for j, k in enumerate(sk_names)]
        opts = "{" + ", ".join(f"{o!r}: _s{j}" for o, j in options.items()) + "}" if options else "_NO_OPTIONS"
        token = plan.option_token_of([f"_s{j}" for j in options.values()])
        values = plan.values("_s")
        n = self.num_positional  # keyword-only parameters go by name
        call = "".join(f"{e}, " for e in values[:n]) + "".join(f"{params[i]}={e}, " for i, e in enumerate(values[n:], start=n))
        run.append(f"    return _run({call}grid=_grid, warmup=_warmup{opt_kw})")
        args.append(f"    return ({''.join(f'{e}, ' for e in values)}), {opts}, {token}")
        src = "\n".join(run) + "\n\n" + "\n".join(args) + "\n"
        namespace: dict[str, Any] = {"_NO_OPTIONS": _NO_OPTIONS, "_run": self.run, "_resolve": self.resolve_run,
                                     **defaults}
        exec(compile(src, f"<zerojit plan of {self.cls.__name__}>", "exec"), namespace)
        plan.run, plan.args = namespace["_zj_run"], namespace["_zj_args"]
        plan.run.source = plan.args.source = src
        return self.plans.setdefault(sk_names, plan)

    # -- the fast path ---------------------------------------------------------------------------

    def record(self, kernel: Any, device: Any, compiled: Any, args: tuple, options: Mapping, otoken: tuple) -> None:
        """Record a warm-up launch's arguments and the ``CompiledKernel`` Triton returned for them.

        Recorded only when Triton's own lookup of these arguments yields ``compiled`` (so the
        table never holds anything Triton would not launch for them).
        """
        if compiled is None or _tc.is_pending(compiled) or _fast_path_disabled():
            return
        if len(args) != len(self.param_names):
            return
        jit = self.jit_fn
        try:
            triton_key, specialization, cached = self.cached(args, options, device)
        except Exception:
            return
        if cached is not compiled:
            return
        variant = FastVariant(
            kernel=kernel.name,
            triton_key=triton_key,
            specialization=spec_classes(jit, specialization),
            param_names=self.param_names,
            device=device,
            compiled=compiled,
        )
        with _FAST_LOCK:
            if self.fast is None:
                self.fast = _FastTables(self)
        self.fast.record(device, args, otoken, variant)


def inspect_params(jit_fn: Any) -> list[str]:
    import inspect

    return list(inspect.signature(jit_fn.fn).parameters)


def inspect_defaults(jit_fn: Any) -> dict[str, Any]:
    import inspect

    return {n: p.default for n, p in inspect.signature(jit_fn.fn).parameters.items()
            if p.default is not inspect.Parameter.empty}

