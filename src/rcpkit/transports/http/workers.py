"""Serving the RCP app with the lean server: one process, or N pre-forked workers.

Scaling out (:func:`serve_http` ``workers=N``): N processes accept on one socket.
Only the ``stateless`` policy qualifies — its dispatcher keeps nothing between
requests, and ``notifications/cancel`` is a no-op there anyway — and only a server
that sets ``Server.multiprocess_safe``, because any state its handlers keep in
memory (an in-memory index, a cache of another process's writes) would silently
differ between workers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ...protocol.errors import UsageError
from ...server.framework import Server
from ...tracing import active
from .asgi import create_app
from .metrics import MULTIPROCESS_ENV, Metrics
from .server import HttpServer

__all__ = ["ServerSource", "serve_app", "serve_http"]

logger = logging.getLogger("rcpkit.server")

ServerSource = Server | Callable[[], Server]


def serve_http(server: ServerSource, host: str = "127.0.0.1", port: int = 8080, *,
               workers: int = 1, graceful_timeout_s: float = 10.0,
               limits: Mapping[str, Any] | None = None, metrics: bool = False,
               metrics_token: str | None = None, **app_options: Any) -> int:
    """Serve ``server`` over HTTP/1.1 with the lean server of :mod:`.server` until
    SIGINT/SIGTERM; in-flight requests then get ``graceful_timeout_s`` to finish.
    ``limits`` go to :class:`.server.HttpServer` (``max_connections``,
    ``max_header_bytes``, ``header_timeout_s``, …), ``app_options`` to :func:`create_app`.
    Returns the exit status.

    ``workers > 1`` runs that many processes accepting on one listening socket, for the
    ``stateless`` policy only (``token``/``single`` sessions live in one process). Each
    worker calls ``server`` — then a zero-argument factory — *after* the fork, so no
    model, thread or database handle is shared, and the server it builds must declare
    ``Server.multiprocess_safe``; otherwise nothing is served and the status is 2.

    ``metrics`` serves ``/metrics`` (:mod:`.metrics`), to scrapers bearing ``metrics_token``
    when given; with several workers their values are kept in a directory they share,
    removed when serving ends.
    """
    if workers < 1:
        raise UsageError("workers must be at least 1")
    if workers == 1:
        app = create_app(server if isinstance(server, Server) else server(),
                         metrics=Metrics(metrics_token) if metrics else None, **app_options)
        return serve_app(app, host, port, base=app_options.get("base", "/rcp"),
                         graceful_timeout_s=graceful_timeout_s, limits=limits)
    if app_options.get("sessions", "stateless") != "stateless":
        raise UsageError("several workers need the stateless session policy: token and "
                         "single sessions live in one process")
    if isinstance(server, Server):
        raise UsageError("several workers need a factory that builds the server after the "
                         "fork, not a Server built beforehand")
    listener = _listen(host, port)
    with _shared_metrics_directory(metrics):
        return _Workers(server, listener, workers, graceful_timeout_s, app_options,
                        dict(limits or {}), metrics, metrics_token).run()


def serve_app(app: Any, host: str = "127.0.0.1", port: int = 8080, *, base: str = "/rcp",
              graceful_timeout_s: float = 10.0, limits: Mapping[str, Any] | None = None) -> int:
    """Serve a ready ASGI ``app`` (RCP at ``base``) in this process, as :func:`serve_http`
    does with one worker."""
    listener = _listen(host, port)
    _announce(listener, base)
    HttpServer(app, graceful_timeout_s=graceful_timeout_s, **(limits or {})).run(listener)
    return 0


@contextlib.contextmanager
def _shared_metrics_directory(metrics: bool) -> Iterator[None]:
    """For workers' metrics: the directory they share (an operator's own, when set),
    named in the environment before any worker starts."""
    if not metrics or os.environ.get(MULTIPROCESS_ENV):
        yield
        return
    with tempfile.TemporaryDirectory(prefix="rcpkit-metrics-") as directory:
        os.environ[MULTIPROCESS_ENV] = directory
        try:
            yield
        finally:
            del os.environ[MULTIPROCESS_ENV]


def _announce(listener: socket.socket, base: str, workers: int = 1) -> None:
    """Say on stderr where requests go, with the port actually bound (``:0`` included)."""
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    processes = f" in {workers} worker processes" if workers > 1 else ""
    print(f"rcpkit: serving RCP/1 over HTTP at http://{shown}:{port}{base}{processes} "
          "(Ctrl-C stops)", file=sys.stderr, flush=True)


def _listen(host: str, port: int, *, reuse_port: bool = False, listen: bool = True,
            ) -> socket.socket:
    """A socket bound to ``host:port``; ``reuse_port`` joins the port's ``SO_REUSEPORT``
    group (each worker its own socket), ``listen=False`` only reserves the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    if listen:
        listener.listen(2048)
    return listener


