"""``rcpkit collection create|list|drop``, ``rcpkit keys create|list|revoke`` and
``rcpkit provenance list|purge|sources``, all on a data root (``--data ROOT``).

They change files of the root (``collections/``, ``keys.json``) that a running server reads:
a new or revoked key applies at the next request, a new collection at the next start.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Column, Table

from ..binding.errors import wire_error
from ..engine import Engine, open_engine
from ..engine.errors import EngineError
from ..engine.types import TRUST_LEVELS
from ..protocol.errors import UsageError
from ..tenancy.collections import CollectionError, CollectionRegistry
from ..tenancy.keys import KeyStore, KeyStoreError
from ..tenancy.limits import Limits
from ..tenancy.provenance import purge, source_label, written
from ..tenancy.scopes import Scopes
from .support import fail

__all__ = ["register"]

RootOption = Annotated[Path, typer.Option("--data", metavar="ROOT",
                                          help="Data root holding the collections and keys.")]
CollectionArgument = Annotated[str, typer.Argument(help="Collection name.")]
_DEFAULT_ROOT = Path("rcpkit-data")

console = Console()
collection_app = typer.Typer(help="Named collections of a data root.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys: principals, scopes and limits.", no_args_is_help=True)
provenance_app = typer.Typer(help="Who wrote what: list and purge by principal or source.",
                             no_args_is_help=True)


@collection_app.command("create")
def collection_create(name: CollectionArgument, data: RootOption = _DEFAULT_ROOT,
                      config: Annotated[Path | None, typer.Option(
                          help="An rcpkit.toml to give the collection.")] = None,
                      dsn: Annotated[str | None, typer.Option(
                          help="Keep the record in this PostgreSQL database, in the schema "
                               "rcpkit_<name> (also $RCPKIT_DSN).",
                          envvar="RCPKIT_DSN")] = None) -> None:
    """Create an empty collection (served at <base>/<name> from the next start)."""
    try:
        text = config.read_text(encoding="utf-8") if config is not None else None
        path = CollectionRegistry(data).create(name, text, dsn=dsn)
    except (CollectionError, OSError) as exc:
        fail("collection create", str(exc))
    console.print(f"created collection {name} in {path}")


@collection_app.command("list")
def collection_list(data: RootOption = _DEFAULT_ROOT) -> None:
    """The collections of the data root, one per line."""
    for name in CollectionRegistry(data).names():
        typer.echo(name)


@collection_app.command("drop")
def collection_drop(name: CollectionArgument, data: RootOption = _DEFAULT_ROOT,
                    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False
                    ) -> None:
    """Delete a collection and all its documents and indexes."""
    registry = CollectionRegistry(data)
    try:
        path = registry.path(name)
        if not yes:
            typer.confirm(f"delete collection {name} ({path}) and all its documents?",
                          abort=True)
        registry.drop(name)
    except CollectionError as exc:
        fail("collection drop", str(exc))
    console.print(f"dropped collection {name}")


@keys_app.command("create")
def keys_create(
    principal: Annotated[str, typer.Argument(help="Who the key is (recorded on writes).")],
    scope: Annotated[list[str], typer.Option(
        "--scope", help="COLLECTION:read,write (COLLECTION may be *; repeatable).")],
    data: RootOption = _DEFAULT_ROOT,
    limit: Annotated[list[str] | None, typer.Option(
        "--limit", metavar="NAME=VALUE",
        help="requests_per_second, burst, concurrent, write_bytes_per_day, transform_n, "
             "graph_hops (repeatable).")] = None,
    trust: Annotated[str | None, typer.Option(
        metavar="LEVEL", help=f"The highest trust level ({', '.join(TRUST_LEVELS)}) the key's "
                              "writes may name (default: each collection's trust setting).")]
    = None,
) -> None:
    """Create a key; its token is printed once, on stdout, and never stored."""
    try:
        limits = Limits.from_mapping(_assignments(limit or []), "--limit")
        record, token = KeyStore(data).create(principal, Scopes.parse(scope), limits,
                                              trust=trust)
    except (ValueError, OSError) as exc:
        fail("keys create", str(exc))
    typer.echo(token)
    granted = f", may write {record.trust}" if record.trust else ""
    typer.echo(f"key {record.key_id} for {record.principal}: {record.scopes.describe()}"
               f"{granted} (the token above is shown only now)", err=True)


def _assignments(items: list[str]) -> dict[str, float]:
    values: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            values[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"--limit expects NAME=NUMBER, got {item!r}")
    return values


@keys_app.command("list")
def keys_list(data: RootOption = _DEFAULT_ROOT,
              as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every key (revoked ones too), without secrets."""
    try:
        records = list(KeyStore(data).records().values())
    except KeyStoreError as exc:
        fail("keys list", str(exc))
    if as_json:
        typer.echo(json.dumps([{k: v for k, v in r.to_json().items() if k != "sha256"}
                               for r in records], indent=1))
        return
    table = Table("key", "principal", "scopes", "limits", "trust", "created", "state")
    for r in records:
        table.add_row(r.key_id, r.principal, r.scopes.describe(),
                      " ".join(f"{k}={v}" for k, v in r.limits.to_json().items()),
                      r.trust or "-", _when(r.created), "revoked" if r.revoked else "active")
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[list[str], typer.Argument(help="Key ids.")],
                data: RootOption = _DEFAULT_ROOT) -> None:
    """Revoke keys: a running server refuses them from its next request on."""
    try:
        revoked = KeyStore(data).revoke(key_id)
    except KeyStoreError as exc:
        fail("keys revoke", str(exc))
    for record in revoked:
        console.print(f"revoked key {record.key_id} of {record.principal}")


