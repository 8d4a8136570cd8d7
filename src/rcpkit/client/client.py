"""``AsyncClient``: a typed, capability-gated handle on one RCP engine (§7, §14.4).

Connecting runs ``initialize`` and caches the capabilities (§7.1, §13.2). Each
typed method checks locally, before any I/O, that the method and its options
were advertised (the same :mod:`rcpkit.protocol.gating` rules the server
applies) and raises :class:`UsageError` otherwise, unless the client was opened
with ``strict=False``. Results are decoded into the shared
:mod:`rcpkit.protocol.types` types; vectors become float32 numpy arrays
whatever their wire encoding (§7.3.1), and the client asks for ``f32-base64``
whenever the server advertises it.

Keyword options are typed (:class:`RetrieveOptions`, :class:`EmbedOptions`, …,
all with :class:`CallOptions`' ``meta`` and ``extra``) and sent as wire params: a
top-level ``snake_case`` name is camel-cased (``candidate_k`` → ``candidateK``,
``meta`` → ``_meta``); nested objects use wire names (``mmr={"lambda": 0.5}``); a
§8 filter may be a builder expression (``eq("lang", "en") & gte("year", 2020)``);
``extra`` params go as given (a vendor's ``x-<vendor>/…`` option, §6.2).

The §7 methods are written once (:class:`_Methods`): the client runs each call
at once, and :meth:`AsyncClient.batch` queues the same calls, with the same
pre-flight and decoding, for one JSON-RPC batch frame (§11, :class:`Batch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import difflib
import logging
import shlex
import ssl
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack

import msgspec

from .. import __version__
from ..protocol import filters
from ..protocol.capabilities import Capabilities
from ..protocol.codec import convert, to_builtins
from ..protocol.errors import (
    CapabilityMissing,
    InvalidParams,
    InvalidRequest,
    NotInitialized,
    OptionUnsupported,
    ProtocolViolation,
    RcpError,
    UnknownMethod,
    UsageError,
    VersionMismatch,
)
from ..protocol.lifecycle import PROTOCOL_VERSION
from ..protocol.methods import (
    ALWAYS_ALLOWED,
    PARAMS,
    capability_for,
    check_options,
    decode_result,
)
from ..protocol.types import (
    CatalogListResult,
    EmbedResult,
    FeedbackResult,
    FusionOptions,
    GraphResult,
    Hit,
    IndexAddResult,
    IndexDeleteResult,
    InitializeResult,
    MemoryBuildResult,
    MemoryRecallResult,
    MmrOptions,
    MultiEmbedResult,
    PeerInfo,
    PingResult,
    ProgressParams,
    Query,
    Recency,
    RerankOptions,
    RerankResult,
    RetrieveParams,
    RetrieveResult,
    ShutdownResult,
    SparseEmbedResult,
    TransformResult,
    check_funnel,
)
from .retry import NO_RETRY, RetryPolicy, is_retry_safe
from .session import LogHandler, Outgoing, ProgressCallback, RpcSession, Transport
from .transports import HttpTransport, StdioTransport

__all__ = ["AsyncClient", "Batch", "CallOptions", "EmbedOptions", "GraphOptions", "ProgressEvent",
           "RerankCallOptions", "RetrieveOptions", "Stream", "connect_http", "connect_stdio"]

_log = logging.getLogger("rcpkit.client")
_F32 = "f32-base64"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """One ``notifications/progress`` frame (§9); ``hits`` are the typed ``partial.hits``."""

    progress: float | None
    stage: str | None = None
    message: str | None = None
    hits: list[Hit] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, params: dict[str, Any]) -> ProgressEvent:
        """Tolerant: a malformed frame still yields an event (progress is advisory, §14.4)."""
        try:
            typed = convert(params, ProgressParams)
        except InvalidParams:
            return cls(progress=None, raw=params)
        partial = typed.partial or {}
        hits = None
        if isinstance(partial.get("hits"), list):
            with contextlib.suppress(ProtocolViolation):
                hits = decode_result("retrieve", {"hits": partial["hits"]}).hits
        return cls(typed.progress, typed.stage, typed.message, hits, params)


OnProgress = Callable[[ProgressEvent], None]


class CallOptions(TypedDict, total=False):
    """The keyword options every §7 method takes (``None`` leaves one out): ``meta`` is the
    request's ``_meta`` (§4.4, e.g. an ``idempotencyKey``, §7.10); ``extra`` holds params
    sent as given, e.g. a vendor's ``x-<vendor>/…`` option (§6.2)."""

    meta: Mapping[str, Any] | None
    extra: Mapping[str, Any] | None


