"""Turning ``index/add`` documents (§7.10) into store writes: input checks, the trust label
(§15.2), the §8 metadata schema (types inferred for new keys), chunks with their context, and
a content hash so an unchanged document is not embedded or written again."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.documents.chunking import Chunk, chunk_text, contextualize
from rcpkit.engine.errors import InvalidInput, TooLarge
from rcpkit.engine.store import ChunkWrite, DocumentWrite, indexed_text
from rcpkit.engine.types import TRUST_LEVELS, WRITE_STAMP, DocumentIn, less_trusted
from rcpkit.protocol.filters import parse_date
from rcpkit.scalar_text import non_scalar_path

__all__ = ["Prepared", "Preparer"]

_FIELD_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@dataclass(frozen=True, slots=True)
class _Piece:
    chunk: Chunk
    context: str

    @property
    def indexed(self) -> str:
        return indexed_text(self.context, self.chunk.text)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One checked document: its chunks to embed and what the store keeps."""

    doc_id: str
    text: str
    meta: dict[str, Any]
    filter_meta: dict[str, Any]
    pieces: list[_Piece]
    content_hash: str

    @property
    def texts(self) -> list[str]:
        """What is embedded and indexed per chunk (context + text)."""
        return [piece.indexed for piece in self.pieces]

    def to_write(self, vectors: npt.NDArray[np.float32]) -> DocumentWrite:
        return DocumentWrite(
            doc_id=self.doc_id, text=self.text, meta=self.meta, filter_meta=self.filter_meta,
            content_hash=self.content_hash,
            chunks=[ChunkWrite(index=p.chunk.index, start=p.chunk.start, end=p.chunk.end,
                               text=p.chunk.text, context=p.context,
                               headings=tuple(p.chunk.headings), vector=vector)
                    for p, vector in zip(self.pieces, vectors, strict=True)])


