"""Check metadata, the check registry and the per-check context (§14.5).

A check is a small function registered with :func:`check`; it talks to the
server through :class:`Ctx`, and ends by returning (PASS), raising
:class:`CheckFailed` (with what was sent, what came back, what was expected)
or raising :class:`CheckSkipped`.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rcpkit.conformance.driver import Frame, ReceiveTimeout, ServerGone, Transport

__all__ = [
    "CHECKS",
    "GATED_METHODS",
    "Check",
    "CheckFailed",
    "CheckSkipped",
    "Ctx",
    "Lane",
    "Level",
    "Session",
    "check",
    "same_id",
]

JsonObject = dict[str, Any]
MISSING: Any = object()
#: The first frame of a connection may take this many read timeouts (process start-up).
STARTUP_GRACE = 3

#: §7: every optional method and the capability that gates it.
GATED_METHODS: dict[str, str] = {
    "embed": "embed",
    "embed/sparse": "sparseEmbed",
    "embed/multi": "multiVector",
    "rerank": "rerank",
    "retrieve": "retrieve",
    "query/transform": "transform",
    "graph": "graph",
    "index/add": "index",
    "index/delete": "index",
    "catalog/list": "catalog",
    "feedback": "feedback",
    "memory/build": "memory",
    "memory/recall": "memory",
}


class Level(StrEnum):
    """Conformance levels, ordered L0 < L1 < L2 (§14)."""

    L0 = "L0"
    L1 = "L1"
    L2 = "L2"


class Lane(StrEnum):
    """Which connection a check runs on.

    ``preinit`` never initializes; ``lifecycle`` is a pristine connection whose
    checks run in order and drive it through §13; ``shared`` is initialized
    once and reused; ``fresh`` gets its own connection (stdio: its own
    process); ``final`` runs after everything, over the recorded wire.
    """

    PREINIT = "preinit"
    LIFECYCLE = "lifecycle"
    SHARED = "shared"
    FRESH = "fresh"
    FINAL = "final"


class CheckFailed(Exception):
    """A MUST was violated; ``expected`` says which, ``sent``/``got`` show the wire."""

    def __init__(self, expected: str, *, sent: Any = MISSING, got: Any = MISSING) -> None:
        super().__init__(expected)
        self.expected = expected
        self.sent = sent
        self.got = got


class CheckSkipped(Exception):
    """The check does not apply (capability not advertised, policy, transport)."""


@dataclass(frozen=True)
class Check:
    """Metadata of one conformance check."""

    id: str
    level: Level
    section: str
    title: str
    run: Callable[[Ctx], None]
    requires: tuple[str, ...] = ()
    lane: Lane = Lane.SHARED
    transport: str | None = None
    profile: bool = False


CHECKS: list[Check] = []


def check(
    id: str,
    level: Level,
    section: str,
    title: str,
    *,
    requires: tuple[str, ...] = (),
    lane: Lane = Lane.SHARED,
    transport: str | None = None,
    profile: bool = False,
) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    """Register the decorated function as a check (ids are unique)."""

    def register(run: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        if any(existing.id == id for existing in CHECKS):
            raise ValueError(f"duplicate check id {id!r}")
        CHECKS.append(Check(id, level, section, title, run, requires, lane, transport, profile))
        return run

    return register


def same_id(sent: Any, echoed: Any) -> bool:
    """§4.7: the id comes back with the same JSON type and value (1 is not 1.0 nor true)."""
    return type(sent) is type(echoed) and sent == echoed


def short(value: Any, limit: int = 300) -> str:
    """A compact, truncated JSON rendering for failure reports."""
    if value is MISSING:
        return "nothing"
    if isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Session:
    """One connection plus the bookkeeping the whole-run checks need."""

    transport: Transport
    timeout: float
    methods_by_id: dict[str, str] = field(default_factory=dict)
    requests_per_id: Counter[str] = field(default_factory=Counter)
    responses_per_id: Counter[str] = field(default_factory=Counter)
    progress_tokens: set[str] = field(default_factory=set)
    log_opt_in: bool = False
    dead: bool = False
    scratch: dict[str, Any] = field(default_factory=dict)
    _next_id: int = 0

    def new_id(self) -> int:
        self._next_id += 1
        return 1000 + self._next_id

    def note_sent(self, message: Any) -> None:
        """Remember ids, methods and notification opt-ins of an outgoing message."""
        for member in message if isinstance(message, list) else [message]:
            if not isinstance(member, dict):
                continue
            params = member.get("params")
            meta = params.get("_meta") if isinstance(params, dict) else None
            if isinstance(meta, dict):
                if "progressToken" in meta:
                    self.progress_tokens.add(short(meta["progressToken"]))
                if "logLevel" in meta:
                    self.log_opt_in = True
            if "id" in member:
                key = short(member["id"])
                self.requests_per_id[key] += 1
                if isinstance(member.get("method"), str):
                    self.methods_by_id[key] = member["method"]

    def note_received(self, frame: Frame) -> None:
        for member in frame.obj if isinstance(frame.obj, list) else [frame.obj]:
            if isinstance(member, dict) and "method" not in member and "id" in member:
                key = short(member["id"])
                self.responses_per_id[key] += 1
                if self.methods_by_id.get(key) == "initialize":
                    self.adopt_session_token(member.get("result"))

    def adopt_session_token(self, result: Any) -> None:
        """§5.2 token policy: send ``initialize.result._meta.session`` as ``RCP-Session``."""
        meta = result.get("_meta") if isinstance(result, dict) else None
        token = meta.get("session") if isinstance(meta, dict) else None
        headers = getattr(self.transport, "headers", None)
        if isinstance(token, str) and isinstance(headers, dict):
            headers["RCP-Session"] = token

    def send(self, message: Any) -> None:
        self.note_sent(message)
        self.transport.send(message)

    def receive(self, timeout: float | None = None) -> Frame:
        """The next frame; the first read of a connection also absorbs the server's start-up."""
        if timeout is None:
            timeout = self.timeout if self.transport.log.frames else self.timeout * STARTUP_GRACE
        frame = self.transport.receive(timeout)
        self.note_received(frame)
        return frame


