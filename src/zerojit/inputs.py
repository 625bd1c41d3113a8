"""Declarative launch inputs: metadata checks, layout facts, and the memo from facts to compile key.

A kernel launcher states its launch signature once, in ``__call__``, and lists the checks of its
inputs beside it, in the order they run::

    class CompressedSlotMapping(CheckedKernel["CompressedSlotMapping.CompileKey"]):
        kernel = _compressed_slot_mapping_kernel          # the @triton.jit function
        ...                                                # CompileKey, dispatch, warm-up space

        @checked_launcher(
            TensorArg("seq_lens", 1),
            TensorArg("query_start_loc", 1, length="len(seq_lens) + 1"),
            TensorArg("block_table", 2),
            RowStrideInt32("block_table"),
            IntArg("num_tokens", high=INT32_MAX),
            IntArg("block_size", low=1),
            Require("ratio", "is_int(ratio) and ratio >= 1 and block_size % ratio == 0",
                    "must be an int >= 1 dividing block_size={block_size}, got {ratio!r}"),
        )
        def __call__(self, key, constexprs, *, query_start_loc, seq_lens, block_table, num_tokens,
                     ratio, block_size) -> LaunchSpec:  # dispatch(*, ratio, block_size) takes the facts
            out = torch.empty(num_tokens, dtype=torch.int64, device=seq_lens.device)
            return LaunchSpec(grid=(seq_lens.shape[0],), kwargs=dict(constexprs, slot_mapping=out),
                              returns=out)

**What a launch runs.** The keyword-only parameters of ``__call__`` are the launch inputs (names,
defaults, order: the public call signature). Before the body runs, the framework:

1. checks every input in the listed order, from metadata only (type, dtype, shape, strides,
   device; a Python int's value), never a tensor's values: reading those costs a device sync;
2. takes the *layout facts*, the parameters of the class's ``dispatch`` (each one a launch input
   of the same name, or a :class:`Let` of the checks), and looks them up in a per-instance memo;
3. on the first launch with these facts only: runs the checks that read nothing but facts,
   calls ``dispatch(**facts)`` for the :class:`~zerojit.kernel.TritonJitKernel` ``CompileKey``
   and builds the key's kernel arguments (``constexprs``, below), and remembers both (the
   warm-up does this beforehand for each point its key space traced: :meth:`CheckedKernel.finish_warmup`);
4. calls the body with ``(key, constexprs)`` and the inputs. The body allocates outputs and
   returns the :class:`~zerojit.kernel.LaunchSpec`, as with :func:`~zerojit.kernel.kernel_launcher`
   (which :func:`checked_launcher` applies: inputs still map to kernel parameters by name; a
   fact that names no kernel parameter, like ``ratio`` above, is consumed on the host, so it
   needs no ``host_only``).

``constexprs`` holds, for each ``CompileKey`` field named like a ``tl.constexpr`` parameter of
the kernel (as is, or upper-cased: ``ratio`` -> ``RATIO``) or like a launch option
(``num_warps``), that field's value under the parameter's name, unless a launch input already
maps to that parameter; plus whatever :meth:`CheckedKernel.extra_kwargs` returns for the key.

**Errors.** A failed check raises :class:`~zerojit.kernel.KernelInputError` ``(kernel, argument,
problem)``: ``"<kernel>: argument '<argument>': <problem>"``. The first failing check in the
listed order is the one reported, whichever inputs are wrong, so checks that compute with an
input (``block_size % ratio``) come after that input's own check. The standard problems read as
:func:`check_tensor`, :func:`check_int` and :func:`check_row_stride` write them.

**Cost.** The checks of a class compile, once, to one Python function with the launcher's own
signature: the common case (valid inputs, facts seen before) is straight-line attribute tests and
one dict lookup, no call per check; anything unusual (a failed test, a tensor subclass, an int
subclass, new facts, an exception inside a test) takes the *reference path*, which runs each
check's plain definition in order and raises the exact message (or, for valid inputs, returns
the same key). The generated tests read each tensor's shape and strides once and spell a few
expressions more cheaply, with the same value (see ``_Generator.fast``).

**Fake tensors.** ``torch.compile`` runs a custom op's fake implementation
(:mod:`zerojit.engine_modes.custom_ops`) through these checks with fake tensors, which have no
address: they take the reference path (a ``FakeTensor`` is no plain ``torch.Tensor``), where
``x.data_ptr()`` reads 0 and ``is_aligned(x)`` True (address checks pass, alignment facts take
the aligned class; the real launch checks real addresses), and a ``torch.SymInt`` is an int.

**Expressions.** ``length``, ``low``/``high``, ``condition``, ``when`` and :class:`Let` are Python
expressions over the launch inputs, the :class:`Let` names defined above them, the helpers
:func:`is_int`, :func:`~zerojit.specialization.is_aligned` and :data:`INT32_MAX`, the globals of
the kernel's module and the builtins; ``problem`` is an f-string template over the same names.
They are compiled when the class is created; a name that is none of those raises
:class:`~zerojit.kernel.KernelDefinitionError` then.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import torch

from . import torch_compat
from .keyspace import take_traced_points
from .kernel import KernelDefinitionError, KernelInputError, TritonJitKernel, kernel_launcher
from .specialization import LAUNCH_OPTIONS, is_aligned

__all__ = [
    "INT32_MAX",
    "is_int",
    "check_tensor",
    "check_int",
    "check_row_stride",
    "TensorArg",
    "IntArg",
    "BoolArg",
    "RowStrideInt32",
    "Require",
    "Let",
    "CheckedKernel",
    "checked_launcher",
]

KeyT = TypeVar("KeyT")

#: The largest value of an int32 kernel argument (a larger one would compile an int64 variant).
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------- reference checks
def is_int(v: Any) -> bool:
    """``v`` is a Python int and not a bool, or a ``torch.SymInt`` (a symbolic int: a size marked
    dynamic while ``torch.compile`` traces a custom op's fake implementation; never seen at a
    real launch, whose ints are concrete)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, torch.SymInt)


