"""A stdio server whose ``retrieve`` answers hits without a ``score`` (§7.7 requires one),
and which says so on stderr: what the inspector must flag, not hide."""

from __future__ import annotations

import sys
from typing import Any

from rcpkit.server import Context, Server
from rcpkit.transports.stdio import serve_stdio

server = Server(name="sloppy", version="0", conformance="L0")
server.capability("retrieve", {"maxK": 10, "modes": ["sparse"]})


@server.method("retrieve")
def retrieve(params: Any, ctx: Context) -> dict[str, Any]:
    return {"hits": [{"id": "a", "text": "no score here"}]}


if __name__ == "__main__":
    print("sloppy: answering without scores", file=sys.stderr, flush=True)
    sys.exit(serve_stdio(server))
