"""An RCP engine whose ``retrieve`` reports progress, then waits until it is cancelled;
on cancellation it writes the request id to the file named by argv[1]. Serves stdio."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from rcpkit.server import Context, Server
from rcpkit.transports.stdio import serve_stdio

MARKER = Path(sys.argv[1])

server = Server(name="slow-engine", version="1.0", conformance="L0")
server.capability("retrieve", {"maxK": 10, "modes": ["sparse"]})
server.capability("streaming", {})


@server.method("retrieve")
async def retrieve(params: Any, ctx: Context) -> dict[str, Any]:
    ctx.progress(0.25, stage="recall", message="started")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        MARKER.write_text(str(ctx.request_id))
        raise
    return {"hits": []}


if __name__ == "__main__":
    sys.exit(serve_stdio(server))
