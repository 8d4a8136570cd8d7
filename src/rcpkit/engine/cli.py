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

import getpass
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
from rcpkit.cli_support import fail
from rcpkit.engine.config import CONFIG_FILE, EngineConfig, load_config
from rcpkit.engine.core import Engine, open_engine
from rcpkit.engine.errors import EngineError, InvalidInput
from rcpkit.engine.folders import SUFFIXES, Folder, Skip, read_folder
from rcpkit.engine.sample import sample_documents
from rcpkit.engine.search.planner import MODES
from rcpkit.engine.store import SqliteStore
from rcpkit.engine.types import (
    TRUST_LEVELS,
    DocumentIn,
    SearchRequest,
    SearchResult,
    less_trusted,
)
from rcpkit.protocol.errors import RcpError, UsageError
from rcpkit.tenancy.collections import CollectionError, CollectionRegistry
from rcpkit.tenancy.provenance import stamp

if TYPE_CHECKING:
    from rcpkit.engine.memory import KnowledgeMemory

__all__ = ["DEMO_QUERY", "register"]

DEMO_QUERY = "how do honeybees tell each other where the flowers are?"
_DEFAULT_DATA = EngineConfig().data_dir
_SHOWN_PROBLEMS = 50

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
            create: bool = False) -> Iterator[Engine]:
    """The engine on ``data``; a usage or protocol error becomes a one-line exit 2. A read
    command on a directory that holds no index fails rather than creating an empty one."""
    try:
        config = load_config(data, backend=backend, dsn=dsn)
        if not create and config.backend == "sqlite" and not _holds_index(data):
            fail(command, f"{data}: no index here (create one with `rcpkit index add DIR "
                 f"--data {data}`)")
        with _phase("opening the index and loading the embedding model"):
            engine = open_engine(config)
    except (EngineError, RcpError, UsageError) as exc:
        fail(command, _described(exc))
    failure: str | None = None
    try:
        yield engine
    except (EngineError, RcpError, UsageError) as exc:
        failure = _described(exc)
    finally:
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

