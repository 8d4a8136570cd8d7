"""Derived in-memory indexes over the record's chunk rowids: lexical BM25, dense vectors,
§8 filter columns, and their persistence (``derived`` keeps the set consistent)."""
