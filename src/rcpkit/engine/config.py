"""Engine configuration: frozen sections, one per table of a data directory's ``rcpkit.toml``.

``[store]``, ``[embedder]``, ``[chunking]``, ``[dense]``, ``[lexical]``, ``[retrieve]``,
``[rerank]``, ``[requests]``, ``[index]``, ``[retention]``, ``[poison]``, ``[llm]`` and
``[memory]`` each build one section (:class:`StoreConfig`, …), which checks its own values
when it is built and names the key it refuses (``[dense] graph_dtype must be one of …``);
``[field_types]`` pins the §8 filter type of metadata keys. Files written before the
sections (every key at the top level or in an ``[engine]`` table, ``[poison]`` as now) still
load: each old name is read as the key it became (``LEGACY_KEYS``), and an error names the
key as the file wrote it. The CLI layers its flags over a file with
:meth:`EngineConfig.with_overrides` (``store={"backend": "postgres"}``), and the protocol layer
advertises honest limits from ``[requests]`` (``retrieve.maxK`` §6.1, ``embed.batchLimit``
§15.5).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from rcpkit.engine.errors import ConfigError
from rcpkit.engine.types import TRUST_LEVELS
from rcpkit.files import atomic_write, private_dir

__all__ = ["CONFIG_FILE", "DSN_ENV", "LEGACY_KEYS", "BackendChoice", "ChunkingConfig",
           "DenseConfig", "EmbedderChoice", "EmbedderConfig", "EngineConfig", "IndexConfig",
           "LexicalConfig", "LlmConfig", "MemoryConfig", "PoisonConfig", "RecallChoice",
           "RequestsConfig", "RerankConfig", "RetentionConfig", "RetrieveConfig",
           "SettingError", "StoreConfig", "load_config", "record_backend", "settings_by_table"]

CONFIG_FILE = "rcpkit.toml"
"""Per-data-directory engine configuration, read by :func:`load_config`."""
DSN_ENV = "RCPKIT_DSN"
"""Environment variable supplying ``[store] dsn`` when neither the options nor the file set it."""
MEMORY_MAX_INLINE_BYTES = 1_000_000
MEMORY_RETENTION_SECONDS = 30 * 86_400.0
MEMORY_MAX_COUNT = 1000
GRAPH_DTYPES = ("f16", "bf16", "i8")
"""The values of ``[dense] graph_dtype`` (see there)."""

EmbedderChoice = Literal["minilm", "hashing", "onnx"]
BackendChoice = Literal["sqlite", "postgres"]
RecallChoice = Literal["database", "memory"]


class SettingError(ValueError):
    """A setting the engine cannot run with: ``[table] key`` and what is wrong with it."""

    def __init__(self, table: str, key: str, problem: str) -> None:
        super().__init__(f"[{table}] {key} {problem}")
        self.table, self.key, self.problem = table, key, problem


@dataclass(frozen=True, slots=True)
class _Section:
    """One table of ``rcpkit.toml``: each value checked against its field's type (paths
    made :class:`~pathlib.Path`, integers taken for numbers) and then by :meth:`_check`."""

    TABLE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for name, hint in _hints(type(self)).items():
            value = getattr(self, name)
            accepted, converted = _conform(value, hint)
            if not accepted:
                raise SettingError(self.TABLE, name, f"must be {_describe(hint)}, not {value!r}")
            if converted is not value:
                object.__setattr__(self, name, converted)
        self._check()

    def _check(self) -> None:
        """Rules beyond the type (a range, a pair of settings); none by default."""

    def _at_least(self, name: str, low: float) -> None:
        value = getattr(self, name)
        if value < low:
            raise SettingError(self.TABLE, name, f"must be at least {low:g}, not {value}")


@dataclass(frozen=True, slots=True)
class StoreConfig(_Section):
    """``[store]``: the system of record, embedded SQLite in the data directory or
    PostgreSQL at ``dsn``. On PostgreSQL, ``pg_recall`` says where recall runs:
    ``"database"`` (pgvector HNSW and BM25 in SQL: no in-memory index to build on open or to
    catch up; docs/postgres.md) or ``"memory"`` (derived indexes in the data directory, as
    on SQLite). A missing ``dsn`` is refused when the store is opened: the file may leave it
    to ``RCPKIT_DSN`` or ``--dsn`` (a password stays out of it)."""

    TABLE: ClassVar[str] = "store"
    backend: BackendChoice = "sqlite"
    dsn: str | None = None
    pg_recall: RecallChoice = "database"


@dataclass(frozen=True, slots=True)
class EmbedderConfig(_Section):
    """``[embedder]``: the model that turns text into vectors (the stored vectors depend on
    it, so it stays with the data). ``cache`` is a content-hash-keyed vector cache file
    (:mod:`rcpkit.engine.models.embedcache`): a text is embedded once, and re-adds, rebuilds
    and other data directories sharing the file reuse it. ``query_cache_size`` query vectors
    are kept by query text: a repeated query (a user paging, retrying, or the same question
    from many users) skips the model, the costliest per-query step."""

    TABLE: ClassVar[str] = "embedder"
    name: EmbedderChoice = "minilm"
    hashing_dimension: int = 64
    onnx_model_path: Path | None = None
    onnx_tokenizer_path: Path | None = None
    cache: Path | None = None
    query_cache_size: int = 1024

    def _check(self) -> None:
        self._at_least("hashing_dimension", 1)
        if self.name == "onnx" and (self.onnx_model_path is None
                                    or self.onnx_tokenizer_path is None):
            raise SettingError(self.TABLE, "onnx_model_path", "missing: embedder 'onnx' needs "
                               "onnx_model_path and onnx_tokenizer_path")


@dataclass(frozen=True, slots=True)
class ChunkingConfig(_Section):
    """``[chunking]``: how ``index/add`` cuts documents into chunks."""

    TABLE: ClassVar[str] = "chunking"
    max_chars: int = 1200
    overlap_chars: int = 150

    def _check(self) -> None:
        self._at_least("max_chars", 1)
        self._at_least("overlap_chars", 0)


@dataclass(frozen=True, slots=True)
class DenseConfig(_Section):
    """``[dense]``: dense search is exact up to ``exact_threshold`` rows, HNSW beyond
    (:mod:`rcpkit.engine.indexes.dense`)."""

    TABLE: ClassVar[str] = "dense"
    exact_threshold: int = 50_000
    build_threads: int = 0
    """Threads building the HNSW graph in the background; 0 is one per core this process may
    use, up to 8."""
    graph_dtype: str = "f16"
    """How the HNSW graph keeps its copy of the vectors in memory (the saved graph holds
    links only): ``"f16"``; ``"bf16"`` (the same size, a faster kernel where the CPU has
    AVX-512 BF16) with twice the candidates re-scored exactly; or ``"i8"`` (int8 scalar
    quantisation: 0.4 KB a 384-d chunk less memory) with four times the candidates
    re-scored. Changing it rebuilds the graph in the background on the next open."""
    expansion_search: int = 128
    """HNSW ef_search: how wide a graph query looks (a query for k results looks at least 3k
    wide). Higher finds more of the exact top k for more time a query; 128 gives recall@10
    0.997 on MiniLM vectors of real text at 100k chunks. Takes effect on the next open."""
    save_vectors: bool = False
    """Whether a saved dense index keeps its own float32 copy of the vectors, memory-mapped
    when it is loaded (the fastest open of a large store, at 1.5 KB a 384-d chunk more on
    disk), instead of reading them from the record (which holds them as float16 in SQLite)."""
    sentence_windows: bool = False
    """Keep sentence-window vectors beside each chunk's whole-text vector, so dense recall
    reads past the encoder's 256 tokens (:mod:`rcpkit.engine.indexes.windows`). Off by
    default: it pays on long chunks only (docs/benchmarks.md), costs embedding at ingest and
    vectors in memory there, and every process catching up on another's writes embeds the
    windows again unless they share an ``[embedder] cache``. Turning it on re-embeds the
    windows of the stored chunks on the next open. Not used by PostgreSQL
    ``pg_recall = "database"``."""
    window_mix: float = 0.5
    """How much of a chunk's best window cosine above its whole-text cosine counts."""

    def _check(self) -> None:
        if self.graph_dtype not in GRAPH_DTYPES:
            raise SettingError(self.TABLE, "graph_dtype", f"must be one of "
                               f"{', '.join(GRAPH_DTYPES)}, not {self.graph_dtype!r}")
        self._at_least("expansion_search", 1)
        self._at_least("build_threads", 0)