def _when(epoch: float | int | None) -> str:
    if epoch is None:
        return "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


PrincipalOption = Annotated[str | None, typer.Option(help="Written by this principal.")]
SourceOption = Annotated[str | None, typer.Option(help="With this meta.source.")]
CollectionOption = Annotated[str, typer.Option("--collection", help="Collection name.")]


@contextmanager
def _collection_engine(command: str, data: Path, collection: str) -> Iterator[Engine]:
    """The engine of ``collection``; any error is one line and exit 2 (as a server would
    answer it, for an engine error)."""
    try:
        engine = open_engine(CollectionRegistry(data).path(collection))
    except (CollectionError, EngineError, UsageError) as exc:
        fail(command, _described(exc))
    try:
        yield engine
    except (EngineError, UsageError) as exc:
        engine.close()
        fail(command, _described(exc))
    engine.close()


def _described(exc: Exception) -> str:
    return str(wire_error(exc) if isinstance(exc, EngineError) else exc)


@provenance_app.command("list")
def provenance_list(collection: CollectionOption, data: RootOption = _DEFAULT_ROOT,
                    principal: PrincipalOption = None, source: SourceOption = None) -> None:
    """The live documents a principal and/or a source wrote."""
    with _collection_engine("provenance list", data, collection) as engine:
        found = written(engine, principal=principal, source=source)
    table = Table("id", "written by", "written at", "source")
    for doc in found:
        table.add_row(doc.doc_id, doc.written_by or "-", _when(doc.written_at),
                      doc.source or "-")
    console.print(table)
    console.print(f"{len(found)} documents")


@provenance_app.command("purge")
def provenance_purge(collection: CollectionOption, data: RootOption = _DEFAULT_ROOT,
                     principal: PrincipalOption = None, source: SourceOption = None,
                     yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False
                     ) -> None:
    """Delete everything a principal and/or a source wrote (§15.3 revocation)."""
    with _collection_engine("provenance purge", data, collection) as engine:
        found = written(engine, principal=principal, source=source)
        if found and not yes:
            typer.confirm(f"delete {len(found)} documents from {collection}?", abort=True)
        deleted = purge(engine, found)
    console.print(f"deleted {deleted} documents")


@provenance_app.command("sources")
def provenance_sources(collection: CollectionOption, data: RootOption = _DEFAULT_ROOT
                       ) -> None:
    """Sources by the poisonSuspected reports on their documents since their last clear
    (§7.16, §15.3), most first, and whether the poison policy quarantines them."""
    with _collection_engine("provenance sources", data, collection) as engine:
        sources = engine.poison_state().sources
    # The label is what `provenance clear` takes: never wrapped.
    table = Table(Column("source", no_wrap=True), "reports", "demoted", "threshold", "state")
    for state in sources:
        table.add_row(state.label, str(state.reports), str(state.demoted),
                      str(state.threshold or "-"),
                      "quarantined" if state.quarantined else "serving")
    console.print(table)


@provenance_app.command("clear")
def provenance_clear(collection: CollectionOption, data: RootOption = _DEFAULT_ROOT,
                     principal: PrincipalOption = None, source: SourceOption = None) -> None:
    """Clear a vetted source: the poison reports so far on its documents stop counting,
    which lifts its quarantine (§15.3)."""
    with _collection_engine("provenance clear", data, collection) as engine:
        label = source_label(principal=principal, source=source)
        engine.clear_poison(label)
    console.print(f"cleared {label}")


def register(app: typer.Typer) -> None:
    """Add ``collection``, ``keys`` and ``provenance`` to the ``rcpkit`` command line."""
    app.add_typer(collection_app, name="collection")
    app.add_typer(keys_app, name="keys")
    app.add_typer(provenance_app, name="provenance")
