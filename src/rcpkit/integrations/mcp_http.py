"""``rcpkit mcp --listen``: the MCP bridge over stateless streamable HTTP, in one or several
worker processes, with bearer-token auth (``pip install 'rcpkit[mcp]'``, OAuth also
``'rcpkit[oauth]'``).

- Stateless: every POST is answered on its own (the SDK's ``stateless`` session manager), so
  any worker can answer any request and a load balancer needs no session affinity. Workers
  are spawned processes, each running uvicorn on its own socket of the port's
  ``SO_REUSEPORT`` group and opening its own engine, so no model, thread or database handle
  is shared.
- Auth (fail closed): an rcpkit key of the collections root (``keys.json``, §15.3) or an
  OAuth 2.1 access token. Either grants ``read`` and/or ``write`` on the collection served:
  ``read`` lists and calls the read-only tools and the resources, ``write`` the others
  (§15.6). No or a bad token is 401, a token granting neither action 403. A key's rate,
  concurrency and write-quota limits hold for each call (§15.5).
- Writes as over RCP (engine in this process): each call reaches the engine as its
  principal's request (the key's principal, ``oauth:<sub>`` for a token), so the key's trust
  grant or the collection's ``trust`` setting bounds the labels it may write (§15.2), its
  fan-out caps hold (§15.5) and its writes are stamped ``written_by`` (§15.3). Without a
  principal (no auth configured), writes name no trust above ``untrusted``.
- OAuth 2.1 resource server as the MCP authorization spec asks: Protected Resource Metadata
  (RFC 9728) at ``/.well-known/oauth-protected-resource`` (and its path-suffixed form),
  ``WWW-Authenticate: Bearer resource_metadata="…"`` on a 401, JWT access tokens (RFC 9068)
  checked against the issuer's JWKS with this server's URL as the audience (RFC 8707),
  their scopes mapped to ``read``/``write``. PyJWT verifies them: the MCP SDK already depends
  on it, and its ``PyJWKClient`` fetches and caches the issuer's keys, refetching on an
  unknown ``kid`` (key rotation).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..protocol.errors import RateLimited, RcpError, Unauthorized, UsageError
from ..tenancy.keys import KeyStore, KeyStoreError
from ..tenancy.scopes import ACTIONS, Action
from ..transports.http.workers import _listen
from .engines import open_engine
from .mcp import McpBridge, _error_result

if TYPE_CHECKING:
    from ..tenancy.access import Access, Principal

__all__ = ["WORKER_HEADER", "McpHttp", "OAuth", "ScopedBridge", "TokenCheck", "serve_http"]

logger = logging.getLogger("rcpkit.mcp")

WORKER_HEADER = "rcpkit-worker"
"""Response header naming the process that answered (which worker, behind a balancer)."""

_WELL_KNOWN = "/.well-known/oauth-protected-resource"
_KEY_CLAIM = "rcpkit_key"
"""Set by :class:`TokenCheck` on a key's token only (never copied from a JWT's claims)."""
_KEY_CALLER, _OAUTH_CALLER = "key-", "oauth-"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class OAuth:
    """This server as an OAuth 2.1 resource server of ``issuer``: tokens are JWTs signed by a
    key of ``jwks_url``, issued by ``issuer`` for ``resource`` (the MCP endpoint's public
    URL, RFC 8707); ``read_scope``/``write_scope`` are the token scopes granting each action."""

    issuer: str
    jwks_url: str
    resource: str
    read_scope: str = "rcp:read"
    write_scope: str = "rcp:write"
    algorithms: tuple[str, ...] = ("RS256", "ES256", "PS256", "EdDSA")


@dataclass(frozen=True)
class McpHttp:
    """Everything a worker needs to serve (plain data: it is sent to spawned workers)."""

    host: str
    port: int
    path: str = "/mcp"
    workers: int = 1
    engine: Mapping[str, Any] = field(default_factory=dict)
    """:func:`~.engines.open_engine`'s keyword arguments."""
    read_only: bool = False
    keys_root: Path | None = None
    """A collections root whose ``keys.json`` keys are accepted (with ``collection``)."""
    collection: str | None = None
    oauth: OAuth | None = None

    @property
    def authenticated(self) -> bool:
        return self.keys_root is not None or self.oauth is not None


