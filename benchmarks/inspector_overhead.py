"""What the web inspector adds to a call: a retrieve through ``POST /api/call`` (real loopback
HTTP to the inspector on the lean server, its SSE answer parsed) against the same retrieve
sent straight on the inspector's own client connection.

Both go to one engine (the built-in engine over stdio on the sample notes, hashing
embedder so no model loads) and are measured in alternating rounds in one process, so
background load moves both alike. Printed: p50 of each, the ratio of the p50s per round
and its median, and the page's weight (what a browser downloads on first load). Not a test.

    OPENBLAS_NUM_THREADS=1 python benchmarks/inspector_overhead.py [--calls 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rcpkit.inspector import Inspector, TargetSpec, create_app
from rcpkit.inspector.app import STATIC, TOKEN_HEADER
from rcpkit.transports.http.server import HttpServer

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
PARAMS = {"query": "why do bees swarm", "k": 5, "mode": "sparse"}


def _sample_engine(root: Path) -> Path:
    data = root / "kb"
    data.mkdir()
    (data / "rcpkit.toml").write_text('embedder = "hashing"\n', encoding="utf-8")
    subprocess.run([*RCPKIT, "demo", "--data", str(data)], check=True, capture_output=True)
    return data


async def _timed(calls: int, once: object) -> list[float]:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await once()  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
    return times


async def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        inspector = await Inspector.open(TargetSpec(data=_sample_engine(Path(root))))
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        server = HttpServer(create_app(inspector, "bench", hosts={f"127.0.0.1:{port}"}))
        serving = asyncio.ensure_future(server.serve(listener, handle_signals=False))
        while not server.started:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     headers={TOKEN_HEADER: "bench"}) as web:

            async def direct() -> None:
                await inspector.client.call("retrieve", PARAMS)

            async def through_page() -> None:
                response = await web.post("/api/call", json={"method": "retrieve",
                                                             "params": PARAMS})
                assert b'"type":"outcome"' in response.content and b'"hits"' in response.content

            await _timed(20, direct)
            await _timed(20, through_page)
            ratios, best = [], {"direct": [], "inspector": []}
            for _ in range(rounds):
                a = statistics.median(await _timed(calls, direct))
                b = statistics.median(await _timed(calls, through_page))
                best["direct"].append(a)
                best["inspector"].append(b)
                ratios.append(b / a)
        server.stop()
        await serving
        await inspector.close()
    page = sum(path.stat().st_size for path in STATIC.iterdir())
    print(f"retrieve p50, {calls} calls x {rounds} rounds (best round):")
    print(f"  direct client call        {min(best['direct']):7.2f} ms")
    print(f"  through the inspector API {min(best['inspector']):7.2f} ms")
    print(f"  inspector/direct p50 ratio per round: "
          f"{', '.join(f'{r:.2f}' for r in ratios)}  (median {statistics.median(ratios):.2f})")
    print(f"page weight (html+css+js, uncompressed): {page / 1024:.1f} KiB, no other request")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