_SUPERVISOR_POLL_S = 0.2


class _Workers:
    """Pre-fork supervisor: one worker first (it must build and declare itself safe), then
    the rest; a signal is passed on to every worker; when one worker ends, all do."""

    def __init__(self, build: Callable[[], Server], listener: socket.socket, count: int,
                 graceful_timeout_s: float, app_options: dict[str, Any],
                 limits: dict[str, Any], metrics: bool, metrics_token: str | None) -> None:
        self.build = build
        self.metrics = metrics
        self.metrics_token = metrics_token
        self.limits = limits
        self.listener = listener
        self.count = count
        self.graceful_timeout_s = graceful_timeout_s
        self.app_options = app_options
        self.pids: list[int] = []
        self.ended: dict[int, int] = {}
        """Exit codes of the workers reaped so far (negative: killed by that signal)."""

    def run(self) -> int:
        stopping: list[int] = []

        def forward(signum: int, _frame: Any) -> None:
            stopping.append(signum)
            self._signal_all(signum)

        previous = {signum: signal.signal(signum, forward)
                    for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self._spawn_first():
                # Said once the first worker serves: a refused server never claims to listen.
                _announce(self.listener, self.app_options.get("base", "/rcp"), self.count)
                while len(self.pids) < self.count and not stopping:
                    self.pids.append(self._fork(None))
                while not self._any_ended():  # only our own children are waited for
                    time.sleep(_SUPERVISOR_POLL_S)
                self._signal_all(signal.SIGTERM)
            return self._reap_all()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.listener.close()

    def _spawn_first(self) -> bool:
        """Fork one worker and wait until it serves (True) or gave up (False)."""
        ready_read, ready_write = os.pipe()
        self.pids.append(self._fork(ready_write))
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            return ready.read(1) == b"1"

    def _fork(self, ready_fd: int | None) -> int:
        pid = os.fork()
        if pid:
            return pid
        status = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            status = self._serve_worker(ready_fd)
        except BaseException:
            logger.exception("HTTP worker failure")
        finally:
            os._exit(status)

    def _serve_worker(self, ready_fd: int | None) -> int:
        try:
            server = self.build()
            if not server.multiprocess_safe:
                raise UsageError(f"server {server.name!r} does not declare itself multi-process "
                                 "safe (Server.multiprocess_safe); serve it with one worker")
            metrics = Metrics(self.metrics_token) if self.metrics else None
        except UsageError as exc:
            print(f"rcpkit serve: error: {exc}", file=sys.stderr, flush=True)
            return 2
        app = create_app(server, metrics=metrics, **self.app_options)
        if ready_fd is not None:
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        HttpServer(app, graceful_timeout_s=self.graceful_timeout_s, **self.limits).run(
            self.listener)
        tracing = active()
        if tracing is not None:  # a worker ends by os._exit: no exit hook sends its spans
            tracing.flush()
        return 0

    def _signal_all(self, signum: int) -> None:
        for pid in self.pids:
            if pid not in self.ended:  # a reaped pid may already belong to someone else
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    def _any_ended(self) -> bool:
        for pid in self.pids:
            if pid not in self.ended:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self.ended[pid] = os.waitstatus_to_exitcode(status)
        return bool(self.ended)

    def _reap_all(self) -> int:
        """Wait for every worker; the status is the worst one's (0 when all stopped cleanly)."""
        for pid in self.pids:
            if pid not in self.ended:
                self.ended[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        failures = [code if code > 0 else 1 for code in self.ended.values()
                    if code not in (0, -signal.SIGTERM, -signal.SIGINT)]
        return max(failures, default=0)
