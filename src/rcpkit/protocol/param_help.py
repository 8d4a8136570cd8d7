"""One sentence per §7 request param, in our words: the inspector's form hints and the MCP
tools' argument descriptions read them from here (the spec's schema describes no param).

Keys are wire paths (``fusion.method`` for a nested member); a test checks that each
names a member of the method's typed params (:data:`rcpkit.protocol.methods.METHODS`) and
that every top-level param of every method has a sentence.
"""

from __future__ import annotations

__all__ = ["PARAM_HELP", "param_help"]

_SEARCH = "What to search for, in natural language."
_SESSION = ("Any string shared by the searches of one task: passages already returned in it "
            "are not repeated.")
_SNAPSHOT = "Pin the search to this corpus snapshot (an indexVersion from an earlier result)."
_CURSOR = "The nextCursor of an earlier result, to fetch the next page."
_LEVEL = "Abstraction level in a hierarchical corpus (0 = most specific)."
_EMBED_INPUTS = "Texts or content blocks to embed, one vector each."
_KIND = "query or document: some models embed the two differently."
_ENCODING = "How vectors are carried: json arrays or a binary encoding the server advertises."
_STRICT = "Refuse (-32005) rather than fall back when an option is not supported."
_DOCUMENTS = "Documents to add: text, an optional id, optional metadata (meta)."

_COMMON = {"_meta": "Request metadata: progressToken, deadlineMs, logLevel (§4.6, §9, §17)."}

PARAM_HELP: dict[str, dict[str, str]] = {
    "initialize": {"protocolVersion": "The newest protocol version the client speaks.",
                   "client": "The client's name and version.",
                   "client.name": "The client's name.", "client.version": "Its version.",
                   "capabilities": "What the client supports (§6)."},
    "info": {},
    "ping": {"nonce": "Any value; the server echoes it back."},
    "shutdown": {},
    "embed": {"inputs": _EMBED_INPUTS, "kind": _KIND, "encoding": _ENCODING,
              "strict": _STRICT},
    "embed/sparse": {"inputs": _EMBED_INPUTS, "kind": _KIND},
    "embed/multi": {"inputs": "Texts or content blocks to embed, several vectors each.",
                    "kind": _KIND, "encoding": _ENCODING, "strict": _STRICT},
    "rerank": {"query": "The query the passages are scored against.",
               "passages": "The passages to reorder.",
               "method": "Which reranker to use (as advertised).",
               "topN": "Keep only this many best passages.",
               "model": "A specific model of that reranker."},
    "retrieve": {
        "query": _SEARCH,
        "k": "How many passages to return.",
        "mode": "sparse matches keywords, dense meaning, hybrid both.",
        "modality": "The kind of content to search (text, image…).",
        "candidateK": "Candidates gathered before reranking (at least k).",
        "fusion": "How hybrid mode merges keyword and semantic rankings.",
        "fusion.method": "rrf merges by rank, weighted and convex by score.",
        "fusion.weights": "Weight of each ranking, by name (dense, sparse…).",
        "fusion.rrfK": "The RRF constant: larger flattens the rank bonus.",
        "fusion.alpha": "Convex mix: 1 = dense only, 0 = sparse only.",
        "rerank": "Rerank stage options, or false to skip reranking.",
        "rerank.method": "Which reranker to use (as advertised).",
        "rerank.model": "A specific model of that reranker.",
        "rerank.topN": "How many candidates the reranker scores (at least k).",
        "mmr": "Diversify results; lambda 0 = most diverse, 1 = most relevant.",
        "mmr.lambda": "0 = most diverse, 1 = pure relevance.",
        "rewrite": "Rewrite the query first (a method the server advertises), or false.",
        "filter": "Metadata conditions every hit must meet (§8).",
        "minScore": "Drop passages scoring below this.",
        "recency": "Favour recent documents.",
        "recency.field": "The date field to measure age by.",
        "recency.halfLifeDays": "Age at which a document's boost has halved.",
        "unit": "Granularity of the returned passages.",
        "level": _LEVEL,
        "tokenBudget": "Return as many passages as fit in this many tokens.",
        "sessionId": _SESSION,
        "includeText": "Return each passage's text.",
        "includeVectors": "Return each passage's vector.",
        "seed": "Fixes any randomness, for reproducible results.",
        "indexVersion": _SNAPSHOT,
        "strict": _STRICT,
        "cursor": _CURSOR,
        "encoding": _ENCODING,
    },
    "query/transform": {"query": _SEARCH, "method": "How to transform the query.",
                        "n": "How many results to produce."},
    "graph": {"op": "Graph operation.", "query": _SEARCH, "k": "How many passages to return.",
              "seedIds": "Where to start: document ids, passage ids ('doc#n') or concepts "
                         "('concept:<word>').",
              "hops": "How far to expand from the seeds.", "level": _LEVEL,
              "sessionId": _SESSION, "cursor": _CURSOR, "indexVersion": _SNAPSHOT},
    "index/add": {"documents": _DOCUMENTS, "chunk": "Split long documents into passages.",
                  "contextual": "Prefix each passage with context about its document."},
    "index/delete": {"ids": "Document ids."},
    "catalog/list": {},
    "feedback": {"signals": "Judgements on earlier hits (which helped, which did not).",
                 "sessionId": "The session the judged hits were served in.",
                 "query": "The query the judged hits answered."},
    "memory/build": {"documents": _DOCUMENTS, "memoryId": "Which memory (from memory_build).",
                     "scope": "What the memory covers."},
    "memory/recall": {"query": _SEARCH, "memoryId": "Which memory (from memory_build).",
                      "sessionId": _SESSION, "n": "How many results to produce."},
}


def param_help(method: str) -> dict[str, str]:
    """Wire path → sentence for ``method``'s params (empty for a method we do not define)."""
    return {**_COMMON, **PARAM_HELP[method]} if method in PARAM_HELP else {}
