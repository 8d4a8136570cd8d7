"""``rcpkit.integrations.langchain`` against the real ``langchain-core`` classes (no LLM):
our engine over stdio and in-process, the reference SDK's server, sync and async."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")

from bridge_support import REF_SERVER, rcpkit
from langchain_core.documents import Document
from langchain_core.exceptions import LangChainException
from langchain_core.retrievers import BaseRetriever

from rcpkit.client import AsyncClient, Client
from rcpkit.client import filters as f
from rcpkit.integrations.langchain import (
    RcpRetriever,
    RcpRetrieverError,
    aindex_documents,
    index_documents,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def engine_client(sample_kb: Path) -> Iterator[Client]:
    """``rcpkit serve --stdio`` on the sample notes, through the blocking client."""
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(sample_kb))) as client:
        yield client


@pytest.mark.wire
def test_invoke_returns_documents_with_hit_metadata(engine_client: Client) -> None:
    retriever = RcpRetriever(client=engine_client, k=3, mode="hybrid")
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("why do bees swarm")
    assert len(docs) == 3 and all(isinstance(doc, Document) for doc in docs)
    top = docs[0]
    assert top.id == "swarming#0" == top.metadata["id"]
    assert top.page_content.startswith("# Why colonies swarm")
    assert top.metadata["citation"] == {"source": "rcpkit-sample/swarming.md", "start": 0,
                                        "end": len(top.page_content),
                                        "title": "Why colonies swarm"}
    assert top.metadata["trust"] == {"level": "trusted"}
    assert top.metadata["meta"]["tag"] == "bees"
    scores = [doc.metadata["score"] for doc in docs]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.wire
def test_options_pass_through_and_per_call_overrides(engine_client: Client) -> None:
    spanish = RcpRetriever(client=engine_client, k=5, mode="sparse",
                           filter=f.eq("lang", "es"))
    docs = spanish.invoke("compost")
    assert docs and {doc.metadata["meta"]["lang"] for doc in docs} == {"es"}
    one = RcpRetriever(client=engine_client, k=5).invoke("compost", k=1, mode="dense")
    assert len(one) == 1
    whole = RcpRetriever(client=engine_client, options={"unit": "document"}).invoke("moon")
    assert all("#" not in doc.id for doc in whole)
    with pytest.raises(TypeError, match="not a retrieve option"):
        RcpRetriever(client=engine_client).invoke("moon", colour="red")


@pytest.mark.wire
def test_search_kwargs_map_to_retrieve_options_and_filters(engine_client: Client) -> None:
    assert len(RcpRetriever(client=engine_client, search_kwargs={"k": 2}).invoke("bees")) == 2
    for spanish_filter in ({"lang": "es"}, {"lang": {"$in": ["es"]}},
                           {"$and": [{"lang": "es"}, {"lang": {"$ne": "en"}}]},
                           {"$not": {"lang": {"$ne": "es"}}}):
        docs = RcpRetriever(client=engine_client, mode="sparse",
                            search_kwargs={"k": 5, "filter": spanish_filter}).invoke("compost")
        assert docs and {doc.metadata["meta"]["lang"] for doc in docs} == {"es"}, spanish_filter
    everything = RcpRetriever(client=engine_client, k=5, mode="sparse").invoke("compost")
    strict = RcpRetriever(client=engine_client, mode="sparse", search_kwargs={
        "k": 5, "score_threshold": everything[1].metadata["score"]}).invoke("compost")
    assert [doc.id for doc in strict] == [doc.id for doc in everything[:len(strict)]]
    assert len(strict) < len(everything)
    diverse = RcpRetriever(client=engine_client, search_kwargs={
        "k": 3, "fetch_k": 10, "lambda_mult": 0.3}).invoke("bees")
    assert len(diverse) == 3


@pytest.mark.wire
@pytest.mark.parametrize(("settings", "message"), [
    ({"top_k": 2}, "top_k"),
    ({"search_kwargs": {"top_k": 2}}, "not top_k"),
    ({"k": 3, "search_kwargs": {"k": 2}}, "k is given both"),
    ({"search_kwargs": {"filter": {"title": {"$regex": "bee"}}}}, "'\\$regex'.*refused"),
    ({"filter": {"$text": "bee"}}, "'\\$text'.*refused"),
])
def test_unknown_or_inexpressible_settings_are_refused(engine_client: Client,
                                                       settings: dict[str, object],
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RcpRetriever(client=engine_client, **settings)


@pytest.mark.wire
def test_errors_are_langchain_exceptions(engine_client: Client) -> None:
    unknown_field = RcpRetriever(client=engine_client, filter=f.eq("colour", "red"))
    with pytest.raises(RcpRetrieverError) as refused:
        unknown_field.invoke("bees")
    assert isinstance(refused.value, LangChainException)
    assert refused.value.code == -32602 and refused.value.data == {"field": "filter.colour"}
    assert refused.value.is_invalid_request
    with pytest.raises(RcpRetrieverError) as mode:
        RcpRetriever(client=engine_client, mode="telepathy").invoke("bees")
    assert mode.value.code == -32005
    with pytest.raises(TypeError, match="rcpkit Client"):
        RcpRetriever(client="not a client")


@pytest.mark.wire
async def test_ainvoke_on_either_client(engine_client: Client,
                                        writable_client: AsyncClient) -> None:
    blocking = await RcpRetriever(client=engine_client, k=2).ainvoke("sourdough starter")
    native = await RcpRetriever(client=writable_client, k=2).ainvoke("sourdough starter")
    assert [doc.id for doc in blocking] == [doc.id for doc in native]
    with pytest.raises(TypeError, match="async API only"):
        RcpRetriever(client=writable_client).invoke("sourdough")


async def test_indexing_helper_upserts_langchain_documents(
        writable_client: AsyncClient) -> None:
    docs = [Document(id="kb-1", page_content="Rotate the signing keys every ninety days.",
                     metadata={"source": "runbook", "team": "security"}),
            Document(id="kb-2", page_content="Renew certificates before they expire.",
                     metadata={"source": "runbook"})]
    assert await aindex_documents(writable_client, docs, batch_size=1) == ["kb-1", "kb-2"]
    edited = Document(id="kb-1", page_content="Rotate the signing keys every thirty days.",
                      metadata={"source": "runbook", "team": "security"})
    assert await aindex_documents(writable_client, [edited]) == ["kb-1"]
    retriever = RcpRetriever(client=writable_client, k=5, mode="sparse")
    found = await retriever.ainvoke("rotate signing keys")
    rotated = [doc for doc in found if doc.id.startswith("kb-1")]
    assert len(rotated) == 1 and "thirty" in rotated[0].page_content  # replaced, not copied
    assert rotated[0].metadata["meta"]["team"] == "security"
    assert rotated[0].metadata["trust"] == {"level": "untrusted"}  # no trust given (§15.2)


@pytest.mark.wire
def test_blocking_indexing_helper_and_the_reference_sdk_server(kb: Path) -> None:
    with Client.connect_stdio(rcpkit("serve", "--stdio", "--data", str(kb))) as client:
        ids = index_documents(client, [Document(page_content="Waxing gibbous moons rise "
                                                             "in the afternoon.")])
        assert len(ids) == 1  # the engine minted an id
        assert RcpRetriever(client=client, k=1, mode="sparse").invoke("gibbous")[0] \
            .metadata["chunk"]["docId"] == ids[0]
    with Client.connect_stdio(REF_SERVER) as ref:
        docs = RcpRetriever(client=ref, k=5).invoke("paris")
        assert [doc.id for doc in docs] == ["d1", "d3"]
        assert docs[0].metadata["citation"] == {"source": "demo", "uri": "demo://d1"}
        with pytest.raises(RcpRetrieverError) as unwritable:
            index_documents(ref, [Document(page_content="x")])
        assert unwritable.value.is_invalid_request
