"""A content-hash-keyed embedding cache: a text is embedded once per model, ever.

Re-indexing the same text (a re-add after a delete, an index rebuilt with another chunking, the
sentence vectors of :mod:`rcpkit.engine.sentences`) costs a hash and a lookup instead of a
forward pass. Keys are SHA-256 of ``kind`` and text, scoped by the embedder's ``identity``
(§7.3 ``embed.identity``): a vector is only ever served for the model that made it. The cache is
one SQLite file (WAL, so several processes may share it); a cache that cannot be written is a
cache miss, never an error.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rcpkit.engine.models.embedding import Embedder
from rcpkit.files import private_dir, private_file

__all__ = ["CachedEmbedder"]

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    identity TEXT NOT NULL, key BLOB NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (identity, key)) WITHOUT ROWID
"""
_LOOKUP_BATCH = 500  # stays under SQLite's bound-parameter limit


class CachedEmbedder:
    """An :class:`~rcpkit.engine.models.embedding.Embedder` that remembers ``embed`` results in
    ``path``; token matrices (§7.5) are passed through uncached."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self.inner = inner
        self.path = Path(path)
        private_file(private_dir(self.path.parent) / self.path.name)
        self._connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute(_SCHEMA)
        self._connection.commit()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        keys = [hashlib.sha256(f"{kind}\0{text}".encode()).digest() for text in texts]
        found = self._lookup(sorted(set(keys)))
        missing = list(dict.fromkeys(key for key in keys if key not in found))
        self.hits += len(keys) - sum(1 for key in keys if key not in found)
        self.misses += len(missing)
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            fresh = np.asarray(self.inner.embed([text_of[key] for key in missing], kind),
                               dtype=np.float32)
            new = dict(zip(missing, fresh, strict=True))
            self._store(new)
            found.update(new)
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = found[key]
        return out

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        return self.inner.token_embeddings(texts, kind)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _lookup(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for start in range(0, len(keys), _LOOKUP_BATCH):
                batch = keys[start:start + _LOOKUP_BATCH]
                marks = ",".join("?" * len(batch))
                rows = self._connection.execute(
                    f"SELECT key, vector FROM vectors WHERE identity = ? AND key IN ({marks})",
                    [self.identity, *batch])
                for key, blob in rows:
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if len(vector) == self.dimension:
                        found[key] = vector
        return found

    def _store(self, vectors: dict[bytes, np.ndarray]) -> None:
        rows = [(self.identity, key, np.ascontiguousarray(vector, np.float32).tobytes())
                for key, vector in vectors.items()]
        with self._lock:
            try:
                self._connection.executemany(
                    "INSERT OR REPLACE INTO vectors (identity, key, vector) VALUES (?, ?, ?)",
                    rows)
                self._connection.commit()
            except sqlite3.Error as exc:  # a full disk or a locked file must not fail a write
                self._connection.rollback()
                logger.warning("embedding cache %s not updated: %s", self.path, exc)