@dataclass(slots=True)
class _Tally:
    """What an ``index add|sync`` run did, for the summary table."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[Skip] = field(default_factory=list)

    @property
    def indexed(self) -> int:
        return self.added + self.updated + self.unchanged


def _misplaced_field(exc: InvalidInput, count: int) -> tuple[int, str | None] | None:
    """``(position, meta key or None)`` when ``exc`` blames one document of the batch."""
    match = re.fullmatch(r"documents\[(\d+)\](?:\.meta\.(.+))?(?:\..*)?", exc.field)
    if match is None or int(match[1]) >= count:
        return None
    return int(match[1]), match[2]


def _add_batch(engine: Engine, batch: list[tuple[str, DocumentIn]], tally: _Tally, *,
               chunk: bool, contextual: bool, max_trust: str,
               embedded: Callable[[int, int], None]) -> None:
    """Write ``batch``; a document the engine refuses is dropped (or, for a metadata value
    that conflicts with the filter schema, written without that key) with a warning, and
    the rest is retried — validation runs before anything is embedded or written."""
    while batch:
        try:
            result = engine.add([doc for _, doc in batch], chunk=chunk, contextual=contextual,
                                embedded=embedded, max_trust=max_trust)
        except InvalidInput as exc:
            blamed = _misplaced_field(exc, len(batch))
            if blamed is None:
                raise
            position, key = blamed
            source, document = batch[position]
            where = f"{source} (id {document.id})" if document.id != source else source
            if key is not None and document.meta and key in document.meta:
                meta = dict(document.meta)
                fitted = _fit(meta[key], engine.describe().filter_fields.get(key))
                if fitted is None:
                    tally.warnings.append(Skip(where, f"{exc.message}; indexed without "
                                               f"{key!r}"))
                    del meta[key]
                else:
                    meta[key] = fitted
                batch[position] = (source, DocumentIn(document.text, document.id, meta))
            else:
                tally.warnings.append(Skip(where, f"not indexed: {exc.message}"))
                del batch[position]
            continue
        tally.chunks += result.chunks
        for outcome in result.outcomes:
            setattr(tally, outcome, getattr(tally, outcome) + 1)
        return


def _fit(value: object, field_type: str | None) -> int | float | None:
    """A text value (a CSV cell in a mixed column) read as the numeric type the filter
    schema already has for its key; ``None`` when it is not one."""
    if not isinstance(value, str) or field_type not in ("int", "float"):
        return None
    try:
        number = float(value) if field_type == "float" else int(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _ingest(engine: Engine, documents: Sequence[tuple[str, DocumentIn]], tally: _Tally, *,
            chunk: bool, contextual: bool, batch_size: int, max_trust: str) -> None:
    """Add in batches behind a progress bar that moves with each slice of passages embedded
    (unchanged documents embed nothing and pass at once); documents may name a trust level
    up to ``max_trust`` (§15.2)."""
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TextColumn("documents · {task.fields[passages]} passages "
                                                "embedded ({task.fields[rate]})"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
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
                bar.update(task, completed=done_before + size * done / total,
                           passages=passages, rate=f"{rate:.0f}/s")

            _add_batch(engine, batch, tally, chunk=chunk, contextual=contextual,
                       max_trust=max_trust, embedded=embedded)
            bar.update(task, completed=min(start + batch_size, len(documents)))


def _stale(engine: Engine, folder: Folder, kept: set[str]) -> list[str]:
    """Documents of the synced roots that no file yields any more; a file skipped this run
    (unreadable for now) keeps its documents, so a transient error never deletes data."""
    unreadable = {skip.source for skip in folder.skipped}
    stale = []
    for root in folder.roots:
        tree = {"field": "source_root", "op": "eq", "value": root.as_posix()}
        for doc_id, meta in engine.documents_where(tree).items():
            if doc_id not in kept and meta.get("source") not in unreadable:
                stale.append(doc_id)
    return sorted(stale)


def _labelled(source: str, document: DocumentIn, level: str, tally: _Tally) -> DocumentIn:
    """``document`` labelled ``level`` (the operator's ``--trust``, §15.2) unless it names a
    lower level itself; a higher one is lowered to ``level``, with a warning."""
    meta = dict(document.meta or {})
    claimed = meta.get("trust", level)
    if claimed in TRUST_LEVELS and less_trusted(claimed, level) != claimed:
        tally.warnings.append(Skip(f"{source} (id {document.id})",
                                   f"trust {claimed!r} is above --trust {level}: indexed as "
                                   f"{level}"))
        claimed = level
    if "trust" not in meta and claimed == "untrusted":
        return document  # the reading default: the content hash stays as it was
    return replace(document, meta={**meta, "trust": claimed})


def _summary(tally: _Tally, data: Path, index_version: str | None, *, sync: bool) -> None:
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
    problems = [*tally.skipped, *tally.warnings]
    if problems:
        detail = Table("skipped or warned", "reason")
        for skip in problems[:_SHOWN_PROBLEMS]:
            detail.add_row(Text(skip.source), Text(skip.reason))
        if len(problems) > _SHOWN_PROBLEMS:
            detail.add_row(f"… {len(problems) - _SHOWN_PROBLEMS} more", "")
        console.print(detail)


def _index(command: str, paths: Sequence[Path], data: Path, *, sync: bool,
           backend: str | None, dsn: str | None, prefix: str, follow_links: bool,
           strict: bool, chunk: bool, contextual: bool, batch_size: int,
           collection: str | None, trust: str | None) -> None:
    data = _collection_data(command, data, collection, backend, dsn)
    if trust is not None and trust not in TRUST_LEVELS:
        fail(command, f"--trust must be one of {', '.join(TRUST_LEVELS)}, not {trust!r}")
    try:
        config = load_config(data, backend=backend, dsn=dsn)
    except EngineError as exc:
        fail(command, str(exc))
    limit, level = config.max_text_bytes, trust or config.trust
    with console.status("reading files") as status:
        folder = read_folder(paths, prefix=prefix, follow_links=follow_links,
                             max_text_bytes=limit,
                             on_file=lambda source: status.update(f"reading {source}"))
    tally = _Tally(skipped=list(folder.skipped))
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
            document = _labelled(source_file.source, document, level, tally)
            if collection is not None:  # §15.3: who wrote it, as a wire write records it
                document = replace(document, meta=stamp(document.meta, _local_principal(),
                                                        time.time()))
            documents.append((source_file.source, document))
    if not documents and not sync:  # nothing to write: do not create an empty index either
        _summary(tally, data, None, sync=False)
        fail(command, "nothing could be indexed", code=1)
    with _engine(command, data, backend=backend, dsn=dsn, create=True) as engine:
        batch = min(batch_size, engine.config.max_documents_per_add)
        _ingest(engine, documents, tally, chunk=chunk, contextual=contextual, batch_size=batch,
                max_trust=level)
        if sync:
            stale = _stale(engine, folder, set(seen))
            for start in range(0, len(stale), engine.config.max_documents_per_add):
                chunk_ids = stale[start:start + engine.config.max_documents_per_add]
                tally.deleted += engine.delete(chunk_ids).deleted
        if not engine.wait_for_indexes(0):
            with _phase("building the vector graph (saved with the index)"):
                engine.wait_for_indexes()
        _summary(tally, data, engine.index_version, sync=sync)
    if tally.indexed == 0 and not tally.deleted:
        fail(command, "nothing could be indexed", code=1)
    if strict and (tally.skipped or tally.warnings):
        fail(command, f"--strict: {len(tally.skipped)} files skipped and "
             f"{len(tally.warnings)} warnings", code=1)


# ── commands ───────────────────────────────────────────────────────────────

index_app = typer.Typer(help="Build and inspect the engine's index.", no_args_is_help=True)

PrefixOption = Annotated[str, typer.Option(
    help="Prepended to every file's id (its path relative to the indexed folder).")]
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


@index_app.command("add")
def index_add(
    paths: Annotated[list[Path], typer.Argument(help=f"Files or directories "
                                                     f"({' '.join(SUFFIXES)}).")],
    data: DataOption = _DEFAULT_DATA,
    backend: BackendOption = None,
    dsn: DsnOption = None,
    prefix: PrefixOption = "",
    follow_links: FollowLinksOption = False,
    strict: StrictOption = False,
    chunk: ChunkOption = True,
    contextual: ContextualOption = False,
    batch_size: BatchOption = 64,
    collection: CollectionOption = None,
    trust: TrustOption = None,
) -> None:
    """Index files (upsert by stable id: re-adding unchanged files costs nothing)."""
    _index("index add", paths, data, sync=False, backend=backend, dsn=dsn, prefix=prefix,
           follow_links=follow_links, strict=strict, chunk=chunk, contextual=contextual,
           batch_size=batch_size, collection=collection, trust=trust)


@index_app.command("sync")
def index_sync(
    folder: Annotated[Path, typer.Argument(help="The folder to mirror.")],
    data: DataOption = _DEFAULT_DATA,
    backend: BackendOption = None,
    dsn: DsnOption = None,
    prefix: PrefixOption = "",
    follow_links: FollowLinksOption = False,
    strict: StrictOption = False,
    chunk: ChunkOption = True,
    contextual: ContextualOption = False,
    batch_size: BatchOption = 64,
    collection: CollectionOption = None,
    trust: TrustOption = None,
) -> None:
    """Make the index mirror FOLDER: add new files, update changed ones, delete the
    documents of files that are gone (only documents indexed from this folder)."""
    if not folder.is_dir():
        fail("index sync", f"{folder}: not a folder")
    _index("index sync", [folder], data, sync=True, backend=backend, dsn=dsn, prefix=prefix,
           follow_links=follow_links, strict=strict, chunk=chunk, contextual=contextual,
           batch_size=batch_size, collection=collection, trust=trust)


@index_app.command("stats")
def index_stats(data: DataOption = _DEFAULT_DATA, backend: BackendOption = None,
                dsn: DsnOption = None, collection: CollectionOption = None) -> None:
    """Corpus sizes, the backend and the current snapshot."""
    data = _collection_data("index stats", data, collection, backend, dsn)
    with _engine("index stats", data, backend=backend, dsn=dsn) as engine:
        stats = engine.stats()
        described = engine.describe()
        where = engine.config.data_dir.as_posix() if engine.config.backend == "sqlite" \
            else _redacted(engine.config.dsn)
    table = Table(show_header=False, box=None)
    for name, value in [("backend", f"{engine.config.backend} ({where})"), *stats.items(),
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
    with _engine("query", data, backend=backend, dsn=dsn) as engine:
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
        _ingest(engine, documents, _Tally(), chunk=True, contextual=True,
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
        from rcpkit.engine.graph.concepts import ConceptExtractor
        from rcpkit.engine.memory import KnowledgeMemory
    except ImportError as exc:
        fail(command, f"memories need the graph extra (pip install 'rcpkit[graph]'): {exc}")
    with _engine(command, data, backend=backend, dsn=dsn) as engine:
        config = engine.config

        def no_live_view() -> Any:
            raise UsageError("an operator command builds no memory")

        memory = KnowledgeMemory.open(config.data_dir, engine.store, ConceptExtractor(),
                                      no_live_view,
                                      retention_seconds=config.memory_retention_seconds)
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
