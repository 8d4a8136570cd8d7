"""The conformance harness (§14.5) against known-good, known-broken and reference servers."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from rcpkit.conformance import CHECKS, Level, Outcome, Report, Target, run_checks
from rcpkit.conformance.driver import parse_frame, sse_payloads
from rcpkit.conformance.model import same_id
from rcpkit.conformance.report import CheckResult
from support.net import free_port, wait_listening
from support.schema import schema_available, schema_cli_args

SERVERS = Path(__file__).parent / "servers"
MINI = [sys.executable, str(SERVERS / "mini_server.py")]
REFERENCE = [sys.executable, str(SERVERS / "reference_server.py")]

#: mutation → a check that must FAIL because of it (None: only the overclaim fails).
MUTANTS: dict[str, str | None] = {
    "wrong-id-type": "id.echo.int",
    "answer-notification": "notif.ping",
    "nan-score": "wire.finite",
    "stdout-log": "stdio.frames-only",
    "too-many-hits": "ret.k-one",
    "wrong-error-code": "err.unknown-method",
    "lying-conformance": None,
    "no-init-gate": "life.preinit.retrieve",
    "reinitialize": "life.reinitialize",
    "empty-batch-array": "batch.empty",
    "progress-without-token": "ret.no-progress-without-token",
    "ignore-min-score": "ret.min-score",
    "accept-unknown-filter-field": "flt.unknown-field",
    "delete-counts-absent": "index.delete-absent",
    "bom": "stdio.no-bom",
    "hang-on-batch": "batch.requests",
    "repeat-cursor": "page.terminates",
    "endless-cursor": "page.terminates",
    "pages-past-maxk": "page.terminates",
}
#: paging mutation → what its page.terminates failure expected (the mini server's maxK is 20).
PAGING_FAILURES = {
    "repeat-cursor": "expected: a new opaque cursor",
    "endless-cursor": "expected: pagination to end within 11 pages of k=2 (maxK=20",
    "pages-past-maxk": "expected: at most maxK=20 hits over all pages",
}


def run_cli(*args: str) -> tuple[int, str]:
    """``python -m rcpkit.conformance check ARGS`` → (exit status, stdout)."""
    proc = subprocess.run(
        [sys.executable, "-m", "rcpkit.conformance", "check", *args],
        capture_output=True,
        text=True,
        timeout=110,
    )
    return proc.returncode, proc.stdout


def outcomes(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["outcome"] for c in report["checks"]}


@pytest.fixture(scope="module")
def cli_runs() -> dict[str, tuple[int, dict[str, Any]]]:
    """The correct mini server and every mutant, checked concurrently with --json."""

    def check_in_process(mutation: str) -> tuple[int, dict[str, Any]]:
        options = ("--pagination",) if mutation == "pagination" else ("--mutate", mutation)
        target = Target(argv=(*MINI, *options))
        # Short reads keep the suite fast; the runs asserted to have no (or one) failing check
        # get a generous timeout so machine load cannot produce a spurious FAIL.
        generous = {"lying-conformance", "pagination", *PAGING_FAILURES}
        timeout = 0.5 if mutation == "hang-on-batch" else 5.0 if mutation in generous else 2.0
        report = run_checks(target, timeout=timeout)
        return (0 if report.ok else 1), report.to_json()

    def check_via_cli() -> tuple[int, dict[str, Any]]:
        status, out = run_cli("--json", "--", *MINI)
        return status, json.loads(out)

    with ThreadPoolExecutor(max_workers=6) as pool:
        correct = pool.submit(check_via_cli)
        runs = [*MUTANTS, "pagination"]
        checked = dict(zip(runs, pool.map(check_in_process, runs), strict=True))
        return {"correct": correct.result(), **checked}


def test_registry_has_at_least_120_distinct_checks() -> None:
    assert len({c.id for c in CHECKS}) == len(CHECKS) >= 120
    assert {c.level for c in CHECKS} == set(Level)


@pytest.mark.wire
@pytest.mark.parametrize(("run", "level"), [("correct", "L1"), ("pagination", "L2")])
def test_correct_server_passes_and_certifies_its_declared_level(
    cli_runs: dict[str, tuple[int, dict[str, Any]]], run: str, level: str
) -> None:
    """The mini server as-is, and with §10 cursors (with streaming: L2) walked to their end."""
    status, report = cli_runs[run]
    assert report["counts"]["fail"] == 0, [c for c in report["checks"] if c["outcome"] == "FAIL"]
    assert status == 0
    assert report["certifiedLevel"] == report["declaredLevel"] == level
    assert report["declarationHonest"] is True
    assert report["counts"]["pass"] >= 120
    assert all({"id", "level", "section", "outcome"} <= set(c) for c in report["checks"])
    paged = "PASS" if run == "pagination" else "SKIP"
    assert outcomes(report)["page.terminates"] == outcomes(report)["page.bad-cursor"] == paged


@pytest.mark.wire
@pytest.mark.parametrize("mutation", sorted(MUTANTS))
def test_harness_fails_each_broken_server(
    cli_runs: dict[str, tuple[int, dict[str, Any]]], mutation: str
) -> None:
    status, report = cli_runs[mutation]
    assert status != 0
    expected_failure = MUTANTS[mutation]
    if expected_failure is None:
        assert report["counts"]["fail"] == 0
        assert report["declaredLevel"] == "L2" and report["certifiedLevel"] == "L1"
        assert report["declarationHonest"] is False
    else:
        assert outcomes(report)[expected_failure] == "FAIL"
    if mutation in PAGING_FAILURES:
        detail = next(c["detail"] for c in report["checks"] if c["id"] == expected_failure)
        assert detail.startswith(PAGING_FAILURES[mutation]), detail
        assert report["counts"]["fail"] == 1 and report["certifiedLevel"] == "L1"


@pytest.mark.wire
@pytest.mark.parametrize(
    ("mutation", "outcome"), [(None, Outcome.PASS), ("endless-cursor", Outcome.SKIP)]
)
def test_paging_without_an_advertised_max_k(mutation: str | None, outcome: Outcome) -> None:
    """Without retrieve.maxK a walk that ends passes; one still minting cursors after 50
    pages has no advertised end to fail against, so it is skipped (§10)."""
    options = ("--mutate", mutation) if mutation else ()
    target = Target(argv=(*MINI, "--pagination", "unbounded", *options))
    report = run_checks(target, timeout=5.0, select=lambda c: c.id == "page.terminates")
    assert [r.outcome for r in report.results] == [outcome], report.results


@pytest.mark.wire
def test_failure_detail_shows_sent_got_expected(
    cli_runs: dict[str, tuple[int, dict[str, Any]]],
) -> None:
    _, report = cli_runs["wrong-error-code"]
    detail = next(c["detail"] for c in report["checks"] if c["id"] == "err.unknown-method")
    assert "expected: error code -32004" in detail
    assert '"method":"frobnicate"' in detail and "-32601" in detail


@pytest.mark.wire
def test_text_output_junit_and_schema(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    status, out = run_cli("--junit", str(junit), *schema_cli_args(), "--", *MINI)
    assert status == 0, out
    assert re.search(r"\[L0\] PASS +§4\.7 +id\.echo\.string: ", out)
    assert "CERTIFIED LEVEL: L1" in out
    # without the schema (a bare clone, not CI: schema_cli_args fails there) it is skipped
    outcome = "PASS" if schema_available() else "SKIP"
    assert re.search(rf"\[L0\] {outcome} +§14\.4 +schema\.frames: ", out)
    suite = ElementTree.parse(junit).getroot()
    assert suite.tag == "testsuite" and int(suite.get("tests", "0")) == len(CHECKS)
    assert suite.get("failures") == "0"


@pytest.mark.wire
def test_reference_sdk_server_over_stdio() -> None:
    status, out = run_cli("--json", "--", *REFERENCE)
    report = json.loads(out)
    result = outcomes(report)
    assert status == 1
    # The SDK's own gaps, recorded in docs/conformance.md.
    failed = {check_id for check_id, outcome in result.items() if outcome == "FAIL"}
    assert failed == {"bad.wrong-version", "flt.unadvertised-op", "flt.empty-and", "flt.empty-or"}
    assert result["id.echo.max-safe"] == result["ret.mode-unsupported"] == "PASS"
    assert report["certifiedLevel"] is None and report["declarationHonest"] is False


@contextlib.contextmanager
def http_server(argv: list[str]) -> Iterator[str]:
    """Start ``argv --http PORT …`` and yield its base URL once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([*argv[:2], "--http", str(port), *argv[2:]], stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, process=proc)
        yield f"http://127.0.0.1:{port}/rcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def reference_http() -> Iterator[str]:
    with http_server(REFERENCE) as url:
        yield url


