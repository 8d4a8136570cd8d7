"""Writing what :func:`~rcpkit.ingest.folders.read_folder` read into an engine, shared by
``rcpkit index add|sync`` and anything else that keeps an index in step with files.

One refused document never stops the rest: a batch the engine refuses is retried without the
document it blames (§7.10 validation runs before anything is embedded), and a folder's stale
documents are only those no file yields any more."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rcpkit.engine.core import Engine
from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.types import TRUST_LEVELS, DocumentIn, less_trusted
from rcpkit.ingest.folders import CHOSEN_SKIPS, Folder, Skip

__all__ = ["Tally", "add_batch", "labelled", "stale_documents"]


@dataclass(slots=True)
class Tally:
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


def add_batch(engine: Engine, batch: list[tuple[str, DocumentIn]], tally: Tally, *,
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


def stale_documents(engine: Engine, folder: Folder, kept: set[str]) -> list[str]:
    """Documents of the synced roots that no file yields any more; a file skipped this run
    (unreadable for now) keeps its documents, so a transient error never deletes data."""
    unreadable = {skip.source for skip in folder.skipped if skip.kind not in CHOSEN_SKIPS}
    stale = set()
    for root, subtree in folder.roots:
        below = f"{root.prefix}{subtree}/" if subtree else root.prefix
        # An index written before roots had labels holds the host path: still this root's.
        for label in (root.label, root.path.as_posix()):
            tree = {"field": "source_root", "op": "eq", "value": label}
            for doc_id, meta in engine.documents_where(tree).items():
                source = str(meta.get("source", ""))
                if doc_id not in kept and source.startswith(below) and source not in unreadable:
                    stale.add(doc_id)
    return sorted(stale)


def labelled(source: str, document: DocumentIn, level: str, tally: Tally) -> DocumentIn:
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