def check_tensor(
    kernel: str,
    arg: str,
    t: Any,
    *,
    ndim: int,
    dtype: torch.dtype = torch.int32,
    device: torch.device | None = None,
    device_of: str = "the other inputs",
    length: int | None = None,
    length_of: str | None = None,
) -> None:
    """``t`` is a ``torch.Tensor`` of ``dtype`` and ``ndim`` dimensions whose last dimension is
    contiguous (stride 1, or of size <= 1); strides of the other dimensions are free.

    Args:
        kernel, arg: the kernel's and the argument's names, for the message.
        t: the input.
        ndim: its number of dimensions (>= 1).
        dtype: its dtype (int32 unless given).
        device: the device it must be on (None: any), the one of the input named ``device_of``.
        length: the size its first dimension must have (None: any), described in the message
            by ``length_of`` (e.g. ``"T (rows of token_indices)"``).

    Raises:
        KernelInputError: in this order, ``"must be a torch.Tensor, got <type>"``, ``"must be
            <dtype>, got <dtype>"``, ``"must be <ndim>-D, got shape (...)"``, ``"is on <device>,
            <device_of> on <device>"``, ``"must be contiguous, got strides (...)"`` (1-D) or ``"its
            last dimension must be contiguous (stride 1), got strides (...)"``, ``"must have
            <length_of> = <length> entries, got <n>"``.
    """
    if (isinstance(t, torch.Tensor) and t.dtype == dtype and t.dim() == ndim  # the fast path: all good
            and (device is None or t.device == device) and (t.stride(-1) == 1 or t.shape[-1] <= 1)
            and (length is None or t.shape[0] == length)):
        return
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(kernel, arg, f"must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise KernelInputError(kernel, arg, f"must be {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise KernelInputError(kernel, arg, f"must be {ndim}-D, got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise KernelInputError(kernel, arg, f"is on {t.device}, {device_of} on {device}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        what = "must be contiguous" if ndim == 1 else "its last dimension must be contiguous (stride 1)"
        raise KernelInputError(kernel, arg, f"{what}, got strides {t.stride()}")
    if length is not None and t.shape[0] != length:
        expected = f"{length_of} = {length}" if length_of else f"{length}"
        raise KernelInputError(kernel, arg, f"must have {expected} entries, got {t.shape[0]}")


def check_int(kernel: str, arg: str, v: Any, *, low: int = 0, high: int | None = None) -> None:
    """``v`` is a Python int (not a bool) in ``[low, high]``, or ``>= low`` when ``high`` is None.

    Raises:
        KernelInputError: ``"must be an int >= low, got v"`` or ``"must be an int in [low, high],
            got v"`` (the range written ``[low, 2**31)`` for ``high=INT32_MAX``).
    """
    if (type(v) is int or is_int(v)) and v >= low and (high is None or v <= high):  # the fast path
        return
    if high is None:
        bound = f">= {low}"
    elif high == INT32_MAX:
        bound = f"in [{low}, 2**31)"
    else:
        bound = f"in [{low}, {high}]"
    raise KernelInputError(kernel, arg, f"must be an int {bound}, got {v!r}")


def check_row_stride(kernel: str, arg: str, t: torch.Tensor) -> int:
    """``t.stride(0)``, checked to fit the int32 the kernels take it as (a row stride is a
    ``do_not_specialize`` int whose width, i32 or i64, is still part of Triton's key).

    Raises:
        KernelInputError: ``"row stride <s> does not fit int32"`` for a row stride above
            :data:`INT32_MAX`.
    """
    stride = t.stride(0)
    if stride > INT32_MAX:
        raise KernelInputError(kernel, arg, f"row stride {stride} does not fit int32")
    return stride


# ----------------------------------------------------------------------------- expressions
#: Names every check expression may use besides the inputs, its Lets, module globals and builtins.
HELPERS: dict[str, Any] = {"is_int": is_int, "is_aligned": is_aligned, "INT32_MAX": INT32_MAX}


#: The name under which the reference path marks fake inputs in its namespace (see :func:`_eval`).
_FAKE = "_zj_fake"
#: The name of :func:`_length` in a fake-input namespace.
_LENGTH = "_zj_length"


def _length(x: Any) -> Any:
    """``len(x)`` as a fake tensor's check reads it: its first size, symbolic where
    ``torch.compile`` traces it dynamic (the builtin ``len`` must return a plain int, which pins
    the size to the traced one: a guard ``Eq(s0, 64)`` and a graph per size)."""
    return x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else len(x)  # (a 0-d tensor: len's TypeError)


class _AddressesUnknown(ast.NodeTransformer):
    """``x.data_ptr()`` -> ``0``, ``is_aligned(x)`` -> ``True`` and ``len(x)`` -> ``x.shape[0]``
    for a tensor: an expression as it reads fake tensors, whose addresses do not exist (so their
    alignment checks pass and their alignment facts take the aligned class; the real launch
    checks the real addresses) and whose sizes may be symbolic (:func:`_length`)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "data_ptr" and not node.args and not node.keywords:
            return ast.copy_location(ast.Constant(0), node)
        if isinstance(f, ast.Name) and f.id == "is_aligned":
            return ast.copy_location(ast.Constant(True), node)
        if isinstance(f, ast.Name) and f.id == "len" and len(node.args) == 1 and not node.keywords:
            return ast.copy_location(ast.Call(ast.Name(_LENGTH, ast.Load()), node.args, []), node)
        return node


def _eval(source: str, ns: dict, template: bool = False) -> Any:
    """Evaluate a check expression (or template) in ``ns``; with fake inputs (``ns[_FAKE]``, set
    by the reference path) the address-free version of it (:class:`_AddressesUnknown`)."""
    return eval(_parse(source, template, bool(ns.get(_FAKE)))[0], ns)


@functools.lru_cache(maxsize=None)
def _parse(source: str, template: bool = False, fake: bool = False) -> tuple[Any, frozenset[str]]:
    """Compile an expression (or an f-string template) once: its code and the free names it reads.

    ``fake``: the code for fake tensors, which reads no address (``torch.compile`` traces a custom
    op's fake implementation with them; their ``data_ptr()`` is 0 or an error, never an address:
    docs/engine-modes.md).

    Raises:
        KernelDefinitionError: not a Python expression (or template).
    """
    text = "f" + repr(source) if template else source
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        what = "problem template" if template else "expression"
        raise KernelDefinitionError(f"bad check {what} {source!r}: {e.msg}") from None
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound
    if fake:
        tree = ast.fix_missing_locations(_AddressesUnknown().visit(tree))
    return compile(tree, f"<zerojit check {source!r}>", "eval"), frozenset(names)


def _value(bound: int | str | None, ns: dict) -> Any:
    """A bound given as an int (itself) or an expression (evaluated in ``ns``)."""
    return bound if not isinstance(bound, str) else _eval(bound, ns)


def _source(bound: int | str) -> str:
    return bound if isinstance(bound, str) else repr(bound)


class _Element:
    """One step of a launcher's checks. Subclasses are frozen dataclasses with ``when``."""

    when: str | None

    def __post_init__(self) -> None:  # compile every expression now: a typo fails where it is written
        for source in self._decisions():
            _parse(source)
        for template in self._templates():
            _parse(template, True)

    def _expressions(self) -> tuple[str, ...]:
        """The step's own expressions (a length, bounds, a condition)."""
        return ()

    def _decisions(self) -> tuple[str, ...]:
        """The expressions that decide the step, ``when`` included: their names place it (per
        launch, or once per facts)."""
        return self._expressions() + ((self.when,) if self.when else ())

    def _templates(self) -> tuple[str, ...]:
        """Its message templates (read only to report a failure)."""
        return ()

    def _subject(self) -> str | None:
        """The input this step checks (None: it reads only its expressions)."""
        return getattr(self, "name", None)

    def _reads(self) -> frozenset[str]:
        names = {self._subject()} - {None}
        for source in self._decisions():
            names |= _parse(source)[1]
        return frozenset(names)

    def _fast(self, gen: "_Generator") -> str | None:
        """Source of a boolean test that is True only if :meth:`_check` passes (False: take the
        reference path, which decides)."""
        raise NotImplementedError

    def _guard(self, gen: "_Generator") -> str | None:
        """Per-launch source for an input whose other checks run once per facts: its exact type,
        so equal facts of another type (``4.0 == 4``) never reuse a memo entry."""
        return None

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        """The reference check over the inputs in ``ns``; raises :class:`KernelInputError`."""
        raise NotImplementedError


@dataclass(frozen=True)
class TensorArg(_Element):
    """A tensor input: type, dtype, ndim, last-dimension contiguity, device, optional length.

    Args:
        name: the input.
        ndim: its number of dimensions (>= 1).
        dtype: its dtype (torch.int32 unless given).
        length: an expression its first dimension must equal, e.g. ``"len(seq_lens) + 1"``.
        length_of: how the message names that length (default: the expression itself).
        when: an expression; the input is checked only where it is true (e.g. an optional input).

    The first ``TensorArg`` of a launcher (the *anchor*, which takes no ``when``) gives the device
    every other tensor input must be on. Messages: :func:`check_tensor`.
    """

    name: str
    ndim: int
    dtype: torch.dtype = torch.int32
    length: str | None = None
    length_of: str | None = None
    when: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.ndim, int) or self.ndim < 1:
            raise KernelDefinitionError(f"TensorArg({self.name!r}): ndim must be an int >= 1, got {self.ndim!r}")
        # None, a plain value or a collection (several dtypes) is no dtype: else every launch fails with "must be None,
        # got ...". (Not isinstance(torch.dtype): a compile worker's stand-in for torch names its dtypes.)
        if self.dtype is None or isinstance(self.dtype, (str, bytes, int, float, tuple, list, set, frozenset)):
            raise KernelDefinitionError(f"TensorArg({self.name!r}): dtype must be one torch.dtype, got {self.dtype!r} "
                                        "(for a kernel served in several dtypes, check the dtype with a Require instead and "
                                        "put it in the CompileKey)")
        super().__post_init__()

    def _expressions(self) -> tuple[str, ...]:
        return (self.length,) if self.length else ()

    def _fast(self, gen: "_Generator") -> str:
        x, last = self.name, self.ndim - 1
        test = "" if x in gen.cached else f"{x}.__class__ is _zj_Tensor and "  # else tested before the cache
        test += (f"{x}.dtype is {gen.const(self.dtype)} and {x}.ndim == {self.ndim}"
                 f" and ({x}.stride({last}) == 1 or {x}.shape[{last}] <= 1)")
        if gen.anchor != x:
            test += f" and {x}.device == _zj_dev"
        if self.length:
            test += f" and {x}.shape[0] == ({self.length})"
        return test

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        check_tensor(
            kernel, self.name, ns[self.name], ndim=self.ndim, dtype=self.dtype,
            device=None if anchor in (None, self.name) else ns[anchor].device, device_of=anchor or "",
            length=_value(self.length, ns) if self.length else None, length_of=self.length_of or self.length,
        )


@dataclass(frozen=True)
class IntArg(_Element):
    """An int input (not a bool) in ``[low, high]`` (``>= low`` when ``high`` is None).

    ``low`` and ``high`` are ints or expressions (``high="len(seq_lens)"``). An int argument of a
    kernel that must keep its int32 width says ``high=INT32_MAX``. Messages: :func:`check_int`.
    """

    name: str
    low: int | str = 0
    high: int | str | None = None
    when: str | None = None

    def _expressions(self) -> tuple[str, ...]:
        return tuple(b for b in (self.low, self.high) if isinstance(b, str))

    def _fast(self, gen: "_Generator") -> str:
        test = f"{self.name}.__class__ is _zj_int and ({_source(self.low)}) <= {self.name}"
        if self.high is not None:
            test += f" and {self.name} <= ({_source(self.high)})"
        return test

    def _guard(self, gen: "_Generator") -> str:
        return f"{self.name}.__class__ is _zj_int"

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        check_int(kernel, self.name, ns[self.name], low=_value(self.low, ns), high=_value(self.high, ns))


@dataclass(frozen=True)
class BoolArg(_Element):
    """A bool input. Message: ``"must be a bool, got <type>"``."""

    name: str
    when: str | None = None

    def _fast(self, gen: "_Generator") -> str:
        return f"{self.name}.__class__ is _zj_bool"

    _guard = _fast

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        v = ns[self.name]
        if not isinstance(v, bool):
            raise KernelInputError(kernel, self.name, f"must be a bool, got {type(v).__name__}")


@dataclass(frozen=True)
class RowStrideInt32(_Element):
    """A tensor input's row stride ``stride(0)`` fits int32, the width the kernel takes it at.

    Put it after the input's :class:`TensorArg`. Message: :func:`check_row_stride`.
    """

    name: str
    when: str | None = None

    def _fast(self, gen: "_Generator") -> str:
        return f"{self.name}.stride(0) <= {INT32_MAX}"

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        check_row_stride(kernel, self.name, ns[self.name])


@dataclass(frozen=True)
class Require(_Element):
    """A rule between inputs: ``condition`` must hold, else ``argument`` is reported with ``problem``.

    Args:
        argument: the input the message names.
        condition: an expression, e.g. ``"block_table.shape[0] >= len(seq_lens)"``.
        problem: an f-string template of the message's problem, e.g.
            ``"has {block_table.shape[0]} rows, fewer than the R = {len(seq_lens)} requests"``.
        when: an expression; the rule applies only where it is true.
    """

    argument: str
    condition: str
    problem: str
    when: str | None = None

    def _expressions(self) -> tuple[str, ...]:
        return (self.condition,)

    def _templates(self) -> tuple[str, ...]:
        return (self.problem,)

    def _subject(self) -> None:
        return None

    def _fast(self, gen: "_Generator") -> str:
        return self.condition

    def _check(self, kernel: str, ns: dict, anchor: str | None) -> None:
        if not _eval(self.condition, ns):
            raise KernelInputError(kernel, self.argument, _eval(self.problem, ns, True))


@dataclass(frozen=True)
class Let(_Element):
    """A named value for the checks below it and for ``dispatch``: ``Let("K", "token_indices.shape[1]")``.

    A ``Let`` named like a ``dispatch`` parameter is a layout fact (``indices_aligned``, the
    number of columns ``K``): computed on every launch, it is part of the memo key.
    """

    name: str
    expr: str
    when = None  # a Let is never conditional: its expression decides (``"a if flag else None"``)

    def __post_init__(self) -> None:
        if self.name.startswith("_zj_") or not self.name.isidentifier():
            raise KernelDefinitionError(f"Let({self.name!r}): not a usable name")
        super().__post_init__()

    def _expressions(self) -> tuple[str, ...]:
        return (self.expr,)

    def _subject(self) -> None:
        return None


# ----------------------------------------------------------------------------- the kernel class
class CheckedKernel(TritonJitKernel[KeyT]):
    """A :class:`~zerojit.kernel.TritonJitKernel` whose ``__call__`` is a :func:`checked_launcher`.

    Subclasses define what any ``TritonJitKernel`` defines (``kernel``, ``CompileKey``,
    ``dispatch``, ``get_warmup_keys``, ``warmup_inputs``) and a ``@checked_launcher``
    ``__call__(self, key, constexprs, *, inputs...)``; see the module docstring. They get
    :meth:`key_for`, and may define :meth:`extra_kwargs`.

    Raises (at class creation): :class:`~zerojit.kernel.KernelDefinitionError` for a
    ``dispatch`` parameter that is neither a launch input nor a :class:`Let`, a tensor input used
    as a fact, an unknown name in a check expression, a key field that maps to two parameters,
    or what ``TritonJitKernel`` refuses.
    """

    def __init_subclass__(cls, **kw: Any) -> None:
        pending = cls.__dict__.get("__call__")
        if isinstance(pending, _PendingLauncher):  # bound before TritonJitKernel maps the inputs
            setattr(cls, "__call__", _bind(cls, pending))
        super().__init_subclass__(**kw)

    def key_for(self, **inputs: Any) -> KeyT:
        """The compile key ``__call__`` would launch for these inputs, after the same checks.

        Raises:
            KernelInputError: what ``__call__`` raises for these inputs.
            TypeError: an unknown input or a missing required one.
        """
        return type(self).__call__._zerojit_key_for(self, **inputs)

    def _dispatched_key(self, check: Any) -> KeyT:
        """The key the checked warm-up launch dispatched: :meth:`key_for` of its inputs (the
        launcher's dispatch is memoized per set of facts, so it may not run in the launch)."""
        return self.key_for(**check.inputs)

    def fact_inputs(self, key: KeyT) -> dict[str, Any]:
        """The launch inputs that are ``dispatch`` facts named like fields of ``key``, with the
        key's values: the part of ``warmup_inputs(key)`` that only hands the key back
        (``dict(self.fact_inputs(key), seq_lens=WarmupTensor(...), ...)``)."""
        return {f: getattr(key, f) for f in type(self).__call__._zerojit_checked.key_facts}

    def extra_kwargs(self, key: KeyT) -> dict[str, Any]:
        """Kernel arguments and launch options ``key`` implies beyond its same-named fields (e.g.
        ``num_warps`` computed from a tile width); called once per distinct set of facts."""
        return {}

    def finish_warmup(self, keys: list) -> Any:
        """After :meth:`TritonJitKernel.finish_warmup <zerojit.kernel.TritonJitKernel.finish_warmup>`
        (whose result it returns), learn the facts of every point the key space traced whose key
        warmed (:func:`zerojit.keyspace.take_traced_points`), as a first launch at them would:
        the once-per-facts checks, ``dispatch``, the constexprs, the memo. A warmed key's first
        launch at a traced value is then a memo hit, as every later launch is (issue 33: a new
        value's miss branch was ~10 us of the first launch's host time on the CI machine). A point
        that fails a check, or dispatches another key, is left to its launch, which reports it.
        The memo is per instance and the registry warms one instance per class (the first
        registered, which traces every request of the class): another instance of the class
        learns its facts at its first launch, as without a warm-up."""
        coverage = super().finish_warmup(keys)
        type(self).__call__._zerojit_checked.learn_traced(self, take_traced_points(self), keys)
        return coverage


class _PendingLauncher:
    """What :func:`checked_launcher` returns: bound to its class by :class:`CheckedKernel`."""

    def __init__(self, body: Callable, elements: tuple, host_only: tuple[str, ...]) -> None:
        self.body, self.elements, self.host_only = body, elements, host_only

    def __set_name__(self, owner: type, name: str) -> None:
        if name != "__call__" or not issubclass(owner, CheckedKernel):
            raise KernelDefinitionError(
                f"{owner.__qualname__}.{name}: @checked_launcher decorates __call__ of a CheckedKernel subclass")


def checked_launcher(*checks: _Element, host_only: tuple[str, ...] = ()) -> Callable[[Callable], Any]:
    """Make ``__call__(self, key, constexprs, *, inputs...)`` a checked, memoised launch entry.

    Args:
        checks: :class:`TensorArg`, :class:`IntArg`, :class:`BoolArg`, :class:`RowStrideInt32`,
            :class:`Require` and :class:`Let` steps, run in this order (see the module docstring).
        host_only: inputs that map to no kernel parameter (as for
            :func:`~zerojit.kernel.kernel_launcher`), beyond the ``dispatch`` facts, which are
            host-only whenever no parameter is named after them.

    The decorated method takes the CompileKey and its ``constexprs`` dict positionally, then the
    launch inputs, keyword-only; it returns a :class:`~zerojit.kernel.LaunchSpec`. Callers see
    only the inputs: ``launcher(seq_lens=..., ...)``.

    Raises:
        KernelDefinitionError: a step that is not one of the above, or a method whose
            parameters are not ``self, key, constexprs, *, inputs...``.
    """
    for c in checks:
        if not isinstance(c, _Element):
            raise KernelDefinitionError(f"checked_launcher: {c!r} is not a check (TensorArg, IntArg, Require, ...)")

    def decorate(body: Callable) -> _PendingLauncher:
        params = list(inspect.signature(body).parameters.values())
        head = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        if len(head) != 3 or any(p.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                inspect.Parameter.KEYWORD_ONLY) for p in params):
            raise KernelDefinitionError(
                f"{body.__qualname__}: a checked launcher is def __call__(self, key, constexprs, *, inputs...)")
        return _PendingLauncher(body, tuple(checks), tuple(host_only))

    return decorate


class _Slow(Exception):
    """Raised inside the generated checks: take the reference path."""


class _Generator:
    """Source fragments of one launcher's generated checks.

    Attributes:
        anchor: the input whose device every tensor input must share (its device is ``_zj_dev``).
        tensors: the tensor inputs checked unconditionally.
        cached: those whose ``shape`` and ``stride()`` are read once, into ``_zj_<name>_shape`` and
            ``_zj_<name>_strides``, by the time the source being rewritten runs.
        consts: the constants the source names (``_zj_c0``: ``torch.int32``, ...).
    """

    def __init__(self, anchor: str | None, tensors: frozenset[str]) -> None:
        self.anchor = anchor
        self.tensors = tensors
        self.cached: set[str] = set()
        self.consts: dict[str, Any] = {}

    def const(self, value: Any) -> str:
        for name, v in self.consts.items():
            if v is value:
                return name
        name = f"_zj_c{len(self.consts)}"
        self.consts[name] = value
        return name

    def fast(self, source: str) -> str:
        """``source`` for the generated tests, reading the same values more cheaply.

        ``len(t)`` of a tensor input checked unconditionally above reads ``t.shape[0]``; once
        ``t``'s shape and strides are cached, ``t.shape``, ``t.ndim``, ``t.stride()`` and
        ``t.stride(k)`` read the cache (torch builds a new ``Size`` per ``t.shape``, and
        ``t.stride(k)`` costs twice ``t.stride()``); ``is_int(x)`` reads ``x.__class__ is int``
        (False for an int subclass, which the reference path then accepts).
        """
        tensors, cached = self.tensors, self.cached

        def name(text: str) -> ast.Name:
            return ast.Name(text, ast.Load())

        def shape(t: str) -> ast.AST:
            return name(f"_zj_{t}_shape") if t in cached else ast.Attribute(name(t), "shape", ast.Load())

        class Rewrite(ast.NodeTransformer):
            def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
                self.generic_visit(node)
                if isinstance(node.value, ast.Name) and node.value.id in cached and isinstance(node.ctx, ast.Load):
                    if node.attr == "shape":
                        return shape(node.value.id)
                    if node.attr == "ndim":
                        return ast.Call(name("len"), [shape(node.value.id)], [])
                return node

            def visit_Call(self, node: ast.Call) -> ast.AST:
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr == "stride" and isinstance(func.value, ast.Name)
                        and func.value.id in cached and not node.keywords and len(node.args) <= 1):
                    strides = name(f"_zj_{func.value.id}_strides")
                    return ast.Subscript(strides, self.visit(node.args[0]), ast.Load()) if node.args else strides
                self.generic_visit(node)
                if not (isinstance(func, ast.Name) and len(node.args) == 1 and not node.keywords
                        and isinstance(node.args[0], ast.Name)):
                    return node
                arg = node.args[0]
                if func.id == "len" and arg.id in tensors:
                    return ast.Subscript(shape(arg.id), ast.Constant(0), ast.Load())
                if func.id == "is_int":
                    return ast.Compare(ast.Attribute(arg, "__class__", ast.Load()), [ast.Is()], [name("_zj_int")])
                return node

        return ast.unparse(Rewrite().visit(ast.parse(source.strip(), mode="eval")))


