"""The chunks' stored fields kept in memory (:class:`ChunkFields`): what a page of hits needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.indexes.persist import DamagedFile
from rcpkit.engine.indexes.records import ChunkFields
from rcpkit.engine.store import ChunkRecord


def _record(rowid: int, **meta: object) -> ChunkRecord:
    return ChunkRecord(rowid=rowid, doc_id=f"doc-{rowid // 2}", index=rowid % 2, start=3 * rowid,
                       end=3 * rowid + 2, text=f"text {rowid}", context="ctx" if rowid % 3 else "",
                       headings=("Intro", "Ünïcode"), meta={"title": "T", **meta},
                       filter_meta={"n": rowid, "when": 1.5e12})


def _without_text(record: ChunkRecord) -> ChunkRecord:
    return ChunkRecord(record.rowid, record.doc_id, record.index, record.start, record.end, "",
                       record.context, record.headings, record.meta, record.filter_meta)


def test_rows_come_back_as_written_but_their_text() -> None:
    fields = ChunkFields()
    records = [_record(rowid, tags=["a", {"b": None}]) for rowid in (1, 2, 7)]
    fields.add(records)
    fields.add([_record(2, changed=True)])  # a row already held is kept as it was
    assert fields.get([7, 1, 2, 5, 99, -1]) == {r.rowid: _without_text(r) for r in records}


def test_removed_rows_are_forgotten() -> None:
    fields = ChunkFields()
    fields.add([_record(rowid) for rowid in range(1, 6)])
    fields.remove(np.asarray([2, 4, 1000], dtype=np.int64))
    assert sorted(fields.get(range(1, 6))) == [1, 3, 5]


def test_a_row_json_cannot_encode_is_left_to_the_store() -> None:
    fields = ChunkFields()
    fields.add([_record(1, big=2**70), _record(2)])
    assert list(fields.get([1, 2])) == [2]


def test_saved_rows_load_the_same(tmp_path: Path) -> None:
    fields = ChunkFields()
    fields.add([_record(rowid) for rowid in (3, 4, 900)])
    fields.remove(np.asarray([4], dtype=np.int64))
    fields.save(tmp_path)
    loaded = ChunkFields.load(tmp_path)
    assert loaded.get(range(1000)) == fields.get(range(1000))
    assert sorted(loaded.get(range(1000))) == [3, 900]
    loaded.add([_record(5)])
    assert 5 in loaded.get([5])


def test_an_empty_set_saves_and_loads(tmp_path: Path) -> None:
    ChunkFields().save(tmp_path)
    assert ChunkFields.load(tmp_path).get([0, 1]) == {}


def test_damaged_or_missing_rows_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        ChunkFields.load(tmp_path)
    fields = ChunkFields()
    fields.add([_record(1)])
    fields.save(tmp_path)
    (saved,) = tmp_path.glob("fields-*.npz")
    data = bytearray(saved.read_bytes())
    data[-40] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(DamagedFile):
        ChunkFields.load(tmp_path)


def test_filter_metadata_equal_to_the_metadata_is_kept_once() -> None:
    fields = ChunkFields()
    same = ChunkRecord(rowid=1, doc_id="d", index=0, start=0, end=4, text="text", context="",
                       headings=(), meta={"group": 7, "half": 1},
                       filter_meta={"group": 7, "half": 1})
    fields.add([same, _record(2)])
    assert fields.get([1, 2]) == {1: _without_text(same), 2: _without_text(_record(2))}
    assert fields._rows[1] is not None and fields._rows[1].count(b'"group"') == 1