class EmbedOptions(CallOptions, total=False):
    """``embed`` / ``embed_multi`` options (§7.3, §7.5); ``encoding`` defaults to
    ``f32-base64`` when advertised."""

    encoding: str | None
    strict: bool


class RerankCallOptions(CallOptions, total=False):
    """``rerank`` options (§7.6)."""

    model: str | None


class GraphOptions(CallOptions, total=False):
    """``graph`` options (§7.9)."""

    seed_ids: Sequence[str] | None
    hops: int | None
    level: int | None
    session_id: str | None
    cursor: str | None
    index_version: str | None


class RetrieveOptions(CallOptions, total=False):
    """The keyword options of :meth:`AsyncClient.retrieve` (§7.7), in ``snake_case``.

    Nested objects take a Struct of :mod:`rcpkit.protocol.types` or a mapping with
    wire names (``fusion={"method": "rrf", "rrfK": 60}``); ``filter`` takes a builder
    expression (§8) or its wire form.
    """

    mode: str | None
    modality: str | None
    candidate_k: int | None
    fusion: FusionOptions | Mapping[str, Any] | None
    rerank: RerankOptions | Mapping[str, Any] | Literal[False] | None
    mmr: MmrOptions | Mapping[str, Any] | None
    rewrite: str | Literal[False] | None
    filter: filters.FilterNode | Mapping[str, Any] | None
    min_score: float | None
    recency: Recency | Mapping[str, Any] | None
    unit: str | None
    level: int | None
    token_budget: int | None
    session_id: str | None
    include_text: bool
    include_vectors: bool
    seed: int | None
    index_version: str | None
    strict: bool
    cursor: str | None
    encoding: str | None


