"""``GET <base>/openrpc.json``: the endpoint's methods as an OpenRPC document
(:mod:`rcpkit.protocol.openrpc`), behind the endpoint's own gate: the document shows the
capabilities, which only a caller allowed to ask ``info`` may see (§5.2, §15.6)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...protocol.capabilities import Capabilities
from ...protocol.methods import is_vendor
from ...protocol.openrpc import DOCUMENT, openrpc_document
from ...server.framework import Server
from .auth import Gate
from .server import header_map

__all__ = ["openrpc_route"]


def openrpc_route(base: str, server: Server, gate: Gate) -> Route:
    """The route of ``server``'s document at ``<base>/openrpc.json``: the methods it
    advertises now (a stateless request's view, after :meth:`~rcpkit.server.Server.refresh`)
    and serves, its vendor methods included."""
    path = f"{base}/{DOCUMENT}"

    async def document(request: Request) -> Response:
        principal = gate.admit(header_map(request.scope["headers"]))
        if isinstance(principal, tuple):
            status, headers, body = principal
            return Response(body, status_code=status,
                            headers={name.decode("latin-1"): value.decode("latin-1")
                                     for name, value in headers})
        try:
            server.refresh()
            caps = Capabilities.from_wire(server.capabilities)
            url = str(request.url.replace(query="")).removesuffix(f"/{DOCUMENT}")
            vendor = {method: handler.params_type
                      for method, handler in server.handlers.items() if is_vendor(method)}
            return JSONResponse(openrpc_document(server.name, server.version, caps,
                                                 served=server.handlers, vendor=vendor, url=url))
        finally:
            gate.release(principal)

    return Route(path, document, methods=["GET"])
