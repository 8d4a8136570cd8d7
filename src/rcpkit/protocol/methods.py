"""The RCP/1 method roster (§7) and which capability gates each method (§6, §6.2)."""

from __future__ import annotations

import re

__all__ = [
    "ALWAYS_ALLOWED",
    "CANCEL",
    "CORE_METHODS",
    "LOG",
    "PROGRESS",
    "capability_for",
    "is_core",
    "is_vendor",
    "vendor_capability",
]

#: method → gating capability key (None: ungated, §7 roster table).
CORE_METHODS: dict[str, str | None] = {
    "initialize": None,
    "info": None,
    "ping": None,
    "shutdown": None,
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

#: Callable before a successful ``initialize`` (§13, §14.1).
ALWAYS_ALLOWED = frozenset({"initialize", "info", "ping", "shutdown"})

CANCEL = "notifications/cancel"
PROGRESS = "notifications/progress"
LOG = "notifications/log"

_VENDOR = re.compile(r"^(x-[a-z0-9][a-z0-9-]*)/[^/\s].*$")


def is_core(method: str) -> bool:
    return method in CORE_METHODS


def vendor_capability(method: str) -> str | None:
    """``x-acme/rerank-v2`` → ``x-acme`` (§6.2); None for non-vendor names."""
    match = _VENDOR.match(method)
    return match.group(1) if match else None


def is_vendor(method: str) -> bool:
    return vendor_capability(method) is not None


def capability_for(method: str) -> str | None:
    """The capability key that gates ``method`` (None when ungated or undefined)."""
    if method in CORE_METHODS:
        return CORE_METHODS[method]
    return vendor_capability(method)