class Preparer:
    """Checks and prepares documents for one engine (its limits, chunking and embedder)."""

    def __init__(self, config: EngineConfig, embedder_identity: str) -> None:
        self._config = config
        self._embedder_identity = embedder_identity

    def check(self, documents: Sequence[DocumentIn]) -> None:
        """Refuse a batch before anything is written. A text that is empty or only
        whitespace has nothing to match, yet would rank and fill a ``tokenBudget``."""
        config = self._config
        if len(documents) > config.requests.max_documents_per_add:
            raise TooLarge(f"at most {config.requests.max_documents_per_add} documents per add")
        for position, document in enumerate(documents):
            where = f"documents[{position}]"
            if not isinstance(document.text, str):
                raise InvalidInput("text must be a string", field=f"{where}.text")
            # The store could not read such a row back (§4.6).
            bad = non_scalar_path({"id": document.id, "text": document.text,
                                   "meta": document.meta}, where)
            if bad is not None:
                raise InvalidInput("a string is not valid Unicode (it holds a lone surrogate)",
                                   field=bad)
            if not document.text.strip():
                raise InvalidInput("text must not be empty or whitespace only",
                                   field=f"{where}.text")
            if len(document.text.encode()) > config.requests.max_text_bytes:
                raise TooLarge(f"{where}.text exceeds {config.requests.max_text_bytes} bytes")

    def prepare(self, position: int, document: DocumentIn, schema: Mapping[str, str],
                new_fields: dict[str, str], chunk: bool, contextual: bool,
                max_trust: str) -> Prepared:
        """``document`` checked against ``schema`` (new field types go to ``new_fields``) and
        labelled at most ``max_trust``."""
        where = f"documents[{position}]"
        if document.id is not None and (not isinstance(document.id, str) or not document.id):
            raise InvalidInput("id must be a non-empty string", field=f"{where}.id")
        if document.meta is not None and not isinstance(document.meta, Mapping):
            raise InvalidInput("meta must be an object", field=f"{where}.meta")
        config = self._config
        meta = dict(document.meta or {})
        self._label_trust(meta, max_trust, f"{where}.meta.trust")
        filter_meta = self._filter_meta(meta, schema, new_fields, f"{where}.meta")
        title = meta.get("title") if isinstance(meta.get("title"), str) else None
        pieces: list[Chunk] = (chunk_text(document.text, max_chars=config.chunking.max_chars,
                                          overlap_chars=config.chunking.overlap_chars,
                                          title=title)
                               if chunk else [])
        if not pieces:
            pieces = [Chunk(index=0, start=0, end=len(document.text), text=document.text,
                            headings=())]
        parts = [_Piece(c, contextualize(c, title or "") if contextual else "") for c in pieces]
        content_meta = {k: v for k, v in meta.items() if k not in WRITE_STAMP}
        fingerprint = json.dumps([document.text, content_meta, chunk, contextual,
                                  self._embedder_identity, config.chunking.max_chars,
                                  config.chunking.overlap_chars], sort_keys=True, default=str)
        return Prepared(doc_id=document.id or uuid.uuid4().hex, text=document.text, meta=meta,
                        filter_meta=filter_meta, pieces=parts,
                        content_hash=hashlib.sha256(fingerprint.encode()).hexdigest())

    def _label_trust(self, meta: dict[str, Any], max_trust: str, where: str) -> None:
        """§15.2: a writer names a level up to ``max_trust`` (its grant) and is refused a
        higher one rather than silently relabelled; a document naming none gets the
        configured ``trust``, capped by the grant. ``untrusted`` is the reading default, so it
        is not written into metadata that lacks it (the content hash stays as it was)."""
        if "trust" not in meta:
            level = less_trusted(self._config.index.trust, max_trust)
            if level != "untrusted":
                meta["trust"] = level
            return
        claimed = meta["trust"]
        if claimed not in TRUST_LEVELS:
            raise InvalidInput(f"trust must be one of {', '.join(TRUST_LEVELS)}", field=where)
        if less_trusted(claimed, max_trust) != claimed:
            raise InvalidInput(f"this writer may label documents at most {max_trust!r}: trust "
                               "is granted by the operator (§15.2)", field=where)

    def _filter_meta(self, meta: Mapping[str, Any], schema: Mapping[str, str],
                     new_fields: dict[str, str], where: str) -> dict[str, Any]:
        """Type-check metadata against the §8 schema, inferring types for new keys."""
        normalised: dict[str, Any] = {}
        for name, value in meta.items():
            if value is None or not name or not set(name) <= _FIELD_NAME_CHARS:
                continue  # kept for display; not a filterable field
            ftype = (self._config.field_types.get(name) or schema.get(name)
                     or new_fields.get(name) or _infer_type(value))
            if ftype is None:
                continue
            coerced = _coerce(ftype, value)
            if coerced is None:
                raise InvalidInput(f"metadata {name!r} does not fit field type {ftype!r}",
                                   field=f"{where}.{name}")
            if name not in schema:
                new_fields[name] = ftype
            normalised[name] = coerced
        return normalised


def _infer_type(value: Any) -> str | None:
    """§8 type for a metadata value never seen before (``None``: not filterable)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        # An ISO-8601 date ("2024-05-01", "2024-05-01T12:00:00Z") becomes a date field.
        is_date = (len(value) >= 10 and value[4:5] == "-" and value[7:8] == "-"
                   and parse_date(value) is not None)
        return "date" if is_date else "keyword"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "keyword"
    return None


def _coerce(ftype: str, value: Any) -> Any:
    """``value`` in the stored filter form for ``ftype``; ``None`` if it does not fit."""
    if isinstance(value, list):
        items = [_coerce(ftype, v) for v in value]
        return None if any(item is None for item in items) else items
    if ftype in ("keyword", "text"):
        return value if isinstance(value, str) else None
    if ftype == "bool":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if ftype == "int":
        return int(value) if isinstance(value, int | float) and float(value).is_integer() \
            else None
    if ftype == "float":
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
    if ftype == "date":
        return parse_date(value)
    return None
