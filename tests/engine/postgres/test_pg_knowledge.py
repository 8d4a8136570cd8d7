"""The concept graph (§7.9) and the memories (§7.17) on PostgreSQL: kept in the record's own
schema, so they answer as on the embedded backend, survive reopening, are shared by every
engine on the database, and stay apart between schemas (collections)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

pytest.importorskip("scipy")
pytest.importorskip("igraph")

from engine.knowledge.graph_corpus import DOCUMENTS, spy_on_extraction
from engine.test_pipeline import make_config
from engine.wire.engine_wire import HASHING_CONFIG, HttpEngine, make_data_dir
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.graph import GRAPH_FILE, ConceptGraph
from rcpkit.engine.knowledge.memory import MEMORY_FILE, KnowledgeMemory, Recall
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.engine.types import DocumentIn

QUERIES = ("the honey bee colony", "sourdough starter yeast", "a star in the galaxy")


def postgres_engine(dsn: str, data_dir: Path) -> Engine:
    return Engine(make_config(data_dir), PostgresStore.open(dsn), HashingEmbedder(32), {})


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine.open(make_config(tmp_path / "sqlite",
                                 embedder={"hashing_dimension": 32})) as engine:
        engine.add(DOCUMENTS)
        yield engine


@pytest.fixture
def pg_engine(pg_dsn: str, tmp_path: Path) -> Iterator[Engine]:
    engine = postgres_engine(pg_dsn, tmp_path / "pg")
    engine.add(DOCUMENTS)
    yield engine
    engine.close()


def answers(engine: Engine, graph: ConceptGraph) -> dict[str, object]:
    """Every op's answer in backend-neutral terms (hit ids, node ids, summaries)."""
    seq = engine.snapshot()
    local = {q: [(h.nodes, h.edges, round(h.score, 9)) for h in graph.local(seq, q, 5)]
             for q in QUERIES}
    seed = graph.local(seq, QUERIES[0], 1)[0].nodes[-1]
    around = graph.neighbors(seq, [seed, "concept:honey bee"], 2, 20)
    return {
        "local": local,
        "neighbors": ([(n.id, round(n.score, 9), n.kind, n.label) for n in around.nodes],
                      around.edges, around.unknown),
        "communities": [[graph.describe(seq, c).cited for c in graph.communities(seq, level)]
                        for level in range(graph.hierarchy(seq).depth)],
        "global": {q: graph.ranked_communities(seq, q, 0, 3) for q in QUERIES},
        "drift": {q: graph.followups(seq, q, 3) for q in QUERIES},
    }


def open_memory(engine: Engine, graph: ConceptGraph) -> KnowledgeMemory:
    def live_view() -> tuple[object, str]:
        seq = engine.snapshot()
        return graph.view(seq), engine.version_token(seq)

    return KnowledgeMemory.open(engine.config.data_dir, engine.store, graph.extractor,
                                live_view)  # type: ignore[arg-type]


def recalled(recall: Recall) -> tuple[object, ...]:
    return (recall.clues, [(d.id, round(d.score, 9), d.text) for d in recall.drafts])


def test_graph_ops_on_postgres_answer_as_on_sqlite_and_keep_no_file(
        sqlite_engine: Engine, pg_engine: Engine) -> None:
    on_sqlite = ConceptGraph.open(sqlite_engine.config.data_dir, sqlite_engine.store)
    on_postgres = ConceptGraph.open(pg_engine.config.data_dir, pg_engine.store)
    assert answers(pg_engine, on_postgres) == answers(sqlite_engine, on_sqlite)
    assert (sqlite_engine.config.data_dir / GRAPH_FILE).exists()
    assert not (pg_engine.config.data_dir / GRAPH_FILE).exists()
    on_sqlite.close()
    on_postgres.close()


