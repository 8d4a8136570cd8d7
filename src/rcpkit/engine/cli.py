"""Engine commands: ``rcpkit index add|stats|delete``, ``rcpkit query`` and ``rcpkit demo``.

They open the engine in-process on ``--data DIR`` (the same directory and ``rcpkit.toml`` that
``rcpkit serve --data DIR`` uses), so they must not run while a server writes to that directory
from another process. Errors a user can fix are one line on stderr and exit status 2.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.pipeline import MODES, Engine
from rcpkit.engine.sample import sample_documents
from rcpkit.engine.service import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest, SearchResult
from rcpkit.protocol.errors import RcpError, UsageError

__all__ = ["DEMO_QUERY", "read_documents", "register"]

SUFFIXES = (".txt", ".md", ".jsonl", ".csv")
DEMO_QUERY = "how do honeybees tell each other where the flowers are?"
_DEFAULT_DATA = EngineConfig().data_dir
_TEXT_COLUMNS = ("text", "body", "content")
_ID_COLUMNS = ("id", "_id", "doc_id")

DataOption = Annotated[Path, typer.Option("--data", metavar="DIR",
                                          help="Engine data directory (created if absent).")]

console = Console()


def _fail(message: str) -> NoReturn:
    typer.echo(f"rcpkit: {message}", err=True)
    raise typer.Exit(2)


@contextmanager
def _engine(data: Path) -> Iterator[Engine]:
    """The engine on ``data``; a usage or protocol error becomes a one-line exit 2."""
    try:
        engine = open_engine(data)
    except (RcpError, UsageError) as exc:
        _fail(str(exc))
    try:
        yield engine
    except (RcpError, UsageError) as exc:
        _fail(str(exc))
    finally:
        engine.close()


# ── readers ────────────────────────────────────────────────────────────────

def _files(paths: Sequence[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES)
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                raise UsageError(f"{path}: unsupported file type (use {', '.join(SUFFIXES)})")
            yield path
        else:
            raise UsageError(f"{path}: no such file or directory")


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None


def _from_text_file(path: Path) -> DocumentIn:
    text = path.read_text(encoding="utf-8")
    title = (_markdown_title(text) if path.suffix.lower() == ".md" else None) or path.stem
    return DocumentIn(text=text, id=path.as_posix(),
                      meta={"source": path.as_posix(), "title": title})


def _from_record(record: dict[str, Any], where: str) -> DocumentIn:
    """A ``{"id", "text", "meta"}`` line, or a BEIR ``{"_id", "title", "text", "metadata"}``
    one (the title is kept as metadata and opens the indexed text)."""
    text = record.get("text")
    if not isinstance(text, str):
        raise UsageError(f"{where}: a record needs a string 'text'")
    doc_id = record.get("id", record.get("_id"))
    raw_meta = record.get("meta") or record.get("metadata") or {}
    if not isinstance(raw_meta, dict):
        raise UsageError(f"{where}: 'meta' must be an object")
    meta = dict(raw_meta)
    title = record.get("title")
    if isinstance(title, str) and title:
        meta.setdefault("title", title)
        text = f"{title}\n\n{text}"
    meta.setdefault("source", where)
    return DocumentIn(text=text, id=None if doc_id is None else str(doc_id), meta=meta)


def _from_jsonl(path: Path) -> Iterator[DocumentIn]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path.as_posix()}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise UsageError(f"{where}: each line must be a JSON object")
            yield _from_record(record, where)


def _from_csv(path: Path) -> Iterator[DocumentIn]:
    """One row per document: a text/body/content column, an optional id column, the rest
    become metadata (integers stay integers so they can be range-filtered)."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        text_column = next((c for c in _TEXT_COLUMNS if c in columns), None)
        if text_column is None:
            raise UsageError(f"{path}: needs a column named one of {', '.join(_TEXT_COLUMNS)}")
        id_column = next((c for c in _ID_COLUMNS if c in columns), None)
        for number, row in enumerate(reader, 2):
            meta: dict[str, Any] = {
                name: int(value) if value.lstrip("-").isdigit() else value
                for name, value in row.items()
                if name not in (text_column, id_column) and name and value}
            meta.setdefault("source", f"{path.as_posix()}:{number}")
            yield DocumentIn(text=row[text_column], id=row[id_column] if id_column else None,
                             meta=meta)


def read_documents(paths: Sequence[Path]) -> Iterator[DocumentIn]:
    """Documents from ``.txt``/``.md`` files (one each, id = the path as given), ``.jsonl``
    (one per line, BEIR ``corpus.jsonl`` included) and ``.csv`` (one per row); directories
    are walked."""
    for path in _files(paths):
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            yield from _from_jsonl(path)
        elif suffix == ".csv":
            yield from _from_csv(path)
        else:
            yield _from_text_file(path)


