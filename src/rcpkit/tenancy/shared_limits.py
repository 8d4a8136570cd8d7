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
        self._host = _host()
        self._holder = holder_of(os.getpid())
        self._lock = threading.Lock()
        self._unreturned: list[str] = []
        """Leases whose deletion failed (the store was busy): deleted by the next transaction."""
        private_file(self.path)
        try:
            self._db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise ValueError(f"{self.path.name} was written by a newer rcpkit "
                                 f"(schema {version}, this one reads {_SCHEMA_VERSION})")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open {self.path}: {exc}") from None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Counters]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise LimitsUnavailable(f"{self.path.name}: {exc}") from None
            try:
                if self._unreturned:
                    self._db.executemany("DELETE FROM leases WHERE id = ?",
                                         [(lease,) for lease in self._unreturned])
                    self._unreturned.clear()
                yield _Transaction(self)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._db.execute("ROLLBACK")
                raise LimitsUnavailable(f"{self.path.name}: {exc}") from None
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def give_back(self, slot: object) -> None:
        with self._lock:
            try:
                self._db.execute("DELETE FROM leases WHERE id = ?", (str(slot),))
            except sqlite3.Error:
                self._unreturned.append(str(slot))

    def close(self) -> None:
        self._db.close()


class _Transaction:
    """The :class:`~.limits.Counters` of one open transaction of a :class:`SharedCounters`."""

    def __init__(self, store: SharedCounters) -> None:
        self.store = store
        self.db = store._db

    def bucket(self, principal: str) -> tuple[float, float] | None:
        row = self.db.execute("SELECT tokens, last FROM buckets WHERE principal = ?",
                              (principal,)).fetchone()
        return None if row is None else (row[0], row[1])

    def set_bucket(self, principal: str, tokens: float, last: float) -> None:
        self.db.execute("INSERT INTO buckets (principal, tokens, last) VALUES (?, ?, ?) "
                        "ON CONFLICT (principal) DO UPDATE SET tokens = excluded.tokens, "
                        "last = excluded.last", (principal, tokens, last))

    def in_flight(self, principal: str, now: float) -> int:
        self.db.execute("DELETE FROM leases WHERE principal = ? AND expires <= ?",
                        (principal, now))
        holders = self.db.execute("SELECT holder, count(*) FROM leases WHERE principal = ? "
                                  "GROUP BY holder", (principal,)).fetchall()
        live = 0
        for holder, count in holders:
            if holder == self.store._holder or _alive(holder, self.store._host):
                live += count
            else:
                self.db.execute("DELETE FROM leases WHERE holder = ?", (holder,))
        return live

    def take_slot(self, principal: str, now: float) -> object:
        lease = uuid.uuid4().hex
        self.db.execute("INSERT INTO leases (id, principal, holder, expires) VALUES (?, ?, ?, ?)",
                        (lease, principal, self.store._holder, now + self.store.lease_ttl_s))
        return lease

    def written(self, principal: str) -> tuple[int, int] | None:
        row = self.db.execute("SELECT day, used FROM written WHERE principal = ?",
                              (principal,)).fetchone()
        return None if row is None else (row[0], row[1])

    def set_written(self, principal: str, day: int, used: int) -> None:
        self.db.execute("INSERT INTO written (principal, day, used) VALUES (?, ?, ?) "
                        "ON CONFLICT (principal) DO UPDATE SET day = excluded.day, "
                        "used = excluded.used", (principal, day, used))
