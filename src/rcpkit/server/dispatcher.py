"""The dispatcher: one per connection (or HTTP session); the only place errors become wire errors.

Per request, in this order (§12 precedence, §13):

0. the transport's ``authorize(caller, method, params)``, if any: authorisation comes
   before capability gating, so a caller without the right cannot probe for
   ``-32003`` vs ``-32004`` (§15.6);
1. admission by :meth:`Session.admit` — ``-32001``, repeated ``initialize``
   ``-32600``, ``-32004``, ``-32003``;
2. built-ins (``initialize``, ``info``, ``ping``, ``shutdown``) are answered
   inline, without a task, since they are cheap;
3. params decoding (``-32602`` with ``data.field``), then the funnel check and
   option gating (``-32005`` with ``data.option``);
4. the handler runs in its own task, bounded by a semaphore, under the
   request's deadline (``_meta.deadlineMs`` or the server default → ``-32014``)
   and cancellable by ``notifications/cancel`` (→ ``-32006``, §7.14).

Exactly one response per request; notifications are never answered (§4.5).
An :class:`RcpError` from a handler goes on the wire as is; any other
exception becomes ``-32603`` with a generic message and its traceback goes to
the ``rcpkit.server`` logger (stderr), never to the client.

Two ways to drive it:

- :meth:`Dispatcher.handle` — one complete frame in, the encoded reply out
  (``None`` when nothing is to be answered); used by the HTTP transport, which calls
  :meth:`Dispatcher.handle_now` to have a request no handler runs for answered at once.
- :meth:`Dispatcher.start` + :meth:`Dispatcher.feed` + :meth:`Dispatcher.drain`
  — a stream: replies are emitted as each request completes (stdio).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..interrupts import checked_by
from ..protocol import codec, messages
from ..protocol.capabilities import Capabilities
from ..protocol.errors import (
    Cancelled,
    InternalError,
    InvalidParams,
    InvalidRequest,
    PayloadTooLarge,
    RcpError,
    Timeout,
    UsageError,
)
from ..protocol.filters import FilterNode
from ..protocol.lifecycle import PROTOCOL_VERSION, Event, negotiate
from ..protocol.messages import Id, Invalid, Message, Notification, Request
from ..protocol.methods import CANCEL, PARAMS, decode_params, gate_options
from ..tracing import RequestTrace, Tracing, active
from .context import Context, Notify, ServerSession
from .framework import Handler, Server
from .line import Line, Place

__all__ = ["AdmitMember", "Authorize", "Dispatcher", "RequestObserver"]

logger = logging.getLogger("rcpkit.server")

Reply = dict[str, Any]
Emit = Callable[[bytes], None]
Headers = Mapping[bytes, bytes]
"""An HTTP request's headers, lower-case names."""
Authorize = Callable[[str | None, str, Mapping[str, Any]], None]
"""``authorize(caller, method, params)`` raises the :class:`RcpError` refusing the request."""
AdmitMember = Callable[[str | None], Callable[[], None]]
"""``admit_member(caller)`` admits one more request of a batch, before its authorisation:
it raises the :class:`RcpError` refusing it (``-32011`` over a rate or concurrency limit) or
returns what to call once the request is answered."""
RequestObserver = Callable[[str | None, int, float], None]
"""Told of every answered request: its method (None when the server has no such method),
the outcome code (0 for a result, else the §12 error code) and the seconds it took."""


def _id_key(id_: Any) -> tuple[type, Any]:
    """Ids compare by JSON type and value: ``1`` and ``"1"`` are different requests (§4.7)."""
    return (str, id_) if isinstance(id_, str) else (float, id_)


@dataclass(slots=True)
class _Call:
    """An in-flight request, findable by id for ``notifications/cancel``."""

    ctx: Context
    task: asyncio.Task[Reply] | None = None
    started: bool = False
    """Whether the task began running: a task cancelled before its first step would end
    without running any of its code, hence without a reply."""
    place: Place | None = None
    """Its place in the server's line, for a method run in arrival order; the call leaves
    the line when it ends, or at once if it never ran."""


