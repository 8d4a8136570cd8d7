"""L0 checks: envelope, id echo, lifecycle, errors, notifications, cancel, batches.

§4 message format, §4.7 ids, §7.1/§7.2/§7.12/§7.15 required methods, §7.14
cancel, §11 batches, §12 error codes and precedence, §13 lifecycle, §14.1.
"""

from __future__ import annotations

from typing import Any

from rcpkit.conformance.driver import HttpTransport, ReceiveTimeout, ServerGone, StdioTransport
from rcpkit.conformance.model import (
    GATED_METHODS,
    Ctx,
    Lane,
    Level,
    check,
    same_id,
)

L0 = Level.L0
RETRIEVAL_CAPABILITIES = ("embed", "rerank", "retrieve", "graph")


def _expect_peer_info(ctx: Ctx, result: dict[str, Any], method: str) -> None:
    """``initialize``/``info`` result shape (§7.1, §7.2)."""
    version = result.get("protocolVersion")
    ctx.expect(
        type(version) is int and version >= 1,
        f"{method}.protocolVersion an integer ≥ 1 (§7.1)",
    )
    server = result.get("server")
    ctx.expect(
        isinstance(server, dict)
        and isinstance(server.get("name"), str)
        and isinstance(server.get("version"), str),
        f"{method}.server {{name, version}} strings (§7.1)",
    )
    caps = result.get("capabilities")
    ctx.expect(
        isinstance(caps, dict) and all(isinstance(v, dict) for v in caps.values()),
        f"{method}.capabilities an object of objects (§6)",
    )


def _first_gated(ctx: Ctx) -> str:
    method = next((m for m, cap in GATED_METHODS.items() if cap in ctx.capabilities), None)
    if method is None:
        raise ctx.skip("no gated method advertised")
    return method


def _skip_if_stateless(ctx: Ctx) -> None:
    if ctx.http_policy == "stateless":
        raise ctx.skip("stateless HTTP policy: requests are implicitly initialized (§5.2)")


# -- pre-initialize (§13, §14.1 items 1 and 3) -------------------------------------------------


@check("life.info-preinit", L0, "7.2", "info answers before initialize", lane=Lane.PREINIT)
def info_before_initialize(ctx: Ctx) -> None:
    _expect_peer_info(ctx, ctx.result("info", {}), "info")


@check("life.ping-preinit", L0, "7.15", "ping answers before initialize", lane=Lane.PREINIT)
def ping_before_initialize(ctx: Ctx) -> None:
    result = ctx.result("ping", {"nonce": "before-init"})
    ctx.expect(result.get("nonce") == "before-init", "the nonce echoed (§7.15)")


@check(
    "life.unknown-preinit",
    L0,
    "13",
    "an undefined method before initialize is rejected (-32001 or -32004)",
    lane=Lane.PREINIT,
)
def unknown_method_before_initialize(ctx: Ctx) -> None:
    _skip_if_stateless(ctx)
    ctx.error("x-conformance/undefined", {}, (-32001, -32004))


@check(
    "life.notification-preinit",
    L0,
    "4.5",
    "a notification before initialize is not answered",
    lane=Lane.PREINIT,
)
def notification_before_initialize(ctx: Ctx) -> None:
    ctx.send({"jsonrpc": "2.0", "method": "notifications/x-conformance", "params": {}})
    ctx.expect_silence("a notification sent before initialize")


def _register_preinit_gating(method: str, capability: str) -> None:
    @check(
        f"life.preinit.{method}",
        L0,
        "13",
        f"{method} before initialize is rejected with -32001",
        requires=(capability,),
        lane=Lane.PREINIT,
    )
    def gated_before_initialize(ctx: Ctx) -> None:
        _skip_if_stateless(ctx)
        ctx.error(method, {}, -32001)


for _method, _capability in GATED_METHODS.items():
    _register_preinit_gating(_method, _capability)


# -- lifecycle lane: one pristine connection driven through §13 ----------------------------------


