"""The server framework: a handler registry plus a small decorator facade.

::

    server = Server(name="my-engine", version="1.0", conformance="L1")
    server.capability("retrieve", {"maxK": 100, "modes": ["dense"]})

    @server.method("retrieve")
    async def retrieve(params: RetrieveParams, ctx: Context) -> dict: ...

Core methods (§7) receive params decoded by ``protocol.types.decode_params``;
vendor methods ``x-<vendor>/<name>`` (§6.2) receive the raw params object, or
a msgspec Struct when one is given as ``params=``. Synchronous handlers run in
a worker thread, coroutine functions on the event loop. ``initialize``,
``info``, ``ping`` and ``shutdown`` are built in (§7.1, §7.2, §7.12, §7.15).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from ..protocol.errors import UsageError
from ..protocol.lifecycle import PROTOCOL_VERSION
from ..protocol.methods import ALWAYS_ALLOWED, is_core, is_vendor
from .line import Line

if TYPE_CHECKING:
    from .context import Context

__all__ = ["Conformance", "Handler", "Server", "Stage", "StageObserver"]

Conformance = Literal["L0", "L1", "L2"]
F = TypeVar("F", bound=Callable[..., Any])
StageObserver = Callable[[str, str, float], None]
"""``observe(method, stage, seconds)``."""
Stage = tuple[str, float, float]
"""``(name, started, seconds)``, ``started`` on the :func:`time.perf_counter` clock."""

logger = logging.getLogger("rcpkit.server")


@dataclass(frozen=True, slots=True)
class Handler:
    """One registered method: the callable and how to call it."""

    method: str
    fn: Callable[..., Any]
    is_async: bool
    params_type: type[msgspec.Struct] | None = None
    """For vendor methods: the Struct their params are converted to (None: raw object)."""


class Server:
    """Identity, capabilities and handlers of one RCP server; transports serve it.

    The capability set may be changed until the server starts serving; a session
    freezes the set it was initialized with (§13.2).
    """

    def __init__(self, name: str, version: str, conformance: Conformance = "L0") -> None:
        if conformance not in ("L0", "L1", "L2"):
            raise UsageError(f"conformance must be L0, L1 or L2, not {conformance!r}")
        self.name = name
        self.version = version
        self.conformance = conformance
        self.capabilities: dict[str, Any] = {}
        """Advertised capabilities in wire form: key → metadata object (§6)."""
        self.revision = 0
        """Bumped by every :meth:`capability` call, so caches of the set know it changed."""
        self.multiprocess_safe = False
        """True declares that no request changes in-memory state a later request reads (or
        that such state is shared through a store), so HTTP may serve N copies in N
        processes (``rcpkit serve --workers``, stateless sessions only)."""
        self.handlers: dict[str, Handler] = {}
        self.ordered: frozenset[str] = frozenset()
        """Methods whose calls run one at a time in arrival order (:meth:`in_arrival_order`)."""
        self.line = Line()
        """The place in line of each call of an :attr:`ordered` method."""
        self.stage_observers: list[StageObserver] = []
        """Told the wall time of each stage a handler reports (:meth:`stage_done`)."""

    # ── capabilities (§6) ───────────────────────────────────────────────────
    def capability(self, key: str, meta: Mapping[str, Any] | msgspec.Struct | None = None) -> None:
        """Advertise capability ``key`` with its metadata (a dict or a typed Struct)."""
        wire = msgspec.to_builtins(meta) if isinstance(meta, msgspec.Struct) else dict(meta or {})
        self.capabilities[key] = wire
        self.revision += 1

    def refresh(self) -> None:
        """Hook run before a stateless request is gated: a server whose capabilities or
        state can change outside this process (another worker's writes) updates them here,
        through :meth:`capability`. The default does nothing."""

    def readiness(self) -> str | None:
        """Why this server cannot answer requests now, or None when it can: the readiness
        probe of an orchestrator (``/readyz`` over HTTP). The default asks :meth:`refresh`,
        which a server keeping its state in a store answers by querying it, so a store that
        does not answer makes the server not ready. A server that opens its indexes before it
        is served (the engine) has them loaded whenever this is asked."""
        try:
            self.refresh()
        except Exception:
            logger.warning("readiness check failed", exc_info=True)
            return "the server's store does not answer"
        return None

    def stage_done(self, ctx: Context, stages: Iterable[Stage]) -> None:
        """The handler of ``ctx`` ran these stages (the retrieve pipeline's recall, fuse…;
        a write's prepare, embed…): tell the observers, e.g. the latency histograms of
        ``--metrics``, and make them child spans of the request's trace, if any."""
        observers = self.stage_observers
        if observers:
            method = ctx.method
            for name, _started, seconds in stages:
                for observe in observers:
                    observe(method, name, seconds)
        if ctx.trace is not None:
            ctx.trace.stages(stages)

    def gauges(self) -> Mapping[str, float]:
        """Operational sizes to expose as metrics (index rows, background work left…),
        named in snake_case; read when metrics are scraped. The default has none."""
        return {}

    # ── handlers ────────────────────────────────────────────────────────────
    def in_arrival_order(self, *methods: str) -> None:
        """Run the calls of ``methods`` one at a time, in the order this process received
        them over every connection (writes: a pipelined write never commits before an
        earlier one, §7.10); they still run beside calls of other methods."""
        self.ordered = self.ordered | frozenset(methods)

    def add_method(self, method: str, fn: Callable[..., Any], *,
                   params: type[msgspec.Struct] | None = None) -> None:
        """Register ``fn(params, ctx)`` for ``method`` (the low-level form of :meth:`method`)."""
        if method in ALWAYS_ALLOWED:
            raise UsageError(f"{method!r} is built in and cannot be replaced")
        if not (is_core(method) or is_vendor(method)):
            raise UsageError(f"{method!r} is neither an RCP method (§7) nor a vendor method "
                             "named x-<vendor>/<name> (§6.2)")
        if params is not None and not is_vendor(method):
            raise UsageError("params= is only for vendor methods; core params are typed by §7")
        is_async = inspect.iscoroutinefunction(fn)
        self.handlers[method] = Handler(method, fn, is_async, params)

    def method(self, method: str, *,
               params: type[msgspec.Struct] | None = None) -> Callable[[F], F]:
        """Decorator form of :meth:`add_method`."""
        def register(fn: F) -> F:
            self.add_method(method, fn, params=params)
            return fn
        return register

    # ── identity (§7.1, §7.2) ───────────────────────────────────────────────
    def info_result(self, capabilities: Mapping[str, Any] | None = None,
                    version: int = PROTOCOL_VERSION,
                    session_token: str | None = None) -> dict[str, Any]:
        """The ``initialize``/``info`` result; ``_meta.session`` in HTTP token mode (§5.2)."""
        meta: dict[str, Any] = {"conformance": self.conformance}
        if session_token is not None:
            meta["session"] = session_token
        return {"protocolVersion": version,
                "server": {"name": self.name, "version": self.version},
                "capabilities": dict(self.capabilities if capabilities is None else capabilities),
                "_meta": meta}
