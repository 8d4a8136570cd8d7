"""One HTTP server, several collections (§5.2, §7.13, §15.6).

``<base>/<collection>`` (and ``<base>/<collection>/<method>``) is each collection's own RCP
endpoint (:class:`~rcpkit.transports.http.endpoint.Endpoint`) behind the
:class:`~.access.CollectionGate` of that collection, all in one table
(:class:`CollectionEndpoints`) served by one app. ``<base>`` itself is the server's own
endpoint: ``info`` and ``catalog/list``, which lists the collections the caller may see,
each with its endpoint. A path naming no collection is answered, after the credentials,
exactly as a collection the caller may not see (403, ``-32012``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from .. import __version__
from ..protocol.errors import UsageError
from ..server.context import Context
from ..server.framework import Server
from ..transports.http.asgi import RcpApp
from ..transports.http.endpoint import Endpoint, Endpoints, Route, open_endpoint
from ..transports.http.metrics import Metrics
from .access import Access, CollectionGate, Principal
from .collections import is_reserved_segment

__all__ = ["DIRECTORY_NAME", "CollectionEndpoints", "CollectionsApp", "create_collections_app"]

DIRECTORY_NAME = "rcpkit-collections"


class CollectionEndpoints(Endpoints):
    """The endpoint of each path: ``<base>/<name>[/<method>]`` is collection ``name``'s,
    a segment naming a method (``<base>/info``…) the server's own (``root``), and any other
    segment ``missing``'s: a stand-in built like a collection's, whose gate refuses everyone
    once authenticated, so that no verb, header or status tells a missing collection from a
    hidden one."""

    def __init__(self, base: str, root: Endpoint, collections: dict[str, Endpoint],
                 missing: Endpoint) -> None:
        super().__init__(base, root)
        self.collections = collections
        self.missing = missing

    def locate(self, path: str) -> Route | None:
        if path.startswith(self.prefix):
            name, _, method = path[len(self.prefix):].partition("/")
            if name and not is_reserved_segment(name):
                return self.collections.get(name, self.missing), method
        return super().locate(path)


class CollectionsApp(RcpApp):
    """The ASGI app of :class:`CollectionEndpoints`, whose root serves ``directory``."""

    def __init__(self, endpoints: CollectionEndpoints, directory: _Directory,
                 **options: Any) -> None:
        super().__init__(endpoints, directory, **options)
        self.directory = directory

    @property
    def public_url(self) -> str | None:
        """``http://host:port``: ``catalog/list`` then gives each collection's
        ``endpoint``; it may be set once the port is known."""
        return self.directory.public_url

    @public_url.setter
    def public_url(self, url: str | None) -> None:
        self.directory.public_url = url.rstrip("/") if url else None


class _Directory(Server):
    """The server's own endpoint: ready when every collection is (``/readyz``)."""

    def __init__(self, collections: Mapping[str, Server]) -> None:
        super().__init__(DIRECTORY_NAME, __version__)
        self.collections = collections
        self.public_url: str | None = None
        """See :attr:`CollectionsApp.public_url`."""

    def readiness(self) -> str | None:
        for name, server in self.collections.items():
            reason = server.readiness()
            if reason is not None:
                return f"collection {name}: {reason}"
        return None


def _directory(collections: Mapping[str, Server], access: Access, base: str) -> _Directory:
    """The server's own endpoint at ``base``: ``catalog/list`` of the collections a caller
    may see."""
    directory = _Directory(collections)
    directory.capability("catalog", {})

    def catalog_list(params: Any, ctx: Context) -> dict[str, Any]:
        engines = []
        for name in access.visible(ctx.caller, collections):
            server = collections[name]
            entry: dict[str, Any] = {"id": name,
                                     "server": {"name": server.name, "version": server.version},
                                     "capabilities": dict(server.capabilities)}
            if directory.public_url is not None:
                entry["endpoint"] = {"transport": "http",
                                     "url": f"{directory.public_url}{base}/{name}"}
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
                           metrics: Metrics | None = None, cors_origins: Iterable[str] = (),
                           **endpoint_options: Any) -> CollectionsApp:
    """Serve each of ``collections`` (name → its server) at ``<base>/<name>``, and the
    server's own ``catalog/list`` at ``base``, with ``/healthz``, ``/readyz`` (every
    collection ready) and ``/metrics`` beside it (each collection's requests labelled with
    its name). ``endpoint_options`` go to every collection's
    :func:`~rcpkit.transports.http.endpoint.open_endpoint` (stateless sessions only: the
    caller of each request is what authorisation and provenance look at)."""
    if endpoint_options.get("sessions", "stateless") != "stateless":
        raise UsageError("collections are served with the stateless session policy")
    for option in ("auth_tokens", "api_key_header", "gate", "authorize", "admit_member",
                   "collection"):
        if option in endpoint_options:
            raise UsageError(f"{option} is the Access object's business")
    base = "/" + base.strip("/")
    if metrics is not None:
        if access.on_refusal is None:
            access.on_refusal = metrics.rate_limited
        if metrics.hidden_for is None:
            metrics.hidden_for = _hidden_from_scraper(access, frozenset(collections))
    endpoints = {name: open_endpoint(server, gate=CollectionGate(access, name),
                                     authorize=access.authorizer(name),
                                     admit_member=access.member_admission(name),
                                     metrics=metrics, collection=name, **endpoint_options)
                 for name, server in collections.items()}
    missing = open_endpoint(Server(DIRECTORY_NAME, __version__),
                            gate=CollectionGate(access, None, exists=False), **endpoint_options)
    directory = _directory(collections, access, base)
    root = open_endpoint(directory, gate=CollectionGate(access, None),
                         admit_member=access.member_admission(None), metrics=metrics,
                         **endpoint_options)
    app = CollectionsApp(CollectionEndpoints(base, root, endpoints, missing), directory,
                         metrics=metrics, cors_origins=cors_origins)
    app.public_url = public_url
    return app