class TokenCheck:
    """The SDK's :class:`~mcp.server.auth.provider.TokenVerifier` for rcpkit keys and OAuth
    JWTs: the token's actions on the collection as its scopes, or None (401)."""

    def __init__(self, settings: McpHttp, keys: KeyStore | None) -> None:
        self.collection = settings.collection or ""
        self.keys = keys
        self.oauth = settings.oauth
        self._jwks: Any = None
        if self.oauth is not None:
            import jwt

            self._jwks = jwt.PyJWKClient(self.oauth.jwks_url, timeout=10)

    async def verify_token(self, token: str) -> AccessToken | None:
        if self.keys is not None and token.startswith("rcpk_"):
            return self._key(token)
        if self.oauth is not None:
            # PyJWKClient fetches keys with blocking I/O (rarely: they are cached).
            return await anyio.to_thread.run_sync(self._jwt, token)
        return None

    def _key(self, token: str) -> AccessToken | None:
        assert self.keys is not None
        try:
            record = self.keys.authenticate(token)
        except KeyStoreError as exc:
            logger.error("refusing every API key: %s", exc)
            return None
        if record is None:
            return None
        actions: list[str] = [action for action in ACTIONS
                              if record.scopes.allows(self.collection, action)]
        if not actions:  # answered as a bad key: the collection's existence does not leak
            return None
        return AccessToken(token=token, client_id=f"key-{record.key_id}", scopes=actions,
                           subject=record.principal, claims={_KEY_CLAIM: record.key_id})

    def _jwt(self, token: str) -> AccessToken | None:
        import jwt

        assert self.oauth is not None
        oauth = self.oauth
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            # ``sub`` names who writes (RFC 9068 requires it): no principal, no token.
            claims = jwt.decode(token, key, algorithms=list(oauth.algorithms),
                                audience=oauth.resource, issuer=oauth.issuer,
                                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.PyJWTError as exc:
            logger.info("refused an access token: %s", exc)
            return None
        granted = claims.get("scope", "")  # RFC 9068: space-separated; some issuers: a list
        scopes = set(granted.split()) if isinstance(granted, str) \
            else {str(scope) for scope in granted} if isinstance(granted, list) else set()
        actions = [action for action, scope in (("read", oauth.read_scope),
                                                ("write", oauth.write_scope)) if scope in scopes]
        subject = str(claims["sub"])
        return AccessToken(token=token, client_id=str(claims.get("client_id", subject)),
                           scopes=actions, expires_at=int(claims["exp"]),
                           resource=oauth.resource, subject=subject,
                           claims={"iss": claims["iss"]})


class _RequireAnAction(RequireAuthMiddleware):
    """401 without a valid token; 403 ``insufficient_scope`` for one granting neither
    ``read`` nor ``write`` (the SDK's check wants every scope listed, ours any one)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if isinstance(user, AuthenticatedUser) and not set(user.scopes) & set(ACTIONS):
            await self._send_auth_error(send, status_code=403, error="insufficient_scope",
                                        description="this token grants no access here")
            return
        await super().__call__(scope, receive, send)


class ScopedBridge(McpBridge):
    """The bridge as the caller's token allows: a tool that only reads needs ``read``, any
    other ``write``; resources need ``read`` (§15.6). A key's own limits hold as over RCP
    (§15.5): its rate and concurrency per call, and its daily write quota. Unauthenticated
    (``authenticated=False``), everything is open."""

    def __init__(self, *args: Any, authenticated: bool, access: Access | None = None,
                 collection: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.authenticated = authenticated
        self.access = access
        self.collection = collection

    def _actions(self) -> frozenset[str]:
        if not self.authenticated:
            return frozenset(ACTIONS)
        token = get_access_token()
        return frozenset(token.scopes) & frozenset(ACTIONS) if token else frozenset()

    @staticmethod
    def _needs(tool: types.Tool) -> Action:
        # Fail closed: a tool not declared read-only counts as a write.
        return "read" if tool.annotations and tool.annotations.read_only_hint else "write"

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        listing = await super()._list_tools(ctx, params)
        actions = self._actions()
        return listing.model_copy(update={"tools": [
            tool for tool in listing.tools if self._needs(tool) in actions]})

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        listing = await super()._list_tools(ctx, None)
        tool = next((tool for tool in listing.tools if tool.name == params.name), None)
        if tool is not None and (needed := self._needs(tool)) not in self._actions():
            return _error_result(Unauthorized(f"this token may not {needed} this collection"))
        principal = self._key_principal()
        if principal is None or self.access is None or params.name not in self.tools:
            return await super()._call_tool(ctx, params)
        wait = self.access.admit(self.collection, principal)
        if wait is not None:
            return _error_result(RateLimited("rate limit", retryAfterMs=math.ceil(wait * 1000)))
        try:
            self.access.authorizer(self.collection)(
                principal.caller, self.tools[params.name].row.name, params.arguments or {})
            return await super()._call_tool(ctx, params)
        except RcpError as exc:
            return _error_result(exc)
        finally:
            self.access.limiter.release(principal.name)

    def _key_principal(self) -> Principal | None:
        """The key behind this request's token (None: an OAuth token, or no auth)."""
        caller = _token_caller()
        if caller is None or not caller.startswith(_KEY_CALLER) or self.access is None:
            return None
        return self.access.principal(caller)

    async def _list_resources(self, ctx: ServerRequestContext[Any],
                              params: types.PaginatedRequestParams | None,
                              ) -> types.ListResourcesResult:
        if "read" not in self._actions():
            return types.ListResourcesResult(resources=[])
        return await super()._list_resources(ctx, params)

    async def _list_resource_templates(self, ctx: ServerRequestContext[Any],
                                       params: types.PaginatedRequestParams | None,
                                       ) -> types.ListResourceTemplatesResult:
        if "read" not in self._actions():
            return types.ListResourceTemplatesResult(resource_templates=[])
        return await super()._list_resource_templates(ctx, params)

    async def _read_resource(self, ctx: ServerRequestContext[Any],
                             params: types.ReadResourceRequestParams,
                             ) -> types.ReadResourceResult:
        if "read" not in self._actions():
            from mcp.shared.exceptions import MCPError

            raise MCPError(types.INVALID_PARAMS, "this token may not read this collection")
        return await super()._read_resource(ctx, params)


def _token_caller() -> str | None:
    """Who this request's token names, as the engine's caller (:attr:`Context.caller`):
    ``key-<id>`` for a key (as RCP over HTTP names it), ``oauth-<sub>`` for an access
    token, None without one."""
    token = get_access_token()
    if token is None:
        return None
    key_id = (token.claims or {}).get(_KEY_CLAIM)
    if key_id is not None:
        return f"{_KEY_CALLER}{key_id}"
    return None if token.subject is None else f"{_OAUTH_CALLER}{token.subject}"


def _principal_of(access: Access | None) -> Callable[[str | None], Principal | None]:
    """The principal behind each caller :func:`_token_caller` names: a live key's (its
    grant, caps and name, :meth:`Access.principal`), or a token subject's, ``oauth:<sub>``,
    which holds no grant and no caps of a key; None for anyone else."""
    from ..tenancy.access import Principal
    from ..tenancy.limits import Limits
    from ..tenancy.scopes import Scopes

    def resolve(caller: str | None) -> Principal | None:
        if caller is not None and caller.startswith(_OAUTH_CALLER):
            subject = caller.removeprefix(_OAUTH_CALLER)
            return Principal(caller, f"oauth:{subject}", Scopes({}), Limits())
        if caller is not None and caller.startswith(_KEY_CALLER) and access is not None:
            return access.principal(caller)
        return None
    return resolve


def _worker_header(app: ASGIApp) -> ASGIApp:
    """``app`` with :data:`WORKER_HEADER` on every response."""
    pid = str(os.getpid()).encode()

    async def tagged(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (WORKER_HEADER.encode(), pid)]}
            await send(message)
        await app(scope, receive, send_tagged)
    return tagged


