"""Per-principal limits counted once for every process serving one root (§15.5).

:class:`SharedCounters` keeps the :class:`~.limits.Limiter`'s counters in ``ROOT/limits.sqlite3``
(0600, WAL): token buckets, the daily write quota, and one lease row per request holding a
concurrency slot. Each admission is one ``BEGIN IMMEDIATE`` transaction, so two processes
never spend the same token and a refusal's wait is computed from the bucket every process
spends (a truthful ``Retry-After``). Times are epoch seconds, which every process on the
host reads alike.

A lease names its holder: host (with its PID namespace), pid and the process's start time.
A lease of a process that no longer runs on this host (killed with ``kill -9``) is deleted
when next counted; a lease past its expiry (:data:`LEASE_TTL_S`, far longer than any request)
is too, which also frees leases of holders on other hosts that cannot be checked. The
counters are not fsynced at each commit (``synchronous=NORMAL``): a power loss forgets
at most the last few charges, never the file.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..files import private_file
from .limits import Counters, LimitsUnavailable

__all__ = ["LEASE_TTL_S", "LIMITS_FILE", "SharedCounters"]

LIMITS_FILE = "limits.sqlite3"

LEASE_TTL_S = 3_600.0
"""How long a lease holds a slot at most; a request runs for far less."""

BUSY_TIMEOUT_S = 2.0
"""How long an admission waits for another process's transaction (each takes microseconds)."""

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS buckets (
    principal TEXT PRIMARY KEY, tokens REAL NOT NULL, last REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    id TEXT PRIMARY KEY, principal TEXT NOT NULL, holder TEXT NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS leases_of_principal ON leases (principal);
CREATE TABLE IF NOT EXISTS written (
    principal TEXT PRIMARY KEY, day INTEGER NOT NULL, used INTEGER NOT NULL);
"""
_PAIRS = {"buckets": ("tokens", "last"), "written": ("day", "used")}
"""The tables holding two values per principal, and the names of their columns."""


def _host() -> str:
    """This host and PID namespace: where a pid names the same process as here."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}|{namespace}"


def _started(pid: int) -> str | None:
    """An identity of process ``pid``'s start (its start time on Linux), so that a reused
    pid is not taken for the process that held a lease; None when no such process runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # Fields after the command name (which may hold spaces): the 20th is the start time.
            return stat.read().rpartition(")")[2].split()[19]
    except FileNotFoundError:
        return None
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return ""


def holder_of(pid: int) -> str:
    """The lease holder name of process ``pid`` on this host (which must be running)."""
    return f"{_host()}|{pid}|{_started(pid) or ''}"


def _alive(holder: str, host: str) -> bool:
    """Whether the holder of a lease may still be running: unknowable on another host."""
    holder_host, pid, started = _split(holder)
    if holder_host != host:
        return True
    return _started(pid) == started


def _split(holder: str) -> tuple[str, int, str]:
    rest, _, started = holder.rpartition("|")
    host, _, pid = rest.rpartition("|")
    return host, int(pid), started


class SharedCounters:
    """The :class:`~.limits.CounterStore` in ``ROOT/limits.sqlite3`` (see the module doc)."""

    def __init__(self, path: Path, *, lease_ttl_s: float = LEASE_TTL_S,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.lease_ttl_s = lease_ttl_s
        self.host = _host()
        self.holder = holder_of(os.getpid())
        self._lock = threading.Lock()
        self._unreturned: list[str] = []
        """Leases whose deletion failed (the store was busy): deleted by the next transaction."""
        private_file(self.path)
        try:
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise ValueError(f"{self.path.name} was written by a newer rcpkit "
                                 f"(schema {version}, this one reads {_SCHEMA_VERSION})")
            self.db.executescript(_SCHEMA)
            self.db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open {self.path}: {exc}") from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Counters]:
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise LimitsUnavailable(f"{self.path.name}: {exc}") from None
            try:
                if self._unreturned:
                    self.db.executemany("DELETE FROM leases WHERE id = ?",
                                         [(lease,) for lease in self._unreturned])
                    self._unreturned.clear()
                yield _Transaction(self)
                self.db.execute("COMMIT")
            except sqlite3.Error as exc:
                self.db.execute("ROLLBACK")
                raise LimitsUnavailable(f"{self.path.name}: {exc}") from None
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def give_back(self, slot: object) -> None:
        with self._lock:
            try:
                self.db.execute("DELETE FROM leases WHERE id = ?", (str(slot),))
            except sqlite3.Error:
                self._unreturned.append(str(slot))

    def close(self) -> None:
        self.db.close()


class _Transaction:
    """The :class:`~.limits.Counters` of one open transaction of a :class:`SharedCounters`."""

    def __init__(self, store: SharedCounters) -> None:
        self.store = store
        self.db = store.db

    def bucket(self, principal: str) -> tuple[float, float] | None:
        return self._pair("buckets", principal)

    def set_bucket(self, principal: str, tokens: float, last: float) -> None:
        self._set_pair("buckets", principal, tokens, last)

    def in_flight(self, principal: str, now: float) -> int:
        self.db.execute("DELETE FROM leases WHERE principal = ? AND expires <= ?",
                        (principal, now))
        holders = self.db.execute("SELECT holder, count(*) FROM leases WHERE principal = ? "
                                  "GROUP BY holder", (principal,)).fetchall()
        live = 0
        for holder, count in holders:
            if holder == self.store.holder or _alive(holder, self.store.host):
                live += count
            else:
                self.db.execute("DELETE FROM leases WHERE holder = ?", (holder,))
        return live

    def take_slot(self, principal: str, now: float) -> object:
        lease = uuid.uuid4().hex
        self.db.execute("INSERT INTO leases (id, principal, holder, expires) VALUES (?, ?, ?, ?)",
                        (lease, principal, self.store.holder, now + self.store.lease_ttl_s))
        return lease

    def written(self, principal: str) -> tuple[int, int] | None:
        return self._pair("written", principal)

    def set_written(self, principal: str, day: int, used: int) -> None:
        self._set_pair("written", principal, day, used)

    def _pair(self, table: str, principal: str) -> Any:
        first, second = _PAIRS[table]
        row = self.db.execute(f"SELECT {first}, {second} FROM {table} WHERE principal = ?",
                              (principal,)).fetchone()
        return None if row is None else (row[0], row[1])

    def _set_pair(self, table: str, principal: str, first: float, second: float) -> None:
        names = _PAIRS[table]
        self.db.execute(f"INSERT INTO {table} (principal, {names[0]}, {names[1]}) "
                        f"VALUES (?, ?, ?) ON CONFLICT (principal) DO UPDATE SET "
                        f"{names[0]} = excluded.{names[0]}, {names[1]} = excluded.{names[1]}",
                        (principal, first, second))