@dataclass(frozen=True, slots=True)
class LexicalConfig(_Section):
    """``[lexical]``: BM25. ``title_repeat`` is how many times it counts a chunk's title, its
    first paragraph when that is at most 300 characters and followed by a blank line
    (``rcpkit eval`` sends BEIR titles so, Markdown puts them so): 2 lifts SciFact-train and
    changes nothing on untitled texts (docs/benchmarks.md). Changing it rebuilds the indexes
    on the next open. Not used by PostgreSQL ``pg_recall = "database"``."""

    TABLE: ClassVar[str] = "lexical"
    title_repeat: int = 2
    idf_exponent: float = 1.4
    """A query term weighs its idf to this power (1 is Lucene's BM25): above 1 the rarest
    matching terms lead, which lifted every development collection (docs/benchmarks.md). Read
    at query time, by the embedded index and PostgreSQL's in-SQL BM25: no rebuild."""

    def _check(self) -> None:
        self._at_least("title_repeat", 1)
        if not self.idf_exponent > 0:
            raise SettingError(self.TABLE, "idf_exponent",
                               f"must be positive, not {self.idf_exponent}")


@dataclass(frozen=True, slots=True)
class RetrieveConfig(_Section):
    """``[retrieve]``: defaults of §7.7 ``retrieve``."""

    TABLE: ClassVar[str] = "retrieve"
    fusion: str = "convex"
    """Hybrid fusion when a request names none (§7.7 ``fusion.method``)."""
    fusion_alpha: float = 0.82
    """Dense weight of the normalised fusions when a request sets no ``alpha``/``weights``."""
    fusion_complete_scores: bool = True
    """Under ``convex`` fusion, each half of a hybrid search also scores the other half's
    candidates (their cosine, their BM25), so a chunk only one half ranked in its top
    ``candidateK`` is fused on both scores instead of on one. Measured on the development
    collections (docs/benchmarks.md): better nDCG@10 on every one and Recall@100 back above
    RRF's. Not applied by PostgreSQL ``pg_recall = "database"``."""
    recency_weight: float = 0.5
    """How much of a hit's relevance §7.7 ``recency`` may take away: the score above the
    candidates' lowest is scaled by ``1 - w + w * 0.5 ** (age / halfLifeDays)``, so an old
    document keeps at least ``1 - w`` of its relevance."""
    record_cache_size: int = 4096
    """Chunk records (and vectors) kept by row id for the hits of recent retrieves: a row
    never changes once written, so a hit returned again costs no store read (~15 µs a row
    in SQLite: a join and three JSON decodes)."""


