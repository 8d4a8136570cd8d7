"""Transport checks: stdio framing (§5.1), HTTP status/content-type/SSE/CORS/session
rules (§5.2), and whole-run checks over every recorded frame (§4.5, §4.6, §4.7, §9,
§12, §17.1, and optionally the normative JSON Schema)."""

from __future__ import annotations

import json
import time
from typing import Any

from rcpkit.conformance.driver import (
    HttpExchange,
    HttpTransport,
    ReceiveTimeout,
    StdioTransport,
    encode,
    sse_payloads,
)
from rcpkit.conformance.model import Ctx, Lane, Level, Session, check, short

L0, L2 = Level.L0, Level.L2
SPEC_ERROR_CODES = frozenset(
    {
        -32700,
        -32600,
        -32601,
        -32602,
        -32603,
        -32001,
        -32002,
        -32003,
        -32004,
        -32005,
        -32006,
        -32010,
        -32011,
        -32012,
        -32013,
        -32014,
        -32015,
        -32016,
    }
)
SERVER_NOTIFICATIONS = ("notifications/progress", "notifications/log")


def _ping(rid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "ping", "params": {}}


# -- stdio framing (§5.1) ----------------------------------------------------------------------


@check(
    "stdio.blank-lines", L0, "5.1", "blank lines between messages are ignored", transport="stdio"
)
def blank_lines(ctx: Ctx) -> None:
    ctx.send_raw(b"\n\n" + encode(_ping("blank")) + b"\n\n \n")
    ctx.await_response("blank")


@check(
    "stdio.split-write",
    L0,
    "5.1",
    "a message split over several writes is buffered",
    transport="stdio",
)
def split_write(ctx: Ctx) -> None:
    ctx.session.note_sent(_ping("split"))
    data = encode(_ping("split")) + b"\n"
    for start in range(0, len(data), 7):
        ctx.transport.send_raw(data[start : start + 7])
        time.sleep(0.02)
    ctx.await_response("split")


@check(
    "stdio.two-in-one-write",
    L0,
    "5.1",
    "two messages in one write are both answered",
    transport="stdio",
)
def two_in_one_write(ctx: Ctx) -> None:
    for rid in ("w1", "w2"):
        ctx.session.note_sent(_ping(rid))
    ctx.transport.send_raw(encode(_ping("w1")) + b"\n" + encode(_ping("w2")) + b"\n")
    ctx.await_response("w1")
    ctx.await_response("w2")


@check(
    "stdio.utf8-multibyte-split",
    L0,
    "5.1",
    "a write splitting a UTF-8 character is buffered",
    transport="stdio",
)
def utf8_split(ctx: Ctx) -> None:
    message = {"jsonrpc": "2.0", "id": "utf8", "method": "ping", "params": {"nonce": "东京"}}
    ctx.session.note_sent(message)
    data = encode(message) + b"\n"
    cut = data.index("东".encode()) + 1
    ctx.transport.send_raw(data[:cut])
    time.sleep(0.05)
    ctx.transport.send_raw(data[cut:])
    response = ctx.await_response("utf8")
    ctx.expect(response.get("result", {}).get("nonce") == "东京", "the nonce intact")


def _stdio_sessions(ctx: Ctx) -> list[StdioTransport]:
    return [s.transport for s in ctx.sessions if isinstance(s.transport, StdioTransport)]


@check(
    "stdio.no-bom",
    L0,
    "5.1",
    "stdout never starts with a UTF-8 BOM",
    lane=Lane.FINAL,
    transport="stdio",
)
def no_bom(ctx: Ctx) -> None:
    ctx.expect(not any(t.log.leading_bom for t in _stdio_sessions(ctx)), "no BOM on stdout")


@check(
    "stdio.frames-only",
    L0,
    "5.1",
    "stdout carries nothing but JSON-RPC frames",
    lane=Lane.FINAL,
    transport="stdio",
)
def frames_only(ctx: Ctx) -> None:
    noise = [line for t in _stdio_sessions(ctx) for line in t.log.noise]
    ctx.expect(noise == [], "only JSON lines on stdout", got=noise[:3])


