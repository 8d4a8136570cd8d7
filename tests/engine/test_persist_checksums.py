"""Checksums of saved index files (persist.py): damage that keeps the size is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcpkit.engine.indexes.persist import DamagedFile, file_checksum, verify_file


@pytest.mark.parametrize("algorithm", ["crc32", "xxh3_64"])
def test_a_flipped_byte_fails_verification(tmp_path: Path, algorithm: str) -> None:
    """xxh3_64 for new saves; crc32 still read, from saves made when xxhash was optional."""
    path = tmp_path / "arrays.npz"
    path.write_bytes(bytes(range(256)) * 40_000)  # more than one 4 MiB read
    recorded = file_checksum(path, algorithm)
    assert recorded.startswith(f"{algorithm}:")
    verify_file(path, recorded)
    data = bytearray(path.read_bytes())
    data[5_000_000] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFile, match="mismatch"):
        verify_file(path, recorded)


def test_a_file_without_a_recorded_checksum_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npz"
    path.write_bytes(b"x")
    with pytest.raises(DamagedFile):
        verify_file(path, None)
    with pytest.raises(DamagedFile):
        verify_file(path, "md4:00")


def test_new_saves_use_xxh3(tmp_path: Path) -> None:
    path = tmp_path / "arrays.npz"
    path.write_bytes(b"rows")
    assert file_checksum(path).startswith("xxh3_64:")