class Stream(Generic[T]):
    """``async for event in stream`` yields :class:`ProgressEvent`; then ``stream.result``.

    The request starts at the first iteration; cancelling the iterating task
    cancels the request (§7.14).
    """

    def __init__(self, start: Callable[[OnProgress], Awaitable[T]]) -> None:
        self._start = start
        self._events: asyncio.Queue[ProgressEvent] = asyncio.Queue()
        self._task: asyncio.Future[T] | None = None
        self._done = False

    @property
    def result(self) -> T:
        """The final, authoritative result (§9); raises the call's error if it failed."""
        if self._task is None or not self._task.done():
            raise UsageError("iterate the stream to its end before reading its result")
        return self._task.result()

    def __aiter__(self) -> Stream[T]:
        return self

    async def __anext__(self) -> ProgressEvent:
        if self._done:
            raise StopAsyncIteration
        if self._task is None:
            self._task = asyncio.ensure_future(self._start(self._events.put_nowait))
        if self._events.empty() and not self._task.done():
            waiter = asyncio.ensure_future(self._events.get())
            racers: set[asyncio.Future[Any]] = {waiter, self._task}
            try:
                await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                self._task.cancel()
                raise
            finally:
                waiter.cancel()
            if waiter.done() and not waiter.cancelled():
                return waiter.result()
        if not self._events.empty():
            return self._events.get_nowait()
        self._done = True
        self._task.result()  # the call's error, if any, ends the iteration
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Abandon the request (sends ``notifications/cancel`` when it is in flight)."""
        self._done = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RcpError):
                await self._task


@dataclass(frozen=True, slots=True)
class _Call:
    """One logical call before any I/O: what :class:`AsyncClient` sends at once and
    :class:`Batch` queues. ``parts`` are the keyword options of each request it takes
    (several when ``embed`` splits at the advertised ``batchLimit``); ``merge``
    combines the parts' decoded results. A ``raw`` call (:meth:`_Methods.call`) has
    wire params and a raw result, and only its method is gated."""

    method: str
    parts: list[Mapping[str, Any]]
    deadline_ms: int | None = None
    on_progress: OnProgress | None = None
    raw: bool = False
    merge: Callable[[list[Any]], Any] | None = None

    def decode(self, result: dict[str, Any]) -> Any:
        """The typed result (§7), vectors as float32 numpy arrays (§7.3.1)."""
        return result if self.raw else _numpy_vectors(decode_result(self.method, result))

    def combine(self, results: list[Any]) -> Any:
        return self.merge(results) if self.merge is not None else results[0]


class _Methods(ABC):
    """The §7 methods, written once: :class:`AsyncClient` runs each call now,
    :class:`Batch` queues it for one batch frame (§11). See the module docstring for
    how keyword options become wire params."""

    capabilities: Capabilities

    @abstractmethod
    def _dispatch(self, call: _Call) -> Awaitable[Any]:
        """Run or queue ``call``; the awaitable yields its (typed) result."""

    def call(self, method: str, params: Mapping[str, Any] | None = None, *,
             deadline_ms: int | None = None,
             on_progress: OnProgress | None = None) -> Awaitable[dict[str, Any]]:
        """Any method with raw params and a raw result; only the method itself is gated."""
        return self._dispatch(_Call(method, [dict(params or {})], deadline_ms, on_progress,
                                    raw=True))

    def info(self, *, deadline_ms: int | None = None) -> Awaitable[InitializeResult]:
        """§7.2."""
        return self._dispatch(_Call("info", [{}], deadline_ms))

    def ping(self, nonce: str | int | None = None, *,
             deadline_ms: int | None = None) -> Awaitable[PingResult]:
        """§7.15."""
        return self._dispatch(_Call("ping", [{"nonce": nonce}], deadline_ms))

    def shutdown(self, *, deadline_ms: int | None = None) -> Awaitable[ShutdownResult]:
        """§7.12 (closing the client is enough over stdio: EOF is a shutdown)."""
        return self._dispatch(_Call("shutdown", [{}], deadline_ms))

    def embed(self, inputs: Sequence[Any], *, kind: str | None = None,
              deadline_ms: int | None = None, on_progress: OnProgress | None = None,
              **options: Unpack[EmbedOptions]) -> Awaitable[EmbedResult]:
        """§7.3; ``result.vectors`` is a float32 ``(n, d)`` array.

        More inputs than the advertised ``embed.batchLimit`` are sent as several
        requests (§4.7: advertised bounds are authoritative): one after the other,
        or as several members of a batch.
        """
        _check_option_names("embed", options, EmbedOptions)
        embed = self.capabilities.embed
        encoding = _F32 if embed and _F32 in (embed.encodings or ()) else None
        items = list(inputs)
        limit = (embed.batch_limit if embed else None) or max(len(items), 1)
        parts: list[Mapping[str, Any]] = [
            {"encoding": encoding, **options, "inputs": items[start:start + limit], "kind": kind}
            for start in range(0, max(len(items), 1), limit)]
        return self._dispatch(_Call("embed", parts, deadline_ms, on_progress,
                                    merge=_stack_embeddings))

    def embed_sparse(self, texts: Sequence[Any], *, kind: str | None = None,
                     deadline_ms: int | None = None, on_progress: OnProgress | None = None,
                     **options: Unpack[CallOptions]) -> Awaitable[SparseEmbedResult]:
        """§7.4."""
        _check_option_names("embed_sparse", options, CallOptions)
        wire = {**options, "texts": list(texts), "kind": kind}
        return self._dispatch(_Call("embed/sparse", [wire], deadline_ms, on_progress))

    def embed_multi(self, inputs: Sequence[Any], *, kind: str | None = None,
                    deadline_ms: int | None = None, on_progress: OnProgress | None = None,
                    **options: Unpack[EmbedOptions]) -> Awaitable[MultiEmbedResult]:
        """§7.5; ``result.matrices`` is a list of float32 ``(tokens, d)`` arrays."""
        _check_option_names("embed_multi", options, EmbedOptions)
        multi = self.capabilities.multi_vector
        encoding = _F32 if multi and _F32 in (multi.encodings or ()) else None
        wire = {"encoding": encoding, **options, "inputs": list(inputs), "kind": kind}
        return self._dispatch(_Call("embed/multi", [wire], deadline_ms, on_progress))

    def rerank(self, query: Any, passages: Sequence[Any], *, method: str | None = None,
               top_n: int | None = None, deadline_ms: int | None = None,
               on_progress: OnProgress | None = None,
               **options: Unpack[RerankCallOptions]) -> Awaitable[RerankResult]:
        """§7.6."""
        _check_option_names("rerank", options, RerankCallOptions)
        wire = {**options, "query": query, "passages": list(passages), "method": method,
                "topN": top_n}
        return self._dispatch(_Call("rerank", [wire], deadline_ms, on_progress))

    def retrieve(self, query: Query, k: int = 10, *, deadline_ms: int | None = None,
                 on_progress: OnProgress | None = None,
                 **options: Unpack[RetrieveOptions]) -> Awaitable[RetrieveResult]:
        """§7.7 with the options of :class:`RetrieveOptions`.

        ``k`` is pre-clamped to the advertised ``retrieve.maxK`` (§4.7).
        """
        _check_option_names("retrieve", options, RetrieveOptions)
        advertised = self.capabilities.retrieve
        if advertised is not None and advertised.max_k and isinstance(k, int):
            k = min(k, advertised.max_k)  # a k of the wrong type is refused by the pre-flight
        wire: dict[str, Any] = {**options, "query": query, "k": k}
        extra = options.get("extra") or {}
        if options.get("include_vectors", extra.get("includeVectors")) is True:
            embed = self.capabilities.embed
            if embed and _F32 in (embed.encodings or ()):
                wire.setdefault("encoding", _F32)
        return self._dispatch(_Call("retrieve", [wire], deadline_ms, on_progress))

    def transform(self, query: str, method: str, *, n: int | None = None,
                  deadline_ms: int | None = None,
                  **options: Unpack[CallOptions]) -> Awaitable[TransformResult]:
        """§7.8 ``query/transform``."""
        _check_option_names("transform", options, CallOptions)
        wire = {**options, "query": query, "method": method, "n": n}
        return self._dispatch(_Call("query/transform", [wire], deadline_ms))

    def graph(self, op: str, *, query: str | None = None, k: int | None = None,
              deadline_ms: int | None = None, on_progress: OnProgress | None = None,
              **options: Unpack[GraphOptions]) -> Awaitable[GraphResult]:
        """§7.9 with the options of :class:`GraphOptions`."""
        _check_option_names("graph", options, GraphOptions)
        wire = {**options, "op": op, "query": query, "k": k}
        return self._dispatch(_Call("graph", [wire], deadline_ms, on_progress))

    def index_add(self, documents: Sequence[Any], *, chunk: bool | None = None,
                  contextual: bool | None = None, deadline_ms: int | None = None,
                  on_progress: OnProgress | None = None,
                  **options: Unpack[CallOptions]) -> Awaitable[IndexAddResult]:
        """§7.10; retried after a failure only when every document has an ``id``."""
        _check_option_names("index_add", options, CallOptions)
        wire = {**options, "documents": list(documents), "chunk": chunk,
                "contextual": contextual}
        return self._dispatch(_Call("index/add", [wire], deadline_ms, on_progress))

    def index_delete(self, ids: Sequence[str], *, deadline_ms: int | None = None,
                     **options: Unpack[CallOptions]) -> Awaitable[IndexDeleteResult]:
        """§7.11 (idempotent, hence retried)."""
        _check_option_names("index_delete", options, CallOptions)
        return self._dispatch(_Call("index/delete", [{**options, "ids": list(ids)}],
                                    deadline_ms))

    def catalog_list(self, *, deadline_ms: int | None = None) -> Awaitable[CatalogListResult]:
        """§7.13."""
        return self._dispatch(_Call("catalog/list", [{}], deadline_ms))

    def feedback(self, signals: Sequence[Any], *, session_id: str | None = None,
                 query: str | None = None, deadline_ms: int | None = None,
                 **options: Unpack[CallOptions]) -> Awaitable[FeedbackResult]:
        """§7.16."""
        _check_option_names("feedback", options, CallOptions)
        wire = {**options, "signals": list(signals), "sessionId": session_id, "query": query}
        return self._dispatch(_Call("feedback", [wire], deadline_ms))

    def memory_build(self, documents: Sequence[Any] | None = None, *,
                     memory_id: str | None = None, scope: str | None = None,
                     deadline_ms: int | None = None, on_progress: OnProgress | None = None,
                     **options: Unpack[CallOptions]) -> Awaitable[MemoryBuildResult]:
        """§7.17 ``memory/build``."""
        _check_option_names("memory_build", options, CallOptions)
        wire = {**options, "documents": None if documents is None else list(documents),
                "memoryId": memory_id, "scope": scope}
        return self._dispatch(_Call("memory/build", [wire], deadline_ms, on_progress))

    def memory_recall(self, query: str, *, memory_id: str | None = None,
                      session_id: str | None = None, n: int | None = None,
                      deadline_ms: int | None = None,
                      **options: Unpack[CallOptions]) -> Awaitable[MemoryRecallResult]:
        """§7.17 ``memory/recall``."""
        _check_option_names("memory_recall", options, CallOptions)
        wire = {**options, "query": query, "memoryId": memory_id, "sessionId": session_id,
                "n": n}
        return self._dispatch(_Call("memory/recall", [wire], deadline_ms))


class AsyncClient(_Methods):
    """A connection to one RCP server. Open it with :func:`connect_stdio` / :func:`connect_http`.

    Every §7 method (:class:`_Methods`) returns an awaitable: ``await client.retrieve(q)``.
    """

    def __init__(self, session: RpcSession, *, strict: bool = True,
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.session = session
        self.strict = strict
        self.retry = retry
        self.init_result: InitializeResult | None = None
        self.capabilities = Capabilities()
        self._init_params: dict[str, Any] = {}
        self._min_version = 1
        self._init_timeout = 30.0

    @classmethod
    async def open(cls, transport: Transport, *, min_version: int = 1, strict: bool = True,
                   log_handler: LogHandler | None = None, log_level: str | None = "info",
                   timeout: float = 30.0, retry: RetryPolicy = RetryPolicy(),
                   client_info: Mapping[str, str] | None = None) -> AsyncClient:
        """Start ``transport`` and run ``initialize`` on it (§7.1)."""
        session = RpcSession(transport, log_handler=log_handler)
        await session.start()
        client = cls(session, strict=strict, retry=retry)
        client._init_params = {
            "protocolVersion": PROTOCOL_VERSION,
            "client": dict(client_info or {"name": "rcpkit", "version": __version__}),
            "capabilities": {"streaming": {}, **({"log": {}} if log_level else {})},
            **({"_meta": {"logLevel": log_level}} if log_level else {}),
        }
        client._min_version, client._init_timeout = min_version, timeout
        try:
            await client._initialize()
        except BaseException:
            await session.close()
            raise
        return client

    async def _initialize(self) -> None:
        deadline_ms = round(self._init_timeout * 1000)
        try:
            raw = await self.session.request("initialize", self._init_params,
                                             deadline_ms=deadline_ms)
        except InvalidRequest:
            # A single-session HTTP server (§5.2, e.g. the reference SDK's) that another
            # client already initialised refuses a second initialize (§13); its
            # session is live, so the capabilities come from ``info`` (§7.2).
            if not isinstance(self.session.transport, HttpTransport):
                raise
            raw = await self.session.request("info", {}, deadline_ms=deadline_ms)
        min_version = self._min_version
        result: InitializeResult = decode_result("initialize", raw)
        if result.protocol_version < min_version:
            raise VersionMismatch(f"the server negotiated RCP/{result.protocol_version}, below "
                                  f"this client's minimum RCP/{min_version} (§7.1)")
        self.init_result = result
        self.capabilities = Capabilities.from_wire(result.capabilities)
        token = (result.meta or {}).get("session")
        if isinstance(token, str) and isinstance(self.session.transport, HttpTransport):
            self.session.transport.session_token = token

    # ── identity ─────────────────────────────────────────────────────────────

    @property
    def server(self) -> PeerInfo:
        assert self.init_result is not None
        return self.init_result.server

    @property
    def protocol_version(self) -> int:
        assert self.init_result is not None
        return self.init_result.protocol_version

    @property
    def is_closed(self) -> bool:
        """True once the transport died or the client was closed (§13.1)."""
        return self.session.is_closed

    @property
    def conformance(self) -> str | None:
        """The level the server claims in ``_meta.conformance`` (§14), if any."""
        level = ((self.init_result.meta if self.init_result else None) or {}).get("conformance")
        return level if isinstance(level, str) else None

    # ── raw access ───────────────────────────────────────────────────────────

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Send a notification (§4.5)."""
        await self.session.notify(method, params)

    def retrieve_stream(self, query: Query, k: int = 10, *, deadline_ms: int | None = None,
                        **options: Unpack[RetrieveOptions]) -> Stream[RetrieveResult]:
        """§9: ``async for event in client.retrieve_stream(q)`` then ``stream.result``."""
        _check_option_names("retrieve_stream", options, RetrieveOptions)
        return Stream(lambda on_progress: self.retrieve(
            query, k, deadline_ms=deadline_ms, on_progress=on_progress, **options))

    def batch(self, *, deadline_ms: int | None = None) -> Batch:
        """Queue calls to send them as one JSON-RPC batch frame (§11); see :class:`Batch`."""
        return Batch(self, deadline_ms=deadline_ms)

    # ── lifecycle ────────────────────────────────────────────────────────────

    async def close(self) -> None:
        """Close the connection (a stdio child is stopped: EOF, wait, terminate, kill)."""
        transport = self.session.transport
        if isinstance(transport, HttpTransport) and transport.session_token and \
                not self.session.is_closed:
            with contextlib.suppress(RcpError):  # release the server-side session
                await self.session.request("shutdown", {}, deadline_ms=2000)
        await self.session.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ── internals ────────────────────────────────────────────────────────────

    def _dispatch(self, call: _Call) -> Awaitable[Any]:
        return self._run(call)

    async def _run(self, call: _Call) -> Any:
        """Pre-flight every part, then send them one after the other, with retries."""
        wires = [self._prepare(call, part) for part in call.parts]
        callback = _progress_callback(call.on_progress)
        return call.combine([call.decode(await self._send(call.method, wire, call.deadline_ms,
                                                          callback))
                             for wire in wires])

    def _prepare(self, call: _Call, options: Mapping[str, Any]) -> dict[str, Any]:
        """Pre-flight before any I/O: gating, then the params' shape, funnel and options
        (§7.7, the same rules the server applies); a refusal is a :class:`UsageError`."""
        method = call.method
        self._require(method)
        if call.raw:
            return dict(options)
        wire = _wire_params(options)
        try:
            typed: Any = convert(wire, PARAMS[method])
            if isinstance(typed, RetrieveParams):
                check_funnel(typed)
            if self.strict:
                check_options(method, typed, self.capabilities)
        except (InvalidParams, OptionUnsupported, CapabilityMissing) as exc:
            detail = ", ".join(f"{key} {value!r}" for key, value in (exc.data or {}).items())
            raise UsageError(f"{method}: {exc.message}" + (f" ({detail})" if detail else ""),
                             code=exc.code, data=exc.data) from exc
        return wire

    def _require(self, method: str) -> None:
        """§6, §14.4: never call an unadvertised method (unless ``strict=False``)."""
        if not self.strict or method in ALWAYS_ALLOWED:
            return
        capability = capability_for(method)
        if capability is None:
            raise UsageError(f"{method!r} is not an RCP/1 method; extensions are named "
                             "x-<vendor>/<name> (§6.2)", code=UnknownMethod.code)
        if not self.capabilities.has(capability):
            raise UsageError(f"{self.server.name} does not advertise the {capability!r} "
                             f"capability, so {method!r} is unavailable (§6); connect with "
                             "strict=False to send it anyway", code=CapabilityMissing.code,
                             data={"capability": capability})

    async def _send(self, method: str, wire: dict[str, Any], deadline_ms: int | None,
                    callback: ProgressCallback | None) -> Any:
        """One request: retries per §12.2 within the overall deadline."""
        policy = self.retry if is_retry_safe(method, wire) else NO_RETRY
        loop = asyncio.get_running_loop()
        deadline = None if deadline_ms is None else loop.time() + deadline_ms / 1000
        attempt, reinitialized = 0, False
        while True:
            attempt += 1
            remaining = None if deadline is None else max(1, round((deadline - loop.time())
                                                                   * 1000))
            try:
                return await self.session.request(method, wire, deadline_ms=remaining,
                                                  on_progress=callback)
            except NotInitialized:
                # §12.2: an HTTP server lost our session (e.g. it expired): initialize, retry.
                if reinitialized or method in ALWAYS_ALLOWED or \
                        not isinstance(self.session.transport, HttpTransport):
                    raise
                reinitialized = True
                await self._initialize()
            except RcpError as exc:
                delay = None if self.session.is_closed else policy.delay_before_retry(exc,
                                                                                      attempt)
                if delay is None or (deadline is not None and loop.time() + delay >= deadline):
                    raise
                _log.info("%s failed (%s); retry %d in %.2fs", method, exc, attempt, delay)
                await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class _Queued:
    """A call queued in a batch: its members are ``[start, stop)``; ``future`` gets its result."""

    call: _Call
    future: asyncio.Future[Any]
    start: int
    stop: int

    def settle(self, outcomes: list[Any]) -> None:
        """Resolve the future from its members' outcomes (results, or errors)."""
        if self.future.done():  # its owner cancelled it
            return
        error = next((outcome for outcome in outcomes if isinstance(outcome, RcpError)), None)
        if error is None:
            try:
                result = self.call.combine([self.call.decode(outcome) for outcome in outcomes])
            except RcpError as exc:
                error = exc
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(error)


