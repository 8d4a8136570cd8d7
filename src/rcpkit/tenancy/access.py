"""Who is calling and what they may do: authentication by key, the per-collection gate of
the HTTP transport, and the dispatcher's per-request authorisation (§15.3, §15.5, §15.6).

Order for a request to ``<base>/<collection>/…``: credentials (401, ``-32012``), then
visibility — a collection the principal holds no scope on answers exactly as one that does
not exist (403, ``-32012``, the same body), so existence does not leak — then the rate and
concurrency limits (429, ``-32011``, ``Retry-After``), which admit the POST and the first
request it carries. Each further request of a batch is admitted on its own, as if it came
alone: one token, and one concurrency slot until it is answered, or ``-32011`` for it alone
(:meth:`Access.member_admission`). The dispatcher then checks each request before capability
gating: ``write`` for the write methods, ``read`` for the rest, and the daily write quota.
The principal's fan-out caps apply to the typed params (:func:`cap_fan_out`).
"""

from __future__ import annotations

import functools
import hmac
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..binding.graph import DEFAULT_HOPS
from ..engine.knowledge.transform import default_n
from ..protocol.errors import InvalidParams, PayloadTooLarge, RateLimited, Unauthorized
from ..protocol.methods import ALWAYS_ALLOWED
from ..server.context import Context
from ..server.dispatcher import AdmitMember
from ..server.framework import Handler, Server
from ..transports.http.auth import presented_credentials, unauthenticated
from ..transports.http.replies import error_reply, shed
from ..transports.http.server import Reply
from .keys import KeyRecord, KeyStore, KeyStoreError
from .limits import Limiter, Limits, QuotaExceeded
from .scopes import ANY_COLLECTION, Scopes, action_of

__all__ = ["Access", "CollectionGate", "Principal", "PrincipalOf", "cap_fan_out", "held_to_caps",
           "hidden"]

logger = logging.getLogger("rcpkit.server")

