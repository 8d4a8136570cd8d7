"""Many corpora, many callers: named collections under one data root, API keys mapped to
principals with per-collection scopes, per-principal rate limits and quotas, and the
provenance of every write (§15.3, §15.5, §15.6).

It sits above the transports and plugs into them only through their generic hooks: each
collection's endpoint gets a ``gate`` (credentials, visibility, limits) and an ``authorize``
check that its ``Dispatcher`` runs before capability gating, and :mod:`.app` routes paths
with an endpoint table of its own. The transports and the server import nothing from here.
"""
