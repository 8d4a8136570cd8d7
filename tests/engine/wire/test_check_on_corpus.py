"""``rcpkit check`` certifies the engine as a user runs it: on a data directory that already
holds their corpus (built with ``rcpkit index add`` from a folder), writable or read-only,
small or a few thousand passages of real text.

The harness probes a writable server with its own ``rcpcheck-seed-`` documents and removes
them afterwards; a read-only one with words from its own hits (§14).
"""

from __future__ import annotations

import importlib
import json
import os
import pydoc
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zaragoza_construction_faq
from engine_wire import HASHING_CONFIG, HttpEngine, make_data_dir, rcpkit_argv

# Each test is a full certification run (two hundred checks) against a subprocess engine.
pytestmark = pytest.mark.timeout(300)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(rcpkit_argv(*args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


def _corpus(root: Path) -> Path:
    """Notes sharing no word with the harness's seed texts or probe words, and a CSV whose
    ``trust`` column makes that key an enumerated field (§7.7 trust levels)."""
    docs = root / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"kayak-{i}.txt").write_text(f"Kayaks glide over fjords near glaciers, trip {i}")
    (docs / "guides.csv").write_text("id,text,trust\ng1,Guides paddle beside seals,trusted\n")
    return docs


def _certify(data: Path) -> dict[str, Any]:
    return _check("--", *rcpkit_argv("serve", "--stdio", "--data", str(data)))


def _check(*target: str) -> dict[str, Any]:
    checked = _run("check", "--json", *target)
    assert "Traceback" not in checked.stderr, checked.stderr
    report: dict[str, Any] = json.loads(checked.stdout)
    failed = [c for c in report["checks"] if c.get("outcome") == "FAIL"]
    assert failed == [], failed
    return report


def _documents(data: Path) -> int:
    return _stat(data, "documents")


def _stat(data: Path, name: str) -> int:
    stats = _run("index", "stats", "--data", str(data))
    return int(next(line.split()[1] for line in stats.stdout.splitlines()
                    if line.split()[:1] == [name]))


def test_check_certifies_a_writable_engine_that_holds_a_corpus(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data")
    assert _run("index", "add", str(_corpus(tmp_path)), "--data", str(data)).returncode == 0
    before = _documents(data)
    report = _certify(data)
    assert report["certifiedLevel"] == report["declaredLevel"] == "L2"
    assert report["declarationHonest"] is True
    assert _documents(data) == before == 7  # the probe documents are gone


def test_check_certifies_a_read_only_engine_with_read_only_probes(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data", "read_only = true\n" + HASHING_CONFIG)
    assert _run("index", "add", str(_corpus(tmp_path)), "--data", str(data)).returncode == 0
    report = _certify(data)
    assert report["certifiedLevel"] == "L2" and report["declarationHonest"] is True
    assert _documents(data) == 7


#: Standard-library modules whose pydoc pages (Python's own documentation) join the corpus.
DOCUMENTED_MODULES = (
    "argparse", "asyncio", "collections", "configparser", "contextlib", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "email.message", "enum", "fractions", "functools",
    "heapq", "html.parser", "http.client", "inspect", "ipaddress", "json", "logging",
    "pathlib", "pickle", "random", "re", "shutil", "socket", "sqlite3", "statistics",
    "string", "subprocess", "tarfile", "tempfile", "textwrap", "threading", "typing",
    "unittest", "urllib.parse", "uuid", "zipfile",
)
#: Recall reaches every passage up to maxK (200, the default): the harness must page it all.
WHOLE_RECALL_CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\ndefault_candidate_k = 200\n'


def _real_documentation(root: Path) -> Path:
    """Real text that ships offline: the pydoc pages of ``DOCUMENTED_MODULES`` and the 1,006
    bilingual questions and answers of the ``zaragoza-construction-faq`` package."""
    docs = root / "docs"
    (docs / "stdlib").mkdir(parents=True)
    for name in DOCUMENTED_MODULES:
        page = pydoc.render_doc(importlib.import_module(name), renderer=pydoc.plaintext)
        (docs / "stdlib" / f"{name}.txt").write_text(page)
    with (docs / "faq.jsonl").open("w") as faq:
        for lang in ("en", "sv"):
            for entry in zaragoza_construction_faq.load(lang=lang):
                record = {"id": f"{lang}/{entry['id']}", "text": f"{entry['q']}\n{entry['a']}",
                          "meta": {"lang": lang, "category": entry["category"]}}
                faq.write(json.dumps(record, ensure_ascii=False) + "\n")
    return docs


@pytest.fixture(scope="module")
def real_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory of a few thousand real passages, built by ``rcpkit index add``."""
    root = tmp_path_factory.mktemp("real")
    data = make_data_dir(root / "data", WHOLE_RECALL_CONFIG)
    assert _run("index", "add", str(_real_documentation(root)), "--data", str(data)).returncode == 0
    assert _stat(data, "chunks") >= 2500
    return data


def test_check_certifies_an_engine_of_thousands_of_real_passages_over_stdio(
    real_corpus: Path,
) -> None:
    """§10, §14.5: paging a probe that matches every passage up to maxK ends within maxK."""
    report = _certify(real_corpus)
    assert report["certifiedLevel"] == report["declaredLevel"] == "L2"
    assert {c["id"]: c["outcome"] for c in report["checks"]}["page.terminates"] == "PASS"


def test_check_certifies_an_engine_of_thousands_of_real_passages_over_http(
    real_corpus: Path,
) -> None:
    engine = HttpEngine(real_corpus)
    try:
        report = _check("--http", engine.base)
        # Hybrid recall matches every passage up to maxK, so the harness's walk covered it all.
        whole = engine.ok("retrieve", {"query": "the", "k": 200})
    finally:
        engine.close()
    assert report["certifiedLevel"] == report["declaredLevel"] == "L2"
    assert {c["id"]: c["outcome"] for c in report["checks"]}["page.terminates"] == "PASS"
    assert len(whole["hits"]) == 200 and "nextCursor" not in whole
