"""Writes over the real wire (§7.10, §7.11): persistence across restarts, ``kill -9`` during a
large ``index/add``, upsert, delete, ``_meta.idempotencyKey``."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from engine_wire import Engine, rcpkit_argv

from support.stdio import StdioPeer

BATCHES = 24
PER_BATCH = 40


def _batch(number: int) -> list[dict[str, Any]]:
    return [{"id": f"b{number}-d{i}",
             "text": f"Record {i} of batch {number}: bees, bread and weather notes "
                     f"for durability testing. " * 8,
             "meta": {"batch": number}} for i in range(PER_BATCH)]


def _in_batch(engine: Engine, number: int) -> set[str]:
    """Every document of a batch, found by filter (dense mode returns all allowed rows)."""
    hits = engine.retrieve("bees bread weather", 200, mode="dense", unit="document",
                           filter={"field": "batch", "op": "eq", "value": number})["hits"]
    return {hit["id"] for hit in hits}


def test_documents_persist_across_restarts(serve: Any) -> None:
    first = serve()
    first.add([{"id": "sv", "text": "Kanelbullar bakas med kardemumma i Sverige.",
                "meta": {"lang": "sv"}},
               {"id": "en", "text": "Cinnamon buns are baked with cardamom.",
                "meta": {"lang": "en"}}])
    version = first.retrieve("kardemumma")["indexVersion"]
    first.close()
    second = serve()
    result = second.retrieve("kardemumma", mode="sparse")
    assert [hit["id"] for hit in result["hits"]] == ["sv#0"]
    assert result["indexVersion"] == version
    assert second.info["capabilities"]["filter"]["fields"]["lang"] == "keyword"


def _request_id(number: int) -> str:
    """A string id, so no other reply (``initialize`` is id 1) can pass for a batch's."""
    return f"batch-{number}"


def _acknowledged(frames: list[Any]) -> set[int]:
    """The batches an ``index/add`` result acknowledged: replies with a batch's string id
    and the written ``ids`` (§7.10), nothing else (an ``initialize`` reply, an error)."""
    numbers = {_request_id(number): number for number in range(BATCHES)}
    return {numbers[frame["id"]] for frame in frames
            if isinstance(frame, dict) and isinstance(frame.get("id"), str)
            and frame["id"] in numbers and "ids" in frame.get("result", {})}


def test_only_an_add_result_acknowledges_a_batch() -> None:
    initialize_reply = {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 1}}
    refused = {"jsonrpc": "2.0", "id": _request_id(2),
               "error": {"code": -32010, "message": "backend unavailable"}}
    added = {"jsonrpc": "2.0", "id": _request_id(3), "result": {"ids": ["b3-d0"], "chunks": 1}}
    assert _acknowledged([initialize_reply, refused, added]) == {3}


def test_kill_9_during_large_add_loses_no_acknowledged_document(data_dir: Path,
                                                                 serve: Any) -> None:
    peer = StdioPeer(rcpkit_argv("serve", "--stdio", "--data", str(data_dir)))
    with peer:
        peer.initialize()
        for number in range(BATCHES):
            peer.send({"jsonrpc": "2.0", "id": _request_id(number), "method": "index/add",
                       "params": {"documents": _batch(number), "chunk": True}})
        while len(_acknowledged(peer.received)) < 5:
            reply = peer.recv(60)
            assert not (isinstance(reply, dict) and "error" in reply), reply
        peer.proc.send_signal(signal.SIGKILL)
        peer.proc.wait(30)
        acked = _acknowledged(peer.received)
    assert len(acked) < BATCHES, "the add finished before the kill; make it larger"
    engine = serve()
    for number in range(BATCHES):
        found = _in_batch(engine, number)
        if number in acked:
            assert found == {d["id"] for d in _batch(number)}, f"batch {number} lost documents"
        else:
            assert len(found) in (0, PER_BATCH), f"batch {number} is half-written"


def test_upsert_delete_and_idempotency_key(serve_in_memory: Any) -> None:
    engine = serve_in_memory()
    added = engine.add([{"id": "doc", "text": "The old text about glaciers."},
                        {"text": "A document without an id about volcanoes."}])
    assert added["ids"][0] == "doc" and added["ids"][1]
    minted = added["ids"][1]
    engine.add([{"id": "doc", "text": "The new text about deserts."}])
    assert engine.ids("glaciers", mode="sparse") == []
    assert engine.ids("deserts", mode="sparse") == ["doc#0"]
    assert engine.ids("deserts glaciers volcanoes", mode="dense", unit="document") \
        .count("doc") == 1
    assert engine.ok("index/delete", {"ids": ["doc", minted, "never-existed"]}) \
        ["deleted"] == 2
    assert engine.ok("index/delete", {"ids": ["doc", minted]})["deleted"] == 0
    assert engine.ids("deserts volcanoes", mode="dense") == []
    # An id-less add is not idempotent, unless a repeated _meta.idempotencyKey replays it.
    params = {"documents": [{"text": "minted id, so a plain retry would duplicate"}],
              "_meta": {"idempotencyKey": "k-1"}}
    first = engine.ok("index/add", params)
    second = engine.ok("index/add", params)
    assert first["ids"] == second["ids"]
    assert len(engine.ids("minted duplicate retry", mode="dense")) == 1
