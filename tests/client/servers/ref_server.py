"""A small RCP server built on the reference SDK ``rcp-protocol`` (interop target).

Usage: ``python ref_server.py stdio`` or ``python ref_server.py http PORT``.
"""

from __future__ import annotations

import base64
import struct
import sys
import time

import rcp

DOCS = {
    "d1": "the eiffel tower is in paris",
    "d2": "the colosseum is in rome",
    "d3": "paris is the capital of france",
    "d4": "berlin has a famous gate",
}
DIM = 4


def _vector(text: str) -> list[float]:
    """A tiny deterministic embedding: letter-bucket counts."""
    vector = [0.0] * DIM
    for char in text:
        vector[ord(char) % DIM] += 1.0
    return vector


def _hits(params: dict) -> list[dict]:
    terms = str(params["query"]).lower().split()
    scored = [(sum(term in text.split() for term in terms), doc_id, text)
              for doc_id, text in DOCS.items()]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
    hits = []
    for score, doc_id, text in ranked[: params.get("k", 10)]:
        hit = {"id": doc_id, "score": float(score), "text": text,
               "citation": {"source": "demo", "uri": f"demo://{doc_id}"},
               "x-ref-extra": {"ignored": True}}
        if params.get("includeVectors"):
            hit["vector"] = _encode(_vector(text), params.get("encoding", "json"))
        hits.append(hit)
    return hits


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "f32-base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


server = rcp.Server()
server.set_info("ref-demo", "1.0")
server.set_conformance("L1")
server.advertise(rcp.Capability.Retrieve, {"maxK": 50, "modes": ["sparse"]})
server.advertise(rcp.Capability.Embed, {"dimension": DIM, "identity": "buckets-4",
                                        "batchLimit": 2, "encodings": ["json", "f32-base64"]})
server.advertise(rcp.Capability.Streaming, {})
server.advertise(rcp.Capability.Filter, {"fields": {"lang": "keyword"}})
server.advertise("x-ref", {"version": 1})


@server.stream("retrieve")
def retrieve(params: dict):
    hits = _hits(params)
    if params.get("query") == "slow":
        time.sleep(float(params.get("_meta", {}).get("x-sleep", 0.5)))
    yield rcp.Progress(0.5, "recall", {"hits": hits[:1]})
    return {"hits": hits, "usage": {"candidates": len(DOCS), "notes": []}}


@server.on("embed")
def embed(params: dict):
    encoding = params.get("encoding", "json")
    vectors = [_encode(_vector(text), encoding) for text in params.get("inputs", [])]
    result = {"vectors": vectors, "dimension": DIM}
    if encoding != "json":
        result["encoding"] = encoding
    return result


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.serve_stdio()
    else:
        server.serve_http(int(sys.argv[2]))
