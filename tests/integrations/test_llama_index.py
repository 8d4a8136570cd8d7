"""``rcpkit.integrations.llama_index`` against the real ``llama-index-core`` classes (no
LLM): our engine over stdio and in-process, the reference SDK's server, sync and async."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from bridge_support import REF_SERVER, rcpkit
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import (
    Document,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from rcpkit.client import AsyncClient, Client
from rcpkit.client import filters as f
from rcpkit.integrations.llama_index import (
    RcpRetriever,
    RcpRetrieverError,
    aindex_documents,
    index_documents,
    metadata_filter,
)

pytestmark = pytest.mark.timeout(120)


@pytest.mark.wire
def test_retrieve_returns_scored_nodes(sample_kb: Path) -> None:
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(sample_kb))) as client:
        retriever = RcpRetriever(client, k=3, mode="hybrid")
        assert isinstance(retriever, BaseRetriever)
        nodes = retriever.retrieve("why do bees swarm")
        spanish = RcpRetriever(client, k=5, mode="sparse",
                               filter=f.eq("lang", "es")).retrieve("compost")
        with pytest.raises(RcpRetrieverError) as refused:
            RcpRetriever(client, filter=f.eq("colour", "red")).retrieve("bees")
    assert len(nodes) == 3 and all(isinstance(node, NodeWithScore) for node in nodes)
    top = nodes[0]
    assert isinstance(top.node, TextNode)
    assert top.node.node_id == "swarming#0" and top.score == top.node.metadata["score"]
    assert top.node.text.startswith("# Why colonies swarm")
    assert top.node.metadata["trust"] == {"level": "trusted"}
    assert top.node.ref_doc_id == "swarming"
    assert top.node.relationships[NodeRelationship.SOURCE].node_id == "swarming"
    shown = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "trust" in shown and "citation" in shown and "score" not in shown
    assert top.node.get_content(metadata_mode=MetadataMode.EMBED) == top.node.text
    assert spanish and {node.node.metadata["meta"]["lang"] for node in spanish} == {"es"}
    assert isinstance(refused.value, RuntimeError)
    assert refused.value.code == -32602 and refused.value.data == {"field": "filter.colour"}


@pytest.mark.wire
def test_similarity_top_k_and_metadata_filters_map_to_retrieve(sample_kb: Path) -> None:
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(sample_kb))) as client:
        assert len(RcpRetriever(client, similarity_top_k=2).retrieve("bees")) == 2
        spanish = MetadataFilters(filters=[MetadataFilter(key="lang", value="es")])
        not_english = MetadataFilters(filters=[MetadataFilter(key="lang", value="en")],
                                      condition=FilterCondition.NOT)
        either = MetadataFilters(filters=[
            MetadataFilter(key="lang", value=["es"], operator=FilterOperator.IN),
            MetadataFilters(filters=[MetadataFilter(key="year", value=1900,
                                                    operator=FilterOperator.LT)])],
            condition=FilterCondition.OR)
        for filters in (spanish, not_english, either):
            nodes = RcpRetriever(client, k=5, mode="sparse", filters=filters).retrieve("compost")
            assert nodes and {n.node.metadata["meta"]["lang"] for n in nodes} == {"es"}
        recent = RcpRetriever(client, k=20, filters=MetadataFilters(filters=[
            MetadataFilter(key="year", value=2023, operator=FilterOperator.GTE)])
                              ).retrieve("clouds plants moon bees")
        assert recent and all(n.node.metadata["meta"]["year"] >= 2023 for n in recent)


def test_metadata_filters_become_section_8_trees() -> None:
    tagged = MetadataFilters(filters=[
        MetadataFilter(key="tag", value=["bees", "bread"], operator=FilterOperator.ANY),
        MetadataFilter(key="year", value=2020, operator=FilterOperator.GT)])
    assert metadata_filter(tagged) == {"and": [
        {"or": [{"field": "tag", "op": "contains", "value": "bees"},
                {"field": "tag", "op": "contains", "value": "bread"}]},
        {"field": "year", "op": "gt", "value": 2020}]}
    neither = MetadataFilters(filters=[MetadataFilter(key="lang", value="en"),
                                       MetadataFilter(key="lang", value="fr")],
                              condition=FilterCondition.NOT)
    assert metadata_filter(neither) == {"not": {"or": [
        {"field": "lang", "op": "eq", "value": "en"},
        {"field": "lang", "op": "eq", "value": "fr"}]}}


@pytest.mark.parametrize("operator", [FilterOperator.TEXT_MATCH,
                                      FilterOperator.TEXT_MATCH_INSENSITIVE,
                                      FilterOperator.IS_EMPTY])
def test_inexpressible_metadata_filters_and_doubled_settings_are_refused(
        writable_client: AsyncClient, operator: FilterOperator) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="title", value="bee",
                                                      operator=operator)])
    with pytest.raises(ValueError, match=f"{operator.value!r} on 'title'.*refused"):
        RcpRetriever(writable_client, filters=filters)
    with pytest.raises(ValueError, match="not both"):
        RcpRetriever(writable_client, k=2, similarity_top_k=3)
    with pytest.raises(ValueError, match="not both"):
        RcpRetriever(writable_client, filter=f.eq("lang", "en"), filters=MetadataFilters(
            filters=[MetadataFilter(key="lang", value="en")]))
    with pytest.raises(TypeError, match="top_k"):
        RcpRetriever(writable_client, top_k=2)  # type: ignore[call-arg]


async def test_aretrieve_and_indexing_helper(writable_client: AsyncClient) -> None:
    documents = [Document(id_="faq-1", text="Drain the water heater once a year.",
                          metadata={"topic": "plumbing"}),
                 TextNode(id_="faq-2", text="Bleed the radiators before winter.")]
    assert await aindex_documents(writable_client, documents) == ["faq-1", "faq-2"]
    retriever = RcpRetriever(writable_client, k=2, mode="sparse")
    nodes = await retriever.aretrieve("drain water heater")
    assert nodes[0].node.node_id == "faq-1#0"
    assert nodes[0].node.metadata["meta"] == {"topic": "plumbing"}
    with pytest.raises(TypeError, match="async API only"):
        retriever.retrieve("water heater")
    with pytest.raises(ValueError, match="k must be"):
        RcpRetriever(writable_client, k=0)


@pytest.mark.wire
def test_blocking_helper_and_the_reference_sdk_server(kb: Path) -> None:
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(kb))) as client:
        assert index_documents(client, [Document(id_="note", text="Gibbous moons.")],
                               chunk=True) == ["note"]
        assert RcpRetriever(client, k=1, mode="sparse").retrieve("gibbous")[0] \
            .node.ref_doc_id == "note"
    with Client.connect_stdio(REF_SERVER) as ref:
        nodes = RcpRetriever(ref, k=5).retrieve("paris")
    assert [node.node.node_id for node in nodes] == ["d1", "d3"]
    assert nodes[0].node.metadata["citation"]["uri"] == "demo://d1"
