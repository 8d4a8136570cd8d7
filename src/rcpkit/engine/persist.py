"""Crash-safe saves of derived indexes: arrays in a fresh ``.npz``, then a JSON manifest naming
it replaced atomically — the commit point — then the arrays of earlier saves deleted. A crash
at any step leaves the previous save or the new one readable, never a mix. No pickle."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["commit_manifest", "save_arrays"]


def save_arrays(directory: Path, prefix: str, arrays: Mapping[str, np.ndarray]) -> str:
    """Write ``arrays`` to a new ``<prefix>-<uuid>.npz`` in ``directory``, flushed to disk;
    return its file name (for the manifest)."""
    name = f"{prefix}-{uuid.uuid4().hex}.npz"
    with open(directory / name, "wb") as handle:
        np.savez(handle, allow_pickle=False, **arrays)
        handle.flush()
        os.fsync(handle.fileno())
    return name


def commit_manifest(directory: Path, manifest_name: str, manifest: Mapping[str, Any], *,
                    prefix: str, arrays: str) -> None:
    """Replace ``manifest_name`` atomically with ``manifest``, then delete every
    ``<prefix>-*.npz`` but ``arrays`` (the file it names)."""
    temporary = directory / f"{manifest_name}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, directory / manifest_name)
    for stale in directory.glob(f"{prefix}-*.npz"):
        if stale.name != arrays:
            stale.unlink(missing_ok=True)
