"""Per-principal limits counted once for every process serving one root (§15.5).

The :class:`~.limits.Limiter`'s counters — token buckets, the daily write quota, and one
lease row per request holding a concurrency slot — in tables every process shares:
``ROOT/limits.sqlite3`` (:class:`SharedCounters`: 0600, WAL) for the processes of one host, or
a PostgreSQL database (:class:`PostgresCounters`) for machines that share one. Each
admission is one transaction holding the store's write lock (``BEGIN IMMEDIATE``; on
PostgreSQL an advisory lock of its principal), so two processes never spend the same token
and a refusal's wait is computed from the bucket every process spends (a truthful
``Retry-After``). Times are epoch seconds, which every process reads alike.

A lease names its holder, and a lease whose holder is gone (``kill -9``) is deleted when
next counted: on SQLite the holder is a process of this host (host and PID namespace, pid,
start time, so a reused pid is not mistaken for it); on PostgreSQL it is the process's
database session (backend pid and start), which ends with the process on any machine. A
lease past its expiry (:data:`LEASE_TTL_S`, far longer than any request) is deleted too,
which frees leases whose holder cannot be checked. Commits do not wait for the disk
(SQLite ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit = off``): a power loss or a
database crash forgets at most the last few charges, never the store.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..files import private_file
from .limits import Counters, LimitsUnavailable

__all__ = ["LEASE_TTL_S", "LIMITS_FILE", "PostgresCounters", "SharedCounters"]

LIMITS_FILE = "limits.sqlite3"

LEASE_TTL_S = 3_600.0
"""How long a lease holds a slot at most; a request runs for far less."""

BUSY_TIMEOUT_S = 2.0
"""How long an admission waits for another process's transaction (each takes microseconds)."""