def _ingest(engine: Engine, documents: Sequence[DocumentIn], *, chunk: bool, contextual: bool,
            batch_size: int) -> int:
    """Add in batches (each one embedded in one go) behind a progress bar; returns chunks."""
    chunks = 0
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("indexing", total=len(documents))
        for start in range(0, len(documents), batch_size):
            batch = documents[start:start + batch_size]
            chunks += engine.add(batch, chunk=chunk, contextual=contextual).chunks
            bar.advance(task, len(batch))
    return chunks


# ── commands ───────────────────────────────────────────────────────────────

index_app = typer.Typer(help="Build and inspect the engine's index.", no_args_is_help=True)


@index_app.command("add")
def index_add(
    paths: Annotated[list[Path], typer.Argument(help="Files or directories (.txt .md .jsonl "
                                                     ".csv).")],
    data: DataOption = _DEFAULT_DATA,
    chunk: Annotated[bool, typer.Option(help="Split documents into chunks (§7.10).")] = True,
    contextual: Annotated[bool, typer.Option(
        help="Prefix each chunk with its title and headings before indexing.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents per write.")] = 64,
) -> None:
    """Index documents (upsert by id: re-adding unchanged files costs nothing)."""
    try:
        documents = list(read_documents(paths))
    except UsageError as exc:
        _fail(str(exc))
    with _engine(data) as engine:
        batch = min(batch_size, engine.config.max_documents_per_add)
        chunks = _ingest(engine, documents, chunk=chunk, contextual=contextual, batch_size=batch)
        if not engine.wait_for_indexes(0):
            with console.status("building the vector graph (saved with the index)"):
                engine.wait_for_indexes()
        console.print(f"indexed {len(documents)} documents ({chunks} chunks) into {data} "
                      f"at indexVersion {engine.index_version}")


@index_app.command("stats")
def index_stats(data: DataOption = _DEFAULT_DATA) -> None:
    """Corpus sizes and the current snapshot."""
    with _engine(data) as engine:
        stats = engine.stats()
        described = engine.describe()
    table = Table(show_header=False, box=None)
    for name, value in [*stats.items(), ("embedder", described.embed_identity),
                        ("filter fields", ", ".join(f"{k}:{v}" for k, v in
                                                    sorted(described.filter_fields.items())))]:
        table.add_row(name.replace("_", " "), str(value))
    console.print(table)


@index_app.command("delete")
def index_delete(ids: Annotated[list[str], typer.Argument(help="Document ids.")],
                 data: DataOption = _DEFAULT_DATA) -> None:
    """Delete documents by id (absent ids are not an error, §7.11)."""
    with _engine(data) as engine:
        result = engine.delete(ids)
    console.print(f"deleted {result.deleted} documents (indexVersion {result.index_version})")


def _print_hits(query: str, result: SearchResult) -> None:
    # No latency in the caption: a one-shot command's first query also loads the model.
    table = Table(title=f"“{query}”", caption=f"indexVersion {result.index_version}")
    for column in ("#", "score", "hit", "citation", "text"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(result.hits, 1):
        citation = hit.citation
        where = ""
        if citation is not None:
            where = citation.title or citation.source
            if citation.start is not None and citation.end is not None:
                where += f" [{citation.start}:{citation.end}]"
        snippet = " ".join((hit.text or "").split())
        table.add_row(str(rank), f"{hit.score:.4f}", hit.id, where,
                      snippet[:160] + ("…" if len(snippet) > 160 else ""))
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
) -> None:
    """Ranked hits with scores and citations."""
    try:
        tree = json.loads(filter_json) if filter_json else None
    except json.JSONDecodeError as exc:
        _fail(f"--filter is not JSON: {exc.msg}")
    with _engine(data) as engine:
        result = engine.search(SearchRequest(query=text, k=k, mode=mode, filter=tree))
    _print_hits(text, result)


def demo(data: Annotated[Path, typer.Option("--data", metavar="DIR",
                                            help="Where to keep the demo index.")]
         = Path("rcpkit-demo")) -> None:
    """Index the bundled sample notes, run a sample query, and show how to serve them."""
    with _engine(data) as engine:
        documents = sample_documents()
        _ingest(engine, documents, chunk=True, contextual=True, batch_size=len(documents))
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


def register(app: typer.Typer) -> None:
    """Add ``index``, ``query`` and ``demo`` to the ``rcpkit`` command line."""
    app.add_typer(index_app, name="index")
    app.command("query")(query)
    app.command("demo")(demo)
