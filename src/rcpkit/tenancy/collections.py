"""Named collections under one data root: ``<root>/collections/<name>/`` is each one's data
directory (its own record, indexes, schema, ``rcpkit.toml`` and so capabilities).

On PostgreSQL the collections share one database: each record lives in its own schema
(``rcpkit_<name>``), first on the search path its DSN sets, with pgvector in ``public``.
A schema keeps every table, index and lock name of the store as it is, so the store needs
no collection key in its queries, and dropping a collection is one ``DROP SCHEMA``.

A name is lower-case letters, digits, ``-`` and ``_``, and never the first segment of an RCP
method (``retrieve``, ``index``, ``x-…``), so ``<base>/<name>/…`` cannot be mistaken for a
method of the server's own ``<base>`` (§7.13 ``catalog/list`` lives there) nor for its
``openrpc.json``.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

from ..engine.config import CONFIG_FILE, record_backend, settings_by_table
from ..files import private_dir, write_new
from ..protocol.methods import METHODS
from ..protocol.openrpc import DOCUMENT

__all__ = [
    "COLLECTIONS_DIR",
    "CollectionError",
    "CollectionRegistry",
    "check_name",
    "is_collection_root",
    "is_reserved_segment",
    "schema_of",
]

COLLECTIONS_DIR = "collections"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_RESERVED = frozenset(method.split("/", 1)[0] for method in METHODS) | {DOCUMENT}


class CollectionError(ValueError):
    """A bad collection name, or one that does (not) exist when it must (not)."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise CollectionError(f"collection name {name!r}: use 1-63 lower-case letters, digits, "
                              "'-' or '_', starting with a letter or digit")
    if name in _RESERVED or name.startswith("x-"):
        raise CollectionError(f"collection name {name!r} is an RCP method name")
    return name


def is_reserved_segment(segment: str) -> bool:
    """True when ``<base>/<segment>`` names a method, not a collection."""
    return segment in _RESERVED or segment.startswith("x-")


class CollectionRegistry:
    """The collections of one data root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.folder = self.root / COLLECTIONS_DIR

    def names(self) -> list[str]:
        if not self.folder.is_dir():
            return []
        return sorted(entry.name for entry in self.folder.iterdir()
                      if entry.is_dir() and _NAME.match(entry.name)
                      and not is_reserved_segment(entry.name))

    def path(self, name: str) -> Path:
        """The data directory of an existing collection."""
        directory = self.folder / check_name(name)
        if not directory.is_dir():
            raise CollectionError(f"no collection {name!r} in {self.root}")
        return directory

    def create(self, name: str, config: str | None = None, *, dsn: str | None = None) -> Path:
        """A new, empty collection; ``config`` is its ``rcpkit.toml`` text. With ``dsn``
        its record is the schema ``rcpkit_<name>`` of that PostgreSQL database."""
        directory = self.folder / check_name(name)
        if directory.exists():
            raise CollectionError(f"collection {name!r} exists already")
        text = config or ""
        if dsn is not None and {"backend", "dsn"} & _store_of(text, name).keys():
            raise CollectionError("with --dsn the collection's config must not set "
                                  "backend or dsn")
        private_dir(directory)
        if text:
            write_new(directory / CONFIG_FILE, text)  # 0600: a DSN may hold a password
        if dsn is not None:
            record_backend(directory, "postgres", _create_schema(dsn, schema_of(name)))
        return directory

    def drop(self, name: str) -> None:
        """Delete a collection: its data directory, and its schema on PostgreSQL."""
        directory = self.path(name)
        config_file = directory / CONFIG_FILE
        store = _store_of(config_file.read_text(encoding="utf-8"), name) \
            if config_file.exists() else {}
        if store.get("backend") == "postgres" and isinstance(store.get("dsn"), str):
            _drop_schema(store["dsn"], schema_of(name))
        shutil.rmtree(directory)


def schema_of(name: str) -> str:
    """The PostgreSQL schema of a collection (an identifier for any valid name)."""
    return "rcpkit_" + check_name(name).replace("-", "_")


def _store_of(text: str, name: str) -> dict[str, Any]:
    """The ``[store]`` settings of a collection's ``rcpkit.toml`` text (old flat keys too)."""
    try:
        return settings_by_table(tomllib.loads(text))[0].get("store", {})
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise CollectionError(f"the config of collection {name!r}: {exc}") from None


def _create_schema(dsn: str, schema: str) -> str:
    """Create ``schema`` (and pgvector in ``public``); the DSN that puts it first."""
    psycopg, sql, make_conninfo = _postgres()
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
            db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    except psycopg.Error as exc:
        raise CollectionError(f"cannot create schema {schema}: {exc}") from None
    return str(make_conninfo(dsn, options=f"-c search_path={schema},public"))


def _drop_schema(dsn: str, schema: str) -> None:
    psycopg, sql, _ = _postgres()
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error as exc:
        raise CollectionError(f"cannot drop schema {schema}: {exc}") from None


def _postgres() -> tuple[Any, Any, Any]:
    try:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import make_conninfo
    except ModuleNotFoundError:
        raise CollectionError("collections on PostgreSQL need the postgres extra "
                              "(pip install 'rcpkit[postgres]')") from None
    return psycopg, sql, make_conninfo


def is_collection_root(path: Path) -> bool:
    """True for a data root holding collections (not a single corpus' data directory)."""
    return (Path(path) / COLLECTIONS_DIR).is_dir()