def test_a_second_engine_on_the_database_shares_the_graph_without_extracting(
        pg_engine: Engine, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ConceptGraph.open(pg_engine.config.data_dir, pg_engine.store)
    pg_engine.on_publish(first.sync)
    expected = answers(pg_engine, first)
    extracted = spy_on_extraction(monkeypatch)
    other = postgres_engine(pg_dsn, tmp_path / "other")
    second = ConceptGraph.open(other.config.data_dir, other.store)
    assert extracted == []  # every mention came from the database
    assert answers(other, second) == expected

    def chunk_extractions() -> int:
        return sum("Bumblebees pollinate" in text for text in extracted)

    # A write through the first engine is extracted once, there; the second loads it.
    pg_engine.add([DocumentIn("Bumblebees pollinate tomatoes in greenhouses.", id="bumble")])
    assert chunk_extractions() == 1
    other.refresh()
    second.sync()
    hits = second.local(other.snapshot(), "bumblebees tomatoes", 3)
    assert hits[0].nodes[-1] == "bumble#0"
    assert chunk_extractions() == 1
    first.close()
    second.close()
    other.close()


def test_memory_build_and_recall_on_postgres_as_on_sqlite_and_after_reopening(
        sqlite_engine: Engine, pg_engine: Engine, pg_dsn: str, tmp_path: Path) -> None:
    results = []
    for engine in (sqlite_engine, pg_engine):
        graph = ConceptGraph.open(engine.config.data_dir, engine.store)
        memory = open_memory(engine, graph)
        live, _ = memory.build(None, memory_id=None, scope="global", caller="a")
        inline, _ = memory.build([("notes", "Queen bees lay eggs. Drones mate with the queen.")],
                                 memory_id=None, scope="session", caller="a")
        inline, _ = memory.build([("more", "Royal jelly feeds the queen bee larvae.")],
                                 memory_id=inline, scope=None, caller="a")
        results.append([recalled(memory.recall(q, memory_id=m, caller="a", n=3))
                        for q in QUERIES for m in (live, inline)])
        memory.close()
        graph.close()
        assert (engine.config.data_dir / MEMORY_FILE).exists() == (engine is sqlite_engine)
    assert results[0] == results[1]
    # Another engine on the database (a fresh data directory) recalls the same memories.
    other = postgres_engine(pg_dsn, tmp_path / "other")
    graph = ConceptGraph.open(other.config.data_dir, other.store)
    memory = open_memory(other, graph)
    again = [recalled(memory.recall(q, memory_id=m, caller="a", n=3))
             for q in QUERIES for m in (live, inline)]
    assert again == results[1]
    assert memory.recall("queen bee", memory_id=None, caller="a", n=3).memory_id == inline
    memory.close()
    graph.close()
    other.close()


def test_collections_in_separate_schemas_keep_separate_graphs_and_memories(
        pg_engine: Engine, new_schema: Callable[[], str], tmp_path: Path) -> None:
    graph = ConceptGraph.open(pg_engine.config.data_dir, pg_engine.store)
    open_memory(pg_engine, graph).build(None, memory_id=None, scope="global", caller="a")
    other = postgres_engine(new_schema(), tmp_path / "other")
    other.add([DocumentIn("Volcanoes erupt molten lava and ash.", id="volcano")])
    apart = ConceptGraph.open(other.config.data_dir, other.store)
    assert apart.chunk_count == 1
    assert apart.local(other.snapshot(), "the honey bee colony", 5) == []
    with pytest.raises(Exception, match="no memory"):
        open_memory(other, apart).recall("volcano", memory_id=None, caller="a", n=3)
    apart.close()
    graph.close()
    other.close()


def test_graph_tables_are_created_once_and_reopening_is_idempotent(pg_engine: Engine,
                                                                   pg_dsn: str) -> None:
    for _ in range(2):
        ConceptGraph.open(pg_engine.config.data_dir, pg_engine.store).close()
    with psycopg.connect(pg_dsn) as db:
        chunks = db.execute("SELECT count(*) FROM graph_chunks").fetchone()
        version = db.execute(
            "SELECT value FROM settings WHERE key = 'schema_version'").fetchone()
    assert chunks is not None and chunks[0] == pg_engine.store.counts().chunks
    assert version is not None and version[0] == "1"


def test_two_http_servers_on_one_database_share_the_graph_and_the_memories(
        pg_dsn: str, tmp_path: Path) -> None:
    config = f"backend = \"postgres\"\ndsn = {json.dumps(pg_dsn)}\n{HASHING_CONFIG}"
    a, b = (HttpEngine(make_data_dir(tmp_path / name, config)) for name in ("a", "b"))
    try:
        a.ok("index/add", {"documents": [{"id": d.id, "text": d.text} for d in DOCUMENTS]})
        local = {"op": "local", "query": "the honey bee colony", "k": 3}
        assert b.ok("graph", local)["hits"] == a.ok("graph", local)["hits"]
        memory_id = a.ok("memory/build", {"scope": "global"})["memoryId"]
        recalled_by_b = b.ok("memory/recall", {"query": "honey bee", "memoryId": memory_id})
        assert recalled_by_b["clues"] == a.ok(
            "memory/recall", {"query": "honey bee", "memoryId": memory_id})["clues"]
        assert not (tmp_path / "a" / GRAPH_FILE).exists()
        assert not (tmp_path / "b" / MEMORY_FILE).exists()
    finally:
        a.close()
        b.close()
