"""A server's methods as an OpenRPC document (OpenRPC 1.3, https://spec.open-rpc.org).

Generated from the method table (:mod:`.methods`) and the typed params and results (JSON
Schema from the msgspec Structs), for the methods a capability set offers (§6): the
ungated ones, each gated one whose capability (and condition, ``index (writable)``) is
advertised, and the ``notifications/cancel`` a client may send (§7.14). A method is
described ``by-name``: one content descriptor per member of its params object.

Served over HTTP at ``GET <base>/openrpc.json`` (:data:`DOCUMENT`) and printed by
``rcpkit info --openrpc``. Not the OpenRPC ``rpc.discover`` method: §6.2 reserves the
method names and answers a name that is neither core nor ``x-<vendor>/…`` with ``-32004``.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

import msgspec

from .capabilities import Capabilities
from .methods import METHODS, NOTIFICATIONS

__all__ = ["DOCUMENT", "OPENRPC_VERSION", "openrpc_document"]

OPENRPC_VERSION = "1.3.2"
DOCUMENT = "openrpc.json"
"""The document's path segment beside the methods: ``<base>/openrpc.json``."""

_REF = "#/components/schemas/{name}"


def openrpc_document(name: str, version: str, caps: Capabilities, *,
                     served: Container[str] | None = None,
                     url: str | None = None) -> dict[str, Any]:
    """The OpenRPC document of a server called ``name`` at ``version`` advertising ``caps``.

    ``served`` (a server's registered handlers) leaves out a gated method the server
    advertises but does not serve; ``url`` is where it is reached (the ``servers`` entry).
    """
    rows = [row for row in METHODS.values() if row.offered(caps)
            and (served is None or row.capability is None or row.name in served)]
    notes = [note for note in NOTIFICATIONS.values() if note.sender == "client"]
    types: list[Any] = [*(row.params for row in rows), *(note.params for note in notes),
                        *(row.result for row in rows)]
    refs, components = msgspec.json.schema_components(types, ref_template=_REF)
    asked = len(rows) + len(notes)
    params = [components[ref["$ref"].rsplit("/", 1)[1]] for ref in refs[:asked]]
    methods: list[dict[str, Any]] = []
    for row, members, result in zip(rows, params[:len(rows)], refs[asked:], strict=True):
        method = _method(row.name, row.summary, row.section, members,
                         getattr(row.params, "synonyms", {}))
        method["result"] = {"name": row.result.__name__, "schema": result}
        if row.capability is not None:
            method["description"] += f"; gated by the {row.capability!r} capability (§6)"
            method["x-rcp-capability"] = row.capability
        methods.append(method)
    methods.extend(_method(note.name, note.summary, note.section, members, {})
                   for note, members in zip(notes, params[len(rows):], strict=True))
    document: dict[str, Any] = {
        "openrpc": OPENRPC_VERSION,
        "info": {"title": name, "version": version or "unknown",
                 "description": "The RCP/1 (Retrieval Context Protocol) methods this server "
                                "advertises, as JSON-RPC 2.0 methods."},
        "methods": methods,
        "components": {"schemas": components},
    }
    if url is not None:
        document["servers"] = [{"name": name, "url": url}]
    return document


def _method(name: str, summary: str, section: str, params: dict[str, Any],
            synonyms: Mapping[str, str]) -> dict[str, Any]:
    """A method object without a result (a notification, in OpenRPC 1.3). A member with a
    synonym (``texts`` for ``inputs``) is described under both names, neither required:
    one content descriptor per name cannot say "one of the two"."""
    named = {member: alias for alias, member in synonyms.items()}
    required = set(params.get("required", ())) - set(named)
    descriptors = []
    for member, schema in params.get("properties", {}).items():
        descriptors.append({"name": member, "schema": schema, "required": member in required})
        if member in named:
            descriptors.append({"name": named[member], "schema": schema, "required": False,
                                "description": f"A synonym of {member}; give one of the two."})
    return {"name": name, "summary": summary, "description": f"RCP/1 {section}",
            "paramStructure": "by-name", "params": descriptors}
