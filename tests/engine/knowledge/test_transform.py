"""query/transform without an LLM (§7.8): each method from the corpus itself."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from graph_corpus import DOCUMENTS

from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.transform import TRANSFORM_METHODS, QueryTransformer
from rcpkit.engine.types import SearchRequest


@pytest.fixture
def transformer(engine: Engine, graph: ConceptGraph) -> QueryTransformer:
    def top_texts(query: str, k: int) -> Sequence[str]:
        return [h.text or "" for h in
                engine.search(SearchRequest(query=query, k=k, mode="sparse")).hits]

    return QueryTransformer(graph, top_texts)


def run(transformer: QueryTransformer, engine: Engine, query: str, method: str,
        n: int | None = None) -> list[str]:
    return transformer.transform(query, method, n, engine.snapshot()).queries


def test_rewrite_drops_filler_and_fixes_spelling_against_the_corpus(
        transformer: QueryTransformer, engine: Engine) -> None:
    assert run(transformer, engine, "Could you tell me how  bees polinate flowers?",
               "rewrite") == ["How bees pollinate flowers?"]
    # Words the corpus knows, and short or non-alphabetic ones, are left alone.
    assert run(transformer, engine, "sourdough starter 42 ok", "rewrite") == [
        "sourdough starter 42 ok"]
    assert run(transformer, engine, "Telescpoe galaxy", "rewrite") == ["Telescope galaxy"]


def test_a_query_of_filler_only_is_kept(transformer: QueryTransformer, engine: Engine) -> None:
    assert run(transformer, engine, "please", "rewrite") == ["please"]


def test_multi_query_adds_feedback_and_graph_concepts(transformer: QueryTransformer,
                                                      engine: Engine) -> None:
    queries = run(transformer, engine, "sourdough starter", "multi-query", 3)
    assert queries[0] == "sourdough starter"
    assert len(queries) == 3 and len(set(queries)) == 3
    corpus = " ".join(d.text for d in DOCUMENTS).casefold()
    for variant in queries[1:]:
        added = variant.removeprefix("sourdough starter").split()
        assert added and all(word.casefold() in corpus for word in added)


def test_n_is_capped_by_max_n(transformer: QueryTransformer, engine: Engine) -> None:
    queries = run(transformer, engine, "honey bee", "multi-query", 50)
    assert 1 < len(queries) <= transformer.max_n


def test_decompose_distributes_a_shared_frame_over_entities(transformer: QueryTransformer,
                                                            engine: Engine) -> None:
    assert run(transformer, engine, "the role of yeast and steam in bread", "decompose") == [
        "the role of yeast in bread", "the role of steam in bread"]


def test_decompose_splits_clauses_and_questions(transformer: QueryTransformer,
                                                engine: Engine) -> None:
    assert run(transformer, engine,
               "how do bees make honey and how do sailors find north?", "decompose") == [
        "how do bees make honey", "how do sailors find north"]
    assert run(transformer, engine, "What is a galaxy? How far is Polaris?", "decompose",
               1) == ["What is a galaxy"]
    assert run(transformer, engine, "what is a pole star", "decompose") == [
        "what is a pole star"]


def test_step_back_generalises_through_the_community_hierarchy(
        transformer: QueryTransformer, engine: Engine, graph: ConceptGraph) -> None:
    (general,) = run(transformer, engine, "how does the queen bee lay eggs", "step-back")
    view = graph.view(engine.snapshot())
    bees = next(c for c in graph.communities(engine.snapshot(), 0)
                if view.keys.index("honey bee") in c.concepts)
    central = {word for c in bees.concepts[:5] for word in view.labels[c].split()}
    assert general.split() and set(general.split()) <= central


def test_hyde_is_an_extractive_passage_from_the_top_hits(transformer: QueryTransformer,
                                                         engine: Engine) -> None:
    result = transformer.transform("why does bread dough rise", "hyde", None,
                                   engine.snapshot())
    assert result.queries == ["why does bread dough rise"]
    assert result.hypothetical
    corpus = " ".join(d.text for d in DOCUMENTS)
    sentences = [s for s in result.hypothetical.split(". ") if s]
    assert all(s.rstrip(".") in corpus for s in sentences)
    assert "dough" in result.hypothetical.casefold()


def test_unknown_methods_are_refused(transformer: QueryTransformer, engine: Engine) -> None:
    with pytest.raises(ValueError):
        run(transformer, engine, "q", "summarise")


def test_every_method_answers_on_an_empty_corpus(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=16))
    with Engine.open(config) as engine:
        graph = ConceptGraph.open(tmp_path, engine.store)
        transformer = QueryTransformer(graph, lambda query, k: [])
        for method in TRANSFORM_METHODS:
            done = transformer.transform("honey bees and wax", method, 2, engine.snapshot())
            assert 1 <= len(done.queries) <= 2 and all(done.queries)
            assert done.hypothetical is None or done.hypothetical == "honey bees and wax"
        graph.close()