@dataclass(frozen=True, slots=True)
class RerankConfig(_Section):
    """``[rerank]`` (§7.6): the ``colbert`` rerank reads the first ``passage_tokens`` tokens
    of each passage (None: the model's limit) and caches passage token matrices up to
    ``cache_bytes``; a cross-encoder is offered when both its paths are set."""

    TABLE: ClassVar[str] = "rerank"
    passage_tokens: int | None = 128
    default_top_n: int = 20
    """Candidates reranked when a request names a reranker without ``topN`` (at least k):
    reranking all of candidateK costs 5× more for no measured gain (docs/benchmarks.md)."""
    cache_bytes: int = 128 * 2**20
    cross_encoder_model_path: Path | None = None
    cross_encoder_tokenizer_path: Path | None = None


@dataclass(frozen=True, slots=True)
class RequestsConfig(_Section):
    """``[requests]``: how far one request may push the engine (§15.5), advertised as the
    capabilities' limits (§6.1)."""

    TABLE: ClassVar[str] = "requests"
    max_k: int = 200
    default_candidate_k: int = 100
    max_documents_per_add: int = 1000
    max_text_bytes: int = 1_000_000
    max_batch_inputs: int = 256

    def _check(self) -> None:
        for name in ("max_k", "default_candidate_k", "max_documents_per_add", "max_text_bytes",
                     "max_batch_inputs"):
            self._at_least(name, 1)


@dataclass(frozen=True, slots=True)
class IndexConfig(_Section):
    """``[index]`` (§7.10): who may write and how often the derived indexes are saved.
    ``read_only`` serves without ``index/add`` and ``index/delete`` (the ``index``
    capability is not advertised); ``rcpkit index`` on the data directory still writes.
    ``trust`` is the §7.7 ``trust.level`` of a document written without one, and the highest
    a writer may name unless the operator granted it more (a key's ``trust``, ``rcpkit index
    add --trust``): writers never label their own content above it (§15.2)."""

    TABLE: ClassVar[str] = "index"
    read_only: bool = False
    trust: str = "untrusted"
    save_every: int = 200

    def _check(self) -> None:
        if self.trust not in TRUST_LEVELS:
            raise SettingError(self.TABLE, "trust", f"must be one of {', '.join(TRUST_LEVELS)}, "
                               f"not {self.trust!r}")
        self._at_least("save_every", 1)


