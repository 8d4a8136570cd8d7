"""Serve an ASGI app with uvicorn on an ephemeral loopback port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

__all__ = ["LoopbackServer"]


class LoopbackServer:
    """``with LoopbackServer(app) as srv: httpx.post(srv.url + "/rcp/ping", ...)``."""

    def __init__(self, app: Any, *, graceful_timeout_s: float = 5.0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=graceful_timeout_s)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run,
                                        kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self._socket.close()
