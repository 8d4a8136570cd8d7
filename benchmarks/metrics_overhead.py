"""What ``--metrics`` costs per request: the same app, with and without a Metrics object,
answering ``ping`` and the example keyword ``retrieve`` through its endpoint in process
(the HTTP parsing around it is the same either way, so it is left out), in alternating
blocks. Prints the best µs per request of each and the median per-block ratio. Not a test.

    python benchmarks/metrics_overhead.py [--requests 2000] [--blocks 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app
from rcpkit.transports.http.asgi import RcpApp
from rcpkit.transports.http.metrics import Metrics

BODIES = {
    "ping": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
    "retrieve": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                            "params": {"query": "json lines over stdio", "k": 3}}).encode(),
}


async def block_us(app: RcpApp, method: str, requests: int) -> float:
    """µs per request over ``requests`` calls of ``method`` on ``app``'s endpoint."""
    body = BODIES[method]
    headers = {b"content-length": b"%d" % len(body)}
    route = app.endpoints.claim(b"POST", f"/rcp/{method}".encode(), headers)
    assert route is not None and route[1] == method
    endpoint = route[0]
    started = time.perf_counter()
    for _ in range(requests):
        status, _, _ = await endpoint.answer(method, headers, body)
        assert status == 200
    return (time.perf_counter() - started) / requests * 1e6


async def measure(method: str, requests: int, blocks: int) -> tuple[float, float, float]:
    """Best µs without and with metrics, and the median of the per-block ratios (each block
    pairs two back-to-back runs: the figure least moved by background load)."""
    off = create_app(build_server())
    on = create_app(build_server(), metrics=Metrics())
    pairs = [(await block_us(off, method, requests), await block_us(on, method, requests))
             for _ in range(blocks)]
    return (min(p[0] for p in pairs), min(p[1] for p in pairs),
            statistics.median(p[1] / p[0] for p in pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2_000, help="per block")
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args()
    print(f"{'method':<10} {'off µs':>8} {'on µs':>8} {'median on/off':>14}")
    for method in BODIES:
        off, on, ratio = asyncio.run(measure(method, args.requests, args.blocks))
        print(f"{method:<10} {off:8.2f} {on:8.2f} {ratio:13.2f}×")


if __name__ == "__main__":
    main()