@dataclass(frozen=True, slots=True)
class RetentionConfig(_Section):
    """``[retention]``: snapshots (§7.7.1) are kept while they are one of the last
    ``versions`` versions *or* were superseded less than ``seconds`` ago. An
    ``idempotencyKey`` (§7.10) replays its first reply for ``idempotency_seconds`` and is new
    again afterwards: the spec sets no lifetime; a key only has to outlive the retries of one
    write after a transport failure (§13.1, §12.2), so a day is ample. Write-log rows are
    dropped once the saved index state covers them and they are older than
    ``write_log_seconds`` (never less than ``seconds``, whose time rule reads the log); a
    process lagging further reloads. Sessions expire ``session_ttl_seconds`` after their
    last use."""

    TABLE: ClassVar[str] = "retention"
    versions: int = 64
    seconds: float = 600.0
    idempotency_seconds: float = 86_400.0
    write_log_seconds: float = 3_600.0
    session_ttl_seconds: int = 1800


@dataclass(frozen=True, slots=True)
class PoisonConfig(_Section):
    """``[poison]`` (§7.16, §15.3): ``threshold`` ``poisonSuspected`` feedback signals demote a
    document by ``penalty``; a source with ``source_threshold`` demoted documents (or its own
    entry in ``source_thresholds``, by label; 0: never) is quarantined (engine.feedback)."""

    TABLE: ClassVar[str] = "poison"
    threshold: int = 3
    penalty: float = 0.5
    source_threshold: int = 0
    source_thresholds: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LlmConfig(_Section):
    """``[llm]``: an OpenAI-compatible chat-completions endpoint
    (:mod:`rcpkit.engine.knowledge.llm`);
    ``url`` with ``model`` turns on generated ``hyde`` passages and ``global`` summaries."""

    TABLE: ClassVar[str] = "llm"
    url: str | None = None
    model: str | None = None
    key: str | None = None
    timeout_seconds: float = 30.0
    retries: int = 2


@dataclass(frozen=True, slots=True)
class MemoryConfig(_Section):
    """``[memory]`` (§7.17): ``max_inline_bytes`` UTF-8 bytes of inline documents one memory
    keeps, an update's included: the bound on one ``memory/build``'s concept extraction
    (1-3 s of CPU a megabyte, docs/benchmarks.md); past it the build is refused as invalid
    input naming ``documents``. A memory is forgotten ``retention_seconds`` after its last
    build (30 days); each build drops all but the ``max_count`` most recently built ones."""

    TABLE: ClassVar[str] = "memory"
    max_inline_bytes: int = MEMORY_MAX_INLINE_BYTES
    retention_seconds: float = MEMORY_RETENTION_SECONDS
    max_count: int = MEMORY_MAX_COUNT


SECTIONS: dict[str, type[_Section]] = {section.TABLE: section for section in (
    StoreConfig, EmbedderConfig, ChunkingConfig, DenseConfig, LexicalConfig, RetrieveConfig,
    RerankConfig, RequestsConfig, IndexConfig, RetentionConfig, PoisonConfig, LlmConfig,
    MemoryConfig)}