@check(
    "life.version-floor",
    L0,
    "7.1",
    "initialize with protocolVersion 0 (below the floor) fails with -32002",
    lane=Lane.LIFECYCLE,
)
def version_floor(ctx: Ctx) -> None:
    _skip_if_stateless(ctx)
    ctx.error("initialize", {"protocolVersion": 0, "client": {"name": "c", "version": "0"}}, -32002)


@check(
    "life.uninitialized-after-failure",
    L0,
    "13",
    "after a failed initialize, gated methods still get -32001",
    lane=Lane.LIFECYCLE,
)
def uninitialized_after_failure(ctx: Ctx) -> None:
    _skip_if_stateless(ctx)
    ctx.error(_first_gated(ctx), {}, -32001)


@check(
    "life.initialize",
    L0,
    "7.1",
    "initialize (retried, higher version, unknown client caps and fields) succeeds",
    lane=Lane.LIFECYCLE,
)
def initialize_tolerant(ctx: Ctx) -> None:
    result = ctx.result(
        "initialize",
        {
            "protocolVersion": 7,
            "client": {"name": "rcpkit-check", "version": "1", "x-conformance": True},
            "capabilities": {"x-conformance": {"probe": 1}, "futureCapability": {}},
            "x-conformance-field": [1, 2],
            "_meta": {"x-conformance-trace": "abc"},
        },
    )
    _expect_peer_info(ctx, result, "initialize")
    ctx.expect(1 <= result["protocolVersion"] <= 7, "negotiated version min(7, server) ≥ 1 (§7.1)")


@check(
    "life.reinitialize",
    L0,
    "13",
    "a second initialize after success is rejected with -32600",
    lane=Lane.LIFECYCLE,
)
def reinitialize_rejected(ctx: Ctx) -> None:
    if ctx.http_policy == "stateless":
        raise ctx.skip("stateless HTTP answers initialize idempotently (§5.2)")
    ctx.error("initialize", {"protocolVersion": 1, "client": {"name": "c", "version": "1"}}, -32600)


@check(
    "life.capabilities-stable",
    L0,
    "13.2",
    "info after initialize reports the session's capability set",
    lane=Lane.LIFECYCLE,
)
def capabilities_stable(ctx: Ctx) -> None:
    first = ctx.result("info", {})
    second = ctx.result("info", {})
    ctx.expect(first.get("capabilities") == second.get("capabilities"), "identical capabilities")
    ctx.expect(
        first.get("capabilities") == ctx.capabilities,
        "the capabilities returned by initialize (§13.2)",
        got=first.get("capabilities"),
    )


@check(
    "life.declares-level",
    L0,
    "14",
    "initialize states _meta.conformance as L0, L1 or L2",
    lane=Lane.LIFECYCLE,
)
def declares_level(ctx: Ctx) -> None:
    result = ctx.result("info", {})
    meta = result.get("_meta")
    level = meta.get("conformance") if isinstance(meta, dict) else None
    ctx.expect(level in ("L0", "L1", "L2"), '_meta.conformance "L0"|"L1"|"L2" (§14)', got=meta)


@check(
    "life.retrieval-capability",
    L0,
    "14.1",
    "at least one retrieval capability (embed, rerank, retrieve, graph) is advertised",
    lane=Lane.LIFECYCLE,
    profile=True,
)
def advertises_retrieval(ctx: Ctx) -> None:
    ctx.expect(
        any(cap in ctx.capabilities for cap in RETRIEVAL_CAPABILITIES),
        "one of embed/rerank/retrieve/graph in capabilities (§14.1 item 2)",
        got=sorted(ctx.capabilities),
    )


# -- fresh connections: shutdown and EOF -----------------------------------------------------


@check(
    "life.shutdown",
    L0,
    "7.12",
    "shutdown is answered with an object and later requests are not processed",
    lane=Lane.FRESH,
    transport="stdio",
)
def shutdown(ctx: Ctx) -> None:
    ctx.result("initialize", {"protocolVersion": 1, "client": {"name": "c", "version": "1"}})
    ctx.result("shutdown", {})
    ctx.send({"jsonrpc": "2.0", "id": "after-shutdown", "method": "ping", "params": {}})
    try:
        late = ctx.session.receive(timeout=1.5).obj
    except (ReceiveTimeout, ServerGone):
        return
    ctx.expect(False, "no response to a request sent after shutdown (§13.1)", got=late)


