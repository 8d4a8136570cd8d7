"""Property tests: random bytes, random JSON and random batches thrown at both transports.

The server never dies, never writes a non-frame to stdout (checked by StdioPeer against
the schema), and answers every request that has an id exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from rcpkit.transports.http import create_app
from support.example_server import build_test_server
from support.http import LOOPBACK_KINDS, LoopbackServer
from support.schema import assert_frame
from support.stdio import StdioPeer, python_argv

pytestmark = pytest.mark.wire

EXAMPLE = str(Path(__file__).resolve().parents[1] / "support" / "example_server.py")
METHODS = ["ping", "info", "initialize", "retrieve", "embed", "rerank", "index/add", "bogus",
           "x-test/nan", "x-test/boom", "x-test/print", "x-test/sleep", "x-other/y",
           "notifications/cancel", "notifications/progress", "notifications/zzz"]
IDS = itertools.count(1)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**60, 2**60)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)

params = st.one_of(
    json_values,
    st.fixed_dictionaries({"query": st.text(max_size=20) | json_values,
                           "k": st.integers(-3, 100) | json_values}),
    st.fixed_dictionaries({"seconds": st.floats(0, 0.02)}),
    st.fixed_dictionaries({"protocolVersion": st.integers(-1, 3) | json_values}),
    st.fixed_dictionaries({"id": st.integers(0, 50)}),
)


@st.composite
def messages(draw: Any) -> dict[str, Any]:
    """A request or notification shape; ids are assigned later so they stay unique."""
    message: dict[str, Any] = {}
    message["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", None]))
    message["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=10).filter(
        lambda name: name != "shutdown"))
    if draw(st.booleans()):
        message["params"] = draw(params)
    message["has_id"] = draw(st.booleans())
    return message


def materialise(shape: dict[str, Any], expected: list[Any], *, in_batch: bool) -> dict[str, Any]:
    """The message with a fresh id; ``expected`` gets the ids that must be answered: a
    well-formed request's, and a malformed single's (its id is recoverable), but never a
    malformed batch member's (§11: answered with id null)."""
    message = {k: v for k, v in shape.items() if k != "has_id" and v is not None}
    if shape["has_id"]:
        rid = next(IDS)
        message["id"] = rid if rid % 2 else f"s{rid}"
        well_formed = (message.get("jsonrpc", "2.0") == "2.0" and message["method"] != ""
                       and isinstance(message.get("params", {}), dict))
        if well_formed or not in_batch:
            expected.append(message["id"])
    return message


frames = st.one_of(
    st.binary(max_size=200).map(lambda b: ("raw", b)),
    json_values.map(lambda v: ("json", v)),
    messages().map(lambda m: ("message", m)),
    st.lists(messages() | json_values, max_size=6).map(lambda b: ("batch", b)),
)