def build_app(bridge: ScopedBridge, settings: McpHttp) -> Starlette:
    """The stateless streamable-HTTP app of ``bridge``, behind bearer auth when configured."""
    server = bridge.server()
    security = None
    if settings.host in _LOOPBACK:  # DNS-rebinding protection, as the SDK sets for loopback
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
    manager = StreamableHTTPSessionManager(app=server, stateless=True,
                                           security_settings=security)
    endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
    routes: list[Route] = []
    middleware: list[Middleware] = []
    if settings.authenticated:
        oauth = settings.oauth
        metadata_url = None
        if oauth is not None:
            # The SDK's settings keep a path-less issuer without a trailing slash (RFC 8414
            # compares issuers as strings); our verifier checks the audience itself.
            auth = AuthSettings.model_validate({
                "issuer_url": oauth.issuer, "resource_server_url": oauth.resource,
                "required_scopes": [oauth.read_scope, oauth.write_scope],
                "validate_token_resource": False})
            assert auth.resource_server_url is not None
            metadata_url = build_resource_metadata_url(auth.resource_server_url)
            routes += create_protected_resource_routes(
                auth.resource_server_url, [auth.issuer_url],
                scopes_supported=auth.required_scopes,
                resource_name=f"rcpkit MCP ({bridge.engine})")
            # Also at the root, where clients look when the path-suffixed form is missing.
            routes += [Route(_WELL_KNOWN, endpoint=route.endpoint, methods=["GET", "OPTIONS"])
                       for route in routes[-1:] if route.path != _WELL_KNOWN]
        middleware = [Middleware(AuthenticationMiddleware,
                                 backend=BearerAuthBackend(TokenCheck(
                                     settings, bridge.access.keys if bridge.access else None))),
                      Middleware(AuthContextMiddleware)]
        endpoint = _RequireAnAction(endpoint, [], metadata_url)
    routes.insert(0, Route(settings.path, endpoint=endpoint))
    app = Starlette(routes=routes, middleware=middleware,
                    lifespan=lambda app: manager.run())
    return app


