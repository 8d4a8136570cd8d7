"""``rcpkit.integrations.haystack`` against the real ``haystack-ai`` classes (no LLM): our
engine over stdio, in a Haystack pipeline, sync and async; the same refusals as the
LangChain and LlamaIndex retrievers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Haystack reports pipeline runs to its telemetry service unless told not to, at import:
# tests reach nothing but loopback.
os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"
pytest.importorskip("haystack")

from bridge_support import rcpkit
from haystack import Document, Pipeline

from rcpkit.client import AsyncClient, Client
from rcpkit.integrations.haystack import RcpRetriever, RcpRetrieverError, haystack_filter

pytestmark = pytest.mark.timeout(120)

SPANISH = {"field": "meta.lang", "operator": "==", "value": "es"}


@pytest.fixture(scope="module")
def engine_client(sample_kb: Path) -> Iterator[Client]:
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(sample_kb))) as client:
        yield client


@pytest.mark.wire
def test_run_returns_documents_with_hit_metadata(engine_client: Client) -> None:
    documents = RcpRetriever(engine_client, top_k=3, mode="hybrid").run(
        query="why do bees swarm")["documents"]
    assert len(documents) == 3 and all(isinstance(doc, Document) for doc in documents)
    top = documents[0]
    assert top.id == "swarming#0" == top.meta["id"]
    assert top.content is not None and top.content.startswith("# Why colonies swarm")
    assert top.score == top.meta["score"]
    assert top.meta["trust"] == {"level": "trusted"}
    assert top.meta["meta"]["tag"] == "bees"


@pytest.mark.wire
def test_in_a_pipeline_with_top_k_and_filters(engine_client: Client) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", RcpRetriever(engine_client, mode="sparse"))
    default = pipeline.run({"retriever": {"query": "compost"}})["retriever"]["documents"]
    two = pipeline.run({"retriever": {"query": "compost", "top_k": 2}})["retriever"]["documents"]
    assert len(default) == 4 and len(two) == 2
    for filters in (SPANISH,
                    {"operator": "AND", "conditions": [
                        SPANISH, {"field": "meta.year", "operator": ">=", "value": 2000}]},
                    {"operator": "NOT", "conditions": [
                        {"field": "meta.lang", "operator": "in", "value": ["en", "fr"]}]}):
        found = pipeline.run({"retriever": {"query": "compost", "top_k": 5,
                                            "filters": filters}})["retriever"]["documents"]
        assert found and {doc.meta["meta"]["lang"] for doc in found} == {"es"}, filters


@pytest.mark.wire
def test_filter_policy_replace_and_merge(engine_client: Client) -> None:
    recent = {"field": "meta.year", "operator": ">=", "value": 2023}
    merged = RcpRetriever(engine_client, top_k=20, filters=recent, filter_policy="merge")
    for doc in merged.run(query="compost bees moon", filters=SPANISH)["documents"]:
        assert doc.meta["meta"]["lang"] == "es" and doc.meta["meta"]["year"] >= 2023
    replaced = RcpRetriever(engine_client, top_k=5, mode="sparse", filters=recent)
    found = replaced.run(query="compost", filters=SPANISH)["documents"]
    assert found and {doc.meta["meta"]["lang"] for doc in found} == {"es"}


def test_haystack_filters_become_section_8_trees() -> None:
    assert haystack_filter({"operator": "OR", "conditions": [
        SPANISH, {"field": "meta.tag", "operator": "not in", "value": ["bees"]}]}) == {
        "or": [{"field": "lang", "op": "eq", "value": "es"},
               {"field": "tag", "op": "nin", "value": ["bees"]}]}


@pytest.mark.wire
@pytest.mark.parametrize(("settings", "message"), [
    ({"filters": {"field": "content", "operator": "==", "value": "x"}}, "'content'.*refused"),
    ({"filters": {"field": "meta.title", "operator": "like", "value": "x"}}, "'like'.*refused"),
    ({"filters": {"operator": "XOR", "conditions": [SPANISH]}}, "AND, OR or NOT"),
    ({"k": 2}, "k"),
    ({"options": {"min_scroe": 0.5}}, "min_scroe"),
])
def test_unknown_or_inexpressible_settings_are_refused(engine_client: Client,
                                                       settings: dict[str, Any],
                                                       message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        RcpRetriever(engine_client, **settings)


@pytest.mark.wire
def test_pipeline_refuses_an_unknown_input_and_engine_errors_surface(
        engine_client: Client) -> None:
    pipeline = Pipeline()
    pipeline.add_component("retriever", RcpRetriever(engine_client))
    with pytest.raises(ValueError, match="top_kk"):
        pipeline.run({"retriever": {"query": "bees", "top_kk": 2}})
    unadvertised = {"field": "meta.colour", "operator": "==", "value": "red"}
    with pytest.raises(RcpRetrieverError) as refused:
        RcpRetriever(engine_client).run(query="bees", filters=unadvertised)
    assert refused.value.code == -32602 and refused.value.data == {"field": "filter.colour"}


@pytest.mark.wire
async def test_run_async_on_either_client(engine_client: Client,
                                          writable_client: AsyncClient) -> None:
    blocking = await RcpRetriever(engine_client, top_k=2).run_async(query="sourdough starter")
    native = await RcpRetriever(writable_client, top_k=2).run_async(query="sourdough starter")
    assert [doc.id for doc in blocking["documents"]] == [doc.id for doc in native["documents"]]
    with pytest.raises(TypeError, match="async API only"):
        RcpRetriever(writable_client).run(query="sourdough")
