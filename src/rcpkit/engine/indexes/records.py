"""The stored fields of each chunk but its text, in memory: what a page of hits needs.

A hit (§7.7) shows its chunk's document id, index, offsets, context and its document's
metadata (citation and trust come from them), and the ranking stages look at the filter
metadata (recency) and the document id (poison policy, ``unit: document``). Reading those
from the store costs a query per page (an SQLite join and three JSON decodes per row); kept
here, a page that does not include text is answered without any. The text, the bulk of a
chunk, stays in the store and is read for the requests that return or rerank it.

Each row is one compact JSON array (``orjson``; the filter metadata only where it differs
from the metadata), about seventy bytes for a short metadata object, in a list indexed by
rowid: a chunk row never changes once written and stores never reuse a rowid, so, like the
other derived indexes, :class:`ChunkFields` is kept current by the engine's rebuild and
catch-up path and leaves versions to the visibility mask. Saved and loaded like the filter
columns: one ``.npz`` (the concatenated rows, their offsets and rowids) named by a JSON
manifest replaced last.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

from rcpkit.engine.indexes.persist import commit_manifest, compact_ints, save_arrays, verify_file
from rcpkit.engine.store import ChunkRecord
from rcpkit.files import private_dir

__all__ = ["ChunkFields"]

_FORMAT = "rcpkit-chunk-fields/1"
_MANIFEST = "fields.json"


class ChunkFields:
    """rowid → a chunk's stored record without its text (see the module docstring).

    Not thread-safe: mutated under the engine's exclusive index lock, read under the shared
    one, as the other derived indexes are.
    """

    def __init__(self) -> None:
        self._rows: list[bytes | None] = []

    def add(self, records: Iterable[ChunkRecord]) -> None:
        """Keep the fields of ``records`` (a row already held is left as it is). A row whose
        metadata JSON cannot encode (an integer beyond 64 bits, which a PostgreSQL store can
        hold) is not kept: its pages read it from the store."""
        rows = self._rows
        for record in records:
            rowid = record.rowid
            if rowid >= len(rows):
                rows.extend([None] * (rowid + 1 - len(rows)))
            if rows[rowid] is None:
                fields = [record.doc_id, record.index, record.start, record.end,
                          record.context, record.headings, record.meta]
                # The filter metadata is the metadata with dates as numbers: usually the
                # same object, kept once (a row of seven fields).
                if record.filter_meta != record.meta:
                    fields.append(record.filter_meta)
                try:
                    rows[rowid] = orjson.dumps(fields)
                except orjson.JSONEncodeError:
                    continue

    def held_rowids(self) -> npt.NDArray[np.int64]:
        """The rowids whose fields are kept, ascending (a row whose metadata could not be
        encoded is not among them: its pages read it from the store)."""
        return np.array([rowid for rowid, row in enumerate(self._rows) if row is not None],
                        dtype=np.int64)

    def remove(self, rowids: npt.NDArray[np.int64]) -> None:
        """Forget rows (garbage-collected from the store); unknown rowids are ignored."""
        rows = self._rows
        for rowid in rowids.tolist():
            if 0 <= rowid < len(rows):
                rows[rowid] = None

    def get(self, rowids: Sequence[int]) -> dict[int, ChunkRecord]:
        """The records of those of ``rowids`` held here, with an empty ``text`` (the caller
        reads the text from the store when it needs it)."""
        rows = self._rows
        size = len(rows)
        found: dict[int, ChunkRecord] = {}
        for rowid in rowids:
            row = rows[rowid] if 0 <= rowid < size else None
            if row is not None:
                fields = orjson.loads(row)
                doc_id, index, start, end, context, headings, meta = fields[:7]
                filter_meta = fields[7] if len(fields) > 7 else meta
                found[rowid] = ChunkRecord(rowid, doc_id, index, start, end, "", context,
                                           tuple(headings), meta, filter_meta)
        return found

    def save(self, directory: Path) -> None:
        """Write the rows under ``directory`` atomically: the ``.npz`` goes to a fresh file,
        then replacing the manifest that names it commits."""
        directory = Path(directory)
        private_dir(directory)
        held = [(rowid, row) for rowid, row in enumerate(self._rows) if row is not None]
        lengths = np.fromiter((len(row) for _, row in held), dtype=np.int64, count=len(held))
        arrays = {
            "rowids": compact_ints(np.fromiter((rowid for rowid, _ in held), dtype=np.int64,
                                               count=len(held))),
            "ends": compact_ints(np.cumsum(lengths)),
            "data": np.frombuffer(b"".join(row for _, row in held), dtype=np.uint8),
        }
        arrays_name = save_arrays(directory, "fields", arrays)
        commit_manifest(directory, _MANIFEST, {"format": _FORMAT, "arrays": arrays_name},
                        prefix="fields", arrays=arrays_name)

    @classmethod
    def load(cls, directory: Path) -> ChunkFields:
        """Read rows written by :meth:`save` (no pickle). ``OSError`` when they are missing,
        ``ValueError`` when they are damaged or foreign."""
        directory = Path(directory)
        manifest = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != _FORMAT:
            raise ValueError(f"{directory} does not hold {_FORMAT} chunk fields")
        verify_file(directory / manifest["arrays"], manifest.get("checksum"))
        with np.load(directory / manifest["arrays"], allow_pickle=False) as arrays:
            rowids = arrays["rowids"].astype(np.int64).tolist()
            ends = arrays["ends"].astype(np.int64).tolist()
            data = arrays["data"].tobytes()
        if len(rowids) != len(ends) or (ends and ends[-1] != len(data)):
            raise ValueError(f"{directory}: chunk fields do not match their offsets")
        fields = cls()
        rows: list[bytes | None] = [None] * (rowids[-1] + 1 if rowids else 0)
        start = 0
        for rowid, end in zip(rowids, ends, strict=True):
            rows[rowid] = data[start:end]
            start = end
        fields._rows = rows
        return fields
