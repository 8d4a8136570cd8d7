"""Gateway overhead (§16): median retrieve latency direct vs through ``rcpkit gateway``.

Runs the in-memory keyword example engine over stdio, then the same engine behind a
gateway (one engine, then three), all over stdio, and prints medians and ratios::

    python benchmarks/federation_overhead.py [--queries 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rcpkit.client.client import AsyncClient, connect_stdio

ENGINE = [sys.executable, "-c", "from rcpkit.cli import main; main()", "serve", "--stdio",
          "--app", "rcpkit.server.example:server"]
GATEWAY = [sys.executable, "-c", "from rcpkit.cli import main; main()", "gateway", "--stdio"]
QUERIES = ["json protocol", "stdio line", "http request", "bm25 documents frequency"]


async def median_ms(client: AsyncClient, queries: int) -> float:
    for query in QUERIES:  # warm-up
        await client.call("retrieve", {"query": query, "k": 3})
    samples = []
    for index in range(queries):
        started = time.perf_counter()
        await client.call("retrieve", {"query": QUERIES[index % len(QUERIES)], "k": 3})
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def through_gateway(engines: int, queries: int, directory: Path) -> float:
    registry = directory / f"rcp-{engines}.json"
    registry.write_text(json.dumps({"engines": [
        {"id": f"e{index}", "transport": "stdio", "command": ENGINE}
        for index in range(engines)]}))
    async with await connect_stdio([*GATEWAY, "--registry", str(registry)]) as client:
        return await median_ms(client, queries)


async def main(queries: int) -> None:
    async with await connect_stdio(ENGINE) as client:
        direct = await median_ms(client, queries)
    with tempfile.TemporaryDirectory() as directory:
        one = await through_gateway(1, queries, Path(directory))
        three = await through_gateway(3, queries, Path(directory))
    print(f"retrieve median over {queries} queries (stdio, k=3)")
    print(f"  direct to engine        {direct:7.3f} ms")
    print(f"  gateway, 1 engine       {one:7.3f} ms  ({one / direct:.2f}x direct)")
    print(f"  gateway, 3 engines      {three:7.3f} ms  ({three / direct:.2f}x direct)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    asyncio.run(main(parser.parse_args().queries))
