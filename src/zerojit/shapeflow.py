"""Which ``tl.constexpr`` parameters of a ``triton.jit`` function set a shape.

Triton needs some arguments at compile time: the bounds of ``tl.arange``, the shapes of
``tl.zeros`` / ``tl.full`` / ``reshape`` / ``view`` / ``broadcast_to``, ``tl.static_range``'s
bounds, block pointers' and tensor descriptors' ``block_shape`` and ``order``, reduction and scan
axes, ``tl.multiple_of`` / ``max_contiguous`` hints, ``tl.range``'s ``num_stages``. A parameter
whose value flows into one of them must stay a ``tl.constexpr``: made a runtime int it no longer
compiles ("arange's arguments must be of type tl.constexpr"). So the generalisation report
(:mod:`zerojit.recording`) never offers such a constexpr as a ``do_not_specialize`` int.

:func:`shape_parameters` reads the function's source as Triton parses it
(:func:`zerojit.triton_compat.jit_function_tree`) and follows, over-approximately, which
parameters each local name depends on (assignments, augmented assignments, ``for`` targets, any
expression built from them), then marks the parameters that reach a shape argument, directly or
through a call into another ``triton.jit`` function whose own parameter there sets a shape (up to
:data:`MAX_DEPTH` calls deep). ``x.shape``, ``x.dtype`` and ``x.numel`` carry no dependence: a
tensor's shape comes from the constexprs that built it, which are marked where they did.
"""

from __future__ import annotations

import ast
import types
from typing import Any

from . import triton_compat as _tc

__all__ = ["shape_parameters", "SHAPE_ARGUMENTS", "MAX_DEPTH"]

#: Calls whose arguments Triton needs at compile time: name -> (positional indexes in the
#: ``tl.NAME(...)`` form, or an int: every position from it on; keyword names). The method
#: form (``x.reshape(...)``) drops the tensor, so its positions are one lower.
SHAPE_ARGUMENTS: dict[str, tuple[tuple[int, ...] | int, tuple[str, ...]]] = {
    "arange": (0, ("start", "end")),
    "zeros": ((0,), ("shape",)),
    "full": ((0,), ("shape",)),
    "static_range": (0, ("arg1", "arg2", "step")),
    "static_assert": (0, ()),
    "reshape": (1, ("shape",)),
    "view": (1, ("shape",)),
    "broadcast_to": (1, ("shape",)),
    "expand_dims": ((1,), ("axis",)),
    "permute": (1, ("dims",)),
    "trans": (1, ("dims",)),
    "make_block_ptr": ((4, 5), ("block_shape", "order")),
    "make_tensor_descriptor": ((3,), ("block_shape",)),
    "_experimental_make_tensor_descriptor": ((3,), ("block_shape",)),
    "multiple_of": ((1,), ("values",)),
    "max_contiguous": ((1,), ("values",)),
    "max_constancy": ((1,), ("values",)),
    "range": ((), ("num_stages", "loop_unroll_factor")),
    "histogram": ((1,), ("num_bins",)),
    **{name: ((1,), ("axis",)) for name in ("sum", "max", "min", "argmax", "argmin", "xor_sum", "reduce_or",
                                             "reduce", "cumsum", "cumprod", "associative_scan", "gather", "flip",
                                             "sort")},
}

#: How many calls into other ``triton.jit`` functions are followed.
MAX_DEPTH = 4

_NO_DEPENDENCE = ("shape", "dtype", "numel", "type")  # tensor attributes fixed by the constexprs that built it


def shape_parameters(jit_fn: Any) -> frozenset[str] | None:
    """The parameters of ``jit_fn`` (a ``triton.jit`` function) whose value flows into an
    argument Triton needs at compile time (the module doc lists them); None when its source
    cannot be read or parsed. Every parameter is considered: the caller keeps the constexprs."""
    return _Analysis().parameters(jit_fn, 0)


