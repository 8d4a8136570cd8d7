"""``Federation``: one ``retrieve`` over every engine of a registry (§16).

- **Fan-out** (§16.2): each engine that advertises ``retrieve`` and accepts the request's
  options (checked with the same :mod:`rcpkit.protocol.gating` rules its server applies)
  is asked concurrently for ``headroom × k`` hits (clamped to its ``maxK``) under a
  per-engine deadline. Engines that cannot serve the options are skipped, not failed.
- **Partial failure**: an engine that errors or times out is dropped and named in
  ``usage.notes`` and ``_meta.degraded``; a failing ``required`` engine fails the query
  with its own error; if every asked engine fails the answer is ``-32010``.
- **Loop detection**: every forwarded request carries ``_meta.federation``
  ``{depth, path}`` (:class:`Hop`); an engine whose registry id or server name is on the
  path is skipped and the cycle noted.
- **Budget**: a caller's remaining ``deadlineMs`` is forwarded strictly smaller, keeping
  a reserve for fusion; no time left is ``-32014``.
- **Fusion** (§16.3): ``retrieve.fusion.method`` picks ``rrf`` (default, ``rrfK``),
  ``weighted`` (per-engine min-max) or ``convex`` (per-engine ``scoreFloor``; RRF with a
  note unless every answering engine advertises one). ``fusion.weights`` maps engine ids
  to weights overriding the registry's; ``alpha`` weighs two engines ``(α, 1-α)``. Ties
  follow the §16.3 total order (:mod:`rcpkit.fusion`). Hits are deduplicated by
  stringified id: the richest body is kept (longest ``text``, then most ``content``),
  ``meta`` is merged, and ``meta.engine``/``engineRank``/``engineScore`` name the
  engine whose body was kept.
- **Capabilities** (§16.4): :meth:`Federation.union` and :meth:`Federation.intersection`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .. import fusion
from ..client.client import AsyncClient
from ..protocol.capabilities import Capabilities
from ..protocol.codec import to_builtins
from ..protocol.errors import (
    BackendUnavailable,
    CapabilityMissing,
    InvalidParams,
    OptionUnsupported,
    RcpError,
    Timeout,
)
from ..protocol.methods import capability_for, check_options, decode_result
from ..protocol.types import FusionOptions, Hit, RetrieveParams, RetrieveResult
from .registry import EngineGroup, Registry
from .selector import Connector, Selector, connect_engine

__all__ = ["DEFAULT_DEPTH", "FUSION_METHODS", "Federation", "Hop"]

DEFAULT_DEPTH = 3
"""Hop budget of a federated query that originates here (§16.2)."""
FUSION_METHODS = ("rrf", "weighted", "convex")
_DEFAULT_RRF_K = 60


@dataclass(frozen=True)
class Hop:
    """The ``_meta.federation`` hop budget and path of a request (§16.2)."""

    depth: int = DEFAULT_DEPTH
    path: tuple[str, ...] = ()

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> Hop | None:
        """The hop of a received request's ``_meta`` (None when it carries none)."""
        value = (meta or {}).get("federation")
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise InvalidParams("_meta.federation must be an object", field="_meta.federation")
        depth, path = value.get("depth"), value.get("path", [])
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise InvalidParams("_meta.federation.depth must be an integer >= 0",
                                field="_meta.federation.depth")
        if not isinstance(path, list) or not all(isinstance(item, str) for item in path):
            raise InvalidParams("_meta.federation.path must be a list of strings",
                                field="_meta.federation.path")
        return cls(depth, tuple(path))

    def to_wire(self) -> dict[str, Any]:
        return {"depth": self.depth, "path": list(self.path)}


@dataclass
class _Outcome:
    """What one engine did for one federated query."""

    group: EngineGroup
    result: RetrieveResult | None = None
    """Set when the engine answered."""
    error: RcpError | None = None
    score_floor: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def hits(self) -> list[Hit]:
        return self.result.hits if self.result is not None else []


