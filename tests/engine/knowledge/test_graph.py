"""The concept graph component (§7.9): extraction kept in step with the record, snapshots
(§7.7.1), personalised PageRank, neighbourhoods, hierarchical communities."""

from __future__ import annotations

from pathlib import Path

import pytest
from graph_corpus import DOCUMENTS, spy_on_extraction, topic_of

from rcpkit.engine.config import EmbedderConfig, EngineConfig, RetentionConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import ConceptExtractor, ConceptGraph
from rcpkit.engine.knowledge.graph.communities import Hierarchy
from rcpkit.engine.types import DocumentIn


def doc_ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [hit.nodes[-1].split("#")[0] for hit in hits]


def test_local_walks_from_the_query_concepts_to_their_chunks(engine: Engine,
                                                              graph: ConceptGraph) -> None:
    hits = graph.local(engine.snapshot(), "the honey bee colony", 4)
    assert [topic_of(d) for d in doc_ids(hits)] == ["bees"] * 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    top = hits[0]
    chunk = top.nodes[-1]
    assert all(node.startswith("concept:") for node in top.nodes[:-1])
    assert {dst for _, dst in top.edges} == {chunk}
    assert "concept:honey bee" in top.nodes


def test_a_query_without_known_concepts_has_no_local_hits(engine: Engine,
                                                          graph: ConceptGraph) -> None:
    assert graph.local(engine.snapshot(), "quantum chromodynamics", 5) == []


def test_writes_reach_the_graph_through_the_publish_hook(engine: Engine,
                                                         graph: ConceptGraph) -> None:
    before = graph.chunk_count
    engine.add([DocumentIn("Bumblebees pollinate tomatoes in greenhouses.", id="bumble")])
    assert graph.chunk_count == before + 1
    hits = graph.local(engine.snapshot(), "bumblebees tomatoes", 3)
    assert doc_ids(hits)[0] == "bumble"


def test_an_op_pinned_to_a_snapshot_sees_that_snapshots_graph(engine: Engine,
                                                              graph: ConceptGraph) -> None:
    pinned = engine.snapshot()
    engine.delete([d.id for d in DOCUMENTS if d.id and d.id.startswith("bees")])
    assert graph.local(engine.snapshot(), "honey bee colony", 5) == []
    assert {topic_of(d) for d in doc_ids(graph.local(pinned, "honey bee colony", 5))} == {
        "bees"}


def test_rows_published_before_a_sync_are_extracted_on_demand(engine: Engine) -> None:
    graph = ConceptGraph.open(engine.config.data_dir, engine.store)  # no hook registered
    engine.add([DocumentIn("Mead is fermented honey and water.", id="mead")])
    assert "mead" in doc_ids(graph.local(engine.snapshot(), "mead", 3))
    graph.close()


def test_collected_rows_leave_the_graph(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=16),
                          retention=RetentionConfig(versions=1, seconds=0))
    with Engine.open(config) as engine:
        engine.add(DOCUMENTS)
        graph = ConceptGraph.open(tmp_path, engine.store)
        engine.on_publish(graph.sync)
        engine.delete(["bees-0", "bees-1"])
        engine.add([DocumentIn("A later write collects the deleted rows.", id="later")])
        assert graph.chunk_count == len(DOCUMENTS) - 2 + 1
        graph.close()


def test_reopening_loads_the_stored_mentions_without_extracting(
        engine: Engine, graph: ConceptGraph, monkeypatch: pytest.MonkeyPatch) -> None:
    seq = engine.snapshot()
    expected = graph.local(seq, "sourdough starter", 3)
    graph.close()

    extracted = spy_on_extraction(monkeypatch)
    reopened = ConceptGraph.open(engine.config.data_dir, engine.store)
    assert reopened.chunk_count == len(DOCUMENTS)
    assert reopened.local(seq, "sourdough starter", 3) == expected
    assert extracted == ["sourdough starter"]  # the query only, no stored chunk
    reopened.close()


def test_a_graph_made_by_another_extractor_is_rebuilt(engine: Engine,
                                                      graph: ConceptGraph) -> None:
    graph.close()
    narrow = ConceptGraph.open(engine.config.data_dir, engine.store,
                               ConceptExtractor(per_text=2))
    view = narrow.view(engine.snapshot())
    assert view.counts.getnnz(axis=1).max() == 2
    narrow.close()


def test_neighbors_expand_hop_by_hop(engine: Engine, graph: ConceptGraph) -> None:
    seq = engine.snapshot()
    one = graph.neighbors(seq, ["bees-0#0"], 1, 50)
    assert one.nodes[0].id == "bees-0#0" and one.nodes[0].score == 1.0
    assert {n.kind for n in one.nodes[1:]} == {"concept"}
    two = graph.neighbors(seq, ["bees-0#0"], 2, 50)
    reached = {n.id for n in two.nodes if n.kind == "chunk"} - {"bees-0#0"}
    assert reached and {topic_of(r) for r in reached} == {"bees"}
    ids = {n.id for n in two.nodes}
    assert all(src in ids and dst in ids and weight > 0 for src, dst, weight in two.edges)
    assert all(0 < n.score <= 1.0 for n in two.nodes)
    assert len(graph.neighbors(seq, ["bees-0#0"], 2, 3).nodes) == 1 + 3


def test_neighbors_report_unknown_seeds(engine: Engine, graph: ConceptGraph) -> None:
    found = graph.neighbors(engine.snapshot(), ["concept:honey bee", "nope#0"], 1, 5)
    assert found.unknown == ["nope#0"]
    assert found.nodes[0].label == "honey bees"  # the first surface form seen


