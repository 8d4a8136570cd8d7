"""What the engine leaves on disk: every file and directory of a saved index state fsynced
(a crash after the save cannot lose it), and the whole data root owner-only — directories
0700, files 0600, SQLite's own files included — whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from rcpkit.binding import bind
from rcpkit.engine import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest

DOCUMENTS = [DocumentIn(f"note {n} about owls, tides and the {n}th harbour", id=f"d{n}")
             for n in range(40)]


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> set[tuple[int, int]]:
    """(device, inode) of everything fsynced from now on: a renamed file keeps its inode."""
    seen: set[tuple[int, int]] = set()
    real = os.fsync

    def fsync(descriptor: int) -> None:
        status = os.fstat(descriptor)
        seen.add((status.st_dev, status.st_ino))
        real(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def _fill(data: Path) -> None:
    """An engine with an HNSW graph and saved vectors, so that every kind of file is saved."""
    engine = open_engine(data, embedder={"name": "hashing", "hashing_dimension": 64},
                         dense={"exact_threshold": 10, "save_vectors": True})
    try:
        bind(engine)  # opens the graph and memory stores beside the record
        engine.add(DOCUMENTS)
        assert engine.search(SearchRequest("owls", k=3)).hits
        assert engine.wait_for_indexes(60)
    finally:
        engine.close()


def test_every_file_and_directory_of_a_saved_index_state_is_fsynced(
        tmp_path: Path, fsynced: set[tuple[int, int]]) -> None:
    data = tmp_path / "data"
    _fill(data)
    indexes = data / "indexes"
    state = indexes / (indexes / "CURRENT").read_text()
    saved = [indexes, indexes / "CURRENT", state, *state.rglob("*")]
    assert any(path.suffix == ".usearch" for path in saved), saved
    missing = [str(path.relative_to(data)) for path in saved
               if (path.stat().st_dev, path.stat().st_ino) not in fsynced]
    assert missing == []


@pytest.mark.usefixtures("umask_022")
def test_a_data_root_is_owner_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _fill(data)
    modes = {str(path.relative_to(tmp_path)): stat.S_IMODE(path.stat().st_mode)
             for path in [data, *data.rglob("*")]}
    assert any(name.endswith("store.sqlite3") for name in modes), sorted(modes)
    wrong = {name: oct(mode) for name, mode in modes.items()
             if mode != (0o700 if (tmp_path / name).is_dir() else 0o600)}
    assert wrong == {}
