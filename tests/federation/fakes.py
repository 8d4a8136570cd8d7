"""In-memory stand-ins for engine clients, for fast unit tests of the federation logic."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from rcpkit.federation import EngineSpec, Federation, Registry
from rcpkit.protocol.capabilities import Capabilities
from rcpkit.protocol.errors import RcpError, Timeout
from rcpkit.protocol.types import PeerInfo

RETRIEVE = {"retrieve": {"maxK": 100}}


def hits(*items: tuple[Any, float] | tuple[Any, float, dict[str, Any]]) -> dict[str, Any]:
    """A retrieve result from ``(id, score[, extra hit fields])`` tuples."""
    return {"hits": [{"id": item[0], "score": item[1], **(item[2] if len(item) > 2 else {})}
                     for item in items]}


class FakeClient:
    """Answers ``retrieve`` with a fixed result (or error) after an optional delay."""

    def __init__(self, name: str, answer: Mapping[str, Any] | RcpError,
                 caps: Mapping[str, Any] = RETRIEVE, delay_s: float = 0.0) -> None:
        self.server = PeerInfo(name=name, version="1")
        self.capabilities = Capabilities(caps)
        self.session = SimpleNamespace(is_closed=False)
        self.answer = answer
        self.delay_s = delay_s
        self.calls: list[tuple[str, dict[str, Any], int | None]] = []

    async def call(self, method: str, params: Mapping[str, Any], *,
                   deadline_ms: int | None = None) -> dict[str, Any]:
        self.calls.append((method, dict(params), deadline_ms))
        try:
            async with asyncio.timeout(None if deadline_ms is None else deadline_ms / 1000):
                await asyncio.sleep(self.delay_s)
        except TimeoutError:
            raise Timeout("client deadline elapsed") from None
        if isinstance(self.answer, RcpError):
            raise self.answer
        return dict(self.answer)

    async def ping(self, deadline_ms: int | None = None) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        self.session.is_closed = True


def federation(engines: Sequence[FakeClient], *, settings: Mapping[str, Mapping[str, Any]]
               | None = None, unreachable: Sequence[str] = (), **options: Any) -> Federation:
    """A Federation over fake engines (registry order = ``engines`` order); ``settings``
    adds registry fields (weight, required…) per engine name."""
    by_name = {engine.server.name: engine for engine in engines}
    names = [engine.server.name for engine in engines] + list(unreachable)
    registry = Registry.from_dict({"engines": [
        {"id": name, "transport": "http", "url": f"http://fake/{name}",
         **(settings or {}).get(name, {})} for name in names]})

    async def connect(spec: EngineSpec, timeout_s: float) -> Any:
        if spec.id not in by_name:
            raise RcpError(f"cannot reach {spec.id}")
        return by_name[spec.id]

    return Federation(registry, connect=connect, **options)