RefusalHook = Callable[[str, str], None]
"""``(collection, principal kind)``, called for every rate-limit refusal (metrics: the
kind is ``key`` or ``token``, never a principal's name)."""


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: ``caller`` keys its per-caller engine state, ``name`` is who
    it is (provenance, limits), ``trust`` the highest trust level its writes may name (None:
    the collection's own setting, §15.2)."""

    caller: str
    name: str
    scopes: Scopes
    limits: Limits
    trust: str | None = None


def hidden() -> Reply:
    """The one answer for a collection that is missing or not the caller's to see."""
    return error_reply(403, Unauthorized("not authorised for this collection"))


class Access:
    """Keys (``keys.json``) and the legacy fixed tokens (``--auth-token``, every scope) of a
    server, its default limits and the limiter shared by all its collections. Without any
    key or token, callers are anonymous and unrestricted, as a server without auth is."""

    def __init__(self, keys: KeyStore | None, *, auth_tokens: Iterable[str] = (),
                 api_key_header: str | None = None, defaults: Limits | None = None,
                 limiter: Limiter | None = None,
                 on_refusal: RefusalHook | None = None) -> None:
        self.keys = keys
        self.tokens = tuple(token.encode() for token in auth_tokens if token)
        self.api_key_header = api_key_header.lower().encode() if api_key_header else None
        self.defaults = defaults or Limits()
        self.limiter = limiter or Limiter()
        self.on_refusal = on_refusal

    def required(self) -> bool:
        return bool(self.tokens) or (self.keys is not None and self.keys.in_force())

    def authenticate(self, headers: Mapping[bytes, bytes]) -> Principal | Reply | None:
        """The caller, None when no auth is configured, else the 400/401 refusal."""
        if not self.required():
            return None
        presented = presented_credentials(dict(headers), self.api_key_header)
        if isinstance(presented, tuple):
            return presented
        for offered in presented:
            found = self._principal_of_token(offered)
            if found is not None:
                return found
        return unauthenticated()

    def _principal_of_token(self, offered: bytes) -> Principal | None:
        for index, known in enumerate(self.tokens):
            if hmac.compare_digest(offered, known):
                return self.principal(f"credential-{index}")
        if self.keys is not None:
            record = self._keys(lambda keys: keys.authenticate(offered.decode("latin-1")))
            if record is not None:
                return self.principal(f"key-{record.key_id}")
        return None

    def _keys(self, read: Callable[[KeyStore], KeyRecord | None]) -> KeyRecord | None:
        """``read(keys)``; an unreadable keys file fails closed (no key is valid), logged."""
        assert self.keys is not None
        try:
            return read(self.keys)
        except KeyStoreError as exc:
            logger.error("refusing every API key: %s", exc)
            return None

    def principal(self, caller: str | None) -> Principal | None:
        """The principal behind a caller id, None when it no longer exists (a revoked key)."""
        if caller is None:
            return None
        kind, _, ident = caller.partition("-")
        if kind == "credential":
            return Principal(caller, caller, Scopes({ANY_COLLECTION: frozenset(("read", "write"))}),
                             self.defaults)
        record = self._keys(lambda keys: keys.records().get(ident)) \
            if self.keys is not None else None
        if kind != "key" or record is None or record.revoked:
            return None
        return Principal(caller, record.principal, record.scopes,
                         record.limits.over(self.defaults), record.trust)

    def visible(self, caller: str | None, names: Iterable[str]) -> list[str]:
        """The collections among ``names`` the caller may see."""
        if not self.required():
            return list(names)
        principal = self.principal(caller)
        return [] if principal is None else [n for n in names if principal.scopes.sees(n)]

    def refused(self, collection: str | None, principal: Principal) -> None:
        """Tell ``on_refusal`` a limit refused ``principal``."""
        if self.on_refusal is not None:
            kind = "key" if principal.caller.startswith("key-") else "token"
            self.on_refusal(collection or "", kind)

    def admit(self, collection: str | None, principal: Principal) -> float | None:
        """Count one request of ``principal`` in (:meth:`.limits.Limiter.admit`); the
        seconds to wait instead when a limit refuses it, a refusal told to ``on_refusal``."""
        wait = self.limiter.admit(principal.name, principal.limits)
        if wait is not None:
            self.refused(collection, principal)
        return wait

    def member_admission(self, collection: str | None) -> AdmitMember:
        """The dispatcher's admission of each request of a batch after its first (§11,
        §15.5): a request of its own for the rate and concurrency limits, its slot given back
        once it is answered. A caller who is no principal (anonymous, or revoked meanwhile,
        which authorisation refuses next) is not counted."""
        def admit_member(caller: str | None) -> Callable[[], None]:
            principal = self.principal(caller)
            if principal is None:
                return _uncounted
            wait = self.admit(collection, principal)
            if wait is not None:
                raise RateLimited("rate limit", retryAfterMs=math.ceil(wait * 1000))
            return functools.partial(self.limiter.release, principal.name)
        return admit_member

    def authorizer(self, collection: str) -> Callable[[str | None, str, Mapping[str, Any]], None]:
        """The dispatcher's check of each request to ``collection`` (see the module doc)."""
        def authorize(caller: str | None, method: str, params: Mapping[str, Any]) -> None:
            if caller is None and not self.required():
                return
            principal = self.principal(caller)
            if principal is None:
                raise Unauthorized("missing or invalid credentials")
            if method in ALWAYS_ALLOWED:
                return
            action = action_of(method)
            if not principal.scopes.allows(collection, action):
                raise Unauthorized(f"this key may not {action} this collection")
            if action == "write":
                self._charge_writes(collection, principal, params)
        return authorize

    def _charge_writes(self, collection: str, principal: Principal,
                       params: Mapping[str, Any]) -> None:
        size = len(msgspec.json.encode(params))
        try:
            wait = self.limiter.charge_writes(principal.name, principal.limits, size)
        except QuotaExceeded as exc:
            raise PayloadTooLarge(str(exc)) from None
        if wait is not None:
            self.refused(collection, principal)
            raise RateLimited("the daily write quota is used up",
                              retryAfterMs=math.ceil(wait * 1000))


class CollectionGate:
    """The HTTP :class:`~rcpkit.transports.http.Gate` of one collection (``None``: the
    server's own base, which every authenticated caller may reach)."""

    def __init__(self, access: Access, collection: str | None, *, exists: bool = True) -> None:
        self.access = access
        self.collection = collection
        self.exists = exists
        """False: the stand-in for every missing collection, which nobody sees."""
        self._in_flight: dict[str, str] = {}
        """caller → principal name, for :meth:`release`."""

    def admit(self, headers: dict[bytes, bytes]) -> str | Reply | None:
        principal = self.access.authenticate(headers)
        if principal is None or isinstance(principal, tuple):
            return principal
        if not self.exists or (self.collection is not None
                               and not principal.scopes.sees(self.collection)):
            return hidden()
        wait = self.access.admit(self.collection, principal)
        if wait is not None:
            return shed(wait, "rate limit")
        self._in_flight[principal.caller] = principal.name
        return principal.caller

    def release(self, principal: str | None) -> None:
        # By the name admitted under: a key revoked meanwhile still gives its slot back.
        name = self._in_flight.get(principal) if principal is not None else None
        if name is not None:
            self.access.limiter.release(name)


def _uncounted() -> None:
    """Nothing to give back: the request was not counted."""


_FAN_OUT: tuple[tuple[str, str, Callable[[Limits], int | None], Callable[[Any], int]], ...] = (
    ("query/transform", "n", lambda limits: limits.transform_n,
     lambda params: default_n(params.method)),
    ("graph", "hops", lambda limits: limits.graph_hops, lambda params: DEFAULT_HOPS))
"""method, field, the principal's cap on it, the server's value when a request leaves it out."""


PrincipalOf = Callable[[str | None], Principal | None]
"""A caller (:attr:`Context.caller`) → its principal, None when it is none (anonymous,
revoked): :meth:`Access.principal`, or a bridge's own resolution of its callers."""


def cap_fan_out(server: Server, principal_of: PrincipalOf) -> None:
    """§15.5: make ``server`` hold each caller's own caps on ``query/transform`` ``n`` and
    ``graph`` ``hops`` (:class:`.limits.Limits`), below the advertised ``maxN``/``maxHops``.

    The caps apply to the typed params, so ``2.0`` counts as the 2 it decodes to. A request
    that leaves the value out gets the server's default lowered to the cap, not a refusal:
    it asked for no number, so the most its key allows serves it as the default serves an
    uncapped key, and a client that never sends the field keeps working on a capped key."""
    for method, *_ in _FAN_OUT:
        handler = server.handlers.get(method)
        if handler is not None:
            server.add_method(method, _before(handler, functools.partial(
                _capped, principal_of, method)))


def _capped(principal_of: PrincipalOf, method: str, params: Any, ctx: Context) -> Any:
    return held_to_caps(principal_of(ctx.caller), method, params)


def held_to_caps(principal: Principal | None, method: str, params: Any) -> Any:
    """``method``'s typed ``params`` with their fan-out field held to ``principal``'s cap
    (see :func:`cap_fan_out`): the same rule for every surface a key reaches, RCP or MCP."""
    for capped_method, field, cap_of, default_of in _FAN_OUT:
        if capped_method != method:
            continue
        cap = None if principal is None else cap_of(principal.limits)
        value = getattr(params, field)
        if cap is None or (value is not None and value <= cap):
            return params
        if value is not None:
            raise InvalidParams(f"{field} must be at most {cap} for this key", field=field)
        return msgspec.structs.replace(params, **{field: min(default_of(params), cap)})
    return params


def _before(handler: Handler, adjust: Callable[[Any, Context], Any]) -> Callable[..., Any]:
    """``handler``'s function, called with its params passed through ``adjust`` first."""
    call = handler.fn
    if handler.is_async:
        async def adjusted_async(params: Any, ctx: Context) -> Any:
            return await call(adjust(params, ctx), ctx)
        return adjusted_async

    def adjusted(params: Any, ctx: Context) -> Any:
        return call(adjust(params, ctx), ctx)
    return adjusted
