"""The seed corpus the retrieval checks probe on a writable server, empty or not.

Only used when ``index.writable`` is advertised (§7.10); the documents get fresh
``rcpcheck-seed-<uuid>`` ids and the runner deletes them after the shared session, so a
server that already holds a user's corpus is certified without keeping anything.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from rcpkit.conformance.model import Ctx

__all__ = ["SEEDED_IDS", "SEED_WORD", "advertised_filter_fields", "seed_corpus"]

#: ``Session.scratch`` key holding the ids of seeded documents, for clean-up.
SEEDED_IDS = "seeded_ids"
#: A word every seed text contains: the probe query on a seeded server.
SEED_WORD = "retrieval"
SEED_TEXTS = (
    "retrieval augmented generation grounds answers in retrieved documents",
    "hybrid search fuses sparse and dense retrieval scores into one ranking",
    "a retrieval protocol makes search engines interchangeable for agents",
    "chunking splits long documents before indexing them for retrieval",
    "reranking rescores the top retrieval candidates with a slower model",
    "metadata filters restrict retrieval to documents with matching fields",
)


def advertised_filter_fields(ctx: Ctx) -> dict[str, str | None]:
    """Advertised filter fields → declared type (``None`` when only names are given, §8)."""
    declared = (ctx.cap("filter") or {}).get("fields")
    if isinstance(declared, dict):
        return {k: v if isinstance(v, str) else None for k, v in declared.items()}
    if isinstance(declared, list):
        return {name: None for name in declared if isinstance(name, str)}
    return {}


def _seed_meta(ctx: Ctx, position: int) -> dict[str, Any]:
    values = {
        "keyword": ("alpha", "beta")[position % 2],
        "text": ("alpha notes", "beta notes")[position % 2],
        "int": 2020 + position,
        "float": position / 10,
        "bool": position % 2 == 0,
    }
    return {
        name: values[kind] for name, kind in advertised_filter_fields(ctx).items() if kind in values
    }


def seed_corpus(ctx: Ctx) -> bool:
    """Add the seed documents once per session; ``False`` when the index is not writable."""
    if (ctx.cap("index") or {}).get("writable") is not True:
        return False
    if SEEDED_IDS in ctx.session.scratch:
        return True
    stem = f"rcpcheck-seed-{uuid.uuid4().hex[:12]}"
    documents: list[dict[str, Any]] = [
        {"id": f"{stem}-{i}", "text": text, "meta": _seed_meta(ctx, i)}
        for i, text in enumerate(SEED_TEXTS)
    ]
    # A field may accept fewer values than its type says (an enumerated keyword such as a
    # trust level): drop a metadata key the server refuses and add the rest (§12.1 names it).
    for _ in range(len(advertised_filter_fields(ctx)) + 1):
        response = ctx.call("index/add", {"documents": documents})
        refused = _refused_meta_key(response)
        if refused is None or not any(refused in doc["meta"] for doc in documents):
            break
        for doc in documents:
            doc["meta"].pop(refused, None)
    ctx.expect("result" in response, "a successful result for index/add", got=response)
    ids = response["result"].get("ids") if isinstance(response["result"], dict) else None
    ctx.session.scratch[SEEDED_IDS] = ids if isinstance(ids, list) else []
    return True


def _refused_meta_key(response: dict[str, Any]) -> str | None:
    error = response.get("error")
    data = error.get("data") if isinstance(error, dict) else None
    field = data.get("field") if isinstance(data, dict) else None
    match = re.fullmatch(r"documents\[\d+\]\.meta\.(.+)", field) if isinstance(field, str) else None
    return match[1] if match else None
