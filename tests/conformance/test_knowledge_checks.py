"""The §7.8/§7.9/§7.17 checks of ``rcpkit check``: a toy server passes them, each broken variant
fails the check for its rule (the engine's own pass is in the engine wire tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rcpkit.conformance import Outcome, Target, run_checks

pytestmark = pytest.mark.wire

SERVER = [sys.executable, str(Path(__file__).parent / "servers" / "knowledge_server.py")]
KNOWLEDGE_CHECKS = ("graph.op-fields", "graph.unknown-op", "graph.hops-bound",
                    "graph.level-bound", "transform.unknown-method", "transform.n",
                    "transform.n-bound", "transform.hyde", "memory.result-fields",
                    "memory.update", "memory.scopes", "memory.n", "memory.n-bound",
                    "memory.seeds-graph")


def outcomes(*mutation: str) -> dict[str, Outcome]:
    argv = (*SERVER, *(("--mutate", *mutation) if mutation else ()))
    report = run_checks(Target(argv=argv), timeout=5.0)
    return {result.check.id: result.outcome for result in report.results}


def test_an_honest_server_passes_every_knowledge_check() -> None:
    found = outcomes()
    assert {check: found[check] for check in KNOWLEDGE_CHECKS} == dict.fromkeys(
        KNOWLEDGE_CHECKS, Outcome.PASS)


@pytest.mark.parametrize(("mutation", "failing"), [
    ("ignore-hops-bound", "graph.hops-bound"),
    ("ignore-n", "transform.n"),
    ("no-hypothetical", "transform.hyde"),
    ("wrong-level", "graph.level-bound"),
    ("memory-bad-clue", "memory.result-fields"),
    ("memory-new-id", "memory.update"),
    ("memory-unknown-ok", "memory.update"),
    ("memory-refuse-session", "memory.scopes"),
    ("memory-ignore-n", "memory.n"),
    ("memory-ignore-n-bound", "memory.n-bound"),
    ("memory-bad-seeds", "memory.seeds-graph"),
])
def test_each_broken_rule_fails_its_check(mutation: str, failing: str) -> None:
    assert outcomes(mutation)[failing] == Outcome.FAIL
