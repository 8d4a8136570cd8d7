"""Opening a data root's collections and serving them (``rcpkit serve --data ROOT``).

The root's own ``rcpkit.toml`` may hold a ``[limits]`` table: the default
:class:`~.limits.Limits` of every principal, which a key's own limits override. Each
collection's engine reads the ``rcpkit.toml`` of its own directory. The limits are counted in
``<root>/limits.sqlite3``, shared by every process serving the root (:mod:`.shared_limits`).
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..binding import build_server, grant_trust
from ..server.framework import Server
from .access import Access, RefusalHook, cap_fan_out
from .app import CollectionsApp, create_collections_app
from .collections import CollectionRegistry
from .keys import KeyStore
from .limits import Limiter, Limits
from .provenance import stamp_writes
from .shared_limits import LIMITS_FILE, SharedCounters

__all__ = ["ANONYMOUS", "build_access", "default_limits", "open_collections", "serve_root"]

ANONYMOUS = "anonymous"
"""The principal recorded for writes on a server without keys or tokens."""

ROOT_CONFIG = "rcpkit.toml"


def default_limits(root: Path) -> Limits:
    """The ``[limits]`` of ``<root>/rcpkit.toml`` (none: unlimited)."""
    path = Path(root) / ROOT_CONFIG
    if not path.exists():
        return Limits()
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("limits", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path.name}: [limits] must be a table")
    return Limits.from_mapping(table, f"{path.name} [limits]")


def build_access(root: Path, *, auth_tokens: Iterable[str] = (),
                 api_key_header: str | None = None, limiter: Limiter | None = None,
                 on_refusal: RefusalHook | None = None) -> Access:
    """The keys of ``root``, the fixed tokens and the root's default limits, counted with
    every process serving ``root`` unless another ``limiter`` is given."""
    if limiter is None:
        limiter = Limiter(time.time, time.time, SharedCounters(Path(root) / LIMITS_FILE))
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
        stamp_writes(server, lambda caller: _principal_name(access, caller))
        cap_fan_out(server, access)
        grant_trust(server, lambda caller: _trust_grant(access, caller))
        opened[name] = server
    return opened


def _principal_name(access: Access, caller: str | None) -> str:
    principal = access.principal(caller)
    return ANONYMOUS if principal is None else principal.name


def _trust_grant(access: Access, caller: str | None) -> str | None:
    principal = access.principal(caller)
    return None if principal is None else principal.trust


def serve_root(root: Path, names: Sequence[str] | None, access: Access, *,
               engine_options: dict[str, Any] | None = None,
               **app_options: Any) -> CollectionsApp:
    """The HTTP app of ``root``'s collections (see :func:`.app.create_collections_app`)."""
    servers = open_collections(root, names, access, **(engine_options or {}))
    return create_collections_app(servers, access, **app_options)