_SCHEMA_VERSION = 1
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rcpkit_limits_schema (version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS rcpkit_buckets (principal TEXT PRIMARY KEY, "
    "tokens DOUBLE PRECISION NOT NULL, last DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS rcpkit_leases (id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
    "holder TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS rcpkit_leases_of_principal ON rcpkit_leases (principal)",
    "CREATE TABLE IF NOT EXISTS rcpkit_written (principal TEXT PRIMARY KEY, "
    "day BIGINT NOT NULL, used BIGINT NOT NULL)")
"""The tables, in SQL both SQLite and PostgreSQL take."""
_PAIRS = {"rcpkit_buckets": ("tokens", "last"), "rcpkit_written": ("day", "used")}
"""The tables holding two values per principal, and the names of their columns."""


def _host() -> str:
    """This host and PID namespace: where a pid names the same process as here."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{namespace}"


_PROC = os.path.exists("/proc/self/stat")
"""Whether processes can be told apart by their start time (Linux ``/proc``)."""


def _started(pid: int) -> str | None:
    """An identity of process ``pid``'s start (its start time where ``/proc`` tells it), so
    that a reused pid is not taken for the process that held a lease; None when no such
    process runs (a zombie, killed but not yet reaped, runs no more)."""
    if _PROC:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                # The fields after the command name (which may hold spaces): state, ...,
                # the start time 20th.
                fields = stat.read().rpartition(")")[2].split()
        except FileNotFoundError:
            return None
        return None if fields[0] == "Z" else fields[19]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def _holder_of(pid: int) -> str:
    """The lease holder name of process ``pid`` on this host (which must be running)."""
    return f"{_host()}|{pid}|{_started(pid) or ''}"


def _split(holder: str) -> tuple[str, int, str]:
    rest, _, started = holder.rpartition("|")
    host, _, pid = rest.rpartition("|")
    return host, int(pid), started


class _SqlCounters(ABC):
    """A :class:`~.limits.CounterStore` in SQL tables (see the module doc): what SQLite and
    PostgreSQL share. Statements are written with ``?`` placeholders."""

    errors: tuple[type[Exception], ...] = ()
    """What the database library raises."""

    def __init__(self, where: str, lease_ttl_s: float) -> None:
        self.where = where
        self.lease_ttl_s = lease_ttl_s
        self.holder = ""
        self._lock = threading.Lock()
        self._unreturned: list[str] = []
        """Leases whose deletion failed (the store was busy): deleted by the next transaction."""

    @abstractmethod
    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """Execute one statement; its cursor."""

    @abstractmethod
    def begin(self, principal: str) -> None:
        """Open a transaction holding the store's write lock (at least for ``principal``)."""

    @abstractmethod
    def alive(self, holder: str) -> bool:
        """Whether a lease's holder may still be running."""

    def _create_tables(self) -> None:
        """The tables, made once (in a transaction holding the write lock); ValueError for a
        store a newer rcpkit wrote."""
        self.begin("")
        try:
            for statement in _SCHEMA:
                self.run(statement)
            row = self.run("SELECT max(version) FROM rcpkit_limits_schema").fetchone()
            if row[0] is None:
                self.run("INSERT INTO rcpkit_limits_schema (version) VALUES (?)",
                         (_SCHEMA_VERSION,))
            elif row[0] > _SCHEMA_VERSION:
                raise ValueError(f"{self.where} was written by a newer rcpkit (limits schema "
                                 f"{row[0]}, this one reads {_SCHEMA_VERSION})")
            self.run("COMMIT")
        except BaseException:
            self.run("ROLLBACK")
            raise

    @contextlib.contextmanager
    def transaction(self, principal: str) -> Iterator[Counters]:
        with self._lock:
            try:
                self.begin(principal)
            except self.errors as exc:
                raise LimitsUnavailable(f"{self.where}: {exc}") from None
            try:
                for lease in self._unreturned:
                    self.run("DELETE FROM rcpkit_leases WHERE id = ?", (lease,))
                self._unreturned.clear()
                yield _Transaction(self)
                self.run("COMMIT")
            except self.errors as exc:
                with contextlib.suppress(*self.errors):
                    self.run("ROLLBACK")
                raise LimitsUnavailable(f"{self.where}: {exc}") from None
            except BaseException:
                self.run("ROLLBACK")
                raise

    def give_back(self, slot: object) -> None:
        with self._lock:
            try:
                self.run("DELETE FROM rcpkit_leases WHERE id = ?", (str(slot),))
            except self.errors:
                self._unreturned.append(str(slot))


class SharedCounters(_SqlCounters):
    """The counters in ``ROOT/limits.sqlite3``, shared by the processes of one host."""

    errors = (sqlite3.Error,)

    def __init__(self, path: Path, *, lease_ttl_s: float = LEASE_TTL_S,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        super().__init__(Path(path).name, lease_ttl_s)
        self.host = _host()
        self.holder = _holder_of(os.getpid())
        try:
            private_file(Path(path))
            self.db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                                      check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._create_tables()
        except (OSError, sqlite3.Error) as exc:
            raise ValueError(f"cannot open {path}: {exc}") from None

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(sql, params)

    def begin(self, principal: str) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def alive(self, holder: str) -> bool:
        holder_host, pid, started = _split(holder)
        return holder_host != self.host or _started(pid) == started

    def close(self) -> None:
        self.db.close()


_ADVISORY_LOCKS = 0x72_63_70_6C  # "rcpl"
"""The first key of the advisory locks (PostgreSQL) serialising one principal's admissions
(the second: a hash of its name); principals do not wait for each other."""


class PostgresCounters(_SqlCounters):
    """The counters in a PostgreSQL database (the ``rcpkit_*`` tables of the DSN's first
    schema), shared by every machine serving the root. A lease's holder is this process's
    database session; a broken connection is opened again at the next admission."""

    def __init__(self, dsn: str, *, lease_ttl_s: float = LEASE_TTL_S,
                 timeout_s: float = BUSY_TIMEOUT_S) -> None:
        try:
            import psycopg
        except ImportError:
            raise ValueError("counting limits in PostgreSQL needs the postgres extra "
                             "(pip install 'rcpkit[postgres]')") from None
        super().__init__("the limits tables", lease_ttl_s)
        self.errors = (psycopg.Error,)
        self._psycopg = psycopg
        self.dsn = dsn
        self.timeout_s = timeout_s
        try:
            self._connect()
            self._create_tables()
        except psycopg.Error as exc:
            raise ValueError(f"cannot open the limits tables: {exc}") from None

    def _connect(self) -> None:
        self.db = self._psycopg.connect(self.dsn, autocommit=True,
                                        connect_timeout=max(1, math.ceil(self.timeout_s)))
        # Set here, not as connection options, which would replace the DSN's own. Commits do
        # not wait for the WAL flush: a database crash forgets the last charges, nothing more.
        self.db.execute(f"SET lock_timeout = {math.ceil(self.timeout_s * 1000)}")
        self.db.execute("SET synchronous_commit = off")
        session = self.db.execute("SELECT pid, backend_start::text FROM pg_stat_activity "
                                  "WHERE pid = pg_backend_pid()").fetchone()
        assert session is not None  # a session always sees itself
        self.holder = f"pg|{session[0]}|{session[1]}"

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.db.execute(sql.replace("?", "%s"), params)

    def begin(self, principal: str) -> None:
        try:
            self.db.execute("BEGIN")
        except self._psycopg.OperationalError:
            if not (self.db.closed or self.db.broken):
                raise
            self._connect()  # the session ended (a restart, a failover): a new one, once
            self.db.execute("BEGIN")
        self.db.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
                        (_ADVISORY_LOCKS, principal))

    def alive(self, holder: str) -> bool:
        _, pid, started = _split(holder)
        return self.db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s "
                               "AND backend_start::text = %s", (pid, started)
                               ).fetchone() is not None

    def close(self) -> None:
        self.db.close()


