"""Connections to the record's PostgreSQL database: pgvector's binary format for numpy
vectors, and the mapping of a lost database or a full disk to the engine's errors (§12)."""

from __future__ import annotations

import functools
import inspect
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from rcpkit.engine.errors import Unavailable, disk_full

__all__ = ["SCHEMA_LOCK", "connect", "database_errors", "guarded", "refusing_a_full_disk",
           "relation_exists"]

SCHEMA_LOCK = 0x72_63_70_6B_69_74
"""A fixed key for the advisory lock that serialises schema creation across processes."""

_Method = TypeVar("_Method", bound=Callable[..., Any])
_Class = TypeVar("_Class", bound=type)


def database_errors(method: _Method) -> _Method:
    """Report a lost or failing database as ``Unavailable`` (§12), never as a raw
    driver error; the broken connection is replaced on the next call."""

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except psycopg.OperationalError as exc:
            raise Unavailable(f"PostgreSQL is unavailable: {exc}") from exc

    return cast(_Method, guarded)


def guarded(cls: _Class) -> _Class:
    """``cls`` with :func:`database_errors` around every public method it has or inherits
    (but generators: they fail while iterated, after the call returned)."""
    for name, member in inspect.getmembers(cls, inspect.isfunction):
        if not name.startswith("_") and not inspect.isgeneratorfunction(member):
            setattr(cls, name, database_errors(member))
    return cls


class _VectorDumper(Dumper):
    """numpy float32 array → pgvector binary (``uint16 dim, uint16 0, float4[dim]`` BE)."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = np.ascontiguousarray(obj, dtype=">f4")
        return struct.pack(">HH", len(values), 0) + values.tobytes()


class _VectorLoader(Loader):
    """pgvector binary → numpy float32 array."""

    format = Format.BINARY

    def load(self, data: Any) -> npt.NDArray[np.float32]:
        dimension = struct.unpack_from(">H", data)[0]
        return np.frombuffer(bytes(data), dtype=">f4", count=dimension,
                             offset=4).astype(np.float32)


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection that reads and writes ``vector`` as numpy arrays."""
    try:
        db = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as exc:
        raise Unavailable(f"cannot connect to PostgreSQL: {exc}") from exc
    info = TypeInfo.fetch(db, "vector")
    if info is not None:  # absent only before the schema creates the extension
        info.register(db)
        dumper = type("VectorDumper", (_VectorDumper,), {"oid": info.oid})
        db.adapters.register_dumper(np.ndarray, dumper)
        db.adapters.register_loader(info.oid, _VectorLoader)
    return db


@contextmanager
def refusing_a_full_disk() -> Iterator[None]:
    """A transaction PostgreSQL rolled back for want of disk space (``53100``) is
    :func:`~rcpkit.engine.errors.disk_full`, as on SQLite."""
    try:
        yield
    except psycopg.errors.DiskFull as exc:
        raise disk_full() from exc


def relation_exists(db: psycopg.Connection[Any], name: str) -> bool:
    return (db.execute("SELECT to_regclass(%s)", (name,)).fetchone() or (None,))[0] is not None
