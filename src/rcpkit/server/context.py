"""What a handler sees besides its params: the per-request :class:`Context` (§9, §13.1, §17.1).

A :class:`Context` is safe to use from the worker thread that runs a
synchronous handler: frames it produces are handed to the event loop with
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol import messages
from ..protocol.errors import Cancelled, Timeout
from ..protocol.filters import FilterNode
from ..protocol.lifecycle import LOG_LEVELS, Session
from ..protocol.methods import LOG, PROGRESS
from ..tracing import RequestTrace

__all__ = ["Context", "Notify", "ServerSession"]

Notify = Callable[[bytes], None]
"""Receives one encoded server→client notification frame (runs on the event loop)."""


@dataclass
class ServerSession:
    """One client session: the §13 lifecycle state plus free per-session state for handlers."""

    protocol: Session = field(default_factory=Session)
    data: dict[str, Any] = field(default_factory=dict)
    """Handlers may keep anything here (e.g. agentic ``sessionId`` state, §7.7.3)."""
    token: str | None = None
    """The HTTP ``RCP-Session`` token in ``token`` mode (§5.2), else None."""
    last_used: float = field(default_factory=time.monotonic)
    caller: str = field(default_factory=lambda: secrets.token_hex(8))
    """Who this session's requests come from, unique per session: what caller-scoped state
    (``sessionId`` dedup, cursors, §7.7.3, §10) is keyed by, unless the transport names the
    caller of each request (:attr:`Context.caller`)."""


class Context:
    """Per-request handle given to every handler alongside its typed params."""

    __slots__ = ("_cancel", "_log_level", "_loop", "_loop_thread", "_notify", "_progress_token",
                 "caller", "deadline", "filter", "meta", "method", "notes", "request_id",
                 "session", "trace")

    def __init__(self, *, request_id: Any, method: str, meta: Mapping[str, Any],
                 session: ServerSession, notify: Notify | None, streaming: bool,
                 deadline: float | None, notes: list[str] | None = None,
                 filter: FilterNode | None = None, caller: str | None = None,
                 trace: RequestTrace | None = None) -> None:
        self.request_id = request_id
        self.trace = trace
        """The request's span when tracing is on (:mod:`rcpkit.tracing`), else None: a
        handler adds attributes to it, :meth:`Server.stage_done` its stages."""
        self.caller = caller if caller is not None else session.caller
        """Whose request this is: the authenticated principal of a stateless HTTP request,
        else the session's :attr:`ServerSession.caller`. Per-caller state is keyed by it, so
        two callers never see each other's (§15.6)."""
        self.method = method
        self.meta = meta
        """The request's ``params._meta`` (§4.4); empty when absent."""
        self.session = session
        self.deadline = deadline
        """Absolute ``time.monotonic()`` instant after which the request fails with -32014."""
        self.notes = notes or []
        """What a ``strict: false`` request asked for but will not get (for ``usage.notes``)."""
        self.filter = filter
        """The request's §8 filter, validated and normalised (None without a filter)."""
        self._cancel = threading.Event()
        self._notify = notify
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        token = meta.get("progressToken")
        valid_token = isinstance(token, str) or (isinstance(token, int)
                                                 and not isinstance(token, bool))
        # §9: progress only for a request carrying a token, and only if `streaming` is advertised.
        self._progress_token = token if streaming and valid_token else None
        level = meta.get("logLevel")
        self._log_level = level if level in LOG_LEVELS else None

    # ── cancellation and deadline (§7.14, §13.1) ────────────────────────────
    @property
    def cancelled(self) -> bool:
        """True once the client sent ``notifications/cancel`` for this request."""
        return self._cancel.is_set()

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` (-32006) if the client cancelled this request."""
        if self._cancel.is_set():
            raise Cancelled()

    def check_stop(self) -> None:
        """Raise :class:`Cancelled` (-32006) once cancelled, :class:`Timeout` (-32014) once
        past the deadline: what long stages call between batches (:mod:`rcpkit.interrupts`)."""
        self.check_cancelled()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise Timeout()

    def cancel(self) -> None:
        """Mark the request cancelled (the dispatcher calls this on ``notifications/cancel``)."""
        self._cancel.set()

    @property
    def remaining_ms(self) -> float | None:
        """Milliseconds left before the deadline (None when the request has none)."""
        if self.deadline is None:
            return None
        return max(0.0, (self.deadline - time.monotonic()) * 1000.0)

    # ── server → client notifications (§9, §17.1) ───────────────────────────
    @property
    def reports_progress(self) -> bool:
        """Whether :meth:`progress` sends anything: the request opted in (§9)."""
        return self._progress_token is not None and self._notify is not None

    def progress(self, progress: float, stage: str | None = None, message: str | None = None,
                 partial: Mapping[str, Any] | None = None) -> None:
        """Send ``notifications/progress``; a no-op unless the request opted in (§9)."""
        if self._progress_token is None or self._notify is None:
            return
        params: dict[str, Any] = {"progressToken": self._progress_token,
                                  "progress": min(1.0, max(0.0, float(progress)))}
        if stage is not None:
            params["stage"] = stage
        if message is not None:
            params["message"] = message
        if partial is not None:
            params["partial"] = dict(partial)
        self._send(messages.notification(PROGRESS, params))

    def log(self, level: str, message: str, data: Mapping[str, Any] | None = None,
            logger: str | None = None) -> None:
        """Send ``notifications/log`` if ``log`` is advertised and the client opted in (§17.1).

        Opting in is either session-wide (``log`` client capability or ``_meta.logLevel`` in
        ``initialize``) or per request (``_meta.logLevel`` on this request).
        """
        capabilities = self.session.protocol.capabilities
        if self._notify is None or capabilities is None or "log" not in capabilities:
            return
        if not (self.session.protocol.wants_log(level) or self._wants_request_log(level)):
            return
        params: dict[str, Any] = {"level": level, "message": message}
        if logger is not None:
            params["logger"] = logger
        if data is not None:
            params["data"] = dict(data)
        if self._progress_token is not None:
            params["_meta"] = {"progressToken": self._progress_token}
        self._send(messages.notification(LOG, params))

    def _wants_request_log(self, level: str) -> bool:
        if self._log_level is None or level not in LOG_LEVELS:
            return False
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(self._log_level)

    def _send(self, frame: dict[str, Any]) -> None:
        assert self._notify is not None
        data = messages.encode(frame)
        if threading.get_ident() == self._loop_thread:
            self._notify(data)
        else:
            self._loop.call_soon_threadsafe(self._notify, data)
