"""The README and the operating guide stay true: their ``rcpkit.toml`` and ``rcp.json``
examples load, and every flag their shell lines pass to an ``rcpkit`` command is one that
command has."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from rcpkit.cli import app
from rcpkit.engine.config import EngineConfig
from rcpkit.federation.registry import load_registry
from rcpkit.tenancy.limits import Limits

README = (Path(__file__).parents[1] / "README.md").read_text()
OPERATING = (Path(__file__).parents[1] / "docs" / "operating.md").read_text()


def _blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_toml_and_registry_examples_load(tmp_path: Path) -> None:
    (toml,) = _blocks("toml")
    config = EngineConfig.from_mapping(tomllib.loads(toml))
    assert config.index.read_only is False and config.field_types == {"published": "date"}
    (registry,) = [block for block in _blocks("json") if '"engines"' in block]
    path = tmp_path / "rcp.json"
    path.write_text(registry)
    assert {group.id for group in load_registry(path).engines} == {"kb", "demo"}
    assert json.loads(registry)["engines"][0]["url"].endswith(":8766/rcp")


def _commands(text: str = README) -> list[list[str]]:
    commands = []
    for block in _blocks("sh", text):
        for line in block.splitlines():
            for part in re.split(r"&&|\|\|", line.split("  #")[0]):
                words = shlex.split(part.replace(".venv/bin/", ""))
                if words[:1] == ["rcpkit"]:
                    commands.append(words[1:])
    return commands


@functools.cache
def _help(*path: str) -> str:
    """``rcpkit PATH --help``. Typer's runner would rebuild the whole command tree for each
    call (most of its cost), so the tree is built once and run under the runner's isolation."""
    command = _command()
    runner = CliRunner()
    with runner.isolation() as (_, _, output):
        with contextlib.suppress(SystemExit):
            command.main([*path, "--help"], prog_name=runner.get_default_prog_name(command))
        return output.getvalue().decode()


@functools.cache
def _command() -> Any:
    return typer.main.get_command(app)


def _assert_flags_exist(commands: list[list[str]]) -> None:
    for words in commands:
        path = [w for w in words[:2] if not w.startswith("-")]
        help_text = _help(*path[:1])
        if len(path) > 1 and path[1] in help_text:
            help_text = _help(*path)
        for flag in (w.split("=")[0] for w in words if w.startswith("--")):
            assert flag in help_text, (words, flag)


def test_every_readme_flag_exists() -> None:
    commands = _commands()
    assert len(commands) >= 15
    _assert_flags_exist(commands)


def test_every_operating_guide_flag_exists_and_its_examples_load(tmp_path: Path) -> None:
    commands = _commands(OPERATING)
    assert {tuple(words[:2]) for words in commands} >= {
        ("collection", "create"), ("keys", "create"), ("keys", "revoke"), ("serve", "--http"),
        ("provenance", "purge")}
    _assert_flags_exist(commands)
    (limits,) = [block for block in _blocks("sh", OPERATING) if "[limits]" in block]
    table = tomllib.loads(limits.split("<<'EOF'\n", 1)[1].split("EOF", 1)[0])["limits"]
    assert Limits.from_mapping(table, "guide").concurrent == 8
    (poison,) = [block for block in _blocks("toml", OPERATING) if "[poison]" in block]
    (store,) = [block for block in _blocks("toml", OPERATING) if "[limits_store]" in block]
    assert tomllib.loads(store)["limits_store"]["dsn"].startswith("postgresql://")
    (tmp_path / "rcpkit.toml").write_text(poison)
    policy = EngineConfig.load(tmp_path / "rcpkit.toml")
    assert (policy.poison.source_threshold, policy.poison.source_thresholds["written_by:ops"]) \
        == (2, 0)
    (registry,) = _blocks("json", OPERATING)
    path = tmp_path / "rcp.json"
    path.write_text(registry)
    assert {group.id for group in load_registry(path).engines} == {"handbook", "tickets"}
