"""``memory/build`` and ``memory/recall`` (§7.17) on the served engine: the capability and its
bounds (§15.5), result shapes against the schema, scopes (a ``session`` memory is its
builder's alone, §15.6), -32015 for an unknown ``memoryId``, durability across a restart,
clues that seed ``graph``, the reference SDK (``rcp-protocol``) calling both; the inline text
bound, a build stopped by a cancel (§7.14) or its deadline (§13.1) storing nothing, the
count retention, and ``rcpkit memory list|delete``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_wire import HASHING_CONFIG, Engine, make_data_dir, rcpkit_argv
from test_wire_graph import DOCS
from typer.testing import CliRunner

from rcpkit.cli import app
from support.schema import assert_result

pytest.importorskip("scipy")
pytest.importorskip("igraph")

INLINE = [{"id": "tea-0", "text": "Green tea leaves are steamed. Steamed green tea keeps its "
                                  "colour."},
          {"id": "tea-1", "text": "Black tea leaves oxidise fully before drying. Black tea is "
                                  "strong."}]


@pytest.fixture
def engine(serve: Any) -> Engine:
    started: Engine = serve()
    started.add(DOCS)
    return started


def build(engine: Engine, **params: Any) -> str:
    result = engine.ok("memory/build", params)
    assert_result("memory/build", result)
    assert result["tokens"] > 0
    memory_id: str = result["memoryId"]
    return memory_id


def recall(engine: Engine, query: str, **params: Any) -> dict[str, Any]:
    result = engine.ok("memory/recall", {"query": query, **params})
    assert_result("memory/recall", result)
    return result


def test_memory_is_advertised_with_scopes_and_bounds(engine: Engine) -> None:
    memory = engine.info["capabilities"]["memory"]
    assert memory["scopes"] == ["global", "session"] and memory["clues"] is True
    assert memory["maxN"] >= 1 and memory["maxDocuments"] >= 1


def test_recall_over_the_live_index_gives_clues_that_seed_graph(engine: Engine) -> None:
    memory_id = build(engine)
    result = recall(engine, "honey bee colony", memoryId=memory_id, n=2)
    clues = result["clues"]
    assert 1 <= len(clues) <= 2
    assert clues[0]["weight"] == 1.0 and all(0 < c["weight"] <= 1 for c in clues)
    assert all(c["query"] and c["seedIds"] for c in clues)
    assert [h["id"].split("-")[0] for h in result["hits"]] == ["bees"] * len(result["hits"])
    assert result["_meta"]["indexVersion"] == engine.ok("graph", {
        "op": "local", "query": "bee"})["_meta"]["indexVersion"]
    walked = engine.ok("graph", {"op": "neighbors", "seedIds": clues[0]["seedIds"], "hops": 1})
    assert "unknownSeedIds" not in walked
    assert {n["id"] for n in walked["nodes"]} >= set(clues[0]["seedIds"])


def test_a_memory_over_inline_documents_recalls_them_not_the_index(engine: Engine) -> None:
    memory_id = build(engine, documents=INLINE)
    result = recall(engine, "black tea", memoryId=memory_id)
    assert result["hits"][0]["id"] == "tea-1#0" and "Black tea" in result["hits"][0]["text"]
    assert "indexVersion" not in result["_meta"]
    assert recall(engine, "honey bee", memoryId=memory_id)["clues"] == []


def test_an_update_adds_documents_to_the_same_memory(engine: Engine) -> None:
    memory_id = build(engine, documents=INLINE[:1])
    before = [h["id"] for h in recall(engine, "black tea", memoryId=memory_id)["hits"]]
    assert "tea-1#0" not in before
    assert build(engine, memoryId=memory_id, documents=INLINE[1:]) == memory_id
    ids = [h["id"] for h in recall(engine, "black tea", memoryId=memory_id)["hits"]]
    assert ids[0] == "tea-1#0"


def test_an_index_memory_follows_the_index_when_rebuilt(engine: Engine) -> None:
    memory_id = build(engine)
    before = recall(engine, "pole star", memoryId=memory_id)
    assert before["hits"]
    engine.ok("index/delete", {"ids": ["stars-0", "stars-1"]})
    # Until rebuilt, a deleted chunk is never served as a draft hit.
    assert recall(engine, "pole star", memoryId=memory_id)["hits"] == []
    assert build(engine, memoryId=memory_id) == memory_id
    assert recall(engine, "pole star", memoryId=memory_id)["clues"] == []


@pytest.mark.parametrize("method", ["memory/build", "memory/recall"])
def test_an_unknown_memory_id_is_not_found(engine: Engine, method: str) -> None:
    params = {"memoryId": "mem-missing", **({"query": "q"} if method == "memory/recall"
                                            else {})}
    assert engine.error(method, params)["code"] == -32015


def test_a_session_memory_is_its_builders_alone(engine: Engine, serve: Any) -> None:
    private = build(engine, documents=INLINE, scope="session")
    shared = build(engine, documents=INLINE, scope="global")
    assert recall(engine, "green tea", memoryId=private)["hits"]
    other = serve()
    assert other.error("memory/recall", {"query": "green tea",
                                         "memoryId": private})["code"] == -32015
    assert other.error("memory/build", {"memoryId": private})["code"] == -32015
    assert recall(other, "green tea", memoryId=shared)["hits"]


def test_without_a_memory_id_the_latest_visible_memory_answers(engine: Engine,
                                                               serve: Any) -> None:
    assert engine.error("memory/recall", {"query": "tea"})["code"] == -32015
    build(engine, documents=INLINE, scope="session")
    assert recall(engine, "green tea")["hits"][0]["id"] == "tea-0#0"
    assert serve().error("memory/recall", {"query": "green tea"})["code"] == -32015


@pytest.mark.parametrize(("method", "params", "field"), [
    ("memory/build", {"documents": [{"id": "x", "text": "  "}]}, "documents[0].text"),
    ("memory/recall", {"query": " "}, "query"),
    ("memory/recall", {"query": "q", "n": 0}, "n"),
])
def test_bad_memory_params_are_invalid_params(engine: Engine, method: str,
                                              params: dict[str, Any], field: str) -> None:
    error = engine.error(method, params)
    assert error["code"] == -32602 and error["data"]["field"] == field


def test_an_unadvertised_scope_is_unsupported(engine: Engine) -> None:
    error = engine.error("memory/build", {"scope": "team"})
    assert error["code"] == -32005 and error["data"]["option"] == "team"


def test_bounds_and_conflicting_updates_are_invalid_params(engine: Engine) -> None:
    max_n = engine.info["capabilities"]["memory"]["maxN"]
    memory_id = build(engine)
    recall(engine, "honey", memoryId=memory_id, n=max_n)
    error = engine.error("memory/recall", {"query": "honey", "memoryId": memory_id,
                                           "n": max_n + 1})
    assert error["code"] == -32602 and error["data"]["field"] == "n"
    error = engine.error("memory/build", {"memoryId": memory_id, "scope": "session"})
    assert error["code"] == -32602 and error["data"]["field"] == "scope"
    error = engine.error("memory/build", {"memoryId": memory_id, "documents": INLINE})
    assert error["code"] == -32602 and error["data"]["field"] == "documents"
    too_many = engine.info["capabilities"]["memory"]["maxDocuments"] + 1
    error = engine.error("memory/build", {"documents": [{"text": "x"}] * too_many})
    assert error["code"] == -32602 and error["data"]["field"] == "documents"


def test_a_memory_survives_a_restart(serve: Any, data_dir: Path) -> None:
    first = serve()
    first.add(DOCS)
    memory_id = build(first)
    before = recall(first, "sourdough bread", memoryId=memory_id)
    first.close()
    assert (data_dir / "memory.sqlite").is_file()
    assert recall(serve(), "sourdough bread", memoryId=memory_id) == before


def test_the_reference_sdk_calls_the_memory_methods(engine: Engine, data_dir: Path) -> None:
    engine.close()
    import rcp

    client = rcp.Client().connect_stdio(rcpkit_argv("serve", "--stdio", "--data",
                                                    str(data_dir)))
    try:
        assert client.supports(rcp.Capability.Memory)
        built = client.memory_build()
        recalled = client.memory_recall("sourdough starter", memory_id=built["memoryId"], n=2)
        assert recalled["clues"] and len(recalled["clues"]) <= 2
        assert recalled["hits"][0]["id"].startswith("bread-")
        inline = client.memory_build(documents=INLINE, scope="session")
        assert client.memory_recall("green tea", memory_id=inline["memoryId"])["hits"]
    finally:
        client.shutdown()


def test_our_client_has_typed_memory_methods(serve_in_memory: Any) -> None:
    served = serve_in_memory()
    served.add(DOCS)
    client = served.client
    built = client.memory_build(scope="global")
    assert isinstance(built.memory_id, str) and built.tokens and built.tokens > 0
    recalled = client.memory_recall("honey bee colony", memory_id=built.memory_id, n=2)
    assert 1 <= len(recalled.clues) <= 2
    assert recalled.clues[0].seed_ids and recalled.clues[0].weight == 1.0
    assert recalled.hits and recalled.hits[0].id.startswith("bees-")
    inline = client.memory_build([{"id": "tea-0", "text": INLINE[0]["text"]}],
                                 scope="session")
    assert client.memory_recall("green tea", memory_id=inline.memory_id).hits[0].id == "tea-0#0"


def _memory_config(**settings: int) -> str:
    """The wire tests' configuration with memory settings (before its ``[field_types]``)."""
    lines = "".join(f"{key} = {value}\n" for key, value in settings.items())
    return HASHING_CONFIG.replace("[field_types]", lines + "\n[field_types]")


