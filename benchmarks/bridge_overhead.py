"""Bridge overhead: median ``retrieve`` latency straight through the client vs through each
bridge, all on one in-process engine over the bundled sample notes (hashing embedder)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bridge_overhead.py [--queries 200]

Rows: the AsyncClient in-process (the baseline), the bridge's own work for the MCP tool
(argument checks, structured content, passage rendering) without the SDK, the MCP tool
through the ``mcp`` SDK's in-process client (which also validates each result against the
tool's output schema), ``rcpkit mcp --data`` over
stdio (a second process, JSON-RPC framing both ways), LangChain ``ainvoke`` and LlamaIndex
``aretrieve``. Ratios are to the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from llama_index.core.schema import QueryBundle
from mcp import Client, StdioServerParameters

from rcpkit.engine.core import open_engine
from rcpkit.ingest.sample import sample_documents
from rcpkit.integrations import langchain, llama_index
from rcpkit.integrations.engines import open_engine as open_rcp
from rcpkit.integrations.mcp import McpBridge

QUERIES = ["why do bees swarm", "sourdough starter", "moon phases", "hot composting",
           "frost protection", "reading the clouds"]
RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]


async def median_ms(call: Callable[[str], Awaitable[Any]], queries: int) -> float:
    for query in QUERIES:  # warm-up
        await call(query)
    samples = []
    for index in range(queries):
        started = time.perf_counter()
        await call(QUERIES[index % len(QUERIES)])
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


async def measure(data: Path, queries: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with open_rcp(data=data) as rcp:
        figures["AsyncClient, in-process"] = await median_ms(
            lambda query: rcp.retrieve(query, 5), queries)
        bridge = McpBridge(rcp)
        tool = bridge.tools["retrieve"]

        async def bridge_only(query: str) -> Any:
            return bridge.tool_result(await bridge.call(tool, {"query": query, "k": 5}))

        figures["McpBridge alone (no MCP SDK)"] = await median_ms(bridge_only, queries)
        async with Client(bridge.server()) as mcp:
            figures["MCP tool, in-process SDK client"] = await median_ms(
                lambda query: mcp.call_tool("retrieve", {"query": query, "k": 5}), queries)
        lc = langchain.RcpRetriever(client=rcp, k=5)
        figures["LangChain ainvoke"] = await median_ms(lc.ainvoke, queries)
        li = llama_index.RcpRetriever(rcp, k=5)
        figures["LlamaIndex aretrieve"] = await median_ms(
            lambda query: li.aretrieve(QueryBundle(query)), queries)
    argv = [*RCPKIT, "mcp", "--data", str(data)]
    stdio = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(stdio) as mcp:
        figures["rcpkit mcp over stdio"] = await median_ms(
            lambda query: mcp.call_tool("retrieve", {"query": query, "k": 5}), queries)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        data = Path(directory)
        (data / "rcpkit.toml").write_text('embedder = "hashing"\nhashing_dimension = 64\n')
        engine = open_engine(data)
        engine.add(sample_documents(), chunk=True, max_trust="trusted")
        engine.close()
        figures = asyncio.run(measure(data, args.queries))
    base = next(iter(figures.values()))
    print(f"retrieve median over {args.queries} queries (k=5, 20 sample notes)")
    for name, value in figures.items():
        print(f"  {name:34s} {value:7.3f} ms  ({value / base:.2f}x)")


if __name__ == "__main__":
    main()
