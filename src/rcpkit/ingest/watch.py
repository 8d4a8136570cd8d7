"""Keeping an index in step with a folder as it changes: ``rcpkit watch DIR`` and
``rcpkit serve --watch DIR`` (§7.10 upserts, §7.11 deletes).

Events come from `watchfiles <https://watchfiles.helpmanual.io>`_ (Rust ``notify``: inotify,
FSEvents, ReadDirectoryChanges), already installed with ``uvicorn[standard]``; it coalesces a
burst into one set of changes and stops on an event, so no polling loop of ours reads the
folder. Each changed path waits in :class:`Pending` until it has been quiet for ``settle``
seconds and its size and modification time stopped moving (a file being written is not read
half-written); then :meth:`FolderWatcher.apply` decides what the path is *now*, whatever
events led there (an add then a delete is a delete; a rename is the old path gone and the
new one there):

- a selected file (by the rules of ``index add|sync``: hidden files, ``.gitignore`` and
  ``.rcpkitignore``, ``--include``/``--exclude``, links, types) is read and written as
  ``index add`` writes it (:mod:`rcpkit.ingest.writes`) under its stable id; documents its
  file no longer yields (a CSV row removed) are deleted;
- a folder that appeared (moved in) or whose ignore file changed is synced as a subtree;
- a path that is gone, or now ignored or excluded, loses every document it contributed; a
  file unreadable for now (a permission, a bad encoding mid-write) keeps what it had.

A delete goes through the engine (:meth:`Engine.delete`), so it leaves every channel
derived from the record: lexical, dense and filter columns, the concept graph (which
follows each published version) and the summary tree (built per version); memories built
over the live index are rebuilt (:class:`IndexMemories`). Older snapshots keep serving
what they held until their retention (§7.7.1). Unchanged chunks are not embedded again when
the engine has an ``embedding_cache`` (the CLI gives the watcher one).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcpkit.engine.core import Engine
from rcpkit.engine.errors import EngineError
from rcpkit.engine.types import DocumentIn
from rcpkit.ingest.folders import (
    CHOSEN_SKIPS,
    IGNORE_FILES,
    Selection,
    Skip,
    SkipKind,
    SourceFile,
    read_folder,
    select_files,
)
from rcpkit.ingest.roots import Root
from rcpkit.ingest.writes import Tally, add_batch

__all__ = ["Batch", "FolderWatcher", "IndexMemories", "Pending", "WatchStats"]

logger = logging.getLogger(__name__)

_LOOKUP_VALUES = 100
_MAX_RETRY_S = 60.0
"""Sources per ``in`` filter when looking up what files contributed."""


@dataclass(slots=True)
class WatchStats:
    """Counters since the watcher started, for progress lines and ``/metrics``."""

    files_seen: int = 0
    """Changed paths taken from events (after coalescing)."""
    files_indexed: int = 0
    files_skipped: int = 0
    files_deleted: int = 0
    """Paths whose documents went (the file is gone, or now ignored or excluded)."""
    documents_written: int = 0
    documents_deleted: int = 0
    chunks_embedded: int = 0
    """Chunks of changed documents (what a write may embed; an embedding cache serves the
    unchanged ones)."""
    errors: int = 0
    batches: int = 0
    last_lag_seconds: float = 0.0
    """Seconds from a path's last event to its change being searchable, in the last batch."""
    max_lag_seconds: float = 0.0
    queue_depth: int = 0

    def gauges(self) -> dict[str, float]:
        """The counters named ``watch_…``, as ``Server.gauges`` reports them."""
        return {f"watch_{name}": float(getattr(self, name)) for name in self.__slots__}


@dataclass(slots=True)
class Batch:
    """What one :meth:`FolderWatcher.apply` did; ``sources`` as ids spell them."""

    indexed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[Skip] = field(default_factory=list)
    """Rows of indexed files that were not (a CSV row without text)."""
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    documents_deleted: int = 0
    chunks: int = 0
    """Chunks of the changed documents, handed to the embedder (or its cache)."""
    lag: float = 0.0
    error: str | None = None
    """Why the batch could not be written; its paths are tried again in ``retry_in`` s."""
    retry_in: float = 0.0

    @property
    def changed_documents(self) -> bool:
        return bool(self.added or self.updated or self.documents_deleted)


