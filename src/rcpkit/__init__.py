"""rcpkit — RCP/1 (Retrieval Context Protocol) for Python."""

__version__ = "0.1.0"
