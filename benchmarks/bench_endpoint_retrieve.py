"""Where a keyword ``retrieve`` over HTTP spends its time, in process (issue 32): the example
server's ``retrieve`` answered through its HTTP endpoint (``Endpoint.answer``, no sockets),
its ``async def`` handler on the loop as served, against the same work as a synchronous
handler on a pool thread, next to the search alone and a ``ping``. Alternating blocks, best µs
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


def answering(method: str, *, on_pool: bool = False) -> Callable[[], Awaitable[Any]]:
    """One request of ``method`` to a fresh endpoint; ``on_pool`` runs the example's
    ``retrieve`` (an ``async def`` that never awaits) as a synchronous handler, which the
    dispatcher sends to a pool thread."""
    server = build_server()
    if on_pool:
        handler = server.handlers[method]
        run_async = handler.fn

        def run(params: Any, ctx: Context) -> Any:
            coroutine = run_async(params, ctx)
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            raise RuntimeError("the handler awaited: it cannot run as a synchronous one")
        server.handlers[method] = dataclasses.replace(handler, fn=run, is_async=False)
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
    rows = {"retrieve, the handler on the loop (as served)": answering("retrieve"),
            "retrieve, the same handler on a pool thread": answering("retrieve", on_pool=True),
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
