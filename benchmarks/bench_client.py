"""Client throughput: rcpkit's client vs the reference SDK client, same server, same run.

Both clients talk to rcpkit's example server (src/rcpkit/server/example.py) over
stdio and over loopback HTTP. The two clients are measured in alternating rounds
and the best round of each is kept, so background load hits both alike. Prints
requests/s and the ratio. Not a test.

    python benchmarks/bench_client.py [--seconds 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import rcp
from _net import free_port, wait_listening

from rcpkit.client import AsyncClient, connect_http, connect_stdio

SERVE = "from rcpkit.server.example import build_server; from rcpkit.transports.{0} import {1}; "
STDIO_ARGV = [sys.executable, "-c", SERVE.format("stdio", "serve_stdio")
              + "serve_stdio(build_server())"]
DOCUMENTS = [{"id": f"d{i}", "text": f"document {i} about topic {i % 7}"} for i in range(200)]


def http_argv(port: int) -> list[str]:
    return [sys.executable, "-c", SERVE.format("http", "serve_http")
            + f"serve_http(build_server(), port={port})"]


def rate(seconds: float, step: Callable[[], int]) -> float:
    """Requests/s of a blocking ``step`` (returns how many requests it made)."""
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        count += step()
    return count / (time.perf_counter() - start)


async def arate(seconds: float, step: Callable[[], Awaitable[int]]) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        count += await step()
    return count / (time.perf_counter() - start)


async def ours(client: AsyncClient, seconds: float) -> dict[str, float]:
    await client.index_add(DOCUMENTS)

    async def ping() -> int:
        await client.ping()
        return 1

    async def pipelined() -> int:
        await asyncio.gather(*(client.ping() for _ in range(64)))
        return 64

    async def retrieve() -> int:
        await client.retrieve("topic 3", k=10)
        return 1

    return {"ping sequential": await arate(seconds, ping),
            "ping 64 in flight": await arate(seconds, pipelined),
            "retrieve sequential": await arate(seconds, retrieve)}


def reference(client: rcp.Client, seconds: float) -> dict[str, float]:
    client.call("index/add", {"documents": DOCUMENTS})

    def ping() -> int:
        client.ping()
        return 1

    def retrieve() -> int:
        client.retrieve("topic 3", k=10)
        return 1

    return {"ping sequential": rate(seconds, ping),
            "retrieve sequential": rate(seconds, retrieve)}


def report(transport: str, mine: dict[str, float], theirs: dict[str, float]) -> None:
    for name, value in mine.items():
        other = theirs.get(name)
        ratio = f"{value / other:5.2f}x" if other else "  n/a"
        shown = f"{other:9.0f}" if other else "      n/a"
        print(f"{transport:5} {name:20} rcpkit {value:9.0f}/s  reference {shown}/s  {ratio}")


def best(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {name: max(figures[name] for figures in rounds) for name in rounds[0]}


async def main(seconds: float, rounds: int) -> None:
    mine, theirs = [], []
    async with await connect_stdio(STDIO_ARGV, log_level=None) as client:
        ref = rcp.connect_stdio(STDIO_ARGV)
        try:
            for _ in range(rounds):
                mine.append(await ours(client, seconds))
                theirs.append(reference(ref, seconds))
        finally:
            ref.shutdown()
    report("stdio", best(mine), best(theirs))

    port = free_port()
    server = subprocess.Popen(http_argv(port))
    mine, theirs = [], []
    try:
        wait_listening(port)
        url = f"http://127.0.0.1:{port}/rcp"
        async with await connect_http(url, log_level=None) as client:
            ref = rcp.connect_http(url)
            for _ in range(rounds):
                mine.append(await ours(client, seconds))
                theirs.append(reference(ref, seconds))
        report("http", best(mine), best(theirs))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each figure")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per client")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.seconds, arguments.rounds))