def _valid_id(value: Any) -> bool:
    """§4.1: a string, or a number within 53 bits."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return True
    return isinstance(value, int | float) and math.isfinite(value) and abs(value) <= 2**53 - 1


def _well_formed_request(member: Any) -> bool:
    return (isinstance(member, dict) and "id" in member and _valid_id(member["id"])
            and "result" not in member and "error" not in member
            and member.get("jsonrpc") in ("2.0", None)
            and isinstance(member.get("method"), str) and member["method"] != ""
            and isinstance(member.get("params", {}), dict | None))


def answerable_ids(value: Any) -> list[Any]:
    """The ids the server must echo for an arbitrary JSON value sent as one frame (random
    bytes and values sometimes form messages): a single object with a valid id is answered
    with it, malformed or not, unless it is a well-formed response (never answered); a batch
    member only when it is a well-formed request (§11: malformed members get id null)."""
    if isinstance(value, list):
        return [member["id"] for member in value if _well_formed_request(member)]
    if not isinstance(value, dict) or "id" not in value or not _valid_id(value["id"]):
        return []
    response = ("result" in value or "error" in value) and value.get("jsonrpc") == "2.0" \
        and value.get("method") is None
    return [] if response else [value["id"]]


def encode(kind: str, value: Any, expected: list[Any]) -> bytes:
    if kind in ("raw", "json"):
        data = value.replace(b"shutdown", b"") if kind == "raw" else json.dumps(value).encode()
        if b"\n" not in data:  # over stdio a newline would cut the frame in two
            with contextlib.suppress(ValueError):
                expected.extend(answerable_ids(json.loads(data)))
        return data
    if kind == "message":
        return json.dumps(materialise(value, expected, in_batch=False)).encode()
    members = [materialise(v, expected, in_batch=True) if isinstance(v, dict) and "has_id" in v
               else v for v in value]
    return json.dumps(members).encode()


def answered_ids(frame: Any) -> list[Any]:
    items = frame if isinstance(frame, list) else [frame]
    return [item["id"] for item in items if "method" not in item and item.get("id") is not None]


# ── stdio ───────────────────────────────────────────────────────────────────

@pytest.fixture(scope="module")
def stdio_peer() -> Iterator[StdioPeer]:
    with StdioPeer(python_argv(EXAMPLE)) as peer:
        yield peer
        assert peer.close() == 0
        peer.assert_clean()


@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(frames, min_size=1, max_size=5))
def test_stdio_survives_anything(stdio_peer: StdioPeer, inputs: list[tuple[str, Any]]) -> None:
    expected: list[Any] = []
    payload = b"".join(encode(kind, value, expected) + b"\n" for kind, value in inputs)
    sentinel = f"sentinel-{next(IDS)}"
    stdio_peer.send_raw(payload + json.dumps(
        {"jsonrpc": "2.0", "id": sentinel, "method": "ping"}).encode() + b"\n")
    for rid in [*expected, sentinel]:
        stdio_peer.reply(rid, timeout=5)
    stdio_peer.assert_clean()
    assert stdio_peer.proc.poll() is None
    counts: dict[str, int] = {}
    for frame in stdio_peer.received:
        for rid in answered_ids(frame):
            counts[repr(rid)] = counts.get(repr(rid), 0) + 1
    assert all(counts[repr(rid)] == 1 for rid in [*expected, sentinel])


# ── HTTP ────────────────────────────────────────────────────────────────────

@pytest.fixture(scope="module", params=LOOPBACK_KINDS)
def http_client(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    """A client of the app under rcpkit's lean HTTP server, then under uvicorn."""
    app = create_app(build_test_server(), sessions="single")
    with LoopbackServer(app, kind=request.param) as loopback, \
            httpx.Client(base_url=loopback.url, timeout=30) as client:
        yield client


@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames, st.booleans())
@example(("raw", b'{"jsonrpc":"2.0","id":"nm"}'), False)  # bytes that form a malformed request
@example(("json", [{"jsonrpc": "2.0", "id": 3, "method": "ping"}, {"id": 4}]), False)
def test_http_survives_anything(http_client: httpx.Client, item: tuple[str, Any],
                                by_path: bool) -> None:
    expected: list[Any] = []
    kind, value = item
    data = encode(kind, value, expected)
    path = "/rcp"
    if by_path and kind == "message" and isinstance(value.get("method"), str):
        path = "/rcp/" + urllib.parse.quote(value["method"], safe="/")
    response = http_client.post(path, content=data)
    assert response.status_code in (200, 204, 400, 404), response.text
    if response.status_code == 200:
        frame = response.json()
        for member in frame if isinstance(frame, list) else [frame]:
            assert_frame(member)
        assert sorted(map(repr, answered_ids(frame))) == sorted(map(repr, expected))
    elif response.status_code == 204:
        assert response.content == b"" and expected == []
    ping = http_client.post("/rcp/ping", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert ping.status_code == 200 and ping.json()["result"] == {}
