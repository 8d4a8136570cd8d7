"""A key's limits hold for every member of a JSON-RPC batch (§11, §15.5), on a real loopback
HTTP server and the injected clock: each member is charged a token and a concurrency slot,
and an over-limit member alone is refused with ``-32011`` and a truthful ``retryAfterMs``.
The per-key fan-out caps hold after typed decoding and on the server's defaults."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from rcpkit.server.context import Context
from rcpkit.server.framework import Server
from rcpkit.tenancy.access import Access
from rcpkit.tenancy.app import create_collections_app
from rcpkit.tenancy.collections import CollectionRegistry
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import CONCURRENCY_RETRY_S, Limiter, Limits
from rcpkit.tenancy.scopes import Scopes
from rcpkit.tenancy.serving import open_collections
from support.clock import FakeClock
from support.http import LOOPBACK_KINDS, LoopbackServer
from support.schema import assert_frame
from tenancy.test_http_collections import CONFIG, Deployment, Tenant, _add

pytestmark = pytest.mark.wire

HELD_S = 30.0
"""The longest a held call waits for its test to let it go (a safety bound, not a timing)."""


def batch(*calls: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": f"m{index}", "method": method,
             **({"params": params} if params is not None else {})}
            for index, (method, params) in enumerate(calls)]


def post_batch(client: httpx.Client, path: str, token: str, members: list[dict[str, Any]],
               answered: int | None = None) -> dict[str, dict[str, Any]]:
    """The batch's replies by id (one per request, each a valid frame); ``answered`` is how
    many requests ``members`` holds (default: all of them)."""
    response = client.post(path, json=members, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    replies = response.json()
    assert isinstance(replies, list)
    for reply in replies:
        assert_frame(reply)
    by_id = {reply["id"]: reply for reply in replies}
    assert len(by_id) == len(replies) == (len(members) if answered is None else answered)
    return by_id


def refused(replies: dict[str, dict[str, Any]]) -> dict[str, int]:
    """id → ``retryAfterMs`` of every member refused with ``-32011``."""
    return {rid: reply["error"]["data"]["retryAfterMs"] for rid, reply in replies.items()
            if reply.get("error", {}).get("code") == -32011}


@pytest.fixture(params=LOOPBACK_KINDS)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path, request.param)
    yield made
    made.close()


def test_each_batch_member_is_charged_a_token_with_a_truthful_retry_after(
        deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read", requests_per_second=2, burst=2)
    notification = {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "m0"}}
    for _app, client in deployment.serve():
        pings = batch(*[("ping", None)] * 5)
        # Notifications (answered by nothing) between the requests change nothing.
        members = [notification, pings[0], notification, *pings[1:3], notification, *pings[3:]]
        replies = post_batch(client, "/rcp/alpha", token, members, answered=5)
        assert [rid for rid, reply in replies.items() if "result" in reply] == ["m0", "m1"]
        # The bucket is empty: the next token comes in 1/2 s, for each refused member.
        assert refused(replies) == {"m2": 500, "m3": 500, "m4": 500}
        assert deployment.refusals == [("alpha", "key")] * 3
        alice = Tenant(client, token)
        deployment.clock.advance(0.499)
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 429
        deployment.clock.advance(0.001)  # exactly when the refused members were told
        assert alice.post("/rcp/alpha/ping", "ping").status_code == 200


def test_the_servers_own_endpoint_charges_batch_members_too(deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read", requests_per_second=1, burst=1)
    for _app, client in deployment.serve():
        replies = post_batch(client, "/rcp", token,
                             batch(("catalog/list", {}), ("catalog/list", {}), ("info", {})))
        assert "result" in replies["m0"]
        assert refused(replies) == {"m1": 1000, "m2": 1000}


def test_a_refused_member_is_refused_before_its_scope_and_others_still_run(
        deployment: Deployment) -> None:
    """A write member of a read key over the limit learns only of the limit; a member
    within it is answered whatever another member's fate (§11)."""
    token = deployment.key("alice", "alpha:read", requests_per_second=1, burst=2)
    for _app, client in deployment.serve():
        replies = post_batch(client, "/rcp/alpha", token, batch(
            ("index/add", {"documents": [{"id": "x", "text": "planted"}]}),
            ("retrieve", {"query": "planted", "k": 3}),
            ("index/delete", {"ids": ["x"]})))
        assert replies["m0"]["error"]["code"] == -32012
        assert replies["m1"]["result"]["hits"] == []
        assert refused(replies) == {"m2": 1000}


class _Held:
    """``x-test/hold``: a call that runs until the test lets it go, counting those running."""

    def __init__(self) -> None:
        self.running = 0
        self.most = 0
        self.lock = threading.Condition()
        self.go = threading.Event()

    def server(self) -> Server:
        server = Server("held", "1.0")
        server.capability("x-test", {})

        @server.method("x-test/hold")
        def hold(params: Any, ctx: Context) -> dict[str, Any]:
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
                self.lock.notify_all()
            try:
                assert self.go.wait(HELD_S)
            finally:
                with self.lock:
                    self.running -= 1
            return {}

        @server.method("x-test/quick")
        def quick(params: Any, ctx: Context) -> dict[str, Any]:
            return {"quick": True}

        return server

    def wait_running(self, count: int) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.running >= count, HELD_S)


