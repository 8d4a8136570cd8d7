"""One search (§7.7): plan → recall → fuse → rerank → adjust → diversify → page → pack, at one
pinned snapshot (§7.7.1), with progress after each stage (§9) and cancellation between them."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import msgspec
import numpy as np
import numpy.typing as npt

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.errors import Cancelled
from rcpkit.engine.lru import Recent
from rcpkit.engine.models.embedding import Embedder
from rcpkit.engine.models.rerank import Reranker
from rcpkit.engine.search import stages
from rcpkit.engine.search.cursors import Cursors, CursorState
from rcpkit.engine.search.planner import Plan, Planner, checked_filter
from rcpkit.engine.search.recall import Candidate, Loaded, Recall, load, merge
from rcpkit.engine.search.sessions import Sessions
from rcpkit.engine.snapshots import Snapshots
from rcpkit.engine.store import RecordReads
from rcpkit.engine.timing import StageClock
from rcpkit.engine.types import Hit, SearchRequest, SearchResult, Usage

__all__ = ["STAGES", "TIMED_STAGES", "Progress", "Searcher"]

STAGES = ("recall", "fuse", "rerank", "diversify", "pack")
"""The stages progress is reported after (§9)."""
TIMED_STAGES = ("plan", "embed_query", "dense_recall", "lexical_recall", "fuse", "rerank",
                "diversify", "pack")
"""The stages timed in :attr:`SearchResult.stage_seconds`, in order (recall split by list;
a list a request does not ask for, or a replayed first page, has no recall stage)."""

Progress = Callable[[str, float, list[Hit] | None], None]
"""``progress(stage, fraction, partial_hits)`` — called after each pipeline stage (§9)."""


class Searcher:
    """Runs searches over one recall, with this process's query and first-page caches."""

    def __init__(self, config: EngineConfig, store: RecordReads, embedder: Embedder,
                 rerankers: Mapping[str, Reranker], recall: Recall, snapshots: Snapshots,
                 planner: Planner, cursors: Cursors, sessions: Sessions) -> None:
        self._config = config
        self._store = store
        self._embedder = embedder
        self._rerankers = rerankers
        self.recall = recall
        self._snapshots = snapshots
        self._planner = planner
        self._cursors = cursors
        self._sessions = sessions
        self._query_vectors: Recent[str, npt.NDArray[np.float32]] = Recent(
            config.embedder.query_cache_size)
        self._recalled: Recent[tuple[str, str], tuple[list[Candidate], int]] = Recent(64)
        """First pages recalled approximately (HNSW), kept so their cursor pages replay the
        very same candidates instead of an exact recall that could differ (§10)."""
        self._loaded: Recent[int, Loaded] = Recent(config.retrieve.record_cache_size)
        """Records, vectors and citations of recently returned rows (:func:`load`)."""

    def search(self, request: SearchRequest, *, progress: Progress | None = None,
               cancelled: Callable[[], bool] | None = None) -> SearchResult:
        """Run the §3 pipeline at one snapshot and return at most ``k`` hits."""
        started = time.perf_counter()
        clock = StageClock()
        self._snapshots.refresh()
        snapshots = self._snapshots
        plan = self._planner.plan(request, snapshots.schema, snapshots.token,
                                  self._store.gc_floor)
        clock.lap("plan")

        def stage(name: str, fraction: float, partial: list[Hit] | None = None) -> None:
            if name != "recall":  # recall is timed per list, as it runs
                clock.lap(name)
            if cancelled is not None and cancelled():
                raise Cancelled("cancelled")
            if progress is not None:
                progress(name, fraction, partial)

        query_vector = self.query_vector(request.query)
        clock.lap("embed_query")
        replayed = (self._recalled.get((plan.fingerprint, plan.pinned))
                    if plan.fingerprint is not None and plan.pinned is not None else None)
        candidates, seq = replayed or self._recall(request, plan, query_vector, clock)
        if progress is not None:
            leading = self._load(sorted(candidates, key=lambda c: -c.score)[:plan.k], seq,
                                 text=request.include_text)
            stage("recall", 0.3, [stages.hit(c, request, query_vector, text=request.include_text)
                                  for c in leading])
        else:
            stage("recall", 0.3)
        config = self._config
        ranked = stages.fuse(request, candidates, default_method=config.retrieve.fusion,
                             default_alpha=config.retrieve.fusion_alpha)
        stage("fuse", 0.5)
        if plan.reads_every_candidate(request):
            ranked = self._load(ranked, seq, text=False)
        reranked = 0
        if request.rerank is not None and ranked:
            ranked = stages.rerank(request.query, self._load(ranked[:plan.top_n], seq, text=True),
                                   self._rerankers[request.rerank.method])
            reranked = len(ranked)
        stage("rerank", 0.7)
        ranked = stages.adjust(request, plan, ranked, recency_weight=config.retrieve.recency_weight,
                               poison_penalty=config.poison.penalty)
        ranked = stages.diversify(request.mmr_lambda, ranked, query_vector)
        stage("diversify", 0.85)
        if request.min_score is not None:
            ranked = [c for c in ranked if c.score >= request.min_score]
        if request.unit == "document":
            ranked = stages.best_per_document(ranked)
        if request.session_id is not None and request.cursor is None:
            seen = self._sessions.seen((request.caller, request.session_id))
            ranked = [c for c in ranked if stages.hit_id(c.record, request.unit) not in seen]
        # Pages walk the funnel's candidateK (§3.3, §10), at most maxK: hybrid's dense and
        # sparse lists fused can hold up to twice that.
        ranked = ranked[:plan.candidate_k]
        with_text = request.include_text or request.token_budget is not None
        page = [stages.hit(c, request, query_vector, text=with_text)
                for c in self._load(ranked[plan.offset:plan.offset + plan.k], seq,
                                    text=with_text)]
        tokens: int | None = None
        if request.token_budget is not None:
            page, tokens = stages.pack(page, request.token_budget)
            if not request.include_text:  # the bodies were needed only to count tokens
                page = [msgspec.structs.replace(found, text=None) for found in page]
        end = plan.offset + len(page)
        next_cursor = None
        if page and end < len(ranked):
            fingerprint = plan.fingerprint or self._cursors.fingerprint(request)
            next_cursor = self._cursors.issue(
                CursorState(seq, end, plan.now_ms, plan.poisoned.mark), fingerprint)
            if (request.cursor is None and request.mode != "sparse"
                    and not plan.exact_dense(request)):
                self._recalled.put((fingerprint, snapshots.token(seq)), (candidates, seq))
        if request.session_id is not None:
            self._sessions.remember((request.caller, request.session_id),
                                    [found.id for found in page])
        stage("pack", 1.0)
        usage = Usage(candidates=plan.candidate_k, reranked=reranked, k=plan.k,
                      latency_ms=(time.perf_counter() - started) * 1000, tokens=tokens,
                      notes=plan.notes)
        return SearchResult(hits=page, index_version=snapshots.token(seq), usage=usage,
                            next_cursor=next_cursor, stage_seconds=tuple(clock.stages))

    def query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's embedding (§7.3 ``kind: query``), from the cache when recently seen."""
        cached = self._query_vectors.get(query)
        if cached is None:
            cached = np.asarray(self._embedder.embed([query], "query")[0], dtype=np.float32)
            cached.flags.writeable = False  # shared by every request with this query
            self._query_vectors.put(query, cached)
        return cached

    def _recall(self, request: SearchRequest, plan: Plan, query_vector: npt.NDArray[np.float32],
                clock: StageClock) -> tuple[list[Candidate], int]:
        """Dense and/or lexical recall at the snapshot, under the filter (§8)."""
        tree = (request.filter if request.filter is None or request.filter_validated
                else checked_filter(request.filter, plan.schema))
        config = self._config
        complete = (config.retrieve.fusion_complete_scores
                    and (request.fusion or config.retrieve.fusion) == "convex")
        with self.recall.reading():
            seq = self._snapshots.resolve(plan.pinned)
            dense_hits, sparse_hits = self.recall.recall(
                request.query, query_vector, dense=request.mode in ("dense", "hybrid"),
                sparse=request.mode in ("sparse", "hybrid"), k=plan.candidate_k, seq=seq,
                tree=tree, schema=plan.schema, exact=plan.exact_dense(request),
                complete=complete, clock=clock)
        return merge(dense_hits, sparse_hits), seq

    def _load(self, candidates: list[Candidate], seq: int, *, text: bool) -> list[Candidate]:
        return load(self.recall, self._store, candidates, seq, self._loaded, stages.cite,
                    text=text)
