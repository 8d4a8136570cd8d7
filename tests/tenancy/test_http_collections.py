"""Several collections and keys on one real loopback HTTP server (§7.13, §15.3, §15.5, §15.6):
isolation, scopes, rate limits on a fake clock, quotas, revocation and provenance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from rcpkit.binding import bind
from rcpkit.cli import app as rcpkit_app
from rcpkit.client.memory import connect_memory
from rcpkit.engine import Engine, open_engine
from rcpkit.federation.gateway import build_gateway
from rcpkit.federation.registry import load_registry
from rcpkit.server.framework import Server
from rcpkit.tenancy.access import Access
from rcpkit.tenancy.app import CollectionsApp, create_collections_app
from rcpkit.tenancy.collections import CollectionRegistry
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import Limiter, Limits
from rcpkit.tenancy.scopes import Scopes
from rcpkit.tenancy.serving import open_collections
from rcpkit.transports.http.metrics import Metrics
from support.clock import FakeClock
from support.http import LOOPBACK_KINDS, LoopbackServer
from support.schema import assert_frame

pytestmark = pytest.mark.wire

CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'
DAY = 86_400.0


def rpc(method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return message


class Tenant:
    """One key's view of the server."""

    def __init__(self, client: httpx.Client, token: str) -> None:
        self.client = client
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, path: str, method: str, params: Any = None) -> httpx.Response:
        return self.client.post(path, json=rpc(method, params), headers=self.headers)

    def frame(self, path: str, method: str, params: Any = None) -> dict[str, Any]:
        response = self.post(path, method, params)
        assert response.status_code == 200, response.text
        frame: dict[str, Any] = response.json()
        assert_frame(frame)
        return frame

    def ok(self, path: str, method: str, params: Any = None) -> dict[str, Any]:
        frame = self.frame(path, method, params)
        assert "result" in frame, frame
        result: dict[str, Any] = frame["result"]
        return result

    def error(self, path: str, method: str, params: Any = None) -> dict[str, Any]:
        frame = self.frame(path, method, params)
        assert "error" in frame, frame
        error: dict[str, Any] = frame["error"]
        return error

    def hit_ids(self, path: str, query: str) -> list[str]:
        return [hit["id"] for hit in self.ok(path, "retrieve", {"query": query, "k": 50,
                                                          "unit": "document"})["hits"]]


class Deployment:
    """Collections ``alpha`` and ``beta`` under one root, keys, and clocks tests move."""

    def __init__(self, root: Path, kind: Any, config: str = CONFIG) -> None:
        registry = CollectionRegistry(root)
        for name in ("alpha", "beta"):
            registry.create(name, config)
        self.keys = KeyStore(root)
        self.clock = FakeClock(1_000.0)
        self.wall = FakeClock(DAY * 20_000 + 3_600.0)
        self.refusals: list[tuple[str, str]] = []
        self.access = Access(self.keys, limiter=Limiter(self.clock, self.wall),
                             on_refusal=lambda where, kind: self.refusals.append((where, kind)))
        self.engines: list[Engine] = []
        self.servers = open_collections(root, None, self.access, open_server=self._open)
        self.kind = kind

    def _open(self, path: Path) -> Server:
        engine = open_engine(path)
        self.engines.append(engine)
        return bind(engine)

    def key(self, principal: str, *scopes: str, **limits: Any) -> str:
        return self.keys.create(principal, Scopes.parse(scopes), Limits(**limits))[1]

    def serve(self, **options: Any) -> Iterator[tuple[CollectionsApp, httpx.Client]]:
        app = create_collections_app(self.servers, self.access, **options)
        with LoopbackServer(app, kind=self.kind) as server, \
                httpx.Client(base_url=server.url, timeout=30) as client:
            app.public_url = server.url
            yield app, client

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


@pytest.fixture(params=LOOPBACK_KINDS)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, request.param)
    yield made
    made.close()