def _community_of(graph: ConceptGraph, seq: int, key: str) -> str:
    view = graph.view(seq)
    concept = view.keys.index(key)
    return next(c.id for c in graph.communities(seq, 0) if concept in c.concepts)


def test_topics_fall_into_separate_level_zero_communities(engine: Engine,
                                                          graph: ConceptGraph) -> None:
    seq = engine.snapshot()
    bees = _community_of(graph, seq, "honey bee")
    bread = _community_of(graph, seq, "sourdough")
    stars = _community_of(graph, seq, "pole star")
    assert len({bees, bread, stars}) == 3
    assert _community_of(graph, seq, "worker bee") == bees
    described = graph.describe(seq, graph.hierarchy(seq).by_id[bread])
    assert described.cited and {topic_of(c) for c in described.cited} == {"bread"}
    bread_text = " ".join(d.text for d in DOCUMENTS if d.id and d.id.startswith("bread"))
    sentences = [s.strip() for s in described.summary.split(". ") if s.strip()]
    assert sentences and all(s.rstrip(".") in bread_text for s in sentences)  # extractive


def test_communities_are_deterministic(engine: Engine, graph: ConceptGraph) -> None:
    view = graph.view(engine.snapshot())
    first = Hierarchy(view, graph.extractor, lambda rows: {})
    again = Hierarchy(view, graph.extractor, lambda rows: {})
    assert [(c.id, c.concepts) for c in first.communities] == [
        (c.id, c.concepts) for c in again.communities]


def test_deeper_levels_split_large_communities(engine: Engine, graph: ConceptGraph) -> None:
    view = graph.view(engine.snapshot())
    hierarchy = Hierarchy(view, graph.extractor, lambda rows: {}, split_above=3)
    children = [c for c in hierarchy.communities if c.level == 1]
    assert children
    for child in children:
        parent = hierarchy.by_id[child.parent or ""]
        assert child.id.startswith(parent.id + ".")
        assert set(child.concepts) <= set(parent.concepts)


def test_global_ranks_the_communities_of_the_query(engine: Engine,
                                                   graph: ConceptGraph) -> None:
    seq = engine.snapshot()
    ranked = graph.ranked_communities(seq, "sourdough bread fermentation", 0, 2)
    assert ranked[0].id == _community_of(graph, seq, "sourdough")
    # The three topics share no concept: no walk mass reaches the others' communities.
    assert [c.id for c in ranked] == [ranked[0].id]
    assert ranked[0].score is not None and 0 < ranked[0].score <= 1
    assert {topic_of(c) for c in ranked[0].cited} == {"bread"}


def test_drift_followups_come_from_neighbouring_communities(engine: Engine,
                                                             graph: ConceptGraph) -> None:
    seq = engine.snapshot()
    alone = graph.followups(seq, "honey bee pollination", 3)
    bees = graph.hierarchy(seq).by_id[_community_of(graph, seq, "honey bee")]
    bee_words = {w for c in bees.concepts for w in graph.view(seq).labels[c].split()}
    assert len(alone) == 1 and set(alone[0].split()) <= bee_words  # only its own community
    assert len(set(alone[0].split())) == len(alone[0].split())
    engine.add([DocumentIn("Honey bees pollinate the wheat whose flour and yeast make "
                           "sourdough bread dough.", id="bridge")])
    seq = engine.snapshot()
    followups = graph.followups(seq, "honey bee pollination", 3)
    assert len(followups) == 2 and len(set(followups)) == 2
    bread = graph.hierarchy(seq).by_id[_community_of(graph, seq, "sourdough")]
    bread_labels = {graph.view(seq).labels[c] for c in bread.concepts}
    assert any(label in followups[0] for label in bread_labels)


def test_every_op_answers_on_an_empty_corpus(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=16))
    with Engine.open(config) as engine:
        graph = ConceptGraph.open(tmp_path, engine.store)
        engine.on_publish(graph.sync)
        empty = engine.snapshot()
        engine.add([DocumentIn("the of and 42", id="bare")])  # a chunk without concepts
        bare = engine.snapshot()
        for seq in (empty, bare):
            assert graph.local(seq, "honey", 5) == []
            assert graph.communities(seq, 0) == []
            assert graph.ranked_communities(seq, "honey", 0, 3) == []
            assert graph.followups(seq, "honey", 3) == []
        assert graph.neighbors(empty, ["bare#0"], 2, 5).unknown == ["bare#0"]
        alone = graph.neighbors(bare, ["bare#0"], 2, 5)
        assert [n.id for n in alone.nodes] == ["bare#0"] and alone.edges == []
        graph.close()


def test_processes_sharing_a_data_directory_share_the_extraction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", hashing_dimension=16))
    with Engine.open(config) as writer, Engine.open(config) as reader:
        writer_graph = ConceptGraph.open(tmp_path, writer.store)
        writer.on_publish(writer_graph.sync)
        reader_graph = ConceptGraph.open(tmp_path, reader.store)
        reader.on_publish(reader_graph.sync)
        writer.add(DOCUMENTS[:4])
        extracted = spy_on_extraction(monkeypatch)
        assert reader.refresh()  # takes the other writer's version in, and the hook runs
        assert reader_graph.chunk_count == 4 and extracted == []  # read from graph.sqlite
        hits = reader_graph.local(reader.snapshot(), "honey bee", 2)
        assert [topic_of(d) for d in doc_ids(hits)] == ["bees", "bees"]
        writer_graph.close()
        reader_graph.close()
