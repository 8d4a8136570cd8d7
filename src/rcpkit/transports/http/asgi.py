"""The ASGI adapter of the RCP endpoints (§5.2), for uvicorn, a Starlette mount or any ASGI
server, and for what the in-house server does not read whole itself.

:class:`RcpApp` is Starlette, entered through :meth:`.endpoint.Endpoints.find`: a POST the
table finds goes straight to its endpoint's :meth:`~.endpoint.Endpoint.stream`, past
Starlette's router and middleware; everything else takes the full Starlette stack (404,
405, OPTIONS preflight and CORS headers, ``/healthz``, ``/readyz``, ``/metrics``, each
endpoint's ``openrpc.json``), whose
POST routes under the base lead to the same endpoints. The in-house server
(:mod:`.server`) finds the table as :attr:`RcpApp.endpoints` and answers the requests it
claims without ASGI at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import Receive, Scope, Send

from ...protocol.openrpc import DOCUMENT
from ...server.framework import Server
from .auth import cors_middleware
from .discovery import openrpc_response
from .endpoint import Endpoints, open_endpoint
from .metrics import Metrics
from .operations import operational_routes
from .server import header_map

__all__ = ["RcpApp", "create_app"]


class RcpApp(Starlette):
    """The ASGI app of ``endpoints``, with the operational routes of ``server`` beside
    their base (``/metrics`` when ``metrics`` is given) and CORS for ``cors_origins``."""

    def __init__(self, endpoints: Endpoints, server: Server, *, metrics: Metrics | None = None,
                 cors_origins: Iterable[str] = (), api_key_header: str | None = None) -> None:
        middleware = cors_middleware(cors_origins, api_key_header)
        post = _Post(endpoints)
        base = endpoints.base
        super().__init__(middleware=middleware, routes=[
            *operational_routes(base, server, metrics),
            StarletteRoute(f"{base}/{DOCUMENT}", self._document, methods=["GET"]),
            StarletteRoute(f"{base}/{{name}}/{DOCUMENT}", self._document, methods=["GET"]),
            StarletteRoute(base, post, methods=["POST"]),
            StarletteRoute(base + "/{rest:path}", post, methods=["POST"])])
        endpoints.cors = bool(middleware)
        self.endpoints = endpoints

    async def _document(self, request: Request) -> Response:
        """The OpenRPC document of the endpoint whose base the path names (:mod:`.discovery`;
        each collection's, with collections); under the base, any other path ending so is
        not a document (405: only POST)."""
        route = self.endpoints.locate(_app_path(request.scope).removesuffix(f"/{DOCUMENT}"))
        if route is None or route[1]:  # a method's path, not an endpoint's base
            raise HTTPException(status_code=405, headers={"Allow": "POST"})
        return openrpc_response(route[0], request)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self.endpoints.find(scope["method"], _app_path(scope))
            if route is not None:
                await route[0].stream(route[1], header_map(scope["headers"]), receive, send)
                return
        await super().__call__(scope, receive, send)


class _Post:
    """Starlette's POST routes under the base (taken while CORS is on): the endpoint that
    the table finds, else the base's (``<base>/``)."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint, method = self.endpoints.locate(_app_path(scope)) or (self.endpoints.root, "")
        await endpoint.stream(method, header_map(scope["headers"]), receive, send)


def _app_path(scope: Scope) -> str:
    """The request's path within the app: its root path (a mount's prefix) removed."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def create_app(server: Server, *, base: str = "/rcp", cors_origins: Iterable[str] = (),
               api_key_header: str | None = None, metrics: Metrics | None = None,
               **options: Any) -> RcpApp:
    """The ASGI app serving ``server`` at ``base`` (see :mod:`rcpkit.transports.http`), with
    ``/healthz`` and ``/readyz`` beside the base, ``<base>/openrpc.json``
    (:mod:`.discovery`), and ``/metrics`` when ``metrics`` is given (its requests labelled
    ``collection``, by default the server's name).

    ``options`` go to :func:`.endpoint.open_endpoint`: ``sessions``, ``auth_tokens``,
    ``max_body_bytes``, ``session_ttl_s``, ``max_sessions``, ``max_pending``,
    ``max_concurrency``, ``request_timeout_ms``, ``collection``; ``log_bodies`` lets failure
    logs quote queries and documents (§15.6; off by default); ``gate`` replaces the
    ``auth_tokens`` check; ``authorize`` is the dispatcher's check of each request's caller
    and ``admit_member`` its admission of a batch's requests after the first, which the gate
    admitted with the POST (:class:`~rcpkit.server.dispatcher.Dispatcher`); ``tracing``
    (default: the process's, :func:`rcpkit.tracing.active`) traces every request, its span
    labelled ``collection``; ``access_log`` writes one line per request (:mod:`..access`);
    ``clock`` (monotonic seconds) times token sessions' idleness."""
    endpoint = open_endpoint(server, api_key_header=api_key_header, metrics=metrics, **options)
    return RcpApp(Endpoints("/" + base.strip("/"), endpoint), server, metrics=metrics,
                  cors_origins=cors_origins, api_key_header=api_key_header)
