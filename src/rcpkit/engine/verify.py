"""Audit of one engine data directory, safe beside the processes serving it, and the repair
of what is derived.

What is checked: the record (SQLite's ``integrity_check`` and the references between its
tables), every file of the saved index state (``state.json`` lists each with its checksum
and carries its own), the rows each index channel holds against the rows the record held at
the state's write-log position (lexical, dense, sentence windows, filter columns, chunk
fields: every stored chunk, nothing else), the concept graph's rows against the record
likewise, the memory store's integrity, and the saved summary tree.

SQLite keeps no checksum of row contents: damage inside a value of the record passes
``integrity_check``, and is caught by the checksums of a backup instead (``rcpkit backup``).

Repair rebuilds what is derived from the record: the saved indexes (through the engine,
as on an open that finds none), the concept graph, and the summary tree (deleted: the next
tree query builds it). Damage to the record or to the memories is reported, never
"repaired": restore those from a backup.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rcpkit.engine.config import load_config
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import EngineError, Unavailable
from rcpkit.engine.indexes.columns import FilterColumns
from rcpkit.engine.indexes.derived import INDEX_DIR, current_state, index_lock, state_problems
from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.indexes.records import ChunkFields
from rcpkit.engine.indexes.windows import SentenceWindowIndex
from rcpkit.engine.sidecar import GRAPH_FILE, MEMORY_FILE, TREE_FILE
from rcpkit.engine.store.sql import fold_log
from rcpkit.engine.store.sqlite import SqliteStore
from rcpkit.files import rename_durably

__all__ = ["DataDirReport", "Finding", "verify_data_dir"]

_SHOWN = 5
"""Row ids named in one finding (the count says how many)."""
POSTGRES = "postgres"
"""Where a finding in a PostgreSQL record is (its search tables: ``postgres/<part>``)."""
GRAPH_TABLES = "graph tables"
"""Where a finding in the concept graph's tables in a PostgreSQL schema is."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: the file or part it is in, what is wrong, and whether ``--repair``
    rebuilds it (derived) or it needs a backup (the record, the memories)."""

    where: str
    problem: str
    derived: bool


@dataclass(slots=True)
class DataDirReport:
    """What verifying one data directory checked, found and repaired."""

    checked: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    def add(self, where: str, problem: str, *, derived: bool) -> None:
        self.findings.append(Finding(where, problem, derived))


@dataclass(frozen=True, slots=True)
class _Record:
    """The record's rows and log, read in one transaction."""

    database_id: str
    log_position: int
    log_floor: int
    stored: frozenset[int]
    log: list[tuple[int, list[int], list[int]]]
    chunk_names: dict[int, str]

    def rows_at(self, position: int) -> frozenset[int] | None:
        """The stored rows at write-log ``position``; None when the log no longer reaches it."""
        if position < self.log_floor or position > self.log_position:
            return None
        delta = fold_log(position, [row for row in self.log if row[0] > position], list)
        return (self.stored - frozenset(delta.added)) | frozenset(delta.removed)


def _sqlite_problems(path: Path) -> list[str]:
    """``integrity_check`` of an SQLite file (read-only: safe on a live database)."""
    try:
        db = sqlite3.connect(path, timeout=30.0)
        try:
            db.execute("PRAGMA query_only=ON")
            rows = [str(row[0]) for row in db.execute("PRAGMA integrity_check(20)")]
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return [f"not a readable SQLite database ({exc})"]
    return [] if rows == ["ok"] else rows


_REFERENCES = (
    ("chunks without a document", "SELECT COUNT(*) FROM chunks c LEFT JOIN documents d "
     "ON d.row = c.doc_row WHERE d.row IS NULL"),
    ("live chunks of deleted documents", "SELECT COUNT(*) FROM chunks c JOIN documents d "
     "ON d.row = c.doc_row WHERE c.deleted_seq IS NULL AND d.deleted_seq IS NOT NULL"),
    ("rows newer than the recorded version", "SELECT COUNT(*) FROM chunks WHERE added_seq > "
     "(SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'seq')"),
)
"""References between the record's tables that every backend keeps (SQL both speak)."""