LEGACY_KEYS: dict[str, tuple[str, str]] = {
    "backend": ("store", "backend"), "dsn": ("store", "dsn"),
    "pg_recall": ("store", "pg_recall"),
    "embedder": ("embedder", "name"), "hashing_dimension": ("embedder", "hashing_dimension"),
    "onnx_model_path": ("embedder", "onnx_model_path"),
    "onnx_tokenizer_path": ("embedder", "onnx_tokenizer_path"),
    "embedding_cache": ("embedder", "cache"), "query_cache_size": ("embedder", "query_cache_size"),
    "chunk_max_chars": ("chunking", "max_chars"),
    "chunk_overlap_chars": ("chunking", "overlap_chars"),
    "dense_exact_threshold": ("dense", "exact_threshold"),
    "dense_build_threads": ("dense", "build_threads"),
    "dense_graph_dtype": ("dense", "graph_dtype"),
    "dense_expansion_search": ("dense", "expansion_search"),
    "dense_save_vectors": ("dense", "save_vectors"),
    "dense_sentence_windows": ("dense", "sentence_windows"),
    "dense_window_mix": ("dense", "window_mix"),
    "lexical_title_repeat": ("lexical", "title_repeat"),
    "default_fusion": ("retrieve", "fusion"), "default_fusion_alpha": ("retrieve", "fusion_alpha"),
    "fusion_complete_scores": ("retrieve", "fusion_complete_scores"),
    "recency_weight": ("retrieve", "recency_weight"),
    "record_cache_size": ("retrieve", "record_cache_size"),
    "rerank_passage_tokens": ("rerank", "passage_tokens"),
    "default_rerank_top_n": ("rerank", "default_top_n"),
    "rerank_cache_bytes": ("rerank", "cache_bytes"),
    "cross_encoder_model_path": ("rerank", "cross_encoder_model_path"),
    "cross_encoder_tokenizer_path": ("rerank", "cross_encoder_tokenizer_path"),
    "max_k": ("requests", "max_k"), "default_candidate_k": ("requests", "default_candidate_k"),
    "max_documents_per_add": ("requests", "max_documents_per_add"),
    "max_text_bytes": ("requests", "max_text_bytes"),
    "max_batch_inputs": ("requests", "max_batch_inputs"),
    "read_only": ("index", "read_only"), "trust": ("index", "trust"),
    "index_save_every": ("index", "save_every"),
    "retain_versions": ("retention", "versions"), "retain_seconds": ("retention", "seconds"),
    "idempotency_retention_seconds": ("retention", "idempotency_seconds"),
    "write_log_retention_seconds": ("retention", "write_log_seconds"),
    "session_ttl_seconds": ("retention", "session_ttl_seconds"),
    "poison_threshold": ("poison", "threshold"), "poison_penalty": ("poison", "penalty"),
    "poison_source_threshold": ("poison", "source_threshold"),
    "poison_source_thresholds": ("poison", "source_thresholds"),
    "llm_url": ("llm", "url"), "llm_model": ("llm", "model"), "llm_key": ("llm", "key"),
    "llm_timeout_seconds": ("llm", "timeout_seconds"), "llm_retries": ("llm", "retries"),
    "memory_max_inline_bytes": ("memory", "max_inline_bytes"),
    "memory_retention_seconds": ("memory", "retention_seconds"),
    "memory_max_count": ("memory", "max_count"),
}
"""Each top-level key of an ``rcpkit.toml`` written before the sections, and the
``(table, key)`` it is read as."""

