"""Operational routes beside the RCP base, for orchestrators and scrapers: ``/healthz``,
``/readyz`` and, when metrics are on, ``/metrics``. Outside the RCP credentials — they
reveal no caller data; ``/metrics`` has its own optional token and never names a collection
the scraper may not see (:meth:`.metrics.Metrics.scrape`) — and cheap: no request
parsing, no dispatcher."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ...server.framework import Server
from .metrics import CONTENT_TYPE, Metrics
from .server import header_map

__all__ = ["operational_routes"]


def operational_routes(base: str, server: Server, metrics: Metrics | None) -> list[BaseRoute]:
    """``<parent of base>/healthz`` (the process answers), ``…/readyz`` (the server can
    serve: :meth:`~rcpkit.server.Server.readiness`, else 503 with the reason) and
    ``…/metrics`` (the Prometheus text format) when ``metrics`` is given."""
    parent = base.rsplit("/", 1)[0]

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        reason = server.readiness()
        if reason is None:
            return JSONResponse({"ready": True})
        return JSONResponse({"ready": False, "reason": reason}, status_code=503)

    routes: list[BaseRoute] = [Route(f"{parent}/healthz", healthz, methods=["GET"]),
                               Route(f"{parent}/readyz", readyz, methods=["GET"])]
    if metrics is not None:
        async def exposition(request: Request) -> Response:
            body = metrics.scrape(header_map(request.scope["headers"]))
            if body is None:
                return Response("a bearer token is needed\n", status_code=401,
                                headers={"www-authenticate": "Bearer"})
            return Response(body, media_type=CONTENT_TYPE)

        routes.append(Route(f"{parent}/metrics", exposition, methods=["GET"]))
    return routes
