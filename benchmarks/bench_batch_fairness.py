"""Whether one tenant's batch of heavy calls holds up another tenant (issue 31, §11, §15.5).

One ``rcpkit serve --http --data ROOT`` with a collection, a ``heavy`` key limited to one
call at a time and a ``light`` key. The heavy key posts one batch of ``--members``
``query/transform`` calls on a ``--query-kb`` query; meanwhile the light key sends
sequential ``retrieve`` calls (k=5) until the batch is answered: calls that, like the
batch's, run on the server's worker threads. Printed: how many members ran and how many
were refused, and the light key's median and worst call during the batch over its median
on the idle server (``--calls`` of them; a ratio: 1 means the batch costs the other tenant
nothing). Not a test.

``--src DIR`` runs rcpkit from another checkout's ``src`` (e.g. a ``git archive`` of an
earlier commit) for a before/after comparison on the same machine.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_batch_fairness.py [--members 80]
        [--query-kb 90] [--calls 20] [--src DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _net import free_port, wait_listening

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'
WORDS = ("bees", "honey", "hives", "pollen", "flowers", "crops", "summer", "wax", "queen")


def _rcpkit(env: dict[str, str], *args: str) -> str:
    return subprocess.run([*RCPKIT, *args], check=True, capture_output=True, text=True,
                          env=env).stdout


def _light_seconds(client: httpx.Client, url: str, token: str) -> float:
    start = time.perf_counter()
    reply = client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "retrieve",
                                   "params": {"query": "bees honey", "k": 5}},
                        headers={"Authorization": f"Bearer {token}"})
    assert reply.status_code == 200 and "result" in reply.json(), reply.text
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--members", type=int, default=80)
    parser.add_argument("--query-kb", type=int, default=90)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--src", type=Path, help="run rcpkit from this src directory")
    options = parser.parse_args()
    env = dict(os.environ)
    if options.src is not None:
        env["PYTHONPATH"] = f"{options.src.resolve()}{os.pathsep}{env.get('PYTHONPATH', '')}"
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        docs = tmp / "docs"
        docs.mkdir()
        for n in range(200):
            (docs / f"note-{n}.txt").write_text(
                " ".join(WORDS[(n + i) % len(WORDS)] for i in range(12)))
        (tmp / "hashing.toml").write_text(CONFIG)
        root = tmp / "root"
        _rcpkit(env, "collection", "create", "docs", "--data", str(root),
                "--config", str(tmp / "hashing.toml"))
        _rcpkit(env, "index", "add", str(docs), "--data", str(root), "--collection", "docs")
        heavy = _rcpkit(env, "keys", "create", "heavy", "--scope", "docs:read", "--limit",
                        "concurrent=1", "--data", str(root)).strip()
        light = _rcpkit(env, "keys", "create", "light", "--scope", "docs:read",
                        "--data", str(root)).strip()
        port = free_port()
        server = subprocess.Popen(
            [*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--data", str(root)],
            stderr=subprocess.DEVNULL, env=env)
        try:
            wait_listening(port)
            url = f"http://127.0.0.1:{port}/rcp/docs"
            query = " ".join(WORDS[i % len(WORDS)] for i in range(options.query_kb * 1024 // 6))
            batch = [{"jsonrpc": "2.0", "id": n, "method": "query/transform",
                      "params": {"query": query, "method": "multi-query"}}
                     for n in range(options.members)]
            with httpx.Client(timeout=600) as client:
                idle = [_light_seconds(client, url, light) for _ in range(options.calls)]
                replies: list[Any] = []

                def post_batch() -> None:
                    with httpx.Client(timeout=600) as own:
                        replies.extend(own.post(url, json=batch, headers={
                            "Authorization": f"Bearer {heavy}"}).json())

                started = time.perf_counter()
                poster = threading.Thread(target=post_batch)
                poster.start()
                time.sleep(0.2)  # the batch is being answered
                busy = [_light_seconds(client, url, light)]
                while poster.is_alive() and len(busy) < 100_000:
                    busy.append(_light_seconds(client, url, light))
                poster.join()
                batch_s = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait()
    refused = sum(1 for reply in replies if reply.get("error", {}).get("code") == -32011)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    print(f"batch of {options.members} on a {options.query_kb} KB query: "
          f"{options.members - refused} ran, {refused} refused -32011, {batch_s:.1f} s")
    idle_median = statistics.median(idle)
    print(f"{len(busy)} light calls during the batch, over the idle median: median "
          f"{statistics.median(busy) / idle_median:.1f}x, worst {max(busy) / idle_median:.0f}x")


if __name__ == "__main__":
    main()
