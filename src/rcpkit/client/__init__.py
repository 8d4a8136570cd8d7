"""The RCP/1 client SDK: async and blocking clients over stdio or HTTP (§5, §7, §14.4).

::

    from rcpkit.client import connect_stdio, filters as f

    async with await connect_stdio(["rcpkit", "serve", "--stdio"]) as client:
        result = await client.retrieve("eiffel tower", k=5,
                                       filter=f.eq("lang", "en") & f.gte("year", 2020))
        for hit in result.hits:
            print(hit.id, hit.score, hit.citation)

The blocking twin is :class:`Client` (``Client.connect_stdio([...])``).
``client.batch()`` queues calls and sends them as one JSON-RPC batch frame (§11).
:func:`connect_memory` opens a client on a :class:`~rcpkit.server.Server` in this
process, with no pipes or sockets: the way to test a server of your own.
"""

from ..protocol import errors, filters
from .client import (
    AsyncClient,
    Batch,
    CallOptions,
    EmbedOptions,
    GraphOptions,
    ProgressEvent,
    RerankCallOptions,
    RetrieveOptions,
    Stream,
    connect_http,
    connect_stdio,
)
from .memory import MemoryTransport, connect_memory
from .retry import RetryPolicy
from .sync import BlockingBatch, BlockingStream, Client

__all__ = [
    "AsyncClient",
    "Batch",
    "BlockingBatch",
    "BlockingStream",
    "CallOptions",
    "Client",
    "EmbedOptions",
    "GraphOptions",
    "MemoryTransport",
    "ProgressEvent",
    "RerankCallOptions",
    "RetrieveOptions",
    "RetryPolicy",
    "Stream",
    "connect_http",
    "connect_memory",
    "connect_stdio",
    "errors",
    "filters",
]
