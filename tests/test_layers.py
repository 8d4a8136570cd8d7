"""The package's layers only import downwards: the command line (``rcpkit.cli``) sits above
every other layer, and reading files (``rcpkit.ingest``) sits above the engine it feeds.
Inside the engine, no import cycle, and the system of record at the bottom."""

from __future__ import annotations

import ast
from pathlib import Path

import rcpkit

PACKAGE = Path(rcpkit.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports, relative imports resolved."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _importers_of(layer: str, *, outside: str | None = None) -> dict[str, list[str]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name.startswith(layer) or (outside is not None and not name.startswith(outside)):
            continue
        hits = sorted(i for i in _imports(path) if i == layer or i.startswith(layer + "."))
        if hits and path.name != "__main__.py":
            found[name] = hits
    return found


def test_only_the_command_line_imports_the_command_line() -> None:
    # ``python -m rcpkit.eval`` style entry points (``__main__``) are shells themselves.
    assert _importers_of("rcpkit.cli") == {}


def test_the_engine_does_not_import_the_layers_above_it() -> None:
    assert _importers_of("rcpkit.ingest", outside="rcpkit.engine") == {}
    assert _importers_of("rcpkit.cli", outside="rcpkit.engine") == {}


def test_ingest_reads_files_without_the_wire() -> None:
    wire = ("rcpkit.server", "rcpkit.binding", "rcpkit.transports", "rcpkit.client")
    offenders = {name: hits for layer in wire
                 for name, hits in _importers_of(layer, outside="rcpkit.ingest").items()}
    assert offenders == {}


STORE = "rcpkit.engine.store"
STORE_MAY_IMPORT = ("rcpkit.engine.errors", "rcpkit.engine.text")
"""All the system of record uses of the engine: the components built on it (the side files,
the graph, the memories) depend on the store, never the reverse."""


def _engine_graph() -> dict[str, set[str]]:
    """Engine module → the engine modules it imports (those under ``TYPE_CHECKING`` too: a
    cycle hidden from the interpreter by a deferred import still counts)."""
    modules = {_module_name(path): path for path in (PACKAGE / "engine").rglob("*.py")}
    return {name: {i for i in _imports(path) if i in modules} - {name}
            for name, path in modules.items()}


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
    assert _cycles(_engine_graph()) == []


def test_the_store_imports_no_component_built_on_it() -> None:
    outside = {f"{name} imports {target}" for name, targets in _engine_graph().items()
               if _in_store(name) for target in targets
               if not _in_store(target) and target not in STORE_MAY_IMPORT}
    assert outside == set()


def test_the_checks_see_a_cycle_and_the_side_files_import_of_the_store() -> None:
    graph = _engine_graph()
    assert "rcpkit.engine.store.sql" in graph["rcpkit.engine.store.sqlite"]
    assert "rcpkit.engine.store.side" in graph["rcpkit.engine.sidecar"]
    looped = {**graph, "rcpkit.engine.store.base": {*graph["rcpkit.engine.store.base"],
                                                    "rcpkit.engine.sidecar"}}
    assert any({"rcpkit.engine.sidecar", "rcpkit.engine.store.base"} <= set(cycle)
               for cycle in _cycles(looped))


#: What moves bytes or touches the outside world; the sans-I/O core imports none of it.
_IO_MODULES = ("asyncio", "socket", "selectors", "ssl", "subprocess", "threading", "http",
               "urllib", "h11", "httptools", "httpx", "starlette", "uvicorn", "sqlite3", "os",
               "shutil", "tempfile", "io")


def test_the_protocol_core_is_sans_io() -> None:
    offenders = {}
    for path in (PACKAGE / "protocol").rglob("*.py"):
        hits = sorted(name for name in _imports(path)
                      if name.split(".")[0] in _IO_MODULES)
        if hits:
            offenders[_module_name(path)] = hits
    assert offenders == {}


def test_transports_and_the_server_know_nothing_of_tenancy() -> None:
    # Collections and keys plug in through the generic hooks (an endpoint table, a gate,
    # the dispatcher's ``authorize``), so a user's server gets the same transports.
    for layer in ("rcpkit.transports", "rcpkit.server"):
        assert _importers_of("rcpkit.tenancy", outside=layer) == {}
