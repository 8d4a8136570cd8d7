"""End to end: convert the FAQ, evaluate a reference-SDK (``rcp``) engine over stdio and HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rcpkit.cli.eval import build_app, register
from support.net import free_port, wait_listening

SERVER = Path(__file__).with_name("bm25_rcp_server.py")
ENGINE = f"{sys.executable} {SERVER}"
runner = CliRunner()


@pytest.fixture(scope="module")
def faq_en(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("faq") / "faq-en"
    result = runner.invoke(build_app(), ["convert", "faq", str(out), "--lang", "en"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.wire
def test_stdio_engine_report(faq_en: Path, tmp_path: Path) -> None:
    result = runner.invoke(build_app(), [
        "--dataset", str(faq_en), "--stdio", ENGINE,
        "--config", 'bm25={"mode":"sparse"}', "--config", 'top10={"k":10}',
        "--report", str(tmp_path / "report.json"), "--trec", str(tmp_path / "trec"),
        "--plot", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "nDCG@10" in result.stdout and "latency p95 (ms)" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["indexing"] == "added 503 documents"
    assert report["seed"] == 42 and report["indexVersion"] == "v8"  # 503 docs / 64 per add
    bm25, top10 = report["configs"]
    assert bm25["queriesEvaluated"] == 503 and bm25["queriesExcluded"] == 0
    metrics = bm25["metrics"]
    assert 0.3 < metrics["nDCG@10"] < 1
    assert metrics["Recall@10"] <= metrics["Recall@50"] <= metrics["Recall@100"] <= 1
    assert metrics["MRR@10"] <= metrics["Recall@10"]
    assert top10["metrics"]["Recall@100"] == pytest.approx(top10["metrics"]["Recall@10"])
    assert top10["metrics"]["nDCG@10"] == pytest.approx(metrics["nDCG@10"])
    latency = bm25["latencyMs"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"]
    lines = (tmp_path / "trec" / "bm25.trec").read_text().splitlines()
    assert 503 * 50 < len(lines) <= 503 * 100  # BM25 returns only documents sharing a term
    _query, q0, doc, rank, score, tag = lines[0].split()
    assert (q0, rank, tag) == ("Q0", "1", "bm25") and doc.startswith("en-") and float(score) > 0
    for name in ("metrics.png", "latency.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.wire
def test_unsupported_config_fails_with_exit_code(faq_en: Path) -> None:
    result = runner.invoke(build_app(), [
        "--dataset", str(faq_en), "--stdio", ENGINE, "--config", 'dense={"mode":"dense"}',
        "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert "-32005" in report["configs"][0]["error"]


@pytest.mark.wire
def test_usage_errors_are_messages_not_tracebacks(tmp_path: Path, faq_en: Path) -> None:
    missing = runner.invoke(build_app(), ["--dataset", str(tmp_path), "--stdio", ENGINE])
    assert missing.exit_code == 2 and "corpus.jsonl: file not found" in missing.stderr
    both = runner.invoke(build_app(), ["--dataset", str(faq_en)])
    assert both.exit_code == 2 and "exactly one of" in both.stderr
    dead = runner.invoke(build_app(), ["--dataset", str(faq_en), "--stdio", "/nonexistent/x"])
    assert dead.exit_code == 1 and "-32010" in dead.stderr


def test_convert_directory(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("apples")
    (tmp_path / "q.tsv").write_text("fruit\ta.txt\n")
    result = runner.invoke(build_app(), ["convert", "dir", str(tmp_path / "docs"),
                                         str(tmp_path / "q.tsv"), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "qrels" / "test.tsv").read_text().splitlines()[1] == "q1\ta.txt\t1"


@pytest.fixture()
def http_engine() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)])
    try:
        wait_listening(port, process=process)
        yield f"http://127.0.0.1:{port}/rcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_http_engine_twice_via_module(faq_en: Path, http_engine: str) -> None:
    command = [sys.executable, "-m", "rcpkit.eval", "--dataset", str(faq_en), "--http",
               http_engine, "--json"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=100)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["indexing"] == "added 503 documents"
    # The reference server keeps one session: the second handshake falls back to `info`,
    # and the probe finds the corpus already loaded.
    second = subprocess.run(command, capture_output=True, text=True, timeout=100)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["indexing"] == "skipped (probe found the corpus already loaded)"
    assert report["configs"][0]["metrics"] == json.loads(first.stdout)["configs"][0]["metrics"]


def test_register_adds_the_eval_group() -> None:
    app = typer.Typer()

    @app.command()
    def version() -> None:
        """Another command, so `eval` stays a named group."""

    register(app)
    result = runner.invoke(app, ["eval", "convert", "--help"])
    assert result.exit_code == 0 and "faq" in result.stdout
