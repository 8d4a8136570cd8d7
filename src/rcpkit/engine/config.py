"""Engine configuration: one frozen dataclass, loadable from TOML or JSON.

Every knob the engine honours lives here so the CLI can layer flags over a
file with :meth:`EngineConfig.with_overrides`, and the protocol layer can
advertise honest limits (``retrieve.maxK`` §6.1, ``embed.batchLimit`` §15.5).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rcpkit.engine.errors import ConfigError
from rcpkit.engine.types import TRUST_LEVELS
from rcpkit.files import atomic_write, private_dir

__all__ = ["CONFIG_FILE", "DSN_ENV", "BackendChoice", "EmbedderChoice", "EngineConfig",
           "RecallChoice", "load_config", "record_backend"]

CONFIG_FILE = "rcpkit.toml"
"""Per-data-directory engine configuration, read by :func:`load_config`."""
DSN_ENV = "RCPKIT_DSN"
"""Environment variable supplying ``dsn`` when neither the options nor the file set it."""
MEMORY_MAX_INLINE_BYTES = 1_000_000
MEMORY_RETENTION_SECONDS = 30 * 86_400.0
MEMORY_MAX_COUNT = 1000
GRAPH_DTYPES = ("f16", "bf16", "i8")
"""The values of ``dense_graph_dtype`` (see there)."""

EmbedderChoice = Literal["minilm", "hashing", "onnx"]
BackendChoice = Literal["sqlite", "postgres"]
RecallChoice = Literal["database", "memory"]


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine is and how far it may be pushed.

    ``field_types`` pins the §8 filter type of metadata keys (otherwise the
    first value seen decides). Snapshots (§7.7.1) are kept while they are one of
    the last ``retain_versions`` versions *or* were superseded less than
    ``retain_seconds`` ago. ``poison_threshold`` is how many ``poisonSuspected``
    feedback signals (§7.16, §15.3) demote a document by ``poison_penalty``; a source with
    ``poison_source_threshold`` demoted documents (or its own entry in
    ``poison_source_thresholds``, by label; 0: never) is quarantined (engine.feedback; in a
    ``.toml`` file, a ``[poison]`` table sets them without the prefix). Dense search is
    exact up to ``dense_exact_threshold`` rows, HNSW beyond. The ``colbert`` rerank (§7.6)
    reads the first ``rerank_passage_tokens`` tokens of each passage (None: the model's limit)
    and caches passage token matrices up to ``rerank_cache_bytes``. ``backend`` picks the system
    of record: embedded SQLite in ``data_dir``, or PostgreSQL at ``dsn``. On PostgreSQL,
    ``pg_recall`` says where recall runs: ``"database"`` (pgvector HNSW and BM25 in SQL: no
    in-memory index to build on open or to catch up; docs/postgres.md) or ``"memory"`` (derived
    indexes in ``data_dir``, as on SQLite).

    Bookkeeping retention: an ``idempotencyKey`` (§7.10) replays its first reply for
    ``idempotency_retention_seconds`` and is new again afterwards. The spec sets no lifetime;
    a key only has to outlive the retries of one write after a transport failure (§13.1,
    §12.2), so a day is ample. Write-log rows are dropped once the saved index state covers
    them and they are older than ``write_log_retention_seconds`` (never less than
    ``retain_seconds``, whose time rule reads the log); a process lagging further reloads.
    """

    data_dir: Path = Path("rcpkit-data")
    backend: BackendChoice = "sqlite"
    dsn: str | None = None
    pg_recall: RecallChoice = "database"
    embedder: EmbedderChoice = "minilm"
    hashing_dimension: int = 64
    onnx_model_path: Path | None = None
    onnx_tokenizer_path: Path | None = None
    chunk_max_chars: int = 1200
    chunk_overlap_chars: int = 150
    dense_exact_threshold: int = 50_000
    dense_build_threads: int = 0
    """Threads building the HNSW graph in the background (see ``DenseIndex``); 0 is one per
    core this process may use, up to 8."""
    dense_graph_dtype: str = "f16"
    """How the HNSW graph (past ``dense_exact_threshold`` rows) keeps its copy of the vectors
    in memory (the saved graph holds links only): ``"f16"``; ``"bf16"`` (the same size, a
    faster kernel where the CPU has AVX-512 BF16) with twice the candidates re-scored exactly;
    or ``"i8"`` (int8 scalar quantisation: 0.4 KB a 384-d chunk less memory) with four times
    the candidates re-scored. Changing it rebuilds the graph in the background on the next
    open."""
    dense_expansion_search: int = 128
    """HNSW ef_search: how wide a graph query looks (a query for k results looks at least 3k
    wide). Higher finds more of the exact top k for more time a query; 128 gives recall@10
    0.997 on MiniLM vectors of real text at 100k chunks. Takes effect on the next open."""
    dense_save_vectors: bool = False
    """Whether a saved dense index keeps its own float32 copy of the vectors, memory-mapped
    when it is loaded (the fastest open of a large store, at 1.5 KB a 384-d chunk more on
    disk), instead of reading them from the record (which holds them as float16 in SQLite)."""
    max_k: int = 200
    default_candidate_k: int = 100
    max_documents_per_add: int = 1000
    max_text_bytes: int = 1_000_000
    max_batch_inputs: int = 256
    field_types: Mapping[str, str] = field(default_factory=dict)
    retain_versions: int = 64
    retain_seconds: float = 600.0
    idempotency_retention_seconds: float = 86_400.0
    write_log_retention_seconds: float = 3_600.0
    session_ttl_seconds: int = 1800
    cross_encoder_model_path: Path | None = None
    cross_encoder_tokenizer_path: Path | None = None
    poison_threshold: int = 3
    poison_penalty: float = 0.5
    poison_source_threshold: int = 0
    poison_source_thresholds: Mapping[str, int] = field(default_factory=dict)
    index_save_every: int = 200
    rerank_passage_tokens: int | None = 128
    default_rerank_top_n: int = 20
    """Candidates reranked when a request names a reranker without ``topN`` (at least k):
    reranking all of candidateK costs 5× more for no measured gain (docs/benchmarks.md)."""
    rerank_cache_bytes: int = 128 * 2**20
    read_only: bool = False
    """Serve without ``index/add`` and ``index/delete`` (the ``index`` capability is not
    advertised, §7.10); ``rcpkit index`` on the data directory still writes."""
    recency_weight: float = 0.5
    """How much of a hit's relevance §7.7 ``recency`` may take away: the score above the
    candidates' lowest is scaled by ``1 - w + w * 0.5 ** (age / halfLifeDays)``, so an old
    document keeps at least ``1 - w`` of its relevance."""
    query_cache_size: int = 1024
    """Query vectors kept by query text: a repeated query (a user paging, retrying, or the
    same question from many users) skips the embedding model, the costliest per-query step."""
    record_cache_size: int = 4096
    """Chunk records (and vectors) kept by row id for the hits of recent retrieves: a row
    never changes once written, so a hit returned again costs no store read (~15 µs a row
    in SQLite: a join and three JSON decodes)."""
    embedding_cache: Path | None = None
    """A content-hash-keyed vector cache file (:mod:`rcpkit.engine.models.embedcache`): a text is
    embedded once, and re-adds, rebuilds and other data directories sharing the file reuse it."""
    default_fusion: str = "convex"
    """Hybrid fusion when a request names none (§7.7 ``fusion.method``)."""
    default_fusion_alpha: float = 0.82
    """Dense weight of the normalised fusions when a request sets no ``alpha``/``weights``."""
    lexical_title_repeat: int = 2
    """How many times BM25 counts a chunk's title, its first paragraph when that is at most 300
    characters and followed by a blank line (``rcpkit eval`` sends BEIR titles so, Markdown
    puts them so): 2 lifts SciFact-train and changes nothing on untitled texts
    (docs/benchmarks.md). Changing it rebuilds the indexes on the next open. Not used by
    PostgreSQL ``pg_recall = "database"``."""
    fusion_complete_scores: bool = True
    """Under ``convex`` fusion, each half of a hybrid search also scores the other half's
    candidates (their cosine, their BM25), so a chunk only one half ranked in its top
    ``candidateK`` is fused on both scores instead of on one. Measured on the development
    collections (docs/benchmarks.md): better nDCG@10 on every one and Recall@100 back above
    RRF's. Not applied by PostgreSQL ``pg_recall = "database"``."""
    llm_url: str | None = None
    """API base of an OpenAI-compatible chat-completions endpoint
    (:mod:`rcpkit.engine.knowledge.llm`); with ``llm_model`` it turns on generated ``hyde``
    passages and ``global`` summaries."""
    llm_model: str | None = None
    llm_key: str | None = None
    llm_timeout_seconds: float = 30.0
    llm_retries: int = 2
    dense_sentence_windows: bool = False
    """Keep sentence-window vectors beside each chunk's whole-text vector, so dense recall
    reads past the encoder's 256 tokens (:mod:`rcpkit.engine.indexes.windows`). Off by default: it
    pays on long chunks only (docs/benchmarks.md), costs embedding at ingest and vectors in
    memory there, and every process catching up on another's writes embeds the windows
    again unless they share an ``embedding_cache``. Turning it on re-embeds the windows of
    the stored chunks on the next open. Not used by PostgreSQL ``pg_recall = "database"``."""
    dense_window_mix: float = 0.5
    """How much of a chunk's best window cosine above its whole-text cosine counts."""
    memory_max_inline_bytes: int = MEMORY_MAX_INLINE_BYTES
    """UTF-8 bytes of inline documents one memory (§7.17) keeps, an update's included: the
    bound on one ``memory/build``'s concept extraction (1-3 s of CPU a megabyte,
    docs/benchmarks.md); past it the build is refused as invalid input naming ``documents``."""
    memory_retention_seconds: float = MEMORY_RETENTION_SECONDS
    """A memory is forgotten this long after its last build (30 days)."""
    memory_max_count: int = MEMORY_MAX_COUNT
    """Memories kept: each build drops all but the most recently built ones."""
    trust: str = "untrusted"
    """The §7.7 ``trust.level`` of a document written without one, and the highest a writer
    may name unless the operator granted it more (a key's ``trust``, ``rcpkit index add
    --trust``): writers never label their own content above it (§15.2)."""

    def __post_init__(self) -> None:
        """Refuse a dense setting the index could not start with, naming the key (an open
        that got this far would fail in the background instead)."""
        if self.dense_graph_dtype not in GRAPH_DTYPES:
            raise ValueError(f"dense_graph_dtype must be one of {', '.join(GRAPH_DTYPES)}, "
                             f"not {self.dense_graph_dtype!r}")
        if self.trust not in TRUST_LEVELS:
            raise ValueError(f"trust must be one of {', '.join(TRUST_LEVELS)}, "
                             f"not {self.trust!r}")
        if self.lexical_title_repeat < 1:
            raise ValueError(f"lexical_title_repeat must be at least 1, "
                             f"not {self.lexical_title_repeat}")
        if self.dense_expansion_search < 1:
            raise ValueError(f"dense_expansion_search must be at least 1, "
                             f"not {self.dense_expansion_search}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EngineConfig:
        """Build from a plain mapping (unknown keys are an error, paths are coerced)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown engine config keys: {', '.join(unknown)}")
        return cls().with_overrides(**values)

    @classmethod
    def load(cls, path: str | Path) -> EngineConfig:
        """Read a ``.toml`` or ``.json`` file (an ``[engine]`` table is also accepted)."""
        source = Path(path)
        raw = source.read_bytes()
        data: dict[str, Any] = (tomllib.loads(raw.decode()) if source.suffix == ".toml"
                                else json.loads(raw))
        engine = dict(data.get("engine", data))
        poison = engine.pop("poison", None) or data.get("poison") or {}
        return cls.from_mapping({**engine, **{f"poison_{key}": value
                                              for key, value in poison.items()}})

    def with_overrides(self, **values: Any) -> EngineConfig:
        """A copy with ``values`` applied; ``None`` means "keep", paths become ``Path``."""
        path_fields = {"data_dir", "onnx_model_path", "onnx_tokenizer_path", "embedding_cache",
                       "cross_encoder_model_path", "cross_encoder_tokenizer_path"}
        changes: dict[str, Any] = {name: (Path(value) if name in path_fields else value)
                                   for name, value in values.items() if value is not None}
        for mapping in ("field_types", "poison_source_thresholds"):
            if mapping in changes:
                changes[mapping] = dict(changes[mapping])
        return dataclasses.replace(self, **changes)


def load_config(config_or_data_dir: EngineConfig | str | Path | None = None,
                **options: Any) -> EngineConfig:
    """The engine configuration: ``EngineConfig`` as given, or ``DIR/rcpkit.toml`` (when present)
    for a data directory; ``options`` (``None`` = keep) override either.

    A directory's settings (above all its embedder, which the stored vectors depend on) stay
    with the data, so every command on one directory agrees. The PostgreSQL DSN may also come
    from the ``RCPKIT_DSN`` environment variable."""
    if isinstance(config_or_data_dir, EngineConfig):
        base = config_or_data_dir
    else:
        data_dir = Path(config_or_data_dir if config_or_data_dir is not None
                        else EngineConfig().data_dir)
        config_file = data_dir / CONFIG_FILE
        try:
            base = EngineConfig.load(config_file) if config_file.is_file() else EngineConfig()
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{config_file}: {exc}") from exc
        base = base.with_overrides(data_dir=data_dir)
    try:
        config = base.with_overrides(**options)
    except TypeError as exc:
        raise ConfigError(f"unknown engine option: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return config if config.dsn else config.with_overrides(dsn=os.environ.get(DSN_ENV) or None)


def record_backend(data_dir: Path, backend: str, dsn: str | None) -> bool:
    """Write ``backend`` (and ``dsn`` when given) into ``DIR/rcpkit.toml`` unless it already
    names a backend, so later commands with ``--data DIR`` open the same system of record.
    Other settings are kept; the file is written atomically and private (0600: a DSN may hold
    a password). True when the file changed."""
    config_file = data_dir / CONFIG_FILE
    text = config_file.read_text(encoding="utf-8") if config_file.is_file() else ""
    parsed = tomllib.loads(text)
    settings = parsed.get("engine", parsed)
    if "backend" in settings:
        return False
    # JSON string escapes are valid TOML basic-string escapes.
    lines = [f"backend = {json.dumps(backend)}"]
    if dsn and "dsn" not in settings:
        lines.append(f"dsn = {json.dumps(dsn)}")
    existing = text.splitlines()
    at = next((number + 1 for number, line in enumerate(existing)
               if line.strip() == "[engine]"), 0) if "engine" in parsed else 0
    private_dir(data_dir)
    atomic_write(config_file, "\n".join([*existing[:at], *lines, *existing[at:]]) + "\n")
    return True
