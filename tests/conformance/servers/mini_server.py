"""A small, self-contained, stdlib-only RCP/1 stdio server that aims to be correct (L1).

It is the harness's control subject: ``rcpkit check`` must PASS it as-is and FAIL
it under every ``--mutate NAME``, each of which introduces exactly one bug.
``--pagination`` adds §10 cursors and declares L2 (streaming and pagination); the
paging mutations imply it. ``--pagination unbounded`` keeps ``maxK`` out of the capabilities
(the server still clamps to it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import math
import struct
import sys
import threading
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MUTATIONS = {
    "wrong-id-type": "numeric ids are echoed as strings (§4.7)",
    "answer-notification": "notifications get an error response (§4.5)",
    "nan-score": "a hit score is NaN (§4.6)",
    "stdout-log": "a log line is printed on stdout (§5.1)",
    "too-many-hits": "retrieve returns k+1 hits (§7.7)",
    "wrong-error-code": "an undefined method yields -32601 instead of -32004 (§12)",
    "lying-conformance": "_meta.conformance claims L2 (§14.5)",
    "no-init-gate": "gated methods work before initialize (§13)",
    "reinitialize": "a second initialize succeeds (§13)",
    "empty-batch-array": "an empty batch is answered with [] (§11)",
    "progress-without-token": "progress is emitted without a progressToken (§9)",
    "ignore-min-score": "minScore is ignored (§7.7)",
    "accept-unknown-filter-field": "filters on unadvertised fields are accepted (§8)",
    "delete-counts-absent": "index/delete counts absent ids (§7.11)",
    "bom": "stdout starts with a UTF-8 BOM (§5.1)",
    "hang-on-batch": "batches are never answered (a hung server)",
    "repeat-cursor": "a page after the first repeats the cursor that led to it (§10)",
    "endless-cursor": "a nextCursor past the last hit, forever (§10)",
    "pages-past-maxk": "pages wrap around the ranking, past maxK (§7.7, §10)",
}
PAGING_MUTATIONS = ("repeat-cursor", "endless-cursor", "pages-past-maxk")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
NOT_INITIALIZED, VERSION_MISMATCH, CAPABILITY_MISSING = -32001, -32002, -32003
UNKNOWN_METHOD, OPTION_UNSUPPORTED = -32004, -32005

MAX_K, DIMENSION = 20, 8
MODES = ("dense", "sparse", "hybrid")
FIELDS = {"lang": "keyword", "year": "int", "draft": "bool"}
OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "exists")
ALL_OPERATORS = (*OPERATORS, "contains")
CAPABILITIES: dict[str, Any] = {
    "retrieve": {"maxK": MAX_K, "modes": list(MODES), "fusion": ["rrf"], "defaultMode": "hybrid"},
    "filter": {"fields": FIELDS, "operators": list(OPERATORS)},
    "citations": {},
    "streaming": {},
    "index": {"writable": True},
    "embed": {
        "dimension": DIMENSION,
        "identity": "mini-hash-8",
        "encodings": ["json", "f32-base64"],
    },
}
GATES = {
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
SEED_DOCS = [
    ("d1", "retrieval augmented generation grounds answers in retrieved documents", "en", 2023),
    ("d2", "hybrid search fuses sparse and dense retrieval scores", "en", 2024),
    ("d3", "the eiffel tower is a wrought iron tower in paris", "en", 2020),
    ("d4", "la recherche hybride combine plusieurs signaux", "fr", 2022),
    ("d5", "a protocol for retrieval makes search engines interchangeable", "en", 2025),
    ("d6", "data pipelines chunk documents before indexing them for search", "en", 2021),
]


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def invalid(field: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"invalid {field}", {"field": field})


def unsupported(option: str) -> RpcError:
    return RpcError(OPTION_UNSUPPORTED, f"unsupported {option}", {"option": option})


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def trigrams(text: str) -> dict[str, int]:
    padded = f"  {text.lower()} "
    grams: dict[str, int] = {}
    for i in range(len(padded) - 2):
        grams[padded[i : i + 3]] = grams.get(padded[i : i + 3], 0) + 1
    return grams


def cosine(a: dict[str, int], b: dict[str, int]) -> float:
    dot = sum(v * b.get(k, 0) for k, v in a.items())
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


def embed_text(text: str) -> list[float]:
    vector = [0.0] * DIMENSION
    for gram, count in trigrams(text).items():
        vector[zlib.crc32(gram.encode()) % DIMENSION] += count
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class MiniServer:
    def __init__(self, mutation: str | None, pagination: str | None = None) -> None:
        self.mutation = mutation
        self.pagination = pagination or ("bounded" if mutation in PAGING_MUTATIONS else None)
        self.initialized = False
        self.shut_down = False
        self.minted = 0
        self.docs: dict[str, dict[str, Any]] = {
            doc_id: {"text": text, "meta": {"lang": lang, "year": year, "draft": False}}
            for doc_id, text, lang, year in SEED_DOCS
        }
        self.out: Any = sys.stdout.buffer
        self.session_token: str | None = None

    # -- framing ---------------------------------------------------------------------------------
    def write(self, message: Any) -> None:
        allow_nan = self.mutation == "nan-score"
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)
        self.out.write(line.encode("utf-8") + b"\n")
        self.out.flush()

    def serve(self) -> None:
        if self.mutation == "bom":
            self.out.write(b"\xef\xbb\xbf")
        if self.mutation == "stdout-log":
            self.out.write(b"mini server ready\n")
            self.out.flush()
        for raw in sys.stdin.buffer:
            if not raw.strip():
                continue
            self.handle_line(raw)
            if self.shut_down:
                break

    def handle_line(self, raw: bytes) -> None:
        try:
            message = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            self.write(error_response(None, PARSE_ERROR, "parse error"))
            return
        if isinstance(message, list):
            if self.mutation == "hang-on-batch":
                return
            if not message:
                empty = [] if self.mutation == "empty-batch-array" else None
                self.write(
                    empty
                    if empty is not None
                    else error_response(None, INVALID_REQUEST, "empty batch")
                )
                return
            replies = [r for r in (self.handle(m) for m in message) if r is not None]
            if replies:
                self.write(replies)
            return
        reply = self.handle(message)
        if reply is not None:
            self.write(reply)

    # -- dispatch -------------------------------------------------------------------------------
    def handle(self, message: Any) -> dict[str, Any] | None:
        valid_id = isinstance(message, dict) and (
            isinstance(message.get("id"), str) or is_int(message.get("id"))
        )
        request_id = message["id"] if valid_id else None
        if self.mutation == "wrong-id-type" and is_int(request_id):
            request_id = str(request_id)
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
            or ("id" in message and not valid_id)
        ):
            return error_response(request_id, INVALID_REQUEST, "invalid request")
        method = message["method"]
        params = message.get("params", {})
        if "id" not in message:
            if self.mutation == "answer-notification" and not method.startswith("notifications/"):
                return error_response(None, UNKNOWN_METHOD, "notification answered")
            return None
        if not isinstance(params, dict):
            return error_response(request_id, INVALID_PARAMS, "params must be an object")
        params = {k: v for k, v in params.items() if v is not None}
        try:
            result = self.dispatch(method, params)
        except RpcError as exc:
            return error_response(request_id, exc.code, exc.message, exc.data)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return self.initialize(params)
        if method == "info":
            return self.info(1)
        if method == "ping":
            return {"nonce": params["nonce"]} if "nonce" in params else {}
        if method == "shutdown":
            self.shut_down = True
            return {}
        if method not in GATES:
            code = -32601 if self.mutation == "wrong-error-code" else UNKNOWN_METHOD
            raise RpcError(code, "unknown method")
        if not self.initialized and self.mutation != "no-init-gate":
            raise RpcError(NOT_INITIALIZED, "call initialize first")
        if GATES[method] not in self.info(1)["capabilities"]:
            raise RpcError(CAPABILITY_MISSING, "capability not advertised")
        handler = {
            "retrieve": self.retrieve,
            "embed": self.embed,
            "index/add": self.index_add,
            "index/delete": self.index_delete,
        }[method]
        return handler(params)

    def info(self, version: int) -> dict[str, Any]:
        level = "L2" if self.mutation == "lying-conformance" or self.pagination else "L1"
        capabilities = {**CAPABILITIES, "pagination": {}} if self.pagination else CAPABILITIES
        if self.pagination == "unbounded":
            retrieve = {k: v for k, v in CAPABILITIES["retrieve"].items() if k != "maxK"}
            capabilities = {**capabilities, "retrieve": retrieve}
        return {
            "protocolVersion": version,
            "server": {"name": "mini", "version": "1.0"},
            "capabilities": capabilities,
            "_meta": {"conformance": level},
        }

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.initialized and self.mutation != "reinitialize":
            raise RpcError(INVALID_REQUEST, "already initialized")
        version = params.get("protocolVersion", 1)
        if not is_int(version):
            raise invalid("protocolVersion")
        if min(version, 1) < 1:
            raise RpcError(VERSION_MISMATCH, "no common protocol version")
        self.initialized = True
        result = self.info(min(version, 1))
        if self.session_token is not None:
            result["_meta"]["session"] = self.session_token
        return result

    # -- retrieve (§7.7) ------------------------------------------------------------------------
    def retrieve(self, params: dict[str, Any]) -> dict[str, Any]:
        query = text_of(params.get("query"), "query")
        k = positive_int(params, "k", 10)
        candidate_k = positive_int(params, "candidateK", max(k, 100))
        if candidate_k < k:
            raise invalid("candidateK")
        strict = params.get("strict", True)
        if not isinstance(strict, bool):
            raise invalid("strict")
        min_score = params.get("minScore")
        if min_score is not None and (
            isinstance(min_score, bool) or not isinstance(min_score, int | float)
        ):
            raise invalid("minScore")
        mode = self.option(params, "mode", MODES, "hybrid", strict)
        self.reject_unadvertised(params, strict)
        node = params.get("filter")
        if node is not None:
            validate_filter(node, "filter", self.mutation)
        self.progress(params, 0.5)
        hits = []
        for doc_id, doc in self.docs.items():
            if node is not None and not matches(node, doc["meta"]):
                continue
            score = self.score(mode, query, doc["text"])
            if score <= 0 or (
                min_score is not None and score < min_score and self.mutation != "ignore-min-score"
            ):
                continue
            hits.append(
                {
                    "id": doc_id,
                    "score": round(score, 6),
                    "text": doc["text"],
                    "meta": doc["meta"],
                    "citation": {"source": f"mini:{doc_id}"},
                }
            )
        hits.sort(key=lambda hit: (-hit["score"], hit["id"]))
        limit = min(k, MAX_K) + (1 if self.mutation == "too-many-hits" else 0)
        page, next_cursor = self.page(params, hits, limit)
        if self.mutation == "nan-score" and page:
            page[0]["score"] = float("nan")
        self.progress(params, 1.0)
        result: dict[str, Any] = {
            "hits": page,
            "usage": {"candidates": min(candidate_k, len(self.docs))},
        }
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    def page(
        self, params: dict[str, Any], hits: list[dict[str, Any]], limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """§10: a cursor names an offset into the first ``maxK`` hits of the same query."""
        if not self.pagination:
            if "cursor" in params:
                raise unsupported("cursor")
            return hits[:limit], None
        query = {key: value for key, value in params.items() if key not in ("cursor", "_meta")}
        fingerprint = f"{zlib.crc32(json.dumps(query, sort_keys=True).encode()):08x}"
        offset = 0
        if "cursor" in params:
            cursor = params["cursor"]
            prefix, _, start = cursor.rpartition(".") if isinstance(cursor, str) else ("", "", "")
            if prefix != f"mini-page.{fingerprint}" or not start.isdigit():
                raise invalid("cursor")
            offset = int(start)
        reachable = min(len(hits), MAX_K)
        if self.mutation == "pages-past-maxk" and hits:  # continuation pages wrap around
            wrapped = [hits[(offset + i) % len(hits)] for i in range(limit)]
            return wrapped if offset else hits[:limit], f"mini-page.{fingerprint}.{offset + limit}"
        page = hits[offset : min(offset + limit, reachable)]
        end = offset + len(page)
        if self.mutation == "repeat-cursor" and offset:
            return page, f"mini-page.{fingerprint}.{offset}"  # the cursor that led here
        if self.mutation == "endless-cursor":
            return page, f"mini-page.{fingerprint}.{offset + limit}"
        if end < reachable:
            return page, f"mini-page.{fingerprint}.{end}"
        return page, None

    @staticmethod
    def score(mode: str, query: str, text: str) -> float:
        terms = set(query.lower().split())
        sparse = float(sum(1 for word in text.lower().split() if word in terms))
        dense = cosine(trigrams(query), trigrams(text))
        return {"sparse": sparse, "dense": dense, "hybrid": sparse + dense}[mode]

    @staticmethod
    def option(
        params: dict[str, Any], name: str, allowed: tuple[str, ...], default: str, strict: bool
    ) -> str:
        value = params.get(name, default)
        if value in allowed:
            return str(value)
        if strict:
            raise unsupported(f"{name}:{value}")
        return default

    @staticmethod
    def reject_unadvertised(params: dict[str, Any], strict: bool) -> None:
        fusion = params.get("fusion")
        requested = {
            "rerank": params.get("rerank", False) is not False,
            "mmr": "mmr" in params,
            "unit": params.get("unit", "chunk") not in ("chunk", "passage"),
            "rewrite": params.get("rewrite", False) is not False,
            "fusion": isinstance(fusion, dict) and fusion.get("method", "rrf") != "rrf",
        }
        query = params.get("query")
        blocks = query if isinstance(query, list) else [query]
        if any(isinstance(b, dict) and b.get("type") != "text" for b in blocks):
            raise unsupported("modality")
        for option, asked in requested.items():
            if asked and strict:
                raise unsupported(option)

    def progress(self, params: dict[str, Any], value: float) -> None:
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is None and self.mutation == "progress-without-token":
            token = "unrequested"
        if token is not None:
            self.write(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": value, "stage": "recall"},
                }
            )

    # -- embed (§7.3) ---------------------------------------------------------------------------
    def embed(self, params: dict[str, Any]) -> dict[str, Any]:
        field = "inputs" if "inputs" in params else "texts"
        inputs = params.get(field)
        if not isinstance(inputs, list):
            raise invalid(field)
        texts = [text_of(item, f"{field}[{i}]") for i, item in enumerate(inputs)]
        encoding = params.get("encoding", "json")
        if encoding not in ("json", "f32-base64"):
            raise unsupported(f"encoding:{encoding}")
        vectors = [embed_text(text) for text in texts]
        if encoding == "json":
            return {"vectors": vectors}
        blobs = [base64.b64encode(struct.pack(f"<{DIMENSION}f", *v)).decode() for v in vectors]
        return {"vectors": blobs, "encoding": "f32-base64", "dimension": DIMENSION}

    # -- index (§7.10, §7.11) ---------------------------------------------------------------------
    def index_add(self, params: dict[str, Any]) -> dict[str, Any]:
        documents = params.get("documents")
        if not isinstance(documents, list):
            raise invalid("documents")
        staged = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise invalid(f"documents[{i}].text")
            if "id" in doc and not isinstance(doc["id"], str):
                raise invalid(f"documents[{i}].id")
            meta = doc.get("meta", {})
            if not isinstance(meta, dict):
                raise invalid(f"documents[{i}].meta")
            staged.append((doc.get("id"), doc["text"], meta))
        ids = []
        for doc_id, text, meta in staged:
            if doc_id is None:
                self.minted += 1
                doc_id = f"minted-{self.minted}"
            self.docs[doc_id] = {"text": text, "meta": meta}
            ids.append(doc_id)
        return {"ids": ids}

    def index_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        ids = params.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise invalid("ids")
        removed = sum(1 for doc_id in set(ids) if self.docs.pop(doc_id, None) is not None)
        return {"deleted": len(set(ids)) if self.mutation == "delete-counts-absent" else removed}


def error_response(
    request_id: Any, code: int, message: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def text_of(value: Any, field: str) -> str:
    """A query/input as text: a string or text Content block(s); other blocks → -32005 (§4.8)."""
    blocks = value if isinstance(value, list) and value else [value]
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            if not isinstance(block.get("text"), str):
                raise invalid(f"{field}.text")
            parts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") in ("image", "audio", "blob"):
            raise unsupported("modality")
        else:
            raise invalid(field)
    return " ".join(parts)


def positive_int(params: dict[str, Any], field: str, default: int) -> int:
    value = params.get(field, default)
    if not is_int(value) or value < 1:
        raise invalid(field)
    return int(value)


def validate_filter(node: Any, path: str, mutation: str | None) -> None:
    """§8: known fields, typed values, advertised operators, non-empty combinators."""
    if not isinstance(node, dict):
        raise invalid(path)
    for combinator in ("and", "or"):
        if combinator in node:
            children = node[combinator]
            if not isinstance(children, list) or not children:
                raise invalid(f"{path}.{combinator}")
            for i, child in enumerate(children):
                validate_filter(child, f"{path}.{combinator}[{i}]", mutation)
            return
    if "not" in node:
        validate_filter(node["not"], f"{path}.not", mutation)
        return
    field, op, value = node.get("field"), node.get("op"), node.get("value")
    if not isinstance(field, str) or not isinstance(op, str):
        raise invalid(path)
    if field not in FIELDS:
        if mutation == "accept-unknown-filter-field":
            return
        raise invalid(f"filter.{field}")
    if op not in ALL_OPERATORS:
        raise invalid(f"filter.{field}")
    if op not in OPERATORS:
        raise unsupported(f"filter operator {op}")
    kind = FIELDS[field]
    if op == "exists":
        ok = isinstance(value, bool)
    elif op in ("in", "nin"):
        ok = isinstance(value, list) and all(value_fits(kind, v) for v in value)
    elif op in ("gt", "gte", "lt", "lte"):
        ok = kind == "int" and value_fits(kind, value)
    else:
        ok = value_fits(kind, value)
    if not ok:
        raise invalid(f"filter.{field}")


def value_fits(kind: str, value: Any) -> bool:
    return {
        "keyword": isinstance(value, str),
        "int": is_int(value),
        "bool": isinstance(value, bool),
    }[kind]


def matches(node: dict[str, Any], meta: dict[str, Any]) -> bool:
    if "and" in node:
        return all(matches(child, meta) for child in node["and"])
    if "or" in node:
        return any(matches(child, meta) for child in node["or"])
    if "not" in node:
        return not matches(node["not"], meta)
    field, op, value = node.get("field"), node["op"], node.get("value")
    present = field in meta
    actual = meta.get(field)
    tests = {
        "exists": lambda: present == value,
        "eq": lambda: present and actual == value,
        "ne": lambda: not present or actual != value,
        "in": lambda: present and actual in value,
        "nin": lambda: not present or actual not in value,
        "gt": lambda: present and actual > value,
        "gte": lambda: present and actual >= value,
        "lt": lambda: present and actual < value,
        "lte": lambda: present and actual <= value,
    }
    return bool(tests[op]())


class HttpFrontend:
    """§5.2 over stdlib ``http.server``: ``POST /rcp/<method>`` (batches at ``/rcp``), HTTP 200
    for every JSON-RPC response, 204 for none, SSE when asked, ``token`` or ``single`` sessions."""

    def __init__(self, mutation: str | None, policy: str, pagination: str | None) -> None:
        self.mutation, self.policy, self.pagination = mutation, policy, pagination
        self.single = MiniServer(mutation, pagination)
        self.sessions: dict[str, MiniServer] = {}
        self.lock = threading.Lock()

    def session_for(self, token: str | None) -> MiniServer:
        if self.policy == "single":
            return self.single
        if token in self.sessions:
            return self.sessions[token]
        fresh = MiniServer(self.mutation, self.pagination)
        fresh.session_token = uuid.uuid4().hex
        return fresh

    def exchange(self, path: str, body: bytes, token: str | None) -> list[Any]:
        """Run one POST body through a session; returns every frame it produced."""
        with self.lock:
            server = self.session_for(token)
            frames: list[Any] = []
            server.write = frames.append  # type: ignore[method-assign]
            message = None
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                message = json.loads(body)
            if isinstance(message, dict) and path != "/rcp/" + str(message.get("method")):
                request_id = message.get("id")
                frames.append(error_response(request_id, INVALID_REQUEST, "path/method mismatch"))
            else:
                server.handle_line(body)
            if server.initialized and server.session_token and self.policy == "token":
                self.sessions.setdefault(server.session_token, server)
            return frames

    def handler(self) -> type[BaseHTTPRequestHandler]:
        frontend = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep stderr quiet."""

            def do_POST(self) -> None:
                if not self.path.startswith("/rcp"):
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                frames = frontend.exchange(self.path, body, self.headers.get("RCP-Session"))
                sse = "text/event-stream" in self.headers.get("Accept", "")
                if not sse:
                    frames = [f for f in frames if not (isinstance(f, dict) and "method" in f)]
                if not frames:
                    self.send_response(204)
                    self.end_headers()
                    return
                encode = functools.partial(json.dumps, separators=(",", ":"))
                if sse:
                    payload = b"".join(f"data: {encode(f)}\n\n".encode() for f in frames)
                    content_type = "text/event-stream"
                else:
                    payload, content_type = encode(frames[-1]).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mutate", choices=sorted(MUTATIONS), help="introduce one bug")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve HTTP on 127.0.0.1:PORT")
    parser.add_argument("--session", choices=("token", "single"), default="token")
    parser.add_argument("--pagination", nargs="?", const="bounded",
                        choices=("bounded", "unbounded"), help="advertise §10 cursors (L2)")
    args = parser.parse_args()
    if args.http is None:
        MiniServer(args.mutate, args.pagination).serve()
        return
    frontend = HttpFrontend(args.mutate, args.session, args.pagination)
    ThreadingHTTPServer(("127.0.0.1", args.http), frontend.handler()).serve_forever()


if __name__ == "__main__":
    main()
