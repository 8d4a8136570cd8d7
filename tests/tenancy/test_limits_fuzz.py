"""Property tests: random batches from a limited key against a real loopback HTTP server of
collections (§11, §15.5), on the injected clock.

Whatever a batch holds — malformed members, notifications, hostile ``n``/``hops``, writes,
unknown methods — every request is answered exactly once in a valid frame; no more of its
requests get past the limits than the key's bucket holds; each refused one carries the
limiter's own wait, after which the key is admitted again; no slot leaks; the fan-out caps
hold; and another tenant is served throughout.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from support.schema import assert_frame
from tenancy.test_http_collections import Deployment, Tenant, _add
from transports.test_fuzz import answered_ids, json_values, materialise, messages

pytestmark = pytest.mark.wire

RATE, BURST, CONCURRENT, TRANSFORM_N, GRAPH_HOPS = 5.0, 3, 2, 2, 1
TOKEN_WAIT_MS = math.ceil(1000 / RATE)
"""The wait a member refused for an empty bucket is told (the clock stands still)."""
BUSY_WAIT_MS = 1000
"""The wait a member refused for the concurrency cap is told while tokens remain."""

hostile_numbers = st.sampled_from([None, 0, 1, 2, 2.0, 3, 3.0, 2.5, -1, 1e308, "2", True, [2]])


@st.composite
def limited_calls(draw: Any) -> dict[str, Any]:
    """A member aimed at what limits guard: fan-out, writes and cheap built-ins."""
    method = draw(st.sampled_from(["ping", "info", "retrieve", "query/transform", "graph",
                                   "index/add", "catalog/list", "x-none/y",
                                   "notifications/cancel"]))
    params: dict[str, Any] = {
        "retrieve": {"query": "bees", "k": 3},
        "query/transform": {"query": "how do bees make honey and pollinate crops",
                            "method": draw(st.sampled_from(["multi-query", "decompose",
                                                            "step-back", "rewrite"])),
                            "n": draw(hostile_numbers)},
        "graph": {"op": "neighbors", "seedIds": ["b1#0"], "hops": draw(hostile_numbers)},
        "index/add": {"documents": [{"id": f"f{draw(st.integers(0, 5))}",
                                     "text": draw(st.text(min_size=1, max_size=30))}]},
    }.get(method, {})
    message = {"jsonrpc": "2.0", "method": method,
               "params": {k: v for k, v in params.items() if v is not None},
               "has_id": draw(st.sampled_from([True, True, False]))}
    return message


batches = st.lists(limited_calls() | messages() | json_values, min_size=1, max_size=12)


@pytest.fixture(scope="module", params=["rcpkit", "uvicorn"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Deployment, httpx.Client, str, str]]:
    deployment = Deployment(tmp_path_factory.mktemp("limits-fuzz"), request.param)
    limited = deployment.key("limited", "alpha:read,write", requests_per_second=RATE,
                             burst=BURST, concurrent=CONCURRENT, transform_n=TRANSFORM_N,
                             graph_hops=GRAPH_HOPS)
    other = deployment.key("other", "alpha:read,write")
    try:
        for _app, client in deployment.serve():
            _add(Tenant(client, other), "alpha",
                 ("b1", "bees make honey in hives during summer"),
                 ("b2", "honey bees pollinate flowers and crops"))
            yield deployment, client, limited, other
    finally:
        deployment.close()


def _refill(deployment: Deployment) -> None:
    """A quiet spell: the bucket is full again (the clock only moves when told)."""
    deployment.clock.advance(BURST / RATE + 1.0)


@settings(max_examples=60, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches, st.sampled_from(["/rcp/alpha", "/rcp"]))
@example([{"jsonrpc": "2.0", "method": "ping", "params": {}, "has_id": True}] * 12, "/rcp/alpha")
@example([{"jsonrpc": "2.0", "method": "query/transform", "has_id": True,
           "params": {"query": "bees", "method": "multi-query", "n": 3.0}}], "/rcp/alpha")
def test_limits_hold_for_any_batch(served: tuple[Deployment, httpx.Client, str, str],
                                   members: list[Any], path: str) -> None:
    deployment, client, limited, other = served
    _refill(deployment)
    expected: list[Any] = []
    sent = [materialise(m, expected, in_batch=True) if isinstance(m, dict) and "has_id" in m
            else m for m in members]
    response = client.post(path, json=sent, headers={"Authorization": f"Bearer {limited}"})
    # The bucket was full and no slot was held: the POST itself is always admitted.
    assert response.status_code in (200, 204), response.text
    replies: list[dict[str, Any]] = []
    if response.status_code == 200:
        frame = response.json()
        replies = frame if isinstance(frame, list) else [frame]
        for reply in replies:
            assert_frame(reply)
        assert sorted(map(repr, answered_ids(frame))) == sorted(map(repr, expected))
    else:
        assert expected == []

    by_id = {repr(reply.get("id")): reply for reply in replies if reply.get("id") is not None}
    limited_out = [reply["error"]["data"]["retryAfterMs"] for reply in by_id.values()
                   if reply.get("error", {}).get("code") == -32011]
    # Every request charged a token: the POST's pays for the first, the bucket for the rest.
    assert len(by_id) - len(limited_out) <= BURST
    assert set(limited_out) <= {TOKEN_WAIT_MS, BUSY_WAIT_MS}
    sent_by_id = {repr(m.get("id")): m for m in sent if isinstance(m, dict) and "id" in m}
    for rid, reply in by_id.items():
        method = sent_by_id[rid].get("method")
        if method == "query/transform" and "result" in reply:
            assert len(reply["result"]["queries"]) <= TRANSFORM_N
        if method == "graph" and "result" in reply:
            hops = sent_by_id[rid]["params"].get("hops")
            assert hops is None or hops <= GRAPH_HOPS

    alone = Tenant(client, limited)
    if TOKEN_WAIT_MS in limited_out:  # the bucket ran dry: the advice is when a token comes
        deployment.clock.advance((TOKEN_WAIT_MS - 1) / 1000)
        assert alone.post("/rcp/alpha/ping", "ping").status_code == 429
        deployment.clock.advance(0.002)
        assert alone.post("/rcp/alpha/ping", "ping").status_code == 200
    # Every slot was given back: CONCURRENT pings at once all run.
    _refill(deployment)
    pings = client.post("/rcp/alpha", headers=alone.headers,
                        json=[{"jsonrpc": "2.0", "id": n, "method": "ping"}
                              for n in range(CONCURRENT)])
    assert pings.status_code == 200
    assert all("result" in reply for reply in pings.json()), pings.json()
    # Another tenant is served throughout.
    assert Tenant(client, other).ok("/rcp/alpha", "ping") == {}
