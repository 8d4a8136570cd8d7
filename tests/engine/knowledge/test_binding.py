"""Without the ``graph`` extra nothing of §7.8/§7.9 is advertised (§6: presence ⇒ support)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rcpkit.binding import bind
from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine


@pytest.mark.parametrize("missing", ["igraph", "scipy"])
def test_without_the_extra_graph_and_transform_are_not_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    for name in [m for m in sys.modules if m.startswith(("rcpkit.engine.knowledge.graph",
                                                         "rcpkit.engine.knowledge.transform"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)  # import fails as if not installed
    with Engine.open(EngineConfig(data_dir=tmp_path,
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        server = bind(engine)
        assert "graph" not in server.capabilities and "transform" not in server.capabilities
        assert "graph" not in server.handlers and "query/transform" not in server.handlers
        assert "retrieve" in server.handlers
    assert not (tmp_path / "graph.sqlite").exists()


def test_with_the_extra_both_are_served(tmp_path: Path) -> None:
    with Engine.open(EngineConfig(data_dir=tmp_path,
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        server = bind(engine)
        assert server.capabilities["graph"]["maxHops"] == 3
        assert {"graph", "query/transform"} <= set(server.handlers)
    assert (tmp_path / "graph.sqlite").is_file()
