"""The aggregator gateway: an RCP server whose engine is a :class:`Federation` (§16, §7.13).

What it advertises, decided once when it is built (§13.2), from the engines it could
reach then:

- ``catalog`` ``{engines: n}`` (n = logical engines in the registry), answered by
  ``catalog/list`` with ``endpoint`` only for engines configured with ``expose``;
- ``retrieve``: the federated retrieve. Its metadata is the union (§16.4) of the engines'
  ``maxK``, ``modes``, ``units``, ``levels``, ``modalities``, ``mmr``, ``rerankBuiltin``,
  ``tokenBudget`` and ``confidence``: a request is forwarded only to the engines that
  accept its options (the others are skipped with a note), so any option some engine
  serves is servable. ``fusion`` lists the three §16.3 strategies the gateway runs across
  engines (``retrieve.fusion`` selects among them; it is not forwarded). Hit scores are
  fused scores, hence ``scoreScale: "unbounded"`` and ``scoreFloor: 0.0`` (every
  strategy sums non-negative terms). ``retrieve`` is advertised unless every engine was
  reachable and none offers it;
- ``filter``: the union of the engines' filter fields/operators (not advertised when
  engines mix the list and the object form of ``fields``);
- ``embed`` and ``rerank``: the metadata of the first engine (registry order) offering
  them; the calls are forwarded to that engine.

Hop budget (§16.2): a request without ``_meta.federation`` starts with depth 3. A
request at depth 0, or whose path already holds this gateway's identity, is not
forwarded (an empty answer with a note). Otherwise engines get ``depth - 1`` and the path
with this gateway's identity appended; engines already on the path are skipped.

The federation's connections live on a private event-loop thread, so the gateway can
connect to its engines before it serves and then be served by any transport.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..protocol.codec import to_builtins
from ..protocol.types import EmbedParams, RerankParams, RetrieveParams
from ..server.context import Context
from ..server.framework import Server
from .federation import FUSION_METHODS, Federation, Hop
from .registry import Registry

__all__ = ["GatewayServer", "build_gateway"]

T = TypeVar("T")

_FORWARDED_RETRIEVE_KEYS = ("maxK", "modes", "units", "levels", "modalities", "mmr",
                            "rerankBuiltin", "tokenBudget", "confidence")


class _LoopThread:
    """An event loop on a daemon thread; coroutines are submitted from any loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="rcpkit-federation")
        self._thread.start()

    def run_blocking(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the thread; cancelling the caller cancels it there too."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class GatewayServer(Server):
    """The gateway :class:`Server`; :meth:`close` disconnects its engines."""

    def __init__(self, identity: str, version: str, federation: Federation,
                 runtime: _LoopThread, startup_notes: list[str]) -> None:
        super().__init__(name=identity, version=version, conformance="L0")
        self.identity = identity
        self.federation = federation
        self.startup_notes = startup_notes
        """One line per engine that could not be reached while building the gateway."""
        self._runtime = runtime

    def close(self) -> None:
        """Close every engine connection and stop the federation thread (idempotent)."""
        if self._runtime.loop.is_closed():
            return
        self._runtime.run_blocking(self.federation.close())
        self._runtime.stop()


def build_gateway(registry: Registry, *, identity: str, version: str = "1.0",
                  federation: Federation | None = None) -> GatewayServer:
    """Connect to the registry's engines and return the gateway server (blocking).

    ``identity`` is the gateway's server name and its entry in ``_meta.federation.path``;
    pass a configured ``federation`` to tune deadlines, headroom or the connector.
    """
    federation = federation or Federation(registry)
    runtime = _LoopThread()
    notes = runtime.run_blocking(federation.connect())
    gateway = GatewayServer(identity, version, federation, runtime, notes)
    for key, meta in _capabilities(federation, len(registry.engines)).items():
        gateway.capability(key, meta)
    _register_methods(gateway)
    return gateway


def _capabilities(federation: Federation, engine_count: int) -> dict[str, Any]:
    union = federation.union().to_wire()
    capabilities: dict[str, Any] = {"catalog": {"engines": engine_count}}
    if "retrieve" in union or federation.unreachable:
        engines_retrieve = union.get("retrieve") or {}
        capabilities["retrieve"] = {
            **{key: engines_retrieve[key] for key in _FORWARDED_RETRIEVE_KEYS
               if key in engines_retrieve},
            "fusion": list(FUSION_METHODS), "scoreScale": "unbounded", "scoreFloor": 0.0}
    if "fields" in union.get("filter", {}):  # absent when list and object forms mix
        capabilities["filter"] = union["filter"]
    for key in ("embed", "rerank"):
        client = federation.first_capable(key)
        if client is not None:
            capabilities[key] = client.capabilities.to_wire()[key]
    return capabilities


def _register_methods(gateway: GatewayServer) -> None:
    federation, runtime = gateway.federation, gateway._runtime

    async def retrieve(params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        hop = _next_hop(Hop.from_meta(params.meta), gateway.identity)
        if isinstance(hop, str):
            return {"hits": [], "usage": {"candidates": 0, "notes": [hop, *ctx.notes]}}
        result = await runtime.run(federation.retrieve(params, deadline_ms=ctx.remaining_ms,
                                                       hop=hop))
        if ctx.notes:
            usage = result["usage"]
            usage["notes"] = [*ctx.notes, *usage.get("notes", ())]
        return result

    async def catalog_list(params: Any, ctx: Context) -> dict[str, Any]:
        return {"engines": await runtime.run(federation.catalog())}

    async def forward(params: EmbedParams | RerankParams, ctx: Context) -> dict[str, Any]:
        wire = to_builtins(params)
        wire.pop("_meta", None)
        return await runtime.run(federation.forward(ctx.method, wire,
                                                    deadline_ms=ctx.remaining_ms))

    gateway.add_method("catalog/list", catalog_list)
    if "retrieve" in gateway.capabilities:
        gateway.add_method("retrieve", retrieve)
    for method in ("embed", "rerank"):
        if method in gateway.capabilities:
            gateway.add_method(method, forward)


def _next_hop(received: Hop | None, identity: str) -> Hop | str:
    """The hop to forward with, or the note explaining why nothing is forwarded (§16.2)."""
    hop = received or Hop()
    if identity in hop.path:
        return (f"cycle: gateway {identity!r} is already on the federation path "
                f"{list(hop.path)}; not forwarded")
    if hop.depth <= 0:
        return f"hop budget exhausted (_meta.federation.depth 0); {identity!r} did not forward"
    return Hop(hop.depth - 1, (*hop.path, identity))
