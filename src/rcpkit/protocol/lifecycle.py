"""The §13 session lifecycle as one transition table, plus request admission.

States: ``uninitialized`` → (successful ``initialize``) → ``ready`` →
(``shutdown`` answered or EOF) → ``closed``. A failed version negotiation
(§7.1, ``-32002``) leaves the session uninitialized.

:meth:`Session.admit` applies the §12 precedence for one request, in order:
pre-initialize (``-32001``), repeated ``initialize`` (``-32600``), undefined
method (``-32004``), unadvertised capability (``-32003``). Params validation
(``-32602``) and option gating (``-32005``) come after admission.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import (
    CapabilityMissing,
    InvalidParams,
    InvalidRequest,
    NotInitialized,
    RcpError,
    UnknownMethod,
    VersionMismatch,
)
from .methods import ALWAYS_ALLOWED, capability_for, is_core

__all__ = ["MIN_VERSION", "PROTOCOL_VERSION", "Event", "Session", "State", "negotiate"]

PROTOCOL_VERSION = 1
MIN_VERSION = 1
LOG_LEVELS = ("debug", "info", "notice", "warning", "error")


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    CLOSED = "closed"


class Event(enum.Enum):
    INITIALIZED = "initialized"
    SHUTDOWN = "shutdown"


#: (state, event) → next state. Anything absent is not a transition.
TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.UNINITIALIZED, Event.INITIALIZED): State.READY,
    (State.UNINITIALIZED, Event.SHUTDOWN): State.CLOSED,
    (State.READY, Event.SHUTDOWN): State.CLOSED,
}


def negotiate(params: Any) -> int:
    """§7.1: the negotiated version is min(client, server); below 1 → -32002."""
    version = params.get("protocolVersion") if isinstance(params, Mapping) else None
    if version is None:
        raise InvalidParams("'protocolVersion' is required", field="protocolVersion")
    if isinstance(version, bool) or not isinstance(version, int | float) or (
            isinstance(version, float) and not version.is_integer()):
        raise InvalidParams("'protocolVersion' must be an integer", field="protocolVersion")
    negotiated = min(int(version), PROTOCOL_VERSION)
    if negotiated < MIN_VERSION:
        raise VersionMismatch(
            f"no common protocol version: this server speaks {MIN_VERSION}..{PROTOCOL_VERSION}",
            data={"supported": list(range(MIN_VERSION, PROTOCOL_VERSION + 1))})
    return negotiated


@dataclass
class Session:
    """Per-connection protocol state (one per stdio process, one per HTTP session)."""

    state: State = State.UNINITIALIZED
    version: int | None = None
    capabilities: dict[str, Any] | None = None
    """Frozen at the successful ``initialize`` (§13.2)."""
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    """Minimum level for ``notifications/log``; None when the client did not opt in."""

    def fire(self, event: Event) -> None:
        self.state = TRANSITIONS.get((self.state, event), self.state)

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    def admit(self, method: str, advertised: Mapping[str, Any],
              registered: Container[str]) -> RcpError | None:
        """Return the error that refuses ``method`` now, or None to proceed."""
        if method == "initialize" and self.state is State.READY:
            return InvalidRequest("already initialized: a session is negotiated once (§13)")
        if method in ALWAYS_ALLOWED:
            return None
        if self.state is not State.READY:
            return NotInitialized()
        capability = capability_for(method)
        if capability is None or not (is_core(method) or method in registered):
            return UnknownMethod(f"unknown method {method!r}")
        if capability not in advertised or method not in registered:
            return CapabilityMissing(f"{method!r} needs the {capability!r} capability, "
                                     "which this server does not advertise",
                                     data={"capability": capability})
        return None

    def initialize(self, params: Any, capabilities: dict[str, Any]) -> int:
        """Negotiate and, on success only, freeze the capability set (§7.1, §13.2)."""
        version = negotiate(params)
        client_caps = params.get("capabilities") if isinstance(params, Mapping) else None
        self.client_capabilities = dict(client_caps) if isinstance(client_caps, Mapping) else {}
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        level = meta.get("logLevel") if isinstance(meta, Mapping) else None
        if "log" in self.client_capabilities or isinstance(level, str):
            self.log_level = level if level in LOG_LEVELS else "info"
        self.version = version
        self.capabilities = capabilities
        self.fire(Event.INITIALIZED)
        return version

    def wants_log(self, level: str) -> bool:
        """§17.1: only clients that opted in, at or above their minimum level."""
        if self.log_level is None or level not in LOG_LEVELS:
            return False
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)
