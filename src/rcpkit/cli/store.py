"""Day-2 commands on a data root: ``rcpkit backup``, ``rcpkit restore`` and ``rcpkit verify``.

All three run beside serving processes: a backup reads one committed snapshot of each
record, and verify only reads (``--repair`` rebuilds derived files as a save would). A
restore writes a new directory: stop the servers of a root before replacing it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rcpkit.cli.support import fail
from rcpkit.engine.backup import BackupError, backup, restore
from rcpkit.engine.config import CONFIG_FILE
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.verify import verify_data_dir
from rcpkit.tenancy.collections import COLLECTIONS_DIR, CollectionError, CollectionRegistry
from rcpkit.tenancy.keys import KEYS_FILE

__all__ = ["register"]

RootOption = Annotated[Path, typer.Option("--data", metavar="ROOT",
                                          help="Data root (or one engine's data directory).")]
CollectionOption = Annotated[str | None, typer.Option(
    help="Only this collection of the root.")]


def _holds_record(data_dir: Path) -> bool:
    return (data_dir / SqliteStore.FILE_NAME).is_file() or (data_dir / CONFIG_FILE).is_file()


def data_dirs(command: str, root: Path, collection: str | None) -> list[str]:
    """The data directories under ``root`` (relative; ``""`` is the root itself) that
    ``collection`` (or, without it, the whole root) covers."""
    if not root.is_dir():
        fail(command, f"{root}: no such data root")
    registry = CollectionRegistry(root)
    if collection is not None:
        try:
            registry.path(collection)
        except CollectionError as exc:
            fail(command, str(exc))
        return [f"{COLLECTIONS_DIR}/{collection}"]
    found = [""] if _holds_record(root) else []
    found += [f"{COLLECTIONS_DIR}/{name}" for name in registry.names()]
    if not found:
        fail(command, f"{root}: no engine data here (no record and no collections)")
    return found


def _backup(out: Annotated[Path, typer.Argument(help="New directory for the backup.")],
            data: RootOption, collection: CollectionOption = None,
            since: Annotated[Path | None, typer.Option(
                metavar="BACKUP", help="An earlier backup on this file system: link the saved "
                                       "index files it holds instead of copying them.")] = None
            ) -> None:
    """Back up a data root (or one collection) while it serves: records, side stores,
    saved indexes, configuration and keys, with a manifest of checksums."""
    dirs = data_dirs("backup", data, collection)
    extra = [KEYS_FILE] + ([CONFIG_FILE] if "" not in dirs else [])
    try:
        manifest = backup(data, out, dirs, target=dirs[0] if collection else "",
                          extra_files=extra, since=since)
    except (BackupError, OSError) as exc:
        fail("backup", str(exc))
    size = sum(entry["size"] for entry in manifest.files.values())
    linked = f" ({len(manifest.linked)} linked from {since})" if since is not None else ""
    typer.echo(f"backup {out}: {len(manifest.files)} files, {size} bytes{linked}")
    for store in manifest.stores:
        where = store.path or "."
        if store.index_version is None:
            note = "no SQLite record copied" + (
                f" (the record is in {store.backend}: dump it with its own tools)"
                if store.backend != "sqlite" else "")
            typer.echo(f"  {where}: {note}", err=store.backend != "sqlite")
        else:
            typer.echo(f"  {where}: indexVersion {store.index_version}")


def _restore(backup_dir: Annotated[Path, typer.Argument(metavar="BACKUP",
                                                        help="A directory rcpkit backup made.")],
             data: RootOption,
             overwrite: Annotated[bool, typer.Option(
                 help="Replace an existing non-empty target.")] = False) -> None:
    """Restore a backup into a data root, after checking every file's checksum."""
    try:
        manifest = restore(backup_dir, data, overwrite=overwrite)
    except (BackupError, OSError) as exc:
        fail("restore", str(exc))
    target = data / manifest.target if manifest.target else data
    typer.echo(f"restored {backup_dir} into {target}")
    for store in manifest.stores:
        if store.index_version is not None:
            typer.echo(f"  {store.path or '.'}: indexVersion {store.index_version}")


def _keys_problem(root: Path) -> str | None:
    """Why the root's ``keys.json`` cannot be read, if it cannot."""
    path = root / KEYS_FILE
    if not path.is_file():
        return None
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{KEYS_FILE}: unreadable ({exc}): restore it from a backup"
    return None


def _verify(data: RootOption, collection: CollectionOption = None,
            repair: Annotated[bool, typer.Option(
                help="Rebuild the derived files found wrong from the record.")] = False
            ) -> None:
    """Check every saved file, the indexes against the record and the side stores; exit 1
    when a problem remains. Safe beside serving processes."""
    dirs = data_dirs("verify", data, collection)
    problems = [problem] if (problem := _keys_problem(data)) else []
    repaired = False
    for relative in dirs:
        name = relative or "."
        report = verify_data_dir(data / relative, repair=repair)
        for line in report.repaired:
            repaired = True
            typer.echo(f"{name}: repaired {line}")
        for finding in report.findings:
            remedy = ("derived: `rcpkit verify --repair` rebuilds it" if finding.derived
                      else "not derived: restore it from a backup")
            problems.append(f"{name}: {finding.where}: {finding.problem} ({remedy})")
        if not report.findings:
            typer.echo(f"{name}: ok ({'; '.join(report.checked)})")
    for problem in problems:
        typer.echo(f"FAILED {problem}")
    if repaired:
        typer.echo("restart the processes serving this root: they keep the indexes they "
                   "loaded until then")
    raise typer.Exit(1 if problems else 0)


def register(app: typer.Typer) -> None:
    """Add ``backup``, ``restore`` and ``verify`` to the ``rcpkit`` app."""
    app.command("backup")(_backup)
    app.command("restore")(_restore)
    app.command("verify")(_verify)