def _access(settings: McpHttp) -> Access | None:
    """The keys and limits of the collections root (None: no keys)."""
    if settings.keys_root is None:
        return None
    # Only with keys: the tenancy layer imports the engine's.
    from ..tenancy.serving import build_access

    try:
        return build_access(settings.keys_root)
    except (ValueError, KeyStoreError) as exc:  # a bad [limits] or [limits_store] table
        raise UsageError(f"{settings.keys_root}: {exc}") from None


def _bridge(client: Any, settings: McpHttp, access: Access | None) -> ScopedBridge:
    return ScopedBridge(client, allow_writes=not settings.read_only,
                        authenticated=settings.authenticated, access=access,
                        collection=settings.collection or "",
                        engine_knows_callers=_in_process(settings))


def _in_process(settings: McpHttp) -> bool:
    return settings.engine.get("data") is not None


def _engine_options(settings: McpHttp, access: Access | None) -> dict[str, Any]:
    """:func:`~.engines.open_engine`'s arguments; an engine in this process answers each
    call as the principal of its token (see the module doc)."""
    options = {**settings.engine, "client_info": {"name": "rcpkit-mcp", "version": __version__}}
    if _in_process(settings):
        from ..tenancy.serving import govern_writes

        options["govern"] = functools.partial(govern_writes, principal_of=_principal_of(access),
                                              unidentified_trust="untrusted")
        options["caller"] = _token_caller
    return options


class _WorkerApp:
    """A worker's app: opens its own engine at start-up (lifespan), then serves and tells
    ``on_ready``; ``failure`` says why it could not start."""

    def __init__(self, settings: McpHttp, on_ready: Callable[[], None]) -> None:
        self.settings = settings
        self.on_ready = on_ready
        self.app: Starlette | None = None
        self.failure: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        assert self.app is not None
        await self.app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with contextlib.AsyncExitStack() as stack:
            try:
                access = _access(self.settings)
                client = await stack.enter_async_context(
                    open_engine(**_engine_options(self.settings, access)))
                self.app = build_app(_bridge(client, self.settings, access), self.settings)
                await stack.enter_async_context(self.app.router.lifespan_context(self.app))
            except (RcpError, UsageError) as exc:
                self.failure = exc.message if isinstance(exc, RcpError) else str(exc)
                await send({"type": "lifespan.startup.failed", "message": self.failure})
                return
            await send({"type": "lifespan.startup.complete"})
            self.on_ready()
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


