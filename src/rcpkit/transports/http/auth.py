"""Who may call (§5.2, §15.6): bearer tokens or an API-key header, checked before anything
is parsed, so nothing — not even ``info`` — is revealed without them; and CORS for
browser callers."""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import Protocol

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from ...protocol.errors import InvalidRequest, Unauthorized
from .replies import error_reply
from .server import Reply
from .sessions import SESSION_HEADER

__all__ = ["Authenticator", "Gate", "cors_middleware", "presented_credentials",
           "unauthenticated"]


class Gate(Protocol):
    """Who may send a request, decided from its head before the body is read (§15.6).

    ``admit`` returns the caller's principal (None: anonymous) or the refusal to send;
    every admitted request is later given back to ``release``, so a gate may count
    requests in flight per principal."""

    def admit(self, headers: dict[bytes, bytes]) -> str | Reply | None: ...

    def release(self, principal: str | None) -> None: ...


def presented_credentials(headers: dict[bytes, bytes],
                          api_key_header: bytes | None) -> list[bytes] | Reply:
    """The credentials in ``Authorization: Bearer`` and the API-key header (whitespace
    stripped), or 400 when a credential header came more than once (combined with commas,
    which no token holds)."""
    authorization = headers.get(b"authorization")
    api_key = headers.get(api_key_header) if api_key_header is not None else None
    if (authorization is not None and b"," in authorization) \
            or (api_key is not None and b"," in api_key):
        return error_reply(400, InvalidRequest("a credential header appears twice"))
    presented: list[bytes] = []
    if authorization is not None and authorization[:7].lower() == b"bearer ":
        presented.append(authorization[7:].strip())
    if api_key is not None:
        presented.append(api_key.strip())
    return presented


def unauthenticated() -> Reply:
    """401 with a ``-32012`` body: no credential presented is right."""
    return error_reply(401, Unauthorized("missing or invalid credentials"),
                       (b"www-authenticate", b"Bearer"))


class Authenticator:
    """The :class:`Gate` of the accepted tokens (none: open); the principal is
    ``credential-<n>``, which accepted token."""

    def __init__(self, tokens: Iterable[str], api_key_header: str | None) -> None:
        self.tokens = tuple(token.encode() for token in tokens if token)
        self.api_key_header = api_key_header.lower().encode() if api_key_header else None

    def admit(self, headers: dict[bytes, bytes]) -> str | Reply | None:
        """The principal of the credentials presented, None when no auth is configured, or
        the refusal (:func:`presented_credentials`, :func:`unauthenticated`)."""
        if not self.tokens:
            return None
        presented = presented_credentials(headers, self.api_key_header)
        if isinstance(presented, tuple):
            return presented
        for offered in presented:
            for index, known in enumerate(self.tokens):
                if hmac.compare_digest(offered, known):
                    return f"credential-{index}"
        return unauthenticated()

    def release(self, principal: str | None) -> None:
        """Nothing is counted."""


def cors_middleware(origins: Iterable[str], api_key_header: str | None) -> list[Middleware]:
    """The CORS layer for ``origins`` (none: no CORS at all), allowing the RCP headers, POST
    and the ``GET`` of the OpenRPC document (:mod:`.discovery`)."""
    allowed_origins = list(origins)
    if not allowed_origins:
        return []
    allowed_headers = ["Authorization", "Content-Type", SESSION_HEADER]
    if api_key_header:
        allowed_headers.append(api_key_header)
    return [Middleware(CORSMiddleware, allow_origins=allowed_origins,
                       allow_methods=["GET", "POST", "OPTIONS"], allow_headers=allowed_headers)]