@pytest.mark.wire
@pytest.mark.parametrize("policy", ["token", "single"])
def test_correct_server_over_http_session_policies(policy: str) -> None:
    with http_server([*MINI, "--session", policy]) as url:
        status, out = run_cli("--json", "--http", url)
    report = json.loads(out)
    result = outcomes(report)
    assert status == 0, [c for c in report["checks"] if c["outcome"] == "FAIL"]
    assert report["certifiedLevel"] == "L1"
    assert result["http.path-mismatch"] == result["http.sse-framing"] == "PASS"
    assert result["life.reinitialize"] == result["life.preinit.retrieve"] == "PASS"
    assert result["http.session-required"] == ("PASS" if policy == "token" else "SKIP")


@pytest.mark.wire
def test_reference_sdk_server_over_http(reference_http: str) -> None:
    status, out = run_cli("--json", "--http", reference_http, "--header", "X-Test: 1")
    result = outcomes(json.loads(out))
    assert status == 1
    assert result["http.200-result"] == result["http.200-error"] == "PASS"
    assert result["http.notification"] == "PASS"
    assert result["http.path-mismatch"] == "FAIL"  # the SDK ignores the URL path
    assert result["life.eof"] == "SKIP" and result["stdio.no-bom"] == "SKIP"
    assert result["life.preinit.retrieve"] == "PASS"  # single session, not yet initialized


