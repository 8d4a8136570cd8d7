"""Hostile input over the real wire against the served engine: it is refused with the right
error before anything is written, and the data directory keeps opening (§4.6, §12, §15.5)."""

from __future__ import annotations

import base64
import json
import socket
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from engine_wire import Engine, HttpEngine, make_data_dir, rcpkit_argv

LONE = "\ud800"

SURROGATE_PARAMS = [
    ("index/add", {"documents": [{"id": "x", "text": "fine", "meta": {"source": LONE}}]},
     "documents[0].meta.source"),
    ("index/add", {"documents": [{"id": "x", "text": "fine", "meta": {LONE: 1}}]},
     "documents[0].meta"),
    ("index/add", {"documents": [{"id": LONE, "text": "fine"}]}, "documents[0].id"),
    ("index/add", {"documents": [{"id": "x", "text": "bad " + LONE}]}, "documents[0].text"),
    ("retrieve", {"query": "q" + LONE, "k": 3}, "query"),
    ("retrieve", {"query": "bees", "k": 3, "filter": {"field": "lang", "op": "eq",
                                                      "value": LONE}}, "filter.value"),
    ("retrieve", {"query": "bees", "k": 3, "cursor": LONE}, "cursor"),
    ("retrieve", {"query": "bees", "k": 3, "_meta": {"trace": LONE}}, "_meta.trace"),
    ("ping", {"nonce": LONE}, "nonce"),
]


@pytest.mark.parametrize(("method", "params", "field"), SURROGATE_PARAMS,
                         ids=[field for _, _, field in SURROGATE_PARAMS])
def test_lone_surrogates_are_refused_over_stdio(serve: Any, method: str,
                                                params: dict[str, Any], field: str) -> None:
    engine: Engine = serve()
    error = engine.error(method, params)
    assert error["code"] == -32602
    assert error["data"]["field"] == field
    assert engine.retrieve("fine")["hits"] == []  # nothing was written
    engine.close()


def test_lone_surrogate_add_over_http_is_refused_and_the_store_reopens(data_dir: Path) -> None:
    engine = HttpEngine(data_dir)
    try:
        frame = {"jsonrpc": "2.0", "id": 1, "method": "index/add", "params": {"documents": [
            {"id": "bad", "text": "bees", "meta": {"source": LONE}}]}}
        reply = engine.client.post(f"{engine.base}/index/add", content=json.dumps(frame),
                                   headers={"content-type": "application/json"})
        assert reply.status_code == 200
        assert reply.json()["error"]["code"] == -32602
        assert engine.ok("index/add", {"documents": [{"id": "ok", "text": "bees"}]})
        hits = engine.ok("retrieve", {"query": "bees", "k": 5, "unit": "document"})["hits"]
        assert [hit["id"] for hit in hits] == ["ok"]
    finally:
        engine.close()
    reopened = HttpEngine(data_dir)
    try:
        assert reopened.ok("retrieve", {"query": "bees", "k": 5})["hits"]
    finally:
        reopened.close()


def test_a_store_already_holding_a_surrogate_row_still_opens(serve: Any,
                                                             data_dir: Path) -> None:
    """A row written before the wire refused such strings: it is skipped with a warning,
    the rest is served."""
    first: Engine = serve()
    first.add([{"id": "good", "text": "honey bees", "meta": {"source": "a"}},
               {"id": "bad", "text": "honey bees", "meta": {"source": "b"}}])
    first.close()
    with sqlite3.connect(data_dir / "store.sqlite3") as db:  # what the old server committed
        db.execute("UPDATE documents SET meta = ? WHERE doc_id = 'bad'",
                   ('{"source": "\\ud800"}',))
    # That server saved no chunk fields with its indexes: they are rebuilt from the store.
    for saved in (data_dir / "indexes").glob("state-*/fields/*"):
        saved.unlink()
    second: Engine = serve()
    assert second.ids("honey bees", unit="document") == ["good"]
    second.add([{"id": "later", "text": "honey bees later"}])
    assert set(second.ids("honey bees", unit="document")) == {"good", "later"}
    second.close()
    assert any("not valid Unicode" in line for line in second.peer.stderr_lines)


def _hit_ids(reply: Any) -> list[str]:
    body = reply.json()
    assert "result" in body, body
    return [hit["id"] for hit in body["result"]["hits"]]


BEES = [{"id": f"d{i}", "text": f"bees and honey, note {i}"} for i in range(6)]


