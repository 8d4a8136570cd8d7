"""Engine commands: ``rcpkit index add|sync|stats|delete``, ``rcpkit memory list|delete``,
``rcpkit query`` and ``rcpkit demo``.

They open the engine in-process on ``--data DIR`` (the same directory and ``rcpkit.toml`` that
``rcpkit serve --data DIR`` uses), so they must not run while a server writes to that directory
from another process. ``--backend``/``--dsn`` pick the system of record as ``rcpkit serve``
does. Only ``index add|sync`` and ``demo`` create a data directory; the read commands refuse a
missing one. Errors a user can fix are one line on stderr (``rcpkit <command>: error: …``) and
exit status 2; ``index add|sync`` exit 1 when nothing could be indexed.
"""

from __future__ import annotations

import functools
import getpass
import inspect
import json
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, get_type_hints

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from rcpkit.binding.errors import wire_error
from rcpkit.cli.support import fail
from rcpkit.engine.config import CONFIG_FILE, EngineConfig, load_config, record_backend
from rcpkit.engine.core import Engine, open_engine
from rcpkit.engine.errors import EngineError
from rcpkit.engine.search.planner import MODES
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import (
    TRUST_LEVELS,
    DocumentIn,
    SearchRequest,
    SearchResult,
)
from rcpkit.ingest.folders import SUFFIXES, Selection, Skip, read_folder
from rcpkit.ingest.roots import Root, RootConflict, RootRegistry
from rcpkit.ingest.sample import sample_documents
from rcpkit.ingest.writes import Tally, add_batch, labelled, stale_documents
from rcpkit.protocol.errors import RcpError, UsageError
from rcpkit.tenancy.collections import CollectionError, CollectionRegistry
from rcpkit.tenancy.provenance import stamp

if TYPE_CHECKING:
    from rcpkit.engine.knowledge.memory import KnowledgeMemory

__all__ = ["DEMO_QUERY", "register"]

DEMO_QUERY = "how do honeybees tell each other where the flowers are?"
_DEFAULT_DATA = EngineConfig().data_dir
_SHOWN_PROBLEMS = 50
_EXAMPLES = 3

DataOption = Annotated[Path, typer.Option("--data", metavar="DIR",
                                          help="Engine data directory.")]
BackendOption = Annotated[str | None, typer.Option(
    help="System of record: sqlite (in --data) or postgres (at --dsn).")]
DsnOption = Annotated[str | None, typer.Option(
    help="PostgreSQL DSN for --backend postgres (also $RCPKIT_DSN).")]
CollectionOption = Annotated[str | None, typer.Option(
    help="A collection of the --data root (rcpkit collection create).")]

console = Console()


def _described(exc: Exception) -> str:
    """One line naming the error; an engine error as the §12 error a server would send."""
    return str(wire_error(exc) if isinstance(exc, EngineError) else exc)


@contextmanager
def _engine(command: str, data: Path, *, backend: str | None = None, dsn: str | None = None,
            create: bool = False, read_only: bool = False, embeds: bool = True,
            overrides: Mapping[str, Any] | None = None) -> Iterator[Engine]:
    """The engine on ``data``; a usage or protocol error becomes a one-line exit 2. A read
    command on a directory that holds no index fails rather than creating an empty one, and
    a ``read_only`` one saves nothing on the way out. ``embeds`` says whether the command may
    need the embedding model (loaded lazily, on its first use); ``overrides`` are settings
    of this run only."""
    try:
        config = load_config(data, store={"backend": backend, "dsn": dsn}, **(overrides or {}))
        if not create and config.store.backend == "sqlite" and not _holds_index(data):
            fail(command, f"{data}: no index here (create one with `rcpkit index add DIR "
                 f"--data {data}`)")
        opening = "opening the index" + (" and the embedding model" if embeds else "")
        with _phase(opening):
            engine = open_engine(config)
    except (EngineError, RcpError, UsageError) as exc:
        fail(command, _described(exc))
    failure: str | None = None
    try:
        yield engine
    except (EngineError, RcpError, UsageError) as exc:
        failure = _described(exc)
    finally:
        if read_only:
            engine.close(save=False)
        else:
            with _phase("saving the index"):
                engine.close()
    if failure is not None:  # after closing, so the error is the last line on stderr
        fail(command, failure)