@check(
    "life.shutdown-preinit",
    L0,
    "13",
    "shutdown is callable before initialize",
    lane=Lane.FRESH,
    transport="stdio",
)
def shutdown_before_initialize(ctx: Ctx) -> None:
    ctx.result("shutdown", {})


@check(
    "life.eof",
    L0,
    "5.1",
    "EOF on stdin: the in-flight request is answered and the server exits",
    lane=Lane.FRESH,
    transport="stdio",
)
def eof_is_shutdown(ctx: Ctx) -> None:
    transport = ctx.transport
    assert isinstance(transport, StdioTransport)
    ctx.send({"jsonrpc": "2.0", "id": "last", "method": "ping", "params": {"nonce": 1}})
    transport.close_stdin()
    ctx.await_response("last")
    ctx.expect(
        transport.wait_exit(ctx.session.timeout) is not None,
        "the process to exit after EOF on stdin (§5.1, §7.12)",
    )


# -- envelope and id echo (§4, §4.7) ------------------------------------------------------


ID_VALUES: dict[str, Any] = {
    "string": "req-abc",
    "int": 7,
    "zero": 0,
    "negative": -42,
    "max-safe": 2**53 - 1,
    "min-safe": -(2**53 - 1),
    "unicode": "ид-✓-東京-😀",
    "empty-string": "",
    "numeric-string": "17",
    "escapes": 'quote"back\\slash\nnewline',
}


def _register_id_echo(name: str, value: Any) -> None:
    @check(f"id.echo.{name}", L0, "4.7", f"{name} id echoed with same type and value")
    def id_echo(ctx: Ctx) -> None:
        response = ctx.call("ping", {}, request_id=value)
        ctx.expect(same_id(value, response["id"]), "the same id back")


for _name, _value in ID_VALUES.items():
    _register_id_echo(_name, _value)


@check("id.echo.error-string", L0, "4.7", "string id echoed on an error response")
def id_echo_on_error_string(ctx: Ctx) -> None:
    ctx.error("x-conformance/undefined", {}, -32004, request_id="err-id")


@check("id.echo.error-number", L0, "4.7", "number id echoed on an error response")
def id_echo_on_error_number(ctx: Ctx) -> None:
    ctx.error("x-conformance/undefined", {}, -32004, request_id=-3)


