"""An RCP engine that dies (exit status 1, no reply) inside its first ``retrieve``."""

from __future__ import annotations

import os
import sys
from typing import Any

from rcpkit.server import Context, Server
from rcpkit.transports.stdio import serve_stdio

server = Server(name="dying-engine", version="1.0", conformance="L0")
server.capability("retrieve", {"maxK": 10, "modes": ["sparse"]})


@server.method("retrieve")
def retrieve(params: Any, ctx: Context) -> dict[str, Any]:
    os._exit(1)


if __name__ == "__main__":
    sys.exit(serve_stdio(server))
