"""rcpkit — RCP/1 (Retrieval Context Protocol) for Python.

The names most programs need, importable from the top::

    from rcpkit import Client, filters as f

    with Client.connect_stdio(["rcpkit", "serve", "--stdio"]) as client:
        hits = client.retrieve("eiffel tower", k=5, filter=f.eq("lang", "en")).hits

Everything else lives in its subpackage (``rcpkit.protocol``, ``rcpkit.server``,
``rcpkit.client``, ``rcpkit.engine``, …). The names below are imported on first
use, so ``import rcpkit`` stays cheap for a program that only needs the
sans-I/O protocol core.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
"""The package version: the only place it is written (``pyproject.toml`` reads it)."""

if TYPE_CHECKING:
    from .client import (
        AsyncClient,
        Client,
        RetrieveOptions,
        RetryPolicy,
        connect_http,
        connect_memory,
        connect_stdio,
    )
    from .protocol import filters
    from .protocol.errors import RcpError, UsageError
    from .server import Context, Server

__all__ = [
    "AsyncClient",
    "Client",
    "Context",
    "RcpError",
    "RetrieveOptions",
    "RetryPolicy",
    "Server",
    "UsageError",
    "__version__",
    "connect_http",
    "connect_memory",
    "connect_stdio",
    "filters",
]

_HOMES = {
    "AsyncClient": ".client", "Client": ".client", "RetrieveOptions": ".client",
    "RetryPolicy": ".client", "connect_http": ".client", "connect_memory": ".client",
    "connect_stdio": ".client", "filters": ".protocol", "RcpError": ".protocol.errors",
    "UsageError": ".protocol.errors", "Context": ".server", "Server": ".server",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rcpkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
