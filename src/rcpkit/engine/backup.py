"""Online backups of engine data directories and their restore.

A backup is a directory: a copy of each data directory (its record, side stores, saved
indexes and ``rcpkit.toml``), any extra files the caller names (a root's ``keys.json``), and
``backup.json``, a manifest giving every file's size and checksum and, per record, the
version it holds (its §7.7.1 ``indexVersion``).

Consistency while processes serve and write: SQLite files are copied with SQLite's backup
API in one step, which reads one committed snapshot (WAL lets writers go on meanwhile). The
saved index state is copied first, under the shared index lock (saves take it exclusively),
then the side stores, then the record: every derived copy is at a write-log position at or
below the record's, so a restored engine loads it and catches up from the log, exactly as
after a restart (a state it cannot use is rebuilt from the record). The memories are
copied at their own instant, just before the record. The summary tree (``tree.npz``) is
not copied: it is rebuilt on the first tree query. A PostgreSQL record is its schema (with
the side tables it keeps), dumped by ``pg_dump`` at one exported snapshot in which its
version is read, and restored by ``pg_restore`` before any file is put in place.

A backup is written to a hidden sibling directory and renamed into place once complete, so
an interrupted backup never looks like one. Restore checks every checksum before it writes
anything, copies into a hidden sibling and renames it into place.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcpkit.engine.config import CONFIG_FILE, load_config
from rcpkit.engine.indexes.derived import INDEX_DIR, current_state, index_lock
from rcpkit.engine.indexes.persist import file_checksum
from rcpkit.engine.sidecar import GRAPH_FILE, MEMORY_FILE
from rcpkit.engine.store.sqlite import SqliteStore, copy_database
from rcpkit.files import fsync_directory, private_dir, rename_durably, sync_file, write_new

__all__ = ["MANIFEST", "BackupError", "BackupManifest", "StoreCopy", "backup", "read_manifest",
           "restore", "verify_backup"]

MANIFEST = "backup.json"
_FORMAT = 1
PG_DUMP = "record.pgdump"
"""A PostgreSQL record's schema, ``pg_dump``'s custom format, in its data directory's copy."""
_SIDE_STORES = (GRAPH_FILE, MEMORY_FILE)
"""SQLite files beside the record, copied with the backup API like it."""


class BackupError(ValueError):
    """A backup cannot be made, read or restored as asked (the message says why)."""


@dataclass(frozen=True, slots=True)
class StoreCopy:
    """One data directory in a backup: where it is, and what its record holds."""

    path: str
    """Relative to the backup (and to the restored root); ``""`` for the root itself."""
    backend: str
    seq: int | None = None
    index_version: str | None = None
    """The §7.7.1 ``indexVersion`` of the newest version in the copy."""


@dataclass(frozen=True, slots=True)
class BackupManifest:
    """What ``backup.json`` records."""

    created_at: float
    target: str
    """What a restore replaces, relative to the restored root: ``""`` (the whole root) or
    one collection's directory."""
    stores: list[StoreCopy]
    files: dict[str, dict[str, Any]]
    """Relative path → ``{"size": bytes, "checksum": "<algorithm>:<hex>"}``."""
    linked: list[str] = field(default_factory=list)
    """Files hard-linked from the earlier backup an incremental one was made since."""

    def as_json(self) -> dict[str, Any]:
        return {"format": _FORMAT, "created_at": self.created_at, "target": self.target,
                "stores": [{"path": s.path, "backend": s.backend, "seq": s.seq,
                            "index_version": s.index_version} for s in self.stores],
                "files": self.files, "linked": self.linked}


# ── writing files durably ──────────────────────────────────────────────────

def _copy_file(source: Path, target: Path) -> None:
    """Copy ``source`` to a new private file ``target``, flushed to disk."""
    private_dir(target.parent)
    with open(source, "rb") as reading:
        write_new(target, lambda writing: shutil.copyfileobj(reading, writing, 1 << 20))


@dataclass(slots=True)
class _Previous:
    """An earlier backup, for an incremental one: a file of a saved index state is never
    rewritten (each save makes a new state directory), so one the earlier backup holds at
    the same path and size is hard-linked from it, with its recorded checksum."""

    directory: Path
    files: Mapping[str, Mapping[str, Any]]
    linked: dict[str, dict[str, Any]] = field(default_factory=dict)

    def link(self, name: str, source: Path, target: Path) -> bool:
        entry = self.files.get(name)
        if entry is None or entry["size"] != source.stat().st_size:
            return False
        private_dir(target.parent)
        try:
            os.link(self.directory / name, target)
        except OSError:  # another file system, or the file is gone: copy instead
            return False
        self.linked[name] = dict(entry)
        return True