@dataclass(frozen=True, slots=True)
class _RecordSql:
    """How one backend's record is read by :func:`_read_record`."""

    where: str
    begin: str
    references: tuple[tuple[str, str], ...]
    log_position: str
    stored_chunks: str
    ids: Callable[[Any], Iterable[int]]
    errors: tuple[type[Exception], ...]
    """What reading it raises when it is damaged (a missing setting included)."""


_SQLITE = _RecordSql(
    where=SqliteStore.FILE_NAME, begin="BEGIN",
    references=(
        ("chunks without a vector", "SELECT COUNT(*) FROM chunks c LEFT JOIN vectors v "
         "ON v.chunk_id = c.chunk_id WHERE v.chunk_id IS NULL"),
        ("vectors without a chunk", "SELECT COUNT(*) FROM vectors v LEFT JOIN chunks c "
         "ON c.chunk_id = v.chunk_id WHERE c.chunk_id IS NULL"),
        *_REFERENCES),
    log_position="SELECT seq FROM sqlite_sequence WHERE name = 'write_log'",
    stored_chunks="SELECT c.chunk_id, c.doc_id, c.idx FROM chunks c JOIN documents d "
                  "ON d.row = c.doc_row JOIN vectors v ON v.chunk_id = c.chunk_id",
    ids=json.loads, errors=(sqlite3.DatabaseError, KeyError, ValueError))


def _read_record(db: Any, sql: _RecordSql, report: DataDirReport) -> _Record | None:
    """The record's references checked, and what the derived stores are compared with, in
    one read transaction on ``db`` (call after reading them: their positions are then at or
    below the record's)."""
    try:
        db.execute(sql.begin)  # one snapshot for every read below
        for what, query in sql.references:
            count = int(db.execute(query).fetchone()[0])
            if count:
                report.add(sql.where, f"{count} {what}", derived=False)
        settings = dict(db.execute("SELECT key, value FROM settings").fetchall())
        position = db.execute(sql.log_position).fetchone()
        names = {int(rowid): f"{doc_id}#{index}"
                 for rowid, doc_id, index in db.execute(sql.stored_chunks)}
        log = [(int(pos), list(sql.ids(added)), list(sql.ids(removed)))
               for pos, added, removed in db.execute(
                   "SELECT pos, added, removed FROM write_log ORDER BY pos")]
        db.execute("COMMIT")
        record = _Record(settings["database_id"], 0 if position is None else int(position[0]),
                         int(settings.get("log_floor", 0)), frozenset(names), log, names)
        report.checked.append(f"record: {len(names)} stored chunks at version "
                              f"{int(settings['seq'])}")
    except sql.errors as exc:
        report.add(sql.where, f"unreadable ({type(exc).__name__}: {exc})", derived=False)
        return None
    return record


def _rows(found: Iterable[int]) -> str:
    rows = sorted(int(r) for r in found)
    shown = ", ".join(map(str, rows[:_SHOWN]))
    return f"{len(rows)} rows ({shown}{', …' if len(rows) > _SHOWN else ''})"


