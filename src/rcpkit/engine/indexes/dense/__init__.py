"""Dense vector index for dense recall (§3.1, §7.7): exact search, HNSW beyond a size.

Vectors are keyed by the store's integer row ids (non-negative int64, never reused). Up to
``exact_threshold`` rows every search is exact (:mod:`.exact`): an int8 first pass over the
rows (:mod:`.quantised`) proves which rows cannot reach the top k, and the others are scored
from the float32 matrix. Beyond it a usearch HNSW graph (cosine, f16, bf16 or int8;
:mod:`.hnsw`) proposes candidates that are re-scored exactly the same way, so reported scores
are always exact cosines and ties always go to the smaller row id. :mod:`.index` holds the
:class:`DenseIndex` that publishes views, runs the background build and saves;
:mod:`.usearch_format` is the one module that knows usearch's bytes (and imports usearch).

**Determinism (§7.7.1).** Graph results depend on which graph is published, and that changes
whenever a background build finishes, so ``exact=True`` bypasses the graph: results are then a
pure function of the query and the stored rows. The engine asks for it when a request carries a
``seed`` or is pinned to a snapshot (``indexVersion`` or a §10 cursor), so identical
``(query, params, seed, indexVersion)`` give identical results.
"""

from rcpkit.engine.indexes.dense.index import EXPANSION_SEARCH, DenseIndex, StoredVectors

__all__ = ["EXPANSION_SEARCH", "DenseIndex", "StoredVectors"]
