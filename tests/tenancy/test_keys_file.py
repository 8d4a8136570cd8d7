"""``keys.json`` on disk: a server that has keys stays authenticated when the file
disappears (§15.6, fail closed), and concurrent ``rcpkit keys`` changes are never lost."""

from __future__ import annotations

import logging
import multiprocessing
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rcpkit.tenancy.collections import CollectionRegistry
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.scopes import Scopes
from support.http import LOOPBACK_KINDS
from support.net import free_port, wait_listening

from .test_http_collections import CONFIG, Deployment, Tenant, rpc

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]

READ_AND_WRITE = (("retrieve", {"query": "bees", "k": 3}),
                  ("index/add", {"documents": [{"id": "planted", "text": "planted by nobody"}]}))


@pytest.fixture(params=LOOPBACK_KINDS)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, request.param)
    yield made
    made.close()


def _assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == -32012


def _anonymous_refused_everywhere(client: httpx.Client, collections: list[str]) -> None:
    """Anonymous reads and writes of every collection, and the root's own endpoint, are 401."""
    for name in collections:
        for method, params in READ_AND_WRITE:
            _assert_refused(client.post(f"/rcp/{name}/{method}", json=rpc(method, params)))
    _assert_refused(client.post("/rcp", json=rpc("catalog/list")))


@pytest.mark.wire
def test_a_keys_file_moved_away_refuses_everyone_in_process(
        deployment: Deployment, caplog: pytest.LogCaptureFixture) -> None:
    token = deployment.key("alice", "alpha:read,write")
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 200
        moved = deployment.keys.path.with_name("keys.json.moved")
        deployment.keys.path.rename(moved)
        with caplog.at_level(logging.ERROR, logger="rcpkit.server"):
            _anonymous_refused_everywhere(client, ["alpha", "beta", "gamma"])
            _assert_refused(alice.post("/rcp/alpha/retrieve", "retrieve", {"query": "bees"}))
        assert any("keys.json" in record.getMessage() and "missing" in record.getMessage()
                   for record in caplog.records), caplog.text
        # Nothing was written while the file was away.
        moved.rename(deployment.keys.path)
        assert alice.ok("/rcp/alpha", "retrieve", {"query": "planted", "k": 5})["hits"] == []
        assert client.post("/rcp/alpha/ping", json=rpc("ping")).status_code == 401


@pytest.mark.wire
def test_rcpkit_serve_started_with_keys_refuses_everyone_once_the_file_is_gone(
        tmp_path: Path) -> None:
    config = tmp_path / "hashing.toml"
    config.write_text(CONFIG)
    root = tmp_path / "root"
    for name in ("alpha", "beta"):
        subprocess.run([*RCPKIT, "collection", "create", name, "--data", str(root),
                        "--config", str(config)], check=True, capture_output=True, timeout=60)
    KeyStore(root).create("alice", Scopes.parse(["*:read,write"]))
    port = free_port()
    server = subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--data",
                               str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_listening(port, process=server, timeout_s=60)
        (root / "keys.json").rename(root / "keys.json.moved")  # before any request
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            _anonymous_refused_everywhere(client, ["alpha", "beta"])
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert b"keys.json is missing" in stderr, stderr.decode(errors="replace")


def _churn(root: str, action: str, key_ids: list[str], queue: Any) -> None:
    """One process standing for many ``rcpkit keys`` invocations: each op a fresh store."""
    made = []
    for key_id in key_ids:
        if action == "revoke":
            KeyStore(Path(root)).revoke([key_id])
        else:
            made.append(KeyStore(Path(root)).create(key_id, Scopes.parse(["*:read"]))[0].key_id)
    queue.put(made)


def test_concurrent_revokes_and_creates_are_all_kept(tmp_path: Path) -> None:
    store = KeyStore(tmp_path)
    revoked = [store.create(f"old-{n}", Scopes.parse(["*:read"]))[0].key_id for n in range(30)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_churn, args=(str(tmp_path), "revoke", revoked, queue)),
               context.Process(target=_churn, args=(str(tmp_path), "create",
                                                    [f"new-{n}" for n in range(30)], queue))]
    for worker in workers:
        worker.start()
    created = [key_id for _ in workers for key_id in queue.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    records = KeyStore(tmp_path).records()
    assert len(created) == 30 and set(created) <= set(records)
    assert [key_id for key_id in revoked if not records[key_id].revoked] == []
    assert len(records) == 60


def test_a_root_of_collections_is_owner_only(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # a permissive umask, as most shells have
    try:
        root = tmp_path / "root"
        CollectionRegistry(root).create("alpha", CONFIG)
        KeyStore(root).create("alice", Scopes.parse(["alpha:read"]))
    finally:
        os.umask(previous)
    modes = {str(path.relative_to(tmp_path)): oct(stat.S_IMODE(path.stat().st_mode))
             for path in [root, *root.rglob("*")]}
    assert modes == {"root": "0o700", "root/collections": "0o700",
                     "root/collections/alpha": "0o700",
                     "root/collections/alpha/rcpkit.toml": "0o600",
                     "root/keys.json": "0o600", "root/keys.json.lock": "0o600"}
