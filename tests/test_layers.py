"""zerojit's import graph: no cycle, and every import goes to the same layer or a lower one.

The graph is read from the sources with ``ast`` (module-level and function-local imports alike),
so a function-local import cannot hide a cycle. The layers are docs/architecture.md's.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
PACKAGE = "zerojit"

# docs/architecture.md: each layer imports only itself and the layers below it.
LAYERS = {
    "triton facts": ["zerojit._version", "zerojit.torch_compat", "zerojit.specialization", "zerojit.keyspace", "zerojit.compile_only",
                     "zerojit.triton_compat", "zerojit.outputs", "zerojit.watchdog", "zerojit.shapeflow",
                     "zerojit.switches"],
    "contract": ["zerojit.context", "zerojit.capture", "zerojit.lint", "zerojit.autotune", "zerojit._launch", "zerojit.kernel",
                 "zerojit.inputs"],
    "warm-up": ["zerojit.reports", "zerojit.integrity", "zerojit._primer", "zerojit.loading", "zerojit.launch_priming",
                "zerojit.cache",
                "zerojit.restore", "zerojit._compile_worker", "zerojit.precompile",
                "zerojit.distributed", "zerojit.registry", "zerojit.script_kernels", "zerojit.manifest",
                "zerojit.generic", "zerojit.learned", "zerojit.recorded_tuning", "zerojit.widen", "zerojit.merging",
                "zerojit.warmup_store"],
    # issue 31: the shared store, on top of the cache layer's install and verify functions
    "fleet": ["zerojit.fleet"],
    "observation": ["zerojit.growth", "zerojit.monitor", "zerojit.audit", "zerojit.pytest_plugin", "zerojit.recording",
                    "zerojit.generalisation"],
    "serving": ["zerojit.serving"],
    # issue 32: contract kernels as torch.library custom ops (torch.compile)
    "engine modes": ["zerojit.engine_modes"],
    "applications": ["zerojit.kernels", "zerojit.runner", "zerojit.examples", "zerojit.cli", "zerojit.__main__",
                     "zerojit"],
}


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _resolve(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The zerojit module ``name`` refers to (a name inside a module: that module), else None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Each zerojit module -> the zerojit modules it imports (anywhere in its source)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                # `from pkg import sub` imports the module pkg.sub where there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    resolved = _resolve(target, modules)
                    if resolved is not None and resolved != name:
                        edges.add(resolved)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int:
    for rank, members in enumerate(LAYERS.values()):
        for member in members:
            if module == member or (member != PACKAGE and module.startswith(member + ".")):
                return rank
    raise AssertionError(f"{module} is in no layer of LAYERS: add it where it belongs")


def test_the_graph_sees_function_local_and_relative_imports():
    graph = import_graph()
    assert "zerojit.precompile" in graph["zerojit.registry"]  # function-local, relative
    assert "zerojit.kernel" in graph["zerojit.kernels.mla.slot_mapping"]  # absolute, module-level
    assert "zerojit.monitor" in graph["zerojit"]  # the package's facade
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_hang_rule_sits_below_every_tool_run():
    """compile_only's ``ptxas --help`` and triton_compat's hold on Triton's tool runs use the
    watchdog, so it is in their layer, and it imports nothing of zerojit."""
    graph = import_graph()
    assert "zerojit.watchdog" in graph["zerojit.compile_only"] and "zerojit.watchdog" in graph["zerojit.triton_compat"]
    assert graph["zerojit.watchdog"] == set() and layer_of("zerojit.watchdog") == 0


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_torch_compat_sits_in_the_lowest_layer_and_imports_nothing_of_zerojit():
    """PyTorch's private surfaces (fake tensors, Dynamo's counters) are read there only; the
    contract's checks read it (fake inputs), the custom ops' layer sits above the contract."""
    graph = import_graph()
    assert graph["zerojit.torch_compat"] == set() and layer_of("zerojit.torch_compat") == 0
    assert "zerojit.torch_compat" in graph["zerojit.inputs"]
    assert layer_of("zerojit.engine_modes.custom_ops") > layer_of("zerojit.inputs")
    assert "zerojit.engine_modes" in graph["zerojit.kernels.mla.ops"]


def test_only_torch_compat_reads_pytorchs_private_modules():
    """``torch._subclasses``, ``torch._dynamo``, ``torch._library``, ...: through zerojit.torch_compat."""
    import re

    private = re.compile(r"\btorch\._[a-z]")
    readers = sorted(str(path.relative_to(SRC)) for path in (SRC / PACKAGE).rglob("*.py")
                     if path.name != "torch_compat.py" and private.search(path.read_text()))
    assert readers == []


def test_every_module_is_in_a_layer():
    for module in import_graph():
        layer_of(module)


@pytest.mark.parametrize("layer", list(LAYERS))
def test_each_layer_imports_only_itself_and_layers_below(layer):
    rank = list(LAYERS).index(layer)
    upward = sorted(
        f"{module} imports {target} ({list(LAYERS)[layer_of(target)]})"
        for module, targets in import_graph().items() if layer_of(module) == rank
        for target in targets if layer_of(target) > rank
    )
    assert upward == []
