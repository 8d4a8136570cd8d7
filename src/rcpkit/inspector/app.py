"""The inspector's web app: a Starlette ASGI app serving the page, its assets and a small API.

Access control, because the page can drive (and write to) the inspected server:

- every ``/api/`` request must carry the one-time token in ``X-Inspector-Token`` (the
  page reads it from its own URL and keeps it in memory only: no cookie, no storage).
  A cross-site page cannot send that header without a CORS preflight, which this app
  never grants;
- on a loopback bind, a request whose ``Host`` is not this loopback address is refused
  (a DNS-rebinding page would name its own host);
- the page itself is served only with ``?token=``; assets are public (they hold no data).

Long operations (a call with progress, certify, eval) answer as an SSE stream of JSON
events (one ``data:`` line each, as in §5.2); everything else is plain JSON.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..eval.runner import EvalConfig
from ..protocol.errors import RcpError, UsageError
from ..protocol.framing import sse_event
from ..protocol.lifecycle import LOG_LEVELS
from .sample_eval import SAMPLE_NAME
from .session import Emit, Inspector

__all__ = ["TOKEN_HEADER", "create_app"]

TOKEN_HEADER = "x-inspector-token"
STATIC = Path(__file__).parent / "static"
_MAX_DEADLINE_MS = 600_000
_MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".js": "text/javascript; charset=utf-8"}
_SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}

_log = logging.getLogger("rcpkit.inspector")


class BadRequest(Exception):
    """A malformed API body: 400 with the offending field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class _Guard:
    """Host check, token check and security headers around the routes (module docstring)."""

    def __init__(self, app: ASGIApp, token: str, hosts: Collection[str] | None) -> None:
        self.app = app
        self.token = token
        self.hosts = None if hosts is None else {host.lower() for host in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            await PlainTextResponse("unknown host", 421)(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith("/api/"):
            presented = request.headers.get(TOKEN_HEADER, "")
        elif path == "/":
            presented = request.query_params.get("token", "")
        else:
            presented = self.token
        if not secrets.compare_digest(presented.encode(), self.token.encode()):
            await PlainTextResponse("open the address that `rcpkit inspect` printed "
                                    "(it carries the access token)", 403)(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      *((k.encode(), v.encode())
                                        for k, v in _SECURITY_HEADERS.items())]
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _typed(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BadRequest(f"`{name}` has the wrong type", field=name)
    return value


class EventStream(Response):
    """Run an operation in its own task and stream its events as SSE (raw ASGI: no anyio,
    so it also runs on the lean server). A client that goes away cancels the operation
    (an abandoned call sends ``notifications/cancel``, §7.14)."""

    def __init__(self, run: Callable[[Emit], Awaitable[None]]) -> None:
        super().__init__(media_type="text/event-stream")
        # Streamed in chunks: no content-length (Response sets one for its empty body).
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.run = run

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        operation = asyncio.ensure_future(self._operate(queue.put_nowait))
        gone = asyncio.ensure_future(_disconnected(receive))
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    return
                event = getter.result()
                if event is None:
                    break
                await send({"type": "http.response.body", "body": sse_event(orjson.dumps(event)),
                            "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            operation.cancel()
            gone.cancel()

    async def _operate(self, emit: Callable[[dict[str, Any] | None], None]) -> None:
        """The operation; its failure becomes a ``failed`` event, never a traceback."""
        try:
            await self.run(emit)
        except UsageError as exc:
            emit({"type": "failed", "message": str(exc)})
        except RcpError as exc:
            emit({"type": "failed", "message": str(exc), "error": exc.to_wire()})
        except Exception:
            _log.exception("inspector operation failed")
            emit({"type": "failed", "message": "internal error (see the inspector's log)"})
        finally:
            emit(None)


async def _in_task(operation: Awaitable[None]) -> None:
    """Await ``operation`` in a task of its own: the lean server runs a handler outside any
    task up to its first suspension, and the client's ``asyncio.timeout`` needs one."""
    await asyncio.ensure_future(operation)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _assets() -> dict[str, tuple[bytes, str]]:
    """The page's files, read once (they are small): name → (bytes, media type)."""
    return {path.name: (path.read_bytes(), _MEDIA_TYPES[path.suffix])
            for path in STATIC.iterdir() if path.suffix in _MEDIA_TYPES}


def create_app(inspector: Inspector, token: str, *,
               hosts: Collection[str] | None = None) -> ASGIApp:
    """The inspector app for ``inspector``; ``hosts`` are the accepted ``Host`` values
    (None: any, for a non-loopback bind)."""

    assets = _assets()

    def asset_response(name: str) -> Response:
        if name not in assets:
            return PlainTextResponse("not found", 404)
        body, media_type = assets[name]
        return Response(body, media_type=media_type)

    async def page(request: Request) -> Response:
        return asset_response("index.html")

    async def asset(request: Request) -> Response:
        return asset_response(request.path_params["name"])

    async def overview(request: Request) -> Response:
        return Response(orjson.dumps(inspector.overview()), media_type="application/json")

    async def call(request: Request) -> Response:
        body = await _body(request)
        method = _typed(body, "method", str, None)
        params = _typed(body, "params", dict, {})
        stream = _typed(body, "stream", bool, False)
        deadline = _typed(body, "deadlineMs", int, 60_000)
        log_level = body.get("logLevel")
        if log_level is not None and log_level not in LOG_LEVELS:
            raise BadRequest(f"`logLevel` is one of {', '.join(LOG_LEVELS)}", field="logLevel")
        if not method:
            raise BadRequest("`method` is required", field="method")
        if not 0 < deadline <= _MAX_DEADLINE_MS:
            raise BadRequest(f"`deadlineMs` must be in 1..{_MAX_DEADLINE_MS}", field="deadlineMs")
        return EventStream(lambda emit: inspector.call(method, params, emit, stream=stream,
                                                       deadline_ms=deadline,
                                                       log_level=log_level))

    async def reconnect(request: Request) -> Response:
        try:
            await _in_task(inspector.reconnect())
        except (RcpError, OSError) as exc:
            return Response(orjson.dumps({"error": {"message": f"cannot reconnect: {exc}"}}),
                            502, media_type="application/json")
        return Response(orjson.dumps(inspector.overview()), media_type="application/json")

    async def connect(request: Request) -> Response:
        body = await _body(request)
        http = _typed(body, "http", str, None) if body.get("http") is not None else None
        stdio = _typed(body, "stdio", str, None) if body.get("stdio") is not None else None
        headers = _typed(body, "headers", dict, {})
        if not all(isinstance(value, str) for value in headers.values()):
            raise BadRequest("`headers` maps names to strings", field="headers")
        try:
            await _in_task(inspector.connect(http=http, headers=headers, stdio=stdio))
        except UsageError as exc:
            raise BadRequest(str(exc), field="http" if stdio is None else "stdio") from None
        except (RcpError, OSError) as exc:
            return Response(orjson.dumps({"error": {"message": f"cannot connect: {exc}"}}),
                            502, media_type="application/json")
        return Response(orjson.dumps(inspector.overview()), media_type="application/json")

    async def certify(request: Request) -> Response:
        body = await _body(request)
        only = _typed(body, "only", list, [])
        if not all(isinstance(pattern, str) and pattern for pattern in only):
            raise BadRequest("`only` is a list of check-id patterns", field="only")
        return EventStream(lambda emit: inspector.certify(emit, only=only))

    async def evaluate(request: Request) -> Response:
        body = await _body(request)
        dataset = _typed(body, "dataset", str, SAMPLE_NAME)
        specs = _typed(body, "configs", list, ["default={}"])
        index = _typed(body, "index", bool, False)
        if not specs or not all(isinstance(spec, str) for spec in specs):
            raise BadRequest("`configs` is a non-empty list of NAME=JSON", field="configs")
        try:
            configs = [EvalConfig.parse(spec) for spec in specs]
        except UsageError as exc:
            raise BadRequest(str(exc), field="configs") from None
        return EventStream(lambda emit: inspector.evaluate(emit, dataset=dataset, configs=configs,
                                                       index=index))

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BadRequest)
        error = {"message": str(exc), **({"field": exc.field} if exc.field else {})}
        return Response(orjson.dumps({"error": error}), 400, media_type="application/json")

    app = Starlette(routes=[
        Route("/", page),
        Route("/api/overview", overview),
        Route("/api/call", call, methods=["POST"]),
        Route("/api/reconnect", reconnect, methods=["POST"]),
        Route("/api/connect", connect, methods=["POST"]),
        Route("/api/certify", certify, methods=["POST"]),
        Route("/api/eval", evaluate, methods=["POST"]),
        Route("/static/{name}", asset),
    ], exception_handlers={BadRequest: bad_request})
    return _Guard(app, token, hosts)
