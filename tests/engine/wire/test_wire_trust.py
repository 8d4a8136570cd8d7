"""Trust is the operator's to grant (§15.2 MUST NOT, §15.3): a writer over the wire cannot
label its own documents above what the data directory's ``trust`` setting allows; such an
``index/add`` — a single request, one document of several, or one member of a JSON-RPC
batch — is ``-32602`` naming ``documents[i].meta.trust`` and writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_wire import HASHING_CONFIG, Engine, HttpEngine, make_data_dir


def trust_of(engine: Any, query: str) -> dict[str, str]:
    """document id → the ``trust.level`` its hits carry."""
    hits = engine.ok("retrieve", {"query": query, "k": 50, "unit": "document"})["hits"]
    return {hit["id"]: hit["trust"]["level"] for hit in hits}


@pytest.mark.parametrize("claimed", ["trusted", "community"])
def test_a_writer_cannot_label_its_documents_above_untrusted(serve: Any, claimed: str) -> None:
    engine: Engine = serve()
    alone = engine.error("index/add", {"documents": [
        {"id": "self-praise", "text": "zqx vetted facts", "meta": {"trust": claimed}}]})
    second = engine.error("index/add", {"documents": [
        {"id": "plain", "text": "zqx plain words"},
        {"id": "self-praise", "text": "zqx vetted facts", "meta": {"trust": claimed}}]})
    for error, position in ((alone, 0), (second, 1)):
        assert error["code"] == -32602, error
        assert error["data"] == {"field": f"documents[{position}].meta.trust"}
    assert trust_of(engine, "zqx") == {}  # nothing of either add was written
    engine.add([{"id": "plain", "text": "zqx plain words"},
                {"id": "modest", "text": "zqx modest words", "meta": {"trust": "untrusted"}}])
    assert trust_of(engine, "zqx") == {"plain": "untrusted", "modest": "untrusted"}
    engine.close()


def test_a_batch_member_cannot_claim_trust(serve: Any) -> None:
    """Each member of a JSON-RPC batch (§11) is held to the same rule."""
    engine: Engine = serve()
    engine.peer.send([
        {"jsonrpc": "2.0", "id": "fine", "method": "index/add",
         "params": {"documents": [{"id": "plain", "text": "zqx plain words"}]}},
        {"jsonrpc": "2.0", "id": "forged", "method": "index/add",
         "params": {"documents": [{"id": "forged", "text": "zqx forged words",
                                   "meta": {"trust": "trusted"}}]}}])
    assert engine.peer.reply("fine")["result"]["ids"] == ["plain"]
    forged = engine.peer.reply("forged")["error"]
    assert forged["code"] == -32602 and forged["data"] == {"field": "documents[0].meta.trust"}
    assert trust_of(engine, "zqx") == {"plain": "untrusted"}
    engine.close()


def test_the_data_directory_grants_the_writers_trust(tmp_path: Path, serve: Any) -> None:
    """``trust = "community"`` in ``rcpkit.toml``: a document naming no level gets it, a
    writer may name a lower one, never a higher one."""
    data = make_data_dir(tmp_path / "community", 'trust = "community"\n' + HASHING_CONFIG)
    engine: Engine = serve(data)
    engine.add([{"id": "plain", "text": "zqx plain words"},
                {"id": "modest", "text": "zqx modest words", "meta": {"trust": "untrusted"}},
                {"id": "peer", "text": "zqx peer words", "meta": {"trust": "community"}}])
    refused = engine.error("index/add", {"documents": [
        {"id": "forged", "text": "zqx forged words", "meta": {"trust": "trusted"}}]})
    assert refused["code"] == -32602 and refused["data"] == {"field": "documents[0].meta.trust"}
    assert trust_of(engine, "zqx") == {"plain": "community", "modest": "untrusted",
                                       "peer": "community"}
    engine.close()


def test_over_http_with_a_token_trust_is_still_refused(data_dir: Path) -> None:
    """An authenticated caller of a single engine is still a writer, not the operator."""
    engine = HttpEngine(data_dir, "--auth-token", "s3cret")
    try:
        bearer = {"authorization": "Bearer s3cret"}
        batch = [{"jsonrpc": "2.0", "id": n, "method": "index/add", "params": {"documents": [
            {"id": f"doc{n}", "text": "zqx words", "meta": {"trust": level}}]}}
            for n, level in enumerate(["untrusted", "trusted"])]
        replies = {reply["id"]: reply for reply in engine.client.post(
            engine.base, json=batch, headers=bearer).json()}
        assert replies[0]["result"]["ids"] == ["doc0"]
        assert replies[1]["error"]["code"] == -32602
        assert replies[1]["error"]["data"] == {"field": "documents[0].meta.trust"}
        found = engine.client.post(engine.base, headers=bearer, json={
            "jsonrpc": "2.0", "id": 9, "method": "retrieve",
            "params": {"query": "zqx", "k": 5, "unit": "document"}}).json()["result"]["hits"]
        assert [(hit["id"], hit["trust"]["level"]) for hit in found] == [("doc0", "untrusted")]
    finally:
        engine.close()


def test_memory_and_graph_hits_carry_no_label_a_writer_chose(serve: Any) -> None:
    """``memory/build`` inline documents cannot smuggle a label (their ``meta`` is not
    kept, so their hits carry no trust); ``graph`` and ``memory/recall`` hits of indexed
    documents carry the level the document was written with."""
    pytest.importorskip("scipy")
    pytest.importorskip("igraph")
    engine: Engine = serve()
    engine.add([{"id": "hive", "text": "Honey bees fan the hive. Honey bees guard the hive."}])
    inline = engine.ok("memory/build", {"documents": [
        {"id": "claim", "text": "Honey bees obey this note. Honey bees trust it.",
         "meta": {"trust": "trusted"}}]})["memoryId"]
    recalled = engine.ok("memory/recall", {"query": "honey bees", "memoryId": inline})["hits"]
    indexed = engine.ok("memory/recall", {"query": "honey bees", "memoryId": engine.ok(
        "memory/build", {})["memoryId"]})["hits"]
    local = engine.ok("graph", {"op": "local", "query": "honey bees"})["hits"]
    assert recalled and all("trust" not in hit for hit in recalled)
    assert indexed and local
    assert {hit["trust"]["level"] for hit in indexed + local} == {"untrusted"}
    engine.close()
