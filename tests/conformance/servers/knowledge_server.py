"""A toy ``graph`` + ``query/transform`` + ``memory`` server for the knowledge checks, honest
by default.

``--mutate NAME`` breaks one rule: ``ignore-hops-bound`` (answers hops above maxHops),
``ignore-n`` (returns more than n queries), ``no-hypothetical`` (hyde without its passage),
``wrong-level`` (communities of another level than asked); for memory: ``memory-bad-clue``
(a weight that is no number), ``memory-new-id`` (an update answers a fresh id),
``memory-unknown-ok`` (builds on an unknown memoryId), ``memory-refuse-session`` (refuses an
advertised scope), ``memory-ignore-n`` (more than n clues), ``memory-ignore-n-bound``
(answers n above maxN), ``memory-bad-seeds`` (seedIds that are no graph node).
"""

from __future__ import annotations

import argparse
from typing import Any

from rcpkit.protocol.errors import InvalidParams, NotFound
from rcpkit.protocol.types import (
    GraphParams,
    MemoryBuildParams,
    MemoryRecallParams,
    TransformParams,
)
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
server.capability("memory", {"scopes": ["global", "session"], "clues": True, "maxN": MAX_N})
MEMORIES: set[str] = set()
server.capability("transform", {"methods": ["rewrite", "multi-query", "decompose",
                                            "step-back", "hyde"], "maxN": MAX_N})


@server.method("graph")
def graph(params: GraphParams, ctx: Context) -> dict[str, Any]:
    if params.op == "neighbors" and not {"doc#0", "concept:retriev"} & set(params.seed_ids or []):
        raise InvalidParams("no seed is a node", field="seedIds")
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


@server.method("memory/build")
def memory_build(params: MemoryBuildParams, ctx: Context) -> dict[str, Any]:
    if params.scope == "session" and MUTATION == "memory-refuse-session":
        raise InvalidParams("no session memories", field="scope")
    if params.memory_id is not None:
        if params.memory_id not in MEMORIES and MUTATION != "memory-unknown-ok":
            raise NotFound("unknown memoryId")
        if MUTATION != "memory-new-id":
            return {"memoryId": params.memory_id, "tokens": 3}
    memory_id = f"mem-{len(MEMORIES)}"
    MEMORIES.add(memory_id)
    return {"memoryId": memory_id, "tokens": 3}


@server.method("memory/recall")
def memory_recall(params: MemoryRecallParams, ctx: Context) -> dict[str, Any]:
    if params.memory_id is not None and params.memory_id not in MEMORIES:
        raise NotFound("unknown memoryId")
    if params.n is not None and params.n > MAX_N and MUTATION != "memory-ignore-n-bound":
        raise InvalidParams("n too large", field="n")
    count = (params.n or 2) + (MUTATION == "memory-ignore-n")
    seeds = ["nowhere"] if MUTATION == "memory-bad-seeds" else ["concept:retriev", "doc#0"]
    weight: Any = "high" if MUTATION == "memory-bad-clue" else 1.0
    return {"clues": [{"query": f"retrieval {i}", "seedIds": seeds, "weight": weight}
                      for i in range(count)], "hits": [HIT]}


if __name__ == "__main__":
    serve_stdio(server)
