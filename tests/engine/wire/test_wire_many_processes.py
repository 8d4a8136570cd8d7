"""Several ``rcpkit serve --http`` processes and ``rcpkit index add`` runs on one SQLite data
directory under a mixed load of retrieves, adds and deletes: no request fails, nothing says
"database is locked", and every acknowledged write is seen by every process afterwards
(§7.10: an acknowledged write is committed; §7.7.1: every process serves the latest version)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_wire import HttpEngine, make_data_dir, rcpkit_argv

SERVERS = 3
CLIENTS = 4
OPERATIONS = 24
INDEX_RUNS = 2

pytestmark = pytest.mark.timeout(300)


class Client(threading.Thread):
    """One caller: adds its own documents, deletes every third one it added, retrieves in
    between; each request goes to the next server in turn."""

    def __init__(self, number: int, servers: list[HttpEngine]) -> None:
        super().__init__(daemon=True)
        self.number = number
        self.servers = servers
        self.live: set[str] = set()
        self.failures: list[str] = []

    def call(self, turn: int, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        server = self.servers[(self.number + turn) % len(self.servers)]
        frame = {"jsonrpc": "2.0", "id": turn, "method": method, "params": params}
        try:
            body = httpx.post(f"{server.base}/{method}", json=frame, timeout=60).json()
        except httpx.HTTPError as exc:
            self.failures.append(f"{method}: {exc!r}")
            return None
        if "result" not in body:
            self.failures.append(f"{method}: {body}")
            return None
        result: dict[str, Any] = body["result"]
        return result

    def run(self) -> None:
        for turn in range(OPERATIONS):
            doc_id = f"c{self.number}-{turn}"
            if turn % 3 == 0:
                self.call(turn, "retrieve", {"query": "harbour crane shift", "k": 5})
            elif turn % 3 == 1:
                added = self.call(turn, "index/add", {"documents": [{
                    "id": doc_id, "text": f"Harbour crane shift {self.number} log {turn}."}]})
                if added is not None:
                    self.live.add(doc_id)
            else:
                victim = f"c{self.number}-{turn - 4}"
                if victim in self.live and self.call(turn, "index/delete",
                                                     {"ids": [victim]}) is not None:
                    self.live.discard(victim)


def index_runs(tmp_path: Path, data: Path, failures: list[str]) -> None:
    """``rcpkit index add`` of a fresh folder, several times, beside the servers."""
    for run in range(INDEX_RUNS):
        folder = tmp_path / f"folder{run}"
        folder.mkdir()
        for n in range(5):
            (folder / f"note{n}.txt").write_text(f"Quay note {run}-{n}: the tide was high.")
        done = subprocess.run(rcpkit_argv("index", "add", str(folder), "--data", str(data),
                                          "--prefix", f"f{run}"),
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or "locked" in done.stderr:
            failures.append(f"index add: {done.returncode} {done.stderr[-400:]}")


def test_many_processes_on_one_root_lose_nothing_and_never_lock(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "kb")
    servers = [HttpEngine(data) for _ in range(SERVERS)]
    logs: list[str] = []
    try:
        clients = [Client(number, servers) for number in range(CLIENTS)]
        indexer_failures: list[str] = []
        indexer = threading.Thread(target=index_runs, args=(tmp_path, data, indexer_failures))
        for thread in [*clients, indexer]:
            thread.start()
        for thread in [*clients, indexer]:
            thread.join(600)
        assert [f for c in clients for f in c.failures] == []
        assert indexer_failures == []
        live = {doc_id for client in clients for doc_id in client.live}
        every_id = sorted({f"c{c}-{t}" for c in range(CLIENTS) for t in range(OPERATIONS)})
        for server in servers:
            found = server.ok("retrieve", {"query": "harbour crane shift log", "k": 200,
                                           "mode": "sparse"})
            assert {hit["id"].partition("#")[0] for hit in found["hits"]} & set(every_id) \
                == live
            notes = server.ok("retrieve", {"query": "quay note tide", "k": 200,
                                           "mode": "sparse"})
            assert len(notes["hits"]) == INDEX_RUNS * 5
    finally:
        for server in servers:
            server.close()
            assert server.proc.stderr is not None
            logs.append(server.proc.stderr.read().decode(errors="replace"))
    assert not any("locked" in log for log in logs), [log[-600:] for log in logs]
