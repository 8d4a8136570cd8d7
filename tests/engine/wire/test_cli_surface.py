"""The command line a new user meets, run as subprocesses on a folder the test builds: servers
say where they listen, every command fails in one style, ``--json`` means "JSON on stdout"
everywhere, and ``rcpkit eval`` times only warm queries and draws readable charts."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from engine_wire import make_data_dir, rcpkit_argv

# Each test starts several CLI and server subprocesses.
pytestmark = pytest.mark.timeout(240)


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(rcpkit_argv(*args), capture_output=True, text=True, timeout=180,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def _indexed(tmp_path: Path) -> Path:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in {"tides.txt": "Tide tables predict high water at the harbour.",
                       "bees.md": "# Bees\n\nBees swarm when the hive is crowded.",
                       "kites.txt": "Kites fly best in a steady breeze."}.items():
        (docs / name).write_text(text)
    assert cli("index", "add", str(docs), "--data", str(data)).returncode == 0
    return data


@contextmanager
def _listening(*args: str) -> Iterator[str]:
    """Start a server on port 0 and yield the URL it announces on stderr."""
    process = subprocess.Popen(rcpkit_argv(*args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        found = re.search(r"serving RCP/1 over HTTP at (http://127\.0\.0\.1:\d+/rcp)", line)
        assert found, line
        yield found[1]
    finally:
        process.terminate()
        process.wait(timeout=30)
        assert process.stdout is not None and process.stdout.read() == ""


def test_serve_says_where_it_listens_and_json_means_stdout(tmp_path: Path) -> None:
    data = _indexed(tmp_path)
    with _listening("serve", "--http", "127.0.0.1:0", "--data", str(data),
                    "--log-level", "info") as url:
        info = cli("info", "--http", url, "--json")
        assert info.returncode == 0, info.stderr
        described = json.loads(info.stdout)
        assert described["server"]["name"] == "rcpkit-engine"
        assert "retrieve" in described["capabilities"] and described["protocolVersion"] == 1
        called = cli("call", "--http", url, "retrieve", '{"query": "bees swarm", "k": 1}',
                     "--json")
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout)["hits"][0]["id"] == "bees.md#0"
        checked = cli("check", "--http", url, "--json", "--only", "ret.basic")
        assert json.loads(checked.stdout)["counts"]["pass"] >= 1

    registry = tmp_path / "rcp.json"
    registry.write_text(json.dumps({"engines": [
        {"id": "notes", "transport": "stdio",
         "command": rcpkit_argv("serve", "--stdio", "--data", str(data))}]}))
    with _listening("gateway", "--registry", str(registry), "--http", "127.0.0.1:0") as url:
        through = cli("call", "--http", url, "retrieve", '{"query": "tide tables", "k": 1}',
                      "--json")
        assert through.returncode == 0, through.stderr
        assert json.loads(through.stdout)["hits"][0]["meta"]["engine"] == "notes"


def test_every_command_fails_in_one_style(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    bad_registry = tmp_path / "rcp.json"
    bad_registry.write_text('{"engines": [{"id": "x", "transport": "stdio"}]}')
    cases = {
        "query": ("query", "x", "--data", str(missing)),
        "index stats": ("index", "stats", "--data", str(missing)),
        "index add": ("index", "add", str(missing), "--data", str(tmp_path / "data")),
        "index sync": ("index", "sync", str(missing), "--data", str(tmp_path / "data")),
        "serve": ("serve", "--http", "nowhere"),
        "gateway": ("gateway", "--registry", str(bad_registry), "--stdio"),
        "call": ("call", "ping"),
        "info": ("info",),
        "check": ("check", "--", str(missing / "server")),
        "eval": ("eval", "--dataset", str(missing), "--stdio", "x"),
        "mcp": ("mcp", "--data", str(missing), "--listen", "nowhere"),
        "inspect": ("inspect", "--no-open", "--http", "http://127.0.0.1:9/rcp", "--listen",
                    "127.0.0.1:http"),
    }
    for command, args in cases.items():
        result = cli(*args)
        assert result.returncode in (1, 2), (command, result)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"rcpkit {command}: error: "), \
            (command, result.stderr)
        assert "Traceback" not in result.stdout


def test_eval_on_a_folder_times_warm_queries_and_writes_charts(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "tides.txt").write_text("Tide tables predict high water at the harbour.")
    (docs / "bees.txt").write_text("Bees swarm when the hive is crowded.")
    (tmp_path / "queries.tsv").write_text("when is high water\ttides.txt\n"
                                          "why do bees swarm\tbees.txt\n")
    converted = cli("eval", "convert", "dir", str(docs), str(tmp_path / "queries.tsv"),
                    str(tmp_path / "beir"))
    assert converted.returncode == 0, converted.stderr
    engine = shlex.join(rcpkit_argv("serve", "--stdio", "--data", str(data)))
    result = cli("eval", "--dataset", str(tmp_path / "beir"), "--stdio", engine,
                 "--config", 'bm25={"mode": "sparse"}', "--json", "--plot", str(tmp_path / "p"),
                 "--report", str(tmp_path / "report.json"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report == json.loads((tmp_path / "report.json").read_text())
    assert report["configs"][0]["metrics"]["Recall@10"] == 1.0
    for name in ("metrics.png", "latency.png"):
        assert (tmp_path / "p" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
