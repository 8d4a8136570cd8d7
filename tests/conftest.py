"""Shared test configuration: tests/ is on sys.path, so ``support`` is importable."""

from __future__ import annotations

from support.schema import schema_status


def pytest_report_header() -> str:
    return schema_status()