@check("id.pipelined", L0, "4.7", "pipelined requests are each answered once, matched by id")
def pipelined(ctx: Ctx) -> None:
    ids = ["p1", 2, "p3"]
    for rid in ids:
        ctx.send({"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"nonce": rid}})
    for rid in ids:
        response = ctx.await_response(rid)
        ctx.expect(response.get("result", {}).get("nonce") == rid, "each nonce with its own id")


@check("env.jsonrpc", L0, "4", "responses carry jsonrpc 2.0 and exactly one of result/error")
def envelope(ctx: Ctx) -> None:
    ctx.call("ping", {})
    ctx.call("x-conformance/undefined", {})


@check("ping.nonce-string", L0, "7.15", "ping echoes a string nonce")
def ping_nonce_string(ctx: Ctx) -> None:
    result = ctx.result("ping", {"nonce": "n-ü-1"})
    ctx.expect(same_id("n-ü-1", result.get("nonce")), "nonce echoed")


@check("ping.nonce-number", L0, "7.15", "ping echoes a number nonce")
def ping_nonce_number(ctx: Ctx) -> None:
    result = ctx.result("ping", {"nonce": 123456789})
    ctx.expect(same_id(123456789, result.get("nonce")), "nonce echoed with its type")


@check("ping.no-params", L0, "7.15", "ping without params is answered")
def ping_without_params(ctx: Ctx) -> None:
    ctx.result("ping")


# -- malformed input (§4, §12) -------------------------------------------------------------


def _expect_null_id_error(ctx: Ctx, frame: bytes, code: int, expected: str) -> None:
    """Send a frame no request id can be read from; expect one ``code`` error with id null
    (over HTTP a 400 status is the transport's equivalent, §5.2)."""
    ctx.send_raw(frame + b"\n")
    if ctx.kind == "http" and _last_status(ctx) == 400:
        return
    reply = ctx.receive()
    ctx.expect(isinstance(reply, dict) and reply.get("id") is None
               and reply.get("error", {}).get("code") == code, expected)


@check("bad.parse-error", L0, "12", "invalid JSON yields -32700 with id null")
def parse_error(ctx: Ctx) -> None:
    _expect_null_id_error(ctx, b'{"jsonrpc":"2.0","id":1,"method":"ping",', -32700,
                          "error -32700 with id null (§12), or HTTP 400")


@check("bad.survives-parse-error", L0, "14.1", "the session continues after invalid JSON")
def survives_parse_error(ctx: Ctx) -> None:
    ctx.send_raw(b"not json at all\n")
    if not (ctx.kind == "http" and _last_status(ctx) == 400):
        ctx.receive()
    ctx.result("ping", {})


def _last_status(ctx: Ctx) -> int:
    transport = ctx.transport
    assert isinstance(transport, HttpTransport)
    return transport.exchanges[-1].status


def _register_invalid_request(name: str, title: str, raw: bytes) -> None:
    @check(f"bad.{name}", L0, "4.1", title)
    def invalid_request(ctx: Ctx) -> None:
        ctx.send_raw(raw + b"\n")
        if ctx.kind == "http" and _last_status(ctx) == 400:
            return
        response = ctx.receive()
        ctx.expect(
            isinstance(response, dict) and response.get("error", {}).get("code") == -32600,
            "error -32600 (§12), or HTTP 400",
        )


for _name, _title, _raw in (
    ("not-object", "a JSON number as request yields -32600", b"42"),
    ("string-request", "a JSON string as request yields -32600", b'"ping"'),
    ("no-method", "a request without method yields -32600", b'{"jsonrpc":"2.0","id":"nm"}'),
    (
        "method-not-string",
        "a non-string method yields -32600",
        b'{"jsonrpc":"2.0","id":"ms","method":12,"params":{}}',
    ),
    (
        "wrong-version",
        'jsonrpc "1.0" yields -32600',
        b'{"jsonrpc":"1.0","id":"wv","method":"ping","params":{}}',
    ),
):
    _register_invalid_request(_name, _title, _raw)


@check("bad.params-array", L0, "4.1", "positional (array) params are rejected (-32602/-32600)")
def params_array(ctx: Ctx) -> None:
    ctx.error(_first_gated(ctx), [1, 2], (-32602, -32600))


@check("bad.params-string", L0, "4.1", "string params are rejected (-32602/-32600)")
def params_string(ctx: Ctx) -> None:
    ctx.error(_first_gated(ctx), "query", (-32602, -32600))


# -- forward compatibility (§4.4, §4.6, §6.2) -----------------------------------------------------


@check("compat.unknown-member", L0, "4.6", "an unknown top-level request member is ignored")
def unknown_member(ctx: Ctx) -> None:
    ctx.result("ping", {}, extra={"x-conformance": {"a": 1}})


@check("compat.unknown-param", L0, "4.6", "an unknown params field is ignored")
def unknown_param(ctx: Ctx) -> None:
    ctx.result("ping", {"futureField": [1, {"b": None}]})


@check("compat.meta", L0, "4.4", "unknown _meta keys are ignored")
def unknown_meta(ctx: Ctx) -> None:
    ctx.result("ping", {"_meta": {"x-trace": "t-1", "anything": {"nested": True}}})


@check("compat.x-field", L0, "6.2", "x-vendor params fields are ignored")
def vendor_field(ctx: Ctx) -> None:
    ctx.result("info", {"x-acme-hint": "fast"})


@check("compat.null-is-absent", L0, "4.6", "an explicit null optional field is treated as absent")
def null_is_absent(ctx: Ctx) -> None:
    ctx.result("info", {"_meta": None})


# -- errors and gating (§7, §12) --------------------------------------------------------------


@check("err.unknown-method", L0, "12", "an undefined method yields -32004")
def unknown_method(ctx: Ctx) -> None:
    ctx.error("frobnicate", {}, -32004)


@check("err.unknown-submethod", L0, "12", "an undefined sub-method (retrieve/x) yields -32004")
def unknown_submethod(ctx: Ctx) -> None:
    ctx.error("retrieve/frobnicate", {}, -32004)


@check("err.method-case", L0, "4.5", "method names are case-sensitive (Ping is undefined)")
def method_case(ctx: Ctx) -> None:
    ctx.error("PING", {}, -32004)


@check(
    "err.vendor-method", L0, "6.2", "an unadvertised x-vendor method is rejected (-32004/-32003)"
)
def vendor_method(ctx: Ctx) -> None:
    ctx.error("x-conformance/probe", {}, (-32004, -32003))


def _register_unadvertised(method: str, capability: str) -> None:
    @check(f"err.unadvertised.{method}", L0, "12", f"{method} unadvertised yields -32003")
    def unadvertised(ctx: Ctx) -> None:
        if capability in ctx.capabilities:
            raise ctx.skip(f"{capability} is advertised")
        ctx.error(method, {}, -32003)


for _method, _capability in GATED_METHODS.items():
    _register_unadvertised(_method, _capability)


# -- notifications and cancel (§4.5, §7.14) -----------------------------------------------------


def _register_silent(name: str, title: str, message: dict[str, Any]) -> None:
    @check(f"notif.{name}", L0, "4.5", title)
    def not_answered(ctx: Ctx) -> None:
        ctx.send(message)
        ctx.expect_silence(title)


for _name, _title, _message in (
    (
        "unknown-protocol",
        "an unknown notifications/* is not answered",
        {"jsonrpc": "2.0", "method": "notifications/x-future", "params": {"a": 1}},
    ),
    (
        "undefined-method",
        "a notification for an undefined method is not answered",
        {"jsonrpc": "2.0", "method": "frobnicate", "params": {}},
    ),
    (
        "ping",
        "a ping without id is not answered",
        {"jsonrpc": "2.0", "method": "ping", "params": {"nonce": 1}},
    ),
    (
        "gated",
        "a gated method without id is not answered",
        {"jsonrpc": "2.0", "method": "retrieve", "params": {"query": "q", "k": 1}},
    ),
    (
        "client-progress",
        "a client-sent notifications/progress is ignored",
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}},
    ),
    (
        "cancel-unknown",
        "cancel for an unknown id is a silent no-op",
        {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "never-sent"}},
    ),
    (
        "cancel-malformed",
        "cancel without params.id is not answered",
        {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {}},
    ),
):
    _register_silent(_name, _title, _message)


