"""The §3 search pipeline: plan, recall (in memory or in the database, one interface), the
pure ranking stages, paging cursors and session dedup."""