class Batch(_Methods):
    """Calls queued for ONE JSON-RPC batch frame (§11); open it with :meth:`AsyncClient.batch`.

    Every §7 method (and :meth:`call`) queues a request and returns an
    :class:`asyncio.Future` for its own result; :meth:`notify` queues a notification.
    ``await batch.send()`` — or leaving ``async with client.batch() as batch:`` —
    sends them as one frame: one NDJSON line over stdio, one ``POST <base>`` over HTTP.
    Then each future holds its own result or error; one member's error never fails
    the others. A call the client refuses before any I/O (gating, malformed params:
    :class:`UsageError`, as for a single call) fails its own future and is not sent.

    Semantics per member and per batch:

    - pre-flight and result decoding are the single call's (gating, §7.7 funnel,
      ``maxK`` pre-clamp, ``f32-base64``, an ``embed`` split at ``batchLimit`` into
      several members whose vectors are stacked again);
    - a member's ``deadline_ms`` travels as its ``_meta.deadlineMs`` (§13.1); the
      batch's ``deadline_ms`` is the default for its members and bounds the wait for
      the whole batch: when it elapses, the unanswered members fail with
      :class:`~rcpkit.protocol.errors.Timeout` and are cancelled server-side (§7.14);
    - cancelling the task awaiting :meth:`send` cancels the unanswered members
      server-side and their futures;
    - no §12.2 retries inside a batch: a retryable error is that member's outcome;
    - ``on_progress`` reaches members over stdio only (HTTP answers a batch with one
      buffered body, no SSE);
    - RCP/1 advertises no batch-size limit (§6); a server that caps batches refuses an
      oversized one whole (rcpkit: ``-32013`` with ``data.limit``), and every member
      then fails with that error: split the batch.

    Nothing is sent for an empty batch (§11 would make it ``-32600``); a batch of
    notifications only awaits no reply (HTTP 204). A batch is sent once.
    """

    def __init__(self, client: AsyncClient, *, deadline_ms: int | None = None) -> None:
        self.capabilities = client.capabilities
        self.deadline_ms = deadline_ms
        self._client = client
        self._members: list[Outgoing] = []
        self._queued: list[_Queued] = []
        self._sent = False

    def __len__(self) -> int:
        """The members queued so far (requests and notifications)."""
        return len(self._members)

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Queue a notification (§4.5); it gets no reply."""
        self._check_unsent()
        self._members.append(Outgoing(method, params, notification=True))

    async def send(self) -> None:
        """Send the queued members as one frame (§11) and settle every future.

        Only cancellation propagates: any other failure, even of the transport
        (:class:`~rcpkit.protocol.errors.TransportClosed`), is each member's outcome.
        """
        self._check_unsent()
        self._sent = True
        if not self._members:
            return
        try:
            outcomes = await self._client.session.batch(self._members,
                                                        deadline_ms=self.deadline_ms)
        except asyncio.CancelledError:
            self._cancel_futures()
            raise
        except RcpError as exc:  # the frame could not be sent
            outcomes = [copy.copy(exc) for _ in self._members]
        for queued in self._queued:
            queued.settle(outcomes[queued.start:queued.stop])

    async def __aenter__(self) -> Batch:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        """Send on a clean exit; after an exception nothing is sent, the futures are cancelled."""
        if exc_type is None:
            await self.send()
        else:
            self._sent = True
            self._cancel_futures()

    def _dispatch(self, call: _Call) -> asyncio.Future[Any]:
        self._check_unsent()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            wires = [self._client._prepare(call, part) for part in call.parts]
        except UsageError as exc:
            future.set_exception(exc)
            return future
        start = len(self._members)
        callback = _progress_callback(call.on_progress)
        self._members.extend(Outgoing(call.method, wire, deadline_ms=call.deadline_ms,
                                      on_progress=callback) for wire in wires)
        self._queued.append(_Queued(call, future, start, len(self._members)))
        return future

    def _check_unsent(self) -> None:
        if self._sent:
            raise UsageError("this batch was already sent; open another with client.batch()")

    def _cancel_futures(self) -> None:
        for queued in self._queued:
            queued.future.cancel()


def _progress_callback(on_progress: OnProgress | None) -> ProgressCallback | None:
    """Raw ``notifications/progress`` params → typed :class:`ProgressEvent` (§9)."""
    if on_progress is None:
        return None
    return lambda params: on_progress(ProgressEvent.from_wire(params))


def _stack_embeddings(parts: list[EmbedResult]) -> EmbedResult:
    """One result for an ``embed`` sent in several requests (``batchLimit``, §7.3)."""
    if len(parts) == 1:
        return parts[0]
    import numpy as np

    return msgspec.structs.replace(parts[0], vectors=np.vstack([part.vectors for part in parts]))


def _check_option_names(method: str, options: Mapping[str, Any], accepted: Any) -> None:
    """Refuse a keyword option ``accepted`` (a TypedDict) does not name: a server ignores
    params it does not know (§4.6), so a misspelt one would otherwise pass unnoticed."""
    names: frozenset[str] = accepted.__required_keys__ | accepted.__optional_keys__
    unknown = sorted(set(options) - names)
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TypeError(f"{method}() got an unexpected keyword argument {unknown[0]!r}{hint}; "
                    f"it takes {', '.join(sorted(names))}, and params sent as given in "
                    "extra={...}")


def _camel(name: str) -> str:
    if name == "meta":
        return "_meta"
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _wire_params(options: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword options → wire params (camelCase keys, builder filters, no ``None`` values);
    the params in ``extra`` are taken as given, and a named option wins over them."""
    wire: dict[str, Any] = dict(options.get("extra") or {})
    for name, value in options.items():
        if value is None or name == "extra":
            continue
        if isinstance(value, filters.Condition | filters.All | filters.AnyOf | filters.Not):
            value = filters.to_wire(value)
        wire[_camel(name)] = value
    built: dict[str, Any] = to_builtins(wire)
    return built


