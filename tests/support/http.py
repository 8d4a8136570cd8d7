"""Serve an ASGI app on an ephemeral loopback port in a background thread, under uvicorn or
under rcpkit's lean HTTP/1.1 server (:mod:`rcpkit.transports.http.server`)."""

from __future__ import annotations

import socket
import threading
from typing import Any, Literal, get_args

import uvicorn

from rcpkit.transports.http.server import HttpServer

from .waiting import until

__all__ = ["LOOPBACK_KINDS", "LoopbackServer", "ServerKind"]

ServerKind = Literal["rcpkit", "uvicorn"]
LOOPBACK_KINDS: tuple[ServerKind, ...] = get_args(ServerKind)


class LoopbackServer:
    """``with LoopbackServer(app) as srv: httpx.post(srv.url + "/rcp/ping", ...)``.

    ``kind`` picks the HTTP server; ``keep_alive_s`` and ``limits`` (more
    :class:`HttpServer` options) apply to rcpkit's. ``server`` is the running server object
    (``uvicorn.Server`` or :class:`HttpServer`).
    """

    def __init__(self, app: Any, *, kind: ServerKind = "uvicorn",
                 graceful_timeout_s: float = 5.0, keep_alive_s: float = 30.0,
                 **limits: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.kind = kind
        self.server: Any
        if kind == "uvicorn":
            if limits:
                raise TypeError(f"options for rcpkit's server only: {sorted(limits)}")
            config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                    timeout_graceful_shutdown=graceful_timeout_s)
            self.server = uvicorn.Server(config)
            self._thread = threading.Thread(target=self.server.run,
                                            kwargs={"sockets": [self._socket]}, daemon=True)
        else:
            self._socket.listen(128)
            self.server = HttpServer(app, graceful_timeout_s=graceful_timeout_s,
                                     keep_alive_s=keep_alive_s, **limits)
            self._thread = threading.Thread(target=self.server.run, args=(self._socket,),
                                            kwargs={"handle_signals": False}, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        # neither server signals its start otherwise
        until(lambda: self.server.started or not self._thread.is_alive(), 15,
              f"the {self.kind} server starts")
        if not self.server.started:
            raise RuntimeError(f"the {self.kind} server did not start")
        return self

    def in_flight(self) -> int:
        """The requests the server is handling now (read from its own task set)."""
        tasks = self.server.server_state.tasks if self.kind == "uvicorn" else self.server.tasks
        return len(tasks)

    def wait_in_flight(self, count: int = 1, timeout_s: float = 15.0) -> None:
        """Return once at least ``count`` requests are being handled."""
        until(lambda: self.in_flight() >= count, timeout_s,
              f"{count} request(s) reach the {self.kind} server")

    def __exit__(self, *exc: object) -> None:
        if self.kind == "uvicorn":
            self.server.should_exit = True
        else:
            self.server.stop()
        self._thread.join(15)
        self._socket.close()