class Dispatcher:
    """Turns frames into replies for one session. See the module docstring.

    ``stateless=True`` is the HTTP stateless session policy (§5.2): the session is
    implicitly initialized at the advertised capabilities, and ``initialize`` /
    ``info`` are answered idempotently without changing state.
    Without a connection, ids are not unique across stateless clients, so
    ``notifications/cancel`` is a no-op there (one client must not cancel
    another's request); HTTP clients abort by closing the connection instead.
    ``max_batch`` caps the members of one batch: a larger batch is refused as a
    whole with ``-32013`` PayloadTooLarge — the §12 code for "batch size", whose
    §12.2 retry advice (split it) is exactly what the client must do; ``-32602``
    would wrongly suggest the params themselves are malformed.
    ``admit_member`` admits each request of a batch after its first, as a transport that
    admitted the frame itself (which pays for the first) counts requests (§11, §15.5).
    """

    def __init__(self, server: Server, *, session: ServerSession | None = None,
                 stateless: bool = False, max_concurrency: int = 64,
                 request_timeout_ms: float | None = None, max_batch: int = 1024,
                 observer: RequestObserver | None = None, log_bodies: bool = False,
                 authorize: Authorize | None = None,
                 admit_member: AdmitMember | None = None, tracing: Tracing | None = None,
                 trace_attributes: Mapping[str, Any] | None = None) -> None:
        self.server = server
        self.authorize = authorize
        self.admit_member = admit_member
        self.observer = observer
        self.tracing = tracing if tracing is not None else active()
        """Spans of every request (:mod:`rcpkit.tracing`; by default the process's), None
        when tracing is off."""
        self.trace_attributes = dict(trace_attributes or {})
        """Set on every request's span (the collection served…)."""
        self.log_bodies = log_bodies
        """Whether a failure's log may quote the request's queries and documents (§15.6);
        off by default, when they are replaced by their length."""
        self.session = session or ServerSession()
        self.stateless = stateless
        self.request_timeout_ms = request_timeout_ms
        self.max_batch = max_batch
        self.closed = False
        """True once ``shutdown`` was answered (stream mode): the transport stops reading, and
        frames fed after it are ignored (§13.1); requests already in flight still finish."""
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._calls: dict[tuple[type, Any], _Call] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._emit: Emit | None = None
        self._caps_model: Capabilities | None = None
        self._caps_revision = 0
        self._begin_request: Callable[[Request, Notify | None, str | None, Headers | None],
                                      Reply | asyncio.Task[Reply]] = \
            self._admit_request if observer is None and self.tracing is None \
            else self._observed_request
        """How a request starts: chosen here, as the observer and tracing never change."""
        if stateless:
            self.session.protocol.version = PROTOCOL_VERSION
            self.session.protocol.capabilities = server.capabilities
            self.session.protocol.fire(Event.INITIALIZED)

    # ── frame-at-a-time API (HTTP) ──────────────────────────────────────────
    async def handle(self, data: bytes, *, notify: Notify | None = None,
                     path_method: str | None = None, caller: str | None = None,
                     headers: Headers | None = None) -> bytes | None:
        """Process one complete frame; return the encoded reply, or None if none is due.

        ``notify`` receives progress/log frames (HTTP SSE). ``path_method`` is the
        method named by the URL path; a body naming another method is ``-32600``
        (§5.2). Batches are only accepted without a path method. ``headers`` (HTTP, lower
        case) may carry the caller's trace context.
        """
        return await self.handle_message(messages.parse(data), notify=notify,
                                         path_method=path_method, caller=caller,
                                         headers=headers)

    async def handle_message(self, parsed: Message | list[Message], *,
                             notify: Notify | None = None, path_method: str | None = None,
                             caller: str | None = None,
                             headers: Headers | None = None) -> bytes | None:
        """:meth:`handle` for a frame already parsed by ``messages.parse``. ``caller`` names
        who sent it when the session is shared by several (:attr:`Context.caller`)."""
        outcome = self.handle_now(parsed, notify=notify, path_method=path_method,
                                  caller=caller, headers=headers)
        return outcome if outcome is None or isinstance(outcome, bytes) else await outcome

    def handle_now(self, parsed: Message | list[Message], *, notify: Notify | None = None,
                   path_method: str | None = None, caller: str | None = None,
                   headers: Headers | None = None) -> bytes | Awaitable[bytes | None] | None:
        """:meth:`handle_message` without a coroutine where none is needed: the encoded
        reply (or None) at once when no handler runs — built-ins, refusals, notifications —
        else an awaitable of it (the handler's task is already scheduled)."""
        outcome: Reply | asyncio.Task[Reply] | None
        if type(parsed) is Request:  # the usual case first
            outcome = (self._begin_request(parsed, notify, caller, headers)
                       if path_method is None or parsed.method == path_method
                       else _path_mismatch(parsed.id))
        elif isinstance(parsed, list):
            if path_method is not None:
                return self._encode(messages.error_response(
                    None, InvalidRequest("a batch must be posted to the base path")))
            started = self._begin_batch(parsed, notify, caller, headers)
            if isinstance(started, dict):
                return self._encode(started)
            return self._encode_batch(started)
        # (an Invalid or a Response has no method to compare)
        elif path_method is not None and isinstance(parsed, Notification) \
                and parsed.method != path_method:
            outcome = _path_mismatch(None)
        else:
            outcome = self._begin(parsed, notify, caller, headers)
            if outcome is None:
                return None
        return self._encode_task(outcome) if isinstance(outcome, asyncio.Task) \
            else self._encode(outcome)

    async def _encode_batch(self, outcomes: list[Reply | asyncio.Task[Reply] | None]
                            ) -> bytes | None:
        replies = await self._collect(outcomes)
        return self._encode(replies) if replies else None

    async def _encode_task(self, task: asyncio.Task[Reply]) -> bytes:
        return self._encode(await task)

    # ── stream API (stdio) ──────────────────────────────────────────────────
    def start(self, emit: Emit) -> None:
        """Set the sink for every outgoing frame (replies and notifications) in stream mode."""
        self._emit = emit

    def feed(self, frame: bytes, caller: str | None = None) -> None:
        """Schedule one received frame; replies go to the ``emit`` sink as they complete.
        ``caller`` names who sent it when the stream carries several callers' requests
        (:attr:`Context.caller`; None: the session's).

        Frames after a ``shutdown`` request are ignored (§13.1).
        """
        if self.closed:
            return
        emit = self._emit
        if emit is None:
            raise UsageError("call Dispatcher.start(emit) before feed()")
        parsed = messages.parse(frame)
        if isinstance(parsed, list):
            started = self._begin_batch(parsed, emit, caller)
            if isinstance(started, dict):
                self._emit_reply(started)
            else:
                self._spawn(self._emit_batch(started))
            return
        outcome = (self._begin_request(parsed, emit, caller, None) if type(parsed) is Request
                   else self._begin(parsed, emit, caller))
        if outcome is None:
            return
        if isinstance(outcome, asyncio.Task):
            outcome.add_done_callback(self._emit_task_reply)
        else:
            emit(self._encode(outcome))

    async def drain(self) -> None:
        """Wait until every in-flight request has been answered (EOF, §5.1)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ── core ────────────────────────────────────────────────────────────────
    def _begin(self, msg: Message, notify: Notify | None, caller: str | None = None,
               headers: Headers | None = None) -> Reply | asyncio.Task[Reply] | None:
        """Admit one message now; return its reply, a task computing it, or None."""
        if isinstance(msg, Request):
            return self._begin_request(msg, notify, caller, headers)
        if isinstance(msg, Invalid):
            return messages.error_response(msg.id, msg.error)
        if isinstance(msg, Notification) and msg.method == CANCEL:
            self._cancel(msg.params)
        # Other notifications (unknown `notifications/*` included) and stray responses
        # are ignored: they are never answered (§4.5).
        return None

    def _observed_request(self, req: Request, notify: Notify | None, caller: str | None,
                          headers: Headers | None) -> Reply | asyncio.Task[Reply]:
        """:meth:`_admit_request`, its outcome reported to the :attr:`observer` and traced
        by :attr:`tracing`, whichever is set."""
        observer, tracing = self.observer, self.tracing
        started = time.perf_counter()
        known = req.method if req.method in self.server.handlers or req.method in _BUILTINS \
            else None  # a client must not mint label values with made-up method names
        trace = None
        if tracing is not None:
            meta = req.params.get("_meta") if req.params is not None else None
            attributes = self.trace_attributes if caller is None \
                else {**self.trace_attributes, "rcp.principal": caller}
            trace = tracing.request(known or "unknown", headers, meta, attributes,
                                    bodies=self.log_bodies)
        outcome = self._admit_request(req, notify, caller, None, trace)

        def report(reply: Reply) -> None:
            error = reply.get("error")
            code = int(error["code"]) if error else 0
            if observer is not None:
                observer(known, code, time.perf_counter() - started)
            if trace is not None:
                trace.end(code)

        if isinstance(outcome, asyncio.Task):
            outcome.add_done_callback(
                lambda task: report(_CANCELLED if task.cancelled() else task.result()))
        else:
            report(outcome)
        return outcome

    def _admit_request(self, req: Request, notify: Notify | None, caller: str | None,
                       headers: Headers | None = None, trace: RequestTrace | None = None
                       ) -> Reply | asyncio.Task[Reply]:
        """Admit and start ``req`` (see the module docstring). ``headers`` serve only
        :meth:`_observed_request`, which passes the request's ``trace``."""
        method = req.method
        if method == CANCEL:
            return messages.error_response(req.id, InvalidRequest(
                "notifications/cancel is a notification and must not carry an id (§7.14)"))
        params = req.params if req.params is not None else {}
        if self.authorize is not None:
            try:
                self.authorize(caller, method, params)
            except RcpError as exc:
                return messages.error_response(req.id, exc)
        if not (self.stateless and method == "initialize"):
            protocol = self.session.protocol
            refusal = protocol.admit(method, protocol.capabilities or {}, self.server.handlers)
            if refusal is not None:
                return messages.error_response(req.id, refusal)
        if trace is not None:
            trace.lap("admit")
        builtin = _BUILTINS.get(method)
        try:
            if builtin is not None:
                return messages.success_response(req.id, builtin(self, params))
            handler = self.server.handlers[method]
            typed, notes, tree = self._decode(handler, params)
        except RcpError as exc:
            return messages.error_response(req.id, exc)
        if trace is not None:
            trace.lap("decode")
        meta = params.get("_meta")
        ctx = Context(request_id=req.id, method=method,
                      meta=meta if isinstance(meta, Mapping) else {}, session=self.session,
                      notify=notify, deadline=self._deadline(meta), notes=notes, filter=tree,
                      streaming="streaming" in (self.session.protocol.capabilities or {}),
                      caller=caller, trace=trace)
        call = _Call(ctx)
        if method in self.server.ordered:
            call.place = self.server.line.join()  # now, in the order the frames arrived
        call.task = task = asyncio.ensure_future(self._run(req, handler, typed, call))
        self._track(task)
        if req.id is not None and not self.stateless:
            self._calls[_id_key(req.id)] = call
        return task

    def _decode(self, handler: Handler,
                params: dict[str, Any]) -> tuple[Any, list[str], FilterNode | None]:
        """§12 order after admission: params and funnel (-32602), then options (-32005).

        Returns the typed params, the degrade notes of a ``strict: false`` request and
        the validated §8 filter tree.
        """
        if handler.params_type is not None:
            return codec.convert(params, handler.params_type), [], None
        if handler.method not in PARAMS:
            return params, [], None
        typed = decode_params(handler.method, params)  # includes the §3.3 funnel
        caps = self._capabilities()
        notes, tree = gate_options(handler.method, typed, caps)
        return typed, notes, tree

    def _capabilities(self) -> Capabilities:
        # A stateless session is the server's live set; a stateful one froze its copy (§13.2).
        if self.stateless:
            self.server.refresh()
        revision = self.server.revision if self.stateless else 0
        if self._caps_model is None or revision != self._caps_revision:
            self._caps_model = Capabilities.from_wire(self.session.protocol.capabilities or {})
            self._caps_revision = revision
        return self._caps_model

    async def _run(self, req: Request, handler: Handler, typed: Any, call: _Call) -> Reply:
        call.started = True
        ctx = call.ctx
        place = call.place
        try:
            if place is not None:
                ctx.check_cancelled()
                async with asyncio.timeout(_seconds_left(ctx.deadline)):
                    await place.turn
            async with self._semaphore:
                ctx.check_cancelled()
                async with asyncio.timeout(_seconds_left(ctx.deadline)):
                    if ctx.trace is None:
                        result = await self._invoke(handler, typed, call)
                    else:
                        with ctx.trace.activated():
                            result = await self._invoke(handler, typed, call)
            answer = _result_object(result)
            if ctx.trace is not None:
                answer = ctx.trace.stamp(answer)
            return messages.success_response(req.id, answer)
        except asyncio.CancelledError:
            if not ctx.cancelled:
                raise
            return messages.error_response(req.id, Cancelled())
        except TimeoutError:
            return messages.error_response(req.id, Timeout())
        except RcpError as exc:
            return messages.error_response(req.id, exc)
        except Exception as exc:
            logger.error("handler for %r failed (request id %r): %s", req.method, req.id,
                         _failure(exc, req.params, self.log_bodies))
            return messages.error_response(req.id, InternalError())
        finally:
            if place is not None and call.place is place:  # not handed to a worker thread
                self.server.line.leave(place)
            if req.id is not None:
                key = _id_key(req.id)
                if self._calls.get(key) is call:
                    del self._calls[key]

    async def _invoke(self, handler: Handler, typed: Any, call: _Call) -> Any:
        """Run the handler with the request's stop check installed, also in the worker
        thread of a synchronous one: cancelling the task does not stop that thread, its
        next :func:`rcpkit.interrupts.checkpoint` does. So that thread, not the task, leaves
        the line: the next call in line runs only once this one's work has ended."""
        ctx = call.ctx
        if handler.is_async:
            with checked_by(ctx.check_stop):
                return await handler.fn(typed, ctx)
        loop = asyncio.get_running_loop()
        place = call.place
        work = loop.run_in_executor(None, _run_checked, handler, typed, ctx,
                                    self.server.line if place is not None else None, place)
        if place is None:
            return await work  # a cancel may withdraw work still queued: it never runs
        call.place = None  # the worker thread leaves the line
        # Shielded: a cancel must not withdraw work still queued for a pool thread, which
        # would then never run and never leave the line; it runs, stops at its first check.
        work.add_done_callback(_retrieved)
        return await asyncio.shield(work)

    def _deadline(self, meta: Any) -> float | None:
        """The earliest of ``_meta.deadlineMs`` (time remaining, §16.2) and the server default."""
        budgets = [self.request_timeout_ms] if self.request_timeout_ms is not None else []
        requested = meta.get("deadlineMs") if isinstance(meta, Mapping) else None
        if isinstance(requested, int | float) and not isinstance(requested, bool) \
                and math.isfinite(requested):
            budgets.append(float(requested))
        if not budgets:
            return None
        return time.monotonic() + max(0.0, min(budgets)) / 1000.0

    def _cancel(self, params: Any) -> None:
        """§7.14: flag the call and interrupt its task; an unknown id is a no-op."""
        if not isinstance(params, Mapping) or not messages.is_valid_id(params.get("id")):
            return
        call = self._calls.get(_id_key(params["id"]))
        if call is None or call.ctx.cancelled:
            return
        call.ctx.cancel()
        # Not started yet: the flag alone makes it answer -32006 as soon as it runs.
        if call.started and call.task is not None:
            call.task.cancel()

    # ── batches (§11) ───────────────────────────────────────────────────────
    def _begin_batch(self, members: list[Message], notify: Notify | None,
                     caller: str | None = None, headers: Headers | None = None
                     ) -> list[Reply | asyncio.Task[Reply] | None] | Reply:
        """Admit every member now, in order (so an ``initialize`` or ``shutdown`` early in a
        batch governs the members after it); or refuse an oversized batch as a whole."""
        if len(members) > self.max_batch:
            return messages.error_response(None, PayloadTooLarge(
                f"a batch may hold at most {self.max_batch} messages",
                data={"limit": self.max_batch}))
        outcomes: list[Reply | asyncio.Task[Reply] | None] = []
        admit_each = False  # until the first request, which the frame's admission paid for
        for member in members:
            if isinstance(member, Invalid):
                # §11: a malformed member is answered with id null, whatever id it may carry.
                outcomes.append(messages.error_response(None, member.error))
            elif admit_each and isinstance(member, Request):
                outcomes.append(self._begin_member(member, notify, caller, headers))
            else:
                outcomes.append(self._begin(member, notify, caller, headers))
                if isinstance(member, Request):
                    admit_each = self.admit_member is not None
        return outcomes

    def _begin_member(self, req: Request, notify: Notify | None, caller: str | None,
                      headers: Headers | None) -> Reply | asyncio.Task[Reply]:
        """A batch's request after its first: admitted on its own, and held until answered."""
        assert self.admit_member is not None
        try:
            release = self.admit_member(caller)
        except RcpError as exc:
            return messages.error_response(req.id, exc)
        outcome = self._begin_request(req, notify, caller, headers)
        if isinstance(outcome, asyncio.Task):
            outcome.add_done_callback(lambda _: release())
        else:
            release()
        return outcome

    @staticmethod
    async def _collect(outcomes: list[Reply | asyncio.Task[Reply] | None]) -> list[Reply]:
        """The batch reply: one entry per request; empty when it held only notifications."""
        replies: list[Reply] = []
        for outcome in outcomes:
            if isinstance(outcome, asyncio.Task):
                replies.append(await outcome)
            elif outcome is not None:
                replies.append(outcome)
        return replies

    async def _emit_batch(self, outcomes: list[Reply | asyncio.Task[Reply] | None]) -> None:
        replies = await self._collect(outcomes)
        if replies:
            self._emit_reply(replies)

    # ── plumbing ────────────────────────────────────────────────────────────
    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, coro: Any) -> None:
        self._track(asyncio.ensure_future(coro))

    def _emit_task_reply(self, task: asyncio.Task[Reply]) -> None:
        if not task.cancelled():
            self._emit_reply(task.result())

    def _emit_reply(self, reply: Reply | list[Reply]) -> None:
        assert self._emit is not None
        self._emit(self._encode(reply))

    @staticmethod
    def _encode(reply: Reply | list[Reply]) -> bytes:
        """Encode a reply; a result that cannot be serialised becomes -32603 for its id."""
        try:
            return messages.encode(reply)
        except TypeError:
            members = reply if isinstance(reply, list) else [reply]
            safe = [_encodable(member) for member in members]
            return messages.encode(safe if isinstance(reply, list) else safe[0])


