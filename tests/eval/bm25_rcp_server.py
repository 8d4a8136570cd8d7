"""An RCP engine we did not write: the reference SDK (``rcp``) serving TinyBm25.

Usage: ``python bm25_rcp_server.py`` (stdio) or ``python bm25_rcp_server.py --http PORT``.
Advertises ``retrieve.deterministic``/``snapshots`` (indexVersion = ``v<adds>``; an older
pinned version fails with -32010 as §7.7.1 requires) and a writable ``index``; only
``mode: "sparse"`` is supported, anything else is -32005.
"""

from __future__ import annotations

import sys
from typing import Any

import rcp
from eval_bm25 import TinyBm25

index = TinyBm25()
generation = 0
server = rcp.Server()
server.set_info("tiny-bm25-reference", "1.0")
server.advertise(rcp.Capability.Retrieve, {"maxK": 200, "modes": ["sparse"],
                                           "deterministic": True, "snapshots": True})
server.advertise(rcp.Capability.Index, {"writable": True})


@server.on("index/add")
def add(params: dict[str, Any]) -> dict[str, Any]:
    global generation
    ids = []
    for document in params["documents"]:
        index.upsert(str(document["id"]), document["text"], document.get("meta"))
        ids.append(str(document["id"]))
    generation += 1
    return {"ids": ids}


@server.on("retrieve")
def retrieve(params: dict[str, Any]) -> dict[str, Any]:
    if params.get("mode", "sparse") != "sparse":
        raise rcp.RcpError(rcp.Errc.OPTION_UNSUPPORTED, "unsupported mode",
                           {"option": "mode"})
    current = f"v{generation}"
    if params.get("indexVersion", current) != current:
        raise rcp.RcpError(rcp.Errc.BACKEND_UNAVAILABLE, "snapshot gone")
    hits = [{"id": doc_id, "score": score}
            for doc_id, score in index.search(params["query"], params.get("k", 10))]
    return {"hits": hits, "indexVersion": current}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.serve_http(int(sys.argv[2]))
    else:
        server.serve_stdio()
