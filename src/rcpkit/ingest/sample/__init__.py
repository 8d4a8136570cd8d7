"""A small bundled corpus (20 original Markdown notes on gardening, bees, baking, weather
and astronomy) so a fresh ``rcpkit serve`` has something real to retrieve.

Each file starts with a ``---`` front-matter block of ``key: value`` lines that becomes the
document's metadata (``title``, ``tag``, ``year``, ``date``, ``lang``).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from rcpkit.engine.types import DocumentIn

__all__ = ["sample_documents"]


def _parse(name: str, raw: str) -> DocumentIn:
    meta: dict[str, Any] = {"source": f"rcpkit-sample/{name}", "trust": "trusted"}
    body = raw
    if raw.startswith("---\n"):
        header, _, body = raw[4:].partition("\n---\n")
        for line in header.splitlines():
            key, _, value = line.partition(":")
            text = value.strip()
            meta[key.strip()] = int(text) if text.isdigit() else text
    return DocumentIn(text=body.strip(), id=name.removesuffix(".md"), meta=meta)


def sample_documents() -> list[DocumentIn]:
    """The bundled documents with stable ids (the file names), sorted by id."""
    files = sorted((entry for entry in resources.files(__name__).iterdir()
                    if entry.name.endswith(".md")), key=lambda entry: entry.name)
    return [_parse(entry.name, entry.read_text(encoding="utf-8")) for entry in files]
