"""Fixtures: an engine on the three-topic corpus with its concept graph."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("scipy")
pytest.importorskip("igraph")

from graph_corpus import DOCUMENTS

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import ConceptGraph


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=32))
    with Engine.open(config) as opened:
        opened.add(DOCUMENTS)
        yield opened


@pytest.fixture
def graph(engine: Engine) -> Iterator[ConceptGraph]:
    opened = ConceptGraph.open(engine.config.data_dir, engine.store)
    engine.on_publish(opened.sync)
    yield opened
    opened.close()
