"""The poison policy acting per source (§15.3, §7.16), in process through the RCP client:
quarantine once enough of a source's documents are demoted, advisory reports, an operator's
clear, persistence, other processes and cursor pages (§10) following the same state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rcpkit.binding import bind
from rcpkit.client import connect_memory
from rcpkit.client.client import AsyncClient
from rcpkit.engine import Engine, open_engine
from rcpkit.engine.config import EngineConfig
from rcpkit.protocol.errors import InvalidParams

POLICY = """embedder = "hashing"
hashing_dimension = 64

[poison]
threshold = 1
source_threshold = 2

[poison.source_thresholds]
"source:feed-trusted" = 0
"""
BEE_TEXTS = {"b1": "bees make honey in the hive", "b2": "honey bees swarm in spring",
             "b3": "a hive of bees and their honey"}


def engine_at(data: Path) -> Engine:
    data.mkdir(exist_ok=True)
    (data / "rcpkit.toml").write_text(POLICY)
    return open_engine(data)


async def hits(client: AsyncClient, **options: Any) -> list[str]:
    result = await client.call("retrieve", {"query": "honey bees hive", "k": 50,
                                            "unit": "document", **options})
    return [hit["id"] for hit in result["hits"]]


async def report(client: AsyncClient, *doc_ids: str) -> None:
    await client.call("feedback", {"signals": [{"hitId": doc_id, "poisonSuspected": True}
                                               for doc_id in doc_ids]})


async def add(client: AsyncClient, source: str, ids: list[str]) -> None:
    await client.call("index/add", {"documents": [
        {"id": doc_id, "text": BEE_TEXTS.get(doc_id, f"honey from the bees of {doc_id}"),
         "meta": {"source": source}} for doc_id in ids]})


def test_the_poison_table_of_rcpkit_toml(tmp_path: Path) -> None:
    (tmp_path / "rcpkit.toml").write_text(POLICY)
    config = EngineConfig.load(tmp_path / "rcpkit.toml")
    assert (config.poison.threshold, config.poison.source_threshold) == (1, 2)
    assert config.poison.source_thresholds == {"source:feed-trusted": 0}


async def test_a_source_is_quarantined_once_enough_documents_are_demoted(
        tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "data")
    try:
        async with await connect_memory(bind(engine)) as client:
            await add(client, "feed-bad", ["b1", "b2", "b3"])
            await add(client, "feed-good", ["g1", "g2"])
            assert sorted(await hits(client)) == ["b1", "b2", "b3", "g1", "g2"]
            # Repeated reports against one document demote it, not its whole source.
            for _ in range(3):
                await report(client, "b1")
            assert sorted(await hits(client)) == ["b1", "b2", "b3", "g1", "g2"]
            [bad] = [s for s in engine.poison_state().sources if s.label == "source:feed-bad"]
            assert (bad.reports, bad.demoted, bad.quarantined) == (3, 1, False)
            # A cursor opened now keeps the policy's state of its first page (§10).
            first = await client.call("retrieve", {"query": "honey bees hive", "k": 1,
                                                   "unit": "document"})
            await report(client, "b2")
            assert sorted(await hits(client)) == ["g1", "g2"]
            # Later documents of a quarantined source are left out too.
            await add(client, "feed-bad", ["b4"])
            assert "b4" not in await hits(client)
            replayed = []
            cursor = first.get("nextCursor")
            while cursor is not None:
                page = await client.call("retrieve", {"query": "honey bees hive", "k": 1,
                                                      "unit": "document", "cursor": cursor})
                replayed += [hit["id"] for hit in page["hits"]]
                cursor = page.get("nextCursor")
            assert sorted([first["hits"][0]["id"], *replayed]) == ["b1", "b2", "b3", "g1", "g2"]
    finally:
        engine.close()


async def test_quarantine_persists_is_shared_and_lifts_when_cleared(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = engine_at(data)
    other = open_engine(data)  # a second process on the same record
    try:
        async with await connect_memory(bind(engine)) as client, \
                await connect_memory(bind(other)) as peer:
            await add(client, "feed-bad", ["b1", "b2", "b3"])
            await add(client, "feed-trusted", ["t1", "t2"])
            await report(client, "b1", "b2", "t1", "t2")
            # A threshold of 0 for a source: its documents are demoted, it is never
            # quarantined; the other process sees the same.
            assert sorted(await hits(client)) == ["t1", "t2"]
            assert sorted(await hits(peer)) == ["t1", "t2"]
            state = {s.label: s for s in other.poison_state().sources}
            assert state["source:feed-bad"].quarantined
            assert not state["source:feed-trusted"].quarantined
            engine.clear_poison("source:feed-bad")
            assert {"b1", "b2", "b3"} <= set(await hits(peer))
            assert {"b1", "b2", "b3"} <= set(await hits(client))
            # Only reports after the clear count against it again.
            await report(peer, "b3")
            assert {"b1", "b2", "b3"} <= set(await hits(client))
            await report(peer, "b1")
            assert not {"b1", "b2", "b3"} & set(await hits(client))
    finally:
        engine.close()
        other.close()
    reopened = open_engine(data)
    try:
        state = {s.label: s for s in reopened.poison_state().sources}
        assert (state["source:feed-bad"].reports, state["source:feed-bad"].quarantined) == \
            (2, True)
    finally:
        reopened.close()


async def test_a_hit_id_naming_no_document_is_invalid(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "data")
    try:
        async with await connect_memory(bind(engine)) as client:
            for hit_id in ("", "#3"):
                with pytest.raises(InvalidParams) as raised:
                    await report(client, hit_id)
                assert raised.value.data == {"field": "signals[0].hitId"}
        with pytest.raises(Exception, match="source:<value>"):
            engine.clear_poison("feed-bad")
    finally:
        engine.close()