def _compare(report: DataDirReport, where: str, held: Iterable[int],
             expected: frozenset[int], *, complete: bool = True) -> None:
    """Rows ``held`` by a derived part against the record's: none extra and, when the part
    is ``complete`` (holds every row), none missing."""
    held = frozenset(int(r) for r in held)
    if extra := held - expected:
        report.add(where, f"holds {_rows(extra)} the record does not", derived=True)
    if complete and (missing := expected - held):
        report.add(where, f"lacks {_rows(missing)} of the record", derived=True)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Rows a derived store holds, per part, at its write-log position."""

    where: str
    database_id: str | None
    position: int
    parts: dict[str, frozenset[int]]
    names: dict[int, str] = field(default_factory=dict)
    """Hit ids the graph gives its rows."""


_INCOMPLETE_PARTS = ("dense/windows", "fields")
"""Parts that may leave a row out: a window belongs to some row, and the chunk fields skip
a row whose metadata they cannot encode (read from the record instead)."""


def _saved_indexes(data_dir: Path, report: DataDirReport) -> _Derived | None:
    """The rows of every part of the current saved state, its files checked (under the
    shared index lock, released before the record is read: no save waits on the record)."""
    if not (data_dir / INDEX_DIR / "CURRENT").exists():
        report.checked.append("indexes: none saved (built on the next open)")
        return None
    readers: dict[str, Callable[[Path], Iterable[int]]] = {
        "lexical": lambda d: LexicalIndex.load(d).held_rowids(),
        "dense": lambda d: SentenceWindowIndex.saved_rowids(d)[0],
        "dense/windows": lambda d: SentenceWindowIndex.saved_rowids(d.parent)[1],
        "columns": lambda d: FilterColumns.load(d).held_rowids(),
        "fields": lambda d: ChunkFields.load(d).held_rowids()}
    with index_lock(data_dir, exclusive=False):
        try:
            state_dir, state = current_state(data_dir)
            position = int(state["position"])
        except (OSError, ValueError, KeyError) as exc:
            report.add(INDEX_DIR, f"unreadable saved state ({exc})", derived=True)
            return None
        where = f"{INDEX_DIR}/{state_dir.name}"
        for problem in state_problems(state_dir, state):
            report.add(f"{where}/{problem.partition(':')[0]}", problem.partition(": ")[2],
                       derived=True)
        parts = {}
        for part, read in readers.items():
            try:
                parts[part] = frozenset(int(r) for r in read(state_dir / part))
            except Exception as exc:  # any unreadable part is a finding, never a crash
                report.add(f"{where}/{part}", f"unreadable ({type(exc).__name__}: {exc})",
                           derived=True)
    report.checked.append(f"indexes: saved state at write-log position {position}")
    return _Derived(where, state.get("database_id"), position, parts)


def _graph_rows(db: Any, where: str, sql: _RecordSql,
                report: DataDirReport) -> _Derived | None:
    """The concept graph's rows and position, read in one transaction on ``db``."""
    try:
        db.execute(sql.begin)
        meta = dict(db.execute("SELECT key, value FROM graph_meta").fetchall())
        chunks = {int(rowid): hit_id for rowid, hit_id in
                  db.execute("SELECT rowid_, hit_id FROM graph_chunks")}
        db.execute("COMMIT")
    except sql.errors as exc:
        report.add(where, f"unreadable ({exc})", derived=True)
        return None
    report.checked.append(f"graph: {len(chunks)} chunks")
    return _Derived(where, meta.get("database_id"), int(meta.get("position", 0)),
                    {"": frozenset(chunks)}, chunks)


def _graph(data_dir: Path, report: DataDirReport) -> _Derived | None:
    path = data_dir / GRAPH_FILE
    if not path.is_file():
        return None
    problems = _sqlite_problems(path)
    for problem in problems:
        report.add(GRAPH_FILE, problem, derived=True)
    if problems:
        return None
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        return _graph_rows(db, GRAPH_FILE, _SQLITE, report)
    finally:
        db.close()


def _compare_derived(derived: _Derived, record: _Record, report: DataDirReport) -> None:
    """Each part's rows against the rows the record held at the part's position."""
    if derived.database_id not in (None, record.database_id):
        report.add(derived.where, "made for another record", derived=True)
        return
    expected = record.rows_at(derived.position)
    if expected is None:
        report.add(derived.where, f"at write-log position {derived.position}, which the "
                                  f"record's log ({record.log_floor}..{record.log_position}) "
                                  "does not reach", derived=True)
        return
    for part, held in derived.parts.items():
        _compare(report, f"{derived.where}/{part}".rstrip("/"), held, expected,
                 complete=part not in _INCOMPLETE_PARTS)
    renamed = [rowid for rowid, hit_id in derived.names.items()
               if rowid in record.chunk_names and record.chunk_names[rowid] != hit_id]
    if renamed:
        report.add(derived.where, f"names {_rows(renamed)} otherwise than the record",
                   derived=True)


