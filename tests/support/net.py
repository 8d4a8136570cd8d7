"""Loopback networking for tests: a free port, and waiting for a child process to listen."""

from __future__ import annotations

import socket
import subprocess
import time

__all__ = ["free_port", "wait_listening"]


def free_port() -> int:
    """A loopback TCP port nothing listens on right now (for a child process to bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, *, process: subprocess.Popen[bytes] | None = None,
                   timeout_s: float = 30.0) -> None:
    """Return once something accepts connections on ``port``.

    A child process gives no event to wait on, so this polls; it fails at once when
    ``process`` exits first, and after ``timeout_s`` otherwise.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before listening "
                               f"on port {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port} after {timeout_s} s") \
                    from None
            time.sleep(0.05)