Tables = dict[str, dict[str, Any]]
"""Settings by table, as a file holds them: ``{"dense": {"graph_dtype": "i8"}}``."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the engine is and how far it may be pushed: one section per ``rcpkit.toml``
    table (module docstring), the data directory, and ``field_types`` (the §8 filter type of
    metadata keys; otherwise the first value seen decides)."""

    data_dir: Path = Path("rcpkit-data")
    store: StoreConfig = field(default_factory=StoreConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    dense: DenseConfig = field(default_factory=DenseConfig)
    lexical: LexicalConfig = field(default_factory=LexicalConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    requests: RequestsConfig = field(default_factory=RequestsConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    poison: PoisonConfig = field(default_factory=PoisonConfig)
    llm: LlmConfig = field(default_factory=LlmConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    field_types: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        accepted, field_types = _conform(self.field_types, Mapping[str, str])
        if not accepted:
            raise ValueError(f"[field_types] must be a table of strings, not {self.field_types!r}")
        object.__setattr__(self, "field_types", field_types)

    @classmethod
    def from_mapping(cls, document: Mapping[str, Any]) -> EngineConfig:
        """Build from a parsed ``rcpkit.toml`` (or its JSON twin): its tables, or the flat keys
        of a file written before them (``LEGACY_KEYS``); unknown keys are an error."""
        tables, written = settings_by_table(document)
        return _built(cls(), tables, written)

    @classmethod
    def load(cls, path: str | Path) -> EngineConfig:
        """Read a ``.toml`` or ``.json`` file (see :meth:`from_mapping`)."""
        return cls.from_mapping(_read(Path(path)))

    def with_overrides(self, **tables: Any) -> EngineConfig:
        """A copy with ``tables`` applied: ``data_dir``, ``field_types``, or a section's
        settings by table (``dense={"graph_dtype": "i8"}``); a value ``None`` keeps the
        current one."""
        return _built(self, _tables_from(tables), {})


def _built(base: EngineConfig, tables: Tables, written: Mapping[tuple[str, str], str]
           ) -> EngineConfig:
    """``base`` with ``tables`` applied, each section built (so checked) once; an error names
    the key as ``written`` (a file's old flat name) when it was written so."""
    changes: dict[str, Any] = {}
    try:
        for table, values in tables.items():
            if table == "":
                changes.update(values)
            elif table == "field_types":
                changes["field_types"] = dict(values)
            else:
                changes[table] = dataclasses.replace(getattr(base, table), **values)
        return dataclasses.replace(base, **changes)
    except SettingError as exc:
        name = written.get((exc.table, exc.key))
        if name is None:
            raise
        raise ValueError(f"{name} {exc.problem}") from None


def _tables_from(overrides: Mapping[str, Any]) -> Tables:
    """Keyword overrides as tables, ``None`` values left out."""
    tables: Tables = {}
    for name, value in overrides.items():
        if value is None:
            continue
        if name == "data_dir":
            tables.setdefault("", {})["data_dir"] = value
        elif name == "field_types":
            tables["field_types"] = dict(value)
        elif name in SECTIONS and isinstance(value, Mapping):
            _check_keys(name, value)
            kept = {key: setting for key, setting in value.items() if setting is not None}
            if kept:
                tables[name] = kept
        else:
            raise TypeError(f"{name!r} is not a section of the engine configuration "
                            f"(sections: {', '.join(SECTIONS)}, data_dir, field_types)")
    return tables


def settings_by_table(document: Mapping[str, Any]) -> tuple[Tables, dict[tuple[str, str], str]]:
    """A parsed file's settings by table, and the old flat name of each setting written so.

    A top-level table named after a section is that section; any other top-level key, and
    every key of an ``[engine]`` table, is an old flat key (``[poison]`` and
    ``[field_types]`` kept their names). A setting written twice is an error."""
    tables: Tables = {}
    written: dict[tuple[str, str], str] = {}

    def put(table: str, key: str, value: Any, name: str) -> None:
        if key in tables.setdefault(table, {}):
            raise ValueError(f"{name} is set twice (also as "
                             f"{written.get((table, key), f'[{table}] {key}')})")
        tables[table][key] = value
        if name != f"[{table}] {key}":
            written[(table, key)] = name

    flat: dict[str, Any] = {}
    for key, value in document.items():
        if key == "engine" and isinstance(value, Mapping):
            flat.update(value)
        elif key in SECTIONS and isinstance(value, Mapping):
            _check_keys(key, value)
            for name, setting in value.items():
                put(key, name, setting, f"[{key}] {name}")
        else:
            flat[key] = value
    unknown = []
    for key, value in flat.items():
        if key == "data_dir":
            put("", "data_dir", value, "data_dir")
        elif key == "field_types":
            tables["field_types"] = dict(value) if isinstance(value, Mapping) else value
        elif key == "poison" and isinstance(value, Mapping):  # inside an old [engine] table
            _check_keys("poison", value)
            for name, setting in value.items():
                put("poison", name, setting, f"[poison] {name}")
        elif key in LEGACY_KEYS:
            put(*LEGACY_KEYS[key], value, key)
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"unknown engine config keys: {', '.join(sorted(unknown))}")
    return tables, written


def _check_keys(table: str, values: Mapping[str, Any]) -> None:
    known = [item.name for item in dataclasses.fields(SECTIONS[table])]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"[{table}] has no setting {', '.join(unknown)} "
                         f"(known: {', '.join(known)})")


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    document: dict[str, Any] = (tomllib.loads(raw.decode()) if path.suffix == ".toml"
                                else json.loads(raw))
    return document


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(section: type[_Section]) -> dict[str, Any]:
    """The type of each of ``section``'s settings (resolved once per section)."""
    if section not in _HINTS:
        hints = get_type_hints(section)
        _HINTS[section] = {item.name: hints[item.name] for item in dataclasses.fields(section)}
    return _HINTS[section]


def _conform(value: Any, hint: Any) -> tuple[bool, Any]:
    """Whether ``value`` is of type ``hint`` as a setting, and the value to keep (a path as
    :class:`~pathlib.Path`, an integer given for a float as a float, a table as a dict)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        if value is None:
            return type(None) in get_args(hint), None
        return next(((True, kept) for accepted, kept in
                     (_conform(value, arg) for arg in get_args(hint) if arg is not type(None))
                     if accepted), (False, value))
    if origin is Literal:
        return value in get_args(hint), value
    if origin is Mapping:
        key_type, value_type = get_args(hint)
        if not isinstance(value, Mapping):
            return False, value
        pairs = [(_conform(key, key_type), _conform(item, value_type))
                 for key, item in value.items()]
        if not all(key[0] and item[0] for key, item in pairs):
            return False, value
        return True, {key[1]: item[1] for key, item in pairs}
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return True, value if isinstance(value, float) else float(value)
        return False, value
    if hint is Path:
        if isinstance(value, (str, os.PathLike)):
            return True, value if isinstance(value, Path) else Path(value)
        return False, value
    return isinstance(value, hint), value


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in get_args(hint) if arg is not type(None))
    if origin is Literal:
        *others, last = (str(choice) for choice in get_args(hint))
        return f"{', '.join(others)} or {last}"
    if origin is Mapping:
        return f"a table of {_describe(get_args(hint)[1])} values"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a path"}.get(hint, getattr(hint, "__name__", str(hint)))


def load_config(config_or_data_dir: EngineConfig | str | Path | None = None,
                **overrides: Any) -> EngineConfig:
    """The engine configuration: ``EngineConfig`` as given, or ``DIR/rcpkit.toml`` (when
    present) for a data directory; ``overrides`` (tables, as :meth:`~EngineConfig.with_overrides`
    takes them; ``None`` = keep) apply over either, and ``[store] dsn`` falls back to the
    ``RCPKIT_DSN`` environment variable.

    A directory's settings (above all its embedder, which the stored vectors depend on) stay
    with the data, so every command on one directory agrees. The file, the overrides and the
    environment are merged before any section is built, and each section is built once."""
    try:
        options = _tables_from(overrides)
    except TypeError as exc:
        raise ConfigError(f"unknown engine option: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    written: dict[tuple[str, str], str] = {}
    where = ""
    tables = options
    if isinstance(config_or_data_dir, EngineConfig):
        base = config_or_data_dir
    else:
        base = EngineConfig()
        data_dir = Path(config_or_data_dir if config_or_data_dir is not None
                        else base.data_dir)
        config_file = data_dir / CONFIG_FILE
        stored: Tables = {}
        if config_file.is_file():
            where = f"{config_file}: "
            try:
                stored, written = settings_by_table(_read(config_file))
            except (ValueError, TypeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{where}{exc}") from exc
        tables = _merged(_merged(stored, {"": {"data_dir": data_dir}}), options)
    store = tables.get("store", {})
    if not store.get("dsn") and not base.store.dsn and os.environ.get(DSN_ENV):
        tables = _merged(tables, {"store": {"dsn": os.environ[DSN_ENV]}})
    try:
        return _built(base, tables, written)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}{exc}") from exc


def _merged(under: Tables, over: Tables) -> Tables:
    return {table: {**under.get(table, {}), **over.get(table, {})}
            for table in {**under, **over}}


def record_backend(data_dir: Path, backend: str, dsn: str | None) -> bool:
    """Write ``backend`` (and ``dsn`` when given) into the ``[store]`` table of
    ``DIR/rcpkit.toml`` unless the file already names a backend, so later commands with
    ``--data DIR`` open the same system of record. Other settings are kept; the file is
    written atomically and private (0600: a DSN may hold a password). True when the file
    changed."""
    config_file = data_dir / CONFIG_FILE
    text = config_file.read_text(encoding="utf-8") if config_file.is_file() else ""
    store = settings_by_table(tomllib.loads(text))[0].get("store", {})
    if "backend" in store:
        return False
    # JSON string escapes are valid TOML basic-string escapes.
    lines = [f"backend = {json.dumps(backend)}"]
    if dsn and "dsn" not in store:
        lines.append(f"dsn = {json.dumps(dsn)}")
    existing = text.splitlines()
    at = next((number + 1 for number, line in enumerate(existing)
               if line.strip() == "[store]"), None)
    updated = ([*existing, *([""] if existing else []), "[store]", *lines] if at is None
               else [*existing[:at], *lines, *existing[at:]])
    private_dir(data_dir)
    atomic_write(config_file, "\n".join(updated) + "\n")
    return True
