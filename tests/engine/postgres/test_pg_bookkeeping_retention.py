"""Bounded bookkeeping on PostgreSQL (the SQLite twin is tests/engine/
test_bookkeeping_retention.py): idempotency keys expire (§7.10); with database recall the
write log is pruned by age alone (nothing but the §7.7.1 garbage-collection time rule reads
it), with in-memory recall only below the saved state, and an engine sharing the database
that fell behind the pruned log reloads instead of missing changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from engine.test_bookkeeping_retention import (
    DAY,
    HOUR,
    churn,
    girders,
    results,
)
from engine.test_pipeline import make_config
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import HashingEmbedder
from rcpkit.engine.store.postgres import PostgresStore
from rcpkit.engine.types import DocumentIn
from support.clock import FakeClock


def pg_engine(dsn: str, data_dir: Path, clock: FakeClock, recall: str,
              **overrides: Any) -> Engine:
    return Engine(make_config(data_dir, store={"pg_recall": recall}, **overrides),
                  PostgresStore.open(dsn),
                  HashingEmbedder(64), {}, clock=clock)


def column(dsn: str, sql: str) -> list[Any]:
    with psycopg.connect(dsn) as db:
        return [row[0] for row in db.execute(sql)]


def test_keys_expire_and_the_log_is_pruned_by_age_with_database_recall(
        pg_dsn: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with pg_engine(pg_dsn, tmp_path, clock, "database") as engine:
        first = engine.add([DocumentIn("Concrete slab poured.", id="slab")], idempotency_key="k")
        clock.now += DAY - 60
        assert engine.add([DocumentIn("Rebar tied.", id="rebar")],
                          idempotency_key="k").ids == ["slab"]
        assert column(pg_dsn, "SELECT pos FROM write_log ORDER BY pos") == [1]
        clock.now += 120
        fresh = engine.add([DocumentIn("Rebar tied.", id="rebar")], idempotency_key="k")
        assert fresh.ids == ["rebar"] and fresh.index_version != first.index_version
        # No saved state bounds the pruning here: the day-old row 1 went, at any position.
        assert column(pg_dsn, "SELECT pos FROM write_log ORDER BY pos") == [2]
        engine.add(girders(0, 2), idempotency_key="other")
        clock.now += DAY + 1
        engine.delete(["absent"])
        assert column(pg_dsn, "SELECT key FROM idempotency") == []
        assert column(pg_dsn, "SELECT pos FROM write_log") == []
        store = engine._store
        assert store.log_position() == store.log_floor() == 3
        assert engine.stats()["documents"] == 4


def test_an_engine_behind_the_pruned_log_reloads_with_memory_recall(
        pg_dsn: str, tmp_path: Path) -> None:
    clock = FakeClock()
    with pg_engine(pg_dsn, tmp_path / "a", clock, "memory", index={"save_every": 4}) as writer, \
            pg_engine(pg_dsn, tmp_path / "b", clock, "memory") as reader:
        writer.add(girders(100, 102))
        assert reader.refresh() and results(reader) == results(writer)
        assert reader.indexes is not None
        behind = reader.indexes.position
        churn(writer, clock, rounds=4)
        assert writer._store.log_floor() > behind
        assert reader.refresh()
        assert results(reader) == results(writer)
        assert reader.stats()["documents"] == writer.stats()["documents"] == 2 + 4 * 3


def test_databases_made_before_retention_get_its_indexes(pg_dsn: str) -> None:
    PostgresStore.open(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute("DROP INDEX write_log_time")
        db.execute("DROP INDEX idempotency_time")
    store = PostgresStore.open(pg_dsn)
    try:
        assert column(pg_dsn, "SELECT to_regclass('write_log_time')::text") == ["write_log_time"]
        assert column(pg_dsn, "SELECT to_regclass('idempotency_time')::text") \
            == ["idempotency_time"]
        assert store.log_floor() == 0
        assert store.prune_bookkeeping(log_up_to=None, log_before=HOUR, keys_before=HOUR) \
            == (0, 0)
    finally:
        store.close()