def _numpy_vectors(result: Any) -> Any:
    """Wire vectors (json or f32-base64, §7.3.1) → float32 numpy arrays."""
    # numpy loads with the first result, not with the client: a process that only starts
    # one (an MCP bridge answering initialize) does not wait for it.
    from ..protocol.vectors import decode_vectors

    try:
        if isinstance(result, EmbedResult):
            return msgspec.structs.replace(result, vectors=decode_vectors(
                result.vectors, result.encoding or "json", result.dimension))
        if isinstance(result, MultiEmbedResult):
            matrices = [decode_vectors(matrix, result.encoding or "json", result.dimension,
                                       field=f"matrices[{index}]")
                        for index, matrix in enumerate(result.matrices)]
            return msgspec.structs.replace(result, matrices=matrices)
        hits = getattr(result, "hits", None)
        if hits and any(hit.vector is not None for hit in hits):
            return msgspec.structs.replace(result, hits=[_hit_vector(hit) for hit in hits])
    except InvalidParams as exc:
        raise ProtocolViolation(f"malformed vectors in the result: {exc.message}",
                                data=exc.data) from None
    return result


def _hit_vector(hit: Hit) -> Hit:
    if hit.vector is None:
        return hit
    import numpy as np

    from ..protocol.vectors import decode_vectors

    if isinstance(hit.vector, str):
        vector = decode_vectors([hit.vector], _F32, None, field="hits.vector")[0]
    else:
        vector = np.asarray(hit.vector, dtype=np.float32)
    return msgspec.structs.replace(hit, vector=vector)