def _copy_indexes(data_dir: Path, target: Path, relative: str,
                  previous: _Previous | None) -> None:
    """The current saved index state (``CURRENT`` and the directory it names), if any and
    readable: one that is not would be rebuilt from the record anyway."""
    root = data_dir / INDEX_DIR
    if not root.is_dir():
        return
    with index_lock(data_dir, exclusive=False):
        try:
            state, _ = current_state(data_dir)
        except (OSError, ValueError):
            return
        for path in sorted(state.rglob("*")):
            if path.is_file():
                inside = Path(INDEX_DIR, state.name, path.relative_to(state))
                name = (Path(relative) / inside).as_posix()
                if previous is None or not previous.link(name, path, target / inside):
                    _copy_file(path, target / inside)
        _copy_file(root / "CURRENT", target / INDEX_DIR / "CURRENT")


def _copy_data_dir(data_dir: Path, target: Path, relative: str,
                   previous: _Previous | None) -> StoreCopy:
    """Copy one data directory: configuration, saved indexes, side stores, then the record
    (in that order: see the module docstring)."""
    config = load_config(data_dir)
    if (data_dir / CONFIG_FILE).is_file():
        _copy_file(data_dir / CONFIG_FILE, target / CONFIG_FILE)
    _copy_indexes(data_dir, target, relative, previous)
    if config.store.backend == "postgres" and config.store.dsn:
        return _dump_postgres(config.store.dsn, target / PG_DUMP, relative)
    if config.store.backend != "sqlite":
        return StoreCopy(relative, config.store.backend)
    for name in _SIDE_STORES:
        if (data_dir / name).is_file():
            copy_database(data_dir / name, target / name)
    record = data_dir / SqliteStore.FILE_NAME
    if not record.is_file():
        return StoreCopy(relative, config.store.backend)
    copy_database(record, target / SqliteStore.FILE_NAME)
    with sqlite3.connect(target / SqliteStore.FILE_NAME) as db:
        settings = dict(db.execute("SELECT key, value FROM settings "
                                   "WHERE key IN ('seq', 'database_id')").fetchall())
    db.close()
    seq = int(settings["seq"])
    return StoreCopy(relative, config.store.backend, seq, f"{settings['database_id']}.{seq}")


def _dump_postgres(dsn: str, target: Path, relative: str) -> StoreCopy:
    """``pg_dump`` of the record's schema (its side tables with it) at one snapshot, whose
    version is read in the same snapshot (``pg_export_snapshot``)."""
    import psycopg

    from rcpkit.engine.pgserver import client_tool

    private_dir(target.parent)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        snapshot, schema = _one(db.execute("SELECT pg_export_snapshot(), current_schema()"))
        settings: dict[str, str] = dict(db.execute(
            "SELECT key, value FROM settings WHERE key IN ('seq', 'database_id')").fetchall())
        dumped = subprocess.run(
            [client_tool("pg_dump"), f"--dbname={dsn}", f"--schema={schema}",
             f"--snapshot={snapshot}", "--format=custom", "--no-owner", f"--file={target}"],
            capture_output=True, text=True)
        db.execute("COMMIT")
    if dumped.returncode != 0:
        raise BackupError(f"pg_dump of schema {schema} failed: {dumped.stderr.strip()}")
    sync_file(target)
    seq = int(settings["seq"])
    return StoreCopy(relative, "postgres", seq, f"{settings['database_id']}.{seq}")


def _one(cursor: Any) -> tuple[Any, ...]:
    """The one row a query that always returns one gives."""
    row: tuple[Any, ...] | None = cursor.fetchone()
    if row is None:
        raise BackupError("the database answered no row")
    return row


def _restore_postgres(dump: Path, config_dir: Path, *, overwrite: bool) -> None:
    """``pg_restore`` a record's schema into the database its ``rcpkit.toml`` (or
    ``$RCPKIT_DSN``) names; a schema holding tables is replaced only when ``overwrite``."""
    import psycopg
    from psycopg import sql

    from rcpkit.engine.pgserver import client_tool

    dsn = load_config(config_dir).store.dsn
    if not dsn:
        raise BackupError(f"{config_dir}: no DSN for the PostgreSQL record (set $RCPKIT_DSN)")
    with psycopg.connect(dsn, autocommit=True) as db:
        (schema,) = _one(db.execute("SELECT current_schema()"))
        if schema == "public":
            raise BackupError("the record is in the public schema: restore it with "
                              f"pg_restore yourself ({dump})")
        (tables,) = _one(db.execute("SELECT count(*) FROM information_schema.tables "
                                    "WHERE table_schema = %s", (schema,)))
        if tables and not overwrite:
            raise BackupError(f"schema {schema} holds a record: restore elsewhere, or "
                              "replace it with --overwrite")
        db.execute("CREATE EXTENSION IF NOT EXISTS vector")
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    restored = subprocess.run([client_tool("pg_restore"), f"--dbname={dsn}", "--no-owner",
                               "--exit-on-error", str(dump)], capture_output=True, text=True)
    if restored.returncode != 0:
        raise BackupError(f"pg_restore into schema {schema} failed: {restored.stderr.strip()}")


def _listing(directory: Path, known: Mapping[str, dict[str, Any]]
             ) -> dict[str, dict[str, Any]]:
    """Size and checksum of every file under ``directory``; ``known`` ones not read again."""
    listing = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            name = path.relative_to(directory).as_posix()
            listing[name] = known.get(name) or {"size": path.stat().st_size,
                                                "checksum": file_checksum(path)}
    return listing


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    write_new(path, json.dumps(value, indent=1, sort_keys=True))


