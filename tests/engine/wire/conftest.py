"""Fixtures for the engine's wire tests (see ``engine_wire``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, HttpEngine, MemoryEngine, make_data_dir


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return make_data_dir(tmp_path / "data")


@pytest.fixture
def serve(data_dir: Path) -> Iterator[Any]:
    """``serve(**initialize)`` starts an engine on ``data_dir``; all are closed at teardown."""
    started: list[Engine] = []

    def start(data: Path = data_dir, **initialize: Any) -> Engine:
        engine = Engine(data, **initialize)
        started.append(engine)
        return engine

    yield start
    for engine in started:
        if engine.peer.proc.poll() is None:
            engine.close()


@pytest.fixture
def serve_in_memory(data_dir: Path) -> Iterator[Any]:
    """``serve_in_memory()``: the served engine on ``data_dir`` in this process, closed at
    teardown; for tests of the engine's answers rather than of the wire."""
    started: list[MemoryEngine] = []

    def start(data: Path = data_dir) -> MemoryEngine:
        engine = MemoryEngine(data)
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.close()


@pytest.fixture
def http_engine(data_dir: Path) -> Iterator[HttpEngine]:
    engine = HttpEngine(data_dir)
    yield engine
    engine.close()
