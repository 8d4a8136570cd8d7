"""Two ``rcpkit serve --http`` processes on one root grant a key its burst once between them
(§15.5), and every refusal, from either, is a 429 / ``-32011`` whose ``Retry-After`` and
``retryAfterMs`` say when the shared bucket next holds a token."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rcpkit.tenancy.collections import CollectionRegistry
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import Limits
from rcpkit.tenancy.scopes import Scopes
from support.net import free_port, wait_listening

from .test_http_collections import CONFIG, rpc

RCPKIT = [sys.executable, "-c", "from rcpkit.cli import main; main()"]
BURST = 4
RATE = 0.01
"""One token per 100 s: none arrives while the test runs, so the admitted count is exact."""
REQUESTS = 12

pytestmark = pytest.mark.timeout(300)


def limited_root(root: Path) -> str:
    """A root with collection ``alpha`` and a key limited to a burst of :data:`BURST`; its
    token."""
    CollectionRegistry(root).create("alpha", CONFIG)
    return KeyStore(root).create("alice", Scopes.parse(["alpha:read"]),
                                 Limits(requests_per_second=RATE, burst=BURST))[1]


def assert_one_burst_across(roots: list[Path], token: str) -> None:
    """``rcpkit serve --http`` on each of ``roots`` (two), requests of ``token``'s key sent to
    each in turn: :data:`BURST` admitted in all, each refusal truthful about the next token."""
    ports = [free_port() for _ in roots]
    servers = [subprocess.Popen([*RCPKIT, "serve", "--http", f"127.0.0.1:{port}", "--data",
                                 str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for port, root in zip(ports, roots, strict=True)]
    try:
        for port, server in zip(ports, servers, strict=True):
            wait_listening(port, process=server, timeout_s=60)
        headers = {"Authorization": f"Bearer {token}"}
        started = time.monotonic()
        answers = []
        with httpx.Client(timeout=30) as client:
            for n in range(REQUESTS):
                url = f"http://127.0.0.1:{ports[n % 2]}/rcp/alpha/retrieve"
                answers.append(client.post(url, headers=headers,
                                           json=rpc("retrieve", {"query": "bees", "k": 3})))
        elapsed_ms = (time.monotonic() - started) * 1000
    finally:
        for server in servers:
            server.terminate()
        stderr = [server.communicate(timeout=30)[1] for server in servers]
    admitted = [answer for answer in answers if answer.status_code == 200]
    refused = [answer for answer in answers if answer.status_code == 429]
    assert len(admitted) == BURST and len(refused) == REQUESTS - BURST, \
        ([a.status_code for a in answers], stderr)
    assert all("result" in answer.json() for answer in admitted)
    # Both processes admitted some, and both refused some: the bucket is one.
    assert {n % 2 for n, answer in enumerate(answers) if answer.status_code == 200} == {0, 1}
    assert {n % 2 for n, answer in enumerate(answers) if answer.status_code == 429} == {0, 1}
    for answer in refused:
        error = answer.json()["error"]
        assert error["code"] == -32011
        wait_ms = error["data"]["retryAfterMs"]
        # The burst is spent: the next token is one period after the first was taken.
        assert 1000 / RATE - elapsed_ms - 1 <= wait_ms <= 1000 / RATE
        assert answer.headers["retry-after"] == str(math.ceil(wait_ms / 1000))


def test_two_processes_on_one_root_admit_a_key_s_burst_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert_one_burst_across([root, root], limited_root(root))
    assert (root / "limits.sqlite3").stat().st_mode & 0o077 == 0
