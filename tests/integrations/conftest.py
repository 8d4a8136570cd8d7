"""Fixtures for the bridge tests: a small engine on the bundled sample notes, a private
writable copy of it in this process, and a gateway's argv."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from bridge_support import HASHING_CONFIG, REF_SERVER, rcpkit

from rcpkit.binding import bind
from rcpkit.client import AsyncClient
from rcpkit.client.memory import connect_memory
from rcpkit.engine.core import open_engine
from rcpkit.ingest.sample import sample_documents


@pytest.fixture(scope="session")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the 20 bundled sample notes (read-only: copy to write)."""
    data = tmp_path_factory.mktemp("sample-kb")
    (data / "rcpkit.toml").write_text(HASHING_CONFIG)
    engine = open_engine(data)
    try:
        engine.add(sample_documents(), max_trust="trusted")  # the operator's curated notes
    finally:
        engine.close()
    return data


@pytest.fixture
def kb(sample_kb: Path, tmp_path: Path) -> Path:
    """A private, writable copy of :func:`sample_kb`."""
    return Path(shutil.copytree(sample_kb, tmp_path / "kb"))


@pytest.fixture
async def writable_client(kb: Path) -> AsyncIterator[AsyncClient]:
    """An AsyncClient on the engine over :func:`kb`, in this process."""
    engine = open_engine(kb)
    client = await connect_memory(bind(engine))
    try:
        yield client
    finally:
        await client.close()
        engine.close()


@pytest.fixture
def gateway_argv(tmp_path: Path) -> list[str]:
    """argv of ``rcpkit gateway --stdio`` federating the reference-SDK server."""
    registry = tmp_path / "rcp.json"
    registry.write_text(json.dumps({"engines": [
        {"id": "ref", "transport": "stdio", "command": REF_SERVER}]}))
    return rcpkit("gateway", "--registry", str(registry), "--stdio")
