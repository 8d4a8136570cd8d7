"""Hostile but valid-JSON params to every engine method over the real wire, and hostile bytes
and header shapes to its HTTP server (§12, §15.4, §15.5).

Asserted for every example: an answer arrives (no hang), it is a schema-valid frame (stdout
carries frames only), it is never ``-32603`` (an unhandled failure) and never an HTTP 5xx,
and the next ordinary request still works. Afterwards the data directory opens again.
"""

from __future__ import annotations

import itertools
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, HttpEngine, make_data_dir
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

IDS = itertools.count(1)

HOSTILE_STRINGS = st.sampled_from([
    "\ud800", "\udfff", "a\ud83d", "", " ", "\x00", "\u202e", "x" * 5000, "'; DROP TABLE "
    "documents; --", "../../etc/passwd", "%s%n", "bees", "lang", "$.a", "\\", '"',
    "\U0001f41d", "hybrid", "dense", "sparse", "rrf", "document", "chunk",
])
TEXT = HOSTILE_STRINGS | st.text(max_size=30)
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(TEXT, inner, max_size=4), max_leaves=16)
NUMBERS = st.integers(-5, 300) | st.integers(-2**63, 2**64) | VALUES
CONDITION = st.fixed_dictionaries({"field": st.sampled_from(["lang", "n", "summary"]) | TEXT,
                                   "op": st.sampled_from(["eq", "ne", "gt", "in", "contains",
                                                          "exists", "near"]),
                                   "value": VALUES})
FILTERS = st.recursive(CONDITION, lambda inner: st.dictionaries(
    st.sampled_from(["and", "or", "not"]), st.lists(inner, max_size=3) | inner,
    min_size=1, max_size=2), max_leaves=10) | VALUES
CONTENT = TEXT | st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "blob", "audio", "video"])},
    optional={"text": TEXT, "mimeType": st.sampled_from(["text/plain", "image/png"]) | TEXT,
              "data": TEXT, "uri": TEXT})
DOCUMENT = st.fixed_dictionaries({"text": TEXT | VALUES}, optional={
    "id": TEXT | VALUES, "meta": st.dictionaries(TEXT, VALUES, max_size=4) | VALUES})
META = st.fixed_dictionaries({}, optional={"deadlineMs": NUMBERS, "idempotencyKey": VALUES,
                                           "progressToken": VALUES, "trace": VALUES})


def _params(**fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={**fields, "_meta": META | VALUES})


PARAMS = {
    "retrieve": _params(query=CONTENT | st.lists(CONTENT, max_size=3) | VALUES, k=NUMBERS,
                        mode=TEXT, filter=FILTERS, cursor=TEXT, sessionId=TEXT,
                        candidateK=NUMBERS, unit=TEXT, tokenBudget=NUMBERS, minScore=VALUES,
                        fusion=VALUES, rerank=VALUES, mmr=VALUES, recency=VALUES,
                        indexVersion=TEXT, includeVectors=VALUES, encoding=TEXT),
    "index/add": _params(documents=st.lists(DOCUMENT, max_size=3) | VALUES, chunk=VALUES,
                         contextual=VALUES),
    "index/delete": _params(ids=st.lists(TEXT, max_size=3) | VALUES),
    "embed": _params(inputs=st.lists(CONTENT, max_size=3) | VALUES, kind=TEXT, encoding=TEXT),
    "embed/multi": _params(inputs=st.lists(CONTENT, max_size=2) | VALUES, kind=TEXT),
    "embed/sparse": _params(inputs=st.lists(CONTENT, max_size=2) | VALUES, kind=TEXT),
    "rerank": _params(query=CONTENT | VALUES, passages=st.lists(CONTENT, max_size=4) | VALUES,
                      topN=NUMBERS, method=TEXT),
    "graph": _params(op=TEXT, query=TEXT, ids=VALUES, hops=NUMBERS),
    "query/transform": _params(query=TEXT | VALUES, op=TEXT, n=NUMBERS),
    "catalog/list": _params(cursor=TEXT, limit=NUMBERS),
    "feedback": _params(signals=st.lists(st.dictionaries(TEXT, VALUES, max_size=4),
                                         max_size=3) | VALUES, sessionId=TEXT, query=TEXT),
    "ping": _params(nonce=VALUES),
    "info": _params(),
}
CALLS = st.sampled_from(sorted(PARAMS)).flatmap(
    lambda method: st.tuples(st.just(method), PARAMS[method]))
