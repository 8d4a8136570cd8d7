"""PostgresStore under the embedded backend's own test cases (same semantics, §7.7.1, §7.10,
§7.11, §8, §15.4), plus what only a shared database has: reopening by DSN."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest

from engine.test_store import (  # the SqliteStore suite, run unchanged against PostgreSQL
    DOCS,
    FIELDS,
    doc,
    test_delete_is_idempotent_with_exact_counts,
    test_delta_nets_out_rows_added_and_collected,
    test_filter_operator_by_field_type,
    test_filter_values_are_bound_not_concatenated,
    test_gc_respects_retention_and_logs_removals,
    test_identical_upsert_is_a_no_op,
    test_write_creates_versions_and_upsert_replaces,
)
from engine.test_store import (
    test_filter_is_evaluated_at_the_requested_version as check_filter_at_a_version,
)
from rcpkit.engine.errors import Unavailable
from rcpkit.engine.store import FeedbackRecord
from rcpkit.engine.store.postgres import PostgresStore

__all__ = [
    "test_delete_is_idempotent_with_exact_counts",
    "test_delta_nets_out_rows_added_and_collected",
    "test_filter_operator_by_field_type",
    "test_filter_values_are_bound_not_concatenated",
    "test_gc_respects_retention_and_logs_removals",
    "test_identical_upsert_is_a_no_op",
    "test_write_creates_versions_and_upsert_replaces",
]


def load_filter_corpus(store: PostgresStore) -> PostgresStore:
    """What the embedded suite's ``filtered`` fixture writes."""
    store.write([doc(name, meta=meta) for name, meta in DOCS.items()], [], new_fields=FIELDS)
    return store


@pytest.fixture(scope="module")
def filtered(new_schema: Callable[[], str]) -> Iterator[PostgresStore]:
    """One filter corpus shared by the read-only filter cases (one schema, not 35)."""
    store = load_filter_corpus(PostgresStore.open(new_schema()))
    yield store
    store.close()


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    opened = PostgresStore.open(pg_dsn)
    yield opened
    opened.close()


def test_filter_is_evaluated_at_the_requested_version(store: PostgresStore) -> None:
    check_filter_at_a_version(load_filter_corpus(store))  # it writes: not the shared corpus


def test_idempotency_feedback_and_settings_persist(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    store.write([doc("a")], [], new_fields={"lang": "keyword"}, idempotency_key="k1",
                reply={"ids": ["a"], "chunks": 1})
    store.record_feedback([FeedbackRecord(hit_id="a#0", doc_id="a", poison_suspected=True)] * 2)
    store.record_feedback([FeedbackRecord(hit_id="source:feed", doc_id="")])  # a clear
    store.set_setting("embedder", "hashing-64")
    database_id, secret = store.database_id, store.secret
    store.close()
    reopened = PostgresStore.open(pg_dsn)
    assert (reopened.database_id, reopened.secret) == (database_id, secret)
    assert reopened.idempotent_reply("k1") == ({"ids": ["a"], "chunks": 1}, 1)
    assert reopened.idempotent_reply("k2") is None
    assert reopened.field_types() == {"lang": "keyword"}
    assert reopened.poison_counts(reopened.feedback_position()) == {"a": 2}
    assert reopened.poison_counts(1) == {"a": 1}
    position = reopened.feedback_position()
    assert reopened.poison_clears(position) == {"source:feed": position}
    assert reopened.poison_clears(position - 1) == {}
    assert reopened.live_meta(["a", "gone"]) == {"a": {}}
    assert reopened.setting("embedder") == "hashing-64" and reopened.setting("other") is None
    reopened.close()


def test_counts_follow_versions(store: PostgresStore) -> None:
    store.write([doc("a", chunks=3), doc("b")], [])
    store.write([doc("a", text="v2", chunks=2)], ["b"])
    counts = store.counts()
    assert (counts.documents, counts.chunks, counts.stored_rows) == (1, 2, 6)
    assert counts.bytes_on_disk > 0


def test_iter_rows_returns_text_and_vectors(store: PostgresStore) -> None:
    written = store.write([doc("a", chunks=3)], []).added_rowids
    batches = list(store.iter_rows(batch_size=2))
    assert [b.rowids for b in batches] == [written[:2], written[2:]]
    assert batches[0].texts == ["body 0", "body 1"]
    assert batches[1].vectors.tolist() == [[3.0, 3.0, 3.0, 3.0]]


def test_vector_dimension_is_fixed_by_the_first_write(store: PostgresStore) -> None:
    store.write([doc("a")], [])
    wide = doc("b")
    wide = type(wide)(**{**{f: getattr(wide, f) for f in wide.__slots__},
                         "chunks": [type(wide.chunks[0])(
                             **{**{f: getattr(wide.chunks[0], f)
                                   for f in wide.chunks[0].__slots__},
                                "vector": wide.chunks[0].vector.repeat(2)})]})
    with pytest.raises(Unavailable):
        store.write([wide], [])
    assert store.current_seq() == 1 and store.counts().documents == 1


def test_unreachable_database_is_backend_unavailable() -> None:
    with pytest.raises(Unavailable):
        PostgresStore.open("postgresql://nobody@/nothing?host=/nonexistent-socket-dir")


def test_a_lost_connection_is_backend_unavailable_then_recovers(store: PostgresStore,
                                                                pg_dsn: str) -> None:
    store.write([doc("a")], [])
    assert store.current_seq() == 1  # the reader connection exists
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                      "WHERE pid <> pg_backend_pid() AND datname = current_database()")
    # Each dead connection fails one call (a write is never retried blindly: it may have
    # committed), and is replaced on the next one.
    with pytest.raises(Unavailable):
        store.current_seq()
    assert store.current_seq() == 1
    with pytest.raises(Unavailable):
        store.write([doc("b")], [])
    assert store.write([doc("b")], []).seq == 2


def test_a_bulk_load_refreshes_planner_statistics(store: PostgresStore, pg_dsn: str) -> None:
    """Without statistics the BM25 join plans badly; the store runs ``ANALYZE`` itself after
    its first thousand chunks rather than wait for autovacuum (docs/postgres.md)."""

    def manual_analyses() -> int:
        with psycopg.connect(pg_dsn) as db:
            row = db.execute("SELECT analyze_count FROM pg_stat_user_tables "
                             "WHERE relid = 'postings'::regclass").fetchone()
        assert row is not None
        return int(row[0])

    store.write([doc("a", chunks=999)], [])
    assert manual_analyses() == 0
    store.write([doc("b")], [])
    assert manual_analyses() == 1
    store.write([doc("c", chunks=10)], [])
    assert manual_analyses() == 1


def test_a_write_postgres_refuses_for_disk_space_is_disk_full(
        store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args: object) -> None:
        raise psycopg.errors.DiskFull("could not extend file: No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(PostgresStore, "_insert", full)
        with pytest.raises(Unavailable) as refused:
            store.write([doc("lost")], [])
    assert refused.value.detail == "disk full"
    assert store.counts().documents == 0
    store.write([doc("kept")], [])  # room again: the writer connection goes on
    assert store.counts().documents == 1
    tables = store.side_tables("CREATE TABLE IF NOT EXISTS notes (body text);")
    assert tables is not None
    with pytest.raises(Unavailable) as refused, tables.transaction() as db:
        db.execute("INSERT INTO notes VALUES ('lost')")
        raise psycopg.errors.DiskFull("could not extend file: No space left on device")
    assert refused.value.detail == "disk full"
    assert tables.read("SELECT body FROM notes") == []
