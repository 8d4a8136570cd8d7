"""A raw NDJSON RCP server whose behaviour is scripted by the ``retrieve`` query (tests only).

Queries: ``sleep:S`` answers after S seconds (or -32006 once cancelled);
``stubborn:S`` ignores cancels and answers in full after S seconds;
``ratelimit:N`` fails the first N calls with -32011 (retryAfterMs 30);
``die`` exits without answering (code 3); ``progress`` sends progress frames with partial
hits; ``log`` sends a notifications/log; ``weird`` sends unknown notifications,
unknown fields and an unknown error code. ``x-test/cancels`` returns the ids of
the cancel notifications received so far. Environment: ``SCRIPTED_STDERR_BYTES``
floods stderr first; ``SCRIPTED_IGNORE_EOF`` answers initialize, then ignores EOF
and SIGTERM.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

lock = threading.Lock()
cancelled: dict[object, threading.Event] = {}
cancel_log: list[object] = []
counters: dict[str, int] = {}


def send(message: dict) -> None:
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def reply(id_, result=None, error=None) -> None:
    message = {"jsonrpc": "2.0", "id": id_}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    send(message)


def hit(doc_id: str, score: float) -> dict:
    return {"id": doc_id, "score": score, "text": f"text of {doc_id}", "x-unknown": 1}


def retrieve(id_, params: dict) -> None:
    query = str(params.get("query"))
    token = (params.get("_meta") or {}).get("progressToken")
    kind, _, arg = query.partition(":")
    event = cancelled.setdefault(id_, threading.Event())
    if kind == "sleep":
        if event.wait(float(arg)):
            reply(id_, error={"code": -32006, "message": "cancelled"})
            return
    elif kind == "stubborn":
        time.sleep(float(arg))
    elif kind == "ratelimit":
        with lock:
            counters[query] = counters.get(query, 0) + 1
            count = counters[query]
        if count <= int(arg):
            reply(id_, error={"code": -32011, "message": "slow down",
                              "data": {"retryAfterMs": 30}})
            return
        reply(id_, {"hits": [hit("ok", 1.0)], "usage": {"notes": [f"attempt {count}"]}})
        return
    elif kind == "die":
        os._exit(3)
    elif kind == "progress" and token is not None:
        for step in range(3):
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": (step + 1) / 4,
                             "stage": "recall", "partial": {"hits": [hit(f"p{step}", 0.5)]}}})
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": "someone-else", "progress": 0.1}})
    elif kind == "log":
        send({"jsonrpc": "2.0", "method": "notifications/log",
              "params": {"level": "warning", "message": "disk almost full", "logger": "store"}})
    elif kind == "weird":
        send({"jsonrpc": "2.0", "method": "notifications/future-thing", "params": {"a": 1}})
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": token, "progress": "not-a-number"}})
        reply(id_, error={"code": -31950, "message": "vendor failure", "data": {"why": "x"}})
        return
    reply(id_, {"hits": [hit(query, 2.0), hit("b", 1.0)], "x-extra": True,
                "_meta": {"received": params.get("_meta")}})


def handle(message: dict) -> None:
    method = message.get("method")
    params = message.get("params") or {}
    if "id" not in message:
        if method == "notifications/cancel":
            with lock:
                cancel_log.append(params.get("id"))
            cancelled.setdefault(params.get("id"), threading.Event()).set()
        return
    id_ = message["id"]
    if method == "initialize":
        reply(id_, {"protocolVersion": 1, "server": {"name": "scripted", "version": "0"},
                    "capabilities": {"retrieve": {"maxK": 10}, "streaming": {}, "log": {},
                                     "x-test": {}, "x-future-cap": {"n": 1}},
                    "_meta": {"conformance": "L0"}, "x-unknown": "ignored"})
    elif method == "ping":
        reply(id_, {"nonce": params.get("nonce")} if "nonce" in params else {})
    elif method == "retrieve":
        threading.Thread(target=retrieve, args=(id_, params), daemon=True).start()
    elif method == "x-test/cancels":
        with lock:
            seen = list(cancel_log)
        reply(id_, {"ids": seen})
    elif method == "shutdown":
        reply(id_, {})
    else:
        reply(id_, error={"code": -32004, "message": f"unknown method {method}"})


def main() -> None:
    print("scripted server starting", file=sys.stderr, flush=True)
    noise = int(os.environ.get("SCRIPTED_STDERR_BYTES", "0"))
    if noise:  # more than a pipe holds: blocks unless the client drains stderr
        sys.stderr.write(("x" * 99 + "\n") * (noise // 100))
        sys.stderr.flush()
    if os.environ.get("SCRIPTED_IGNORE_EOF"):  # a child that must be terminated
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        handle(json.loads(sys.stdin.readline()))
        time.sleep(60)
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))
    time.sleep(0.05)  # let answering threads finish, then exit on EOF (§5.1)


if __name__ == "__main__":
    main()
