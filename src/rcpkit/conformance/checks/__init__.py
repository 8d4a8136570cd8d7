"""The conformance checks; importing this package registers all of them (§14.5)."""

from rcpkit.conformance.checks import (
    base,
    corpus,
    filters,
    knowledge,
    methods,
    retrieve,
    transport,
)

__all__ = ["base", "corpus", "filters", "knowledge", "methods", "retrieve", "transport"]