def _large_documents(count: int, words: int) -> list[dict[str, Any]]:
    return [{"id": f"big-{i}", "text": " ".join(f"topic{(i * words + j) % 5003} notes"
                                                 for j in range(words)) + "."}
            for i in range(count)]


def test_inline_text_past_the_advertised_bound_is_invalid_params(serve: Any,
                                                                 tmp_path: Path) -> None:
    engine = serve(make_data_dir(tmp_path / "d", _memory_config(memory_max_inline_bytes=170)))
    assert engine.info["capabilities"]["memory"]["maxInlineBytes"] == 170
    oolong = {"id": "oolong", "text": "Oolong tea is partly oxidised: between the two."}
    error = engine.error("memory/build", {"documents": [*INLINE, oolong]})  # 131 + 47 bytes
    assert error["code"] == -32602 and error["data"]["field"] == "documents"
    memory_id = build(engine, documents=INLINE)
    error = engine.error("memory/build", {"memoryId": memory_id, "documents": [oolong]})
    assert error["code"] == -32602 and error["data"]["field"] == "documents"
    engine.close()


@pytest.mark.parametrize("stop", ["cancel", "deadline"])
def test_a_build_that_is_cancelled_or_out_of_time_stops_and_stores_nothing(
        serve: Any, stop: str) -> None:
    engine: Engine = serve()
    params: dict[str, Any] = {"documents": _large_documents(150, 400)}  # about 0.9 MB
    if stop == "deadline":
        params["_meta"] = {"deadlineMs": 300}
    engine.peer.send({"jsonrpc": "2.0", "id": "build", "method": "memory/build",
                      "params": params})
    if stop == "cancel":
        engine.peer.send({"jsonrpc": "2.0", "method": "notifications/cancel",
                          "params": {"id": "build"}})
    assert engine.peer.reply("build")["error"]["code"] == (-32006 if stop == "cancel"
                                                           else -32014)
    engine.close()  # the process ends once its worker threads have: a build would be stored
    again: Engine = serve()
    assert again.error("memory/recall", {"query": "topic1 notes"})["code"] == -32015