def _check_tree(data_dir: Path, database_id: str, report: DataDirReport) -> None:
    path = data_dir / TREE_FILE
    if not path.is_file():
        return
    try:
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            for name in saved.files:
                saved[name]  # reading each member checks its CRC-32
    except Exception as exc:  # any unreadable tree is a finding, never a crash
        report.add(TREE_FILE, f"unreadable ({type(exc).__name__}: {exc})", derived=True)
        return
    if meta.get("database") != database_id:
        report.add(TREE_FILE, "made for another record", derived=True)
    report.checked.append("tree")


def _compare_all(data_dir: Path, record: _Record | None,
                 derived: Iterable[_Derived | None], report: DataDirReport) -> None:
    if record is None:
        return
    for part in derived:
        if part is not None:
            _compare_derived(part, record, report)
    _check_tree(data_dir, record.database_id, report)


def _check_sqlite(data_dir: Path, report: DataDirReport) -> None:
    path = data_dir / SqliteStore.FILE_NAME
    if not path.is_file():
        report.checked.append("no record yet")
        return
    if (data_dir / MEMORY_FILE).is_file():
        for problem in _sqlite_problems(data_dir / MEMORY_FILE):
            report.add(MEMORY_FILE, problem, derived=False)
        report.checked.append("memory")
    damage = _sqlite_problems(path)
    for problem in damage:
        report.add(SqliteStore.FILE_NAME, problem, derived=False)
    if damage:
        return
    # The derived stores are read before the record, so that their positions (which only
    # grow) are at or below the one the record is read at, even while processes write.
    indexes = _saved_indexes(data_dir, report)
    graph = _graph(data_dir, report)
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    try:
        db.execute("PRAGMA query_only=ON")
        record = _read_record(db, _SQLITE, report)
    finally:
        db.close()
    _compare_all(data_dir, record, (indexes, graph), report)


def _check_postgres(data_dir: Path, dsn: str | None, in_memory: bool,
                    report: DataDirReport) -> None:
    """The record's tables, the search tables and indexes it keeps (BM25 postings and
    statistics, HNSW, GIN), the concept graph's tables in its schema, and the files of the
    data directory (saved indexes with ``pg_recall = "memory"``, the tree)."""
    try:
        from rcpkit.engine.store.postgres import audit, connection
    except ImportError as exc:
        report.add(POSTGRES, f"cannot be checked without psycopg ({exc}): pip install "
                             "'rcpkit[postgres]'", derived=False)
        return
    if not dsn:
        report.add(POSTGRES, "no DSN (dsn in rcpkit.toml or RCPKIT_DSN)", derived=False)
        return
    try:
        db = connection.connect(dsn)
    except Unavailable as exc:
        report.add(POSTGRES, str(exc), derived=False)
        return
    sql = _postgres_sql()
    with db:
        if not connection.relation_exists(db, "versions"):
            report.checked.append("no record yet")
            return
        # With recall in the database no index is saved, unless an earlier memory recall did.
        indexes = _saved_indexes(data_dir, report) if in_memory or \
            (data_dir / INDEX_DIR / "CURRENT").exists() else None
        graph = _graph_rows(db, GRAPH_TABLES, sql, report) \
            if connection.relation_exists(db, "graph_meta") else None
        record = _read_record(db, sql, report)
        if record is not None:
            for part, problem in audit.audit(db):
                report.add(f"{POSTGRES}/{part}", problem, derived=True)
            report.checked.append("search tables and indexes")
    _compare_all(data_dir, record, (indexes, graph), report)


