"""Where a keyword ``retrieve`` over HTTP spends its time, in process (issue 32): the example
server's ``retrieve`` answered through its HTTP endpoint (``Endpoint.answer``, no sockets),
with its synchronous handler on a pool thread as served, against the same handler run
inline on the loop, next to the search alone and a ``ping``. Alternating blocks, best µs
per request of each (the best filters out a busy machine's noise). Not a test.

    python benchmarks/bench_endpoint_retrieve.py --requests 1000 --blocks 10
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rcpkit.server.context import Context
from rcpkit.server.example import SAMPLE_DOCUMENTS, KeywordIndex, build_server
from rcpkit.transports.http import create_app

QUERY = "request over HTTP"
BODIES = {"ping": b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
          "retrieve": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                                  "params": {"query": QUERY, "k": 3}}).encode()}


def answering(method: str, *, inline: bool = False) -> Callable[[], Awaitable[Any]]:
    """One request of ``method`` to a fresh endpoint; ``inline`` runs the handler on the
    loop (made async) instead of a pool thread."""
    server = build_server()
    if inline:
        handler = server.handlers[method]
        run_sync = handler.fn

        async def run(params: Any, ctx: Context) -> Any:
            return run_sync(params, ctx)
        server.handlers[method] = dataclasses.replace(handler, fn=run, is_async=True)
    body = BODIES[method]
    headers = {b"content-length": b"%d" % len(body)}
    route = create_app(server).endpoints.claim(b"POST", f"/rcp/{method}".encode(), headers)
    assert route is not None
    endpoint, path_method = route
    return lambda: endpoint.answer(path_method, headers, body)


async def block_us(call: Callable[[], Awaitable[Any]], requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        status, _, reply = await call()
        assert status == 200 and b'"error"' not in reply, reply
    return (time.perf_counter() - started) / requests * 1e6


def search_us(requests: int) -> float:
    index = KeywordIndex(SAMPLE_DOCUMENTS)
    started = time.perf_counter()
    for _ in range(requests):
        index.search(QUERY, 3)
    return (time.perf_counter() - started) / requests * 1e6


async def measure(requests: int, blocks: int) -> dict[str, float]:
    rows = {"retrieve, handler on a pool thread (as served)": answering("retrieve"),
            "retrieve, the same handler inline": answering("retrieve", inline=True),
            "ping": answering("ping")}
    best = dict.fromkeys([*rows, "the search alone"], float("inf"))
    for _ in range(blocks):
        for name, call in rows.items():
            best[name] = min(best[name], await block_us(call, requests))
        best["the search alone"] = min(best["the search alone"], search_us(requests))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="per block")
    parser.add_argument("--blocks", type=int, default=10)
    options = parser.parse_args()
    for name, us in asyncio.run(measure(options.requests, options.blocks)).items():
        print(f"{name:48} {us:8.1f} µs")


if __name__ == "__main__":
    main()
