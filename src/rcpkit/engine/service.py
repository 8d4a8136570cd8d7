"""The engine served over RCP: binds :class:`~rcpkit.engine.pipeline.Engine` to the server
framework exactly as a user's own engine would.

:func:`build_server` opens the engine and returns a :class:`~rcpkit.server.Server` whose
capabilities (§6, §6.1) are derived from :meth:`Engine.describe` — only what is configured is
advertised — and whose handlers map the typed §7 params onto engine calls. The engine is
synchronous, so every handler is a plain function the framework runs in a worker thread.

Configuration: a data directory may hold ``rcpkit.toml`` (an :class:`EngineConfig` file, e.g.
``embedder = "hashing"``); keyword options given to :func:`build_server` override it. This keeps
a directory's settings (above all its embedder, which the stored vectors depend on) with the
data, so ``rcpkit serve --data DIR`` and ``rcpkit index add --data DIR`` always agree. The
PostgreSQL backend's DSN may also come from the ``RCPKIT_DSN`` environment variable.

The server is multi-process safe (``rcpkit serve --http --workers N``, or several servers on
one PostgreSQL database): the engine refreshes from the shared record before every request,
and the advertised ``filter`` fields follow each published version (see ``pipeline``).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rcpkit import __version__
from rcpkit.engine.binding_graph import Rewriter, bind_knowledge
from rcpkit.engine.config import EngineConfig
from rcpkit.engine.embedding import minilm_files
from rcpkit.engine.pipeline import Engine
from rcpkit.engine.sparse import SparseEncoder
from rcpkit.engine.types import (
    DocumentIn,
    FeedbackSignal,
    Hit,
    Recency,
    RerankOptions,
    SearchRequest,
)
from rcpkit.protocol.content import ContentBlock, plain_text
from rcpkit.protocol.errors import BackendUnavailable, InvalidParams, UsageError
from rcpkit.protocol.filters import FilterNode
from rcpkit.protocol.lifecycle import LOG_LEVELS
from rcpkit.protocol.types import (
    EmbedParams,
    FeedbackParams,
    IndexAddParams,
    IndexDeleteParams,
    MultiEmbedParams,
    RerankParams,
    RetrieveParams,
    SparseEmbedParams,
)
from rcpkit.protocol.vectors import ENCODINGS, encode_vectors
from rcpkit.server import Context, Server
from rcpkit.server.framework import Conformance

__all__ = ["CONFIG_FILE", "DSN_ENV", "SERVER_NAME", "bind", "build_server", "capabilities",
           "load_config", "open_engine"]

CONFIG_FILE = "rcpkit.toml"
"""Per-data-directory engine configuration, read by :func:`load_config`."""
DSN_ENV = "RCPKIT_DSN"
"""Environment variable supplying ``dsn`` when neither the options nor the file set it."""
SERVER_NAME = "rcpkit-engine"
_LOGGER = "rcpkit.engine"


def load_config(config_or_data_dir: EngineConfig | str | Path | None = None,
                **options: Any) -> EngineConfig:
    """The engine configuration: ``EngineConfig`` as given, or ``DIR/rcpkit.toml`` (when present)
    for a data directory; ``options`` (``None`` = keep) override either."""
    if isinstance(config_or_data_dir, EngineConfig):
        base = config_or_data_dir
    else:
        data_dir = Path(config_or_data_dir if config_or_data_dir is not None
                        else EngineConfig().data_dir)
        config_file = data_dir / CONFIG_FILE
        try:
            base = EngineConfig.load(config_file) if config_file.is_file() else EngineConfig()
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{config_file}: {exc}") from exc
        base = base.with_overrides(data_dir=data_dir)
    try:
        config = base.with_overrides(**options)
    except TypeError as exc:
        raise UsageError(f"unknown engine option: {exc}") from exc
    return config if config.dsn else config.with_overrides(dsn=os.environ.get(DSN_ENV) or None)


def open_engine(config_or_data_dir: EngineConfig | str | Path | None = None,
                **options: Any) -> Engine:
    """Open (creating if absent) the engine described by :func:`load_config`."""
    config = load_config(config_or_data_dir, **options)
    try:
        return Engine.open(config)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _sparse_encoder() -> SparseEncoder | None:
    """``embed/sparse`` needs the bundled WordPiece vocabulary; without it, not advertised."""
    try:
        return SparseEncoder(minilm_files()[1])
    except BackendUnavailable:
        return None


def capabilities(engine: Engine, sparse: SparseEncoder | None) -> dict[str, dict[str, Any]]:
    """Honest §6 capabilities from what ``engine`` is configured with.

    ``scoreFloor`` (§6.1) must hold whatever the query and the request's mode: dense scores
    are cosines of unit vectors (≥ -1), BM25 and every fused score are ≥ 0, ColBERT MaxSim
    is a mean of cosines (≥ -1), and recency/poison factors only shrink a score towards 0,
    so -1.0 bounds them all. A cross-encoder's logits have no floor: with one configured the
    floor is omitted. The scales differ per mode, hence ``scoreScale: unbounded``; the
    vendor key ``x-rcpkit-scores`` (§6.2) says what each mode's score is.
    """
    described = engine.describe()
    retrieve: dict[str, Any] = {
        "maxK": described.max_k, "modes": list(described.modes),
        "fusion": list(described.fusion_methods), "mmr": described.mmr,
        "rerankBuiltin": bool(described.rerank_methods), "units": list(described.units),
        "tokenBudget": described.token_budget, "confidence": described.confidence,
        "scoreScale": "unbounded", "defaultMode": described.default_mode,
        "deterministic": described.deterministic, "snapshots": described.snapshots}
    if "cross-encoder" not in described.rerank_methods:
        retrieve["scoreFloor"] = -1.0
    retrieve["x-rcpkit-scores"] = score_scales(described.default_fusion)
    caps: dict[str, dict[str, Any]] = {
        "retrieve": retrieve,
        "embed": {"dimension": described.embed_dimension, "identity": described.embed_identity,
                  "batchLimit": described.max_batch_inputs, "normalized": True,
                  "encodings": list(ENCODINGS)},
        "multiVector": {"dimension": described.embed_dimension,
                        "identity": described.embed_identity, "similarity": "cosine",
                        "encodings": list(ENCODINGS)},
        "index": {"writable": True, "chunking": described.chunking,
                  "contextual": described.contextual},
        "filter": _filter_capability(described.filter_fields, described.filter_operators),
        "citations": {}, "streaming": {}, "feedback": {},
        "session": {"dedup": True, "ttlSeconds": described.session_ttl_seconds},
        "log": {"levels": list(LOG_LEVELS)},
    }
    if described.rerank_methods:
        caps["rerank"] = {"methods": list(described.rerank_methods),
                          "maxCandidates": described.max_batch_inputs}
    if sparse is not None:
        caps["sparseEmbed"] = {"identity": sparse.identity}
    if described.pagination:
        caps["pagination"] = {}
    if engine.config.read_only:
        del caps["index"]
    return caps


def score_scales(default_fusion: str) -> dict[str, dict[str, Any]]:
    """``Hit.score`` per mode before rerank (which scores on the reranker's own scale):
    dense is a cosine, sparse a BM25 score, and hybrid, by default, a relevance in [0, 1]
    (a convex combination of per-list normalised scores, §16.3) so that ``minScore`` (§7.7)
    means the same in every query; only ``rrf`` fusion gives rank-based values instead."""
    hybrid: dict[str, Any] = {"fusion": default_fusion}
    if default_fusion == "rrf":
        hybrid["scale"] = "rrf"
    else:
        hybrid.update(scale="normalised", min=0.0, max=1.0)
    return {"dense": {"scale": "cosine", "min": -1.0, "max": 1.0},
            "sparse": {"scale": "bm25", "min": 0.0}, "hybrid": hybrid}


def _filter_capability(fields: Mapping[str, str], operators: Sequence[str]) -> dict[str, Any]:
    return {"fields": dict(sorted(fields.items())), "operators": list(operators)}


def _conformance(caps: Mapping[str, Any]) -> Conformance:
    """§14: L2 when the L1 surface and a real L2 selection (rerank, late interaction,
    streaming, pagination, reproducibility) are all there; L1 otherwise."""
    retrieve = caps["retrieve"]
    l1 = (set(retrieve["modes"]) >= {"dense", "sparse", "hybrid"}
          and "filter" in caps and "citations" in caps)
    l2 = (l1 and "rerank" in caps and "multiVector" in caps and "streaming" in caps
          and "pagination" in caps and "log" in caps
          and retrieve["deterministic"] and retrieve["snapshots"])
    return "L2" if l2 else "L1" if l1 else "L0"


def build_server(config_or_data_dir: EngineConfig | str | Path | None = None,
                 **options: Any) -> Server:
    """Open the engine and serve it: ``rcpkit serve --data DIR`` calls ``build_server(DIR)``.

    ``options`` are :class:`EngineConfig` fields overriding the data directory's
    ``rcpkit.toml``. The engine's indexes are saved when the process exits normally.
    """
    engine = open_engine(config_or_data_dir, **options)
    atexit.register(engine.close)
    return bind(engine)


def bind(engine: Engine, sparse: SparseEncoder | None = None) -> Server:
    """A :class:`Server` over an already open ``engine`` (its lifetime stays with the caller)."""
    encoder = sparse or _sparse_encoder()
    caps = capabilities(engine, encoder)
    server = _EngineServer(engine, _conformance(caps))
    for key, meta in caps.items():
        server.capability(key, meta)
    handlers = _Handlers(engine, encoder, bind_knowledge(server, engine))
    server.add_method("retrieve", handlers.retrieve)
    server.add_method("embed", handlers.embed)
    server.add_method("embed/multi", handlers.embed_multi)
    if "index" in caps:
        server.add_method("index/add", handlers.index_add)
        server.add_method("index/delete", handlers.index_delete)
    server.add_method("feedback", handlers.feedback)
    if "rerank" in caps:
        server.add_method("rerank", handlers.rerank)
    if encoder is not None:
        server.add_method("embed/sparse", handlers.embed_sparse)
    return server


class _EngineServer(Server):
    """The engine's :class:`Server`, safe to run in several processes on one record.

    Before gating a stateless request (§8 filter fields included) the dispatcher calls
    :meth:`refresh`, which brings the engine up to date with the shared record (one small
    query when nothing changed); every published version re-advertises the ``filter``
    fields, so a field first written through another process is accepted by the very next
    request. A stateful session keeps the set it
    was initialized with (§13.2).
    """

    def __init__(self, engine: Engine, conformance: Conformance) -> None:
        self._engine = engine
        super().__init__(SERVER_NAME, __version__, conformance)
        self.multiprocess_safe = True
        engine.on_publish(self._advertise_filter_fields)

    def refresh(self) -> None:
        self._engine.refresh()

    def gauges(self) -> dict[str, float]:
        """Corpus and index sizes, and whether a background index build is running."""
        sizes = {name: float(value) for name, value in self._engine.stats().items()
                 if isinstance(value, int | float) and not isinstance(value, bool)}
        sizes["index_build_running"] = 0.0 if self._engine.wait_for_indexes(0) else 1.0
        return sizes

    def _advertise_filter_fields(self) -> None:
        # Runs under the engine's write lock, on every published version.
        described = self._engine.describe()
        refreshed = _filter_capability(described.filter_fields, described.filter_operators)
        if self.capabilities.get("filter") != refreshed:
            self.capability("filter", refreshed)


def _texts(inputs: Sequence[str | ContentBlock], path: str) -> list[str]:
    """Bare strings or text Content blocks (§4.8; gating already refused other modalities)."""
    return [plain_text(item, f"{path}[{index}]") for index, item in enumerate(inputs)]


class _Handlers:
    """The §7 handlers of one served engine."""

    def __init__(self, engine: Engine, sparse: SparseEncoder | None,
                 rewriter: Rewriter | None) -> None:
        self.engine = engine
        self.sparse = sparse
        self.rewriter = rewriter
        self.default_rerank = next(iter(engine.describe().rerank_methods), None)

    # ── retrieve (§7.7, §9, §10) ───────────────────────────────────────────
    def retrieve(self, params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        request = self._search_request(params, ctx.caller, ctx.filter)
        encoding = params.encoding or "json"

        def wire(hit: Hit) -> dict[str, Any]:
            body = hit.to_wire()
            if "vector" in body and encoding != "json":
                body["vector"] = encode_vectors([body["vector"]], encoding)[0]
            return body

        def progress(stage: str, fraction: float, partial: list[Hit] | None) -> None:
            ctx.progress(fraction, stage=stage,
                         partial={"hits": [wire(h) for h in partial]} if partial else None)

        def stopped() -> bool:
            return ctx.cancelled or ctx.remaining_ms == 0.0

        method = params.rewrite_method
        # Partial hits cost a record read and hit construction: only when someone listens.
        listener = progress if ctx.reports_progress else None
        # Gating admits a rewrite only when ``transform`` is advertised, i.e. with a rewriter.
        result = (self.rewriter.search(request, method, progress=listener, cancelled=stopped)
                  if method is not None and self.rewriter is not None
                  else self.engine.search(request, progress=listener, cancelled=stopped))
        usage = result.usage.to_wire()
        if ctx.notes:
            usage["notes"] = [*usage.get("notes", []), *ctx.notes]
        ctx.log("debug", f"retrieve returned {len(result.hits)} hits",
                {"mode": request.mode, "candidates": result.usage.candidates,
                 "latencyMs": usage["latencyMs"]}, logger=_LOGGER)
        body: dict[str, Any] = {"hits": [wire(hit) for hit in result.hits],
                                "indexVersion": result.index_version, "usage": usage}
        if result.next_cursor:
            body["nextCursor"] = result.next_cursor
        return body

    def _search_request(self, params: RetrieveParams, caller: str,
                        filter_tree: FilterNode | None) -> SearchRequest:
        """Typed §7.7 params → the engine's request; absent options keep engine defaults.
        ``caller`` scopes session dedup and cursors (:attr:`Context.caller`); ``filter_tree``
        is the filter the dispatcher's gating validated against the advertised fields (the
        engine's own schema, see :meth:`_advertise_filter_fields`)."""
        fusion = params.fusion
        rerank = params.rerank_options
        recency = None
        if params.recency is not None:
            if params.recency.field is None or params.recency.half_life_days is None:
                raise InvalidParams("recency needs field and halfLifeDays", field="recency")
            recency = Recency(params.recency.field, params.recency.half_life_days)
        rerank_method = (rerank.method if rerank is not None and rerank.method
                         else self.default_rerank)
        return SearchRequest(
            query=plain_text(params.query, "query"), k=params.k, mode=params.mode or "hybrid",
            candidate_k=params.candidate_k,
            fusion=fusion.method if fusion else None,
            rrf_k=(fusion.rrf_k if fusion and fusion.rrf_k is not None else 60),
            weights=fusion.weights if fusion else None,
            alpha=fusion.alpha if fusion else None,
            rerank=(RerankOptions(rerank_method, rerank.top_n)
                    if rerank is not None and rerank_method is not None else None),
            mmr_lambda=((params.mmr.lambda_ if params.mmr.lambda_ is not None else 0.5)
                        if params.mmr is not None else None),
            filter=params.filter if filter_tree is None else filter_tree,
            filter_validated=filter_tree is not None, min_score=params.min_score,
            recency=recency,
            unit=params.unit or "chunk", token_budget=params.token_budget,
            session_id=params.session_id, include_text=params.include_text,
            include_vectors=params.include_vectors, seed=params.seed,
            index_version=params.index_version, cursor=params.cursor, caller=caller)

    # ── embeddings (§7.3, §7.4, §7.5) and rerank (§7.6) ────────────────────
    def embed(self, params: EmbedParams, ctx: Context) -> dict[str, Any]:
        encoding = params.encoding or "json"
        vectors = self.engine.embed(_texts(params.inputs, "inputs"), params.kind or "document")
        return {"vectors": encode_vectors(vectors, encoding), "encoding": encoding,
                "dimension": int(vectors.shape[1])}

    def embed_multi(self, params: MultiEmbedParams, ctx: Context) -> dict[str, Any]:
        encoding = params.encoding or "json"
        matrices = self.engine.token_embeddings(_texts(params.inputs, "inputs"),
                                                params.kind or "document")
        return {"matrices": [encode_vectors(matrix, encoding) for matrix in matrices],
                "encoding": encoding, "dimension": self.engine.describe().embed_dimension}

    def embed_sparse(self, params: SparseEmbedParams, ctx: Context) -> dict[str, Any]:
        assert self.sparse is not None  # registered only with an encoder
        texts = _texts(params.inputs, "inputs")
        if len(texts) > self.engine.config.max_batch_inputs:
            raise InvalidParams(f"at most {self.engine.config.max_batch_inputs} inputs per call",
                                field="inputs")
        encoded = self.sparse.encode(texts, params.kind or "document")
        return {"sparse": [{"indices": indices.tolist(), "values": values.tolist()}
                           for indices, values in encoded]}

    def rerank(self, params: RerankParams, ctx: Context) -> dict[str, Any]:
        """§7.6, as peers expect: ``scores`` aligned with the input, ``order`` and ``results``
        best first (cut at ``topN``)."""
        method = params.method or self.default_rerank
        assert method is not None  # registered only with a reranker
        scores = self.engine.rerank(plain_text(params.query, "query"),
                                    _texts(params.passages, "passages"), method)
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        if params.top_n is not None:
            order = order[:params.top_n]
        return {"scores": [float(s) for s in scores], "order": order,
                "results": [{"index": i, "score": float(scores[i])} for i in order]}

    # ── writes (§7.10, §7.11, §7.16) ───────────────────────────────────────
    def index_add(self, params: IndexAddParams, ctx: Context) -> dict[str, Any]:
        key = ctx.meta.get("idempotencyKey")
        if key is not None and not isinstance(key, str):
            raise InvalidParams("_meta.idempotencyKey must be a string",
                                field="_meta.idempotencyKey")
        documents = [DocumentIn(text=d.text, id=d.id, meta=d.meta) for d in params.documents]
        result = self.engine.add(documents, chunk=params.chunk, contextual=params.contextual,
                                 idempotency_key=key)
        ctx.log("info", f"indexed {len(result.ids)} documents ({result.chunks} chunks)",
                {"indexVersion": result.index_version}, logger=_LOGGER)
        return {"ids": result.ids, "chunks": result.chunks,
                "_meta": {"indexVersion": result.index_version}}

    def index_delete(self, params: IndexDeleteParams, ctx: Context) -> dict[str, Any]:
        result = self.engine.delete(params.ids)
        ctx.log("info", f"deleted {result.deleted} documents",
                {"indexVersion": result.index_version}, logger=_LOGGER)
        return {"deleted": result.deleted, "_meta": {"indexVersion": result.index_version}}

    def feedback(self, params: FeedbackParams, ctx: Context) -> dict[str, Any]:
        signals = [FeedbackSignal(hit_id=str(s.hit_id), used=s.used, cited=s.cited,
                                  helpful=s.helpful, reward=s.reward,
                                  poison_suspected=s.poison_suspected,
                                  injection_suspected=s.injection_suspected)
                   for s in params.signals]
        accepted = self.engine.feedback(signals, session_id=params.session_id,
                                        query=params.query)
        return {"accepted": accepted}
