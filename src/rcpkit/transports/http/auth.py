"""Who may call (§5.2, §15.6): bearer tokens or an API-key header, checked before anything
is parsed, so nothing — not even ``info`` — is revealed without them; and CORS for
browser callers."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from ...protocol.errors import InvalidRequest, Unauthorized
from .replies import error_body
from .server import Reply
from .sessions import SESSION_HEADER

__all__ = ["Authenticator", "cors_middleware"]


class Authenticator:
    """Checks the credentials of a request against the accepted tokens (none: open)."""

    def __init__(self, tokens: Iterable[str], api_key_header: str | None) -> None:
        self.tokens = tuple(token.encode() for token in tokens if token)
        self.api_key_header = api_key_header.lower().encode() if api_key_header else None

    def authenticate(self, headers: dict[bytes, bytes]) -> str | Reply | None:
        """The principal of the credentials presented (``credential-<n>``: which accepted
        token), None when no auth is configured, or the refusal: 400 when a credential
        header came more than once (combined with commas, which no token holds), 401 when
        none is right."""
        if not self.tokens:
            return None
        authorization = headers.get(b"authorization")
        api_key = headers.get(self.api_key_header) if self.api_key_header is not None else None
        if (authorization is not None and b"," in authorization) \
                or (api_key is not None and b"," in api_key):
            return 400, [], error_body(InvalidRequest("a credential header appears twice"))
        presented: list[bytes] = []
        if authorization is not None and authorization[:7].lower() == b"bearer ":
            presented.append(authorization[7:].strip())
        if api_key is not None:
            presented.append(api_key.strip())
        for offered in presented:
            for index, known in enumerate(self.tokens):
                if hmac.compare_digest(offered, known):
                    return f"credential-{index}"
        return 401, [(b"www-authenticate", b"Bearer")], error_body(
            Unauthorized("missing or invalid credentials"))


def cors_middleware(origins: Iterable[str], api_key_header: str | None) -> list[Middleware]:
    """The CORS layer for ``origins`` (none: no CORS at all), allowing the RCP headers."""
    allowed_origins = list(origins)
    if not allowed_origins:
        return []
    allowed_headers = ["Authorization", "Content-Type", SESSION_HEADER]
    if api_key_header:
        allowed_headers.append(api_key_header)
    return [Middleware(CORSMiddleware, allow_origins=allowed_origins,
                       allow_methods=["POST", "OPTIONS"], allow_headers=allowed_headers)]
