"""docs/architecture.md names only paths that exist, so the map cannot drift from the tree.

A backticked token is a path when it is a ``.py`` file or starts with a top-level name of
``src/rcpkit`` or of the repository (``engine/store/sql.py``, ``rcpkit/files.py``,
``tests/test_layers.py``, ``scripts/test``); tokens with spaces, ``<placeholders>``, call
syntax or a leading ``/`` (``/healthz``, a URL path) are prose. A line marked ``(landing)``
names work still on its branch: its paths must not exist yet, so merging that work fails here
until the line is rewritten and the mark dropped.
"""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGE = REPOSITORY / "src" / "rcpkit"
DOC = REPOSITORY / "docs" / "architecture.md"
FROM_REPOSITORY = ("src", "tests", "benchmarks", "scripts", "docs", ".ci")
LANDING = "(landing)"
_TOKEN = re.compile(r"`([^`\s]+)`")


def _resolve(token: str) -> Path | None:
    """Where ``token`` points, or None when it is not a path."""
    if token.startswith("/") or any(mark in token for mark in "<>()=*"):
        return None
    first = token.split("/", 1)[0]
    if first in FROM_REPOSITORY:
        return REPOSITORY / token
    if first == "rcpkit" and "/" in token:
        return PACKAGE.parent / token
    if token.endswith(".py") or ("/" in token and (PACKAGE / first).exists()):
        return PACKAGE / token
    return None


def _paths(text: str) -> list[tuple[int, str, Path, bool]]:
    """``(line, token, path, landing)`` for every path the text names."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for token in _TOKEN.findall(line):
            path = _resolve(token)
            if path is not None:
                found.append((number, token, path, LANDING in line))
    return found


def test_every_path_the_architecture_map_names_exists() -> None:
    named = _paths(DOC.read_text(encoding="utf-8"))
    assert len(named) > 50  # the extraction still sees the package tree
    missing = [f"line {line}: {token}" for line, token, path, landing in named
               if not landing and not path.exists()]
    assert missing == []


def test_work_marked_landing_is_not_merged_yet() -> None:
    merged = [f"line {line}: {token} exists now: drop the {LANDING} mark and update the line"
              for line, token, path, landing in _paths(DOC.read_text(encoding="utf-8"))
              if landing and path.exists()]
    assert merged == []


def test_the_extraction_tells_paths_from_prose() -> None:
    text = ("`engine/store/sql.py` `rcpkit/files.py` `files.py` `tests/test_layers.py` "
            "`index/add` `/healthz` `<base>/openrpc.json` `Dispatcher(authorize=)` `rcpkit.toml`\n"
            "`engine/nowhere.py` (landing)")
    named = {token: (path.exists(), landing) for _, token, path, landing in _paths(text)}
    assert named == {"engine/store/sql.py": (True, False), "rcpkit/files.py": (True, False),
                     "files.py": (True, False), "tests/test_layers.py": (True, False),
                     "engine/nowhere.py": (False, True)}
