"""Crash-safe saves of derived indexes: arrays in a fresh ``.npz``, then a JSON manifest naming
it replaced atomically — the commit point — then the arrays of earlier saves deleted. A crash
at any step leaves the previous save or the new one readable, never a mix. No pickle.

Every saved file is named in its manifest with a checksum (:func:`file_checksum`), verified
before it is read (:func:`verify_file`): damage that keeps a file's size and shape (zeroed
pages, reordered rows) is caught at open, and the engine rebuilds from the record instead
of answering from it. New saves use xxHash3 (several GB/s); CRC-32, which saves made
without the ``xxhash`` package used, is still verified. The manifest says which."""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from rcpkit.files import atomic_write, write_new

__all__ = ["DamagedFile", "bytes_checksum", "commit_manifest", "compact_ints", "file_checksum",
           "save_arrays", "verify_file"]

_CHUNK = 1 << 22


class DamagedFile(ValueError):
    """A saved file does not match the checksum its manifest recorded (or has none)."""


def file_checksum(path: Path, algorithm: str | None = None) -> str:
    """``"<algorithm>:<hex digest>"`` of the file's bytes, read in 4 MiB pieces."""
    with open(path, "rb") as handle:
        return _checksum(iter(lambda: handle.read(_CHUNK), b""), algorithm, path.name)


def bytes_checksum(data: Any, algorithm: str | None = None) -> str:
    """:func:`file_checksum` of bytes in memory (anything ``memoryview`` takes, contiguous)."""
    view = memoryview(data).cast("B")
    pieces = (view[start:start + _CHUNK] for start in range(0, len(view), _CHUNK))
    return _checksum(pieces, algorithm, "data")


def _checksum(pieces: Iterable[Any], algorithm: str | None, name: str) -> str:
    algorithm = algorithm or "xxh3_64"
    if algorithm == "xxh3_64":
        digest = xxhash.xxh3_64()
        for piece in pieces:
            digest.update(piece)
        return f"xxh3_64:{digest.hexdigest()}"
    if algorithm == "crc32":
        crc = 0
        for piece in pieces:
            crc = zlib.crc32(piece, crc)
        return f"crc32:{crc:08x}"
    raise DamagedFile(f"{name}: checksum algorithm {algorithm!r} is not available")


def verify_file(path: Path, expected: Any) -> None:
    """Raise :class:`DamagedFile` unless ``path`` has the recorded checksum ``expected``."""
    if not isinstance(expected, str) or ":" not in expected:
        raise DamagedFile(f"{path.name}: no checksum was recorded")
    actual = file_checksum(path, expected.partition(":")[0])
    if actual != expected:
        raise DamagedFile(f"{path.name}: checksum mismatch (damaged on disk)")


def compact_ints(array: np.ndarray) -> np.ndarray:
    """Non-negative integers in the narrowest unsigned type that holds them (row ids below
    2**32 take half the bytes of int64); loaders widen what they read with ``astype``."""
    if len(array) == 0 or array.min() < 0:
        return array
    return array.astype(np.min_scalar_type(int(array.max())))


def save_arrays(directory: Path, prefix: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Write ``arrays`` to a new ``<prefix>-<uuid>.npz`` in ``directory``, flushed to disk;
    return its file name (for the manifest)."""
    name = f"{prefix}-{uuid.uuid4().hex}.npz"
    write_new(directory / name, lambda stream: np.savez(stream, allow_pickle=False, **arrays))
    return name


def commit_manifest(directory: Path, manifest_name: str, manifest: Mapping[str, Any], *,
                    prefix: str, arrays: str) -> None:
    """Replace ``manifest_name`` atomically with ``manifest`` plus the ``checksum`` of
    ``arrays`` (the file it names), then delete every other ``<prefix>-*.npz``."""
    manifest = {**manifest, "checksum": file_checksum(directory / arrays)}
    atomic_write(directory / manifest_name, json.dumps(manifest, ensure_ascii=False))
    for stale in directory.glob(f"{prefix}-*.npz"):
        if stale.name != arrays:
            stale.unlink(missing_ok=True)
