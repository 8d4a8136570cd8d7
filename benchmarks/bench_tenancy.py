"""What keys, scopes, limits and collection routing cost per request: one ``rcpkit serve
--http`` on a single-corpus data directory with ``--auth-token``, one on a data root whose
collection holds the same documents, behind an API key with a rate limit and a concurrency
cap it never reaches (counted in the root's shared ``limits.sqlite3``: a bucket charge and a
lease per request), side by side in one run. Not a test: it prints requests/s and the ratio.

Each round sends ``--requests`` sequential keep-alive requests of each kind (``ping``,
``retrieve``) to each server, the order of the servers alternating; the median of
``--rounds`` rounds is printed.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_tenancy.py [--requests 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _net import free_port, wait_listening

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'
TOPICS = ("bees", "tides", "owls", "moths", "compost", "rivers", "glaciers", "ferns")


def _rcpkit(*args: str) -> str:
    return subprocess.run([*RCPKIT, *args], check=True, capture_output=True, text=True).stdout


def _documents(folder: Path) -> None:
    folder.mkdir()
    for n in range(400):
        topic = TOPICS[n % len(TOPICS)]
        (folder / f"{topic}-{n}.txt").write_text(f"note {n} about {topic} and {TOPICS[n % 3]}")


def _rate(client: httpx.Client, url: str, headers: dict[str, str], method: str,
          params: dict[str, object], count: int) -> float:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    start = time.perf_counter()
    for _ in range(count):
        reply = client.post(url, json=body, headers=headers)
        assert reply.status_code == 200 and "result" in reply.json(), reply.text
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        _documents(tmp / "docs")
        (tmp / "hashing.toml").write_text(CONFIG)
        single = tmp / "single"
        single.mkdir()
        (single / "rcpkit.toml").write_text(CONFIG)
        _rcpkit("index", "add", str(tmp / "docs"), "--data", str(single))
        root = tmp / "root"
        _rcpkit("collection", "create", "docs", "--data", str(root),
                "--config", str(tmp / "hashing.toml"))
        _rcpkit("index", "add", str(tmp / "docs"), "--data", str(root), "--collection", "docs")
        token = _rcpkit("keys", "create", "bench", "--scope", "docs:read", "--limit",
                        "requests_per_second=100000", "--limit", "concurrent=1000",
                        "--data", str(root)).strip()
        servers = {}
        processes = []
        for name, data, extra, path, secret in (
                ("single corpus, --auth-token", single, ["--auth-token", "fixed"], "/rcp", "fixed"),
                ("collection, API key + limits", root, [], "/rcp/docs", token)):
            port = free_port()
            processes.append(subprocess.Popen(
                [*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--data", str(data), *extra],
                stderr=subprocess.DEVNULL))
            wait_listening(port)
            servers[name] = (f"http://127.0.0.1:{port}{path}",
                             {"Authorization": f"Bearer {secret}"})
        try:
            rates: dict[tuple[str, str], list[float]] = {}
            with httpx.Client(timeout=30) as client:
                for round_ in range(options.rounds):
                    order = list(servers.items())[::-1 if round_ % 2 else 1]
                    for method, params in (("ping", {}), ("retrieve", {"query": "owls", "k": 5})):
                        for name, (url, headers) in order:
                            rates.setdefault((name, method), []).append(
                                _rate(client, url, headers, method, params, options.requests))
        finally:
            for process in processes:
                process.terminate()
                process.wait()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")
    names = list(servers)
    for method in ("ping", "retrieve"):
        medians = [statistics.median(rates[(name, method)]) for name in names]
        for name, median in zip(names, medians, strict=True):
            print(f"{method:9} {name:30} {median:8.0f} req/s")
        print(f"{method:9} {'ratio collection / single':30} {medians[1] / medians[0]:8.3f}")


if __name__ == "__main__":
    main()
