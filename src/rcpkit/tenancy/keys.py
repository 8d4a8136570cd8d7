"""API keys: principals, their scopes and limits, stored hashed in ``<root>/keys.json``.

A token is ``rcpk_<key id>_<secret>`` with a 256-bit random secret. The file holds only
SHA-256 of the secret: a slow password hash (scrypt) protects low-entropy secrets people
choose, which these are not — no guess list reaches 2^256 — while a request pays one hash
of microseconds, not scrypt's tens of milliseconds. The key id, which is not secret,
finds the record, so verification compares one digest in constant time.

The file is re-read when it changes, so a revoked key is refused by a running server at its
next request. Once a store has seen the file (at start or later), keys are in force for its
lifetime: a file that disappears refuses every key and logs why, and never turns the server
anonymous. ``create`` and ``revoke`` read, change and write the file under an exclusive
``flock`` on ``keys.json.lock``, so concurrent ``rcpkit keys`` commands never lose each
other's change; the write is atomic and fsynced (:func:`rcpkit.files.atomic_write`), 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..engine.types import TRUST_LEVELS
from ..files import atomic_write, locked, private_dir
from .limits import Limits
from .scopes import Scopes

__all__ = ["KEYS_FILE", "KeyRecord", "KeyStore", "KeyStoreError", "trust_grant"]

KEYS_FILE = "keys.json"
_PREFIX = "rcpk_"

logger = logging.getLogger("rcpkit.server")


class KeyStoreError(ValueError):
    """The keys file is unreadable, or a key named does not exist."""


@dataclass(frozen=True)
class KeyRecord:
    """One key: who it is (``principal``), what it may do, whether it still may. ``trust``
    is the operator's grant: the highest trust level (§15.2) the key's writes may name
    (None: each collection's own ``trust`` setting)."""

    key_id: str
    principal: str
    scopes: Scopes
    limits: Limits
    created: float
    revoked: bool = False
    digest: str = ""
    trust: str | None = None

    def to_json(self) -> dict[str, Any]:
        granted = {} if self.trust is None else {"trust": self.trust}
        return {"id": self.key_id, "principal": self.principal, "sha256": self.digest,
                "scopes": self.scopes.to_json(), "limits": self.limits.to_json(), **granted,
                "created": self.created, "revoked": self.revoked}

    @classmethod
    def from_json(cls, value: Any, where: str) -> KeyRecord:
        try:
            return cls(key_id=str(value["id"]), principal=str(value["principal"]),
                       digest=str(value["sha256"]), scopes=Scopes.from_json(value["scopes"]),
                       limits=Limits.from_mapping(value.get("limits", {}), where),
                       trust=trust_grant(value.get("trust"), where),
                       created=float(value["created"]), revoked=bool(value["revoked"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise KeyStoreError(f"{where}: malformed key record ({exc})") from None


def trust_grant(value: Any, where: str) -> str | None:
    """A key's trust grant: one of the §7.7 levels, or None (no grant)."""
    if value is not None and value not in TRUST_LEVELS:
        raise KeyStoreError(f"{where}: trust must be one of {', '.join(TRUST_LEVELS)}, "
                            f"not {value!r}")
    return value


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    """The keys of one data root."""

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / KEYS_FILE
        self._seen: tuple[int, int, int] | None = None
        self._records: dict[str, KeyRecord] = {}
        self._in_force = self.path.exists()
        self._missing_reported = False

    def in_force(self) -> bool:
        """Whether callers must authenticate: the file exists or existed once in this store's
        lifetime (then a missing file refuses every key: fail closed)."""
        if self.path.exists():
            self._in_force, self._missing_reported = True, False
        elif self._in_force:
            self._report_missing()
        return self._in_force

    def _report_missing(self) -> None:
        if not self._missing_reported:
            self._missing_reported = True
            logger.error("%s is missing: refusing every API key until it is restored", self.path)

    def records(self) -> dict[str, KeyRecord]:
        """key id → record, re-read when the file changed on disk; a file missing after keys
        were in force is a :class:`KeyStoreError`."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._records = None, {}
            if self._in_force:
                self._report_missing()
                raise KeyStoreError(f"{KEYS_FILE} is missing") from None
            return self._records
        self._in_force, self._missing_reported = True, False
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            try:
                document = json.loads(self.path.read_text(encoding="utf-8"))
                entries = document["keys"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise KeyStoreError(f"cannot read {self.path.name}: {exc}") from None
            loaded = [KeyRecord.from_json(entry, f"{self.path.name} key {n}")
                      for n, entry in enumerate(entries)]
            self._records = {record.key_id: record for record in loaded}
            self._seen = seen
        return self._records

    def authenticate(self, token: str) -> KeyRecord | None:
        """The live key ``token`` belongs to, or None."""
        if not token.startswith(_PREFIX):
            return None
        key_id, _, secret = token[len(_PREFIX):].partition("_")
        record = self.records().get(key_id)
        if record is None or record.revoked or not secret:
            return None
        return record if hmac.compare_digest(_digest(secret), record.digest) else None

    def create(self, principal: str, scopes: Scopes, limits: Limits | None = None,
               *, trust: str | None = None, now: float | None = None) -> tuple[KeyRecord, str]:
        """A new key and its token (shown once: only its digest is kept)."""
        if not principal.strip():
            raise KeyStoreError("a key needs a principal name")
        with self._changing():
            existing = self._current()
            key_id = secrets.token_hex(4)
            while key_id in existing:
                key_id = secrets.token_hex(4)
            secret = secrets.token_urlsafe(32)
            record = KeyRecord(key_id=key_id, principal=principal.strip(), scopes=scopes,
                               limits=limits or Limits(), digest=_digest(secret),
                               trust=trust_grant(trust, "trust"),
                               created=time.time() if now is None else now)
            self._write([*existing.values(), record])
        return record, f"{_PREFIX}{key_id}_{secret}"

    def revoke(self, key_ids: Iterable[str]) -> list[KeyRecord]:
        """Mark keys revoked (kept, so ``keys list`` shows who had access)."""
        with self._changing():
            records = dict(self._current())
            revoked = []
            for key_id in key_ids:
                if key_id not in records:
                    raise KeyStoreError(f"no key {key_id!r}")
                records[key_id] = record = replace(records[key_id], revoked=True)
                revoked.append(record)
            self._write(list(records.values()))
        return revoked

    def _changing(self) -> AbstractContextManager[None]:
        """The exclusive lock a read-modify-write of the file holds, across processes."""
        private_dir(self.path.parent)
        return locked(self.path.with_name(f"{KEYS_FILE}.lock"))

    def _current(self) -> dict[str, KeyRecord]:
        """The records as on disk now, read again whatever the cache says (under the lock)."""
        self._seen = None
        return self.records()

    def _write(self, records: list[KeyRecord]) -> None:
        atomic_write(self.path, json.dumps(
            {"keys": [record.to_json() for record in records]}, indent=1))
        self._seen = None
