"""How much contract code a kernel class costs (issue 15): the framework carries what every class
used to repeat, so each launcher class in ``zerojit/kernels`` stays small.

*Contract code* of a class: the physical lines from its ``class`` line (or first decorator) to
its end that hold code, counted without docstrings (of the class, its methods and nested
classes), comment-only lines and blank lines. The ``@triton.jit`` function and the module's
other top-level code are not the class. Targets: median <= 50 and max <= 100 lines.
"""

from __future__ import annotations

import ast
import io
import statistics
import tokenize
from pathlib import Path

import zerojit.kernels

KERNELS = Path(zerojit.kernels.__file__).parent
KERNEL_BASES = {"TritonJitKernel", "CheckedKernel", "JitKernel"}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def _code_lines(source: str) -> set[int]:
    """Lines that hold a token other than a comment or a line break."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def _base_name(base: ast.expr) -> str:
    while isinstance(base, ast.Subscript):  # CheckedKernel["K.CompileKey"]
        base = base.value
    return base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")


def contract_lines(path: Path) -> dict[str, int]:
    """Contract code lines of each kernel class defined at the top level of ``path``."""
    source = path.read_text()
    tree = ast.parse(source)
    code = _code_lines(source) - _docstring_lines(tree)
    sizes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(_base_name(b) in KERNEL_BASES for b in node.bases):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            sizes[node.name] = sum(1 for line in range(start, node.end_lineno + 1) if line in code)
    return sizes


def test_counter_counts_code_only(tmp_path):
    sample = tmp_path / "k.py"
    sample.write_text(
        'class K(CheckedKernel["K.CompileKey"]):\n'
        '    """Doc\n    string."""\n'
        "\n"
        "    # a comment\n"
        "    kernel = f  # a trailing comment\n"
        "    def dispatch(self, *, a,\n"
        "                 b):\n"
        '        """Doc."""\n'
        "        return (a,\n"
        "                b)\n"
        "class NotAKernel:\n"
        "    x = 1\n"
    )
    assert contract_lines(sample) == {"K": 6}


def test_kernel_classes_stay_small():
    sizes = {}
    for path in sorted(KERNELS.rglob("*.py")):
        sizes.update(contract_lines(path))
    assert {"ConvertReqIndexToGlobalIndex", "CompressedSlotMapping", "PrepareUniformDecode",
            "BuildPrefillChunkMetadata", "ComputePrefillMetadata", "ComputeSwaIndicesAndLens",
            "CombineTopkSwaIndices"} <= set(sizes)
    assert statistics.median(sizes.values()) <= 50, sizes
    assert max(sizes.values()) <= 100, sizes
