"""``rcpkit serve --http --workers N`` on one data directory (scale-out): every
worker refreshes from the shared SQLite record before each request, so a write answered by one
worker is visible to every later request whichever worker answers it (§7.7.1 versions included),
and the served engine still certifies L2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
from engine_wire import HttpEngine, make_data_dir, rcpkit_argv
from test_wire_certification import certify

WORKERS = 2
ROUNDS = 30


def worker_pids(server: HttpEngine) -> list[int]:
    children = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text()
    return [int(pid) for pid in children.split()]


def read_syscalls(pid: int) -> int:
    """Read syscalls made by ``pid`` so far: it grows as a worker reads requests."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"])


def call(server: HttpEngine, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One request on a fresh connection, so any worker may accept it."""
    frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    body = httpx.post(f"{server.base}/{method}", json=frame, timeout=30,
                      headers={"Connection": "close"}).json()
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def hit_ids(server: HttpEngine, query: str, **options: Any) -> list[str]:
    result = call(server, "retrieve", {"query": query, "k": 50, **options})
    return [hit["id"] for hit in result["hits"]]


def test_writes_through_any_worker_are_seen_by_every_later_request(tmp_path: Path) -> None:
    server = HttpEngine(make_data_dir(tmp_path / "kb"), "--workers", str(WORKERS))
    try:
        pids = worker_pids(server)
        assert len(pids) == WORKERS
        before = {pid: read_syscalls(pid) for pid in pids}
        call(server, "index/add", {"documents": [
            {"id": "base", "text": "Tower cranes lift steel beams on the site.",
             "meta": {"crew": "alpha"}}]})
        versions: list[int] = []
        for n in range(ROUNDS):
            doc = f"doc{n}"
            added = call(server, "index/add", {"documents": [
                {"id": doc, "text": f"Scaffold inspection number {n} passed for crew {n}.",
                 "meta": {"crew": f"c{n}", "round": n}}]})
            token = added["_meta"]["indexVersion"]
            versions.append(int(token.rpartition(".")[2]))
            assert f"{doc}#0" in hit_ids(server, f"scaffold inspection number {n}")
            # The field first written just now already filters on whichever worker answers.
            by_round = {"field": "round", "op": "eq", "value": n}
            assert hit_ids(server, "scaffold", filter=by_round) == [f"{doc}#0"]
            latest = call(server, "retrieve", {"query": "scaffold", "k": 1})
            assert latest["indexVersion"] == token
            if n % 2:
                previous = f"doc{n - 1}"
                deleted = call(server, "index/delete", {"ids": [previous]})
                assert deleted["deleted"] == 1
                assert f"{previous}#0" not in hit_ids(server, f"scaffold inspection {n - 1}")
                # The snapshot before the delete is still served, by any worker (§7.7.1).
                assert f"{previous}#0" in hit_ids(server, f"scaffold inspection {n - 1}",
                                                  indexVersion=token)
        assert versions == sorted(versions) and len(set(versions)) == ROUNDS
        live = {hit.partition("#")[0] for hit in hit_ids(server, "scaffold inspection passed")}
        assert live == {"base"} | {f"doc{n}" for n in range(ROUNDS) if n % 2}
        # Both workers answered part of the traffic (each read requests from the socket).
        assert all(read_syscalls(pid) - before[pid] > ROUNDS for pid in pids)
    finally:
        server.close()
    assert server.proc.returncode == 0
    # Both workers saved their indexes on exit under the data directory's lock; a single
    # server reopening it serves the same corpus.
    reopened = HttpEngine(tmp_path / "kb")
    try:
        assert f"doc{ROUNDS - 1}#0" in hit_ids(reopened, f"scaffold inspection {ROUNDS - 1}")
        assert "doc0#0" not in hit_ids(reopened, "scaffold inspection 0")
    finally:
        reopened.close()


def test_engine_with_workers_certifies_l2_over_http(tmp_path: Path) -> None:
    server = HttpEngine(make_data_dir(tmp_path / "kb"), "--workers", str(WORKERS))
    try:
        report = certify("--http", server.base)
    finally:
        server.close()
    assert report["certifiedLevel"] == "L2" and report["declarationHonest"] is True


def test_postgres_backend_without_a_dsn_is_a_one_line_usage_error(tmp_path: Path) -> None:
    environment = {name: value for name, value in os.environ.items() if name != "RCPKIT_DSN"}
    run = subprocess.run(rcpkit_argv("serve", "--stdio", "--backend", "postgres", "--data",
                                     str(make_data_dir(tmp_path / "kb"))),
                         capture_output=True, text=True, timeout=60, env=environment)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "needs a DSN" in run.stderr