def test_session_dedup_and_cursors_are_scoped_to_the_authenticated_caller(
        data_dir: Path) -> None:
    """§7.7.3: a ``sessionId`` names one caller's trajectory; two stateless callers choosing
    the same one neither see nor poison each other's seen-set, nor use each other's cursors."""
    engine = HttpEngine(data_dir, "--auth-token", "alice-key", "--auth-token", "bob-key")
    alice = {"Authorization": "Bearer alice-key"}
    bob = {"Authorization": "Bearer bob-key"}
    try:
        assert "result" in engine.post("index/add", {"documents": BEES}, **alice).json()
        query = {"query": "bees honey", "k": 2, "unit": "document", "sessionId": "shared"}
        first = _hit_ids(engine.post("retrieve", query, **alice))
        assert _hit_ids(engine.post("retrieve", query, **bob)) == first  # not deduped by alice
        second = _hit_ids(engine.post("retrieve", query, **alice))
        assert len(second) == 2 and not set(second) & set(first)  # alice's own dedup holds
        paged = engine.post("retrieve", {"query": "bees honey", "k": 2}, **alice).json()
        cursor = paged["result"]["nextCursor"]
        stolen = engine.post("retrieve", {"query": "bees honey", "k": 2, "cursor": cursor},
                             **bob).json()
        assert stolen["error"]["code"] == -32015
        own = engine.post("retrieve", {"query": "bees honey", "k": 2, "cursor": cursor},
                          **alice).json()
        assert len(own["result"]["hits"]) == 2
    finally:
        engine.close()


def test_session_dedup_is_scoped_to_the_rcp_session(data_dir: Path) -> None:
    engine = HttpEngine(data_dir, "--sessions", "token")
    try:
        sessions = []
        for _ in range(2):
            init = engine.post("initialize", {"protocolVersion": 1}).json()
            sessions.append({"RCP-Session": init["result"]["_meta"]["session"]})
        assert "result" in engine.post("index/add", {"documents": BEES},
                                       **sessions[0]).json()
        query = {"query": "bees honey", "k": 2, "unit": "document", "sessionId": "shared"}
        first = _hit_ids(engine.post("retrieve", query, **sessions[0]))
        assert _hit_ids(engine.post("retrieve", query, **sessions[1])) == first
    finally:
        engine.close()


def test_credential_headers_are_stripped_and_never_ambiguous(data_dir: Path) -> None:
    engine = HttpEngine(data_dir, "--auth-token", "k1", "--api-key-header", "X-API-Key")
    try:
        frame = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}
        url = f"{engine.base}/ping"
        body = json.dumps(frame).encode()
        with socket.create_connection(("127.0.0.1", engine.port), timeout=30) as raw:
            raw.sendall(b"POST /rcp/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                        b"X-API-Key: k1 \t\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body))
            assert raw.makefile("rb").read().startswith(b"HTTP/1.1 200 ")
        twice = engine.client.post(url, json=frame, headers=[
            ("Authorization", "Bearer wrong"), ("Authorization", "Bearer k1")])
        assert twice.status_code == 400 and twice.json()["error"]["code"] == -32600
        keys = engine.client.post(url, json=frame, headers=[("X-API-Key", "k1"),
                                                            ("X-API-Key", "k1")])
        assert keys.status_code == 400
    finally:
        engine.close()


def _saved_dense(data_dir: Path) -> tuple[Path, dict[str, str]]:
    root = data_dir / "indexes"
    dense = root / (root / "CURRENT").read_text().strip() / "dense"
    return dense, json.loads((dense / "dense.json").read_text())["files"]


def _damage(path: Path, how: str) -> None:
    """Keep the file's size and its ``.npy`` header; zero or reverse what follows."""
    data = path.read_bytes()
    header = data.index(b"\n") + 1
    body = data[header:]
    # Zeroed, or reversed: six row ids saved one byte each come out in descending order.
    body = bytes(len(body)) if how == "zero" else body[::-1]
    path.write_bytes(data[:header] + body)


@pytest.mark.parametrize(("part", "how"), [("rowids", "zero"), ("rowids", "reverse")])
def test_damaged_saved_indexes_are_rebuilt_from_the_record(serve: Any, data_dir: Path,
                                                           part: str, how: str) -> None:
    first: Engine = serve()
    first.add([{"id": f"d{i}", "text": f"field notes {i} about {word}"}
               for i, word in enumerate(["bees", "wasps", "ants", "moths", "flies", "gnats"])])
    expected = first.ids("bees and moths", mode="dense", unit="document")
    first.close()
    dense, files = _saved_dense(data_dir)
    _damage(dense / files[part], how)
    second: Engine = serve()
    assert second.ids("bees and moths", mode="dense", unit="document") == expected
    second.close()
    assert any("rebuilding them from the store" in line for line in second.peer.stderr_lines)


