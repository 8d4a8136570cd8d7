"""``import rcpkit`` offers the few names a program needs, each the subpackage's own."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import rcpkit
from rcpkit import client, protocol, server
from rcpkit.protocol import errors

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"


def test_every_exported_name_resolves_to_its_home() -> None:
    assert rcpkit.Client is client.Client
    assert rcpkit.AsyncClient is client.AsyncClient
    assert rcpkit.connect_memory is client.connect_memory
    assert rcpkit.Server is server.Server
    assert rcpkit.RcpError is errors.RcpError
    assert rcpkit.filters is protocol.filters
    assert all(getattr(rcpkit, name) is not None for name in rcpkit.__all__)
    assert sorted(dir(rcpkit)) == sorted(rcpkit.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Clinet'"):
        rcpkit.Clinet  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.wire
def test_importing_the_package_loads_no_client_or_numpy() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import rcpkit, sys; print(sorted(m for m in sys.modules "
         "if m.startswith(('rcpkit.', 'numpy'))))"],
        capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_version_is_written_once() -> None:
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rcpkit.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", rcpkit.__version__)
