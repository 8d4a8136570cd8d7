"""``rcpkit verify [--repair]`` on a root whose record is in PostgreSQL (through the real Typer
app, on the local server): what the record keeps for its own search (BM25 postings and
per-version statistics, the HNSW, GIN and b-tree indexes), the concept graph's tables in its
schema and the saved files of the data directory are checked against the rows; damage to
each is found, ``--repair`` rebuilds it (after which the engine answers as before), and
damage to the rows themselves is reported, never "repaired"."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from typer.testing import CliRunner, Result

from rcpkit.cli import app
from rcpkit.engine.core import open_engine
from rcpkit.engine.knowledge.graph import ConceptGraph
from rcpkit.engine.knowledge.tree import SummaryTree
from rcpkit.engine.types import DocumentIn, SearchRequest
from rcpkit.tenancy.collections import CollectionRegistry, schema_of

if TYPE_CHECKING:
    from rcpkit.engine.pgserver import LocalPostgres

TEXTS = ("Bees make honey in the hive. The queen lays eggs.", "Owls hunt at night in woods.",
         "Glaciers carve valleys of ice.", "The moon pulls the tide of the sea.",
         "Iron is shaped on the anvil at the forge.", "The loom weaves thread into cloth.")


def run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def config(dsn: str, recall: str = "database") -> str:
    return ('embedder = "hashing"\nhashing_dimension = 64\nbackend = "postgres"\n'
            f'dsn = {json.dumps(dsn)}\npg_recall = "{recall}"\n'
            '[field_types]\ntopic = "keyword"\n')


def make_root(path: Path, dsn: str, recall: str = "database") -> Path:
    """A root on PostgreSQL with deleted rows (several versions), the concept graph in the
    schema and the summary tree beside it."""
    path.mkdir()
    (path / "rcpkit.toml").write_text(config(dsn, recall))
    with open_engine(path) as engine:
        engine.add([DocumentIn(id=f"d{i}", text=text, meta={"topic": "nature" if i % 2 == 0
                                                              else "craft"})
                    for i, text in enumerate(TEXTS * 2)])
        engine.delete(["d1", "d2"])
        engine.add([DocumentIn(id="d0", text="Bees dance to tell the hive where flowers are.",
                               meta={"topic": "nature"})])
        ConceptGraph.open(path, engine.store).close()
        SummaryTree(path, engine.store).at(engine.store.current_seq())
    return path


@pytest.fixture
def root(pg_dsn: str, tmp_path: Path) -> Path:
    return make_root(tmp_path / "root", pg_dsn)


def answers(path: Path) -> list[list[str]]:
    with open_engine(path) as engine:
        return [[hit.doc_id for hit in engine.search(SearchRequest(
            query=query, k=4, mode=mode, filter={"field": "topic", "op": "eq",
                                                  "value": "nature"})).hits]
                for query in ("honey bees", "night owls", "sea tide")
                for mode in ("sparse", "dense", "hybrid")]


def sql(dsn: str, *statements: str) -> None:
    """Damage made behind the engine's back; ``replica`` turns foreign keys off, as a
    restore of a partial dump or a hand edit would."""
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SET session_replication_role = replica")
        for statement in statements:
            db.execute(statement)


def scalar(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as db:
        row = db.execute(query).fetchone()
    assert row is not None
    return int(row[0])


LIVE_CHUNK = "(SELECT MIN(chunk_id) FROM chunks WHERE deleted_seq IS NULL)"
SEQ = "(SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'seq')"

DERIVED_DAMAGE: dict[str, tuple[tuple[str, ...], str]] = {
    "postings lacking a chunk's terms": (
        (f"DELETE FROM postings WHERE chunk_id = {LIVE_CHUNK}",),
        "postgres/postings: 1 rows ("),
    "a wrong term frequency": (
        (f"UPDATE postings SET tf = tf + 1 WHERE chunk_id = {LIVE_CHUNK} AND term = "
         f"(SELECT MIN(term) FROM postings WHERE chunk_id = {LIVE_CHUNK})",),
        "with postings other than their text's"),
    "postings of no chunk": (
        ("INSERT INTO postings VALUES ('ghost', 999999, 1)",),
        "postgres/postings: holds 1 rows (999999) the record does not"),
    "a wrong token length": (
        (f"UPDATE chunks SET length = length + 3 WHERE chunk_id = {LIVE_CHUNK}",),
        "with a wrong token length"),
    "wrong BM25 statistics": (
        (f"UPDATE versions SET chunks = chunks + 1 WHERE seq = {SEQ}",),
        "postgres/versions: counts other chunks than the record at 1 versions"),
    "missing statistics": (
        (f"DELETE FROM versions WHERE seq = {SEQ}",),
        "postgres/versions: lacks the statistics of 1 retained versions"),
    "the HNSW index dropped": (
        ("DROP INDEX chunks_embedding",), "postgres/chunks_embedding: index missing"),
    "the filter index dropped": (
        ("DROP INDEX documents_filter",), "postgres/documents_filter: index missing"),
    "an invalid full-text index": (
        ("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'chunks_tsv'::regclass",),
        "postgres/chunks_tsv: index invalid"),
    "a graph row missing": (
        (f"DELETE FROM graph_chunks WHERE rowid_ = {LIVE_CHUNK}",),
        "graph tables: lacks 1 rows"),
    "a graph row of no chunk": (
        ("INSERT INTO graph_chunks VALUES (999999, 'ghost#0')",),
        "graph tables: holds 1 rows (999999) the record does not"),
}


def test_a_sound_postgres_root_passes(root: Path) -> None:
    checked = run("verify", "--data", str(root))
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.startswith(".: ok (")
    for part in ("record: 13 stored chunks", "search tables and indexes", "graph: 13 chunks",
                 "tree"):
        assert part in checked.stdout, checked.stdout


@pytest.mark.parametrize("damage", sorted(DERIVED_DAMAGE))
def test_damage_to_what_the_record_derives_is_found_and_repaired(
        root: Path, pg_dsn: str, damage: str) -> None:
    before = answers(root)
    statements, expected = DERIVED_DAMAGE[damage]
    sql(pg_dsn, *statements)
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1, found.output
    assert expected in found.stdout, found.stdout
    assert "(derived: `rcpkit verify --repair` rebuilds it)" in found.stdout
    repaired = run("verify", "--data", str(root), "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "repaired " in repaired.stdout
    assert run("verify", "--data", str(root)).exit_code == 0
    assert answers(root) == before


@pytest.mark.parametrize(("statement", "expected"), [
    ("DELETE FROM documents WHERE doc_id = 'd3'", "1 chunks without a document"),
    (f"UPDATE documents SET deleted_seq = {SEQ} WHERE doc_id = 'd3'",
     "1 live chunks of deleted documents"),
    (f"UPDATE chunks SET added_seq = {SEQ} + 5 WHERE chunk_id = {LIVE_CHUNK}",
     "1 rows newer than the recorded version"),
])
def test_damage_to_the_rows_is_reported_and_left_alone(root: Path, pg_dsn: str,
                                                       statement: str, expected: str) -> None:
    sql(pg_dsn, statement)
    rows = scalar(pg_dsn, "SELECT COUNT(*) FROM documents"), scalar(
        pg_dsn, "SELECT COUNT(*) FROM chunks WHERE deleted_seq IS NULL")
    for command in (("verify",), ("verify", "--repair")):
        found = run(*command, "--data", str(root))
        assert found.exit_code == 1, found.output
        assert f"FAILED .: postgres: {expected}" in found.stdout, found.stdout
        assert "(not derived: restore it from a backup)" in found.stdout
    assert (scalar(pg_dsn, "SELECT COUNT(*) FROM documents"), scalar(
        pg_dsn, "SELECT COUNT(*) FROM chunks WHERE deleted_seq IS NULL")) == rows


def test_saved_indexes_of_memory_recall_are_checked_against_the_postgres_record(
        new_schema: Callable[[], str], tmp_path: Path) -> None:
    """With ``pg_recall = "memory"`` the engine keeps saved indexes in the data directory:
    a file of them that lost its integrity is found and rebuilt from the PostgreSQL rows."""
    root = make_root(tmp_path / "memory", new_schema(), recall="memory")
    state = root / "indexes" / (root / "indexes" / "CURRENT").read_text().strip()
    assert "indexes: saved state" in run("verify", "--data", str(root)).stdout
    before = answers(root)
    lexical = state / "lexical" / "lexical.json"
    lexical.write_bytes(lexical.read_bytes().replace(b"{", b"[", 1))
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1 and "FAILED .: indexes/" in found.stdout, found.stdout
    repaired = run("verify", "--data", str(root), "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "repaired indexes: rebuilt from the record" in repaired.stdout
    assert answers(root) == before


def test_a_postgres_root_without_a_reachable_database_is_a_finding(tmp_path: Path) -> None:
    root = tmp_path / "gone"
    root.mkdir()
    (root / "rcpkit.toml").write_text(config(
        "postgresql://nobody@/nothing?host=/nonexistent-socket-dir"))
    found = run("verify", "--data", str(root))
    assert found.exit_code == 1
    assert "FAILED .: postgres: cannot connect to PostgreSQL" in found.stdout, found.stdout


def test_each_postgres_collection_of_a_root_is_verified_in_its_own_schema(
        pg_server: LocalPostgres, tmp_path: Path) -> None:
    registry = CollectionRegistry(tmp_path / "root")
    tag = uuid.uuid4().hex[:6]
    names = [f"docs-{tag}", f"notes-{tag}"]
    for name in names:
        registry.create(name, 'embedder = "hashing"\nhashing_dimension = 64\n',
                        dsn=pg_server.dsn)
        with open_engine(registry.path(name)) as engine:
            engine.add([DocumentIn(id=f"{name}-{n}", text=text)
                        for n, text in enumerate(TEXTS)])
    assert run("verify", "--data", str(tmp_path / "root")).exit_code == 0
    with psycopg.connect(pg_server.dsn, autocommit=True) as db:
        db.execute(f'DELETE FROM "{schema_of(names[1])}".postings')
    found = run("verify", "--data", str(tmp_path / "root"))
    assert found.exit_code == 1
    assert f"FAILED collections/{names[1]}: postgres/postings: 6 rows" in found.stdout, \
        found.stdout
    assert f"collections/{names[0]}: ok" in found.stdout
    repaired = run("verify", "--data", str(tmp_path / "root"), "--collection", names[1],
                   "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert run("verify", "--data", str(tmp_path / "root")).exit_code == 0
