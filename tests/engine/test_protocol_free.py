"""The engine is protocol-free: no module under ``rcpkit.engine`` imports the server, the
binding, the transports, the client or any part of ``rcpkit.protocol`` but the §8
filter language, or names a §12 code.

The filter language stays shared because it is the engine's query language too: the
engine compiles the same normalised tree the wire validates, and its validator raises
a code-free error each side maps for itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import rcpkit.engine

ENGINE = Path(rcpkit.engine.__file__).parent
WIRE_MODULES = ("rcpkit.server", "rcpkit.binding", "rcpkit.protocol",
                "rcpkit.transports", "rcpkit.client")
SHARED_LANGUAGE = "rcpkit.protocol.filters"


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_engine_module_imports_the_wire() -> None:
    offenders = {path.relative_to(ENGINE).as_posix(): name
                 for path in ENGINE.rglob("*.py") for name in _imports(path)
                 if name.startswith(WIRE_MODULES) and name != SHARED_LANGUAGE}
    assert offenders == {}


def test_no_engine_module_names_a_json_rpc_code() -> None:
    code = re.compile(r"-32[0-9]{3}")
    assert [path.name for path in ENGINE.rglob("*.py")
            if code.search(path.read_text())] == []
