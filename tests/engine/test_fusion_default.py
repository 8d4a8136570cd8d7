"""The default hybrid score is a relevance in [0, 1] (§7.7 minScore, §16.3), advertised (§6.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rcpkit.binding.capabilities import capabilities
from rcpkit.engine.config import EngineConfig
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
    engine = Engine.open(EngineConfig(data_dir=path, embedder="hashing").with_overrides(
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
    with open_engine(tmp_path / "rrf", default_fusion="rrf") as rrf_engine:
        top = rrf_engine.search(SearchRequest(query, k=1)).hits[0]
        assert top.score == pytest.approx(2 / 61)
    with open_engine(tmp_path / "dense", default_fusion_alpha=1.0) as dense_weighted:
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
    assert scales["hybrid"] == {"fusion": engine.config.default_fusion, "scale": "normalised",
                                "min": 0.0, "max": 1.0}
    assert scales["dense"]["scale"] == "cosine" and scales["sparse"]["scale"] == "bm25"
    assert retrieve["scoreFloor"] == -1.0
    with open_engine(tmp_path / "rrf", default_fusion="rrf") as rrf_engine:
        hybrid = capabilities(rrf_engine.describe(), None)["retrieve"]["x-rcpkit-scores"]["hybrid"]
        assert hybrid == {"fusion": "rrf", "scale": "rrf"}