def _collection_data(command: str, data: Path, collection: str | None,
                     backend: str | None, dsn: str | None) -> Path:
    """``data`` itself, or the data directory of ``collection`` in the root ``data`` (whose
    own ``rcpkit.toml`` names its record: overriding it would write into another one)."""
    if collection is None:
        return data
    if backend is not None or dsn is not None:
        fail(command, "--backend and --dsn are set by the collection (rcpkit collection "
                      "create --dsn), not with --collection")
    try:
        return CollectionRegistry(data).path(collection)
    except CollectionError as exc:
        fail(command, str(exc))


def _local_principal() -> str:
    """The principal of a write made on this machine, outside any server."""
    return f"local:{getpass.getuser()}"


@contextmanager
def _phase(message: str) -> Iterator[None]:
    """A spinner on a terminal; otherwise one line on stderr (stdout stays the command's
    output), so a slow phase is never silent."""
    if console.is_terminal:
        with console.status(message):
            yield
    else:
        typer.echo(f"{message}…", err=True)
        yield


def _holds_index(data: Path) -> bool:
    """An SQLite data directory someone created: it has a store or a configuration."""
    return (data / SqliteStore.FILE_NAME).is_file() or (data / CONFIG_FILE).is_file()


def _redacted(dsn: str | None) -> str:
    """A DSN (URL or ``key=value`` form) without its password, fit to print."""
    shown = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", dsn or "$RCPKIT_DSN")
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", shown)


# ── indexing a folder ──────────────────────────────────────────────────────

