"""The package's layers only import downwards: the command line (``rcpkit.cli``) sits above
every other layer, and reading files (``rcpkit.ingest``) sits above the engine it feeds."""

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