def _is_response_to(obj: Any, request_id: Any) -> bool:
    """Loose match (``1`` vs ``"1"``) so a mistyped echo is reported, not waited for."""
    return (
        isinstance(obj, dict)
        and "method" not in obj
        and "id" in obj
        and (same_id(request_id, obj["id"]) or str(obj["id"]) == str(request_id))
    )


class Ctx:
    """What a check sees: the session, the advertised capabilities, and helpers."""

    def __init__(
        self,
        session: Session | None,
        capabilities: JsonObject,
        *,
        http_policy: str | None = None,
        sessions: list[Session] | None = None,
        schema_path: str | None = None,
    ) -> None:
        self._session = session
        self.capabilities = capabilities
        self.http_policy = http_policy
        self.sessions = sessions or []
        self.schema_path = schema_path
        self.notifications: list[JsonObject] = []
        self.last_sent: Any = MISSING
        self.last_got: Any = MISSING

    @property
    def session(self) -> Session:
        if self._session is None:
            raise CheckSkipped("no live session")
        return self._session

    @property
    def transport(self) -> Transport:
        return self.session.transport

    @property
    def kind(self) -> str:
        return self.session.transport.kind

    def cap(self, name: str) -> JsonObject | None:
        """The advertised metadata object of a capability, or ``None`` (§6)."""
        value = self.capabilities.get(name)
        return value if isinstance(value, dict) else None

    # -- outcomes -----------------------------------------------------------------
    def fail(self, expected: str, *, got: Any = MISSING) -> CheckFailed:
        return CheckFailed(
            expected, sent=self.last_sent, got=self.last_got if got is MISSING else got
        )

    def expect(self, condition: bool, expected: str, *, got: Any = MISSING) -> None:
        if not condition:
            raise self.fail(expected, got=got)

    @staticmethod
    def skip(reason: str) -> CheckSkipped:
        return CheckSkipped(reason)

    # -- wire helpers -----------------------------------------------------------
    def send(self, message: Any) -> None:
        self.last_sent = message
        self.session.send(message)

    def send_raw(self, data: bytes) -> None:
        self.last_sent = data
        with contextlib.suppress(ValueError):
            self.session.note_sent(json.loads(data))
        self.session.transport.send_raw(data)

    def receive(self, timeout: float | None = None) -> Any:
        """The next frame's JSON value (notifications are collected, not skipped)."""
        try:
            frame = self.session.receive(timeout)
        except ReceiveTimeout as exc:
            self.session.dead = True  # a late answer would desynchronise later checks
            raise self.fail(f"a response ({exc})", got=MISSING) from None
        except ServerGone as exc:
            self.session.dead = True
            raise self.fail(f"a response, but the server went away ({exc})") from None
        self.last_got = frame.obj
        return frame.obj

    def await_response(self, request_id: Any) -> JsonObject:
        """Read frames until the response bearing ``request_id``; keep notifications."""
        while True:
            obj = self.receive()
            if _is_response_to(obj, request_id):
                assert isinstance(obj, dict)
                self.expect(
                    same_id(request_id, obj["id"]),
                    f"the id echoed unchanged (type and value) as {short(request_id)} (§4.7)",
                )
                return obj
            if isinstance(obj, dict) and "method" in obj and "id" not in obj:
                self.notifications.append(obj)

    def call(
        self,
        method: str,
        params: Any = MISSING,
        *,
        request_id: Any = MISSING,
        extra: JsonObject | None = None,
    ) -> JsonObject:
        """Send one request and return its well-formed response object (§4.2/§4.3)."""
        rid = self.session.new_id() if request_id is MISSING else request_id
        message: JsonObject = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not MISSING:
            message["params"] = params
        message.update(extra or {})
        self.send(message)
        response = self.await_response(rid)
        self.expect_well_formed(response)
        return response

    def expect_well_formed(self, response: Any) -> None:
        self.expect(
            isinstance(response, dict) and response.get("jsonrpc") == "2.0",
            'a response object with "jsonrpc":"2.0" (§4)',
            got=response,
        )
        has_result, has_error = "result" in response, "error" in response
        self.expect(has_result != has_error, "exactly one of result/error (§4.2, §4.3)")
        if has_error:
            error = response["error"]
            self.expect(
                isinstance(error, dict)
                and type(error.get("code")) is int
                and isinstance(error.get("message"), str),
                "error {code:int, message:str} (§12)",
            )

    def result(self, method: str, params: Any = MISSING, **kwargs: Any) -> JsonObject:
        """Call and require a success whose result is an object."""
        response = self.call(method, params, **kwargs)
        self.expect("result" in response, f"a successful result for {method}")
        result = response["result"]
        self.expect(isinstance(result, dict), f"{method} result to be an object")
        assert isinstance(result, dict)
        return result

    def error(
        self, method: str, params: Any, codes: int | tuple[int, ...], **kwargs: Any
    ) -> JsonObject:
        """Call and require an error whose code is one of ``codes`` (§12)."""
        wanted = (codes,) if isinstance(codes, int) else codes
        response = self.call(method, params, **kwargs)
        names = " or ".join(str(code) for code in wanted)
        self.expect("error" in response, f"error {names} for {method}")
        self.expect(response["error"]["code"] in wanted, f"error code {names}")
        error = response["error"]
        assert isinstance(error, dict)
        return error

    def expect_silence(self, what: str) -> None:
        """Nothing but notifications may arrive before the answer to a probe ping (§4.5)."""
        probe = self.session.new_id()
        self.session.send({"jsonrpc": "2.0", "id": probe, "method": "ping"})
        while True:
            try:
                frame = self.session.receive()
            except (ReceiveTimeout, ServerGone) as exc:
                raise self.fail(f"the server to stay alive after {what}: {exc}") from None
            obj = frame.obj
            if _is_response_to(obj, probe):
                return
            if isinstance(obj, dict) and "method" in obj and "id" not in obj:
                continue
            raise self.fail(f"no reply to {what} (§4.5)", got=obj)