@check(
    "stdio.newline-terminated",
    L0,
    "5.1",
    "every frame ends with a newline",
    lane=Lane.FINAL,
    transport="stdio",
)
def newline_terminated(ctx: Ctx) -> None:
    tails = [t.log.unterminated for t in _stdio_sessions(ctx) if t.log.unterminated.strip()]
    ctx.expect(tails == [], "no unterminated trailing frame", got=tails[:2])


@check(
    "stdio.stderr-not-protocol",
    L0,
    "5.1",
    "stderr carries no JSON-RPC messages",
    lane=Lane.FINAL,
    transport="stdio",
)
def stderr_not_protocol(ctx: Ctx) -> None:
    for transport in _stdio_sessions(ctx):
        for line in transport.log.stderr:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            ctx.expect(
                not (isinstance(obj, dict) and obj.get("jsonrpc") == "2.0"),
                "no JSON-RPC frame on stderr",
                got=line,
            )


# -- HTTP (§5.2) ---------------------------------------------------------------------------


def _http(ctx: Ctx) -> HttpTransport:
    transport = ctx.transport
    assert isinstance(transport, HttpTransport)
    return transport


def _post(ctx: Ctx, path: str, message: Any, headers: dict[str, str] | None = None) -> HttpExchange:
    ctx.session.note_sent(message)
    ctx.last_sent = {"path": path, "body": message, **({"headers": headers} if headers else {})}
    exchange = _http(ctx).post(path, encode(message), headers=headers)
    ctx.last_got = {
        "status": exchange.status,
        "content-type": exchange.headers.get("content-type"),
        "body": exchange.body.decode("utf-8", "replace")[:200],
    }
    while True:  # the frames were queued by post(); consume them here
        try:
            ctx.session.receive(0)
        except ReceiveTimeout:
            break
    return exchange


def _json_body(ctx: Ctx, exchange: HttpExchange) -> Any:
    ctx.expect(exchange.status == 200, "HTTP 200 for a JSON-RPC response (§5.2)")
    ctx.expect(
        exchange.headers.get("content-type", "").startswith("application/json"),
        "Content-Type: application/json (§5.2)",
    )
    try:
        return json.loads(exchange.body)
    except ValueError:
        raise ctx.fail("a JSON body") from None


@check("http.200-result", L0, "5.2", "a success is HTTP 200 application/json", transport="http")
def http_result(ctx: Ctx) -> None:
    body = _json_body(ctx, _post(ctx, "/ping", _ping("h1")))
    ctx.expect(isinstance(body, dict) and "result" in body, "a result body")


@check("http.200-error", L0, "5.2", "a JSON-RPC error is still HTTP 200", transport="http")
def http_error(ctx: Ctx) -> None:
    message = {"jsonrpc": "2.0", "id": "h2", "method": "frobnicate", "params": {}}
    body = _json_body(ctx, _post(ctx, "/frobnicate", message))
    ctx.expect(body.get("error", {}).get("code") == -32004, "error -32004 in the body")


@check("http.notification", L0, "5.2", "a notification gets 202/204 and no body", transport="http")
def http_notification(ctx: Ctx) -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/x-none", "params": {}}
    exchange = _post(ctx, "/notifications/x-none", message)
    ctx.expect(exchange.status in (202, 204) and not exchange.body.strip(), "204 without body")


@check(
    "http.batch-notifications",
    L0,
    "11",
    "an all-notification batch gets no HTTP body",
    transport="http",
)
def http_batch_notifications(ctx: Ctx) -> None:
    message = [{"jsonrpc": "2.0", "method": "notifications/x-none", "params": {}}]
    exchange = _post(ctx, "", message)
    ctx.expect(exchange.status in (202, 204) and not exchange.body.strip(), "204 without body")


@check(
    "http.batch-at-base", L0, "11", "a batch posted to the base path is answered", transport="http"
)
def http_batch(ctx: Ctx) -> None:
    body = _json_body(ctx, _post(ctx, "", [_ping("hb1"), _ping("hb2")]))
    ctx.expect(isinstance(body, list) and len(body) == 2, "an array of two responses")


@check("http.path-mismatch", L0, "5.2", "path/body method mismatch yields -32600", transport="http")
def http_path_mismatch(ctx: Ctx) -> None:
    body = _json_body(ctx, _post(ctx, "/info", _ping("hm")))
    ctx.expect(body.get("error", {}).get("code") == -32600, "error -32600")


