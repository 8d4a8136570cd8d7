"""A misspelt keyword option is refused before anything is sent: servers ignore params they
do not know (§4.6), so without this check ``retrieve(min_scroe=…)`` silently returned the
unfiltered hits. Vendor params still go through ``extra``."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from rcpkit.client import AsyncClient, Client, connect_stdio
from rcpkit.protocol.methods import PARAMS

# Every §7 method that takes keyword options, called with a misspelt one.
MISSPELT: list[tuple[str, Callable[[Any], Any], str | None]] = [
    ("retrieve", lambda c: c.retrieve("paris", k=2, min_scroe=0.5), "min_score"),
    ("retrieve", lambda c: c.retrieve("paris", candiate_k=4), "candidate_k"),
    ("embed", lambda c: c.embed(["x"], encodnig="json"), "encoding"),
    ("embed_sparse", lambda c: c.embed_sparse(["x"], stirct=True), None),
    ("embed_multi", lambda c: c.embed_multi(["x"], encodign="json"), "encoding"),
    ("rerank", lambda c: c.rerank("q", ["a"], modle="m"), "model"),
    ("transform", lambda c: c.transform("q", "rewrite", nn=2), None),
    ("graph", lambda c: c.graph("neighbors", seedids=["a"]), "seed_ids"),
    ("index_add", lambda c: c.index_add([{"text": "x"}], chunks=True), None),
    ("index_delete", lambda c: c.index_delete(["x"], id="x"), None),
    ("feedback", lambda c: c.feedback([], sesion_id="s"), None),
    ("memory_build", lambda c: c.memory_build(None, memory="m"), None),
    ("memory_recall", lambda c: c.memory_recall("q", memoryid="m"), None),
]


@pytest.mark.parametrize(("method", "call", "suggestion"), MISSPELT,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(MISSPELT)])
def test_blocking_client_refuses_a_misspelt_option(ref_stdio: list[str], method: str,
                                                   call: Callable[[Any], Any],
                                                   suggestion: str | None) -> None:
    with Client.connect_stdio(ref_stdio) as client:
        with pytest.raises(TypeError, match=rf"^{method}\(\) got an unexpected keyword") as caught:
            call(client)
        if suggestion is not None:
            assert f"did you mean {suggestion!r}" in str(caught.value)
        assert "extra=" in str(caught.value)
        # The connection is untouched: the next call works.
        assert [hit.id for hit in client.retrieve("paris", k=2).hits] == ["d1", "d3"]


async def test_async_client_and_batch_refuse_a_misspelt_option(ref_stdio: list[str]) -> None:
    client: AsyncClient
    async with await connect_stdio(ref_stdio) as client:
        with pytest.raises(TypeError, match="min_scroe"):
            await client.retrieve("paris", min_scroe=0.5)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="min_scroe"):
            client.retrieve_stream("paris", min_scroe=0.5)  # type: ignore[call-arg]
        async with client.batch() as batch:
            with pytest.raises(TypeError, match="min_scroe"):
                batch.retrieve("paris", min_scroe=0.5)  # type: ignore[call-arg]
            good = batch.retrieve("paris", k=1)
            assert len(batch) == 1  # the refused call queued nothing
        assert [hit.id for hit in good.result().hits] == ["d1"]


def test_spelt_options_and_extra_params_still_go(ref_stdio: list[str]) -> None:
    with Client.connect_stdio(ref_stdio) as client:
        result = client.retrieve("paris", k=2, min_score=0.5, extra={"x-acme/boost": 1})
        assert [hit.id for hit in result.hits] == ["d1", "d3"]


@pytest.mark.parametrize(("name", "method"), [
    ("embed", "embed"), ("embed_multi", "embed/multi"), ("rerank", "rerank"),
    ("retrieve", "retrieve"), ("transform", "query/transform"), ("graph", "graph"),
    ("index_add", "index/add"), ("index_delete", "index/delete"), ("feedback", "feedback"),
    ("memory_build", "memory/build"), ("memory_recall", "memory/recall")])
def test_every_param_of_a_method_is_a_keyword_it_accepts(name: str, method: str) -> None:
    """The check refuses what the options type does not name, so the type must name every
    §7 param the method has (graph's indexVersion was missing)."""
    function = getattr(AsyncClient, name)
    options = typing.get_args(typing.get_type_hints(function)["options"])[0]
    accepted = options.__required_keys__ | options.__optional_keys__ | set(
        inspect.signature(function).parameters)
    assert {field.name for field in msgspec.structs.fields(PARAMS[method])} <= accepted
