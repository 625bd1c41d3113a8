"""A contract kernel's launcher as a PyTorch custom op: zerojit kernels inside ``torch.compile``.

``as_custom_op(kernel)`` registers ``torch.ops.zerojit.<kernel name>``, a
``torch.library.custom_op`` (opaque to Dynamo, AOT autograd and Inductor: one node in the graph):

* its implementation is the kernel's zerojit launcher (``kernel(**inputs)``): the same checks, the
  same compile keys, the warmed variants, the monitor's counts (a compile here is a runtime
  compile, as anywhere);
* its fake implementation (``register_fake``) runs the launcher's declarative ``__call__`` (the
  checks, then the body that allocates the outputs) on the fake tensors and returns
  ``LaunchSpec.returns`` without launching. zerojit's alignment checks and facts read
  ``data_ptr()``, which a fake tensor has no address for: the checks' reference path sees fake
  inputs and reads no address (``x.data_ptr()`` is 0 there, ``is_aligned(x)`` True: the aligned
  class; :mod:`zerojit.inputs`); the real launch checks the real addresses.

The op's signature is the launcher's, in its order: tensors (``Tensor``, ``Tensor?`` for an
optional one), ints as ``SymInt`` (a size marked dynamic stays symbolic), bools, and the same
defaults. What it returns: the new tensors of ``LaunchSpec.returns`` as a list, in order, None
entries left out; a returned input is a buffer the launch writes into, which a custom op may not
return (an output aliasing an input): it must be declared in ``mutates_args`` and is left out of
the list (:class:`ZerojitOp` calls the op and gives the launcher's own return value back). An op
with mutated inputs returns nothing (``-> ()``: functionalization takes no list output beside
them), so its launch may return nothing but those inputs.
A launcher that reads tensor values on the host (``int(t.max())``) cannot do so while Dynamo
traces: such values are arguments of the launcher already (``host_values``) and must be passed
in a compiled region, where their absence is an error naming them.

``triton_op`` + ``wrap_triton`` (Inductor sees into the kernel) is not offered: Inductor
recompiles the Triton source with its own specialization and cache, outside zerojit's warm-up,
its keys and its monitor (docs/engine-modes.md).
"""

from __future__ import annotations

import inspect
import keyword
import linecache
import re
import threading
from typing import Any, Callable, Iterable, Mapping

import torch

from zerojit import kernel as _contract
from zerojit import torch_compat
from zerojit.inputs import BoolArg, IntArg, Require, TensorArg
from zerojit.kernel import KernelDefinitionError, KernelInputError

__all__ = ["NAMESPACE", "ZerojitOp", "as_custom_op", "registered_ops"]

#: The ``torch.library`` namespace of zerojit's ops: ``torch.ops.zerojit.<name>``.
NAMESPACE = "zerojit"

_REGISTERED: dict[str, "ZerojitOp"] = {}
_LOCK = threading.Lock()
_NO_DEFAULT = inspect.Parameter.empty
#: the argument types of a torch.library schema ``types=`` may name (a list: ``[]``; optional: ``?``)
_SCHEMA_TYPE = re.compile(r"(Tensor|SymInt|int|float|bool|str|Scalar|ScalarType|Device|Layout|MemoryFormat)"
                          r"(\[\])?\??")