@check(
    "http.buffered-without-sse",
    L0,
    "5.2",
    "without Accept: text/event-stream the reply is one JSON body",
    transport="http",
)
def http_buffered(ctx: Ctx) -> None:
    method = "retrieve" if "retrieve" in ctx.capabilities else "ping"
    params: dict[str, Any] = {"query": "q", "k": 2, "_meta": {"progressToken": "hx"}}
    message = {"jsonrpc": "2.0", "id": "hs", "method": method, "params": params}
    body = _json_body(ctx, _post(ctx, f"/{method}", message))
    ctx.expect(isinstance(body, dict) and body.get("id") == "hs", "the response object")


@check(
    "http.sse-framing",
    L2,
    "5.2",
    "SSE: data: frames, progress then one final response",
    transport="http",
    requires=("streaming", "retrieve"),
)
def http_sse(ctx: Ctx) -> None:
    params = {"query": "retrieval", "k": 2, "_meta": {"progressToken": "sse-1"}}
    message = {"jsonrpc": "2.0", "id": "sse", "method": "retrieve", "params": params}
    exchange = _post(ctx, "/retrieve", message, {"Accept": "text/event-stream"})
    ctx.expect(exchange.status == 200, "HTTP 200")
    if not exchange.headers.get("content-type", "").startswith("text/event-stream"):
        _json_body(ctx, exchange)
        return
    payloads = sse_payloads(exchange.body)
    ctx.expect(payloads != [], "at least the final frame")
    frames = [json.loads(p) for p in payloads]
    ctx.expect(all(b"\n" not in p for p in payloads), "one data: line per frame")
    final = frames[-1]
    ctx.expect(isinstance(final, dict) and final.get("id") == "sse", "final frame = response")
    for frame in frames[:-1]:
        ctx.expect(
            frame.get("method") == "notifications/progress"
            and frame.get("params", {}).get("progressToken") == "sse-1",
            "progress frames echoing the token before the response (§9)",
            got=frame,
        )


@check(
    "http.cors-preflight", L0, "5.2", "CORS preflight, when enabled, allows POST", transport="http"
)
def http_cors(ctx: Ctx) -> None:
    headers = {
        "Origin": "https://example.org",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    exchange = _http(ctx).post("/ping", b"", headers=headers, method="OPTIONS")
    ctx.last_sent = {"method": "OPTIONS", "headers": headers}
    ctx.last_got = {"status": exchange.status, "headers": exchange.headers}
    if "access-control-allow-origin" not in exchange.headers:
        raise ctx.skip("CORS not enabled")
    allowed = exchange.headers.get("access-control-allow-methods", "")
    ctx.expect(200 <= exchange.status < 300, "2xx preflight")
    ctx.expect("POST" in allowed.upper() or "*" in allowed, "POST among allowed methods")


@check(
    "http.session-required",
    L0,
    "5.2",
    "token policy: a request without RCP-Session → -32001",
    transport="http",
)
def http_session_required(ctx: Ctx) -> None:
    if ctx.http_policy != "token":
        raise ctx.skip(f"session policy is {ctx.http_policy}, not token")
    method = next(iter(m for m in ("retrieve", "embed", "rerank") if m in ctx.capabilities), None)
    if method is None:
        raise ctx.skip("no gated method to probe")
    message = {"jsonrpc": "2.0", "id": "ns", "method": method, "params": {}}
    transport = _http(ctx)
    token = transport.headers.pop("RCP-Session")
    try:
        body = _json_body(ctx, _post(ctx, f"/{method}", message))
    finally:
        transport.headers["RCP-Session"] = token
    ctx.expect(body.get("error", {}).get("code") == -32001, "-32001 without the session token")


# -- whole run (every recorded frame) ------------------------------------------------------------


def _members(obj: Any) -> list[Any]:
    return obj if isinstance(obj, list) else [obj]


def _all_members(ctx: Ctx) -> list[tuple[Session, Any]]:
    return [
        (session, member)
        for session in ctx.sessions
        for frame in session.transport.log.frames
        for member in _members(frame.obj)
    ]


@check("wire.json-rpc", L0, "4", "every frame is a JSON-RPC 2.0 message", lane=Lane.FINAL)
def wire_json_rpc(ctx: Ctx) -> None:
    for _, member in _all_members(ctx):
        ctx.expect(
            isinstance(member, dict)
            and member.get("jsonrpc") == "2.0"
            and ("method" in member or "result" in member or "error" in member),
            'an object with "jsonrpc":"2.0" and method/result/error',
            got=member,
        )


@check("wire.finite", L0, "4.6", "no frame contains NaN or Infinity", lane=Lane.FINAL)
def wire_finite(ctx: Ctx) -> None:
    for session in ctx.sessions:
        for frame in session.transport.log.frames:
            ctx.expect(not frame.nonfinite, "finite numbers only", got=frame.raw)


@check(
    "wire.error-codes",
    L0,
    "12",
    "no custom code inside the reserved -32000..-32099 block",
    lane=Lane.FINAL,
)
def wire_error_codes(ctx: Ctx) -> None:
    for _, member in _all_members(ctx):
        error = member.get("error") if isinstance(member, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), int):
            code = error["code"]
            ctx.expect(
                code in SPEC_ERROR_CODES or not -32099 <= code <= -32000,
                "a code from the §12 table",
                got=member,
            )


