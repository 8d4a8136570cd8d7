"""``rcpkit call`` / ``rcpkit info`` through the real Typer app."""

from __future__ import annotations

import json
import shlex
import subprocess

from typer.testing import CliRunner

from rcpkit.cli import app

runner = CliRunner()


def test_info_shows_identity_and_capabilities(ref_stdio: list[str]) -> None:
    outcome = runner.invoke(app, ["info", "--stdio", shlex.join(ref_stdio)])
    assert outcome.exit_code == 0, outcome.output
    for expected in ("ref-demo", "RCP/1", "L1", "retrieve", "x-ref"):
        assert expected in outcome.output


def test_info_prints_the_advertised_methods_as_openrpc(ref_stdio: list[str]) -> None:
    """A server of another SDK: the document comes from what it advertised (§6)."""
    outcome = runner.invoke(app, ["info", "--stdio", shlex.join(ref_stdio), "--openrpc"])
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    assert document["openrpc"].startswith("1.3.") and document["info"]["title"] == "ref-demo"
    assert {method["name"] for method in document["methods"]} == {
        "initialize", "info", "ping", "shutdown", "notifications/cancel", "retrieve", "embed"}


def test_call_prints_json(ref_http: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = ref_http
    outcome = runner.invoke(app, ["call", "--http", url, "retrieve",
                                  '{"query": "paris", "k": 1}', "--json",
                                  "--header", "X-Trace: 1"])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["hits"][0]["id"] == "d1"


def test_call_pretty_prints_hits(ref_stdio: list[str]) -> None:
    outcome = runner.invoke(app, ["call", "--stdio", shlex.join(ref_stdio), "retrieve",
                                  '{"query": "rome"}'])
    assert outcome.exit_code == 0, outcome.output
    assert "1 hits" in outcome.output and "colosseum" in outcome.output


def test_rcp_failure_prints_code_name_and_advice(ref_stdio: list[str]) -> None:
    outcome = runner.invoke(app, ["call", "--stdio", shlex.join(ref_stdio), "retrieve",
                                  '{"query": "rome", "k": 0}'])
    assert outcome.exit_code == 1
    assert "-32602 InvalidParams" in outcome.output and "fix the params" in outcome.output


def test_no_strict_sends_unadvertised_methods(ref_stdio: list[str]) -> None:
    outcome = runner.invoke(app, ["call", "--stdio", shlex.join(ref_stdio), "--no-strict",
                                  "rerank", '{"query": "q", "passages": ["a"]}'])
    assert outcome.exit_code == 1
    assert "-32003 CapabilityMissing" in outcome.output


def test_usage_errors_exit_2(ref_stdio: list[str]) -> None:
    command = shlex.join(ref_stdio)
    cases = [
        ["call", "ping"],                                          # no server given
        ["call", "--stdio", command, "--http", "http://x", "ping"],  # both given
        ["call", "--stdio", command, "retrieve", "{not json"],
        ["call", "--stdio", command, "retrieve", "[1, 2]"],
        ["call", "--stdio", command, "rerank", "{}"],              # not advertised
        ["call", "--http", "http://127.0.0.1:9/rcp", "ping", "--header", "novalue"],
    ]
    for argv in cases:
        outcome = runner.invoke(app, argv)
        assert outcome.exit_code == 2, (argv, outcome.output)
