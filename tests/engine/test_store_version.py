"""The SQLite store records its schema version; a store written by a newer rcpkit (an unknown,
higher version) is refused with a clear message before anything in it changes, and one written
by an older rcpkit keeps its layout and answers as it did."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from rcpkit.cli.serve import ConfigError, _engine_server
from rcpkit.engine import Engine, EngineConfig
from rcpkit.engine.config import EmbedderConfig, LexicalConfig
from rcpkit.engine.store import ChunkWrite, DocumentWrite, SqliteStore, StoreVersionError
from rcpkit.engine.store.sqlite import SCHEMA_VERSION
from rcpkit.engine.types import DocumentIn, SearchRequest


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def one_document() -> DocumentWrite:
    chunk = ChunkWrite(index=0, start=0, end=4, text="body", context="", headings=(),
                       vector=np.ones(4, dtype=np.float32))
    return DocumentWrite(doc_id="a", text="body", meta={}, filter_meta={}, content_hash="h",
                         chunks=[chunk])


def newer_store(data_dir: Path) -> Path:
    path = data_dir / "store.sqlite3"
    data_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE future_layout (x)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    return path


def test_a_new_store_records_the_schema_version(tmp_path: Path) -> None:
    SqliteStore.open(tmp_path).close()
    assert user_version(tmp_path / "store.sqlite3") == SCHEMA_VERSION


def layout_1_store(data_dir: Path, version: int = 1) -> Path:
    """``store_v1.sql`` (a store the layout-1 code wrote) loaded into ``data_dir``."""
    path = data_dir / "store.sqlite3"
    data_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.executescript((Path(__file__).parent / "store_v1.sql").read_text(encoding="utf-8"))
        db.execute(f"PRAGMA user_version = {version}")
    return path


def test_a_store_from_before_versions_opens_with_its_data_and_is_marked(tmp_path: Path) -> None:
    path = layout_1_store(tmp_path, version=0)
    reopened = SqliteStore.open(tmp_path)
    try:
        assert reopened.current_seq() == 2 and len(reopened.visible_rowids(2)) == 3
    finally:
        reopened.close()
    assert user_version(path) == 1  # the layout its tables have


LAYOUT_1_ANSWERS = {
    # What the layout-1 code answered on this store: (query, mode) -> [(doc id, score)].
    ("quick brown fox", "dense"): [("fox", 0.301469), ("owl", 0.139686), ("bee", 0.0)],
    ("quick brown fox", "sparse"): [("fox", 2.088803)],
    ("owls at night", "dense"): [("owl", 0.631169), ("fox", 0.043244), ("bee", 0.0)],
    ("owls at night", "sparse"): [("owl", 1.285253)],
    ("honey", "dense"): [("bee", 0.377964), ("owl", 0.156174), ("fox", 0.0)],
    ("honey", "sparse"): [("bee", 0.691996)],
}


def test_a_layout_1_store_answers_as_before_and_keeps_its_layout(tmp_path: Path) -> None:
    path = layout_1_store(tmp_path)
    # The BM25 of the layout-1 code: no title weight (one owl text opens with a "# Owls"
    # title), a term weighed by its idf.
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          lexical=LexicalConfig(title_repeat=1, idf_exponent=1.0))
    with Engine.open(config) as engine:
        for (query, mode), expected in LAYOUT_1_ANSWERS.items():
            hits = engine.search(SearchRequest(query=query, k=5, mode=mode)).hits
            assert [(h.doc_id, round(h.score, 6)) for h in hits] == expected, (query, mode)
        engine.add([DocumentIn(id="ant", text="Ants carry leaves.")])
    with sqlite3.connect(path) as db:
        text, blob = db.execute("SELECT c.text, v.vector FROM chunks c JOIN vectors v "
                                "ON v.chunk_id = c.chunk_id WHERE c.doc_id = 'ant'").fetchone()
    assert user_version(path) == 1
    assert text == "Ants carry leaves." and len(blob) == 64 * 4  # float32, text stored


def test_a_new_store_keeps_float16_vectors_and_chunk_text_once(tmp_path: Path) -> None:
    text = "Ünïcode façade. Second part here. Third."
    vector = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    chunks = [ChunkWrite(index=0, start=0, end=15, text=text[:15], context="", headings=(),
                         vector=vector),
              ChunkWrite(index=1, start=16, end=33, text=text[16:33], context="ctx",
                         headings=("H",), vector=vector),
              ChunkWrite(index=2, start=34, end=40, text="not a slice", context="",
                         headings=(), vector=vector)]
    store = SqliteStore.open(tmp_path)
    try:
        rowids = store.write([DocumentWrite(doc_id="a", text=text, meta={}, filter_meta={},
                                            content_hash="h", chunks=chunks)], []).added_rowids
        records = store.chunks(rowids)
        assert [records[r].text for r in rowids] == [text[:15], text[16:33], "not a slice"]
        (batch,) = store.iter_rows()
        assert batch.texts == [text[:15], "ctx\n\nSecond part here.", "not a slice"]
        rounded = vector.astype(np.float16).astype(np.float32)
        assert np.array_equal(batch.vectors, np.stack([rounded] * 3))
        found, vectors = store.stored_vectors(np.array([rowids[2], rowids[0], 99]))
        assert found.tolist() == [rowids[0], rowids[2]]
        assert np.array_equal(vectors, np.stack([rounded] * 2))
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "store.sqlite3") as db:
        stored = db.execute("SELECT c.text, length(v.vector) FROM chunks c JOIN vectors v "
                            "ON v.chunk_id = c.chunk_id ORDER BY c.chunk_id").fetchall()
    assert stored == [(None, 8), (None, 8), ("not a slice", 8)]


def test_a_newer_store_is_refused_untouched(tmp_path: Path) -> None:
    path = newer_store(tmp_path)
    with pytest.raises(StoreVersionError, match=rf"schema version {SCHEMA_VERSION + 1}, newer "
                                                rf"than the {SCHEMA_VERSION} this rcpkit knows"):
        SqliteStore.open(tmp_path)
    assert tables(path) == {"future_layout"}  # none of our tables was created in it
    assert user_version(path) == SCHEMA_VERSION + 1


def test_serving_a_newer_store_fails_with_the_reason(tmp_path: Path) -> None:
    newer_store(tmp_path)
    with pytest.raises(ConfigError, match=r"cannot open the engine: the store .* upgrade rcpkit"):
        _engine_server(tmp_path, {"embedder": {"name": "hashing"}})


def documents_with(hashes: dict[str, str]) -> list[DocumentWrite]:
    return [DocumentWrite(doc_id=doc_id, text="body", meta={}, filter_meta={},
                          content_hash=content_hash, chunks=[]) for doc_id, content_hash
            in hashes.items()]


def stored_hashes(path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT doc_id, typeof(content_hash), length(CAST(content_hash AS "
                          "BLOB)) FROM documents ORDER BY row").fetchall()


SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize("layout", [2, 3])
def test_content_hashes_are_kept_by_the_layout_of_the_store(tmp_path: Path,
                                                            layout: int) -> None:
    """Layout 3 keeps a hexadecimal hash as its bytes (32 for SHA-256, not 64 characters)
    and any other hash as text; a layout-2 store keeps text. Either way the hash reads back
    as written, so an unchanged document stays unchanged and a changed one is replaced."""
    SqliteStore.open(tmp_path).close()
    path = tmp_path / "store.sqlite3"
    if layout == 2:  # the tables are the same: only the recorded layout differs
        with sqlite3.connect(path) as db:
            db.execute("PRAGMA user_version = 2")
    store = SqliteStore.open(tmp_path)
    try:
        hashes = {"sha": SHA, "short": "h", "upper": SHA.upper()}
        assert store.write(documents_with(hashes), []).changed_ids == list(hashes)
        assert store.live_hashes(list(hashes)) == hashes
        assert store.write(documents_with(hashes), []).changed_ids == []
        changed = {"sha": SHA[::-1], "short": "h"}
        assert store.write(documents_with(changed), []).changed_ids == ["sha"]
        assert store.live_hashes(list(hashes)) == {**hashes, **changed}
    finally:
        store.close()
    raw = ("blob", 32) if layout == 3 else ("text", 64)
    assert stored_hashes(path) == [("sha", *raw), ("short", "text", 1), ("upper", "text", 64),
                                   ("sha", *raw)]
    assert user_version(path) == layout
