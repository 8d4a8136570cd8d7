"""The HTTP tests run the same ASGI app under uvicorn and under rcpkit's lean server
(:mod:`rcpkit.transports.httpserver`), so the wire behaviour is the same on both."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rcpkit.transports.httpserver import HttpServer
from support.http import LoopbackServer

__all__ = ["LOOPBACKS", "LeanLoopback", "Loopback"]


class LeanLoopback:
    """``with LeanLoopback(app) as srv: ...`` — :class:`HttpServer` on an ephemeral loopback
    port in a background thread (the same interface as ``support.http.LoopbackServer``)."""

    def __init__(self, app: Any, *, graceful_timeout_s: float = 5.0,
                 keep_alive_s: float = 30.0, **limits: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(128)
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = HttpServer(app, graceful_timeout_s=graceful_timeout_s,
                                 keep_alive_s=keep_alive_s, **limits)
        self._thread = threading.Thread(target=self.server.run, args=(self._socket,),
                                        kwargs={"handle_signals": False}, daemon=True)

    def __enter__(self) -> LeanLoopback:
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self._thread.join(15)
        self._socket.close()


Loopback = Callable[..., Any]
LOOPBACKS: dict[str, Loopback] = {"uvicorn": LoopbackServer, "rcpkit": LeanLoopback}


@pytest.fixture(params=sorted(LOOPBACKS))
def loopback(request: pytest.FixtureRequest) -> Loopback:
    """The loopback server class to run the app under (each test runs under both)."""
    return LOOPBACKS[request.param]