class _CheckedLaunch:
    """One class's checked launcher: the steps, the facts, the generated entry and the reference path.

    Attributes:
        cls: the kernel class. elements: the steps, in order. inputs: ``(name, default)`` pairs.
        anchor: the first tensor input, whose device the others must share.
        facts: ``dispatch``'s parameters. key_facts: those that are inputs named like key fields.
        memo_key: the source of the memo key (the facts, and the type of each fact input whose
            type only a once-per-facts step checks).
        deferred: the steps that run once per distinct facts (on the reference path).
        per_launch_lets: the Lets the generated tests compute (the facts, what per-launch steps read).
        host_only: the inputs that map to no kernel parameter (given, and the facts that name none).
        constexpr_fields: ``(parameter, key field)`` pairs that build ``constexprs``.
        source: the generated Python source (``__call__`` and ``key_for``); entry, key_for: them.
        slow_calls: how many calls took the reference path (a kernel object's first call,
            unusual or bad inputs; new facts of usual inputs are checked and dispatched by the
            generated code, :meth:`learn`); a statistic, not exact under concurrent calls.
    """

    def __init__(self, cls: type, pending: _PendingLauncher) -> None:
        self.cls = cls
        self.body = pending.body
        self.elements = pending.elements
        self.slow_calls = 0
        params = list(inspect.signature(pending.body).parameters.values())[3:]
        self.inputs = tuple((p.name, p.default) for p in params)
        names = [n for n, _ in self.inputs]
        self.globals = pending.body.__globals__
        where = f"{cls.__name__}.__call__"

        tensors = [e for e in self.elements if isinstance(e, TensorArg)]
        self.anchor = tensors[0].name if tensors else None
        if tensors and tensors[0].when:
            raise KernelDefinitionError(
                f"{where}: the first TensorArg ({self.anchor!r}) gives the device; it takes no when")
        lets: list[str] = []
        for e in self.elements:
            subject = e._subject()
            if subject is not None and subject not in names:
                raise KernelDefinitionError(f"{where}: {type(e).__name__}({subject!r}) names no input of __call__")
            known = set(names) | set(lets) | set(HELPERS) | set(self.globals) | set(vars(builtins))
            sources = [(s, False) for s in e._decisions()] + [(t, True) for t in e._templates()]
            for source, template in sources:
                unknown = _parse(source, template)[1] - known
                if unknown:
                    raise KernelDefinitionError(
                        f"{where}: {source!r} reads {sorted(unknown)}: neither an input, a Let above it, "
                        "a helper, a global of the module nor a builtin")
            if isinstance(e, Let):
                if e.name in names or e.name in lets:
                    raise KernelDefinitionError(f"{where}: Let({e.name!r}) shadows an input or another Let")
                lets.append(e.name)

        dispatch = list(inspect.signature(cls.dispatch).parameters.values())[1:]  # after self
        self.facts = tuple(p.name for p in dispatch if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for f in self.facts:
            if f not in names and f not in lets:
                raise KernelDefinitionError(f"{cls.__name__}.dispatch takes {f!r}, which is neither an input of "
                                            "__call__ nor a Let of its checks")
            if any(t.name == f for t in tensors):
                raise KernelDefinitionError(
                    f"{cls.__name__}.dispatch takes the tensor {f!r}: a fact is layout data; derive it with a Let")
        self._classify(names, lets)
        kernel_params = _kernel_params(cls)
        # a fact that feeds no kernel parameter is consumed on the host, by dispatch: host-only
        self.host_only = tuple(pending.host_only) + tuple(
            f for f in self.facts if f in names and f not in pending.host_only and kernel_params is not None
            and f not in kernel_params and f"{f}_ptr" not in kernel_params)
        self.constexpr_fields = self._constexpr_fields(kernel_params, names)
        key_fields = {f.name for f in dataclasses.fields(cls.CompileKey)} if _has_key(cls) else set()
        self.key_facts = tuple(f for f in self.facts if f in names and f in key_fields)
        self._generate(names)

    def _classify(self, names: list[str], lets: list[str]) -> None:
        """Split the steps: per launch, or once per facts (those that read nothing but facts)."""
        variables = set(names) | set(lets)
        static = set(self.facts)
        for e in self.elements:
            if isinstance(e, Let) and e._reads() & variables <= static:
                static.add(e.name)
        self.static_lets = frozenset(static - set(self.facts))  # Lets computed from the facts alone
        self.deferred = tuple(e for e in self.elements if not isinstance(e, Let) and e._reads() & variables <= static)
        # Lets computed per launch: the facts, and what the per-launch steps read
        needed = {f for f in self.facts if f in lets}
        for e in reversed(self.elements):
            if (isinstance(e, Let) and e.name in needed) or (not isinstance(e, Let) and e not in self.deferred):
                needed |= e._reads() & set(lets)
        self.per_launch_lets = frozenset(needed)
        guarded = {e.name for e in self.elements if isinstance(e, (IntArg, BoolArg))}
        deferred_reads = set().union(*(e._reads() for e in self.deferred)) if self.deferred else set()
        typed = [f for f in self.facts if f in names and f in deferred_reads and f not in guarded]
        parts = list(self.facts) + [f"{f}.__class__" for f in typed]
        self.memo_key = parts[0] if len(parts) == 1 else "(" + "".join(p + ", " for p in parts) + ")"  # () for none

    def _constexpr_fields(self, params: Any, names: list[str]) -> tuple[tuple[str, str], ...]:
        if params is None or not _has_key(self.cls):
            return ()  # TritonJitKernel reports the missing kernel or key
        fed = {p for n in names if n not in self.host_only for p in (n, f"{n}_ptr") if p in params}
        constexpr = {n for n, p in params.items() if "constexpr" in _annotation_text(p.annotation)} - fed
        pairs, taken = [], {}
        for f in dataclasses.fields(self.cls.CompileKey):
            targets = [t for t in dict.fromkeys((f.name, f.name.upper())) if t in constexpr]
            if not targets and f.name in LAUNCH_OPTIONS and f.name not in fed:
                targets = [f.name]
            if len(targets) > 1:
                raise KernelDefinitionError(f"{self.cls.__name__}.CompileKey.{f.name} names two parameters {targets}")
            if targets:
                if targets[0] in taken:
                    raise KernelDefinitionError(f"{self.cls.__name__}.CompileKey fields {taken[targets[0]]!r} and "
                                                f"{f.name!r} both name {targets[0]!r}")
                taken[targets[0]] = f.name
                pairs.append((targets[0], f.name))
        return tuple(pairs)

    def _generate(self, names: list[str]) -> None:
        tensors = frozenset(e.name for e in self.elements if isinstance(e, TensorArg) and not e.when)
        gen = _Generator(self.anchor, tensors)
        lines = []
        for e in self.elements:
            if isinstance(e, Let):
                if e.name in self.per_launch_lets:
                    lines.append(f"{e.name} = {gen.fast(e.expr)}")
                continue
            if isinstance(e, TensorArg) and e.name in tensors:  # read shape and strides once, once a tensor
                lines += [f"if {e.name}.__class__ is not _zj_Tensor:\n                raise _zj_Slow",
                          f"_zj_{e.name}_shape = {e.name}.shape", f"_zj_{e.name}_strides = {e.name}.stride()"]
                gen.cached.add(e.name)
            line = _test_line(gen, e, e._guard(gen) if e in self.deferred else e._fast(gen), "")
            if line is None:
                continue
            lines.append(line)
            if isinstance(e, TensorArg) and e.name == self.anchor:
                lines.append(f"_zj_dev = {e.name}.device")
        # New facts (a token count never seen, a new period): the once-per-facts steps and the
        # dispatch, compiled like the tests above, instead of the reference path's evals (the
        # first launch at a new value then costs a few microseconds more, not tens)
        lines += [f"_zj_mk = {gen.fast(self.memo_key)}", "_zj_hit = self._zerojit_facts.get(_zj_mk)",
                  "if _zj_hit is None:"]
        for e in self.elements:
            if isinstance(e, Let):
                if e.name not in self.per_launch_lets:
                    lines.append(f"    {e.name} = {gen.fast(e.expr)}")
            elif e in self.deferred:
                lines.append(_test_line(gen, e, e._fast(gen), "    "))
        facts = ", ".join(f"{f!r}: {f}" for f in self.facts)
        lines.append(f"    _zj_hit = _zj_learn(self, _zj_mk, {{{facts}}})")
        checks = "".join(f"            {line}\n" for line in lines)
        defaults = {f"_zj_d{i}": d for i, (_, d) in enumerate(self.inputs) if d is not inspect.Parameter.empty}
        sig = ", ".join(n if d is inspect.Parameter.empty else f"{n}=_zj_d{i}" for i, (n, d) in enumerate(self.inputs))
        values = "".join(f"{n}, " for n in names)
        call = ", ".join(f"{n}={n}" for n in names)
        closure = ["_zj_Tensor", "_zj_int", "_zj_bool", "_zj_Slow", "_zj_slow", "_zj_learn", "_zj_body", *HELPERS, *defaults,
                   *gen.consts]
        head = f"def __call__(self, *, {sig}):" if names else "def __call__(self):"
        src = f"""def _zj_factory({', '.join(closure)}):
    {head}
        try:
{checks}        except Exception:  # a failed test, new facts, anything unusual: the reference path decides
            _zj_hit = _zj_slow(self, ({values}))
        return _zj_body(self, _zj_hit[0], _zj_hit[1]{', ' if names else ''}{call})

    {head.replace('__call__', 'key_for')}
        try:
{checks}        except Exception:
            _zj_hit = _zj_slow(self, ({values}))
        return _zj_hit[0]

    return __call__, key_for
"""
        self.source = src
        namespace: dict[str, Any] = {}
        exec(compile(src, f"<zerojit checked launcher of {self.cls.__qualname__}>", "exec"), self.globals, namespace)
        objects = dict(_zj_Tensor=torch.Tensor, _zj_int=int, _zj_bool=bool, _zj_Slow=_Slow, _zj_slow=self.slow,
                       _zj_learn=self.learn, _zj_body=self.body, **HELPERS, **defaults, **gen.consts)
        self.entry, self.key_for = namespace["_zj_factory"](*(objects[n] for n in closure))

    def slow(self, kernel: Any, values: tuple) -> tuple[Any, dict]:
        """The reference path: every step in order (raising the first failure), then the memo.

        Returns ``(key, constexprs)`` for valid inputs, remembered under their facts.
        """
        self.slow_calls += 1
        ns = dict(self.globals)
        ns.update(HELPERS)
        ns.update(zip((n for n, _ in self.inputs), values))
        # Fake tensors (a custom op's fake implementation under torch.compile): no address is read.
        ns[_FAKE] = torch_compat.any_fake(values)
        ns[_LENGTH] = _length
        name = kernel.name
        for e in self.elements:
            if isinstance(e, Let):
                ns[e.name] = _eval(e.expr, ns)
            elif not e.when or _eval(e.when, ns):
                e._check(name, ns, self.anchor)
        if ns[_FAKE]:  # a fact traced from a symbolic size (len(x) % 2 == 0): decided now, a guard on it,
            for f in self.facts:  # as the key it selects is; a SymBool would not compare in the memo
                if isinstance(ns.get(f), torch.SymBool):
                    ns[f] = bool(ns[f])
        memo_key = _eval(self.memo_key, ns)
        memo = kernel.__dict__.setdefault("_zerojit_facts", {})
        try:
            found = memo.get(memo_key)
        except TypeError:  # an unhashable fact: computed every time, never remembered
            return self.learn(kernel, None, {f: ns[f] for f in self.facts})
        return found if found is not None else self.learn(kernel, memo_key, {f: ns[f] for f in self.facts})

    def learn(self, kernel: Any, memo_key: Any, facts: dict[str, Any]) -> tuple[Any, dict]:
        """New facts, checked: ``kernel.dispatch(**facts)``, the key's constexprs, remembered in
        the memo under ``memo_key`` (None: not remembered). Returns ``(key, constexprs)``."""
        found = self._dispatched(kernel, kernel.dispatch(**facts))
        if memo_key is None:
            return found
        return kernel.__dict__.setdefault("_zerojit_facts", {}).setdefault(memo_key, found)

    def _dispatched(self, kernel: Any, key: Any) -> tuple[Any, dict]:
        constexprs = {param: getattr(key, field) for param, field in self.constexpr_fields}
        constexprs.update(kernel.extra_kwargs(key))
        return key, constexprs

    def learn_traced(self, kernel: Any, points: dict[tuple, Any], keys: Any) -> int:
        """Learn the facts of each traced point (``{((input, value), ...): key}``, from
        :func:`zerojit.keyspace.take_traced_points`) whose key is among ``keys`` (the warmed keys;
        an autotuned kernel's :class:`~zerojit.autotune.TunedKey` counts for its key), exactly as
        a launch would: a fact the point lacks takes ``dispatch``'s default (a launch input's
        default that differs makes another memo key: that entry is then never hit, and the launch
        learns its own); the Lets computed from facts alone, then the once-per-facts checks, each
        of which must pass; the memo key from the facts. A point that fails anything, or whose
        facts dispatch another key, is skipped (its launch reports what is wrong). Returns how
        many were learned."""
        if not points:
            return 0
        warmed = {getattr(k, "key", k) for k in keys}
        defaults = {p.name: p.default for p in list(inspect.signature(kernel.dispatch).parameters.values())
                    if p.default is not inspect.Parameter.empty}
        memo = kernel.__dict__.setdefault("_zerojit_facts", {})
        learned = 0
        for point, traced_key in points.items():
            try:
                if traced_key not in warmed:
                    continue
                ns = dict(self.globals)
                ns.update(HELPERS)
                ns[_FAKE] = False
                ns.update(defaults)
                ns.update(point)
                for e in self.elements:
                    if isinstance(e, Let):
                        if e.name in self.static_lets:
                            ns[e.name] = _eval(e.expr, ns)
                    elif e in self.deferred and (not e.when or _eval(e.when, ns)):
                        e._check(kernel.name, ns, self.anchor)
                facts = {f: ns[f] for f in self.facts}
                key = kernel.dispatch(**facts)
                if key != traced_key:
                    continue
                memo.setdefault(_eval(self.memo_key, ns), self._dispatched(kernel, key))
                learned += 1
            except Exception:  # a check that fails, a fact missing, an unhashable memo key: its launch decides
                continue
        return learned


def _test_line(gen: _Generator, e: _Element, test: str | None, indent: str) -> str | None:
    """The generated statement that leaves for the reference path when ``test`` (a step's source,
    under its ``when``) fails; None for no test."""
    if test is None:
        return None
    test = gen.fast(test)
    if e.when:
        test = f"not ({gen.fast(e.when)}) or ({test})"
    return f"{indent}if not ({test}):\n{indent}                raise _zj_Slow"


def _kernel_params(cls: type) -> Any:
    """The parameters of ``cls.kernel``'s Triton function (None when no kernel is set yet, or
    none a ``triton.jit`` function gives: :class:`zerojit.kernel.TritonJitKernel` names that)."""
    fn = getattr(getattr(cls, "kernel", None), "fn", None)
    return inspect.signature(fn).parameters if callable(fn) else None


def _has_key(cls: type) -> bool:
    key_cls = getattr(cls, "CompileKey", None)
    return key_cls is not None and dataclasses.is_dataclass(key_cls)


def _annotation_text(annotation: Any) -> str:
    """A parameter annotation as text (a string under ``from __future__ import annotations``)."""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", "") or str(annotation)


def _bind(cls: type, pending: _PendingLauncher) -> Callable:
    """The launch entry of ``cls``: the generated checks and memo, then the body, via kernel_launcher."""
    plan = _CheckedLaunch(cls, pending)
    entry = plan.entry
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(entry, attr, getattr(pending.body, attr))
    launch = kernel_launcher(entry, host_only=plan.host_only)
    launch._zerojit_key_for = plan.key_for
    launch._zerojit_checked = plan
    return launch
