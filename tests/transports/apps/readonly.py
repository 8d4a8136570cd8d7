"""A read-only keyword server that declares itself multi-process safe (for ``--workers``):
every worker builds the same index from the same documents, and no request changes it."""

from __future__ import annotations

import os
from typing import Any

from rcpkit.server import Context, Server
from rcpkit.server.example import SAMPLE_DOCUMENTS, KeywordIndex

__all__ = ["build"]


def build() -> Server:
    index = KeywordIndex(SAMPLE_DOCUMENTS)
    server = Server(name="readonly-keyword", version="1.0")
    server.capability("retrieve", {"maxK": 50, "modes": ["sparse"]})
    server.capability("x-test", {})
    server.multiprocess_safe = True

    @server.method("x-test/pid")
    def pid(params: Any, ctx: Context) -> dict[str, Any]:
        return {"pid": os.getpid()}

    @server.method("retrieve")
    def retrieve(params: Any, ctx: Context) -> dict[str, Any]:
        hits = index.search(str(params.query), params.k)
        return {"hits": [{"id": i, "score": s, "text": t} for i, s, t in hits]}

    return server
