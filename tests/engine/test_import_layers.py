"""The engine's modules import one another without a cycle, and the system of record sits
at the bottom: the store package imports nothing of the engine but its errors and its text
analysis, so the components built on it (the side files, the graph, the memories) depend on
the store and never the reverse.

Read from the source (every import, those under ``TYPE_CHECKING`` too), so that a cycle
hidden from the interpreter by a deferred import still counts."""

from __future__ import annotations

import ast
from pathlib import Path

import rcpkit.engine

ENGINE = Path(rcpkit.engine.__file__).parent
STORE = "rcpkit.engine.store"
STORE_MAY_IMPORT = ("rcpkit.engine.errors", "rcpkit.engine.text")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Engine module → the engine modules it imports (a ``from package import name`` counts
    as the submodule when ``name`` is one, else as the package)."""
    modules = {_module_name(path): path for path in ENGINE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                found = [f"{base}.{alias.name}" for alias in node.names
                         if f"{base}.{alias.name}" in modules]
                imported.update(found or ([base] if base in modules else []))
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names if alias.name in modules)
        graph[name] = imported - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _in_store(module: str) -> bool:
    return module == STORE or module.startswith(f"{STORE}.")


def test_the_engine_has_no_import_cycle() -> None:
    assert _cycles(_import_graph()) == []


def test_the_store_imports_no_component_built_on_it() -> None:
    outside = {f"{name} imports {target}" for name, targets in _import_graph().items()
               if _in_store(name) for target in targets
               if not _in_store(target) and target not in STORE_MAY_IMPORT}
    assert outside == set()


def test_the_checks_see_a_cycle_and_a_store_import() -> None:
    """The graph is read right: the store's own modules and the side files' import of the
    store are found, and a cycle made up here is reported."""
    graph = _import_graph()
    assert "rcpkit.engine.store.sql" in graph["rcpkit.engine.store.sqlite"]
    assert "rcpkit.engine.store.side" in graph["rcpkit.engine.sidecar"]
    looped = {**graph, "rcpkit.engine.store.base": {*graph["rcpkit.engine.store.base"],
                                                    "rcpkit.engine.sidecar"}}
    assert any("rcpkit.engine.sidecar" in cycle and "rcpkit.engine.store.base" in cycle
               for cycle in _cycles(looped))