def _postgres_sql() -> _RecordSql:
    import psycopg
    return _RecordSql(
        where=POSTGRES, begin="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        references=_REFERENCES,
        log_position="SELECT CAST(value AS BIGINT) FROM settings WHERE key = 'log_pos'",
        stored_chunks="SELECT c.chunk_id, c.doc_id, c.idx FROM chunks c JOIN documents d "
                      "ON d.row = c.doc_row",
        ids=list, errors=(psycopg.Error, KeyError, ValueError))


def _check(data_dir: Path, report: DataDirReport) -> None:
    try:
        config = load_config(data_dir)
    except EngineError as exc:
        report.add("rcpkit.toml", str(exc), derived=False)
        return
    if config.store.backend == "postgres":
        _check_postgres(data_dir, config.store.dsn, config.store.pg_recall == "memory", report)
    else:
        _check_sqlite(data_dir, report)


def _set_aside(path: Path) -> None:
    """Move a damaged SQLite file (and its WAL) out of the way, kept for inspection."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("", "-wal", "-shm"):
        damaged = Path(f"{path}{suffix}")
        if damaged.exists():
            rename_durably(damaged, damaged.with_name(f"{damaged.name}.damaged-{stamp}"))


def _repair(data_dir: Path, findings: list[Finding], report: DataDirReport) -> None:
    """Rebuild the derived parts ``findings`` blame, from the record."""
    places = {finding.where.split("/")[0] for finding in findings if finding.derived}
    if TREE_FILE in places:
        (data_dir / TREE_FILE).unlink(missing_ok=True)
        report.repaired.append(f"{TREE_FILE}: deleted (rebuilt on the next tree query)")
    search = {finding.where.partition("/")[2] for finding in findings
              if finding.derived and finding.where.startswith(f"{POSTGRES}/")}
    if search:
        from rcpkit.engine.store.postgres import PostgresStore
        store = PostgresStore.open(str(load_config(data_dir).store.dsn))
        try:
            report.repaired.extend(f"{POSTGRES}/{done}" for done in store.rebuild_search(search))
        finally:
            store.close()
    graph = places & {GRAPH_FILE, GRAPH_TABLES}
    if not places & {INDEX_DIR} and not graph:
        return
    if INDEX_DIR in places:
        with index_lock(data_dir, exclusive=True):
            (data_dir / INDEX_DIR / "CURRENT").unlink(missing_ok=True)
    damaged_graph = GRAPH_FILE in places and bool(_sqlite_problems(data_dir / GRAPH_FILE))
    if damaged_graph:
        _set_aside(data_dir / GRAPH_FILE)
    with Engine.open(load_config(data_dir)) as engine:  # no saved state: rebuilt, then saved
        if graph:
            # Only here: the graph needs the optional `graph` extra, the rest of verify not.
            from rcpkit.engine.knowledge.graph.component import ConceptGraph
            from rcpkit.engine.knowledge.graph.storage import GraphStorage
            if not damaged_graph:
                storage = GraphStorage.open(data_dir, engine.store)
                storage.reset({})  # unlike any record's settings: the open rebuilds it all
                storage.close()
            ConceptGraph.open(data_dir, engine.store).close()
            report.repaired.append(f"{graph.pop()}: rebuilt from the record")
    if INDEX_DIR in places:
        report.repaired.append(f"{INDEX_DIR}: rebuilt from the record and saved")


def verify_data_dir(data_dir: Path, *, repair: bool = False) -> DataDirReport:
    """Audit ``data_dir``; with ``repair``, rebuild the derived parts found wrong and audit
    again (the report's findings are what remains)."""
    report = DataDirReport()
    _check(data_dir, report)
    if repair and any(finding.derived for finding in report.findings):
        _repair(data_dir, report.findings, report)
        again = DataDirReport(repaired=report.repaired)
        _check(data_dir, again)
        return again
    return report
