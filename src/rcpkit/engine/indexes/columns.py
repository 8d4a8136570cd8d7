"""In-memory §8 filter columns: a derived index that evaluates filter trees as numpy masks.

Like the lexical and dense indexes, :class:`FilterColumns` is derived from the store's chunk
rows (rowid → ``filter_meta``) and kept current by the engine's rebuild/catch-up path. Per
field it holds the JSON kind of each row's value (or its absence), a float64 column of scalar
numbers and booleans (``gt``/``gte``/``lt``/``lte`` and numeric ``eq``/``in``) and value →
rowid posting arrays for strings and for array elements (``eq``/``in``, array-element
``contains`` and, over the distinct strings, substring ``contains``). A chunk row's metadata
never changes and the stores never reuse a rowid, so versions are left to the caller's
visibility mask (§7.7.1).

The semantics are those of the SQL compiler in ``store/sqlite.py`` exactly, including its
three-valued logic: a comparison or a substring ``contains`` on a row without the field (or
with a JSON null there) is *unknown*, so neither it nor its ``not`` selects the row, while
``eq``/``in``/``exists`` are two-valued (``ne``/``nin`` match rows without the field). Strings
compare case-sensitively by bytes. Array elements or object members that are themselves
containers are matched by their compact JSON text, as SQLite's ``json_each`` renders them.

Persistence (:meth:`FilterColumns.save` / :meth:`FilterColumns.load`) follows the other
derived indexes: no pickle, one ``.npz`` of arrays under a fresh generation tag and a JSON
manifest (field names, posting keys with their JSON types, object texts) replaced last.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from rcpkit.engine.indexes.persist import commit_manifest, save_arrays, verify_file
from rcpkit.files import private_dir
from rcpkit.protocol.filters import All, AnyOf, Condition, FilterNode, Not

__all__ = ["FilterColumns"]

BoolMask = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

# The JSON kind of a field's value in one row (0: the row lacks the field).
_ABSENT, _NULL, _INTEGER, _REAL, _BOOL, _STRING, _ARRAY, _OBJECT = range(8)
_NUMERIC = (_INTEGER, _REAL)  # what json_type calls 'integer' and 'real'
_SCALAR_NUMBERS = (_INTEGER, _REAL, _BOOL)  # json_each yields booleans as integers
_COMPARE = {"gt": np.greater, "gte": np.greater_equal, "lt": np.less, "lte": np.less_equal}
_FORMAT = "rcpkit-columns/1"
_MANIFEST = "columns.json"


def _sql_text(value: Any) -> str:
    """The text SQLite's ``instr`` sees for a scalar (booleans are integers there; reals are
    rendered as Python does, which differs from SQLite only in exponent notation)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return value if isinstance(value, str) else str(value)


def _member_key(value: Any) -> Any:
    """The posting key of one ``json_each`` value: scalars as is, containers as JSON text."""
    if isinstance(value, list | dict):
        return orjson.dumps(value).decode()
    return value


def _grow(column: npt.NDArray[Any], size: int, fill: Any) -> npt.NDArray[Any]:
    if size <= len(column):
        return column
    grown = np.full(max(size, 2 * len(column)), fill, dtype=column.dtype)
    grown[:len(column)] = column
    return grown


def _within(rowids: IntArray, size: int) -> bool:
    """Whether every rowid lies in ``[0, size)``."""
    return not len(rowids) or (int(rowids.min()) >= 0 and int(rowids.max()) < size)


def _fit(column: npt.NDArray[Any], size: int, fill: Any) -> npt.NDArray[Any]:
    """``column`` cut or padded to exactly ``size`` rows."""
    if len(column) >= size:
        return column[:size]
    padded = np.full(size, fill, dtype=column.dtype)
    padded[:len(column)] = column
    return padded


