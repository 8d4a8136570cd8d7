"""What tracing (:mod:`rcpkit.tracing`, the ``otel`` extra) costs a hybrid ``retrieve``: one
engine (hashing embedder, synthetic corpus) behind three apps answering through their
endpoint in process (the HTTP parsing around it is the same in all three, so it is left out):

- ``off``: tracing off — the dispatcher holds ``None``, the path every server runs by default;
- ``on, no exporter``: an SDK tracer provider without a span processor — the spans (the
  request's and its 10 stages') are made and ended, and dropped;
- ``on, exporter``: the same with a ``BatchSpanProcessor`` serialising every span to JSON
  (the console exporter writing to ``/dev/null``: an exporter's work without a collector).

Blocks of requests alternate between the three; prints each one's p50 and p90 µs per
request over all blocks and the median per-block p50 ratio to ``off``. ``--off-only`` runs
``off`` alone, importing nothing of tracing: run so with ``PYTHONPATH`` at another checkout
(one without tracing) to compare its path with this one's ``off``. Not a test.

    python benchmarks/tracing_overhead.py [--docs 2000] [--requests 300] [--blocks 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from rcpkit.binding import bind
from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn
from rcpkit.transports.http import create_app
from rcpkit.transports.http.asgi import RcpApp

WORDS = ["honey", "bees", "quokkas", "lagoon", "river", "stone", "forest", "night", "owl",
         "mice", "harbour", "lantern", "copper", "violin", "meadow", "glacier", "ferry",
         "orchard", "comet", "tide"]
QUERIES = [f"{WORDS[n % 20]} {WORDS[(n * 7) % 20]} {WORDS[(n * 3 + 1) % 20]}"
           for n in range(50)]


def corpus(size: int) -> list[DocumentIn]:
    return [DocumentIn(" ".join(WORDS[(n * step) % 20] for step in range(1, 12)) + f" {n}",
                       id=f"d{n}") for n in range(size)]


async def block(app: RcpApp, requests: int, offset: int) -> list[float]:
    """µs of each of ``requests`` hybrid retrieves on ``app``'s endpoint."""
    took = []
    for n in range(requests):
        body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "retrieve", "params": {
            "query": QUERIES[(offset + n) % len(QUERIES)], "k": 5}}).encode()
        headers = {b"content-length": b"%d" % len(body)}
        route = app.endpoints.claim(b"POST", b"/rcp/retrieve", headers)
        assert route is not None
        started = time.perf_counter()
        status, _, _ = await route[0].answer(route[1], headers, body)
        took.append((time.perf_counter() - started) * 1e6)
        assert status == 200
    return took


async def measure(apps: dict[str, RcpApp], requests: int, blocks: int
                  ) -> dict[str, tuple[list[float], list[float]]]:
    """Per configuration: every request's µs, and each block's p50."""
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in apps}
    await block(apps["off"], requests, 0)  # warm the caches every configuration shares
    for index in range(blocks):
        for name, app in apps.items():
            took = await block(app, requests, index * requests)
            samples[name][0].extend(took)
            samples[name][1].append(statistics.median(took))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=300, help="per block")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--off-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory, open(os.devnull, "w") as sink:
        engine = Engine.open(EngineConfig(data_dir=Path(directory),
                                          embedder=EmbedderConfig(name="hashing")))
        try:
            documents = corpus(args.docs)
            for start in range(0, len(documents), 500):
                engine.add(documents[start:start + 500])
            server = bind(engine)
            apps = {"off": create_app(server)}
            if not args.off_only:
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import (
                    BatchSpanProcessor,
                    ConsoleSpanExporter,
                )

                from rcpkit.tracing import Tracing

                exporting = TracerProvider()
                exporting.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sink)))
                apps["on, no exporter"] = create_app(server,
                                                     tracing=Tracing(TracerProvider()))
                apps["on, exporter"] = create_app(server, tracing=Tracing(exporting))
            samples = asyncio.run(measure(apps, args.requests, args.blocks))
            if not args.off_only:
                exporting.shutdown()
        finally:
            engine.close()
    base = samples["off"][1]
    print(f"{args.docs} documents, {args.blocks} blocks of {args.requests} hybrid retrieves")
    print(f"{'tracing':<16} {'p50 µs':>8} {'p90 µs':>8} {'median p50 / off':>17}")
    for name, (every, per_block) in samples.items():
        deciles = statistics.quantiles(every, n=10)
        ratio = statistics.median(p / b for p, b in zip(per_block, base, strict=True))
        print(f"{name:<16} {statistics.median(every):8.0f} {deciles[8]:8.0f} {ratio:16.3f}×")


if __name__ == "__main__":
    main()
