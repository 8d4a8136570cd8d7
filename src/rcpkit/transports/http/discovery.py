"""``GET <base>/openrpc.json``: the endpoint's methods as an OpenRPC document
(:mod:`rcpkit.protocol.openrpc`), behind the endpoint's own gate: the document shows the
capabilities, which only a caller allowed to ask ``info`` may see (§5.2, §15.6). With
collections (:mod:`rcpkit.tenancy.app`) each collection's endpoint has its own, at
``<base>/<name>/openrpc.json``, and a missing one's answers as a hidden one's."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...protocol.capabilities import Capabilities
from ...protocol.methods import is_vendor
from ...protocol.openrpc import DOCUMENT, openrpc_document
from .endpoint import Endpoint
from .server import header_map

__all__ = ["openrpc_response"]


def openrpc_response(endpoint: Endpoint, request: Request) -> Response:
    """``endpoint``'s document, to a caller its gate admits (else the gate's refusal): the
    methods its server advertises now (a stateless request's view, after
    :meth:`~rcpkit.server.Server.refresh`) and serves, its vendor methods included."""
    principal = endpoint.gate.admit(header_map(request.scope["headers"]))
    if isinstance(principal, tuple):
        status, headers, body = principal
        return Response(body, status_code=status,
                        headers={name.decode("latin-1"): value.decode("latin-1")
                                 for name, value in headers})
    try:
        server = endpoint.server
        server.refresh()
        caps = Capabilities.from_wire(server.capabilities)
        url = str(request.url.replace(query="")).removesuffix(f"/{DOCUMENT}")
        vendor = {method: handler.params_type
                  for method, handler in server.handlers.items() if is_vendor(method)}
        return JSONResponse(openrpc_document(server.name, server.version, caps,
                                             served=server.handlers, vendor=vendor, url=url))
    finally:
        endpoint.gate.release(principal)
