"""The graph's durable part: chunk↔concept mentions in ``<data_dir>/graph.sqlite``.

Why a file of its own rather than tables in the system of record: the graph is *derived*
from chunk text, like the lexical index, and rebuildable from the record at any time; a
separate file works beside every :class:`~rcpkit.engine.store.Store` (the PostgreSQL record
included), keeps concept extraction out of the record's write transaction, and can be
deleted to rebuild. It is keyed by the record's chunk rowids, which never change meaning
(an edited document gets new rows), so one mention list per physical row serves every
snapshot (§7.7.1): a snapshot's graph is the mentions of the rows visible at it.

Tables: ``concepts`` (id, stemmed key, surface label), ``chunks`` (each processed row and
its ``doc#index`` hit id — rows without any concept are remembered too), ``mentions``
(chunk, concept, count) and ``meta`` (the record's ``database_id``, the extractor signature
and the write-log position the file reflects). Concept↔concept edges are not stored: they
are a function of the mentions at a snapshot, computed in one sparse product (see
``view``). Several processes may share the file (WAL; inserts are idempotent).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from rcpkit.engine.sidecar import SidecarDatabase

__all__ = ["GraphStorage", "StoredChunk"]

StoredChunk = tuple[int, str, list[tuple[int, float]]]
"""``(rowid, hit id, [(concept id, count)])``."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS concepts (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,
                                     label TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (rowid_ INTEGER PRIMARY KEY, hit_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS mentions (chunk INTEGER NOT NULL, concept INTEGER NOT NULL,
                                     count REAL NOT NULL, PRIMARY KEY (chunk, concept))
                                     WITHOUT ROWID;
"""


class GraphStorage:
    """SQLite persistence of concepts and mentions; one writer at a time per process."""

    def __init__(self, path: Path) -> None:
        self._file = SidecarDatabase(path, _SCHEMA)
        self._db = self._file.db
        self._lock = self._file.lock
        self._transaction = self._file.transaction

    def close(self) -> None:
        self._file.close()

    def meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def reset(self, settings: dict[str, str]) -> None:
        """Forget everything (a different record or extractor) and record ``settings``."""
        with self._transaction() as db:
            for table in ("meta", "concepts", "chunks", "mentions"):
                db.execute(f"DELETE FROM {table}")
            db.executemany("INSERT INTO meta VALUES (?, ?)", settings.items())

    def concept_ids(self, concepts: Iterable[tuple[str, str]]) -> dict[str, int]:
        """Ids of ``(key, label)`` concepts, creating the missing ones (first label wins)."""
        pairs = list(concepts)
        with self._transaction() as db:
            db.executemany("INSERT OR IGNORE INTO concepts (key, label) VALUES (?, ?)", pairs)
            ids: dict[str, int] = {}
            keys = [key for key, _ in pairs]
            for start in range(0, len(keys), 500):
                part = keys[start:start + 500]
                ids.update(db.execute(
                    f"SELECT key, id FROM concepts WHERE key IN ({','.join('?' * len(part))})",
                    part).fetchall())
        return ids

    def concepts(self, ids: Sequence[int] | None = None) -> list[tuple[int, str, str]]:
        """``(id, key, label)`` of every concept, or of those ``ids``."""
        with self._lock:
            if ids is None:
                return self._db.execute("SELECT id, key, label FROM concepts").fetchall()
            found: list[tuple[int, str, str]] = []
            for start in range(0, len(ids), 500):
                part = list(ids[start:start + 500])
                marks = ",".join("?" * len(part))
                found += self._db.execute(
                    f"SELECT id, key, label FROM concepts WHERE id IN ({marks})", part).fetchall()
            return found

    def save(self, chunks: Sequence[StoredChunk], removed: Sequence[int],
             position: int | None) -> None:
        """Record processed chunks, forget ``removed`` rows and (if given) the log
        ``position`` now reflected, in one transaction."""
        with self._transaction() as db:
            for start in range(0, len(removed), 500):
                part = list(removed[start:start + 500])
                marks = ",".join("?" * len(part))
                db.execute(f"DELETE FROM mentions WHERE chunk IN ({marks})", part)
                db.execute(f"DELETE FROM chunks WHERE rowid_ IN ({marks})", part)
            db.executemany("INSERT OR IGNORE INTO chunks VALUES (?, ?)",
                           [(rowid, hit_id) for rowid, hit_id, _ in chunks])
            db.executemany("INSERT OR IGNORE INTO mentions VALUES (?, ?, ?)",
                           [(rowid, concept, count) for rowid, _, mentions in chunks
                            for concept, count in mentions])
            if position is not None:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('position', ?)", (str(position),))

    def load(self, rowids: Sequence[int] | None = None) -> list[StoredChunk]:
        """Processed chunks (all, or those among ``rowids``) with their mentions."""
        with self._lock:
            if rowids is None:
                heads = self._db.execute("SELECT rowid_, hit_id FROM chunks").fetchall()
                rows = self._db.execute("SELECT chunk, concept, count FROM mentions").fetchall()
            else:
                heads, rows = [], []
                ids = [int(r) for r in rowids]
                for start in range(0, len(ids), 500):
                    part = ids[start:start + 500]
                    marks = ",".join("?" * len(part))
                    heads += self._db.execute(
                        f"SELECT rowid_, hit_id FROM chunks WHERE rowid_ IN ({marks})",
                        part).fetchall()
                    rows += self._db.execute(
                        f"SELECT chunk, concept, count FROM mentions WHERE chunk IN ({marks})",
                        part).fetchall()
        mentions: dict[int, list[tuple[int, float]]] = {rowid: [] for rowid, _ in heads}
        for chunk, concept, count in rows:
            if chunk in mentions:
                mentions[chunk].append((int(concept), float(count)))
        return [(int(rowid), str(hit_id), mentions[rowid]) for rowid, hit_id in heads]