def _add(tenant: Tenant, collection: str, *documents: tuple[str, str],
         meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return tenant.ok(f"/rcp/{collection}", "index/add", {"documents": [
        {"id": doc_id, "text": text, "meta": dict(meta or {})} for doc_id, text in documents]})


def test_collections_are_isolated_and_a_hidden_one_answers_like_a_missing_one(
        deployment: Deployment) -> None:
    alice_token = deployment.key("alice", "alpha:read,write")
    bob_token = deployment.key("bob", "beta:read,write")
    for _app, client in deployment.serve():
        alice, bob = Tenant(client, alice_token), Tenant(client, bob_token)
        _add(alice, "alpha", ("secret-plan", "the secret merger plan of alpha corp"))
        _add(bob, "beta", ("bees", "bees swarm in spring"))
        assert alice.hit_ids("/rcp/alpha", "secret merger plan") == ["secret-plan"]
        # The same query in bob's collection finds nothing of alpha's, by id or count.
        assert set(bob.hit_ids("/rcp/beta", "secret merger plan")) <= {"bees"}

        forbidden = bob.post("/rcp/alpha/retrieve", "retrieve", {"query": "secret"})
        missing = bob.post("/rcp/gamma/retrieve", "retrieve", {"query": "secret"})
        for response in (forbidden, missing):
            assert response.status_code == 403
            assert response.json()["error"]["code"] == -32012
        assert forbidden.content == missing.content
        # Nor any other verb, nor the absence of credentials, tells the two apart.
        for verb in ("GET", "PUT", "OPTIONS"):
            answers = [client.request(verb, path, headers=bob.headers)
                       for path in ("/rcp/alpha/retrieve", "/rcp/gamma/retrieve")]
            seen = [(a.status_code, a.content,
                     {k: v for k, v in a.headers.items() if k != "date"}) for a in answers]
            assert seen[0] == seen[1], verb
        anonymous = [client.post(path, json=rpc("info")) for path in ("/rcp/alpha", "/rcp/gamma")]
        assert [a.status_code for a in anonymous] == [401, 401]
        assert anonymous[0].content == anonymous[1].content
        assert bob.post("/rcp/alpha", "info").content == missing.content
        # Nor may bob delete (or learn about) alpha's documents.
        assert bob.post("/rcp/alpha/index/delete", "index/delete",
                        {"ids": ["secret-plan"]}).content == missing.content
        assert alice.hit_ids("/rcp/alpha", "secret merger plan") == ["secret-plan"]


def test_catalog_list_shows_only_the_collections_the_caller_may_see(
        deployment: Deployment) -> None:
    tokens = {"alice": deployment.key("alice", "alpha:read,write"),
              "carol": deployment.key("carol", "*:read")}
    for _app, client in deployment.serve():
        seen = {name: Tenant(client, token).ok("/rcp", "catalog/list")["engines"]
                for name, token in tokens.items()}
        assert [entry["id"] for entry in seen["alice"]] == ["alpha"]
        assert [entry["id"] for entry in seen["carol"]] == ["alpha", "beta"]
        endpoint = seen["carol"][1]["endpoint"]
        assert endpoint["transport"] == "http"
        assert endpoint["url"] == f"{client.base_url}".rstrip("/") + "/rcp/beta"
        assert "retrieve" in seen["carol"][1]["capabilities"]
        # The endpoint listed is the collection's own RCP base.
        carol = Tenant(client, tokens["carol"])
        assert carol.post(endpoint["url"] + "/ping", "ping").status_code == 200


def test_writes_need_the_write_scope_before_capability_gating(deployment: Deployment) -> None:
    reader_token = deployment.key("reader", "alpha:read")
    writer_token = deployment.key("feed", "alpha:write")
    for _app, client in deployment.serve():
        reader, feed = Tenant(client, reader_token), Tenant(client, writer_token)
        for method, params in (("index/add", {"documents": [{"id": "x", "text": "planted"}]}),
                               ("index/delete", {"ids": ["x"]}),
                               ("feedback", {"signals": [{"hitId": "x", "poisonSuspected": True}]}),
                               ("memory/build", {"documents": [{"text": "t"}]})):
            assert reader.error("/rcp/alpha", method, params)["code"] == -32012
        # A write-only feed writes but does not read.
        _add(feed, "alpha", ("x", "a feed item about tides"))
        assert feed.error("/rcp/alpha", "retrieve", {"query": "tides"})["code"] == -32012
        assert reader.hit_ids("/rcp/alpha", "tides") == ["x"]


def test_requests_per_second_refused_with_a_truthful_retry_after(
        deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read", requests_per_second=2, burst=2)
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        for _ in range(2):
            assert alice.post("/rcp/alpha/ping", "ping").status_code == 200
        refused = alice.post("/rcp/alpha/ping", "ping")
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == -32011
        assert refused.json()["error"]["data"]["retryAfterMs"] == 500
        assert deployment.refusals == [("alpha", "key")]
        deployment.clock.advance(0.499)
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 429
        deployment.clock.advance(0.001)
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 200
        # Another principal has its own bucket.
        other = Tenant(client, deployment.key("bob", "alpha:read", requests_per_second=2))
        assert other.post("/rcp/alpha/ping", "ping").status_code == 200


def test_daily_write_quota_waits_for_the_next_utc_day(deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read,write", write_bytes_per_day=300)
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        _add(alice, "alpha", ("one", "first note " * 5))
        error = alice.error("/rcp/alpha", "index/add",
                            {"documents": [{"id": "two", "text": "second note " * 20}]})
        assert error["code"] == -32011
        assert error["data"]["retryAfterMs"] == round((DAY - 3_600.0) * 1000)
        assert "two" not in alice.hit_ids("/rcp/alpha", "second note")
        too_big = alice.error("/rcp/alpha", "index/add",
                              {"documents": [{"id": "big", "text": "x" * 500}]})
        assert too_big["code"] == -32013
        deployment.wall.advance(DAY)
        _add(alice, "alpha", ("two", "second note " * 20))


def test_fan_out_caps_per_key(deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read", transform_n=2, graph_hops=1)
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        error = alice.error("/rcp/alpha", "query/transform",
                            {"query": "bees", "method": "multi-query", "n": 3})
        assert (error["code"], error["data"]["field"]) == (-32602, "n")
        error = alice.error("/rcp/alpha", "graph", {"op": "neighbors", "hops": 2})
        assert (error["code"], error["data"]["field"]) == (-32602, "hops")


def test_a_revoked_key_is_refused_at_its_next_request(deployment: Deployment) -> None:
    record, token = deployment.keys.create("alice", Scopes.parse(["alpha:read"]))
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 200
        KeyStore(deployment.keys.path.parent).revoke([record.key_id])  # as `keys revoke` does
        refused = alice.post("/rcp/alpha/ping", "ping")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == -32012
        assert Tenant(client, token + "x").post("/rcp", "info").status_code == 401


def test_every_write_records_its_principal_and_time_unforgeably(deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read,write")
    other_token = deployment.key("bob", "alpha:write")
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        first = _add(alice, "alpha", ("doc", "owls hunt at night"),
             meta={"source": "feed:owls", "written_by": "mallory", "written_at": 1})
        [hit] = alice.ok("/rcp/alpha", "retrieve", {"query": "owls", "k": 1})["hits"]
        assert hit["meta"]["written_by"] == "alice"
        assert hit["meta"]["written_at"] > 1_000_000_000
        assert hit["meta"]["source"] == "feed:owls"
        # Unchanged content re-added (by anyone) writes nothing: no new version, first stamp.
        again = _add(Tenant(client, other_token), "alpha", ("doc", "owls hunt at night"),
                     meta={"source": "feed:owls"})
        assert again["_meta"]["indexVersion"] == first["_meta"]["indexVersion"]
        [hit] = alice.ok("/rcp/alpha", "retrieve", {"query": "owls", "k": 1})["hits"]
        assert hit["meta"]["written_by"] == "alice"
        changed = _add(Tenant(client, other_token), "alpha", ("doc", "owls hunt at dusk"),
                       meta={"source": "feed:owls"})
        assert changed["_meta"]["indexVersion"] != first["_meta"]["indexVersion"]
        [hit] = alice.ok("/rcp/alpha", "retrieve", {"query": "owls", "k": 1})["hits"]
        assert hit["meta"]["written_by"] == "bob"


async def test_the_gateway_federates_the_collections_of_one_server(
        deployment: Deployment, tmp_path: Path) -> None:
    token = deployment.key("alice", "*:read,write")
    for _app, client in deployment.serve():
        alice = Tenant(client, token)
        _add(alice, "alpha", ("a-bees", "bees dance to show where flowers are"))
        _add(alice, "beta", ("b-bees", "bees swarm when the hive is full"))
        base = str(client.base_url).rstrip("/")
        registry = tmp_path / "rcp.json"
        registry.write_text(json.dumps({"engines": [
            {"id": name, "transport": "http", "url": f"{base}/rcp/{name}",
             "headers": {"Authorization": f"Bearer {token}"}} for name in ("alpha", "beta")]}))
        gateway = build_gateway(load_registry(registry), identity="gw")
        try:
            async with await connect_memory(gateway) as federated:
                result = await federated.retrieve("bees", k=10, unit="document")
                by_engine = {str((hit.meta or {})["engine"]): str(hit.id) for hit in result.hits}
                assert by_engine == {"alpha": "a-bees", "beta": "b-bees"}
        finally:
            gateway.close()


def test_poison_reports_quarantine_a_writer_in_its_collection_only(
        tmp_path: Path) -> None:
    """§15.3: enough demoted documents of one writer take all of its documents out of the
    collection's retrieval, not the other writers' nor its documents in another collection;
    an operator's clear (another process) lifts it."""
    policy = CONFIG + "[poison]\nthreshold = 1\nsource_threshold = 2\n"
    deployment = Deployment(tmp_path, LOOPBACK_KINDS[0], config=policy)
    tokens = {name: deployment.key(name, "alpha:read,write", "beta:read,write")
              for name in ("alice", "mallory")}
    try:
        for _app, client in deployment.serve():
            alice, mallory = (Tenant(client, tokens[name]) for name in ("alice", "mallory"))
            _add(mallory, "alpha", ("m1", "owls hunt mice"), ("m2", "owls eat mice at night"),
                 ("m3", "mice fear owls"))
            _add(alice, "alpha", ("a1", "owls and mice in the barn"))
            _add(mallory, "beta", ("m1", "owls hunt mice"))
            alice.ok("/rcp/alpha", "feedback", {"signals": [
                {"hitId": hit_id, "poisonSuspected": True} for hit_id in ("m1", "m2")]})
            assert alice.hit_ids("/rcp/alpha", "owls mice") == ["a1"]
            assert mallory.hit_ids("/rcp/beta", "owls mice") == ["m1"]
            code, out, err = _cli("provenance", "sources", "--collection", "alpha",
                                  "--data", str(tmp_path))
            assert code == 0, err
            assert "written_by:mallory" in out and "quarantined" in out
            code, out, err = _cli("provenance", "clear", "--collection", "alpha",
                                  "--data", str(tmp_path), "--principal", "mallory")
            assert (code, out.strip()) == (0, "cleared written_by:mallory"), err
            assert sorted(alice.hit_ids("/rcp/alpha", "owls mice")) == ["a1", "m1", "m2", "m3"]
    finally:
        deployment.close()


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(rcpkit_app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_health_readiness_and_metrics_beside_the_collections(deployment: Deployment) -> None:
    deployment.access.on_refusal = None  # the metrics count refusals instead
    token = deployment.key("alice", "alpha:read", requests_per_second=1, burst=1)
    for _app, client in deployment.serve(metrics=Metrics()):
        alice = Tenant(client, token)
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"ready": True}
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 200
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 429
        # A scraper sees the collections its key sees (none without one): issue 31 item 7.
        assert "alpha" not in client.get("/metrics").text
        exposition = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
        assert 'rcpkit_rate_limited_total{collection="alpha",principal_kind="key"} 1.0' \
            in exposition
        assert 'rcpkit_requests_total{code="ok",collection="alpha",method="ping"} 1.0' \
            in exposition
        assert "alice" not in exposition


def test_metrics_never_name_a_collection_the_scraper_may_not_see(
        deployment: Deployment) -> None:
    """Issue 31 item 7 / issue 35: series of a collection are shown only to a scraper whose
    key sees it; refusals are counted by reason."""
    alice = deployment.key("alice", "alpha:read")
    bob = deployment.key("bob", "beta:read,write")
    for _app, client in deployment.serve(metrics=Metrics()):
        assert Tenant(client, bob).post("/rcp/beta/ping", "ping").status_code == 200
        assert Tenant(client, alice).post("/rcp/beta/ping", "ping").status_code == 403
        assert Tenant(client, alice).post("/rcp/alpha/index/add", "index/add", {
            "documents": [{"text": "owls"}]}).json()["error"]["code"] == -32012
        assert client.post("/rcp/alpha/ping", json={}).status_code == 401

        def scraped(token: str | None, client: httpx.Client = client) -> str:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            reply = client.get("/metrics", headers=headers)
            assert reply.status_code == 200
            return reply.text

        anonymous, as_alice, as_bob = scraped(None), scraped(alice), scraped(bob)
        assert "alpha" not in anonymous and "beta" not in anonymous
        assert "process_resident_memory_bytes" in anonymous  # what names no collection
        assert 'collection="alpha"' in as_alice and "beta" not in as_alice
        assert 'collection="beta"' in as_bob and "alpha" not in as_bob
        assert 'rcpkit_refusals_total{collection="alpha",reason="forbidden"} 1.0' in as_alice
        assert 'rcpkit_refusals_total{collection="alpha",reason="unauthenticated"} 1.0' \
            in as_alice
        assert 'rcpkit_refusals_total{collection="beta",reason="forbidden"} 1.0' in as_bob


def _method_names(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {method["name"] for method in response.json()["methods"]}


def test_each_collection_documents_its_methods_to_who_may_see_it(
        deployment: Deployment) -> None:
    """``<base>/<name>/openrpc.json`` behind that collection's gate, a hidden collection's
    answering exactly like a missing one's (§15.6); the server's own at ``<base>``."""
    alice = deployment.key("alice", "alpha:read")
    bob = deployment.key("bob", "beta:read,write")
    for _app, client in deployment.serve():
        reader, other = Tenant(client, alice), Tenant(client, bob)
        names = _method_names(client.get("/rcp/alpha/openrpc.json", headers=reader.headers))
        advertised = reader.ok("/rcp/alpha", "info")["capabilities"]
        assert "retrieve" in names and ("index/add" in names) == ("index" in advertised)
        assert "catalog/list" not in names
        hidden = client.get("/rcp/alpha/openrpc.json", headers=other.headers)
        missing = client.get("/rcp/gamma/openrpc.json", headers=other.headers)
        assert hidden.status_code == missing.status_code == 403
        assert hidden.content == missing.content
        anonymous = [client.get(f"/rcp/{name}/openrpc.json") for name in ("alpha", "gamma")]
        assert [answer.status_code for answer in anonymous] == [401, 401]
        assert anonymous[0].content == anonymous[1].content
        own = _method_names(client.get("/rcp/openrpc.json", headers=reader.headers))
        assert own == {"initialize", "info", "ping", "shutdown", "notifications/cancel",
                       "catalog/list"}
        assert client.get("/rcp/openrpc.json").status_code == 401
