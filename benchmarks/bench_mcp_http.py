"""``rcpkit mcp --listen`` (stateless streamable HTTP): start-up, ``initialize`` latency and
``retrieve`` tool calls per second with 1 and 2 worker processes, on the bundled sample
notes (hashing embedder)::

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mcp_http.py [--calls 400] [--concurrency 8]

Start-up is from launching the command to its announcement on stderr (the engine is open
and every worker serves); ``initialize`` is the median of fresh ``initialize`` POSTs once
announced, and from launch for ``rcpkit mcp`` over stdio (what a desktop host waits for).
Calls/s: ``--concurrency`` loopback clients, one connection per request (as independent
agents behind a balancer would come), POSTing ``tools/call retrieve`` until ``--calls`` are
answered; every answer is checked, so none is lost unnoticed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _net import free_port

from rcpkit.engine.core import open_engine
from rcpkit.ingest.sample import sample_documents

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}
QUERIES = ["why do bees swarm", "sourdough starter", "moon phases", "hot composting"]
STARTUP_TIMEOUT_S = 120


def call(n: int) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
        "name": "retrieve", "arguments": {"query": QUERIES[n % len(QUERIES)], "k": 5}}}


def answered(response: httpx.Response) -> dict[str, object]:
    """The JSON-RPC reply in a JSON or SSE response."""
    response.raise_for_status()
    if response.headers["content-type"].startswith("application/json"):
        reply: dict[str, object] = response.json()
        return reply
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    reply = json.loads(data[-1])
    return reply


def launch(data: Path, workers: int, stderr: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    started = time.perf_counter()
    with stderr.open("wb") as err:
        process = subprocess.Popen([*RCPKIT, "mcp", "--data", str(data), "--listen",
                                    f"127.0.0.1:{port}", "--workers", str(workers)], stderr=err)
    while "serving MCP" not in stderr.read_text():
        if process.poll() is not None or time.perf_counter() - started > STARTUP_TIMEOUT_S:
            process.kill()
            raise RuntimeError(f"the server did not start: {stderr.read_text()}")
        time.sleep(0.02)
    return process, f"http://127.0.0.1:{port}/mcp", time.perf_counter() - started


async def calls_per_second(url: str, calls: int, concurrency: int) -> float:
    pending = iter(range(calls))
    done = 0

    async def client() -> None:
        nonlocal done
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(
                max_keepalive_connections=0)) as http:
            for n in pending:
                reply = answered(await http.post(url, headers=HEADERS, json=call(n)))
                result = reply["result"]
                assert isinstance(result, dict) and result["structuredContent"]["hits"], reply
                done += 1

    async with httpx.AsyncClient(timeout=60) as warm:
        for n in range(8):
            answered(await warm.post(url, headers=HEADERS, json=call(n)))
    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    assert done == calls
    return calls / elapsed


def initialize_ms(url: str, times: int = 20) -> float:
    samples = []
    with httpx.Client(timeout=60) as http:
        for _ in range(times):
            started = time.perf_counter()
            answered(http.post(url, headers=HEADERS, json=INITIALIZE))
            samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def stdio_initialize_s(data: Path) -> float:
    """From launching ``rcpkit mcp --data`` over stdio to its ``initialize`` answer."""
    started = time.perf_counter()
    process = subprocess.Popen([*RCPKIT, "mcp", "--data", str(data)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    process.stdin.close()
    process.wait(60)
    assert json.loads(line)["result"]["serverInfo"]["name"] == "rcpkit-mcp"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        data = Path(directory) / "kb"
        data.mkdir()
        (data / "rcpkit.toml").write_text('embedder = "hashing"\nhashing_dimension = 64\n')
        engine = open_engine(data)
        engine.add(sample_documents(), chunk=True, max_trust="trusted")
        engine.close()
        print(f"stdio: launch to initialize answered: {stdio_initialize_s(data):.2f} s")
        baseline = None
        for workers in (1, 2):
            process, url, startup = launch(data, workers, Path(directory) / f"err{workers}")
            try:
                latency = initialize_ms(url)
                rate = asyncio.run(calls_per_second(url, args.calls, args.concurrency))
            finally:
                process.terminate()
                process.wait(60)
            baseline = baseline or rate
            print(f"{workers} worker(s): start-up {startup:.2f} s, initialize {latency:.1f} ms, "
                  f"{rate:.0f} calls/s ({rate / baseline:.2f}x), {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
