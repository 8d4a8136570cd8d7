"""Loopback helpers for the benchmarks that start servers (no engine imports: the protocol
benchmarks' drivers stay lean)."""

from __future__ import annotations

import socket
import time

__all__ = ["free_port", "wait_listening"]


def free_port() -> int:
    """A loopback port nothing listens on right now (for a server process to bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, timeout_s: float = 30.0) -> None:
    """Return once a server accepts connections on ``port`` (a child gives no event)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server listens on port {port}") from None
            time.sleep(0.02)
