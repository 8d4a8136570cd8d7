"""PostgreSQL records written by earlier commits of main (``store_fixtures/pg-*.tar.gz``: the
schema as ``pg_dump --inserts`` wrote it, made by ``store_fixtures/make_fixture.py`` with a
DSN) load into a fresh schema, open, answer as the code that wrote them did, and accept
writes:

- ``pg-v0.1.0``: the 0.1.0 release (d31bc57), before the schema version was recorded;
- ``pg-layout3``: schema version 1 (c865768).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest

FIXTURES = Path(__file__).parent.parent / "store_fixtures"


def load(name: str, dsn: str, tmp_path: Path) -> tuple[Path, list[Any]]:
    """The fixture's data directory, its answers, and its record in ``dsn``'s schema."""
    with tarfile.open(FIXTURES / f"{name}.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    dump = (tmp_path / "record.sql").read_text(encoding="utf-8")
    script = "\n".join(line for line in dump.splitlines() if not line.startswith("\\"))
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute("SELECT current_schema()").fetchone()
        assert row is not None
        schema = sql.Identifier(row[0])
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
        db.execute(script.encode())  # creates and fills the schema "fixture"
        db.execute(sql.SQL("ALTER SCHEMA fixture RENAME TO {}").format(schema))
    return tmp_path / "data", json.loads((tmp_path / "answers.json").read_text())


def ranked(engine: Any, expected: list[Any]) -> list[Any]:
    """Each recorded query's doc ids, and the scores but for hybrid (whose default fusion
    changed since 0.1.0; a channel's own scores did not)."""
    return [[query, mode, [[hit.doc_id, None if mode == "hybrid" else round(hit.score, 5)]
                           for hit in engine.search(SearchRequest(query=query, k=5,
                                                                  mode=mode)).hits]]
            for query, mode, _ in expected]


def schema_version(dsn: str) -> str | None:
    with psycopg.connect(dsn) as db:
        row = db.execute("SELECT value FROM settings WHERE key = 'schema_version'").fetchone()
    return None if row is None else str(row[0])


@pytest.mark.parametrize("name", ["pg-v0.1.0", "pg-layout3"])
def test_an_earlier_postgres_record_opens_answers_as_before_and_accepts_writes(
        name: str, pg_dsn: str, tmp_path: Path) -> None:
    data, expected = load(name, pg_dsn, tmp_path)
    recorded = [[q, m, [[d, None if m == "hybrid" else s] for d, s in hits]]
                for q, m, hits in expected]
    # The BM25 of the commits that wrote them: a term weighed its idf.
    with open_engine(data, store={"dsn": pg_dsn}, lexical={"idf_exponent": 1.0}) as engine:
        assert ranked(engine, expected) == recorded
        engine.add([DocumentIn(id="kiln", text="The kiln fires clay pots.",
                               meta={"topic": "craft"})])
        engine.delete(["owl"])
    assert schema_version(pg_dsn) == "1"
    with open_engine(data, store={"dsn": pg_dsn}) as engine:
        hits = engine.search(SearchRequest(query="kiln clay", k=1, mode="sparse")).hits
        assert [hit.doc_id for hit in hits] == ["kiln"]
        assert set(engine.store.live_hashes(["bee", "owl", "forge", "loom", "tide", "kiln"])) \
            == {"bee", "forge", "loom", "kiln"}
