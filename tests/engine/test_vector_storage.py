"""Where a saved engine's vectors live: in the record (float16 in SQLite), read back when
the saved dense index is loaded, unless ``dense_save_vectors`` keeps a float32 copy to map."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine import Engine, EngineConfig
from rcpkit.engine.config import DenseConfig, EmbedderConfig
from rcpkit.engine.types import DocumentIn, SearchRequest

TEXTS = ["bees make honey in hives", "wasps sting and build paper nests",
         "ants carry leaves home", "moths fly to the light at night",
         "owls hunt moths and mice at night", "honey bees dance to tell the way"]
QUERIES = ["honey", "night flying insects", "nests of paper"]


def answers(engine: Engine) -> list[list[tuple[str, float]]]:
    return [[(hit.doc_id, hit.score) for hit in engine.search(
        SearchRequest(query=query, k=4, mode="dense", seed=1)).hits] for query in QUERIES]


@pytest.mark.parametrize("save_vectors", [False, True])
def test_a_reopened_engine_answers_exactly_as_before(tmp_path: Path, save_vectors: bool) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(save_vectors=save_vectors))
    with Engine.open(config) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text) for i, text in enumerate(TEXTS)])
        engine.delete(["d2"])
        before = answers(engine)
    saved = list((tmp_path / "indexes").glob("state-*/dense/vectors.*.npy"))
    assert len(saved) == (1 if save_vectors else 0)
    with Engine.open(config) as engine:
        assert engine.indexes is not None
        vectors = engine.indexes.dense.whole._view.snapshot.vectors
        assert isinstance(vectors, np.memmap) == save_vectors
        assert engine.indexes.dense.count == len(TEXTS)  # d2's version is kept (§7.7.1)
        assert answers(engine) == before


def test_changing_the_graph_dtype_rebuilds_only_the_graph(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(exact_threshold=2))
    with Engine.open(config) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text) for i, text in enumerate(TEXTS)])
        assert engine.wait_for_indexes(60)  # the f16 graph is published, and saved at close
        before = answers(engine)
    quantised = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                             dense=DenseConfig(exact_threshold=2, graph_dtype="i8"))
    caplog.set_level("INFO", logger="rcpkit.engine.indexes.dense")
    with Engine.open(quantised) as engine:
        assert "the saved dense graph is f16, not i8" in caplog.text
        assert "rebuilding them from the store" not in caplog.text  # the rows were kept
        assert answers(engine) == before  # seeded: exact search, whatever the graph
        assert engine.indexes is not None
        assert engine.indexes.dense.whole.wait_for_graph(30)
        assert engine.indexes.dense.whole._view.graph is not None
    (meta,) = (tmp_path / "indexes").glob("state-*/dense/dense.json")
    assert json.loads(meta.read_text())["graph_dtype"] == "i8"


def test_the_configured_search_width_reaches_a_reopened_graph(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(exact_threshold=2))
    with Engine.open(config) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text) for i, text in enumerate(TEXTS)])
        assert engine.wait_for_indexes(60)
    with Engine.open(config.with_overrides(dense={"expansion_search": 300})) as engine:
        assert engine.wait_for_indexes(60) and engine.indexes is not None
        graph = engine.indexes.dense.whole._view.graph
        assert graph is not None and graph.index.expansion_search == 300


@pytest.mark.parametrize("graph_dtype", ["f16", "bf16", "i8"])
def test_a_saved_graph_takes_its_vectors_from_the_record(tmp_path: Path,
                                                         graph_dtype: str) -> None:
    """Past the exact threshold the saved graph file holds no vectors: a reopened engine
    rebuilds them from the record's float16 vectors, to the byte, and serves the graph it
    saved at once (graph search: no seed)."""
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(exact_threshold=2, graph_dtype=graph_dtype))
    with Engine.open(config) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text) for i, text in enumerate(TEXTS)])
        engine.delete(["d2"])
        assert engine.wait_for_indexes(60) and engine.indexes is not None
        graph = engine.indexes.dense.whole._view.graph
        assert graph is not None
        saved, rows = graph.index.save(), len(graph.rowids)
        before = [[(hit.doc_id, hit.score) for hit in engine.search(
            SearchRequest(query=query, k=4, mode="dense")).hits] for query in QUERIES]
    (meta_path,) = (tmp_path / "indexes").glob("state-*/dense/dense.json")
    meta = json.loads(meta_path.read_text())
    assert meta["graph_vectors"]["kept"] == 0
    graph_file = meta_path.parent / meta["files"]["graph"]
    assert graph_file.stat().st_size == len(saved) - rows * meta["graph_vectors"][
        "bytes_per_vector"]
    with Engine.open(config) as engine:
        assert engine.wait_for_indexes(60) and engine.indexes is not None
        reopened = engine.indexes.dense.whole._view.graph
        assert reopened is not None and reopened.index.save() == saved
        assert [[(hit.doc_id, hit.score) for hit in engine.search(
            SearchRequest(query=query, k=4, mode="dense")).hits] for query in QUERIES] == before