def _run(settings: McpHttp, listener: socket.socket, on_ready: Callable[[], None]) -> None:
    """Serve on ``listener`` in this process until a signal (uvicorn, on its fastest loop)."""
    import uvicorn

    app = _WorkerApp(settings, on_ready)
    uvicorn.Server(uvicorn.Config(_worker_header(app), log_level="warning", access_log=False,
                                  lifespan="on")).run(sockets=[listener])
    if app.failure is not None:
        raise UsageError(app.failure)


def _announce(listener: socket.socket, settings: McpHttp) -> None:
    """Say on stderr where MCP is served, with the port actually bound."""
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    processes = f" in {settings.workers} worker processes" if settings.workers > 1 else ""
    auth = " (bearer token required)" if settings.authenticated else ""
    print(f"rcpkit mcp: serving MCP (stateless streamable HTTP) at http://{shown}:{port}"
          f"{settings.path}{processes}{auth} (Ctrl-C stops)", file=sys.stderr, flush=True)


async def _check_engine(settings: McpHttp) -> None:
    """Open the engine and the root's keys and limits once, so a bad target or setting
    fails here, not in every worker."""
    access = _access(settings)
    async with open_engine(**_engine_options(settings, access)) as client:
        _bridge(client, settings, access)


def _worker(settings: McpHttp, port: int, ready: Any) -> None:
    """A spawned worker: its own socket in the port's ``SO_REUSEPORT`` group, so the kernel
    spreads new connections evenly over the workers (one shared socket would let whichever
    worker wakes first take every pending connection)."""
    listener = _listen(settings.host, port, reuse_port=True)
    try:
        _run(settings, listener, functools.partial(ready.put, os.getpid()))
    except UsageError as exc:
        print(f"rcpkit mcp: error: worker {os.getpid()}: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def _serve_workers(settings: McpHttp) -> None:
    """Spawned workers (no engine state forked) until a signal, or until one ends."""
    import multiprocessing
    import multiprocessing.connection
    import queue
    import signal

    asyncio.run(_check_engine(settings))
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Queue()
    # Bound, not listening: the port is ours (and known, for :0) until the workers bind it.
    with _listen(settings.host, settings.port, reuse_port=True, listen=False) as reserved:
        port = reserved.getsockname()[1]
        workers = [spawn.Process(target=_worker, args=(settings, port, ready), daemon=True)
                   for _ in range(settings.workers)]
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            for worker in workers:
                worker.start()
            started = 0
            while started < len(workers):
                try:
                    ready.get(timeout=0.5)
                    started += 1
                except queue.Empty:
                    if not all(worker.is_alive() for worker in workers):
                        raise UsageError("a worker stopped before serving (see above)") \
                            from None
            _announce(reserved, settings)
            multiprocessing.connection.wait([worker.sentinel for worker in workers])
        finally:
            signal.signal(signal.SIGTERM, previous)
            for worker in workers:
                if worker.is_alive():
                    worker.terminate()  # uvicorn stops gracefully on SIGTERM
            for worker in workers:
                worker.join(30)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve_http(settings: McpHttp) -> None:
    """Serve MCP at ``http://host:port{path}`` until interrupted, in ``settings.workers``
    processes; a port that cannot be bound or an engine that cannot be opened is an error
    (:class:`UsageError`, :class:`~rcpkit.protocol.errors.RcpError`) before anything is
    served or announced."""
    if settings.workers < 1:
        raise UsageError("--workers must be at least 1")
    if settings.workers > 1:
        _serve_workers(settings)
        return
    with _listen(settings.host, settings.port) as listener:
        _run(settings, listener, functools.partial(_announce, listener, settings))