class ZerojitOp:
    """A kernel registered as ``torch.ops.zerojit.<name>``; call it as the launcher is called.

    Attributes:
        kernel: the contract kernel. name: the op's name. qualname: ``"zerojit::<name>"``.
        op: ``torch.ops.zerojit.<name>`` (positional arguments in :attr:`inputs` order; returns
            the list of new output tensors).
        inputs: ``(name, default)`` of the launcher's inputs (default ``inspect.Parameter.empty``
            for a required one).
        mutates: the inputs the launch writes into (``mutates_args``).
        host_values: the inputs a compiled region must pass (the launcher would read them from
            a tensor's values).
        schema: the op's schema string. types: each input's schema type, by name.
    """

    def __init__(self, kernel: Any, name: str, inputs: tuple, mutates: tuple[str, ...], host_values: tuple[str, ...],
                 schema: str, restore: Callable[[list, dict], Any] | None, types: Mapping[str, str],
                 declared_types: Mapping[str, str] | None = None) -> None:
        self.kernel, self.name, self.inputs, self.types = kernel, name, inputs, dict(types)
        self.qualname = f"{NAMESPACE}::{name}"
        self.mutates, self.host_values, self.schema = mutates, host_values, schema
        self._restore = restore
        self._declared_types = dict(declared_types or {})  # as_custom_op's types=, to tell a redefinition
        self._names = frozenset(n for n, _ in inputs)
        self.op: Any = None  # set once registered

    def bind(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Every input by name, defaults filled in.

        Raises:
            TypeError: an unknown input, or a required one missing (naming the op).
        """
        unknown = set(inputs) - self._names
        if unknown:
            raise TypeError(f"{self.qualname}: unknown input(s) {sorted(unknown)}; it takes {[n for n, _ in self.inputs]}")
        bound = {}
        for n, default in self.inputs:
            if n in inputs:
                bound[n] = inputs[n]
            elif default is _NO_DEFAULT:
                raise TypeError(f"{self.qualname}: missing input {n!r}")
            else:
                bound[n] = default
        return bound

    def __call__(self, **inputs: Any) -> Any:
        """Call the op with the launcher's keyword inputs; returns what the launcher returns
        (``restore`` of the op's output list: by default the one tensor, or a tuple of them)."""
        bound = self.bind(inputs)
        result = self.op(*bound.values())
        outs = [] if result is None else list(result)
        if self._restore is not None:
            return self._restore(outs, bound)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake_returns(self, **inputs: Any) -> Any:
        """``LaunchSpec.returns`` of these (fake or real) inputs, from the launcher's declarative
        ``__call__``, launching nothing (what the fake implementation returns, before its list)."""
        return _declared_returns(self, self.bind(inputs))

    def __repr__(self) -> str:
        return f"<ZerojitOp {self.qualname} of {self.kernel!r}>"


def registered_ops() -> dict[str, ZerojitOp]:
    """The ops :func:`as_custom_op` registered in this process, by name."""
    with _LOCK:
        return dict(_REGISTERED)


def _launcher(kernel: Any) -> Any:
    if isinstance(kernel, type) and getattr(getattr(kernel, "__call__", None), "_zerojit_inputs", None) is not None:
        raise KernelDefinitionError(f"as_custom_op: {kernel.__name__} is a kernel class: pass an instance "
                                    f"({kernel.__name__}(), the one the serving code launches)")
    launcher = getattr(type(kernel), "__call__", None)
    if getattr(launcher, "_zerojit_inputs", None) is None:
        raise KernelDefinitionError(f"as_custom_op: {kernel!r} has no zerojit launcher (a __call__ decorated with "
                                    "@kernel_launcher or @checked_launcher)")
    return launcher


def _annotation(p: inspect.Parameter) -> str:
    a = p.annotation
    return "" if a is _NO_DEFAULT else (a if isinstance(a, str) else getattr(a, "__name__", str(a)))


def _optional(note: str) -> bool:
    """Whether an annotation's text says the value may be None (``X | None``, ``Optional[X]``)."""
    return bool(re.search(r"\bNone\b|\bOptional\[", note))


def _infer_types(kernel: Any, types: Mapping[str, str]) -> list[tuple[str, Any, str]]:
    """``(input, default, schema type)`` per launcher input, in order (see the module docstring)."""
    launcher = _launcher(kernel)
    checked = getattr(launcher, "_zerojit_checked", None)
    body = checked.body if checked is not None else launcher._zerojit_method
    params = {p.name: p for p in inspect.signature(body).parameters.values()}
    elements = checked.elements if checked is not None else ()
    tensors = {e.name: e.when for e in elements if isinstance(e, TensorArg)}
    bools = {e.name for e in elements if isinstance(e, BoolArg)}
    # an IntArg, or a Require whose condition says is_int(name)
    ints = {e.name for e in elements if isinstance(e, IntArg)} | {
        m for e in elements if isinstance(e, Require) for m in re.findall(r"is_int\((\w+)\)", e.condition)}
    out = []
    for n, default in launcher._zerojit_inputs:
        default = _NO_DEFAULT if default is _contract._MISSING else default
        note = _annotation(params[n]) if n in params else ""
        if n in types:
            t = types[n]
        elif n in tensors or "Tensor" in note:
            t = "Tensor?" if tensors.get(n) or default is None or _optional(note) else "Tensor"
        elif n in bools or "bool" in note or isinstance(default, bool):
            t = "bool"
        elif "float" in note or isinstance(default, float):
            t = "float"
        elif n in ints or "int" in note or isinstance(default, int):
            t = "SymInt"
        else:
            raise KernelDefinitionError(f"as_custom_op({kernel.name}): cannot tell the type of input {n!r}; "
                                        f"pass types={{{n!r}: 'SymInt' | 'Tensor' | 'bool' | ...}}")
        # X | None, Optional[X] (or a None default): the schema's optional type, or torch's
        # argument parser refuses None
        if (default is None or _optional(note)) and not t.endswith("?"):
            t += "?"
        out.append((n, default, t))
    return out


def _schema(kernel: Any, name: str, typed: list[tuple[str, Any, str]], mutates: tuple[str, ...]) -> str:
    args, seen_default = [], False
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    for n, default, t in typed:
        if n in mutates:
            if not t.startswith("Tensor"):
                raise KernelDefinitionError(f"as_custom_op({name}): mutates_args names {n!r}, which is no tensor")
            t = t.replace("Tensor", f"Tensor({next(letters)}!)", 1)
        if default is _NO_DEFAULT:
            if seen_default:
                raise KernelDefinitionError(f"as_custom_op({name}): required input {n!r} follows an input with a "
                                            "default; a custom op's schema needs the defaults last")
            args.append(f"{t} {n}")
        else:
            seen_default = True
            args.append(f"{t} {n}={default!r}")
    # Functionalization takes no list output beside mutated inputs (a list's tensors may alias
    # them): an op that writes into its inputs returns nothing.
    return f"({', '.join(args)}) -> {'()' if mutates else 'Tensor[]'}"


def _new_outputs(op: ZerojitOp, returns: Any, inputs: Mapping[str, Any]) -> list | None:
    """The tensors of ``returns`` an op returns: new ones, in order; None left out; an input
    (written in place) left out, after checking it is declared mutated. An op with mutated
    inputs returns None (schema ``-> ()``), and its launch may return nothing new."""
    items = returns if isinstance(returns, (tuple, list)) else (returns,)
    outs = []
    for r in items:
        if r is None:
            continue
        if not isinstance(r, torch.Tensor):
            raise KernelDefinitionError(f"{op.qualname}: LaunchSpec.returns holds a {type(r).__name__}; "
                                        "a custom op returns tensors only")
        written = [n for n, v in inputs.items() if v is r]
        if written:
            if written[0] not in op.mutates:
                raise KernelDefinitionError(f"{op.qualname}: the launch returns its input {written[0]!r}, a buffer "
                                            "it writes: declare it in as_custom_op(..., mutates_args=...)")
            continue
        if op.mutates:
            raise KernelDefinitionError(f"{op.qualname}: the launch writes into {', '.join(op.mutates)} and returns a "
                                        "new tensor too; an op that writes into its inputs returns nothing else")
        outs.append(r)
    return None if op.mutates else outs


def _declared_returns(op: ZerojitOp, inputs: dict[str, Any]) -> Any:
    """The launcher's declarative ``__call__`` (checks, then the body), no launch."""
    method = _launcher(op.kernel)._zerojit_method
    try:
        spec = method(op.kernel, **inputs)
    except torch_compat.data_dependent_errors() as e:
        missing = [n for n in op.host_values if inputs.get(n) is None]
        if missing:
            raise KernelInputError(op.kernel.name, missing[0], (
                f"inside torch.compile the launcher cannot read tensor values on the host ({type(e).__name__}); "
                f"pass {' and '.join(missing)} to {op.qualname} as host ints")) from None
        sized = [n for n, v in inputs.items() if isinstance(v, torch.Tensor) and torch_compat.has_data_dependent_size(v)]
        if sized:
            raise KernelInputError(op.kernel.name, sized[0], (
                f"its checks compare a size that depends on tensor values ({str(e).splitlines()[0]}); give the op "
                "inputs whose sizes come from the host (e.g. repeat_interleave(..., output_size=n))")) from None
        raise _host_read_error(op, inputs, e) from None
    return spec.returns


def _host_read_error(op: ZerojitOp, inputs: Mapping[str, Any], error: BaseException) -> KernelInputError:
    """The launcher read a tensor's values on the host while traced, with no host value declared
    to pass instead: name the tensor (the tensor inputs on the launcher's line that read it) and the
    inputs left None that could carry the value, when they can be told."""
    launcher = _launcher(op.kernel)
    checked = getattr(launcher, "_zerojit_checked", None)
    code = inspect.unwrap(checked.body if checked is not None else launcher._zerojit_method).__code__
    line, tb = "", error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            line = linecache.getline(code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    read = [n for n, v in inputs.items() if isinstance(v, torch.Tensor) and re.search(rf"\b{n}\b", line)]
    # torch may leave trailing defaults out of the fake implementation's arguments
    unset = [n for n, v in op.bind(inputs).items() if v is None and not op.types[n].startswith("Tensor")]
    what = f"{' or '.join(read)}'s values" if read else "a tensor's values"
    carry = ("the value it reads (perhaps " + " or ".join(repr(n) for n in unset) + ")" if unset
             else "the value it reads")
    return KernelInputError(op.kernel.name, read[0] if read else "(a tensor's values)", (
        f"the launcher of {op.kernel.name} reads {what} on the host during tracing (line: {line.strip() or '?'}; "
        f"{type(error).__name__}), which torch.compile cannot do: make {carry} an argument of the launcher, declare "
        f"it in as_custom_op(..., host_values=(...)) and pass it to {op.qualname}"))


def as_custom_op(kernel: Any, name: str | None = None, *, mutates_args: Iterable[str] = (),
                 host_values: Iterable[str] = (), types: Mapping[str, str] | None = None,
                 restore: Callable[[list, dict], Any] | None = None) -> ZerojitOp:
    """Register ``kernel``'s launcher as ``torch.ops.zerojit.<name>`` (see the module docstring).

    Args:
        kernel: a contract kernel whose ``__call__`` is a ``@kernel_launcher`` or
            ``@checked_launcher`` (its declarative body returns a ``LaunchSpec``).
        name: the op's name (default: ``kernel.name``, the Triton function's name).
        mutates_args: the tensor inputs the launch writes into (output buffers passed in). Get
            this right: an undeclared write is invisible to Dynamo and AOT autograd, which may
            reorder or drop it. A returned input not declared here is an error at the first trace.
        host_values: inputs the launcher otherwise computes from tensor values on the host; a
            traced call without them raises :class:`~zerojit.kernel.KernelInputError` naming them.
        types: schema types for inputs the launcher's checks and annotations do not tell
            (``{"ratio": "SymInt"}``).
        restore: ``restore(outputs, inputs) -> value``: the launcher's return value from the op's
            output list and the bound inputs (default: the one tensor, or a tuple).

    Returns:
        the :class:`ZerojitOp`; the same one again for the same kernel, name, ``mutates_args``,
        ``host_values``, ``types`` and ``restore`` (the same object).

    Raises:
        TypeError: ``mutates_args`` or ``host_values`` is a str, bytes or None, not a tuple of
            input names (``torch.library.custom_op``'s ``mutates_args="unknown"`` included: name
            the writes).
        KernelDefinitionError: no zerojit launcher (or a kernel class, not an instance); an
            input whose type cannot be told; a mutated input that is no tensor or no input;
            defaults not last; ``types`` naming no input or giving no schema type.
        ValueError: ``name`` is no plain identifier (``"a.b"``, ``"ns::x"``, ``""``), or is
            already an op of another kernel or declaration (any argument above differing).
    """
    launcher = _launcher(kernel)
    if name is None:
        name = kernel.name
    elif not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"as_custom_op: name={name!r} is no plain identifier (letters, digits, _; the op is "
                         f"{NAMESPACE}::<name>, so no namespace and no dots)")
    for arg, names in (("mutates_args", mutates_args), ("host_values", host_values)):
        if names == "unknown" and arg == "mutates_args":  # torch.library.custom_op's "writes anything"
            raise TypeError("as_custom_op: mutates_args='unknown' is not taken: name the tensor inputs the launch "
                            "writes into, mutates_args=('out',)")
        if isinstance(names, (str, bytes)):  # (a str iterates its letters)
            raise TypeError(f"as_custom_op: {arg}={names!r} is a {type(names).__name__}: pass a tuple of input "
                            f"names, {arg}=({names!r},)")
        if not isinstance(names, Iterable):
            raise TypeError(f"as_custom_op: {arg}={names!r}: pass a tuple of input names (or leave it out: none)")
    mutates = tuple(mutates_args)
    host_values = tuple(host_values)
    types = dict(types or {})
    with _LOCK:
        found = _REGISTERED.get(name)
        if found is not None:
            differ = [arg for arg, same in (
                ("kernel", found.kernel is kernel), ("mutates_args", found.mutates == mutates),
                ("host_values", found.host_values == host_values), ("types", found._declared_types == types),
                ("restore", found._restore is restore)) if not same]
            if not differ:
                return found
            raise ValueError(f"as_custom_op: {NAMESPACE}::{name} is already registered with another "
                             f"{' and '.join(differ)} (for {found.kernel!r}, mutates_args={found.mutates}, "
                             f"host_values={found.host_values}, types={found._declared_types}, "
                             f"restore={found._restore!r}); a custom op cannot be redefined in a process: pass "
                             "another name")
        inputs = [n for n, _ in launcher._zerojit_inputs]
        for n, t in types.items():
            if n not in inputs:
                raise KernelDefinitionError(f"as_custom_op({name}): types names {n!r}, which is no input of "
                                            f"{kernel.name}'s launcher (its inputs: {', '.join(inputs)})")
            if not isinstance(t, str) or not _SCHEMA_TYPE.fullmatch(t):
                raise KernelDefinitionError(f"as_custom_op({name}): types[{n!r}] = {t!r} is no schema type "
                                            "(Tensor, SymInt, int, float, bool, str, ... with ? when optional)")
        typed = _infer_types(kernel, types)
        names = [n for n, _, _ in typed]
        for n in (*mutates, *host_values):
            if n not in names:
                raise KernelDefinitionError(f"as_custom_op({name}): {n!r} is no input of {kernel.name}'s launcher")
        schema = _schema(kernel, name, typed, mutates)
        op = ZerojitOp(kernel, name, tuple((n, d) for n, d, _ in typed), mutates, tuple(host_values), schema, restore,
                       {n: t for n, _, t in typed}, types)

        def implementation(*args: Any) -> list | None:
            inputs = dict(zip(names, args))
            return _new_outputs(op, kernel(**inputs), inputs)

        def fake(*args: Any) -> list | None:
            inputs = dict(zip(names, args))
            return _new_outputs(op, _declared_returns(op, inputs), inputs)

        custom = torch.library.custom_op(op.qualname, implementation, mutates_args=mutates, schema=schema)
        custom.register_fake(fake)
        op.op = getattr(getattr(torch.ops, NAMESPACE), name)
        _REGISTERED[name] = op
        return op
