"""Sentence-window multi-vector dense index (§3.1, §7.7): windows, scoring, filters, deletes,
persistence, the graph path, and the engine with ``dense_sentence_windows``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.config import ChunkingConfig, DenseConfig, EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.indexes.windows import (
    HEAD_CHARS,
    WINDOW_CHARS,
    SentenceWindowIndex,
    WindowVectors,
    sentence_windows,
)
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.types import DocumentIn, SearchRequest

DIMENSION = 8


def unit(*values: float) -> np.ndarray:
    vector = np.zeros(DIMENSION, dtype=np.float32)
    vector[:len(values)] = values
    return vector / np.linalg.norm(vector)


def windows(*pairs: tuple[int, np.ndarray]) -> WindowVectors:
    return WindowVectors(np.asarray([owner for owner, _ in pairs], dtype=np.int64),
                         np.asarray([vector for _, vector in pairs], dtype=np.float32))


@pytest.fixture
def index() -> SentenceWindowIndex:
    """Row 1: whole text along the query, no windows. Row 2: whole text off the query, one
    window along it. Row 3: whole text half along it, a window further off."""
    built = SentenceWindowIndex.create(DIMENSION, enabled=True, mix=0.5)
    built.add(np.array([1, 2, 3]), np.stack([unit(1, 0.3), unit(0, 1), unit(1, 1)]),
              windows((2, unit(1)), (3, unit(0, 0, 1))))
    return built


QUERY = unit(1)


def test_short_text_has_no_windows() -> None:
    assert sentence_windows("A short abstract. It fits the encoder.") == []


def test_windows_cover_the_unread_tail_in_whole_sentences() -> None:
    sentence = "The protein binds the receptor in most of the cells that were measured. "
    text = sentence * 40
    found = sentence_windows(text)
    assert found, "a text far past the head must get windows"
    assert all(len(window) <= WINDOW_CHARS for window in found)
    assert all(window.endswith(".") and window.startswith("The ") for window in found)
    covered = sum(len(window) + 1 for window in found)
    # The windows start at the first sentence not ending inside the head and run to the end.
    assert len(text) - HEAD_CHARS - len(sentence) <= covered <= len(text) - HEAD_CHARS + len(
        sentence)
    assert text.rstrip().endswith(found[-1])


def test_score_combines_whole_text_and_best_window(index: SentenceWindowIndex) -> None:
    rowids, scores = index.search(QUERY, 3, exact=True)
    whole = {1: float(unit(1, 0.3) @ QUERY), 2: 0.0, 3: float(unit(1, 1) @ QUERY)}
    expected = {1: whole[1], 2: whole[2] + 0.5 * (1.0 - whole[2]), 3: whole[3]}
    assert dict(zip(rowids.tolist(), scores.tolist(), strict=True)) == pytest.approx(expected)
    assert rowids.tolist() == sorted(expected, key=lambda r: -expected[r])


def test_mix_one_is_the_best_vector_and_disabled_is_the_whole_text() -> None:
    vectors = np.stack([unit(1, 0.3), unit(0, 1)])
    best = SentenceWindowIndex.create(DIMENSION, enabled=True, mix=1.0)
    best.add(np.array([1, 2]), vectors, windows((2, unit(1))))
    assert best.search(QUERY, 2, exact=True)[0].tolist() == [2, 1]
    plain = SentenceWindowIndex.create(DIMENSION, enabled=False)
    plain.add(np.array([1, 2]), vectors, None)
    assert plain.search(QUERY, 2, exact=True)[0].tolist() == [1, 2]
    assert plain.window_count == 0


def test_score_of_given_rows_is_what_search_gives_them(index: SentenceWindowIndex) -> None:
    """A hybrid search's dense half scores the rows only the lexical half found: with their
    windows, in the order asked, whatever their rank; unscaled queries are normalised."""
    rowids, scores = index.search(QUERY, 3, exact=True)
    found = dict(zip(rowids.tolist(), scores.tolist(), strict=True))
    asked = np.array([3, 1, 2])
    np.testing.assert_allclose(index.score(QUERY * 4, asked), [found[r] for r in asked.tolist()],
                               rtol=1e-6)
    plain = SentenceWindowIndex.create(DIMENSION, enabled=False)
    plain.add(np.array([1, 2]), np.stack([unit(1, 0.3), unit(0, 1)]), None)
    np.testing.assert_allclose(plain.score(QUERY, np.array([2, 1])),
                               [0.0, unit(1, 0.3)[0]], atol=1e-6)


def test_enabled_index_refuses_rows_without_windows() -> None:
    built = SentenceWindowIndex.create(DIMENSION, enabled=True)
    with pytest.raises(ValueError, match="windows"):
        built.add(np.array([1]), unit(1)[None, :], None)


def test_filter_applies_to_windows_through_their_chunk(index: SentenceWindowIndex) -> None:
    allow = np.array([False, True, False, True])  # row 2, whose window matches, is filtered out
    rowids, _ = index.search(QUERY, 3, allow=allow, exact=True)
    assert rowids.tolist() == [1, 3]


def test_delete_drops_the_row_and_its_windows(index: SentenceWindowIndex) -> None:
    index.remove(np.array([2, 99]))
    assert index.window_count == 1
    assert 2 not in index.search(QUERY, 3, exact=True)[0].tolist()


def test_save_and_load_keep_the_scores(index: SentenceWindowIndex, tmp_path: Path) -> None:
    index.save(tmp_path / "dense")
    loaded = SentenceWindowIndex.load(tmp_path / "dense", enabled=True, mix=0.5)
    expected = index.search(QUERY, 3, exact=True)
    got = loaded.search(QUERY, 3, exact=True)
    assert got[0].tolist() == expected[0].tolist()
    np.testing.assert_allclose(got[1], expected[1])
    loaded.add(np.array([4]), unit(0, 0, 0, 1)[None, :], windows((4, unit(1, 0.01))))
    assert loaded.window_count == 3 and 4 in loaded.search(QUERY, 4, exact=True)[0].tolist()


def test_load_refuses_other_window_settings(index: SentenceWindowIndex, tmp_path: Path) -> None:
    index.save(tmp_path / "dense")
    with pytest.raises(ValueError, match="sentence-window"):
        SentenceWindowIndex.load(tmp_path / "dense", enabled=False)
    plain = SentenceWindowIndex.create(DIMENSION, enabled=False)
    plain.add(np.array([1]), unit(1)[None, :], None)
    plain.save(tmp_path / "plain")
    with pytest.raises(ValueError, match="sentence-window"):
        SentenceWindowIndex.load(tmp_path / "plain", enabled=True)


def test_graph_path_agrees_with_exact_search() -> None:
    rng = np.random.default_rng(7)
    rows = 400
    vectors = rng.standard_normal((rows, DIMENSION)).astype(np.float32)
    owners = np.repeat(np.arange(0, rows, 2), 2)
    built = SentenceWindowIndex.create(DIMENSION, enabled=True, exact_threshold=50)
    built.add(np.arange(rows), vectors,
              WindowVectors(owners, rng.standard_normal((len(owners), DIMENSION)).astype(
                  np.float32)))
    assert built.wait_for_graph(60)
    assert built.uses_graph and not built.windows.uses_graph  # windows are read, not searched
    query = rng.standard_normal(DIMENSION).astype(np.float32)
    graph = built.search(query, 10)
    exact = built.search(query, 10, exact=True)
    assert graph[0].tolist() == exact[0].tolist()
    np.testing.assert_allclose(graph[1], exact[1], rtol=1e-5)


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the document texts it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.documents = 0

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        if kind == "document":
            self.documents += len(texts)
        return super().embed(texts, kind)


NOTES = [f"Orchard note {n} records apple blossom frost and pruning dates." for n in range(30)]
FILLER = " ".join(NOTES[:next(n for n in range(30) if len(" ".join(NOTES[:n + 1])) > HEAD_CHARS)])
LONG = DocumentIn(FILLER + " Zebra stripes confuse biting flies.", id="long",
                  meta={"kind": "long"})
SHORT = DocumentIn("Flies bite horses in summer.", id="short", meta={"kind": "short"})
QUESTION = SearchRequest(query="zebra stripes confuse biting flies", mode="dense", k=2,
                         seed=1)


def open_engine(path: Path, embedder: HashingEmbedder, *, enabled: bool) -> Engine:
    config = EngineConfig(data_dir=path, embedder=EmbedderConfig(name="hashing"),
                          dense=DenseConfig(sentence_windows=enabled),
                          chunking=ChunkingConfig(max_chars=10_000))
    return Engine.open(config, embedder=embedder)


def long_score(engine: Engine) -> float:
    return next(hit.score for hit in engine.search(QUESTION).hits if hit.id.startswith("long"))


def test_engine_windows_lift_a_long_chunk_and_persist(tmp_path: Path) -> None:
    with open_engine(tmp_path / "off", HashingEmbedder(64), enabled=False) as plain:
        plain.add([LONG, SHORT])
        whole_only = long_score(plain)
    embedder = CountingEmbedder()
    with open_engine(tmp_path / "on", embedder, enabled=True) as engine:
        before = engine.index_version
        engine.add([LONG, SHORT])
        assert engine.stats()["dense_windows"] == len(sentence_windows(LONG.text)) > 0
        assert embedder.documents == 2 + engine.stats()["dense_windows"]
        with_windows = long_score(engine)
        assert with_windows > whole_only + 0.1
        filtered = engine.search(SearchRequest(query=QUESTION.query, mode="dense", k=2, seed=1,
                                               filter={"field": "kind", "op": "eq",
                                                       "value": "short"}))
        assert [hit.id for hit in filtered.hits] == ["short#0"]
        pinned = engine.search(SearchRequest(query=QUESTION.query, mode="dense",
                                             index_version=before))
        assert pinned.hits == []
    embedded = embedder.documents
    with open_engine(tmp_path / "on", embedder, enabled=True) as reopened:
        assert embedder.documents == embedded, "saved windows are loaded, not re-embedded"
        assert long_score(reopened) == pytest.approx(with_windows)
        reopened.delete(["long"])  # its rows stay for older snapshots until collected
        assert [hit.id for hit in reopened.search(QUESTION).hits] == ["short#0"]


def test_engine_turning_windows_on_rebuilds_them(tmp_path: Path) -> None:
    with open_engine(tmp_path, HashingEmbedder(64), enabled=False) as plain:
        plain.add([LONG, SHORT])
        whole_only = long_score(plain)
    with open_engine(tmp_path, HashingEmbedder(64), enabled=True) as engine:
        assert engine.stats()["dense_windows"] > 0
        assert long_score(engine) > whole_only + 0.1