_CANCELLED: Reply = messages.error_response(None, Cancelled())
"""What a request whose task was cancelled before replying is reported as."""


def _path_mismatch(rid: Id | None) -> Reply:
    """§5.2: a body naming another method than the URL path does."""
    return messages.error_response(
        rid, InvalidRequest("the method in the body does not match the URL path"))


# ── built-in methods (§7.1, §7.2, §7.12, §7.15) ────────────────────────────

def _initialize(dispatcher: Dispatcher, params: dict[str, Any]) -> Reply:
    session = dispatcher.session.protocol
    server = dispatcher.server
    if dispatcher.stateless:
        return server.info_result(session.capabilities, negotiate(params))
    # The session keeps its own copy: later changes to the server do not reach it (§13.2).
    version = session.initialize(params, copy.deepcopy(server.capabilities))
    dispatcher._caps_model = None
    return server.info_result(session.capabilities, version, dispatcher.session.token)


def _info(dispatcher: Dispatcher, params: dict[str, Any]) -> Reply:
    session = dispatcher.session.protocol
    if session.ready:
        return dispatcher.server.info_result(session.capabilities, session.version or 1)
    return dispatcher.server.info_result()


def _ping(dispatcher: Dispatcher, params: dict[str, Any]) -> Reply:
    """§7.15: the nonce comes back as sent. A string or a number per the spec; a structured
    one is echoed too, unless it nests deeper than any echo needs (the encoder's limit)."""
    if "nonce" not in params:
        return {}
    nonce = params["nonce"]
    if _nests_deeper(nonce, _MAX_NONCE_DEPTH):
        raise InvalidParams(f"nonce nests more than {_MAX_NONCE_DEPTH} levels", field="nonce")
    return {"nonce": nonce}


