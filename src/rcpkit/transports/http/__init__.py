"""The HTTP transport, server side (§5.2): a Starlette ASGI app, mountable in any ASGI stack
and served by the lean server of :mod:`.server` (optionally in several worker processes).

Modules: :mod:`.app` (the endpoint and the app), :mod:`.direct` (the one route decision
and the buffered direct route), :mod:`.sessions`, :mod:`.auth` (credentials, CORS),
:mod:`.sse`, :mod:`.replies`, :mod:`.discovery`, :mod:`.workers` (:func:`serve_http`,
pre-fork), :mod:`.server`.

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

from .app import create_app
from .auth import Gate
from .sessions import SESSION_HEADER, SessionPolicy
from .workers import serve_app, serve_http

__all__ = ["SESSION_HEADER", "Gate", "SessionPolicy", "create_app", "serve_app", "serve_http"]
