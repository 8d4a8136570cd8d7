"""Primary → secondary failover across the replicas of one engine (§16.1, §16.2).

A :class:`Selector` hands out a live client for one logical engine. It connects to the
replicas in priority order and keeps the first that answers ``initialize``. When a call
fails at the transport level, :meth:`Selector.report_failure` probes the connection with
``ping`` (§7.15); a dead connection is dropped so the next :meth:`Selector.acquire` fails
over to the next replica. While a secondary is in use, the primary is re-probed at most
every ``reprobe_interval_s`` and taken back as soon as it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from ..client.client import AsyncClient, connect_http, connect_stdio
from ..client.retry import NO_RETRY
from ..protocol.errors import BackendUnavailable, RcpError, Timeout, TransportClosed
from .registry import EngineGroup, EngineSpec, RegistryError

__all__ = ["Connector", "Selector", "connect_engine"]

Connector = Callable[[EngineSpec, float], Awaitable[AsyncClient]]
"""Opens an initialized client for a replica within a timeout in seconds."""


async def connect_engine(spec: EngineSpec, timeout_s: float) -> AsyncClient:
    """Connect to ``spec`` without client-side retries (federation has its own deadlines).

    The client is non-strict: the federation forwards raw params after its own gating.
    """
    if spec.transport == "http":
        if not spec.url:
            raise RegistryError(f"engine {spec.id!r}: an http engine needs a `url`")
        return await connect_http(spec.url, headers=dict(spec.headers), strict=False,
                                  log_level=None, timeout=timeout_s, retry=NO_RETRY)
    return await connect_stdio(list(spec.command), env=dict(spec.env) or None, cwd=spec.cwd,
                               strict=False, log_level=None, timeout=timeout_s, retry=NO_RETRY)


class Selector:
    """Failover between the replicas of one logical engine (primary first)."""

    def __init__(self, group: EngineGroup, *, connect: Connector = connect_engine,
                 connect_timeout_s: float = 10.0, probe_timeout_s: float = 2.0,
                 reprobe_interval_s: float = 30.0) -> None:
        self.group = group
        self._connect = connect
        self._connect_timeout_s = connect_timeout_s
        self._probe_timeout_ms = round(probe_timeout_s * 1000)
        self._reprobe_interval_s = reprobe_interval_s
        self._client: AsyncClient | None = None
        self._replica = -1
        """Index in ``group.replicas`` of the connected replica (-1: none)."""
        self._last_probe = 0.0
        self._lock = asyncio.Lock()

    @property
    def client(self) -> AsyncClient | None:
        """The connected client, if any (no I/O)."""
        return self._client

    @property
    def active(self) -> EngineSpec | None:
        """The replica currently in use, if any."""
        return self.group.replicas[self._replica] if self._client is not None else None

    async def acquire(self) -> AsyncClient:
        """A live client: the current one, or the first replica (by priority) that connects.

        Raises :class:`BackendUnavailable` when no replica can be reached.
        """
        async with self._lock:
            if self._client is not None and self._client.session.is_closed:
                await self._drop()
            if self._client is not None and (
                    self._replica == 0
                    or time.monotonic() - self._last_probe < self._reprobe_interval_s):
                return self._client
            return await self._connect_best()

    async def report_failure(self, client: AsyncClient, error: RcpError) -> None:
        """After a failed call: drop ``client`` if its transport is dead or it misses a ping."""
        if not isinstance(error, TransportClosed | Timeout):
            return
        async with self._lock:
            if client is not self._client:
                return
            if not client.session.is_closed:
                try:
                    await client.ping(deadline_ms=self._probe_timeout_ms)
                    return
                except RcpError:
                    pass
            await self._drop()

    async def close(self) -> None:
        """Close the connection, if any."""
        async with self._lock:
            await self._drop()

    async def _connect_best(self) -> AsyncClient:
        """Try replicas ahead of the current one, in priority order; keep the current one
        when none of them answers."""
        self._last_probe = time.monotonic()
        limit = self._replica if self._client is not None else len(self.group.replicas)
        failures: list[str] = []
        for index, spec in enumerate(self.group.replicas[:limit]):
            try:
                client = await self._connect(spec, self._connect_timeout_s)
            except (RcpError, OSError) as exc:
                failures.append(f"{_describe(spec)}: {_reason(exc)}")
                continue
            await self._drop()
            self._client, self._replica = client, index
            return client
        if self._client is not None:
            return self._client
        raise BackendUnavailable(f"engine {self.group.id!r} is unreachable: "
                                 + "; ".join(failures), data={"engine": self.group.id})

    async def _drop(self) -> None:
        client, self._client, self._replica = self._client, None, -1
        if client is not None:
            with contextlib.suppress(RcpError, OSError):
                await client.close()


def _describe(spec: EngineSpec) -> str:
    return spec.url if spec.transport == "http" and spec.url else " ".join(spec.command)


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, RcpError) else str(exc) or type(exc).__name__
