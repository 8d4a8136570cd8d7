"""Documents on their way in: chunking and preparation (checks, metadata types, hashes)."""