class Pending:
    """Changed paths not applied yet. A path is due once no event came for ``settle``
    seconds of ``clock`` and its size and modification time are those seen at its last
    event (a writer that pauses without closing keeps it waiting)."""

    def __init__(self, settle: float, clock: Callable[[], float]) -> None:
        self.settle = settle
        self.clock = clock
        self._paths: dict[Path, tuple[float, tuple[int, int] | None]] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def note(self, path: Path, at: float | None = None) -> None:
        """A change to ``path`` now (or at ``at``: a time to come delays it)."""
        self._paths[path] = (self.clock() if at is None else at, _fingerprint(path))

    def due(self) -> dict[Path, float]:
        """The settled paths with the time of their last event, taken out of the queue."""
        now = self.clock()
        ready: dict[Path, float] = {}
        for path, (last, seen) in list(self._paths.items()):
            if now - last < self.settle:
                continue
            current = _fingerprint(path)
            if current != seen:  # still being written: wait another settle period
                self._paths[path] = (now, current)
                continue
            ready[path] = last
            del self._paths[path]
        return ready


def _fingerprint(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


class FolderWatcher:
    """Applies a folder's changes to ``engine``; see the module docstring.

    ``root`` is the folder's root (label and id prefix, as ``index add`` recorded it) and
    ``folder`` the part of it watched (default: all of it);
    ``label(source, document)`` prepares each document before it is written (the trust
    label, the local writer's stamp); ``report(batch)`` hears of each applied batch,
    ``changed(batch)`` of each that changed documents (memories are rebuilt there) and
    ``progress(files done, files, chunks embedded)`` of each write within a batch (a whole
    folder's sync is thousands of files).
    """

    def __init__(self, engine: Engine, root: Root, *, folder: Path | None = None,
                 selection: Selection = Selection(),
                 follow_links: bool = False, global_ids: bool = False, chunk: bool = True,
                 contextual: bool = False, max_trust: str | None = None,
                 label: Callable[[str, DocumentIn], DocumentIn] | None = None,
                 settle: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 report: Callable[[Batch], None] | None = None,
                 changed: Callable[[Batch], None] | None = None,
                 progress: Callable[[int, int, int], None] | None = None,
                 files_per_write: int = 64) -> None:
        self.engine = engine
        self.root = root
        self.folder = root.path if folder is None else folder
        self.selection = selection
        self.follow_links = follow_links
        self.global_ids = global_ids
        self.chunk = chunk
        self.contextual = contextual
        self.max_trust = max_trust
        self.label = label or (lambda source, document: document)
        self.clock = clock
        self.pending = Pending(settle, clock)
        self.report = report or (lambda batch: None)
        self.changed = changed or (lambda batch: None)
        self.progress = progress or (lambda done, total, chunks: None)
        self.files_per_write = files_per_write
        self.stats = WatchStats()
        self._lock = threading.Lock()
        self._failures = 0

    # ── events ─────────────────────────────────────────────────────────────
    def note(self, paths: Iterable[Path]) -> None:
        """Queue changed paths (absolute); paths outside the root or hidden are dropped —
        ``index add`` never reads them (``.git`` churns on every commit)."""
        with self._lock:
            for path in paths:
                relative = self._relative(path)
                if relative is None or not _within(path, self.folder) or any(
                        part.startswith(".") for part in relative.split("/")[:-1]):
                    continue
                name = path.name
                if name.startswith(".") and name not in IGNORE_FILES:
                    continue
                self.pending.note(path)
            self.stats.queue_depth = len(self.pending)

    def apply_due(self) -> Batch | None:
        """Apply the settled paths, if any."""
        with self._lock:
            due = self.pending.due()
            self.stats.queue_depth = len(self.pending)
        if not due:
            return None
        return self.apply(due)

    def run(self, stop: threading.Event, *, tick: float = 0.2,
            on_missing: Callable[[bool], None] | None = None) -> None:
        """Watch until ``stop`` is set. When the folder itself goes, the watcher applies the
        deletes reported with it (file by file: a folder moved away or unmounted reports
        none, and keeps its documents) and waits for it; when it is back, the whole folder
        is synced."""
        import watchfiles

        folder = self.folder
        while not stop.is_set():
            if not folder.is_dir():
                if on_missing is not None:
                    on_missing(True)
                while not folder.is_dir():
                    self.apply_due()  # the deletes reported with it
                    if stop.wait(tick):  # no event tells of a folder's return: look again
                        return
                if on_missing is not None:
                    on_missing(False)
                self.note([folder])
            for changes in watchfiles.watch(folder, stop_event=stop, yield_on_timeout=True,
                                            rust_timeout=max(1, int(tick * 1000)),
                                            debounce=int(tick * 1000), step=50,
                                            raise_interrupt=False):
                self.note(Path(path) for _, path in changes)
                self.apply_due()
                if not folder.is_dir():
                    break

    # ── applying ───────────────────────────────────────────────────────────
    def apply(self, changes: dict[Path, float] | Sequence[Path]) -> Batch:
        """Bring the index in step with what ``changes`` (paths, with the time of their
        last event) are now; see the module docstring."""
        noted = changes if isinstance(changes, dict) else dict.fromkeys(changes, self.clock())
        batch = Batch()
        files: set[str] = set()
        folders: set[str] = set()
        for path in noted:
            relative = self._relative(path)
            if relative is None:
                continue
            if path == self.folder and not path.is_dir():
                continue  # the folder itself gone: see run()
            if path.name in IGNORE_FILES:  # its folder's selection changed
                folders.add(self._relative(path.parent) or "")
            elif path.is_dir() and not path.is_symlink():
                folders.add(relative)
            else:
                files.add(relative)
        try:
            self._apply(files, folders, batch)
            self._failures = 0
        except (EngineError, OSError) as exc:  # a full disk, a busy or lost database
            batch.error = str(exc)
            self._failures += 1
            batch.retry_in = min(_MAX_RETRY_S, 2.0 ** self._failures)
            with self._lock:  # applied again later, backing off while it keeps failing
                for path in noted:
                    self.pending.note(path, at=self.clock() + batch.retry_in - self.pending.settle)
        if batch.error is None:
            now = self.clock()
            batch.lag = max((now - last for last in noted.values()), default=0.0)
        self._count(batch)
        self.report(batch)
        if batch.changed_documents:
            self.changed(batch)
        return batch

    def _apply(self, files: set[str], folders: set[str], batch: Batch) -> None:
        root = self.root.path
        synced = sorted(folders)

        def covered(relative: str) -> bool:
            return relative in files or any(
                not folder or relative == folder or relative.startswith(folder + "/")
                for folder in synced)

        above = {parent for relative in files | folders
                 for parent in _parents(relative)}

        def wanted(relative: str, is_dir: bool) -> bool:
            return covered(relative) or (is_dir and relative in above)

        selected, skipped = select_files(root, root, follow_links=self.follow_links,
                                         selection=self.selection, wanted=wanted)
        written: set[str] = set()
        fresh: set[str] = set()
        for start in range(0, len(selected), self.files_per_write):
            read = read_folder(selected[start:start + self.files_per_write],
                               follow_links=self.follow_links,
                               max_text_bytes=self.engine.config.requests.max_text_bytes,
                               global_ids=self.global_ids, locate=lambda _dir, _whole: self.root)
            self._write(read.files, batch)
            skipped += read.skipped
            for source in read.files:
                batch.warnings += source.warnings
                written.add(source.source)
                fresh.update(document.id or "" for document in source.documents)
            self.progress(min(start + self.files_per_write, len(selected)), len(selected),
                          batch.chunks)
        batch.skipped = [skip for skip in skipped if skip.kind not in CHOSEN_SKIPS]
        # A file unreadable for now keeps its documents; an emptied one loses them.
        keep = {spelled for skip in batch.skipped if skip.kind != SkipKind.EMPTY
                for spelled in (skip.source, self.root.prefix + skip.source.rstrip("/"))}
        batch.indexed = sorted(written)
        prefix = self.root.prefix
        contributed = self._contributions([prefix + f for f in files],
                                          [prefix + f for f in synced])
        # A path gone without documents of its own may have been a folder (moved away).
        named = set(contributed.values())
        gone = [prefix + f for f in files
                if prefix + f not in named and not (root / f).exists()]
        if gone:
            contributed.update(self._contributions([], gone))
        stale = {doc_id: source for doc_id, source in contributed.items()
                 if doc_id not in fresh and source not in keep}
        ids = sorted(stale)
        limit = self.engine.config.requests.max_documents_per_add
        for start in range(0, len(ids), limit):
            batch.documents_deleted += self.engine.delete(ids[start:start + limit]).deleted
        batch.deleted = sorted(set(stale.values()) - written)

    def _write(self, sources: list[SourceFile], batch: Batch) -> None:
        """Upsert the files' documents as ``index add`` does (:func:`add_batch`): a document
        the engine refuses is left out with a warning, and keeps what it had."""
        documents = [(source.source, self.label(source.source, document))
                     for source in sources for document in source.documents]
        tally = Tally()
        embedding = [0]

        def embedded(done: int, total: int) -> None:
            embedding[0] = total

        limit = self.engine.config.requests.max_documents_per_add
        for start in range(0, len(documents), limit):
            add_batch(self.engine, documents[start:start + limit], tally, chunk=self.chunk,
                      contextual=self.contextual, embedded=embedded,
                      max_trust=self.max_trust or self.engine.config.index.trust)
            batch.chunks += embedding[0]
            embedding[0] = 0
        batch.added += tally.added
        batch.updated += tally.updated
        batch.unchanged += tally.unchanged
        batch.warnings += tally.warnings

    def _contributions(self, sources: Sequence[str], folders: Sequence[str]) -> dict[str, str]:
        """``{document id: source}`` of this root's documents from ``sources`` or below
        ``folders`` (ids-spelled; ``prefix`` alone for the whole root)."""
        label = {"field": "source_root", "op": "eq", "value": self.root.label}
        found: dict[str, str] = {}
        listed = sorted(set(sources))
        for start in range(0, len(listed), _LOOKUP_VALUES):
            tree: dict[str, Any] = {"and": [label, {"field": "source", "op": "in",
                                                    "value": listed[start:start + _LOOKUP_VALUES]}]}
            found.update(_sources(self.engine.documents_where(tree)))
        if folders:
            for doc_id, source in _sources(self.engine.documents_where(label)).items():
                if any(source == folder or source.startswith(folder.rstrip("/") + "/")
                       or folder == self.root.prefix for folder in folders):
                    found[doc_id] = source
        return found

    def _count(self, batch: Batch) -> None:
        with self._lock:
            stats = self.stats
            stats.batches += 1
            stats.files_seen += len(batch.indexed) + len(batch.deleted) + len(batch.skipped)
            stats.files_indexed += len(batch.indexed)
            stats.files_deleted += len(batch.deleted)
            stats.files_skipped += len(batch.skipped)
            stats.documents_written += batch.added + batch.updated
            stats.documents_deleted += batch.documents_deleted
            stats.chunks_embedded += batch.chunks
            stats.errors += batch.error is not None
            if batch.error is None:
                stats.last_lag_seconds = batch.lag
                stats.max_lag_seconds = max(stats.max_lag_seconds, batch.lag)
            stats.queue_depth = len(self.pending)

    def _relative(self, path: Path) -> str | None:
        """``path`` below the root in POSIX form (``""`` for the root), or None."""
        try:
            relative = Path(os.path.relpath(path, self.root.path)).as_posix()
        except ValueError:  # another drive
            return None
        if relative == ".":
            return ""
        return None if relative == ".." or relative.startswith("../") else relative


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _parents(relative: str) -> list[str]:
    """The folders above ``relative`` (``""``, ``a``, ``a/b`` for ``a/b/c``)."""
    parts = relative.split("/")[:-1] if relative else []
    return ["", *("/".join(parts[:i]) for i in range(1, len(parts) + 1))]


def _sources(documents: dict[str, Any]) -> dict[str, str]:
    return {doc_id: str(meta.get("source", "")) for doc_id, meta in documents.items()}


class IndexMemories:
    """Rebuilds the memories built over the live index (§7.17, ``source: index``) after a
    change, so a deleted file's concepts and passages leave them too. Needs the ``graph``
    extra; without it, or without memories, it does nothing. The graph and memory files
    open on first need and stay open until :meth:`close`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._opened: tuple[Any, Any] | None = None

    def rebuild(self) -> int:
        """Rebuild every index memory not expired; returns how many."""
        opened = self._open()
        if opened is None:
            return 0
        graph, memory = opened
        summaries = [s for s in memory.summaries() if s.source == "index"]
        if summaries:
            graph.sync()
        for summary in summaries:
            memory.build(None, memory_id=summary.id, scope=None,
                         caller=summary.owner or "rcpkit watch")
        return len(summaries)

    def _open(self) -> tuple[Any, Any] | None:
        if self._opened is not None:
            return self._opened
        config = self.engine.config
        try:
            from rcpkit.engine.knowledge.graph import ConceptGraph
            from rcpkit.engine.knowledge.memory import MEMORY_FILE, KnowledgeMemory
        except ImportError:
            return None
        if config.store.backend == "sqlite" and not (config.data_dir / MEMORY_FILE).is_file():
            return None  # no memory was ever built here
        graph = ConceptGraph.open(config.data_dir, self.engine.store)

        def live_view() -> Any:
            seq = self.engine.snapshot()
            return graph.view(seq), self.engine.version_token(seq)

        memory = KnowledgeMemory.open(config.data_dir, self.engine.store, graph.extractor,
                                      live_view,
                                      max_inline_bytes=config.memory.max_inline_bytes,
                                      retention_seconds=config.memory.retention_seconds,
                                      max_count=config.memory.max_count,
                                      clock=self.engine.clock)
        self._opened = (graph, memory)
        return self._opened

    def close(self) -> None:
        if self._opened is not None:
            for opened in reversed(self._opened):
                opened.close()
            self._opened = None
