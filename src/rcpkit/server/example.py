"""A complete, small RCP server: an in-memory keyword retriever (conformance L0, §14.1).

Run it with ``rcpkit serve --stdio --app rcpkit.server.example:server``. It
advertises only what it does: ``retrieve`` in ``sparse`` mode (term-overlap
scoring, no dense vectors, no filters or citations, hence L0 and not L1),
``index`` (writable, in memory), ``streaming`` progress and ``log``.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from typing import Any

from ..protocol.content import plain_text
from ..protocol.types import IndexAddParams, IndexDeleteParams, RetrieveParams
from .context import Context
from .framework import Server

__all__ = ["KeywordIndex", "build_server", "server"]

_WORD = re.compile(r"\w+")

SAMPLE_DOCUMENTS = {
    "rcp": "RCP is a JSON-RPC protocol for retrieval engines.",
    "stdio": "Over stdio each message is one line of JSON.",
    "http": "Over HTTP each request is a POST to the base path plus the method name.",
    "bm25": "BM25 ranks documents by term frequency and inverse document frequency.",
}


def _terms(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class KeywordIndex:
    """Documents kept in memory, scored by how often they contain the query's terms."""

    def __init__(self, documents: dict[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}
        self._terms: dict[str, Counter[str]] = {}
        for doc_id, text in (documents or {}).items():
            self.add(doc_id, text)

    def add(self, doc_id: str, text: str) -> None:
        with self._lock:
            self._texts[doc_id] = text
            self._terms[doc_id] = Counter(_terms(text))

    def delete(self, doc_id: str) -> bool:
        with self._lock:
            self._terms.pop(doc_id, None)
            return self._texts.pop(doc_id, None) is not None

    def search(self, query: str, k: int) -> list[tuple[str, float, str]]:
        """The ``k`` best ``(id, score, text)``, best first; documents sharing no term
        are left out."""
        wanted = set(_terms(query))
        with self._lock:
            scored = [(doc_id, float(sum(counts[t] for t in wanted)), self._texts[doc_id])
                      for doc_id, counts in self._terms.items()]
        scored = [hit for hit in scored if hit[1] > 0]
        scored.sort(key=lambda hit: (-hit[1], hit[0]))
        return scored[:k]


def build_server(documents: dict[str, str] | None = None, *, max_k: int = 50) -> Server:
    """A keyword-retrieval server over ``documents`` (default: a few sample sentences)."""
    index = KeywordIndex(SAMPLE_DOCUMENTS if documents is None else documents)
    app = Server(name="rcpkit-keyword-example", version="1.0", conformance="L0")
    app.capability("retrieve", {"maxK": max_k, "modes": ["sparse"], "defaultMode": "sparse",
                                "scoreScale": "unbounded"})
    app.capability("index", {"writable": True})
    app.capability("streaming", {})
    app.capability("log", {"levels": ["debug", "info"]})

    # A search of this small in-memory index takes microseconds, so it runs on the event
    # loop (``async def``); a synchronous handler goes to a worker thread instead, which is
    # right for real work (it never stalls the loop) but costs more than this search does.
    @app.method("retrieve")
    async def retrieve(params: RetrieveParams, ctx: Context) -> dict[str, Any]:
        query = plain_text(params.query, "query")
        ctx.progress(0.0, stage="recall")
        hits = index.search(query, min(params.k, max_k))
        ctx.log("debug", f"{len(hits)} hits", {"k": params.k})
        ctx.progress(1.0, stage="recall", partial={"hits": []})
        return {"hits": [{"id": doc_id, "score": score, "text": text}
                         for doc_id, score, text in hits]}

    @app.method("index/add")
    def index_add(params: IndexAddParams, ctx: Context) -> dict[str, Any]:
        ids = [document.id or uuid.uuid4().hex for document in params.documents]
        for doc_id, document in zip(ids, params.documents, strict=True):
            index.add(doc_id, document.text)
        return {"ids": ids}

    @app.method("index/delete")
    def index_delete(params: IndexDeleteParams, ctx: Context) -> dict[str, Any]:
        return {"deleted": sum(index.delete(doc_id) for doc_id in params.ids)}

    return app


server = build_server()
"""The default example instance (used by ``--app rcpkit.server.example:server``)."""
