"""Crash safety (§7.10, §13.1): acknowledged writes survive ``kill -9``; indexes reconcile."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rcpkit.engine.config import EmbedderConfig, EngineConfig, IndexConfig, RetentionConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn, SearchRequest

WRITER = textwrap.dedent("""
    import sys
    from rcpkit.engine.config import EmbedderConfig, EngineConfig, IndexConfig, RetentionConfig
    from rcpkit.engine.core import Engine
    from rcpkit.engine.types import DocumentIn

    data_dir, round_no = sys.argv[1], int(sys.argv[2])
    engine = Engine.open(EngineConfig(data_dir=data_dir, embedder=EmbedderConfig(name="hashing"),
                                      index=IndexConfig(save_every=3),
                                      retention=RetentionConfig(versions=4, seconds=0)))
    print("ready", flush=True)
    i = 0
    while True:
        doc_id = f"r{round_no}-{i}"
        text = f"document {doc_id} about topic {i % 7} " + "filler words here " * (i % 5)
        engine.add([DocumentIn(text, id=doc_id, meta={"round": round_no, "n": i})], chunk=True)
        if i % 4 == 3:  # an upsert of an earlier document, leaving an old version to collect
            engine.add([DocumentIn(f"rewritten {i}", id=f"r{round_no}-{i - 3}")])
        print(doc_id, flush=True)
        i += 1
""")


def config(data_dir: Path) -> EngineConfig:
    return EngineConfig(data_dir=data_dir, embedder=EmbedderConfig(name="hashing"),
                        index=IndexConfig(save_every=3),
                        retention=RetentionConfig(versions=4, seconds=0))


def assert_consistent(data_dir: Path, engine: Engine) -> None:
    db = sqlite3.connect(data_dir / "store.sqlite3")
    try:
        orphans = db.execute(
            "SELECT COUNT(*) FROM chunks c LEFT JOIN documents d "
            "ON d.row = c.doc_row WHERE d.row IS NULL"
        ).fetchone()[0]
        empty = db.execute(
            "SELECT COUNT(*) FROM documents d WHERE NOT EXISTS "
            "(SELECT 1 FROM chunks c WHERE c.doc_row = d.row)"
        ).fetchone()[0]
        vectorless = db.execute(
            "SELECT COUNT(*) FROM chunks c WHERE NOT EXISTS "
            "(SELECT 1 FROM vectors v WHERE v.chunk_id = c.chunk_id)"
        ).fetchone()[0]
        duplicates = db.execute(
            "SELECT COUNT(*) FROM (SELECT doc_id FROM documents WHERE "
            "deleted_seq IS NULL GROUP BY doc_id HAVING COUNT(*) > 1)"
        ).fetchone()[0]
    finally:
        db.close()
    assert (orphans, empty, vectorless, duplicates) == (0, 0, 0, 0)
    stats = engine.stats()
    assert stats["lexical_rows"] == stats["dense_rows"] == stats["stored_rows"]


@pytest.mark.wire
def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(7)
    acknowledged: list[str] = []
    for round_no in range(4):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(round_no)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.3, 1.2))
        child.send_signal(signal.SIGKILL)
        acknowledged.extend(line.strip() for line in child.stdout if line.strip())
        child.wait()
        with Engine.open(config(tmp_path)) as engine:
            assert_consistent(tmp_path, engine)
            live = engine._store.live_hashes(acknowledged)
            assert set(acknowledged) <= set(live)
            probe = acknowledged[-1]
            hits = engine.search(
                SearchRequest(
                    f"document {probe}",
                    k=5,
                    mode="sparse",
                    filter={"field": "round", "op": "eq", "value": round_no},
                )
            ).hits
            assert probe in {hit.doc_id for hit in hits}
    assert len(acknowledged) > 8


def test_indexes_rebuild_when_corrupt_and_catch_up_when_behind(tmp_path: Path) -> None:
    cfg = config(tmp_path).with_overrides(index={"save_every": 1000})
    with Engine.open(cfg) as engine:
        engine.add([DocumentIn(f"alpha beta {i}", id=str(i)) for i in range(5)])
    # Behind: writes after the last save are replayed from the write log.
    crashing = Engine.open(cfg)
    stale_state = (tmp_path / "indexes" / "CURRENT").read_text()
    crashing.add([DocumentIn("gamma delta", id="late")])
    crashing._store.close()  # simulate a crash: the indexes are not saved on the way out
    assert (tmp_path / "indexes" / "CURRENT").read_text() == stale_state
    with Engine.open(cfg) as engine:
        assert engine.stats()["lexical_rows"] == 6
        assert engine.search(SearchRequest("gamma", k=1, mode="sparse")).hits[0].doc_id == "late"
    # Corrupt: a damaged index file forces a rebuild from the record.
    current = tmp_path / "indexes" / (tmp_path / "indexes" / "CURRENT").read_text()
    for path in (current / "lexical").iterdir():
        path.write_bytes(b"garbage")
    with Engine.open(cfg) as engine:
        assert engine.stats()["lexical_rows"] == 6
        assert engine.search(SearchRequest("gamma", k=1, mode="sparse")).hits[0].doc_id == "late"