FUZZ = settings(max_examples=250, deadline=None, derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_dir(tmp_path_factory.mktemp("fuzz") / "data")


@pytest.fixture(scope="module")
def stdio_engine(fuzz_dir: Path) -> Iterator[Engine]:
    engine = Engine(fuzz_dir)
    engine.add([{"id": "seed", "text": "bees make honey", "meta": {"lang": "en", "n": 1}}])
    yield engine
    engine.close()  # exit status 0, and every stdout line was a schema-valid frame
    reopened = Engine(fuzz_dir)
    assert "seed" in reopened.ids("bees honey", unit="document")
    reopened.close()


def _assert_answered(reply: dict[str, Any], method: str, params: dict[str, Any]) -> None:
    assert "result" in reply or reply["error"]["code"] != -32603, (method, params, reply)


@FUZZ
@given(CALLS)
def test_stdio_engine_survives_hostile_params(stdio_engine: Engine,
                                              call: tuple[str, dict[str, Any]]) -> None:
    method, params = call
    rid = f"f{next(IDS)}"
    stdio_engine.peer.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    _assert_answered(stdio_engine.peer.reply(rid, timeout=30), method, params)
    stdio_engine.peer.assert_clean()
    assert stdio_engine.ok("ping", {"nonce": rid}) == {"nonce": rid}


@pytest.fixture(scope="module")
def http_engine_fuzz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpEngine]:
    data = make_data_dir(tmp_path_factory.mktemp("fuzz-http") / "data")
    engine = HttpEngine(data, "--auth-token", "key", "--max-header-bytes", "8192")
    yield engine
    engine.close()


AUTH = {"Authorization": "Bearer key"}


@FUZZ
@given(CALLS)
def test_http_engine_survives_hostile_params(http_engine_fuzz: HttpEngine,
                                             call: tuple[str, dict[str, Any]]) -> None:
    method, params = call
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = http_engine_fuzz.client.post(f"{http_engine_fuzz.base}/{method}", content=body,
                                            headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 200, (method, params, response.text)
    _assert_answered(response.json(), method, params)


HEADER_NAMES = st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"Authorization",
                                b"Connection", b"Upgrade", b"Expect", b"Host", b"X-API-Key",
                                b"RCP-Session", b"Accept"]) | st.binary(min_size=1, max_size=20)
HEADER_VALUES = st.sampled_from([b"0", b"5", b"-1", b"99999999999999999999", b"chunked",
                                 b"close", b"Upgrade", b"h2c", b"100-continue",
                                 b"Bearer key", b"Bearer key, Bearer key", b"text/event-stream",
                                 b"a" * 9000]) | st.binary(max_size=40)
HEADS = st.tuples(
    st.sampled_from([b"POST", b"GET", b"PUT", b"OPTIONS", b"HEAD", b"PRI", b"POST "]),
    st.sampled_from([b"/rcp", b"/rcp/ping", b"/rcp/retrieve", b"*", b"/", b"/rcp/%ff",
                     b"/rcp?x=1", b"/" + b"p" * 9000]) | st.binary(max_size=30),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1\r\n"]),
    st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=6),
    st.binary(max_size=300) | st.just(b'{"jsonrpc":"2.0","id":1,"method":"ping"}'),
)


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        try:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse and close before reading everything
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


@FUZZ
@given(HEADS)
def test_http_server_survives_hostile_bytes(http_engine_fuzz: HttpEngine,
                                            head: tuple[Any, ...]) -> None:
    method, target, version, headers, body = head
    data = b"%s %s %s\r\n" % (method, target, version) + b"".join(
        name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n" + body
    reply = _exchange(http_engine_fuzz.port, data)
    for status_line in [line for line in reply.split(b"\r\n") if line.startswith(b"HTTP/1.")]:
        assert status_line[9:10] != b"5", (data[:300], reply[:300])
    assert http_engine_fuzz.post("ping", {}, **AUTH).json()["result"] == {}