@pytest.mark.wire
def test_hung_server_fails_without_hanging_the_harness() -> None:
    silent = Target(argv=(sys.executable, "-c", "import time; time.sleep(60)"))
    started = time.monotonic()
    report = run_checks(silent, timeout=0.3, select=lambda c: c.id == "life.ping-preinit")
    assert time.monotonic() - started < 30
    assert [r.outcome for r in report.results] == [Outcome.FAIL]
    assert "no answer to info" in report.results[0].detail
    assert not report.ok
    assert report.partial and report.certified_level is None  # a subset certifies nothing


def test_certification_needs_lower_levels_and_profiles() -> None:
    by_id = {c.id: c for c in CHECKS}

    def report(outcome_by_id: dict[str, Outcome], declared: str) -> Report:
        results = tuple(CheckResult(by_id[i], o) for i, o in outcome_by_id.items())
        return Report("t", results, declared)

    passing = {
        "id.echo.int": Outcome.PASS,
        "life.retrieval-capability": Outcome.PASS,
        "profile.l1": Outcome.PASS,
        "profile.l2": Outcome.SKIP,
    }
    assert report(passing, "L1").certified_level is Level.L1
    assert report(passing, "L1").ok
    assert not report(passing, "L2").declaration_honest
    failing_l0 = {**passing, "id.echo.int": Outcome.FAIL}
    assert report(failing_l0, "L0").certified_level is None
    no_profile = {**passing, "profile.l1": Outcome.SKIP}
    assert report(no_profile, "L0").certified_level is Level.L0


def test_wire_helpers() -> None:
    assert same_id(1, 1) and not same_id(1, 1.0) and not same_id(1, True) and not same_id(1, "1")
    frame = parse_frame(b'{"score":NaN}')
    assert frame is not None and frame.nonfinite
    assert parse_frame(b"hello") is None
    assert sse_payloads(b'data: {"a":1}\n\ndata: {"b":2}\r\n\r\n') == [b'{"a":1}', b'{"b":2}']


@pytest.mark.wire
def test_unstartable_server_is_a_usage_error_not_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rcpkit.conformance", "check", "--", "/nonexistent/rcp-server"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot start" in proc.stderr and "Traceback" not in proc.stderr
