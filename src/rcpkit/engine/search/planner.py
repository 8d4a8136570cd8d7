"""The search plan (§3.3, §7.7): options checked once, the funnel ``candidateK ≥ topN ≥ k``
clamped to ``maxK``, and what a continuation page replays from its cursor (§10)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import msgspec

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.errors import InvalidInput, Unsupported
from rcpkit.engine.feedback import Feedback, Poisoned
from rcpkit.engine.search.cursors import Cursors
from rcpkit.engine.types import SearchRequest
from rcpkit.protocol.filters import OPERATORS, FilterError, FilterNode, validate

__all__ = ["FUSION_METHODS", "MODES", "UNITS", "Plan", "Planner", "checked_filter"]

MODES = ("dense", "sparse", "hybrid")
FUSION_METHODS = ("rrf", "weighted", "convex")
UNITS = ("chunk", "document")


class Plan(msgspec.Struct, frozen=True):
    """One request's plan (a frozen ``msgspec`` struct: one is made per request)."""

    k: int
    candidate_k: int
    top_n: int
    offset: int
    fingerprint: str | None
    """Of a continuation page's query (§10); a first page computes it only for its cursor."""
    pinned: str | None
    notes: tuple[str, ...]
    schema: Mapping[str, str]
    poisoned: Poisoned
    now_ms: float

    def exact_dense(self, request: SearchRequest) -> bool:
        """§7.7.1: a seeded or pinned request must not depend on which HNSW graph a
        background build has published (or later inserts have reshaped): exact path."""
        return request.seed is not None or self.pinned is not None

    def reads_every_candidate(self, request: SearchRequest) -> bool:
        """Whether a stage before paging looks at the record or vector of every candidate:
        recency (date), the poison policy and ``unit: document`` (document id), MMR
        (vectors) and session dedup (hit ids). Rerank reads only its ``topN`` head."""
        return (request.recency is not None
                or bool(self.poisoned.documents) or bool(self.poisoned.quarantined)
                or request.unit == "document"
                or request.mmr_lambda is not None or request.session_id is not None)


def checked_filter(tree: object, schema: Mapping[str, str]) -> FilterNode:
    """A §8 filter tree validated against ``schema``; the validator's field path names the
    offending node."""
    try:
        return validate(tree, schema, OPERATORS)
    except FilterError as exc:
        raise InvalidInput(exc.message, field=exc.field) from None


class Planner:
    """Checks a request against the engine's abilities and limits and plans its funnel."""

    def __init__(self, config: EngineConfig, rerank_methods: Collection[str],
                 cursors: Cursors, feedback: Feedback, clock: Callable[[], float]) -> None:
        self._config = config
        self._rerank_methods = rerank_methods
        self._cursors = cursors
        self._feedback = feedback
        self._clock = clock

    def plan(self, request: SearchRequest, schema: Mapping[str, str],
             version_token: Callable[[int], str], gc_floor: Callable[[], int]) -> Plan:
        """Validate options and clamp the funnel (§3.3); a cursor's page resumes its query."""
        self._check(request)
        config = self._config
        max_k = config.requests.max_k
        notes: list[str] = []
        k = min(request.k, max_k)
        if k < request.k:
            notes.append(f"k clamped to maxK={max_k}")
        wanted = request.candidate_k or max(k, config.requests.default_candidate_k)
        candidate_k = min(max(wanted, k), max_k)
        top_n = 0
        if request.rerank is not None:
            wanted_top_n = request.rerank.top_n or config.rerank.default_top_n
            top_n = min(max(wanted_top_n, k), candidate_k)
        poisoned = self._feedback.poisoned
        plan = Plan(k=k, candidate_k=candidate_k, top_n=top_n, offset=0,
                    fingerprint=None, pinned=request.index_version, notes=tuple(notes),
                    schema=schema, poisoned=poisoned, now_ms=self._clock() * 1000)
        if request.cursor is None:
            return plan
        # A continuation page replays the first page's ranking inputs exactly (§10): the
        # snapshot, the clock used for recency and the feedback seen by the poison policy.
        fingerprint = self._cursors.fingerprint(request)
        state = self._cursors.open(request.cursor, fingerprint, gc_floor())
        if state.feedback_mark != poisoned.mark:
            poisoned = self._feedback.as_of(state.feedback_mark)
        return msgspec.structs.replace(plan, fingerprint=fingerprint, offset=state.offset,
                                       pinned=version_token(state.seq), now_ms=state.now_ms,
                                       poisoned=poisoned)

    def _check(self, request: SearchRequest) -> None:
        if not isinstance(request.query, str) or not request.query.strip():
            raise InvalidInput("query must be a non-empty string", field="query")
        if request.mode not in MODES:
            raise Unsupported(f"mode {request.mode!r} is not supported", option="mode")
        method = request.fusion or self._config.retrieve.fusion
        if request.mode == "hybrid" and method not in FUSION_METHODS:
            raise Unsupported(f"fusion {method!r} is not supported", option="fusion")
        if request.alpha is not None and not 0.0 <= request.alpha <= 1.0:
            raise InvalidInput("fusion alpha must be in [0, 1]", field="alpha")
        if request.unit not in UNITS:
            raise Unsupported(f"unit {request.unit!r} is not supported", option="unit")
        if request.rerank is not None and request.rerank.method not in self._rerank_methods:
            raise Unsupported(f"rerank method {request.rerank.method!r} is not "
                              "available", option=request.rerank.method)
        if request.k < 1:
            raise InvalidInput("k must be at least 1", field="k")
        if request.mmr_lambda is not None and not 0.0 <= request.mmr_lambda <= 1.0:
            raise InvalidInput("mmr lambda must be in [0, 1]", field="mmr_lambda")
        if request.token_budget is not None and request.token_budget < 1:
            raise InvalidInput("token budget must be positive", field="token_budget")
        if request.recency is not None and request.recency.half_life_days <= 0:
            raise InvalidInput("recency half-life must be positive",
                               field="recency.half_life_days")
