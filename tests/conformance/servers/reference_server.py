"""An RCP server built on the reference SDK (``rcp``), with a tiny in-memory corpus.

The handler does what a careful SDK user would (``rcp.filter.validate`` for
§8, ``-32005`` for unadvertised options, ``minScore``), so the checks it still
fails under ``rcpkit check`` are the SDK's own gaps — recorded in
docs/conformance.md. ``--http PORT`` serves HTTP instead of stdio.
"""

from __future__ import annotations

import sys
from typing import Any

import rcp

MAX_K = 50
FIELDS = {"lang": "keyword"}
OPERATORS = ["eq", "ne", "in"]
CORPUS = [
    ("d1", "the eiffel tower is a wrought iron tower in paris", "en"),
    ("d2", "retrieval augmented generation grounds answers in documents", "en"),
    ("d3", "the protocol defines retrieval search over a corpus", "en"),
    ("d4", "la tour eiffel est une tour en fer a paris", "fr"),
]


def unsupported(option: str) -> rcp.RcpError:
    return rcp.RcpError(rcp.Errc.OPTION_UNSUPPORTED, f"unsupported {option}", {"option": option})


def invalid(field: str) -> rcp.RcpError:
    return rcp.RcpError(rcp.Errc.INVALID_PARAMS, f"invalid {field}", {"field": field})


def matches(node: dict[str, Any], meta: dict[str, str]) -> bool:
    if "and" in node:
        return all(matches(child, meta) for child in node["and"])
    if "or" in node:
        return any(matches(child, meta) for child in node["or"])
    if "not" in node:
        return not matches(node["not"], meta)
    actual, value = meta.get(node["field"]), node.get("value")
    return {"eq": actual == value, "ne": actual != value, "in": actual in (value or [])}[node["op"]]


def retrieve(params: dict[str, Any]) -> dict[str, Any]:
    query = params.get("query")
    if isinstance(query, dict) and query.get("type") not in (None, "text"):
        raise unsupported("modality")
    if not isinstance(query, str):
        raise invalid("query")
    strict = params.get("strict", True)
    if not isinstance(strict, bool):
        raise invalid("strict")
    min_score = params.get("minScore")
    if min_score is not None and not isinstance(min_score, int | float):
        raise invalid("minScore")
    if strict:
        if params.get("mode", "sparse") != "sparse":
            raise unsupported("mode")
        for option in ("rerank", "mmr", "fusion", "unit"):
            if params.get(option) not in (None, False, "chunk"):
                raise unsupported(option)
    node = params.get("filter")
    if node is not None:
        if not isinstance(node, dict):
            raise invalid("filter")
        node = rcp.filter.validate(node, FIELDS, OPERATORS)
    terms = set(query.lower().split())
    hits = []
    for doc_id, text, lang in CORPUS:
        score = float(sum(1 for word in text.split() if word in terms))
        if score <= 0 or (min_score is not None and score < min_score):
            continue
        if node is not None and not matches(node, {"lang": lang}):
            continue
        hits.append({"id": doc_id, "score": score, "text": text, "meta": {"lang": lang}})
    hits.sort(key=lambda hit: -hit["score"])
    return {"hits": hits[: min(params.get("k", 10), MAX_K)]}


def build() -> rcp.Server:
    server = rcp.Server()
    server.set_info("reference-sdk-server", "1.0")
    server.set_conformance("L0")
    server.advertise(rcp.Capability.Retrieve, {"maxK": MAX_K, "modes": ["sparse"]})
    server.advertise(rcp.Capability.Filter, {"fields": FIELDS, "operators": OPERATORS})
    server.on("retrieve", retrieve)
    return server


if __name__ == "__main__":
    srv = build()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        srv.serve_http(int(sys.argv[2]))
    else:
        srv.serve_stdio()