class Federation:
    """Fan-out, partial failure, fusion and capability views over a :class:`Registry`.

    ``headroom`` multiplies ``k`` for each engine; ``engine_timeout_ms`` bounds an engine
    when the caller gives no deadline; ``fusion_reserve_ms`` (or 10 % of the caller's
    budget, whichever is larger) is kept back from the deadline for fusion.
    """

    def __init__(self, registry: Registry, *, connect: Connector = connect_engine,
                 headroom: int = 2, engine_timeout_ms: float = 10_000.0,
                 fusion_reserve_ms: float = 25.0, connect_timeout_s: float = 10.0,
                 reprobe_interval_s: float = 30.0) -> None:
        if headroom < 1:
            raise ValueError("headroom must be >= 1")
        self.registry = registry
        self.headroom = headroom
        self.engine_timeout_ms = engine_timeout_ms
        self.fusion_reserve_ms = fusion_reserve_ms
        self.selectors = [Selector(group, connect=connect, connect_timeout_s=connect_timeout_s,
                                   reprobe_interval_s=reprobe_interval_s)
                          for group in registry.engines]
        self._probes: set[asyncio.Task[None]] = set()

    # ── connections ─────────────────────────────────────────────────────────
    async def connect(self) -> list[str]:
        """Connect every engine concurrently; returns one note per unreachable engine.

        An unreachable engine is retried at its next use (a ``required`` one then fails
        the query that needs it).
        """
        outcomes = await asyncio.gather(*(selector.acquire() for selector in self.selectors),
                                        return_exceptions=True)
        notes = []
        for outcome in outcomes:
            if isinstance(outcome, RcpError):
                notes.append(outcome.message)
            elif isinstance(outcome, BaseException):
                raise outcome
        return notes

    async def close(self) -> None:
        """Close every engine connection (liveness probes still running are cancelled)."""
        for task in list(self._probes):
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)
        await asyncio.gather(*(selector.close() for selector in self.selectors))

    def _spawn(self, probe: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(probe)
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    @property
    def unreachable(self) -> list[str]:
        """Ids of the engines without a live connection right now."""
        return [selector.group.id for selector in self.selectors if selector.client is None]

    # ── capabilities (§16.4) ───────────────────────────────────────────────
    def union(self) -> Capabilities:
        """The effective capabilities: what at least one connected engine offers."""
        return Capabilities(_combine(self._capability_sets(), union=True))

    def intersection(self) -> Capabilities:
        """The guaranteed capabilities: what every connected engine offers."""
        return Capabilities(_combine(self._capability_sets(), union=False))

    def first_capable(self, capability: str) -> AsyncClient | None:
        """The first connected engine (registry order) advertising ``capability``."""
        for selector in self.selectors:
            client = selector.client
            if client is not None and client.capabilities.has(capability):
                return client
        return None

    def _capability_sets(self) -> list[dict[str, Any]]:
        return [selector.client.capabilities.to_wire() for selector in self.selectors
                if selector.client is not None]

    # ── catalog/list (§7.13) ───────────────────────────────────────────────
    async def catalog(self) -> list[dict[str, Any]]:
        """One §7.13 entry per reachable engine; ``endpoint`` only for ``expose`` engines."""
        clients = await asyncio.gather(*(selector.acquire() for selector in self.selectors),
                                       return_exceptions=True)
        entries = []
        for selector, client in zip(self.selectors, clients, strict=True):
            if isinstance(client, RcpError):
                continue
            if isinstance(client, BaseException):
                raise client
            entry: dict[str, Any] = {"id": selector.group.id,
                                     "server": to_builtins(client.server),
                                     "capabilities": client.capabilities.to_wire()}
            active = selector.active
            if selector.group.expose and active is not None:
                entry["endpoint"] = active.endpoint()
            entries.append(entry)
        return entries

    # ── forwarding ─────────────────────────────────────────────────────────
    async def forward(self, method: str, params: Mapping[str, Any], *,
                      deadline_ms: float | None = None) -> dict[str, Any]:
        """Send ``method`` to the first engine advertising its capability (e.g. ``embed``)."""
        capability = capability_for(method)
        client = self.first_capable(capability) if capability else None
        if client is None:
            raise CapabilityMissing(f"no federated engine offers {method!r}")
        budget = self._forward_budget(deadline_ms)
        return await client.call(method, params, deadline_ms=max(1, int(budget)))

    # ── retrieve (§16.2, §16.3) ────────────────────────────────────────────
    async def retrieve(self, params: RetrieveParams, *, deadline_ms: float | None = None,
                       hop: Hop | None = None) -> dict[str, Any]:
        """A federated ``retrieve``; returns the wire result (see the module docstring).

        ``hop`` is the ``_meta.federation`` sent downstream (default: originate with
        depth 3 and an empty path); engines named on its path are skipped.
        """
        started = time.monotonic()
        hop = hop or Hop()
        options = params.fusion or FusionOptions()
        method = options.method or "rrf"
        if method not in FUSION_METHODS:
            raise OptionUnsupported(f"fusion method {method!r} is not supported",
                                    option="fusion.method", value=method)
        budget_ms = self._forward_budget(deadline_ms)
        downstream = msgspec.structs.replace(params, fusion=None, meta=None)
        outcomes = await asyncio.gather(*(
            self._ask(selector, downstream, hop, budget_ms) for selector in self.selectors))
        notes = [note for outcome in outcomes for note in outcome.notes]
        degraded = [outcome.group.id for outcome in outcomes if outcome.error is not None]
        for outcome in outcomes:
            if outcome.error is not None and outcome.group.required:
                raise outcome.error
        answered = [outcome for outcome in outcomes if outcome.result is not None]
        if degraded and not answered:
            raise BackendUnavailable("every federated engine failed: " + "; ".join(notes),
                                     data={"degraded": degraded})
        hits = _fuse(answered, method, options, notes, params.k)
        usage: dict[str, Any] = {
            "candidates": sum(len(outcome.hits) for outcome in answered),
            "latencyMs": round((time.monotonic() - started) * 1000, 3)}
        if notes:
            usage["notes"] = notes
        result: dict[str, Any] = {"hits": hits, "usage": usage}
        if degraded:
            result["_meta"] = {"degraded": degraded}
        return result

    def _forward_budget(self, deadline_ms: float | None) -> float:
        """Milliseconds granted downstream: strictly less than the caller's remainder."""
        if deadline_ms is None:
            return self.engine_timeout_ms
        budget = deadline_ms - max(self.fusion_reserve_ms, deadline_ms * 0.1)
        if budget < 1:
            raise Timeout(f"{deadline_ms:.0f} ms left leaves no time to ask any engine",
                          data={"deadlineMs": deadline_ms})
        return min(budget, self.engine_timeout_ms)

    async def _ask(self, selector: Selector, params: RetrieveParams, hop: Hop,
                   budget_ms: float) -> _Outcome:
        """One engine's part of the fan-out; its errors end up in the outcome."""
        group = selector.group
        outcome = _Outcome(group)
        if group.id in hop.path:
            return _skip(outcome, f"cycle: engine {group.id!r} is already on the federation "
                                  f"path {list(hop.path)}; not forwarded")
        deadline = time.monotonic() + budget_ms / 1000
        client: AsyncClient | None = None
        try:
            async with asyncio.timeout(budget_ms / 1000):
                client = await selector.acquire()
                if client.server.name in hop.path:
                    return _skip(outcome, f"cycle: engine {group.id!r} "
                                          f"({client.server.name}) is already on the "
                                          f"federation path {list(hop.path)}; not forwarded")
                wire = self._engine_params(client.capabilities, params, outcome)
                if wire is None:
                    return outcome
                wire["_meta"] = {"federation": hop.to_wire()}
                remaining = max(1, int((deadline - time.monotonic()) * 1000))
                raw = await client.call("retrieve", wire, deadline_ms=remaining)
                outcome.result = decode_result("retrieve", raw)
        except TimeoutError:
            outcome.error = Timeout(f"engine {group.id!r} did not answer within "
                                    f"{budget_ms:.0f} ms", data={"engine": group.id})
        except RcpError as exc:
            outcome.error = exc
        if outcome.error is not None:
            outcome.notes.append(f"engine {group.id!r} failed and was skipped: "
                                 f"{outcome.error}")
            if client is not None:  # probed off the query's critical path
                self._spawn(selector.report_failure(client, outcome.error))
        elif outcome.result is not None and outcome.result.usage is not None:
            outcome.notes += [f"{group.id}: {note}" for note in outcome.result.usage.notes or ()]
        return outcome

    def _engine_params(self, caps: Capabilities, params: RetrieveParams,
                       outcome: _Outcome) -> dict[str, Any] | None:
        """The engine's wire params, or None (and a skip note) when it cannot serve them."""
        retrieve = caps.retrieve
        if retrieve is None:
            _skip(outcome, f"engine {outcome.group.id!r} does not advertise retrieve; skipped")
            return None
        try:
            outcome.notes += [f"{outcome.group.id}: {note}"
                              for note in check_options("retrieve", params, caps)]
        except (OptionUnsupported, InvalidParams) as exc:
            _skip(outcome, f"engine {outcome.group.id!r} cannot serve this request "
                           f"({exc.message}); skipped")
            return None
        outcome.score_floor = retrieve.score_floor
        asked = params.k * self.headroom
        if retrieve.max_k is not None:
            asked = max(1, min(asked, retrieve.max_k))
        wire: dict[str, Any] = to_builtins(params)
        wire["k"] = asked
        rerank = params.rerank_options
        top_n = max(rerank.top_n, asked) if rerank is not None and rerank.top_n else None
        if top_n is not None:
            wire["rerank"] = {**wire["rerank"], "topN": top_n}
        if params.candidate_k is not None:
            wire["candidateK"] = max(params.candidate_k, asked, top_n or 0)
        return wire


def _skip(outcome: _Outcome, note: str) -> _Outcome:
    outcome.notes.append(note)
    return outcome


# ── fusion over hits (§16.3) ───────────────────────────────────────────────

def _fuse(answered: Sequence[_Outcome], method: str, options: FusionOptions,
          notes: list[str], k: int) -> list[dict[str, Any]]:
    """Fuse the answering engines' hit lists into the ``k`` best wire hits (§16.3)."""
    lists = [[(str(hit.id), hit.score) for hit in outcome.hits] for outcome in answered]
    weights = [(options.weights or {}).get(outcome.group.id, outcome.group.weight)
               for outcome in answered]
    if options.alpha is not None:
        if len(answered) == 2:
            weights = [options.alpha, 1.0 - options.alpha]
        else:
            notes.append(f"fusion.alpha weighs exactly two engines, {len(answered)} answered; "
                         "ignored")
    floors = [outcome.score_floor for outcome in answered]
    if method == "convex" and any(floor is None for floor in floors):
        notes.append("convex fusion needs every engine to advertise retrieve.scoreFloor "
                     "(§6.1); fused with rrf instead")
        method = "rrf"
    if method == "weighted":
        fused = fusion.weighted(lists, weights)
    elif method == "convex":
        fused = fusion.convex(lists, [float(floor or 0.0) for floor in floors], weights)
    else:
        fused = fusion.rrf(lists, weights, k=options.rrf_k if options.rrf_k is not None
                           else _DEFAULT_RRF_K)
    return [_fused_hit(item, answered) for item in fused[:k]]


def _fused_hit(item: fusion.Fused, answered: Sequence[_Outcome]) -> dict[str, Any]:
    """The richest body among the duplicates of ``item``, with merged ``meta``."""
    candidates = [(index, rank, answered[index].hits[rank - 1])
                  for index, rank in sorted(item.ranks.items())]
    index, rank, richest = max(candidates, key=lambda candidate: (
        len(candidate[2].text or ""), len(candidate[2].content or ()), -candidate[0]))
    meta: dict[str, Any] = {}
    for hit in [richest] + [hit for _, _, hit in candidates if hit is not richest]:
        for key, value in (hit.meta or {}).items():
            meta.setdefault(key, value)
    meta.update(engine=answered[index].group.id, engineRank=rank,
                engineScore=item.scores[index])
    wire: dict[str, Any] = to_builtins(richest)
    wire.update(score=item.score, meta=meta)
    return wire


# ── capability views (§16.4) ───────────────────────────────────────────────

class _Absent:
    """Marks a value that has no common form across engines."""


_ABSENT = _Absent()


def _combine(values: Sequence[Any], *, union: bool) -> Any:
    """Union (what any engine offers) or intersection (what every engine offers) of values.

    Objects merge key by key (union: keys of any; intersection: keys of all); booleans
    or/and; numbers max/min; lists union/intersection; equal scalars stay; anything else
    has no common form and is dropped.
    """
    if not values:
        return {} if union else _ABSENT
    if all(isinstance(value, dict) for value in values):
        keys: list[str] = []
        for value in values:
            keys += [key for key in value if key not in keys]
        merged = {}
        for key in keys:
            present = [value[key] for value in values if key in value]
            if not union and len(present) < len(values):
                continue
            combined = _combine(present, union=union)
            if combined is not _ABSENT:
                merged[key] = combined
        return merged
    if all(isinstance(value, bool) for value in values):
        return any(values) if union else all(values)
    if all(isinstance(value, int | float) and not isinstance(value, bool) for value in values):
        return max(values) if union else min(values)
    if all(isinstance(value, list) for value in values):
        if union:
            items: list[Any] = []
            for value in values:
                items += [item for item in value if item not in items]
            return items
        return [item for item in values[0] if all(item in value for value in values[1:])]
    if all(value == values[0] for value in values):
        return values[0]
    return _ABSENT