@check("cancel.answered", L0, "7.14", "cancel for an already-answered id is a no-op")
def cancel_answered(ctx: Ctx) -> None:
    ctx.result("ping", {}, request_id="done-1")
    ctx.send({"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "done-1"}})
    ctx.expect_silence("cancel of an answered request")


@check("cancel.in-flight", L0, "7.14", "a cancelled request still gets exactly one response")
def cancel_in_flight(ctx: Ctx) -> None:
    method = "retrieve" if "retrieve" in ctx.capabilities else "ping"
    params: dict[str, Any] = {"query": "cancel me", "k": 5} if method == "retrieve" else {}
    ctx.send({"jsonrpc": "2.0", "id": "to-cancel", "method": method, "params": params})
    ctx.send({"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "to-cancel"}})
    response = ctx.await_response("to-cancel")
    ctx.expect_well_formed(response)
    error = response.get("error")
    ctx.expect(
        error is None or error.get("code") == -32006,
        "the normal result or -32006 (§7.14)",
    )
    ctx.expect_silence("the cancelled request (a second response)")


# -- batches (§11) -------------------------------------------------------------------------


def _batch(ctx: Ctx, members: list[Any]) -> Any:
    ctx.send(members)
    return ctx.receive()


def _ping(rid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {"nonce": rid}}


@check("batch.requests", L0, "11", "a batch gets an array with one response per request")
def batch_requests(ctx: Ctx) -> None:
    reply = _batch(ctx, [_ping("b1"), _ping(2), _ping("b3")])
    ctx.expect(isinstance(reply, list) and len(reply) == 3, "an array of 3 responses")
    ctx.expect(
        sorted(str(r.get("id")) for r in reply) == ["2", "b1", "b3"], "ids b1, 2, b3 (any order)"
    )
    for response in reply:
        ctx.expect_well_formed(response)


@check("batch.with-notification", L0, "11", "notifications in a batch get no response entry")
def batch_with_notification(ctx: Ctx) -> None:
    notification = {"jsonrpc": "2.0", "method": "notifications/x-none", "params": {}}
    reply = _batch(ctx, [_ping("bn1"), notification])
    ctx.expect(
        isinstance(reply, list) and [r.get("id") for r in reply] == ["bn1"],
        "an array with only the ping's response",
    )


@check("batch.only-notifications", L0, "11", "a batch of only notifications produces nothing")
def batch_only_notifications(ctx: Ctx) -> None:
    ctx.send(
        [
            {"jsonrpc": "2.0", "method": "notifications/x-a", "params": {}},
            {"jsonrpc": "2.0", "method": "notifications/cancel", "params": {"id": "nope"}},
        ]
    )
    ctx.expect_silence("an all-notification batch")


@check("batch.empty", L0, "11", "an empty batch yields one non-array -32600 with id null")
def batch_empty(ctx: Ctx) -> None:
    _expect_null_id_error(ctx, b"[]", -32600, "a single error object -32600 with id null")


@check("batch.invalid-member", L0, "11", "an invalid member yields -32600 (id null); others run")
def batch_invalid_member(ctx: Ctx) -> None:
    reply = _batch(ctx, [1, _ping("bi2")])
    ctx.expect(isinstance(reply, list) and len(reply) == 2, "two response entries")
    by_id = {str(r.get("id")): r for r in reply}
    ctx.expect(by_id.get("None", {}).get("error", {}).get("code") == -32600, "-32600, id null")
    ctx.expect("result" in by_id.get("bi2", {}), "the ping still answered")


@check("batch.mixed-errors", L0, "11", "one member's error does not fail the others")
def batch_mixed_errors(ctx: Ctx) -> None:
    undefined = {"jsonrpc": "2.0", "id": "bm1", "method": "frobnicate", "params": {}}
    reply = _batch(ctx, [undefined, _ping("bm2")])
    by_id = {str(r.get("id")): r for r in reply} if isinstance(reply, list) else {}
    ctx.expect(by_id.get("bm1", {}).get("error", {}).get("code") == -32004, "bm1 → -32004")
    ctx.expect("result" in by_id.get("bm2", {}), "bm2 → result")


@check("batch.gating", L0, "11", "capability gating applies inside batches")
def batch_gating(ctx: Ctx) -> None:
    missing = next((m for m, c in GATED_METHODS.items() if c not in ctx.capabilities), None)
    if missing is None:
        raise ctx.skip("every gated method is advertised")
    gated = {"jsonrpc": "2.0", "id": "bg1", "method": missing, "params": {}}
    reply = _batch(ctx, [gated, _ping("bg2")])
    by_id = {str(r.get("id")): r for r in reply} if isinstance(reply, list) else {}
    ctx.expect(by_id.get("bg1", {}).get("error", {}).get("code") == -32003, "bg1 → -32003")
    ctx.expect("result" in by_id.get("bg2", {}), "bg2 → result")


@check("batch.single-member", L0, "11", "a one-element batch is answered with a one-element array")
def batch_single(ctx: Ctx) -> None:
    reply = _batch(ctx, [_ping("bs1")])
    ctx.expect(isinstance(reply, list) and len(reply) == 1, "an array of one response")
