"""Which dispatcher answers an HTTP request, under the session policy (§5.2, §13).

- ``stateless`` — every request is implicitly initialized at the advertised
  capabilities; ``initialize``/``info`` are idempotent; ``-32003`` still applies.
- ``token`` — ``initialize`` mints ``result._meta.session``; later requests
  carry it in the ``RCP-Session`` header. A missing, unknown or expired token is
  treated as an uninitialized session: gated methods get ``-32001`` (with
  ``data.detail``), whose §12.2 remedy — initialize again — is exactly the fix.
  Sessions idle for ``session_ttl_s`` expire; ``shutdown`` ends one at once; at
  ``max_sessions`` the never-used, then the least recently used, make room.
- ``single`` — one process-wide session, as the reference server behaves;
  ``shutdown`` ends it and the next ``initialize`` starts afresh.
"""

from __future__ import annotations

import collections
import secrets
import time
from collections.abc import Callable
from typing import Any, Literal

from ...protocol.errors import NotInitialized, UsageError
from ...protocol.lifecycle import State
from ...protocol.messages import Invalid
from ...protocol.messages import Request as RpcRequest
from ...server.context import ServerSession
from ...server.dispatcher import Dispatcher
from ...server.framework import Server

__all__ = ["SESSION_HEADER", "SessionPolicy", "Sessions", "refuse_unknown_session"]

SessionPolicy = Literal["stateless", "token", "single"]
SESSION_HEADER = "RCP-Session"


class Sessions:
    """Finds the dispatcher for a request under the configured policy.

    Token mode keeps at most ``max_sessions`` sessions. A newcomer at the cap takes the
    place of the oldest session never used since its ``initialize``, else of the least
    recently used one, so a flood of ``initialize`` cannot lock users out; only while
    every session was used within ``_BUSY_S`` is it refused (429), with a ``Retry-After``
    saying when the least recently used one may be taken. ``clock`` (monotonic seconds)
    dates each use; tests pass a fake one to expire sessions without waiting."""

    def __init__(self, server: Server, policy: SessionPolicy, ttl_s: float, max_sessions: int,
                 dispatcher_options: dict[str, Any],
                 clock: Callable[[], float] = time.monotonic) -> None:
        if policy not in ("stateless", "token", "single"):
            raise UsageError(f"unknown session policy {policy!r}")
        if max_sessions < 1 or ttl_s <= 0:
            raise UsageError("max_sessions and session_ttl_s must be positive")
        self.server = server
        self.policy = policy
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._options = dispatcher_options
        self._by_token: collections.OrderedDict[str, Dispatcher] = collections.OrderedDict()
        """Live sessions, least recently used first."""
        self._unused: collections.OrderedDict[str, None] = collections.OrderedDict()
        """Sessions not used since their ``initialize``, oldest first."""
        self._shared: Dispatcher | None = None
        self._next_sweep = 0.0

    def _new(self, *, stateless: bool = False, token: str | None = None) -> Dispatcher:
        return Dispatcher(self.server, session=ServerSession(token=token, last_used=self.clock()),
                          stateless=stateless, **self._options)

    def dispatcher_for(self, token: str | None) -> Dispatcher:
        """The dispatcher to use; in token mode a fresh, uninitialized one for a new or
        unknown token (see :meth:`after`)."""
        if self.policy == "stateless":
            if self._shared is None:
                self._shared = self._new(stateless=True)
            return self._shared
        if self.policy == "single":
            if self._shared is None or self._shared.session.protocol.state is State.CLOSED:
                self._shared = self._new()
            return self._shared
        now = self.clock()
        self._sweep(now)
        known = self._by_token.get(token) if token is not None else None
        if known is not None and now - known.session.last_used <= self.ttl_s:
            assert token is not None
            known.session.last_used = now
            self._by_token.move_to_end(token)
            self._unused.pop(token, None)
            return known
        return self._new(token=secrets.token_urlsafe(24))

    def after(self, dispatcher: Dispatcher) -> None:
        """Token mode: keep a session that just initialized; forget one that shut down."""
        if self.policy != "token":
            return
        token = dispatcher.session.token
        assert token is not None
        state = dispatcher.session.protocol.state
        if state is State.READY and token not in self._by_token:
            while len(self._by_token) >= self.max_sessions:
                self._forget(next(iter(self._unused or self._by_token)))
            self._by_token[token] = dispatcher
            self._unused[token] = None
        elif state is State.CLOSED:
            self._forget(token)

    def retry_after(self, dispatcher: Dispatcher) -> float | None:
        """Token mode (only asked then) at ``max_sessions`` with every session in recent use:
        the seconds until a newcomer may take the least recently used one's place; None when
        it is served."""
        if len(self._by_token) < self.max_sessions \
                or dispatcher.session.token in self._by_token or self._unused:
            return None
        oldest = next(iter(self._by_token.values())).session.last_used
        wait = oldest + _BUSY_S - self.clock()
        return wait if wait > 0 else None

    def _forget(self, token: str) -> None:
        self._by_token.pop(token, None)
        self._unused.pop(token, None)

    def _sweep(self, now: float) -> None:
        """Forget idle sessions (at most every 30 s; lookups also check the age)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(self.ttl_s, 30.0)
        while self._by_token:
            token, oldest = next(iter(self._by_token.items()))
            if now - oldest.session.last_used <= self.ttl_s:
                break
            self._forget(token)


_BUSY_S = 5.0
"""A token session used this recently is mid-conversation: a newcomer does not evict it."""


def refuse_unknown_session(parsed: Any) -> Any:
    """Token mode: a request naming an unknown/expired session is answered as uninitialized,
    except the methods callable at any time, which a fresh session handles normally."""
    if isinstance(parsed, RpcRequest) and parsed.method not in ("info", "ping", "shutdown",
                                                                "initialize"):
        return Invalid(parsed.id, NotInitialized(
            "unknown or expired session: send initialize for a new one",
            data={"detail": f"{SESSION_HEADER} not recognised"}))
    return parsed
