"""Opening a data root's collections and serving them (``rcpkit serve --data ROOT``).

The root's own ``rcpkit.toml`` may hold a ``[limits]`` table: the default
:class:`~.limits.Limits` of every principal, which a key's own limits override. Each
collection's engine reads the ``rcpkit.toml`` of its own directory. The limits are counted
once for every process serving the root (:mod:`.shared_limits`): in ``<root>/limits.sqlite3``,
or in the PostgreSQL database a ``[limits_store]`` table's ``dsn`` names.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..binding import build_server, grant_trust
from ..server.framework import Server
from .access import Access, PrincipalOf, RefusalHook, cap_fan_out
from .app import CollectionsApp, create_collections_app
from .collections import CollectionRegistry
from .keys import KeyStore
from .limits import CounterStore, Limiter, Limits
from .provenance import stamp_writes
from .shared_limits import LIMITS_FILE, PostgresCounters, SharedCounters

__all__ = ["ANONYMOUS", "STDIO_PRINCIPAL", "as_stdio_peer", "build_access", "default_limits",
           "govern_writes", "limit_counters", "open_collections", "serve_root"]

ANONYMOUS = "anonymous"
"""The principal recorded for writes on a server without keys or tokens."""
STDIO_PRINCIPAL = "stdio"
"""The principal recorded for writes over stdio (:func:`as_stdio_peer`)."""

ROOT_CONFIG = "rcpkit.toml"


def _root_table(root: Path, name: str) -> dict[str, Any]:
    """The ``[name]`` table of ``<root>/rcpkit.toml`` (empty without one)."""
    path = Path(root) / ROOT_CONFIG
    if not path.exists():
        return {}
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get(name, {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path.name}: [{name}] must be a table")
    return table


def default_limits(root: Path) -> Limits:
    """The ``[limits]`` of ``<root>/rcpkit.toml`` (none: unlimited)."""
    return Limits.from_mapping(_root_table(root, "limits"), f"{ROOT_CONFIG} [limits]")


def limit_counters(root: Path) -> CounterStore:
    """Where the processes serving ``root`` count the limits: the PostgreSQL database of
    ``[limits_store] dsn`` in ``<root>/rcpkit.toml`` (machines sharing it), else
    ``<root>/limits.sqlite3`` (the processes of this host)."""
    table = _root_table(root, "limits_store")
    where = f"{ROOT_CONFIG} [limits_store]"
    if set(table) - {"dsn"}:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(sorted(set(table) - {'dsn'}))}"
                         " (known: dsn)")
    dsn = table.get("dsn")
    if dsn is None:
        return SharedCounters(Path(root) / LIMITS_FILE)
    if not isinstance(dsn, str) or not dsn:
        raise ValueError(f"{where}: dsn must be a PostgreSQL connection string")
    return PostgresCounters(dsn)


def build_access(root: Path, *, auth_tokens: Iterable[str] = (),
                 api_key_header: str | None = None, limiter: Limiter | None = None,
                 on_refusal: RefusalHook | None = None) -> Access:
    """The keys of ``root``, the fixed tokens and the root's default limits, counted with
    every process serving ``root`` unless another ``limiter`` is given."""
    if limiter is None:
        limiter = Limiter(time.time, time.time, limit_counters(root))
    return Access(KeyStore(root), auth_tokens=auth_tokens, api_key_header=api_key_header,
                  defaults=default_limits(root), limiter=limiter, on_refusal=on_refusal)


def open_collections(root: Path, names: Sequence[str] | None, access: Access,
                     open_server: Callable[[Path], Server] | None = None,
                     **engine_options: Any) -> dict[str, Server]:
    """Each named collection (default: all) as a server whose writes are stamped with the
    caller's principal (:mod:`.provenance`), whose fan-out is held to the caller's caps
    (:func:`.access.cap_fan_out`) and whose writes may name the trust level its key grants."""
    registry = CollectionRegistry(root)
    chosen = list(names) if names else registry.names()
    opened: dict[str, Server] = {}
    for name in chosen:
        path = registry.path(name)
        server = open_server(path) if open_server is not None \
            else build_server(path, **engine_options)
        govern_writes(server, access.principal)
        opened[name] = server
    return opened


def govern_writes(server: Server, principal_of: PrincipalOf, *,
                  unidentified_trust: str | None = None) -> None:
    """Make ``server`` answer each caller as its principal (``principal_of(caller)``): its
    ``index/add`` stamped with the principal's name (:mod:`.provenance`, ``anonymous``
    for none), its fan-out held to the principal's caps (:func:`.access.cap_fan_out`), and
    its writes labelled at most the principal's trust grant (§15.2; no grant: the
    collection's setting; no principal: ``unidentified_trust``, None for the setting)."""
    def name(caller: str | None) -> str:
        principal = principal_of(caller)
        return ANONYMOUS if principal is None else principal.name

    def grant(caller: str | None) -> str | None:
        principal = principal_of(caller)
        return unidentified_trust if principal is None else principal.trust

    stamp_writes(server, name)
    cap_fan_out(server, principal_of)
    grant_trust(server, grant)


def as_stdio_peer(server: Server) -> None:
    """Stamp ``server``'s writes as the stdio peer's: whoever started the process, the
    local operator (§15.6), whose writes the collection's ``trust`` setting labels."""
    stamp_writes(server, lambda _caller: STDIO_PRINCIPAL)


def serve_root(root: Path, names: Sequence[str] | None, access: Access, *,
               engine_options: dict[str, Any] | None = None,
               **app_options: Any) -> CollectionsApp:
    """The HTTP app of ``root``'s collections (see :func:`.app.create_collections_app`)."""
    servers = open_collections(root, names, access, **(engine_options or {}))
    return create_collections_app(servers, access, **app_options)