def _staging(final: Path, purpose: str) -> Path:
    """A fresh private directory beside ``final`` (same file system: renamed into place)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".{final.name}.{purpose}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(mode=0o700)
    return staging


def backup(root: Path, out: Path, data_dirs: Sequence[str], *, target: str = "",
           extra_files: Sequence[str] = (), since: Path | None = None) -> BackupManifest:
    """Back up the data directories ``data_dirs`` (relative to ``root``; ``""`` is ``root``
    itself) and the ``extra_files`` of ``root`` that exist into the new directory ``out``.
    ``target`` is what a restore of it replaces (see :class:`BackupManifest`); with
    ``since`` (an earlier backup on the same file system) the saved index files it already
    holds are hard-linked from it instead of copied."""
    if out.exists():
        raise BackupError(f"{out} already exists: choose a new directory for the backup")
    previous = None if since is None else _Previous(since, read_manifest(since).files)
    staging = _staging(out, "partial")
    try:
        for name in extra_files:
            if (root / name).is_file():
                _copy_file(root / name, staging / name)
        stores = [_copy_data_dir(root / relative, staging / relative, relative, previous)
                  for relative in data_dirs]
        linked = {} if previous is None else previous.linked
        manifest = BackupManifest(time.time(), target, stores, _listing(staging, linked),
                                  sorted(linked))
        _write_json(staging / MANIFEST, manifest.as_json())
        for directory in sorted({p.parent for p in staging.rglob("*")}, reverse=True):
            fsync_directory(directory)
        rename_durably(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def read_manifest(backup_dir: Path) -> BackupManifest:
    """The manifest of the backup in ``backup_dir``."""
    try:
        raw = json.loads((backup_dir / MANIFEST).read_text(encoding="utf-8"))
        if raw.get("format") != _FORMAT:
            raise BackupError(f"{backup_dir}: backup format {raw.get('format')!r} is not "
                              f"{_FORMAT}: restore it with the rcpkit that made it")
        return BackupManifest(float(raw["created_at"]), str(raw["target"]),
                              [StoreCopy(**store) for store in raw["stores"]],
                              dict(raw["files"]), list(raw.get("linked", [])))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, BackupError):
            raise
        raise BackupError(f"{backup_dir} is not a readable rcpkit backup ({exc})") from None


def verify_backup(backup_dir: Path) -> tuple[BackupManifest, list[str]]:
    """The manifest and the problems found: every listed file present with its size and
    checksum, and no file the manifest does not list."""
    manifest = read_manifest(backup_dir)
    problems = []
    for name, recorded in manifest.files.items():
        path = backup_dir / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != recorded["size"] or \
                file_checksum(path, recorded["checksum"].partition(":")[0]) \
                != recorded["checksum"]:
            problems.append(f"{name}: checksum mismatch (damaged)")
    listed = set(manifest.files) | {MANIFEST}
    problems.extend(f"{path.relative_to(backup_dir).as_posix()}: not in the manifest"
                    for path in sorted(backup_dir.rglob("*"))
                    if path.is_file() and path.relative_to(backup_dir).as_posix() not in listed)
    return manifest, problems


def restore(backup_dir: Path, root: Path, *, overwrite: bool = False) -> BackupManifest:
    """Restore the backup in ``backup_dir`` under ``root``: the whole root, or one collection
    into it (the root's extra files, like ``keys.json``, only where it has none). Refuses a
    damaged backup, and an existing non-empty target unless ``overwrite``."""
    manifest, problems = verify_backup(backup_dir)
    if problems:
        raise BackupError(f"{backup_dir} is damaged, nothing was restored: "
                          + "; ".join(problems[:5]))
    final = root / manifest.target if manifest.target else root
    if final.exists() and any(final.iterdir()) and not overwrite:
        raise BackupError(f"{final} exists and is not empty: restore elsewhere, or replace "
                          "it with --overwrite")
    prefix = f"{manifest.target}/" if manifest.target else ""
    for store in manifest.stores:  # the databases first: a refusal there leaves no file
        if store.backend == "postgres" and store.index_version is not None:
            _restore_postgres(backup_dir / store.path / PG_DUMP, backup_dir / store.path,
                              overwrite=overwrite)
    staging = _staging(final, "restoring")
    try:
        for name in manifest.files:
            if Path(name).name == PG_DUMP:
                continue
            if name.startswith(prefix):
                _copy_file(backup_dir / name, staging / name[len(prefix):])
            elif not (root / name).exists():
                _copy_file(backup_dir / name, root / name)
        for directory in sorted({p.parent for p in staging.rglob("*")}, reverse=True):
            fsync_directory(directory)
        replaced = None
        if final.exists():
            replaced = final.parent / f".{final.name}.replaced-{uuid.uuid4().hex[:8]}"
            rename_durably(final, replaced)
        rename_durably(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if replaced is not None:
        shutil.rmtree(replaced)
    return manifest
