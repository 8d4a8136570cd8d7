"""Named collections under one data root: ``<root>/collections/<name>/`` is each one's data
directory (its own record, indexes, schema, ``rcpkit.toml`` and so capabilities).

A name is lower-case letters, digits, ``-`` and ``_``, and never the first segment of an RCP
method (``retrieve``, ``index``, ``x-…``), so ``<base>/<name>/…`` cannot be mistaken for a
method of the server's own ``<base>`` (§7.13 ``catalog/list`` lives there).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ..protocol.methods import CORE_METHODS

__all__ = ["COLLECTIONS_DIR", "CollectionError", "CollectionRegistry", "check_name",
           "is_collection_root", "is_reserved_segment"]

COLLECTIONS_DIR = "collections"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_RESERVED = frozenset(method.split("/", 1)[0] for method in CORE_METHODS)


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

    def create(self, name: str, config: str | None = None) -> Path:
        """A new, empty collection; ``config`` is its ``rcpkit.toml`` text."""
        directory = self.folder / check_name(name)
        if directory.exists():
            raise CollectionError(f"collection {name!r} exists already")
        directory.mkdir(parents=True)
        if config is not None:
            (directory / "rcpkit.toml").write_text(config, encoding="utf-8")
        return directory

    def drop(self, name: str) -> None:
        """Delete a collection and everything in its data directory."""
        shutil.rmtree(self.path(name))


def is_collection_root(path: Path) -> bool:
    """True for a data root holding collections (not a single corpus' data directory)."""
    return (Path(path) / COLLECTIONS_DIR).is_dir()