class _Transaction:
    """The :class:`~.limits.Counters` of one open transaction of a store."""

    def __init__(self, store: _SqlCounters) -> None:
        self.store = store
        self.run = store.run

    def bucket(self, principal: str) -> tuple[float, float] | None:
        return self._pair("rcpkit_buckets", principal)

    def set_bucket(self, principal: str, tokens: float, last: float) -> None:
        self._set_pair("rcpkit_buckets", principal, tokens, last)

    def in_flight(self, principal: str, now: float) -> int:
        self.run("DELETE FROM rcpkit_leases WHERE principal = ? AND expires <= ?",
                 (principal, now))
        holders = self.run("SELECT holder, count(*) FROM rcpkit_leases WHERE principal = ? "
                           "GROUP BY holder", (principal,)).fetchall()
        live = 0
        for holder, count in holders:
            if holder == self.store.holder or self.store.alive(holder):
                live += count
            else:
                self.run("DELETE FROM rcpkit_leases WHERE holder = ?", (holder,))
        return live

    def take_slot(self, principal: str, now: float) -> object:
        lease = uuid.uuid4().hex
        self.run("INSERT INTO rcpkit_leases (id, principal, holder, expires) "
                 "VALUES (?, ?, ?, ?)",
                 (lease, principal, self.store.holder, now + self.store.lease_ttl_s))
        return lease

    def written(self, principal: str) -> tuple[int, int] | None:
        return self._pair("rcpkit_written", principal)

    def set_written(self, principal: str, day: int, used: int) -> None:
        self._set_pair("rcpkit_written", principal, day, used)

    def _pair(self, table: str, principal: str) -> Any:
        first, second = _PAIRS[table]
        row = self.run(f"SELECT {first}, {second} FROM {table} WHERE principal = ?",
                       (principal,)).fetchone()
        return None if row is None else (row[0], row[1])

    def _set_pair(self, table: str, principal: str, first: float, second: float) -> None:
        names = _PAIRS[table]
        self.run(f"INSERT INTO {table} (principal, {names[0]}, {names[1]}) "
                 f"VALUES (?, ?, ?) ON CONFLICT (principal) DO UPDATE SET "
                 f"{names[0]} = excluded.{names[0]}, {names[1]} = excluded.{names[1]}",
                 (principal, first, second))
