"""A server's methods as an OpenRPC document (OpenRPC 1.3, https://spec.open-rpc.org).

Generated from the method table (:mod:`.methods`) and the typed params and results (JSON
Schema from the msgspec Structs), for the methods a capability set offers (§6): the
ungated ones, each gated one whose capability (and condition, ``index (writable)``) is
advertised, the ``notifications/cancel`` a client may send (§7.14) and, when given, the
server's vendor methods (§6.2). A method is described ``by-name``: one content descriptor
per member of its params object.

Served over HTTP at ``GET <base>/openrpc.json`` (:data:`DOCUMENT`) and printed by
``rcpkit info --openrpc``. Not as the OpenRPC ``rpc.discover`` method: §6.2 leaves the
method names to RCP and to ``x-<vendor>/…``, and any other name is ``-32004`` (§12).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, NamedTuple

import msgspec

from .capabilities import Capabilities
from .methods import METHODS, NOTIFICATIONS, vendor_capability

__all__ = ["DOCUMENT", "OPENRPC_VERSION", "openrpc_document"]

OPENRPC_VERSION = "1.3.2"
DOCUMENT = "openrpc.json"
"""The document's path segment beside the methods: ``<base>/openrpc.json``."""

_REF = "#/components/schemas/{name}"


class _Entry(NamedTuple):
    """One method object to write: a §7 request, a client notification or a vendor method."""

    name: str
    summary: str
    description: str
    params: type[msgspec.Struct] | None
    """None: an object this document does not type (a vendor method's raw params)."""
    result: type[msgspec.Struct] | None
    """None: untyped (a vendor method's result)."""
    capability: str | None = None
    answers: bool = True
    """False for a notification: no result (OpenRPC 1.3)."""


def openrpc_document(name: str, version: str, caps: Capabilities, *,
                     served: Container[str] | None = None,
                     vendor: Mapping[str, type[msgspec.Struct] | None] | None = None,
                     url: str | None = None) -> dict[str, Any]:
    """The OpenRPC document of a server called ``name`` at ``version`` advertising ``caps``.

    ``served`` (a server's registered handlers) leaves out a gated method the server
    advertises but does not serve; ``vendor`` adds the server's ``x-<vendor>/…`` methods
    (name → their params type, None: untyped) whose capability it advertises (§6.2);
    ``url`` is where it is reached (the ``servers`` entry).
    """
    entries = [_Entry(row.name, row.summary, f"RCP/1 {row.section}", row.params, row.result,
                      row.capability)
               for row in METHODS.values() if row.offered(caps)
               and (served is None or row.capability is None or row.name in served)]
    entries += [_Entry(note.name, note.summary, f"RCP/1 {note.section}", note.params, None,
                       answers=False)
                for note in NOTIFICATIONS.values() if note.sender == "client"]
    for method, params in sorted((vendor or {}).items()):
        capability = vendor_capability(method)
        if capability is not None and caps.has(capability):
            entries.append(_Entry(method, "A vendor extension method.", "Not defined by RCP/1 "
                                  "(§6.2)", params, None, capability))
    typed = [entry for entry in entries if entry.params is not None]
    results = [entry for entry in entries if entry.result is not None]
    refs, components = msgspec.json.schema_components(
        [*(entry.params for entry in typed), *(entry.result for entry in results)],
        ref_template=_REF)
    params_of = {entry.name: components[ref["$ref"].rsplit("/", 1)[1]]
                 for entry, ref in zip(typed, refs[:len(typed)], strict=True)}
    results_of = {entry.name: ref for entry, ref in zip(results, refs[len(typed):], strict=True)}
    document: dict[str, Any] = {
        "openrpc": OPENRPC_VERSION,
        "info": {"title": name, "version": version or "unknown",
                 "description": "The RCP/1 (Retrieval Context Protocol) methods this server "
                                "advertises, as JSON-RPC 2.0 methods."},
        "methods": [_method(entry, params_of.get(entry.name), results_of.get(entry.name))
                    for entry in entries],
        "components": {"schemas": components},
    }
    if url is not None:
        document["servers"] = [{"name": name, "url": url}]
    return document


def _method(entry: _Entry, params: dict[str, Any] | None,
            result: dict[str, Any] | None) -> dict[str, Any]:
    """The method object of ``entry``: its params object's members as by-name content
    descriptors, and its result (a notification has none, in OpenRPC 1.3; a vendor
    method's is untyped: any value). A member with a synonym (``texts`` for ``inputs``) is
    described under both names, neither required: one content descriptor per name cannot
    say "one of the two"."""
    synonyms: Mapping[str, str] = getattr(entry.params, "synonyms", {})
    named = {member: alias for alias, member in synonyms.items()}
    required = set((params or {}).get("required", ())) - set(named)
    descriptors = []
    for member, schema in (params or {}).get("properties", {}).items():
        descriptors.append({"name": member, "schema": schema, "required": member in required})
        if member in named:
            descriptors.append({"name": named[member], "schema": schema, "required": False,
                                "description": f"A synonym of {member}; give one of the two."})
    method: dict[str, Any] = {"name": entry.name, "summary": entry.summary,
                              "description": entry.description, "paramStructure": "by-name",
                              "params": descriptors}
    if params is None:
        method["description"] += "; its params are an object this document does not type"
    if entry.capability is not None:
        method["description"] += f"; gated by the {entry.capability!r} capability (§6)"
        method["x-rcp-capability"] = entry.capability
    if entry.answers:
        method["result"] = {"name": entry.result.__name__ if entry.result else "result",
                            "schema": result or {}}
    return method
