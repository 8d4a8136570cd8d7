"""``rcpkit watch DIR --data KB``: sync a folder, then keep the index in step with it
(:mod:`rcpkit.ingest.watch`); and :func:`watch_beside`, what ``rcpkit serve --watch DIR``
runs in the serving process.

The first sync is ``index sync``'s own run (its progress, summary, skip list and Ctrl-C
summary), so a restart catches up on whatever changed while nothing watched. Then each
applied change is one line on stderr (stdout stays free), whether or not it is a terminal.
Ctrl-C (or SIGTERM) stops after the change being written; the index is saved.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from rcpkit.cli.index import (
    FolderOptions,
    _collection_data,
    _engine,
    _index,
    _prepared,
    _ProgressLines,
    with_folder_options,
)
from rcpkit.cli.support import fail
from rcpkit.engine.config import load_config
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn
from rcpkit.ingest.roots import Root, RootConflict, RootRegistry
from rcpkit.ingest.watch import Batch, FolderWatcher, IndexMemories
from rcpkit.ingest.writes import Tally

__all__ = ["EMBEDDING_CACHE", "cache_override", "register", "watch", "watch_beside"]

EMBEDDING_CACHE = "embedding-cache.sqlite"
"""The vector cache a watched data directory gets unless it names one (``[embedder] cache``):
an edit or a rename embeds only the chunks whose text is new."""
_SHOWN = 3
_QUIET_FILES = 64
"""A batch of at most this many files shows no progress lines, only its report."""

SettleOption = Annotated[float, typer.Option(
    min=0.05, help="Seconds a changed file must stay unchanged before it is read.")]


def _report(batch: Batch) -> None:
    """One line per applied change (and one per skipped file) on stderr."""
    parts = []
    if batch.indexed:
        counts = ", ".join(f"{n} {name}" for name, n in (("added", batch.added),
                                                          ("updated", batch.updated),
                                                          ("unchanged", batch.unchanged)) if n)
        parts.append(f"indexed {_names(batch.indexed)} (documents: {counts})")
    if batch.deleted:
        parts.append(f"removed {_names(batch.deleted)} (documents: {batch.documents_deleted})")
    if batch.chunks:
        parts.append(f"{batch.chunks} chunks to embed")
    if parts:
        typer.echo(f"watch: {' · '.join(parts)} · searchable {batch.lag:.1f} s after the "
                   "last change", err=True)
    for skip in batch.skipped:
        typer.echo(f"watch: skipped {skip.source}: {skip.reason}", err=True)
    for warning in batch.warnings:
        typer.echo(f"watch: {warning.source}: {warning.reason}", err=True)
    if batch.error is not None:
        typer.echo(f"watch: error: {batch.error}; retrying in {batch.retry_in:.0f} s (check "
                   "the data directory's disk space, permissions and database)", err=True)


def _names(sources: list[str]) -> str:
    more = f" and {len(sources) - _SHOWN} more" if len(sources) > _SHOWN else ""
    return ", ".join(sources[:_SHOWN]) + more


def _missing(gone: bool) -> None:
    typer.echo("watch: the folder is gone (the files reported deleted leave the index); "
               "watching resumes when it is back" if gone
               else "watch: the folder is back; syncing it", err=True)


def _labeller(level: str, stamped: bool) -> Callable[[str, DocumentIn], DocumentIn]:
    """Documents as ``index add`` writes them; a warning about one is printed at once."""
    def label(source: str, document: DocumentIn) -> DocumentIn:
        tally = Tally()
        prepared = _prepared(source, document, level, stamped, tally)
        for warning in tally.warnings:
            typer.echo(f"watch: {warning.source}: {warning.reason}", err=True)
        return prepared
    return label


def _watched_root(command: str, data: Path, folder: Path, label: str | None,
                  prefix: str, suggested: str) -> Root:
    """The root ``folder`` belongs to (recorded by its first sync, or now)."""
    registry = RootRegistry(data)
    try:
        root = registry.locate(folder, label=label, prefix=prefix, command=suggested,
                               excluded=lambda below: False)
    except RootConflict as exc:
        fail(command, str(exc))
    registry.save()
    return root


def cache_override(data: Path, backend: str | None = None,
                   dsn: str | None = None) -> dict[str, Any]:
    """The engine option giving a watched data directory its :data:`EMBEDDING_CACHE`,
    unless its configuration names one."""
    configured = load_config(data, store={"backend": backend, "dsn": dsn}).embedder.cache
    return {} if configured is not None else {"embedder": {"cache": data / EMBEDDING_CACHE}}


@with_folder_options
def watch(
    folder: Annotated[Path, typer.Argument(help="The folder to keep in sync.")],
    settle: SettleOption = 0.5,
    *, options: FolderOptions,
) -> None:
    """Sync FOLDER (as `index sync`), then keep the index in step with it: created, edited,
    renamed and deleted files are reflected in every channel until Ctrl-C."""
    command = "watch"
    if not folder.is_dir():
        fail(command, f"{folder}: not a folder (to index single files, use `rcpkit index add`)")
    folder = folder.resolve()
    directory = _collection_data(command, options.data, options.collection, options.backend,
                                 options.dsn)
    try:
        overrides = cache_override(directory, options.backend, options.dsn)
    except (ValueError, KeyError, OSError) as exc:
        fail(command, f"{directory}: {exc}")
    _index(command, [folder], options, sync=True, overrides=overrides, allow_empty=True)
    suggested = f"rcpkit {command} {{args}} --data {options.data}" + \
        (f" --collection {options.collection}" if options.collection else "")
    root = _watched_root(command, directory, folder, options.source_root, options.prefix,
                         suggested)
    with _engine(command, directory, backend=options.backend, dsn=options.dsn, create=True,
                 overrides=overrides) as engine:
        level = options.trust or engine.config.index.trust
        stop = threading.Event()
        memories = IndexMemories(engine)
        watcher = FolderWatcher(
            engine, root, folder=folder, selection=options.selection,
            follow_links=options.follow_links, global_ids=options.global_ids,
            chunk=options.chunk, contextual=options.contextual, max_trust=level,
            label=_labeller(level, options.collection is not None), settle=settle,
            report=_report,
            changed=lambda batch: _rebuilt(memories))
        _rebuilt(memories)  # the first sync may have changed what they were built over
        previous = {signum: signal.signal(signum, lambda *_: stop.set())
                    for signum in (signal.SIGINT, signal.SIGTERM)}
        typer.echo(f"watching {folder} (Ctrl-C to stop)…", err=True)
        try:
            watcher.run(stop, on_missing=_missing)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            memories.close()
        stats = watcher.stats
    typer.echo(f"watch stopped: {stats.files_indexed} files indexed, {stats.files_deleted} "
               f"removed, {stats.files_skipped} skipped; the index is saved. Run the same "
               "command to resume: what changes meanwhile is synced first.", err=True)


def _rebuilt(memories: IndexMemories) -> None:
    rebuilt = memories.rebuild()
    if rebuilt:
        typer.echo(f"watch: rebuilt {rebuilt} memories of the index", err=True)


def watch_beside(engine: Engine, folder: Path, *, settle: float = 0.5
                 ) -> tuple[FolderWatcher, Callable[[], None]]:
    """Watch ``folder`` into ``engine`` (a server's, ``serve --watch``) on a thread: the
    whole folder is synced first, then kept in step; returns the watcher (its ``stats``
    feed ``/metrics``) and the function that stops it."""
    data = engine.config.data_dir
    folder = folder.resolve()
    root = _watched_root("serve", data, folder, None, "",
                         f"rcpkit index sync {{args}} --data {data}")
    memories = IndexMemories(engine)
    lines: list[tuple[int, _ProgressLines]] = []

    def progress(done: int, total: int, chunks: int) -> None:
        """Lines for a batch of many files (the first sync): a small one reports once."""
        if total <= _QUIET_FILES:
            return
        if not lines or done < lines[0][0]:  # a new batch
            lines[:] = [(0, _ProgressLines(total))]
        lines[:] = [(done, lines[0][1])]
        lines[0][1].update(done, chunks)

    watcher = FolderWatcher(engine, root, folder=folder, settle=settle, report=_report,
                            label=_labeller(engine.config.index.trust, False),
                            changed=lambda batch: _rebuilt(memories), progress=progress)
    stop = threading.Event()

    def run() -> None:
        watcher.apply([folder])
        watcher.run(stop, on_missing=_missing)

    thread = threading.Thread(target=run, name="rcpkit-watch", daemon=True)
    thread.start()
    typer.echo(f"watching {folder} into {data}…", err=True)

    def stopped() -> None:
        stop.set()
        thread.join()
        memories.close()
    return watcher, stopped


def register(app: typer.Typer) -> None:
    """Add ``watch`` to the ``rcpkit`` command line."""
    app.command("watch")(watch)
