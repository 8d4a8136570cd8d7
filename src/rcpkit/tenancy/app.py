"""One HTTP server, several collections (§5.2, §7.13, §15.6).

``<base>/<collection>`` (and ``<base>/<collection>/<method>``) is each collection's own RCP
endpoint, a full app of :func:`~rcpkit.transports.http.create_app` behind the
:class:`~.access.CollectionGate` of that collection. ``<base>`` itself is the server's own
endpoint: ``info`` and ``catalog/list``, which lists the collections the caller may see,
each with its endpoint. A path naming no collection is answered, after the credentials,
exactly as a collection the caller may not see (403, ``-32012``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from starlette.types import Receive, Scope, Send

from .. import __version__
from ..protocol.errors import UsageError
from ..server.context import Context
from ..server.framework import Server
from ..transports.http import create_app
from ..transports.http.metrics import Metrics
from ..transports.http.server import DirectRoute, Reply
from .access import Access, CollectionGate, Principal
from .collections import is_reserved_segment

__all__ = ["DIRECTORY_NAME", "MISSING", "CollectionsApp", "create_collections_app"]

DIRECTORY_NAME = "rcpkit-collections"


MISSING = "-"
"""The path segment of the stand-in app answering for every missing collection (no
collection name starts with ``-``)."""


class CollectionsApp:
    """The ASGI app (and :class:`~rcpkit.transports.http.server.DirectRoute`) routing to the
    app of each collection. A missing collection's requests go to a stand-in app built like
    a collection's, whose gate refuses everyone once authenticated, so that no verb, header
    or status tells a missing collection from a hidden one. ``public_url``
    (``http://host:port``) makes ``catalog/list`` give each collection's ``endpoint``; it may
    be set once the port is known."""

    def __init__(self, base: str, root: Any, collections: Mapping[str, Any],
                 missing: Any) -> None:
        self.base = base
        self._prefix = base + "/"
        self.root = root
        self.collections = dict(collections)
        self.collections[MISSING] = missing
        self.public_url: str | None = None
        self.direct = self

    def _pick(self, path: str) -> tuple[str, str]:
        """(collection, ``path`` as that collection's app sees it); "" for the root."""
        if not path.startswith(self._prefix):
            return "", path
        segment, slash, rest = path[len(self._prefix):].partition("/")
        if not segment or is_reserved_segment(segment):
            return "", path
        if segment in self.collections and segment != MISSING:
            return segment, path
        return MISSING, f"{self._prefix}{MISSING}{slash}{rest}"

    def _app(self, name: str) -> Any:
        return self.collections[name] if name else self.root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.root(scope, receive, send)
            return
        name, path = self._pick(scope["path"])
        if path != scope["path"]:
            scope = {**scope, "path": path, "raw_path": path.encode()}
        await self._app(name)(scope, receive, send)

    def claim(self, method: bytes, target: bytes, headers: dict[bytes, bytes]) -> str | None:
        path, query, rest = target.partition(b"?")
        name, routed = self._pick(path.decode("latin-1"))
        direct = getattr(self._app(name), "direct", None)
        route = direct.claim(method, routed.encode("latin-1") + query + rest, headers) \
            if direct is not None else None
        return None if route is None else f"{name}\n{route}"

    def answer(self, route: str, headers: dict[bytes, bytes], body: bytes
               ) -> Reply | Awaitable[Reply]:
        name, _, inner = route.partition("\n")
        direct: DirectRoute = self._app(name).direct
        return direct.answer(inner, headers, body)


class _Directory(Server):
    """The server's own endpoint: ready when every collection is (``/readyz``)."""

    def __init__(self, collections: Mapping[str, Server]) -> None:
        super().__init__(DIRECTORY_NAME, __version__)
        self.collections = collections

    def readiness(self) -> str | None:
        for name, server in self.collections.items():
            reason = server.readiness()
            if reason is not None:
                return f"collection {name}: {reason}"
        return None


def _directory(collections: Mapping[str, Server], access: Access,
               app: CollectionsApp) -> Server:
    """The server's own endpoint: ``catalog/list`` of the collections a caller may see."""
    directory = _Directory(collections)
    directory.capability("catalog", {})

    def catalog_list(params: Any, ctx: Context) -> dict[str, Any]:
        engines = []
        for name in access.visible(ctx.caller, collections):
            server = collections[name]
            entry: dict[str, Any] = {"id": name,
                                     "server": {"name": server.name, "version": server.version},
                                     "capabilities": dict(server.capabilities)}
            if app.public_url is not None:
                entry["endpoint"] = {"transport": "http",
                                     "url": f"{app.public_url}{app.base}/{name}"}
            engines.append(entry)
        return {"engines": engines}

    directory.add_method("catalog/list", catalog_list)
    return directory


def _hidden_from_scraper(access: Access, names: frozenset[str]
                         ) -> Callable[[Mapping[bytes, bytes]], Collection[str]]:
    """The collections ``/metrics`` does not name to a scraper: with keys, those its key
    does not see, and every one without a valid key (§15.6: existence does not leak)."""
    def hidden(headers: Mapping[bytes, bytes]) -> Collection[str]:
        if not access.required():
            return ()
        principal = access.authenticate(headers)
        if not isinstance(principal, Principal):
            return names
        return [name for name in names if not principal.scopes.sees(name)]
    return hidden


def create_collections_app(collections: Mapping[str, Server], access: Access, *,
                           base: str = "/rcp", public_url: str | None = None,
                           metrics: Metrics | None = None,
                           **app_options: Any) -> CollectionsApp:
    """Serve each of ``collections`` (name → its server) at ``<base>/<name>``, and the
    server's own ``catalog/list`` at ``base``, with ``/healthz``, ``/readyz`` (every
    collection ready) and ``/metrics`` beside it (each collection's requests labelled with
    its name). ``app_options`` go to every :func:`~rcpkit.transports.http.create_app`
    (stateless sessions only: the caller of each request is what authorisation and
    provenance look at)."""
    if app_options.get("sessions", "stateless") != "stateless":
        raise UsageError("collections are served with the stateless session policy")
    for option in ("auth_tokens", "api_key_header", "gate", "authorize", "admit_member",
                   "collection"):
        if option in app_options:
            raise UsageError(f"{option} is the Access object's business")
    base = "/" + base.strip("/")
    if metrics is not None:
        if access.on_refusal is None:
            access.on_refusal = metrics.rate_limited
        if metrics.hidden_for is None:
            metrics.hidden_for = _hidden_from_scraper(access, frozenset(collections))
    apps = {name: create_app(server, base=f"{base}/{name}", gate=CollectionGate(access, name),
                             authorize=access.authorizer(name),
                             admit_member=access.member_admission(name), metrics=metrics,
                             collection=name, **app_options)
            for name, server in collections.items()}
    missing = create_app(Server(DIRECTORY_NAME, __version__), base=f"{base}/{MISSING}",
                         gate=CollectionGate(access, None, exists=False), **app_options)
    routed = CollectionsApp(base, None, apps, missing)
    routed.root = create_app(_directory(collections, access, routed), base=base,
                             gate=CollectionGate(access, None),
                             admit_member=access.member_admission(None), metrics=metrics,
                             **app_options)
    routed.public_url = public_url.rstrip("/") if public_url else None
    return routed