_MAX_NONCE_DEPTH = 64


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether arrays/objects in ``value`` nest more than ``limit`` levels (no recursion)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            members = item.values() if isinstance(item, dict) else item
            pending.extend((member, depth + 1) for member in members)
    return False


def _shutdown(dispatcher: Dispatcher, params: dict[str, Any]) -> Reply:
    if not dispatcher.stateless:
        dispatcher.session.protocol.fire(Event.SHUTDOWN)
        dispatcher.closed = True
    return {}


_BUILTINS: dict[str, Callable[[Dispatcher, dict[str, Any]], Reply]] = {
    "initialize": _initialize, "info": _info, "ping": _ping, "shutdown": _shutdown}


def _encodable(reply: Reply) -> Reply:
    try:
        messages.encode(reply)
    except TypeError:
        logger.exception("the result for request id %r cannot be serialised", reply.get("id"))
        return messages.error_response(reply.get("id"), InternalError())
    return reply


def _failure(exc: BaseException, params: Any, with_bodies: bool) -> str:
    """The traceback of a handler failure, where any query or document text of the request
    (``params``) it quotes is replaced by its length, unless ``with_bodies`` (§15.6)."""
    text = "".join(traceback.format_exception(exc))
    if with_bodies:
        return text
    for body in sorted(_bodies(params), key=len, reverse=True):
        withheld = f"<{len(body)} characters withheld>"
        text = text.replace(body, withheld).replace(repr(body)[1:-1], withheld)
    return text