async def connect_stdio(argv: Sequence[str] | str, env: Mapping[str, str] | None = None,
                        cwd: str | None = None, *, min_version: int = 1, strict: bool = True,
                        log_handler: LogHandler | None = None, log_level: str | None = "info",
                        timeout: float = 30.0, retry: RetryPolicy = RetryPolicy(),
                        client_info: Mapping[str, str] | None = None) -> AsyncClient:
    """Launch ``argv`` (a list, or a shell-style string) and initialize (§5.1, §7.1).

    ``env`` adds to the inherited environment. ``timeout`` bounds ``initialize``.
    """
    command = shlex.split(argv) if isinstance(argv, str) else list(argv)
    return await AsyncClient.open(StdioTransport(command, env=env, cwd=cwd),
                                  min_version=min_version, strict=strict,
                                  log_handler=log_handler, log_level=log_level, timeout=timeout,
                                  retry=retry, client_info=client_info)


async def connect_http(url: str, headers: Mapping[str, str] | None = None,
                       auth: str | tuple[str, str] | None = None, *,
                       min_version: int = 1, strict: bool = True,
                       log_handler: LogHandler | None = None, log_level: str | None = "info",
                       timeout: float = 30.0, retry: RetryPolicy = RetryPolicy(),
                       client_info: Mapping[str, str] | None = None,
                       ssl_context: ssl.SSLContext | None = None) -> AsyncClient:
    """Connect to ``url`` (the base, e.g. ``http://host:8080/rcp``) and initialize (§5.2).

    ``auth`` is a bearer token or a ``(user, password)`` pair; ``headers`` are sent
    on every request (e.g. an API key).
    """
    http = HttpTransport(url, headers=headers, auth=auth, ssl_context=ssl_context)
    return await AsyncClient.open(http, min_version=min_version, strict=strict,
                                  log_handler=log_handler, log_level=log_level, timeout=timeout,
                                  retry=retry, client_info=client_info)