@check(
    "wire.answered-once",
    L0,
    "13.1",
    "no request id is answered more often than sent",
    lane=Lane.FINAL,
)
def wire_answered_once(ctx: Ctx) -> None:
    for session in ctx.sessions:
        for key, count in session.responses_per_id.items():
            if key == "null":
                continue
            ctx.expect(
                count <= session.requests_per_id.get(key, 0),
                f"at most {session.requests_per_id.get(key, 0)} response(s) for id {key}",
                got=f"{count} responses",
            )


@check(
    "wire.server-notifications",
    L0,
    "4.5",
    "server-initiated frames are only progress/log notifications",
    lane=Lane.FINAL,
)
def wire_server_notifications(ctx: Ctx) -> None:
    for _, member in _all_members(ctx):
        if isinstance(member, dict) and "method" in member:
            ctx.expect(
                member.get("method") in SERVER_NOTIFICATIONS and "id" not in member,
                "notifications/progress or notifications/log without id",
                got=member,
            )


@check(
    "wire.progress-opt-in",
    L0,
    "9",
    "progress only for requests that carried a token",
    lane=Lane.FINAL,
)
def wire_progress_opt_in(ctx: Ctx) -> None:
    for session, member in ((s, m) for s, m in _all_members(ctx) if isinstance(m, dict)):
        if member.get("method") == "notifications/progress":
            token = (member.get("params") or {}).get("progressToken")
            ctx.expect(short(token) in session.progress_tokens, "a token we sent", got=member)


@check("wire.log-opt-in", L0, "7.1", "no notifications/log without client opt-in", lane=Lane.FINAL)
def wire_log_opt_in(ctx: Ctx) -> None:
    for session, member in _all_members(ctx):
        if isinstance(member, dict) and member.get("method") == "notifications/log":
            ctx.expect(session.log_opt_in, "log frames only after _meta.logLevel", got=member)


@check(
    "schema.frames",
    L0,
    "14.4",
    "every frame validates against the JSON Schema (--schema)",
    lane=Lane.FINAL,
)
def schema_frames(ctx: Ctx) -> None:
    if ctx.schema_path is None:
        raise ctx.skip("no --schema given")
    from jsonschema import Draft202012Validator

    with open(ctx.schema_path, encoding="utf-8") as handle:
        root = json.load(handle)
    frame_validator = Draft202012Validator(root)
    result_schema = {k: v for k, v in root.items() if k not in ("oneOf", "anyOf", "$ref")}
    result_validator = Draft202012Validator({**result_schema, "$ref": "#/$defs/ResultFor"})
    for session in ctx.sessions:
        for frame in session.transport.log.frames:
            error = next(iter(frame_validator.iter_errors(frame.obj)), None)
            ctx.expect(
                error is None, f"a schema-valid frame ({error and error.message})", got=frame.obj
            )
            for member in _members(frame.obj):
                if not isinstance(member, dict) or "result" not in member:
                    continue
                method = session.methods_by_id.get(short(member.get("id")))
                if method is None:
                    continue
                pair = {"method": method, "result": member["result"]}
                error = next(iter(result_validator.iter_errors(pair)), None)
                ctx.expect(
                    error is None,
                    f"{method} result matches ResultFor ({error and error.message})",
                    got=member,
                )