#: Params members holding the caller's queries and documents (§7): never logged as such.
_BODY_KEYS = frozenset({"query", "text", "texts", "inputs", "passages", "documents", "queries",
                        "content", "data"})


def _bodies(value: Any, inside: bool = False) -> set[str]:
    """The strings under a body key of ``value``, at any depth."""
    if isinstance(value, str):
        return {value} if inside and value else set()
    if isinstance(value, Mapping):
        found: set[str] = set()
        for key, item in value.items():
            found |= _bodies(item, inside or key in _BODY_KEYS)
        return found
    if isinstance(value, list):
        return set().union(*(_bodies(item, inside) for item in value)) if value else set()
    return set()


def _run_checked(handler: Handler, typed: Any, ctx: Context, line: Line | None = None,
                 place: Place | None = None) -> Any:
    try:
        with checked_by(ctx.check_stop):
            ctx.check_stop()  # cancelled or overdue while it waited for a thread
            return handler.fn(typed, ctx)
    finally:
        if line is not None and place is not None:
            line.leave(place)


def _retrieved(work: asyncio.Future[Any]) -> None:
    """Read the outcome of shielded work whose awaiter was cancelled, so it is not
    reported as never retrieved (the cancelled call has answered already)."""
    if not work.cancelled():
        work.exception()


def _seconds_left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _result_object(result: Any) -> dict[str, Any]:
    """A handler returns a dict, a Struct or None (→ ``{}``); a result is always an object."""
    if result is None:
        return {}
    if isinstance(result, msgspec.Struct):
        result = msgspec.to_builtins(result)
    if not isinstance(result, dict):
        raise TypeError(f"a handler must return an object, not {type(result).__name__}")
    return result