class _Column:
    """One filterable field over all rowids: scalar numbers and booleans live in ``number``,
    strings and the members of arrays and objects in ``postings``."""

    def __init__(self) -> None:
        self.kind = np.zeros(0, dtype=np.int8)
        self.number = np.zeros(0, dtype=np.float64)
        self.postings: dict[Any, array[int]] = {}
        self.object_texts: dict[int, str] = {}

    def set(self, rowid: int, value: Any) -> None:
        self.kind = _grow(self.kind, rowid + 1, _ABSENT)
        self.number = _grow(self.number, rowid + 1, np.nan)
        if value is None:
            self.kind[rowid] = _NULL
            return
        members: list[Any]
        if isinstance(value, int | float):
            self.kind[rowid] = (_BOOL if isinstance(value, bool)
                                else _INTEGER if isinstance(value, int) else _REAL)
            self.number[rowid] = value
            return
        if isinstance(value, str):
            self.kind[rowid], members = _STRING, [value]
        elif isinstance(value, list):
            self.kind[rowid], members = _ARRAY, value
        else:
            self.kind[rowid], members = _OBJECT, list(value.values())
            self.object_texts[rowid] = orjson.dumps(value).decode()
        for member in members:
            if member is not None:
                self.postings.setdefault(_member_key(member), array("q")).append(rowid)

    def drop(self, held: BoolMask) -> None:
        """Forget every rowid that ``held`` no longer marks."""
        kept = _fit(held, len(self.kind), False)
        self.kind[~kept] = _ABSENT
        self.number[~kept] = np.nan
        for key in list(self.postings):
            rows = np.frombuffer(self.postings[key], dtype=np.int64)
            rows = rows[kept[rows]]
            if len(rows):
                self.postings[key] = array("q", rows.tobytes())
            else:
                del self.postings[key]
        self.object_texts = {r: t for r, t in self.object_texts.items() if kept[r]}

    def image(self, held: BoolMask, size: int
              ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The arrays and JSON parts of this column over the rows ``held`` marks (all of
        them ``< size``): postings as one CSR block (rows, per-key counts) beside the keys."""
        in_size = _fit(held, size, False)
        kind = np.where(in_size, _fit(self.kind, size, _ABSENT), _ABSENT).astype(np.int8)
        number = np.where(in_size, _fit(self.number, size, np.nan), np.nan)
        keys = list(self.postings)
        lengths = np.fromiter(map(len, self.postings.values()), dtype=np.int64,
                              count=len(keys))
        rows = np.frombuffer(b"".join(self.postings.values()), dtype=np.int64)
        keep = held[rows]  # a posting row was held once, so it lies inside ``held``
        kept_before = np.concatenate(([0], np.cumsum(keep)))
        ends = np.cumsum(lengths)
        counts = kept_before[ends] - kept_before[ends - lengths]
        used = counts > 0
        object_rowids = np.asarray(sorted(r for r in self.object_texts if held[r]),
                                   dtype=np.int64)
        arrays = {"kind": kind, "number": number, "rows": rows[keep], "counts": counts[used],
                  "object_rowids": object_rowids}
        parts = {"keys": [key for key, kept in zip(keys, used.tolist(), strict=True) if kept],
                 "object_texts": [self.object_texts[int(r)] for r in object_rowids]}
        return arrays, parts

    @classmethod
    def from_image(cls, arrays: Mapping[str, npt.NDArray[Any]], parts: Mapping[str, Any],
                   size: int) -> _Column:
        """The column :meth:`image` described; ``ValueError`` if the parts disagree."""
        column = cls()
        column.kind = np.asarray(arrays["kind"], dtype=np.int8)
        column.number = np.asarray(arrays["number"], dtype=np.float64)
        rows = np.asarray(arrays["rows"], dtype=np.int64)
        counts = np.asarray(arrays["counts"], dtype=np.int64)
        object_rowids = np.asarray(arrays["object_rowids"], dtype=np.int64)
        keys, texts = parts["keys"], parts["object_texts"]
        if (len(column.kind) != size or len(column.number) != size
                or len(counts) != len(keys) or int(counts.sum()) != len(rows)
                or len(object_rowids) != len(texts)
                or not all(_within(ids, size) for ids in (rows, object_rowids))):
            raise ValueError("saved filter column is inconsistent")
        ends = np.cumsum(counts)
        column.postings = {key: array("q", rows[end - count:end].tobytes())
                           for key, count, end in zip(keys, counts.tolist(), ends.tolist(),
                                                      strict=True)}
        column.object_texts = dict(zip(object_rowids.tolist(), texts, strict=True))
        return column

    def members(self, values: Collection[Any], kind: npt.NDArray[np.int8]) -> BoolMask:
        """Rows with a ``json_each`` value equal to one of ``values`` (SQL ``=``, where
        ``true`` equals 1); ``kind`` is this column fitted to the mask size."""
        size = len(kind)
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        found = (np.isin(kind, _SCALAR_NUMBERS) & np.isin(_fit(self.number, size, np.nan),
                                                          numbers)
                 if numbers else np.zeros(size, dtype=bool))
        for value in values:
            rows = self.postings.get(value) if value is not None else None
            if rows is not None:
                ids = np.frombuffer(rows, dtype=np.int64)
                found[ids[ids < size]] = True
        return found

    def substring(self, needle: Any, kind: npt.NDArray[np.int8]) -> BoolMask:
        """Non-array rows whose value's text contains ``needle`` (SQL ``instr(...) > 0``)."""
        text = _sql_text(needle)
        keys = [key for key in self.postings if isinstance(key, str) and text in key]
        found: BoolMask = self.members(keys, kind) & (kind == _STRING)
        number = _fit(self.number, len(kind), np.nan)
        for code, render in ((_INTEGER, int), (_BOOL, int), (_REAL, float)):
            rows = kind == code
            for value in np.unique(number[rows]):
                if text in str(render(value)):
                    found |= rows & (number == value)
        for rowid, json_text in self.object_texts.items():
            if rowid < len(kind) and text in json_text:
                found[rowid] = True
        return found


class FilterColumns:
    """The §8 filter index over chunk rowids; see the module docstring.

    Not thread-safe: the engine mutates it under its exclusive index lock and reads it under
    the shared one, as it does the other derived indexes.
    """

    def __init__(self) -> None:
        self._fields: dict[str, _Column] = {}
        self._held = np.zeros(0, dtype=bool)
        self._dropped = 0

    def add(self, rowids: Sequence[int], metas: Sequence[Mapping[str, Any]]) -> None:
        """Index the rows ``rowids`` whose filter metadata are ``metas`` (same order)."""
        for rowid, meta in zip(rowids, metas, strict=True):
            rowid = int(rowid)
            if rowid < len(self._held) and self._held[rowid]:
                continue
            self._held = _grow(self._held, rowid + 1, False)
            self._held[rowid] = True
            for name, value in meta.items():
                self._fields.setdefault(name, _Column()).set(rowid, value)

    def held_rowids(self) -> IntArray:
        """The rowids held, ascending."""
        return np.flatnonzero(self._held).astype(np.int64)

    def remove(self, rowids: IntArray) -> None:
        """Forget rows (garbage-collected from the store); postings are compacted lazily."""
        inside = rowids[rowids < len(self._held)]
        self._dropped += int(self._held[inside].sum())
        self._held[inside] = False
        if self._dropped > int(self._held.sum()):
            for column in self._fields.values():
                column.drop(self._held)
            self._dropped = 0

    def save(self, directory: Path) -> None:
        """Write the columns under ``directory`` atomically: the ``.npz`` goes to a fresh
        file, then replacing the manifest that names it commits. Rows removed since the last
        compaction are left out, so the saved image is compact."""
        directory = Path(directory)
        private_dir(directory)
        held_rows = np.flatnonzero(self._held)
        size = int(held_rows[-1]) + 1 if len(held_rows) else 0
        arrays: dict[str, npt.NDArray[Any]] = {"held": self._held[:size]}
        fields: list[dict[str, Any]] = []
        for position, (name, column) in enumerate(self._fields.items()):
            column_arrays, parts = column.image(self._held, size)
            arrays.update({f"{part}_{position}": values
                           for part, values in column_arrays.items()})
            fields.append({"name": name, **parts})
        arrays_name = save_arrays(directory, "columns", arrays)
        commit_manifest(directory, _MANIFEST,
                        {"format": _FORMAT, "arrays": arrays_name, "fields": fields},
                        prefix="columns", arrays=arrays_name)

    @classmethod
    def load(cls, directory: Path) -> FilterColumns:
        """Read columns written by :meth:`save` (no pickle). ``OSError`` when they are
        missing, ``ValueError`` (or a decoding error) when they are damaged or foreign."""
        directory = Path(directory)
        manifest = json.loads((directory / _MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != _FORMAT:
            raise ValueError(f"{directory} does not hold {_FORMAT} filter columns")
        columns = cls()
        verify_file(directory / manifest["arrays"], manifest.get("checksum"))
        with np.load(directory / manifest["arrays"], allow_pickle=False) as arrays:
            columns._held = np.asarray(arrays["held"], dtype=np.bool_)
            size = len(columns._held)
            for position, field in enumerate(manifest["fields"]):
                saved = {part: arrays[f"{part}_{position}"]
                         for part in ("kind", "number", "rows", "counts", "object_rowids")}
                columns._fields[field["name"]] = _Column.from_image(saved, field, size)
        return columns

    def mask(self, node: FilterNode, size: int, known: Collection[str]) -> BoolMask:
        """Rows ``< size`` held here that ``node`` selects; ``known`` are the store's schema
        fields (a condition on any other field matches nothing, as in SQL)."""
        selected, _ = self._evaluate(node, size, known)
        held: BoolMask = selected & _fit(self._held, size, False)
        return held

    def _evaluate(self, node: FilterNode, size: int,
                  known: Collection[str]) -> tuple[BoolMask, BoolMask]:
        """(true, false) masks; rows in neither are SQL ``NULL`` (unknown)."""
        if isinstance(node, Not):
            true, false = self._evaluate(node.child, size, known)
            return false, true
        if isinstance(node, All | AnyOf):
            parts = [self._evaluate(child, size, known) for child in node.children]
            trues = [part[0] for part in parts]
            falses = [part[1] for part in parts]
            if isinstance(node, All):
                return np.logical_and.reduce(trues), np.logical_or.reduce(falses)
            return np.logical_or.reduce(trues), np.logical_and.reduce(falses)
        return self._condition(node, size, known)

    def _condition(self, cond: Condition, size: int,
                   known: Collection[str]) -> tuple[BoolMask, BoolMask]:
        op, value = cond.op, cond.value
        if cond.field not in known:
            true = np.zeros(size, dtype=bool)
            return true, ~true
        column = self._fields.get(cond.field) or _Column()
        kind = _fit(column.kind, size, _ABSENT)
        present = kind != _ABSENT
        if op == "exists":
            true = present if value else ~present
        elif op in ("eq", "ne"):
            true = column.members((value,), kind) ^ (op == "ne")
        elif op in ("in", "nin"):
            true = column.members(value, kind) ^ (op == "nin")
        elif op == "contains":
            is_array = kind == _ARRAY
            true = is_array & column.members((value,), kind)
            if value is not None:  # instr(x, NULL) is unknown
                true |= column.substring(value, kind)
            unknown = ~is_array & ((kind == _NULL) | ~present | (value is None))
            return true, ~true & ~unknown
        else:
            number = _fit(column.number, size, np.nan)
            true = np.isin(kind, _NUMERIC) & _COMPARE[op](number, value)
            return true, present & ~true
        return true, ~true
