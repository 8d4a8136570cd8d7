"""Collections sharing one PostgreSQL database, a schema each: separate records, and a drop
that removes one schema only."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from rcpkit.engine import open_engine
from rcpkit.engine.types import DocumentIn
from rcpkit.tenancy.collections import CollectionRegistry, schema_of

if TYPE_CHECKING:
    from rcpkit.engine.pgserver import LocalPostgres

CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as db:
        return {row[0] for row in db.execute(
            "SELECT schema_name FROM information_schema.schemata")}


def test_collections_share_one_database_in_separate_schemas(pg_server: LocalPostgres,
                                                            tmp_path: Path) -> None:
    registry = CollectionRegistry(tmp_path / "root")
    tag = uuid.uuid4().hex[:6]
    names = [f"docs-{tag}", f"notes-{tag}"]
    for name in names:
        registry.create(name, CONFIG, dsn=pg_server.dsn)
    assert {schema_of(name) for name in names} <= _schemas(pg_server.dsn)
    for name, texts in zip(names, (["tides rise twice a day"], ["owls", "bees", "moths"]),
                           strict=True):
        engine = open_engine(registry.path(name))
        try:
            assert engine.config.store.backend == "postgres"
            engine.add([DocumentIn(text=text, id=f"{name}-{n}") for n, text in enumerate(texts)])
        finally:
            engine.close()
    counts = {}
    for name in names:
        engine = open_engine(registry.path(name))
        try:
            counts[name] = engine.stats()["documents"]
            assert set(engine.documents_where({"field": "source", "op": "exists",
                                               "value": False})) <= {
                f"{name}-{n}" for n in range(3)}
        finally:
            engine.close()
    assert counts == {names[0]: 1, names[1]: 3}
    registry.drop(names[0])
    assert schema_of(names[0]) not in _schemas(pg_server.dsn)
    assert schema_of(names[1]) in _schemas(pg_server.dsn)
    assert registry.names() == [names[1]]
