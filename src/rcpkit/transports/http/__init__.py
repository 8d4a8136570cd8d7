"""The HTTP transport, server side (§5.2): the RCP endpoints, a Starlette ASGI app around
them, mountable in any ASGI stack, and the lean server of :mod:`.server` (optionally in
several worker processes), which hands the endpoints the requests it reads whole.

Modules: :mod:`.endpoint` (one POST in, its reply out; the path → endpoint table),
:mod:`.asgi` (the ASGI adapter, :func:`create_app`), :mod:`.server` (HTTP/1.1),
:mod:`.workers` (:func:`serve_http`, pre-fork), :mod:`.sessions`, :mod:`.auth` (credentials,
CORS), :mod:`.sse`, :mod:`.replies`, :mod:`.operations` (``/healthz``, ``/readyz``,
``/metrics``), :mod:`.discovery` (``<base>/openrpc.json``), :mod:`.metrics`.

A request passes three rooms: the HTTP server (the in-house one, or uvicorn and
:class:`.asgi.RcpApp`), its :class:`.endpoint.Endpoint` (gate, load, body, session) and
the session's dispatcher, as over stdio it passes the stdio transport and the dispatcher.

Routes: ``POST <base>/<method>`` for one message (the body's method must match
the path, else ``-32600``) and ``POST <base>`` for a batch or any single
message. ``GET <base>/openrpc.json`` is the endpoint's OpenRPC document (:mod:`.discovery`),
behind the same credentials. Status mapping (§5.2):

=====  ==================================================================
200    every JSON-RPC response, errors included (JSON, or SSE on request)
204    a notification or a notification-only batch (no body)
400    a body that is not JSON (with a ``-32700`` body)
401    missing/wrong credentials (with a ``-32012`` body), before dispatch
404    a path outside ``<base>``; 405 a verb other than POST (OPTIONS with CORS)
413    a body over ``max_body_bytes`` (with a ``-32013`` body)
429    over ``max_pending`` requests in flight, or a newcomer while all ``max_sessions``
       token sessions are in recent use (``Retry-After``, ``-32011`` body)
500    a failure of the transport itself (``-32603`` body)
=====  ==================================================================

Back-end failures travel as JSON-RPC errors (``-32010``) with status 200,
because a JSON-RPC response was produced (§5.2), so 503 is never needed.

Session policies (§5.2, §13): see :mod:`.sessions`.

Auth (§5.2, §15.6): with ``auth_tokens`` set, every POST needs
``Authorization: Bearer <token>`` (or the ``api_key_header``), checked before
anything is parsed, so nothing — not even ``info`` — is revealed without it.

Scaling out: see :mod:`.workers`.
"""

from .asgi import create_app
from .auth import Gate
from .sessions import SESSION_HEADER, SessionPolicy
from .workers import serve_app, serve_http

__all__ = ["SESSION_HEADER", "Gate", "SessionPolicy", "create_app", "serve_app", "serve_http"]
