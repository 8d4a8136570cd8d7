"""The default hybrid score is a relevance in [0, 1] (§7.7 minScore, §16.3), advertised (§6.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rcpkit.binding.capabilities import capabilities
from rcpkit.engine.config import EmbedderConfig, EngineConfig, LexicalConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.types import DocumentIn, SearchRequest

CORPUS = [
    DocumentIn("Honeybees dance to tell nest mates where the flowers are.", id="bees"),
    DocumentIn("Compost heaps need green nitrogen and brown carbon material.", id="compost"),
    DocumentIn("Sourdough starter is wild yeast living in flour and water.", id="bread"),
    DocumentIn("Polaris, the pole star, shows where north is at night.", id="stars"),
    DocumentIn("Bread flour has more protein than cake flour.", id="flour"),
]


def open_engine(path: Path, **overrides: object) -> Engine:
    engine = Engine.open(EngineConfig(data_dir=path,
                                      embedder=EmbedderConfig(name="hashing")).with_overrides(
        **overrides))
    engine.add(CORPUS)
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with open_engine(tmp_path) as opened:
        yield opened


def test_default_hybrid_scores_are_a_relevance_in_unit_range(engine: Engine) -> None:
    result = engine.search(SearchRequest("sourdough starter yeast flour", k=5))
    scores = [hit.score for hit in result.hits]
    assert result.hits[0].id == "bread#0"
    # The best match heads both lists, so it scores the full 1.0; the rest fall clearly below.
    assert scores[0] == pytest.approx(1.0)
    assert all(0.0 <= score <= 1.0 for score in scores)
    assert scores == sorted(scores, reverse=True) and scores[1] < 0.9


def test_min_score_keeps_strong_matches_under_the_default_and_none_under_rrf(
        engine: Engine) -> None:
    query = "sourdough starter yeast flour"
    kept = engine.search(SearchRequest(query, k=5, min_score=0.9))
    assert [hit.id for hit in kept.hits] == ["bread#0"]
    # RRF values are at most 2/61, so the same threshold filters everything out.
    assert engine.search(SearchRequest(query, k=5, fusion="rrf", min_score=0.9)).hits == []


def test_the_default_fusion_and_weight_come_from_the_config(tmp_path: Path) -> None:
    query = "bread flour protein"
    with open_engine(tmp_path / "rrf", retrieve={"fusion": "rrf"}) as rrf_engine:
        top = rrf_engine.search(SearchRequest(query, k=1)).hits[0]
        assert top.score == pytest.approx(2 / 61)
    with open_engine(tmp_path / "dense", retrieve={"fusion_alpha": 1.0}) as dense_weighted:
        dense = dense_weighted.search(SearchRequest(query, k=5, mode="dense"))
        fused = dense_weighted.search(SearchRequest(query, k=5))
        assert [hit.id for hit in fused.hits] == [hit.id for hit in dense.hits]


def test_alpha_outside_unit_range_is_invalid_params(engine: Engine) -> None:
    with pytest.raises(InvalidInput) as caught:
        engine.search(SearchRequest("bees", alpha=1.5))
    assert caught.value.field == "alpha"


def test_capabilities_say_what_each_mode_scores(engine: Engine, tmp_path: Path) -> None:
    retrieve = capabilities(engine.describe(), None)["retrieve"]
    scales = retrieve["x-rcpkit-scores"]
    assert scales["hybrid"] == {"fusion": engine.config.retrieve.fusion, "scale": "normalised",
                                "min": 0.0, "max": 1.0}
    assert scales["dense"]["scale"] == "cosine" and scales["sparse"]["scale"] == "bm25"
    assert retrieve["scoreFloor"] == -1.0
    with open_engine(tmp_path / "rrf", retrieve={"fusion": "rrf"}) as rrf_engine:
        hybrid = capabilities(rrf_engine.describe(), None)["retrieve"]["x-rcpkit-scores"]["hybrid"]
        assert hybrid == {"fusion": "rrf", "scale": "rrf"}


WORDS = ["honey", "flour", "yeast", "compost", "soil", "star", "north", "bread", "bees", "night"]
MIXED = [DocumentIn(" ".join(WORDS[(i * step) % len(WORDS)] for step in (1, 3, 7)) + f" n{i}",
                    id=f"m{i}") for i in range(30)]
QUERY = "honey bread night soil"


def test_complete_recall_scores_each_half_on_the_others_candidates(tmp_path: Path) -> None:
    """``complete``: each list keeps its own top k and gains the other list's rows, scored as
    a full-depth search of that half scores them (BM25 only where the row matches)."""
    with Engine.open(EngineConfig(data_dir=tmp_path,
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        engine.add(MIXED)
        recall = engine.searcher.recall
        vector = engine.searcher.query_vector(QUERY)
        common = {"dense": True, "sparse": True, "seq": engine._store.current_seq(),
                  "tree": None, "schema": {}, "exact": True}
        dense_own, sparse_own = recall.recall(QUERY, vector, k=4, **common)
        dense_all, sparse_all = recall.recall(QUERY, vector, k=len(MIXED), **common)
        dense, sparse = recall.recall(QUERY, vector, k=4, complete=True, **common)
    assert set(dense_own) != set(sparse_own)  # the case needs halves that disagree
    assert set(dense) == set(dense_own) | set(sparse_own)
    assert {rowid: dense[rowid] for rowid in dense_own} == dense_own
    assert dense == pytest.approx({rowid: dense_all[rowid] for rowid in dense}, rel=1e-6)
    matching = {rowid for rowid in dense if rowid in sparse_all}
    assert set(sparse) == set(sparse_own) | matching
    assert sparse == {rowid: sparse_all[rowid] for rowid in sparse}


def test_default_hybrid_fuses_both_scores_of_every_candidate(tmp_path: Path) -> None:
    """Under the default (convex) fusion a hit the other half did not rank still carries and
    is fused on both scores; RRF and ``fusion_complete_scores = false`` fuse each list as
    recalled."""
    request = SearchRequest(QUERY, k=8, candidate_k=8)
    with open_engine(tmp_path / "on") as engine:
        engine.add(MIXED)
        hits = engine.search(request).hits
        rrf_hits = engine.search(SearchRequest(QUERY, k=8, candidate_k=8, fusion="rrf")).hits
        alpha = engine.config.retrieve.fusion_alpha
        # Each half's best score is its top hit's (the convex normalisation's ceiling).
        dense_top, sparse_top = (engine.search(SearchRequest(QUERY, k=1, mode=mode)).hits[0].score
                                 for mode in ("dense", "sparse"))
    assert all("dense" in hit.scores for hit in hits)
    for hit in hits:
        expected = (alpha * (hit.scores["dense"] + 1) / (dense_top + 1)
                    + (1 - alpha) * hit.scores.get("sparse", 0.0) / sparse_top)
        assert hit.score == pytest.approx(expected)
    assert any(len(hit.scores) == 2 for hit in rrf_hits)  # "fused" and one list's score
    with open_engine(tmp_path / "off", retrieve={"fusion_complete_scores": False}) as engine:
        engine.add(MIXED)
        assert any("dense" not in hit.scores or "sparse" not in hit.scores
                   for hit in engine.search(request).hits)


def test_completion_keeps_the_filter_and_needs_no_lexical_match(tmp_path: Path) -> None:
    """The rows one half adds to the other are its own candidates, so they pass the §8 filter;
    a query no row matches lexically still fuses the dense list alone."""
    tagged = [DocumentIn(doc.text, id=doc.id, meta={"even": int(doc.id[1:]) % 2 == 0})
              for doc in MIXED]
    with Engine.open(EngineConfig(data_dir=tmp_path,
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        engine.add(tagged)
        even = {"field": "even", "op": "eq", "value": True}
        hits = engine.search(SearchRequest(QUERY, k=10, candidate_k=10, filter=even)).hits
        assert hits and all(hit.meta["even"] for hit in hits)
        assert all("dense" in hit.scores for hit in hits)
        unmatched = engine.search(SearchRequest("qqqq zzzz", k=3)).hits
    assert len(unmatched) == 3 and all(set(hit.scores) == {"dense", "fused"}
                                       for hit in unmatched)


def test_reopening_with_another_title_weight_rebuilds_the_lexical_index(tmp_path: Path) -> None:
    """``lexical_title_repeat`` is part of the saved lexical index: a data directory saved with
    another weight is re-indexed on open, so old and new rows score alike."""
    titled = [DocumentIn("Sourdough\n\nA starter of wild yeast, flour and water.", id="bread"),
              DocumentIn("Bread flour has more protein than cake flour and sourdough.",
                         id="flour")]
    request = SearchRequest("sourdough", k=2, mode="sparse")
    with Engine.open(EngineConfig(data_dir=tmp_path / "a", embedder=EmbedderConfig(name="hashing"),
                                  lexical=LexicalConfig(title_repeat=1))) as engine:
        engine.add(titled)
        once = [(hit.id, hit.score) for hit in engine.search(request).hits]
    with Engine.open(EngineConfig(data_dir=tmp_path / "a",
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        reopened = [(hit.id, hit.score) for hit in engine.search(request).hits]
    with Engine.open(EngineConfig(data_dir=tmp_path / "b",
                                  embedder=EmbedderConfig(name="hashing"))) as engine:
        engine.add(titled)
        fresh = [(hit.id, hit.score) for hit in engine.search(request).hits]
    assert reopened == fresh != once
    assert fresh[0][0] == "bread#0" and fresh[0][1] > dict(once)["bread#0"]