def test_only_the_configured_number_of_memories_is_kept(serve: Any, tmp_path: Path) -> None:
    engine = serve(make_data_dir(tmp_path / "d", _memory_config(memory_max_count=2)))
    built = [build(engine, documents=INLINE) for _ in range(3)]
    assert engine.error("memory/recall", {"query": "tea", "memoryId": built[0]})["code"] \
        == -32015
    assert recall(engine, "black tea", memoryId=built[2])["clues"]
    engine.close()


def test_the_operator_lists_and_deletes_memories_with_the_cli(serve: Any,
                                                               data_dir: Path) -> None:
    first: Engine = serve()
    kept = build(first, documents=INLINE)
    private = build(first, documents=INLINE, scope="session")
    first.close()
    runner = CliRunner()
    listed = runner.invoke(app, ["memory", "list", "--data", str(data_dir)],
                           env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert kept in listed.stdout and private in listed.stdout and "session" in listed.stdout
    deleted = runner.invoke(app, ["memory", "delete", private, "mem-never", "--data",
                                  str(data_dir)])
    assert deleted.exit_code == 0, deleted.output
    assert "deleted 1 memories" in deleted.stdout
    again: Engine = serve()
    assert recall(again, "black tea", memoryId=kept)["clues"]
    assert again.error("memory/recall", {"query": "tea", "memoryId": private})["code"] \
        == -32015
