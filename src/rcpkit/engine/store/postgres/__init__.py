"""The PostgreSQL + pgvector system of record, shareable by several engine processes:
:mod:`.records` (the tables and the record's backend steps), :mod:`.search` (recall in the
database, §7.7), :mod:`.side_tables` (the knowledge components' tables), over the shared
write path of :mod:`rcpkit.engine.store.sql`. Needs the ``postgres`` extra (psycopg)."""

from ..base import DatabaseSearch
from .records import SCHEMA_VERSION, PostgresStore
from .search import LexicalRanking
from .side_tables import PostgresSideTables

__all__ = ["SCHEMA_VERSION", "DatabaseSearch", "LexicalRanking", "PostgresSideTables",
           "PostgresStore"]