@pytest.mark.parametrize("stop", ["cancel", "deadline"])
def test_a_stopped_index_add_stops_embedding_and_writes_nothing(tmp_path: Path,
                                                                stop: str) -> None:
    """§7.14, §13.1 with the real MiniLM: a cancelled or overdue add's worker stops at its
    next embedding batch and releases the write lock; without that it ran on and
    committed anyway."""
    data = make_data_dir(tmp_path / "minilm", 'embedder = "minilm"\n')
    engine = Engine(data)
    try:
        engine.add([{"id": "warm", "text": "the model is loaded"}])
        long_text = "Bees gather nectar and pollen from many flowering plants. " * 40
        params: dict[str, Any] = {"documents": [{"id": f"big{i}", "text": f"{i} {long_text}"}
                                                for i in range(600)]}
        if stop == "deadline":
            params["_meta"] = {"deadlineMs": 300}
        engine.peer.send({"jsonrpc": "2.0", "id": "big", "method": "index/add",
                          "params": params})
        if stop == "cancel":
            assert engine.peer.call("ping", {})["result"] == {}  # the add's task has started
            engine.peer.send({"jsonrpc": "2.0", "method": "notifications/cancel",
                              "params": {"id": "big"}})
        code = engine.peer.reply("big", timeout=120)["error"]["code"]
        assert code == (-32006 if stop == "cancel" else -32014)
        small = engine.peer.call("index/add", {"documents": [{"id": "small", "text": "bees"}]})
        assert "result" in small, small
        hits = engine.ok("retrieve", {"query": "bees nectar pollen", "k": 50, "mode": "sparse",
                                      "unit": "document"})["hits"]
        assert {hit["id"] for hit in hits} <= {"warm", "small"}
    finally:
        engine.close()


URI_BLOCK = {"type": "blob", "mimeType": "text/plain", "uri": "http://127.0.0.1:9/secret.txt"}


@pytest.mark.parametrize(("method", "params", "field"), [
    ("embed", {"inputs": ["fine", URI_BLOCK]}, "inputs[1].uri"),
    ("embed/multi", {"inputs": [URI_BLOCK]}, "inputs[0].uri"),
    ("rerank", {"query": "bees", "passages": ["bees", URI_BLOCK]}, "passages[1].uri"),
    ("rerank", {"query": URI_BLOCK, "passages": ["bees"]}, "query.uri"),
    ("retrieve", {"query": [{"type": "text", "text": "bees"}, URI_BLOCK], "k": 3},
     "query[1].uri"),
])
def test_content_by_uri_is_refused_not_dropped(serve: Any, method: str, params: dict[str, Any],
                                               field: str) -> None:
    """§4.8: a uri the server will not fetch is -32602, never a silent zero vector."""
    engine: Engine = serve()
    error = engine.error(method, params)
    assert error["code"] == -32602, error
    assert error["data"]["field"] == field
    engine.close()


def test_inline_text_blobs_are_read_as_text(serve: Any) -> None:
    engine: Engine = serve()
    blob = {"type": "blob", "mimeType": "text/plain",
            "data": base64.b64encode(b"honey bees").decode()}
    vectors = engine.ok("embed", {"inputs": ["honey bees", blob]})["vectors"]
    assert vectors[0] == vectors[1] and any(vectors[0])
    engine.close()


def test_oversized_and_overdeep_params_get_their_own_errors(serve: Any) -> None:
    engine: Engine = serve()
    engine.add([{"id": "a", "text": "bees", "meta": {"lang": "en"}}])
    nested: Any = "n"
    for _ in range(300):
        nested = [nested]
    error = engine.error("ping", {"nonce": nested})
    assert (error["code"], error["data"]["field"]) == (-32602, "nonce")
    assert engine.ok("ping", {"nonce": [1, {"a": None}]}) == {"nonce": [1, {"a": None}]}
    wide = {"or": [{"field": "lang", "op": "eq", "value": f"v{i}"} for i in range(5000)]}
    error = engine.error("retrieve", {"query": "bees", "k": 3, "filter": wide})
    assert (error["code"], error["data"]["field"]) == (-32602, "filter")
    deep = (b'{"not":' * 10_000 + b'{"field":"lang","op":"eq","value":"en"}'
            + b"}" * 10_000)
    engine.peer.send_raw(b'{"jsonrpc":"2.0","id":"deep","method":"retrieve","params":'
                         b'{"query":"bees","k":3,"filter":' + deep + b"}}\n")
    reply = engine.peer.reply(None)
    assert reply["error"]["code"] == -32600 and "levels deep" in reply["error"]["message"]
    assert engine.ids("bees") == ["a#0"]  # and the server goes on
    engine.close()


@pytest.mark.parametrize("mode", [["--stdio"], ["--http", "127.0.0.1:0"]])
def test_a_corrupt_store_file_is_one_clear_line_at_start(data_dir: Path,
                                                         mode: list[str]) -> None:
    (data_dir / "store.sqlite3").write_bytes(b"not a database, " * 512)
    done = subprocess.run(rcpkit_argv("serve", *mode, "--data", str(data_dir)),
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "not a readable SQLite database" in lines[0], lines
