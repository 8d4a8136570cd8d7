"""The optional language-model provider: one small interface, one OpenAI-compatible client.

:class:`LanguageModel` is all the engine asks of a model: ``complete(system, prompt)`` → text.
:class:`ChatCompletions` speaks ``POST <url>/chat/completions`` — what llama.cpp's server,
Ollama, vLLM and hosted APIs all accept — with a per-call timeout and a bounded number of
retries on connection failures, 429 and 5xx (with a short exponential backoff). It never
downloads a model: it only talks to an endpoint the operator runs.

Configured by ``llm_url``, ``llm_model`` and ``llm_key`` (``rcpkit.toml``, or the
``RCPKIT_LLM_KEY`` environment variable for the key); without a URL and model there is no
model and nothing changes. It is only called when a request asks for generated text: a
``hyde`` passage (§7.8) and the ``global`` summary of ``graph`` (§7.9); every other path,
and these two when the model fails, stay extractive.
"""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

import httpx

from rcpkit.engine.config import EngineConfig

__all__ = ["KEY_ENV", "ChatCompletions", "LanguageModel", "LanguageModelError",
           "open_language_model"]

KEY_ENV = "RCPKIT_LLM_KEY"
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_BACKOFF_SECONDS = 0.2


class LanguageModelError(RuntimeError):
    """The model could not answer (unreachable, refused, timed out, malformed reply)."""


class LanguageModel(Protocol):
    def complete(self, system: str, prompt: str, *, max_tokens: int = 256) -> str:
        """The model's answer to ``prompt`` under the ``system`` instruction."""
        ...


class ChatCompletions:
    """An OpenAI-compatible chat-completions endpoint at ``url`` (the API base, e.g.
    ``http://127.0.0.1:8080/v1``)."""

    def __init__(self, url: str, model: str, *, key: str | None = None,
                 timeout: float = 30.0, retries: int = 2,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.model = model
        self.retries = retries
        self._endpoint = url.rstrip("/") + "/chat/completions"
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def close(self) -> None:
        self._http.close()

    def complete(self, system: str, prompt: str, *, max_tokens: int = 256) -> str:
        body = {"model": self.model, "temperature": 0, "max_tokens": max_tokens,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": prompt}]}
        failure = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(_BACKOFF_SECONDS * 2 ** (attempt - 1))
            try:
                response = self._http.post(self._endpoint, json=body)
            except httpx.HTTPError as exc:
                failure = type(exc).__name__
                continue
            if response.status_code in _RETRY_STATUSES:
                failure = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise LanguageModelError(f"the model endpoint answered HTTP "
                                         f"{response.status_code}")
            return _content(response)
        raise LanguageModelError(f"the model endpoint failed {self.retries + 1} times "
                                 f"(last: {failure})")


def _content(response: httpx.Response) -> str:
    try:
        reply: Any = response.json()
        text = reply["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LanguageModelError("the model endpoint's reply is no chat completion") from None
    if not isinstance(text, str) or not text.strip():
        raise LanguageModelError("the model returned no text")
    return text.strip()


def open_language_model(config: EngineConfig) -> ChatCompletions | None:
    """The configured model, or None when ``llm_url`` / ``llm_model`` are not both set."""
    if not (config.llm.url and config.llm.model):
        return None
    return ChatCompletions(config.llm.url, config.llm.model,
                           key=config.llm.key or os.environ.get(KEY_ENV) or None,
                           timeout=config.llm.timeout_seconds, retries=config.llm.retries)


def hypothetical_passage(model: LanguageModel, question: str, notes: str) -> str | None:
    """A generated ``hyde`` passage answering ``question`` (§7.8), grounded in ``notes`` (the
    extractive passage from the corpus); None when the model fails."""
    return _ask(model, "Write one short factual passage, in the style of an encyclopedia, "
                       "that answers the question. Use the notes when they help. Answer "
                       "with the passage only.",
                f"Question: {question}\n\nNotes:\n{notes}")


def community_summary(model: LanguageModel, question: str, summaries: list[str]) -> str | None:
    """An abstractive ``global`` summary (§7.9) of the communities' extractive summaries,
    focused on ``question``; None when the model fails."""
    listed = "\n".join(f"- {summary}" for summary in summaries)
    return _ask(model, "Summarise what these community summaries of a document collection "
                       "say about the question, in a few sentences. Use only what they say.",
                f"Question: {question}\n\nCommunity summaries:\n{listed}")


def _ask(model: LanguageModel, system: str, prompt: str) -> str | None:
    try:
        return model.complete(system, prompt)
    except LanguageModelError:
        return None
