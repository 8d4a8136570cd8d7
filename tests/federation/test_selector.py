"""Primary → secondary failover with a ping liveness probe and re-probe (§16.1, §7.15)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from rcpkit.federation import EngineSpec, Registry, Selector
from rcpkit.federation.registry import RegistryError
from rcpkit.federation.selector import connect_engine
from rcpkit.protocol.errors import BackendUnavailable, NotFound, RcpError, TransportClosed

from .fakes import FakeClient, hits

GROUP = Registry.from_dict({"engines": [
    {"id": "web", "transport": "http", "url": "http://primary/rcp"},
    {"id": "web", "transport": "http", "url": "http://secondary/rcp", "priority": 1}],
}).engines[0]


class Replicas:
    """A connector whose replicas can be taken down and brought back."""

    def __init__(self) -> None:
        self.up = {"http://primary/rcp": True, "http://secondary/rcp": True}
        self.connects: list[str] = []

    async def __call__(self, spec: EngineSpec, timeout_s: float) -> Any:
        assert spec.url is not None
        self.connects.append(spec.url)
        if not self.up[spec.url]:
            raise TransportClosed("connection refused")
        return FakeClient(spec.url, hits())


async def test_prefers_primary_and_fails_over() -> None:
    replicas = Replicas()
    selector = Selector(GROUP, connect=replicas, reprobe_interval_s=3600)
    primary = cast(FakeClient, await selector.acquire())
    assert primary.server.name == "http://primary/rcp"
    assert await selector.acquire() is primary  # kept while alive

    replicas.up["http://primary/rcp"] = False
    primary.session.is_closed = True  # the transport died
    await selector.report_failure(cast(Any, primary), TransportClosed())
    secondary = await selector.acquire()
    assert secondary.server.name == "http://secondary/rcp"
    assert selector.active is not None and selector.active.priority == 1


async def test_a_live_connection_survives_an_application_error_or_a_ping() -> None:
    selector = Selector(GROUP, connect=Replicas())
    client = await selector.acquire()
    await selector.report_failure(client, NotFound())  # not a transport problem
    await selector.report_failure(client, TransportClosed())  # but the ping answers
    assert selector.client is client


async def test_failed_ping_drops_the_connection() -> None:
    replicas = Replicas()
    selector = Selector(GROUP, connect=replicas)
    client = cast(FakeClient, await selector.acquire())

    async def dead_ping(deadline_ms: int | None = None) -> dict[str, Any]:
        raise TransportClosed()

    client.ping = dead_ping  # type: ignore[method-assign]
    await selector.report_failure(cast(Any, client), TransportClosed())
    assert selector.client is None and client.session.is_closed


async def test_reprobes_the_primary_and_takes_it_back() -> None:
    replicas = Replicas()
    replicas.up["http://primary/rcp"] = False
    selector = Selector(GROUP, connect=replicas, reprobe_interval_s=0)
    secondary = await selector.acquire()
    assert secondary.server.name == "http://secondary/rcp"
    assert (await selector.acquire()) is secondary  # primary still down: keep secondary
    replicas.up["http://primary/rcp"] = True
    primary = await selector.acquire()
    assert primary.server.name == "http://primary/rcp"
    assert secondary.session.is_closed


async def test_all_replicas_down() -> None:
    replicas = Replicas()
    replicas.up = dict.fromkeys(replicas.up, False)
    with pytest.raises(BackendUnavailable) as caught:
        await Selector(GROUP, connect=replicas).acquire()
    assert isinstance(caught.value, RcpError) and caught.value.data == {"engine": "web"}
    assert "primary" in caught.value.message and "secondary" in caught.value.message


async def test_an_http_spec_without_url_is_a_registry_error() -> None:
    with pytest.raises(RegistryError, match="needs a `url`"):
        await connect_engine(EngineSpec(id="web", transport="http"), 1.0)
