"""Shared test configuration: tests/ is on sys.path, so ``support`` is importable.

Every test that starts a process or opens a socket is marked ``wire`` (``scripts/test``
leaves those out). The mark comes from where a test lives (a ``wire/`` directory, a
``*_wire.py`` file), from the fixtures it uses (:data:`WIRE_FIXTURES`), or from an explicit
``pytest.mark.wire``. :mod:`support.wire_guard` makes a test that does either without the
mark fail, so a forgotten mark cannot slip into the fast loop.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

from support import wire_guard
from support.schema import schema_status

# Fixtures that start a process or open a socket (or hand a test the argv it starts).
WIRE_FIXTURES = frozenset({
    "gateway_argv", "http_engine", "loopback", "new_schema", "pg_dsn", "pg_server",
    "processes", "raw", "ref_http", "ref_stdio", "sample_data", "scripted", "serve",
})


def pytest_report_header() -> str:
    return schema_status()


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        # An xdist worker is started with COLUMNS=80 and LINES=24. The CLI's rich consoles
        # read COLUMNS when their module is imported, so tests that widen them for one call
        # would see 80-column tables under xdist only; a serial run has neither variable.
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


def _is_wire(item: pytest.Item) -> bool:
    return ("wire" in item.path.parent.parts or item.path.stem.endswith("_wire")
            or not WIRE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_wire(item):
            item.add_marker(pytest.mark.wire)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with wire_guard.unless_wire(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with wire_guard.unless_wire(item):
        return (yield)
