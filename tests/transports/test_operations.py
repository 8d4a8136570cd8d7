"""Operational routes over loopback HTTP: ``/healthz`` and ``/readyz`` beside the RCP base,
unauthenticated; ``/metrics`` only when enabled, with bounded labels and no caller data
(§15.6)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from rcpkit.protocol.errors import Unauthorized
from rcpkit.server import Server
from rcpkit.server.example import build_server
from rcpkit.transports.http import create_app
from rcpkit.transports.http.metrics import Metrics
from support.http import LOOPBACK_KINDS, LoopbackServer, ServerKind

TOKEN = "s3cret"


def rpc(url: str, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
    frame = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return httpx.post(f"{url}/rcp/{method}", json=frame,
                      headers={"Authorization": f"Bearer {TOKEN}"})


class _StoreDown(Server):
    """A server whose store stopped answering: its refresh hook raises."""

    def refresh(self) -> None:
        raise ConnectionError("could not reach postgres://user:pw@db/rcp")


@pytest.mark.wire
@pytest.mark.parametrize("kind", LOOPBACK_KINDS)
def test_health_and_readiness_need_no_credentials(kind: ServerKind) -> None:
    app = create_app(build_server(), auth_tokens=[TOKEN])
    with LoopbackServer(app, kind=kind) as srv:
        assert httpx.post(f"{srv.url}/rcp/info", json={}).status_code == 401
        health = httpx.get(f"{srv.url}/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        ready = httpx.get(f"{srv.url}/readyz")
        assert ready.status_code == 200 and ready.json() == {"ready": True}
        assert httpx.get(f"{srv.url}/metrics").status_code == 404  # off by default


@pytest.mark.wire
def test_readiness_is_503_with_a_reason_when_the_store_does_not_answer(caplog: Any) -> None:
    app = create_app(_StoreDown("down", "1"), base="/api/rcp")
    with LoopbackServer(app, kind="rcpkit") as srv:
        assert httpx.get(f"{srv.url}/api/healthz").status_code == 200
        ready = httpx.get(f"{srv.url}/api/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"ready": False, "reason": "the server's store does not answer"}
        assert "pw@db" not in ready.text  # the failure's detail stays in the server log
    assert "could not reach" in caplog.text


def _samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples of one metric in the exposition text, keyed by their labels."""
    found = {}
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            found[labels] = float(match.group(2))
    return found


@pytest.mark.wire
def test_metrics_count_requests_by_method_collection_and_code() -> None:
    app = create_app(build_server(), auth_tokens=[TOKEN], metrics=Metrics(),
                     collection="docs")
    with LoopbackServer(app, kind="rcpkit") as srv:
        for _ in range(3):
            assert rpc(srv.url, "ping").status_code == 200
        assert "result" in rpc(srv.url, "retrieve", {"query": "quokka lagoon", "k": 2}).json()
        assert rpc(srv.url, "retrieve", {"query": "quokka", "k": 0}).json()["error"]["code"] \
            == -32602
        assert rpc(srv.url, "x-made-up/quokka").json()["error"]["code"] == -32004
        scraped = httpx.get(f"{srv.url}/metrics")  # no credentials needed
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    requests = _samples(scraped.text, "rcpkit_requests_total")
    assert requests[frozenset({("method", "ping"), ("collection", "docs"),
                               ("code", "ok")})] == 3
    assert requests[frozenset({("method", "retrieve"), ("collection", "docs"),
                               ("code", "ok")})] == 1
    assert requests[frozenset({("method", "retrieve"), ("collection", "docs"),
                               ("code", "-32602")})] == 1
    assert requests[frozenset({("method", "unknown"), ("collection", "docs"),
                               ("code", "-32004")})] == 1
    latency = _samples(scraped.text, "rcpkit_request_seconds_count")
    assert latency[frozenset({("method", "ping"), ("collection", "docs")})] == 3
    assert "quokka" not in scraped.text  # never labelled with caller data


@pytest.mark.wire
def test_load_shedding_counts_as_a_rate_limit_refusal() -> None:
    metrics = Metrics()
    app = create_app(build_server(), metrics=metrics, max_pending=0)
    with LoopbackServer(app, kind="rcpkit") as srv:
        assert rpc(srv.url, "ping").status_code == 429
        assert rpc(srv.url, "ping").status_code == 429
    text = metrics.exposition().decode()
    refused = _samples(text, "rcpkit_rate_limited_total")
    assert refused == {frozenset({("collection", "rcpkit-keyword-example"),
                                  ("principal_kind", "server")}): 2}
    assert _samples(text, "rcpkit_refusals_total") == {
        frozenset({("collection", "rcpkit-keyword-example"), ("reason", "shed")}): 2}


def test_server_gauges_are_exposed_per_collection() -> None:
    class Sized(Server):
        def gauges(self) -> dict[str, float]:
            return {"documents": 12.0, "index_build_running": 1.0}

    metrics = Metrics()
    create_app(Sized("sized", "1"), metrics=metrics, collection="kb")
    gauges = _samples(metrics.exposition().decode(), "rcpkit_index")
    assert gauges == {frozenset({("collection", "kb"), ("name", "documents")}): 12.0,
                      frozenset({("collection", "kb"), ("name", "index_build_running")}): 1.0}


@pytest.mark.wire
def test_refusals_are_counted_by_reason() -> None:
    def no_writes(caller: str | None, method: str, params: Any) -> None:
        if method == "index/add":
            raise Unauthorized("this key may not write")

    metrics = Metrics()
    app = create_app(build_server(), auth_tokens=[TOKEN], metrics=metrics, collection="docs",
                     max_body_bytes=4096, authorize=no_writes)
    with LoopbackServer(app, kind="rcpkit") as srv:
        for _ in range(2):
            assert httpx.post(f"{srv.url}/rcp/ping", json={}).status_code == 401
        assert rpc(srv.url, "ping", {"nonce": "x" * 5000}).status_code == 413
        assert rpc(srv.url, "index/add", {"documents": [{"text": "quokka"}]}
                   ).json()["error"]["code"] == -32012
        assert rpc(srv.url, "ping").status_code == 200
    refusals = _samples(metrics.exposition().decode(), "rcpkit_refusals_total")
    assert refusals == {
        frozenset({("collection", "docs"), ("reason", "unauthenticated")}): 2,
        frozenset({("collection", "docs"), ("reason", "payload_too_large")}): 1,
        frozenset({("collection", "docs"), ("reason", "forbidden")}): 1}


def test_the_process_collector_reports_memory_cpu_and_files() -> None:
    text = Metrics().exposition().decode()
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_open_fds"):
        assert re.search(rf"^{name} \S+$", text, flags=re.M), name


@pytest.mark.wire
def test_a_metrics_token_is_asked_of_every_scraper() -> None:
    app = create_app(build_server(), metrics=Metrics(token="scrape-me"))
    with LoopbackServer(app, kind="rcpkit") as srv:
        assert rpc(srv.url, "ping").status_code == 200
        anonymous = httpx.get(f"{srv.url}/metrics")
        wrong = httpx.get(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        right = httpx.get(f"{srv.url}/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert "rcpkit_requests_total" not in anonymous.text + wrong.text
    assert right.status_code == 200 and "rcpkit_requests_total" in right.text
