"""The optional language-model provider against a fake OpenAI-compatible endpoint on
loopback (Starlette under uvicorn in a thread): the request it sends, retries on 5xx/429,
no retry on other refusals, timeouts, malformed replies, and the two engine paths that use
it (a generated ``hyde`` passage, §7.8, and the ``global`` summary, §7.9), which fall back
to their extractive text when the model fails, and the ``serve`` flags that configure it."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from graph_corpus import DOCUMENTS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rcpkit.binding import bind
from rcpkit.client import connect_memory
from rcpkit.engine.config import EmbedderConfig, EngineConfig, LlmConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.knowledge.llm import ChatCompletions, LanguageModelError, open_language_model
from rcpkit.server import Server
from support.net import free_port
from support.stdio import StdioPeer


@dataclass
class FakeModel:
    """What the endpoint answers: ``failures`` statuses first, then ``reply``."""

    reply: Any = "A generated passage."
    failures: list[int] = field(default_factory=list)
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    async def completions(self, request: Request) -> Response:
        self.requests.append(await request.json())
        self.headers.append(dict(request.headers))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures:
            return Response(status_code=self.failures.pop(0))
        if not isinstance(self.reply, str):
            return JSONResponse(self.reply)
        return JSONResponse({"choices": [{"message": {"role": "assistant",
                                                      "content": self.reply}}]})


@pytest.fixture
def fake() -> Iterator[tuple[FakeModel, str]]:
    model = FakeModel()
    app = Starlette(routes=[Route("/v1/chat/completions", model.completions,
                                  methods=["POST"])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the fake endpoint did not start"
        time.sleep(0.01)
    yield model, f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=5)


@pytest.mark.wire
def test_a_completion_sends_the_model_messages_and_key(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    client = ChatCompletions(url, "tiny", key="secret")
    assert client.complete("be brief", "hello", max_tokens=12) == "A generated passage."
    sent = model.requests[0]
    assert sent["model"] == "tiny" and sent["max_tokens"] == 12
    assert sent["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": "hello"}]
    assert model.headers[0]["authorization"] == "Bearer secret"


@pytest.mark.wire
def test_server_errors_and_429_are_retried(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.failures = [503, 429]
    assert ChatCompletions(url, "tiny", retries=2).complete("s", "p") == "A generated passage."
    assert len(model.requests) == 3
    model.failures = [500, 500, 500]
    with pytest.raises(LanguageModelError, match="3 times"):
        ChatCompletions(url, "tiny", retries=2).complete("s", "p")


@pytest.mark.wire
def test_a_refusal_is_not_retried(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.failures = [401]
    with pytest.raises(LanguageModelError, match="HTTP 401"):
        ChatCompletions(url, "tiny", retries=3).complete("s", "p")
    assert len(model.requests) == 1


@pytest.mark.wire
def test_a_slow_endpoint_times_out(fake: tuple[FakeModel, str]) -> None:
    model, url = fake
    model.delay = 2.0
    started = time.monotonic()
    with pytest.raises(LanguageModelError, match="ReadTimeout"):
        ChatCompletions(url, "tiny", timeout=0.2, retries=0).complete("s", "p")
    assert time.monotonic() - started < 1.5


@pytest.mark.wire
@pytest.mark.parametrize("reply", [{"choices": []}, {"choices": [{"message": {}}]},
                                   {"choices": [{"message": {"content": "  "}}]}])
def test_a_malformed_reply_is_an_error(fake: tuple[FakeModel, str], reply: Any) -> None:
    model, url = fake
    model.reply = reply
    with pytest.raises(LanguageModelError):
        ChatCompletions(url, "tiny", retries=0).complete("s", "p")


def test_no_model_without_url_and_model() -> None:
    assert open_language_model(EngineConfig()) is None
    assert open_language_model(EngineConfig(llm=LlmConfig(url="http://127.0.0.1:9/v1"))) is None


@pytest.mark.wire
def test_hyde_and_global_use_the_configured_model(fake: tuple[FakeModel, str],
                                                  tmp_path: Path) -> None:
    model, url = fake
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          llm=LlmConfig(url=url, model="tiny", retries=0))

    async def session(server: Server) -> None:
        async with await connect_memory(server) as client:
            await client.call("retrieve", {"query": "honey bees", "k": 3})
            assert model.requests == []  # nothing is generated unasked
            hyde = await client.call("query/transform", {"query": "honey bees",
                                                         "method": "hyde"})
            assert hyde["hypothetical"] == "A generated passage."
            assert "honey bees" in model.requests[-1]["messages"][1]["content"]
            ranked = await client.call("graph", {"op": "global", "query": "sourdough bread"})
            assert ranked["summary"] == "A generated passage."
            model.failures = [500, 500]
            fallback = await client.call("query/transform", {"query": "honey bees",
                                                             "method": "hyde"})
            assert fallback["hypothetical"] != "A generated passage."
            assert "bee" in fallback["hypothetical"].lower()
            extractive = await client.call("graph", {"op": "global",
                                                     "query": "sourdough bread"})
            assert extractive["summary"] == " ".join(
                c["summary"] for c in extractive["communities"])

    with Engine.open(config) as engine:
        engine.add(DOCUMENTS)
        asyncio.run(session(bind(engine)))


@pytest.mark.wire
def test_serve_flags_configure_the_model(fake: tuple[FakeModel, str], tmp_path: Path) -> None:
    model, url = fake
    argv = [sys.executable, "-c", "from rcpkit.cli import main; main()", "serve", "--stdio",
            "--data", str(tmp_path), "--embedder", "hashing", "--llm-url", url,
            "--llm-model", "served-model"]
    peer = StdioPeer(argv)
    try:
        caps = peer.initialize()["capabilities"]
        assert caps["graph"]["summaries"] == "abstractive"
        peer.call("index/add", {"documents": [{"id": d.id, "text": d.text}
                                              for d in DOCUMENTS]})
        reply = peer.call("graph", {"op": "global", "query": "sourdough bread"})
        assert reply["result"]["summary"] == "A generated passage."
        assert model.requests[-1]["model"] == "served-model"
    finally:
        peer.close()
