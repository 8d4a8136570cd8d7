"""``engine/indexes/dense/usearch_format.py`` on its own, on files usearch itself writes: the
layout read matches what usearch reports, a lean file round-trips to usearch's bytes, and a
truncated, corrupt or foreign file is refused with a :class:`FormatError` saying why."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

from rcpkit.engine.indexes.dense import usearch_format
from rcpkit.engine.indexes.dense.usearch_format import FormatError

DIM = 24
ROWS = 600
ROOT = Path(__file__).parents[2]


def unit_vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def written_by_usearch(tmp_path: Path, dtype: str, *, removed: int = 0) -> tuple[Path, object]:
    """A graph of ``ROWS`` vectors keyed 1000.. saved by usearch to a file, ``removed`` of
    its rows removed first."""
    index = usearch_format.load_usearch()(ndim=DIM, metric="cos", dtype=dtype, connectivity=8)
    index.add(np.arange(1000, 1000 + ROWS), unit_vectors(ROWS, 1))
    if removed:
        index.remove(np.arange(1000, 1000 + removed))
    path = tmp_path / f"graph-{dtype}.usearch"
    index.save(str(path))
    return path, index


def read(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8)


def test_the_pin_is_the_one_pyproject_requires_and_the_one_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    usearch = [Requirement(line) for line in project["project"]["dependencies"]
               if Requirement(line).name == "usearch"]
    assert usearch == [Requirement(usearch_format.PINNED)]
    assert usearch[0].specifier.contains(importlib.metadata.version("usearch"))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "i8"])
def test_a_file_usearch_wrote_is_read_as_usearch_reports_it(tmp_path: Path, dtype: str) -> None:
    path, index = written_by_usearch(tmp_path, dtype)
    serialised = read(path)
    layout = usearch_format.parse(serialised)
    assert sorted(layout.keys.tolist()) == list(range(1000, 1000 + ROWS))
    assert layout.block.shape == (ROWS, {"f16": 2, "bf16": 2, "i8": 1}[dtype] * DIM)
    # the codes usearch stored are the ones this module computes from the float32 rows
    rows = unit_vectors(ROWS, 1)[layout.keys.astype(np.int64) - 1000]
    np.testing.assert_array_equal(usearch_format.vector_codes(rows, dtype), layout.block)
    stats = index.levels_stats  # type: ignore[attr-defined]
    links = usearch_format.links(serialised, layout)
    assert [(len(level.nodes), len(level.neighbours)) for level in links] == [
        (level.nodes, level.edges) for level in stats]


def test_a_removed_row_reads_as_a_free_slot(tmp_path: Path) -> None:
    path, _ = written_by_usearch(tmp_path, "f16", removed=5)
    layout = usearch_format.parse(read(path))
    free = layout.keys == usearch_format.FREE_KEY
    assert free.sum() == 5
    assert sorted(layout.keys[~free].tolist()) == list(range(1005, 1000 + ROWS))


def test_a_lean_file_round_trips_to_the_bytes_usearch_wrote(tmp_path: Path) -> None:
    path, index = written_by_usearch(tmp_path, "f16", removed=3)
    serialised = read(path)
    layout = usearch_format.parse(serialised)
    kept = np.flatnonzero(layout.keys == usearch_format.FREE_KEY)
    lean = np.concatenate([np.ascontiguousarray(piece).view(np.uint8).ravel()
                           for piece in usearch_format.lean_pieces(serialised, layout, kept)])
    assert len(lean) == len(serialised) - (ROWS - len(kept)) * layout.block.shape[1] + 4 * 3
    restored, restored_layout, restored_kept = usearch_format.unlean(lean, len(kept))
    assert restored_kept.tolist() == kept.tolist()
    np.testing.assert_array_equal(restored_layout.block[kept], layout.block[kept])
    left_out = np.setdiff1d(np.arange(ROWS), kept)
    positions = layout.keys[left_out].astype(np.int64) - 1000
    restored_layout.block[left_out] = usearch_format.vector_codes(
        unit_vectors(ROWS, 1)[positions], "f16")
    assert restored.tobytes() == serialised.tobytes()
    reloaded = usearch_format.load_usearch()(ndim=DIM, metric="cos", dtype="f16",
                                             connectivity=8)
    reloaded.load(restored.data)
    query = unit_vectors(1, 7)[0]
    assert (reloaded.search(query, 10).keys.tolist()
            == index.search(query, 10).keys.tolist())  # type: ignore[attr-defined]


@pytest.mark.parametrize("keep", [0, 7, 100, 64 + 40 + 5, -1])
def test_a_truncated_file_is_refused_as_truncated(tmp_path: Path, keep: int) -> None:
    path, _ = written_by_usearch(tmp_path, "f16")
    serialised = read(path)
    head = serialised[:keep] if keep >= 0 else serialised[:keep - 1]
    with pytest.raises(FormatError, match="truncated"):
        usearch_format.parse(head)


def test_trailing_bytes_are_refused(tmp_path: Path) -> None:
    path, _ = written_by_usearch(tmp_path, "f16")
    with pytest.raises(FormatError, match="trailing bytes"):
        usearch_format.parse(np.concatenate([read(path), np.zeros(3, np.uint8)]))


def test_a_truncated_lean_file_is_refused(tmp_path: Path) -> None:
    path, _ = written_by_usearch(tmp_path, "f16")
    serialised = read(path)
    layout = usearch_format.parse(serialised)
    kept = np.arange(0, ROWS, 50)
    lean = np.concatenate([np.ascontiguousarray(piece).view(np.uint8).ravel()
                           for piece in usearch_format.lean_pieces(serialised, layout, kept)])
    for cut in (4, 8 + 4 * len(kept) - 1, len(lean) - 10):
        with pytest.raises(FormatError, match="truncated"):
            usearch_format.unlean(lean[:cut], len(kept))


def offset_of_head(serialised: np.ndarray) -> int:
    rows, width = (int(n) for n in serialised[:8].view("<u4"))
    return 8 + rows * width


@pytest.mark.parametrize(("damage", "message"), [
    ("magic", "not a usearch index"),
    ("version", r"written by usearch 3\.\d+\.\d+; this reader knows usearch>=2\.26,<3"),
    ("size", "damaged graph header"),
    ("node level", "damaged nodes"),
])
def test_a_corrupt_or_foreign_file_is_refused_naming_what_is_wrong(
        tmp_path: Path, damage: str, message: str) -> None:
    path, _ = written_by_usearch(tmp_path, "f16")
    corrupt = read(path).copy()
    head = offset_of_head(corrupt)
    graph_header = head + usearch_format.HEAD
    if damage == "magic":
        corrupt[head:head + 7] = np.frombuffer(b"qdrant!", np.uint8)
    elif damage == "version":
        corrupt[head + 7:head + 9] = np.array([3], "<u2").view(np.uint8)
    elif damage == "size":
        corrupt[graph_header:graph_header + 8] = np.array([ROWS + 1], "<u8").view(np.uint8)
    else:
        first_node = graph_header + usearch_format.GRAPH_HEAD + 2 * ROWS
        corrupt[first_node + 8:first_node + 10] = np.array([0x7FF], "<i2").view(np.uint8)
    with pytest.raises(FormatError, match=message):
        usearch_format.parse(corrupt)
