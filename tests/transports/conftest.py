"""The HTTP tests run the same ASGI app under uvicorn and under rcpkit's lean server
(:mod:`rcpkit.transports.http.server`), so the wire behaviour is the same on both."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from support.http import LOOPBACK_KINDS, LoopbackServer

__all__ = ["Loopback"]

Loopback = Callable[..., LoopbackServer]


@pytest.fixture(params=LOOPBACK_KINDS)
def loopback(request: pytest.FixtureRequest) -> Loopback:
    """``loopback(app, **options)``: a :class:`LoopbackServer` of each kind (each test runs
    under both)."""
    kind: Any = request.param
    return functools.partial(LoopbackServer, kind=kind)