class _Analysis:
    """One analysis, memoising the functions it followed (a recursion is cut, not followed)."""

    def __init__(self) -> None:
        self._memo: dict[int, frozenset[str] | None] = {}

    def parameters(self, jit_fn: Any, depth: int) -> frozenset[str] | None:
        key = id(jit_fn)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()  # a recursive call sees no shape parameter
        tree = _tc.jit_function_tree(jit_fn)
        found = None if tree is None else self._walk(tree, _tc.jit_function_scope(jit_fn), depth)
        self._memo[key] = found
        return found

    def _walk(self, tree: ast.FunctionDef, scope: dict[str, Any], depth: int) -> frozenset[str]:
        params = [a.arg for a in (*tree.args.posonlyargs, *tree.args.args, *tree.args.kwonlyargs)]
        deps: dict[str, set[str]] = {p: {p} for p in params}
        shapes: set[str] = set()

        def of(node: ast.AST | None) -> set[str]:
            """The parameters ``node``'s value depends on."""
            if node is None:
                return set()
            if isinstance(node, ast.Attribute) and node.attr in _NO_DEPENDENCE:
                return set()
            if isinstance(node, ast.Name):
                return set(deps.get(node.id, ()))
            found: set[str] = set()
            for child in ast.iter_child_nodes(node):
                found |= of(child)
            return found

        def bind(target: ast.AST, value: set[str]) -> bool:
            grew = False
            for node in ast.walk(target):
                if isinstance(node, ast.Name):
                    before = deps.setdefault(node.id, set())
                    if not value <= before:
                        before |= value
                        grew = True
            return grew

        # Assignments can feed each other in any order (loops): repeat until nothing grows (each
        # pass that goes on adds a parameter to a name's set: finitely many passes).
        grew = True
        while grew:
            grew = False
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign):
                    value = of(node.value)
                    grew |= any([bind(t, value) for t in node.targets])
                elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                    grew |= bind(node.target, of(node.value) | (of(node.target) if isinstance(node, ast.AugAssign)
                                                                 else set()))
                elif isinstance(node, (ast.For, ast.comprehension)):
                    grew |= bind(node.target, of(node.iter))
                elif isinstance(node, ast.NamedExpr):
                    grew |= bind(node.target, of(node.value))

        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for argument in self._shape_arguments(node, scope, depth):
                    shapes |= of(argument)
        return frozenset(p for p in params if p in shapes)

    def _shape_arguments(self, call: ast.Call, scope: dict[str, Any], depth: int) -> list[ast.AST]:
        """The argument expressions of ``call`` that Triton needs at compile time."""
        func = call.func
        callee = _resolve(func, scope)
        if callee is not None and _tc.is_jit_function(callee):
            if depth >= MAX_DEPTH:
                return []
            inner = self.parameters(callee, depth + 1) or frozenset()
            names = _tc.parameter_names(callee)
            chosen = [a for i, a in enumerate(call.args) if i < len(names) and names[i] in inner]
            return chosen + [k.value for k in call.keywords if k.arg in inner]
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in SHAPE_ARGUMENTS:
            return []
        positions, keywords = SHAPE_ARGUMENTS[name]
        method = isinstance(func, ast.Attribute) and not isinstance(_resolve(func.value, scope), types.ModuleType)
        if isinstance(func, ast.Name) and not _from_triton(scope.get(func.id)):
            return []  # a builtin (range, max, sum) or the program's own helper: no compile-time argument
        shift = 1 if method else 0
        if isinstance(positions, int):
            chosen = call.args[max(positions - shift, 0):]
        else:
            chosen = [call.args[i - shift] for i in positions if 0 <= i - shift < len(call.args)]
        return chosen + [k.value for k in call.keywords if k.arg in keywords]


def _resolve(node: ast.AST, scope: dict[str, Any]) -> Any:
    """The object a ``Name`` or dotted ``Attribute`` chain names in ``scope``, else None."""
    if isinstance(node, ast.Name):
        return scope.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, scope)
        return getattr(base, node.attr, None) if isinstance(base, types.ModuleType) else None
    return None


def _from_triton(obj: Any) -> bool:
    """``obj`` (a name imported bare: ``from triton.language import arange``) is Triton's."""
    return (getattr(obj, "__module__", None) or "").startswith("triton")
