"""A toy ``graph`` + ``query/transform`` server for the knowledge checks, honest by default.

``--mutate NAME`` breaks one rule: ``ignore-hops-bound`` (answers hops above maxHops),
``ignore-n`` (returns more than n queries), ``no-hypothetical`` (hyde without its passage),
``wrong-level`` (communities of another level than asked).
"""

from __future__ import annotations

import argparse
from typing import Any

from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.types import GraphParams, TransformParams
from rcpkit.server import Context, Server
from rcpkit.transports.stdio import serve_stdio

parser = argparse.ArgumentParser()
parser.add_argument("--mutate", default="")
MUTATION = parser.parse_args().mutate
MAX_HOPS, LEVELS, MAX_N = 2, 2, 4
HIT = {"id": "doc#0", "score": 1.0, "text": "hybrid retrieval of documents"}

server = Server("knowledge-toy", "1.0", "L0")
server.capability("graph", {"ops": ["local", "global", "drift", "communities", "neighbors"],
                            "maxHops": MAX_HOPS, "levels": LEVELS})
server.capability("transform", {"methods": ["rewrite", "multi-query", "decompose",
                                            "step-back", "hyde"], "maxN": MAX_N})


@server.method("graph")
def graph(params: GraphParams, ctx: Context) -> dict[str, Any]:
    if params.hops is not None and params.hops > MAX_HOPS and MUTATION != "ignore-hops-bound":
        raise InvalidParams("hops too large", field="hops")
    if params.level is not None and params.level >= LEVELS:
        raise InvalidParams("no such level", field="level")
    community = {"id": "c0", "summary": "retrieval", "score": 1.0,
                 "level": (params.level or 0) + (MUTATION == "wrong-level")}
    return {"local": {"hits": [HIT]}, "drift": {"hits": [HIT], "followups": ["documents"]},
            "global": {"summary": "retrieval", "communities": [community]},
            "communities": {"communities": [community]},
            "neighbors": {"nodes": [{"id": "doc#0", "score": 1.0}],
                          "edges": [{"src": "doc#0", "dst": "doc#0", "weight": 1.0}]},
            }[params.op]


@server.method("query/transform")
def transform(params: TransformParams, ctx: Context) -> dict[str, Any]:
    if params.n is not None and params.n > MAX_N:
        raise InvalidParams("n too large", field="n")
    count = (params.n or 1) + (MUTATION == "ignore-n")
    body: dict[str, Any] = {"queries": [f"{params.query} {i}" for i in range(count)]}
    if params.method == "hyde" and MUTATION != "no-hypothetical":
        body["hypothetical"] = "A passage about " + params.query
    return body


if __name__ == "__main__":
    serve_stdio(server)
