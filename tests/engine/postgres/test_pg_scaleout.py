"""Several processes on one database: versions allocated safely under concurrent
writers, and a write through one process visible through another (§7.7.1, §7.10)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from rcpkit.engine.store.postgres import PostgresStore

# A child process: its own PostgresStore on the same database, driven by argv.
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from rcpkit.engine.store import ChunkWrite, DocumentWrite
    from rcpkit.engine.store.postgres import PostgresStore

    dsn, action, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = PostgresStore.open(dsn)
    if action == "write":
        seqs = []
        for i in range(count):
            text = f"{name} wrote document {i} about cranes"
            vector = np.ones(4, dtype=np.float32)
            chunk = ChunkWrite(index=0, start=0, end=len(text), text=text, context="",
                               headings=(), vector=vector)
            doc = DocumentWrite(doc_id=f"{name}-{i}", text=text, meta={}, filter_meta={},
                                content_hash=text, chunks=[chunk])
            seqs.append(store.write([doc], []).seq)
        print(json.dumps(seqs))
    else:
        seq = store.current_seq()
        rows, _ = store.lexical_search(name, 100, seq)
        print(json.dumps({"seq": seq,
                          "docs": sorted(r.doc_id for r in store.chunks(rows.tolist()).values())}))
    store.close()
""")


def child(dsn: str, action: str, name: str, count: int = 0) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, dsn, action, name, str(count)],
                            stdout=subprocess.PIPE, text=True)


def result(process: subprocess.Popen[str]) -> object:
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    return json.loads(out)


def test_concurrent_writers_get_distinct_gapless_versions(pg_dsn: str) -> None:
    store = PostgresStore.open(pg_dsn)
    writers = [child(pg_dsn, "write", name, 25) for name in ("alpha", "beta", "gamma")]
    seqs = [result(w) for w in writers]
    assert all(isinstance(s, list) for s in seqs)
    flat = sorted(s for part in seqs for s in part)  # type: ignore[union-attr]
    assert flat == list(range(1, 76))
    assert store.current_seq() == 75
    counts = store.counts()
    assert (counts.documents, counts.chunks) == (75, 75)
    delta = store.delta_since(0)
    assert delta.position == store.log_position() == 75
    assert delta.added == store.visible_rowids(75).tolist()
    # Every version is a consistent snapshot: version v holds exactly v documents.
    assert [len(store.visible_rowids(v)) for v in (1, 30, 75)] == [1, 30, 75]
    store.close()


def test_a_write_through_one_process_is_visible_through_another(pg_dsn: str) -> None:
    here = PostgresStore.open(pg_dsn)
    assert result(child(pg_dsn, "write", "remote", 2)) == [1, 2]
    # Seen here at once, with no reopen: reads go to the shared database.
    assert here.current_seq() == 2
    rows, _ = here.lexical_search("remote", 10, 2)
    assert {r.doc_id for r in here.chunks(rows.tolist()).values()} == {"remote-0", "remote-1"}
    assert here.live_hashes(["remote-0"]).keys() == {"remote-0"}
    # And the other way round: a local write is seen by a fresh process.
    local = here.write([], ["remote-0"])
    assert local.seq == 3 and local.deleted == 1
    seen = result(child(pg_dsn, "read", "remote"))
    assert seen == {"seq": 3, "docs": ["remote-1"]}
    # Interleaved: the remote process appends while this one keeps its snapshot pinned.
    assert result(child(pg_dsn, "write", "late", 1)) == [4]
    assert len(here.visible_rowids(3)) == 1 and len(here.visible_rowids(4)) == 2
    vectors = here.vectors(here.visible_rowids(4).tolist())
    np.testing.assert_array_equal(vectors, np.ones((2, 4), dtype=np.float32))
    here.close()