@pytest.mark.parametrize("kind", LOOPBACK_KINDS)
def test_batch_members_each_hold_a_slot_so_a_heavy_batch_cannot_starve_another_tenant(
        tmp_path: Path, kind: Any) -> None:
    """The tenants share the collection's dispatcher, which runs two calls at a time: a
    batch of held calls from a key allowed one at a time runs one of them, so another
    tenant's call is answered while it is held."""
    CollectionRegistry(tmp_path).create("alpha", CONFIG)
    keys = KeyStore(tmp_path)
    heavy = keys.create("heavy", Scopes.parse(["alpha"]), Limits(concurrent=1))[1]
    other = keys.create("other", Scopes.parse(["alpha"]), Limits(concurrent=1))[1]
    clock = FakeClock(1_000.0)
    access = Access(keys, limiter=Limiter(clock, clock))
    held = _Held()
    servers = open_collections(tmp_path, None, access, open_server=lambda _: held.server())
    app = create_collections_app(servers, access, max_concurrency=2)
    with LoopbackServer(app, kind=kind) as server, \
            httpx.Client(base_url=server.url, timeout=HELD_S) as client, \
            ThreadPoolExecutor(1) as pool:
        pending = pool.submit(post_batch, client, "/rcp/alpha", heavy,
                              batch(*[("x-test/hold", {})] * 4))
        try:
            held.wait_running(1)
            answered = client.post("/rcp/alpha", json=batch(("x-test/quick", {}))[0],
                                   headers={"Authorization": f"Bearer {other}"}, timeout=10)
            assert answered.json()["result"] == {"quick": True}
            assert Tenant(client, heavy).post("/rcp/alpha/ping", "ping").status_code == 429
        finally:
            held.go.set()
        replies = pending.result(HELD_S)
        assert held.most == 1
        retry_ms = round(CONCURRENCY_RETRY_S * 1000)
        assert refused(replies) == {"m1": retry_ms, "m2": retry_ms, "m3": retry_ms}
        assert replies["m0"]["result"] == {}
        # Every slot was given back.
        assert post_batch(client, "/rcp/alpha", heavy, batch(("ping", None)))["m0"]["result"] \
            == {}


QUESTION = {"query": "how do bees make honey and pollinate crops", "method": "multi-query"}


def _bees(deployment: Deployment, client: httpx.Client) -> None:
    writer = deployment.key("writer", "alpha:read,write")
    _add(Tenant(client, writer), "alpha",
         ("b1", "bees make honey in hives during summer"),
         ("b2", "honey bees pollinate flowers and crops"),
         ("b3", "wasps and hornets are not bees"))


def test_fan_out_caps_hold_after_typed_decoding(deployment: Deployment) -> None:
    """§15.5: ``3.0`` is the integer 3 on the wire, so a cap of 2 refuses it as it does 3,
    alone or as a batch member."""
    token = deployment.key("alice", "alpha:read", transform_n=2, graph_hops=1)
    for _app, client in deployment.serve():
        _bees(deployment, client)
        alice = Tenant(client, token)
        error = alice.error("/rcp/alpha", "query/transform", {**QUESTION, "n": 3.0})
        assert (error["code"], error["data"]["field"]) == (-32602, "n")
        error = alice.error("/rcp/alpha", "graph",
                            {"op": "neighbors", "seedIds": ["b1#0"], "hops": 2.0})
        assert (error["code"], error["data"]["field"]) == (-32602, "hops")
        assert "result" in alice.frame("/rcp/alpha", "graph",
                                       {"op": "neighbors", "seedIds": ["b1#0"], "hops": 1.0})
        replies = post_batch(client, "/rcp/alpha", token, batch(
            ("query/transform", {**QUESTION, "n": 2}), ("query/transform", {**QUESTION, "n": 4.0})))
        assert len(replies["m0"]["result"]["queries"]) == 2
        assert (replies["m1"]["error"]["code"], replies["m1"]["error"]["data"]["field"]) \
            == (-32602, "n")


def test_a_capped_key_leaving_n_out_gets_the_default_lowered_to_its_cap(
        deployment: Deployment) -> None:
    token = deployment.key("alice", "alpha:read", transform_n=2)
    uncapped = deployment.key("bob", "alpha:read")
    for _app, client in deployment.serve():
        _bees(deployment, client)
        # The server's default n for multi-query is 3.
        assert len(Tenant(client, uncapped).ok("/rcp/alpha", "query/transform",
                                               QUESTION)["queries"]) == 3
        queries = Tenant(client, token).ok("/rcp/alpha", "query/transform", QUESTION)["queries"]
        assert len(queries) == 2
        # A default already within the cap is left alone.
        step_back = {**QUESTION, "method": "step-back"}
        assert Tenant(client, token).ok("/rcp/alpha", "query/transform", step_back) \
            == Tenant(client, uncapped).ok("/rcp/alpha", "query/transform", step_back)