class _ProgressLines:
    """Progress for a log or a pipe: a plain line on stderr at the first passage embedded,
    then every ``every`` seconds of ``clock``, so a run whose output is not a terminal is
    never silent for long (a bar's redraws would be lost there)."""

    def __init__(self, total: int, *, every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.every = every
        self.clock = clock
        self.started = clock()
        self.last: float | None = None

    def update(self, documents: float, passages: int) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        elapsed = now - self.started
        rate = passages / elapsed if elapsed > 0 else 0.0
        typer.echo(f"indexing: {int(documents)}/{self.total} documents · {passages} passages "
                   f"embedded ({rate:.0f}/s) · {int(elapsed)} s", err=True)


def _ingest(engine: Engine, documents: Sequence[tuple[str, DocumentIn]], tally: Tally, *,
            chunk: bool, contextual: bool, batch_size: int, max_trust: str) -> None:
    """Add in batches behind a progress bar that moves with each passage embedded (slices
    grow from one passage; unchanged documents embed nothing and pass at once), and plain
    :class:`_ProgressLines` when stdout is not a terminal. Each batch is committed before
    the next starts, so an interrupted run keeps every batch ``tally`` counts. Documents may
    name a trust level up to ``max_trust`` (§15.2)."""
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("documents · {task.fields[passages]} passages "
                                                "embedded ({task.fields[rate]})"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    lines = None if console.is_terminal else _ProgressLines(len(documents))
    started = time.monotonic()
    passages = 0
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("indexing", total=len(documents), passages=0, rate="-")
        for start in range(0, len(documents), batch_size):
            batch = list(documents[start:start + batch_size])
            base = passages
            done_before = start

            def embedded(done: int, total: int, *, base: int = base,
                         done_before: int = done_before, size: int = len(batch)) -> None:
                nonlocal passages
                passages = base + done
                rate = passages / max(time.monotonic() - started, 1e-9)
                completed = done_before + size * done / total
                bar.update(task, completed=completed, passages=passages, rate=f"{rate:.0f}/s")
                if lines is not None:
                    lines.update(completed, passages)

            with _stop_between_batches() as stopping:
                add_batch(engine, batch, tally, chunk=chunk, contextual=contextual,
                           max_trust=max_trust, embedded=embedded)
            bar.update(task, completed=min(start + batch_size, len(documents)))
            if stopping():
                raise KeyboardInterrupt


@contextmanager
def _stop_between_batches() -> Iterator[Callable[[], bool]]:
    """A first Ctrl-C lets the batch being written commit, then stops (so what the summary
    counts is exactly what is committed); a second one stops at once."""
    asked = False

    def handler(signum: int, frame: object) -> None:
        nonlocal asked
        if asked:
            raise KeyboardInterrupt
        asked = True
        typer.echo("\nstopping after the batch being written (Ctrl-C again to stop now)…",
                   err=True)

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: Ctrl-C is not ours to catch there
        yield lambda: False
        return
    try:
        yield lambda: asked
    finally:
        signal.signal(signal.SIGINT, previous)


def _prepared(source: str, document: DocumentIn, level: str, stamped: bool,
              tally: Tally) -> DocumentIn:
    """``document`` as written: :func:`labelled` and, in a collection, stamped with the local
    writer (§15.3: who wrote it, as a wire write records it)."""
    document = labelled(source, document, level, tally)
    if stamped:
        document = replace(document, meta=stamp(document.meta, _local_principal(), time.time()))
    return document


def _summary(tally: Tally, data: Path, index_version: str | None, *, sync: bool) -> None:
    table = Table(title=Text(f"index {data}"), show_header=False, box=None)
    rows: list[tuple[str, object]] = [("added", tally.added), ("updated", tally.updated),
            ("unchanged", tally.unchanged)]
    if sync:
        rows.append(("deleted", tally.deleted))
    rows += [("skipped files", len(tally.skipped)), ("warnings", len(tally.warnings)),
             ("chunks", tally.chunks)]
    if index_version is not None:
        rows.append(("indexVersion", index_version))
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    if tally.skipped:
        by_reason = Table("skipped because", "files", "for example")
        for group, skips in _grouped(tally.skipped):
            examples = ", ".join(skip.source for skip in skips[:_EXAMPLES])
            more = f" … {len(skips) - _EXAMPLES} more" if len(skips) > _EXAMPLES else ""
            by_reason.add_row(Text(group), str(len(skips)), Text(examples + more))
        console.print(by_reason)
    if tally.warnings:
        detail = Table("warned", "reason")
        for skip in tally.warnings[:_SHOWN_PROBLEMS]:
            detail.add_row(Text(skip.source), Text(skip.reason))
        if len(tally.warnings) > _SHOWN_PROBLEMS:
            detail.add_row(f"… {len(tally.warnings) - _SHOWN_PROBLEMS} more", "")
        console.print(detail)


def _grouped(skips: Sequence[Skip]) -> list[tuple[str, list[Skip]]]:
    """Skips by reason group, the largest group first."""
    groups: dict[str, list[Skip]] = {}
    for skip in skips:
        groups.setdefault(skip.group, []).append(skip)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def _interrupted(command: str, tally: Tally, total: int, *, sync: bool) -> NoReturn:
    """After Ctrl-C: what is committed (every finished batch, saved with the index) and how
    to resume; exit status 130 as for any interrupted command."""
    committed = tally.indexed
    typer.echo(f"interrupted: {committed} of {total} documents committed ({tally.added} added, "
               f"{tally.updated} updated, {tally.unchanged} unchanged); the rest were not "
               "written" + ("" if not sync else ", and nothing was deleted") + ". Run the "
               f"same `rcpkit {command}` again to resume: committed documents are unchanged "
               "and cost nothing.", err=True)
    raise typer.Exit(130)


def _write_skipped(path: Path, tally: Tally) -> None:
    """``--skipped FILE``: every skipped file and warned row, ``source<TAB>reason`` a line."""
    lines = [f"{skip.source}\t{skip.reason}\n" for skip in (*tally.skipped, *tally.warnings)]
    try:
        path.write_text("".join(lines), encoding="utf-8")
    except OSError as exc:
        typer.echo(f"could not write {path}: {exc.strerror or exc}", err=True)


def _index(command: str, paths: Sequence[Path], options: FolderOptions, *, sync: bool,
           strict: bool = False, overrides: Mapping[str, Any] | None = None,
           allow_empty: bool = False) -> None:
    """Read ``paths`` and write their documents (and with ``sync``, delete what their files
    no longer yield); ``allow_empty``: a folder with nothing to index is no error."""
    backend, dsn, collection, trust = (options.backend, options.dsn, options.collection,
                                       options.trust)
    prefix, label, selection = options.prefix, options.source_root, options.selection
    skipped_file = options.skipped
    data = _collection_data(command, options.data, collection, backend, dsn)
    if trust is not None and trust not in TRUST_LEVELS:
        fail(command, f"--trust must be one of {', '.join(TRUST_LEVELS)}, not {trust!r}")
    try:
        config = load_config(data, store={"backend": backend, "dsn": dsn}, **(overrides or {}))
        registry = RootRegistry(data)
    except (EngineError, ValueError, KeyError) as exc:
        fail(command, f"{data}: {exc}")
    limit, level = config.requests.max_text_bytes, trust or config.index.trust
    excluded = selection.specs()[1]
    suggested = f"rcpkit {command} {{args}} --data {data}" + \
        (f" --collection {collection}" if collection else "")

    def locate(directory: Path, whole: bool) -> Root:
        # A file given by name is read alone: roots below its folder are not read at all.
        return registry.locate(directory, label=label, prefix=prefix, command=suggested,
                               excluded=lambda below: not whole or bool(
                                   excluded and excluded.match_file(below)))

    try:
        with console.status("reading files") as status:
            folder = read_folder(paths, follow_links=options.follow_links,
                                 max_text_bytes=limit, selection=selection,
                                 global_ids=options.global_ids, locate=locate,
                                 on_file=lambda source: status.update(f"reading {source}"))
    except RootConflict as exc:
        fail(command, str(exc))
    tally = Tally(skipped=list(folder.skipped))
    documents: list[tuple[str, DocumentIn]] = []
    seen: dict[str, str] = {}
    for source_file in folder.files:
        tally.warnings.extend(source_file.warnings)
        for document in source_file.documents:
            assert document.id is not None
            if document.id in seen:
                tally.warnings.append(Skip(source_file.source, f"id {document.id!r} also in "
                                           f"{seen[document.id]}; the later one is kept"))
            seen[document.id] = source_file.source
            documents.append((source_file.source, _prepared(source_file.source, document, level,
                                                            collection is not None, tally)))
    if not documents and not sync:  # nothing to write: do not create an empty index either
        _summary(tally, data, None, sync=False)
        if skipped_file is not None:
            _write_skipped(skipped_file, tally)
        fail(command, "nothing could be indexed", code=1)
    interrupted = False
    with _engine(command, data, backend=backend, dsn=dsn, create=True,
                 overrides=overrides) as engine:
        if backend is not None and collection is None:
            # The backend given once stays with the data, so the next `--data DIR` finds
            # it; a DSN from the environment stays there, out of the file.
            record_backend(data, engine.config.store.backend, dsn)
        batch = min(options.batch_size, engine.config.requests.max_documents_per_add)
        try:
            _ingest(engine, documents, tally, chunk=options.chunk,
                    contextual=options.contextual, batch_size=batch, max_trust=level)
        except KeyboardInterrupt:
            interrupted = True
        if interrupted:
            registry.save()  # the committed documents carry its labels
        elif sync:
            stale = stale_documents(engine, folder, set(seen))
            for start in range(0, len(stale), engine.config.requests.max_documents_per_add):
                chunk_ids = stale[start:start + engine.config.requests.max_documents_per_add]
                tally.deleted += engine.delete(chunk_ids).deleted
        if not interrupted:
            if not engine.wait_for_indexes(0):
                with _phase("building the vector graph (saved with the index)"):
                    engine.wait_for_indexes()
            _summary(tally, data, engine.index_version, sync=sync)
            registry.save()
    if interrupted:
        _interrupted(command, tally, len(documents), sync=sync)
    if skipped_file is not None:
        _write_skipped(skipped_file, tally)
    if tally.indexed == 0 and not tally.deleted and not allow_empty:
        fail(command, "nothing could be indexed", code=1)
    if strict and (tally.skipped or tally.warnings):
        fail(command, f"--strict: {len(tally.skipped)} files skipped and "
             f"{len(tally.warnings)} warnings", code=1)


# ── commands ───────────────────────────────────────────────────────────────

index_app = typer.Typer(help="Build and inspect the engine's index.", no_args_is_help=True)

PrefixOption = Annotated[str, typer.Option(
    help="Prepended to every file's id (its path relative to the indexed folder).")]
SourceRootOption = Annotated[str | None, typer.Option(
    "--source-root", metavar="LABEL", help="The folder's label in meta.source_root "
    "(default: its name; the host path is never sent).")]
GlobalIdsOption = Annotated[bool, typer.Option(
    "--global-ids", help="Use CSV/JSONL rows' ids as they are, not scoped to their file "
    "(<file>:<id>).")]
FollowLinksOption = Annotated[bool, typer.Option(
    "--follow-links", help="Follow symbolic links that point outside the folder.")]
StrictOption = Annotated[bool, typer.Option(
    "--strict", help="Exit 1 when any file is skipped or any row warned.")]
ChunkOption = Annotated[bool, typer.Option(help="Split documents into chunks (§7.10).")]
ContextualOption = Annotated[bool, typer.Option(
    help="Prefix each chunk with its title and headings before indexing.")]
BatchOption = Annotated[int, typer.Option(min=1, help="Documents per write.")]
TrustOption = Annotated[str | None, typer.Option(
    metavar="LEVEL", help=f"Label the files' documents with this trust level "
                          f"({', '.join(TRUST_LEVELS)}; default: the data directory's trust "
                          "setting, untrusted unless set); a file's own higher label is "
                          "lowered to it.")]
IncludeOption = Annotated[list[str] | None, typer.Option(
    "--include", metavar="GLOB", help="Read only files matching GLOB (gitignore syntax, "
    "relative to the folder; repeatable).")]
ExcludeOption = Annotated[list[str] | None, typer.Option(
    "--exclude", metavar="GLOB", help="Skip files and folders matching GLOB (gitignore "
    "syntax; repeatable).")]
IgnoreFilesOption = Annotated[bool, typer.Option(
    "--ignore-files/--no-ignore-files",
    help="Honour .gitignore and .rcpkitignore files in the folder.")]
SkippedOption = Annotated[Path | None, typer.Option(
    "--skipped", metavar="FILE", help="Write every skipped file with its reason to FILE "
    "(tab-separated).")]


@dataclass(frozen=True, slots=True)
class FolderOptions:
    """The options of every command that reads folders into the index (``index add``,
    ``index sync``, ``watch``), declared once in :func:`_folder_options`."""

    data: Path
    backend: str | None
    dsn: str | None
    prefix: str
    follow_links: bool
    chunk: bool
    contextual: bool
    batch_size: int
    collection: str | None
    trust: str | None
    include: list[str] | None
    exclude: list[str] | None
    ignore_files: bool
    skipped: Path | None
    source_root: str | None
    global_ids: bool

    @property
    def selection(self) -> Selection:
        return Selection(self.include or (), self.exclude or (), self.ignore_files)


def _folder_options(
    data: DataOption = _DEFAULT_DATA,
    backend: BackendOption = None,
    dsn: DsnOption = None,
    prefix: PrefixOption = "",
    follow_links: FollowLinksOption = False,
    chunk: ChunkOption = True,
    contextual: ContextualOption = False,
    batch_size: BatchOption = 64,
    collection: CollectionOption = None,
    trust: TrustOption = None,
    include: IncludeOption = None,
    exclude: ExcludeOption = None,
    ignore_files: IgnoreFilesOption = True,
    skipped: SkippedOption = None,
    source_root: SourceRootOption = None,
    global_ids: GlobalIdsOption = False,
) -> FolderOptions:
    return FolderOptions(data, backend, dsn, prefix, follow_links, chunk, contextual,
                         batch_size, collection, trust, include, exclude, ignore_files,
                         skipped, source_root, global_ids)


def with_folder_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command(…, options: FolderOptions)`` as a Typer command that also takes every
    folder option on the command line (Typer reads the signature built here)."""
    shared = inspect.signature(_folder_options).parameters
    own = [param for name, param in inspect.signature(command).parameters.items()
           if name != "options"]
    hints = {**get_type_hints(_folder_options, include_extras=True),
             **get_type_hints(command, include_extras=True)}

    @functools.wraps(command)
    def run(**values: Any) -> None:
        chosen = {name: values.pop(name) for name in shared}
        command(**values, options=_folder_options(**chosen))

    del run.__wrapped__  # Typer must see the signature below
    parameters = [param.replace(annotation=hints[param.name])  # the arguments stay first
                  for param in (*own[:1], *shared.values(), *own[1:])]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {param.name: param.annotation for param in parameters}
    return run


@index_app.command("add")
@with_folder_options
def index_add(
    paths: Annotated[list[Path], typer.Argument(help=f"Files or directories "
                                                     f"({' '.join(SUFFIXES)}).")],
    strict: StrictOption = False,
    *, options: FolderOptions,
) -> None:
    """Index files (upsert by stable id: re-adding unchanged files costs nothing)."""
    _index("index add", paths, options, sync=False, strict=strict)


@index_app.command("sync")
@with_folder_options
def index_sync(
    folder: Annotated[Path, typer.Argument(help="The folder to mirror.")],
    strict: StrictOption = False,
    *, options: FolderOptions,
) -> None:
    """Make the index mirror FOLDER: add new files, update changed ones, delete the
    documents of files that are gone (only documents indexed from this folder)."""
    if not folder.is_dir():
        fail("index sync", f"{folder}: not a folder")
    _index("index sync", [folder], options, sync=True, strict=strict)


@index_app.command("stats")
def index_stats(data: DataOption = _DEFAULT_DATA, backend: BackendOption = None,
                dsn: DsnOption = None, collection: CollectionOption = None) -> None:
    """Corpus sizes, the backend and the current snapshot."""
    data = _collection_data("index stats", data, collection, backend, dsn)
    with _engine("index stats", data, backend=backend, dsn=dsn, read_only=True,
                 embeds=False) as engine:
        stats = engine.stats()
        described = engine.describe()
        where = engine.config.data_dir.as_posix() if engine.config.store.backend == "sqlite" \
            else _redacted(engine.config.store.dsn)
    table = Table(show_header=False, box=None)
    for name, value in [("backend", f"{engine.config.store.backend} ({where})"), *stats.items(),
                        ("embedder", described.embed_identity),
                        ("filter fields", ", ".join(f"{k}:{v}" for k, v in
                                                    sorted(described.filter_fields.items())))]:
        table.add_row(name.replace("_", " "), str(value))
    console.print(table)


@index_app.command("delete")
def index_delete(ids: Annotated[list[str], typer.Argument(help="Document ids.")],
                 data: DataOption = _DEFAULT_DATA, backend: BackendOption = None,
                 dsn: DsnOption = None, collection: CollectionOption = None) -> None:
    """Delete documents by id (absent ids are not an error, §7.11)."""
    data = _collection_data("index delete", data, collection, backend, dsn)
    with _engine("index delete", data, backend=backend, dsn=dsn) as engine:
        result = engine.delete(ids)
    console.print(f"deleted {result.deleted} documents (indexVersion {result.index_version})")


def _print_hits(query: str, result: SearchResult) -> None:
    """Hits with their score (scaled as the mode makes it) and ``confidence`` (§7.7.2: in
    [0, 1] and comparable across queries, the column to threshold on)."""
    # No latency in the caption: a one-shot command's first query also loads the model.
    table = Table(title=Text(f"“{query}”"), caption=f"indexVersion {result.index_version}")
    for column in ("#", "score", "confidence", "hit", "citation", "text"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(result.hits, 1):
        citation = hit.citation
        where = ""
        if citation is not None:
            where = citation.title or citation.source
            if citation.page is not None:
                where += f" p. {citation.page}"
            if citation.start is not None and citation.end is not None:
                where += f" [{citation.start}:{citation.end}]"
        snippet = " ".join((hit.text or "").split())
        confidence = "" if hit.confidence is None else f"{hit.confidence:.2f}"
        table.add_row(str(rank), f"{hit.score:.4f}", confidence, Text(hit.id), Text(where),
                      Text(snippet[:160] + ("…" if len(snippet) > 160 else "")))
    console.print(table)
    if not result.hits:
        console.print("no hits")


def query(
    text: Annotated[str, typer.Argument(help="The query.")],
    data: DataOption = _DEFAULT_DATA,
    k: Annotated[int, typer.Option("-k", min=1, help="Number of hits.")] = 5,
    mode: Annotated[str, typer.Option(help=f"One of {', '.join(MODES)}.")] = "hybrid",
    filter_json: Annotated[str | None, typer.Option(
        "--filter", metavar="JSON", help='A §8 filter, e.g. \'{"field":"lang","op":"eq",'
        '"value":"en"}\'.')] = None,
    min_score: Annotated[float | None, typer.Option(
        help="Drop hits scoring below this (§7.7 minScore, on the mode's score scale).")]
    = None,
    backend: BackendOption = None,
    dsn: DsnOption = None,
    collection: CollectionOption = None,
) -> None:
    """Ranked hits with scores, confidence and citations."""
    data = _collection_data("query", data, collection, backend, dsn)
    try:
        tree = json.loads(filter_json) if filter_json else None
    except json.JSONDecodeError as exc:
        fail("query", f"--filter is not JSON: {exc.msg}")
    with _engine("query", data, backend=backend, dsn=dsn, read_only=True,
                 embeds=mode != "sparse") as engine:
        result = engine.search(SearchRequest(query=text, k=k, mode=mode, filter=tree,
                                             min_score=min_score))
    _print_hits(text, result)


def demo(data: Annotated[Path, typer.Option("--data", metavar="DIR",
                                            help="Where to keep the demo index.")]
         = Path("rcpkit-demo")) -> None:
    """Index the bundled sample notes, run a sample query, and show how to serve them."""
    with _engine("demo", data, create=True) as engine:
        documents = [(doc.id or "", doc) for doc in sample_documents()]
        # The bundled notes are curated: labelled trusted by the operator running the demo.
        _ingest(engine, documents, Tally(), chunk=True, contextual=True,
                batch_size=len(documents), max_trust="trusted")
        _print_hits(DEMO_QUERY, engine.search(SearchRequest(query=DEMO_QUERY, k=5)))
    console.print(
        "\nNext:\n"
        f"  rcpkit query \"why do bees swarm?\" --data {data}\n"
        f"  rcpkit query \"compost\" --data {data} --filter '{{\"field\":\"lang\",\"op\":\"eq\","
        "\"value\":\"es\"}'\n"
        f"  rcpkit serve --stdio --data {data}              # RCP over stdin/stdout\n"
        f"  rcpkit serve --http 127.0.0.1:8765 --data {data}  # RCP over HTTP at /rcp\n"
        f"  rcpkit index add ./my-docs --data {data}          # add your own files",
        highlight=False)


memory_app = typer.Typer(help="List and delete the memories of memory/build (§7.17).",
                         no_args_is_help=True)


@contextmanager
def _memories(command: str, data: Path, backend: str | None, dsn: str | None,
              collection: str | None) -> Iterator[KnowledgeMemory]:
    """The memories kept beside the engine on ``data`` (they need the ``graph`` extra)."""
    data = _collection_data(command, data, collection, backend, dsn)
    try:
        from rcpkit.engine.knowledge.graph.concepts import ConceptExtractor
        from rcpkit.engine.knowledge.memory import KnowledgeMemory
    except ImportError as exc:
        fail(command, f"memories need the graph extra (pip install 'rcpkit[graph]'): {exc}")
    with _engine(command, data, backend=backend, dsn=dsn) as engine:
        config = engine.config

        def no_live_view() -> Any:
            raise UsageError("an operator command builds no memory")

        memory = KnowledgeMemory.open(config.data_dir, engine.store, ConceptExtractor(),
                                      no_live_view,
                                      retention_seconds=config.memory.retention_seconds)
        try:
            yield memory
        finally:
            memory.close()


@memory_app.command("list")
def memory_list(data: DataOption = _DEFAULT_DATA, backend: BackendOption = None,
                dsn: DsnOption = None, collection: CollectionOption = None) -> None:
    """The memories kept (not expired), most recently built first."""
    with _memories("memory list", data, backend, dsn, collection) as memory:
        summaries = memory.summaries()
    table = Table("memoryId", "scope", "owner", "source", "tokens", "built (UTC)")
    for summary in summaries:
        table.add_row(summary.id, summary.scope, summary.owner or "", summary.source,
                      str(summary.tokens),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(summary.built)))
    console.print(table)


@memory_app.command("delete")
def memory_delete(ids: Annotated[list[str], typer.Argument(help="Memory ids.")],
                  data: DataOption = _DEFAULT_DATA, backend: BackendOption = None,
                  dsn: DsnOption = None, collection: CollectionOption = None) -> None:
    """Delete memories by id, whatever their scope or owner (absent ids are not an error)."""
    with _memories("memory delete", data, backend, dsn, collection) as memory:
        deleted = memory.delete(ids)
    console.print(f"deleted {deleted} memories")


def register(app: typer.Typer) -> None:
    """Add ``index``, ``memory``, ``query`` and ``demo`` to the ``rcpkit`` command line."""
    app.add_typer(index_app, name="index")
    app.add_typer(memory_app, name="memory")
    app.command("query")(query)
    app.command("demo")(demo)
