"""Many corpora, many callers: named collections under one data root, API keys mapped to
principals with per-collection scopes, per-principal rate limits and quotas, and the
provenance of every write (§15.3, §15.5, §15.6)."""
