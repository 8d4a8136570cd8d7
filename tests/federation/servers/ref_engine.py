"""A keyword engine built on the reference SDK ``rcp-protocol``, over stdio."""

from __future__ import annotations

import rcp

DOCS = {"r1": "beta from the reference engine", "r2": "delta only"}

server = rcp.Server()
server.set_info("ref-engine", "1.0")
server.advertise(rcp.Capability.Retrieve, {"maxK": 20, "modes": ["sparse"],
                                           "scoreFloor": 0.0})
server.advertise(rcp.Capability.Filter, {"fields": ["topic"]})


@server.on("retrieve")
def retrieve(params: dict) -> dict:
    terms = str(params["query"]).lower().split()
    scored = [(float(sum(term in text.split() for term in terms)), doc_id, text)
              for doc_id, text in DOCS.items()]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
    return {"hits": [{"id": doc_id, "score": score, "text": text, "meta": {"source": "ref"}}
                     for score, doc_id, text in ranked[: params.get("k", 10)]]}


if __name__ == "__main__":
    server.serve_stdio()
