"""The inspector page in a real headless Chromium (Debian's, driven by Playwright) against a
live engine on the sample notes.

Playwright never downloads a browser here: it is pointed at ``/usr/bin/chromium``; the
test is skipped when either is missing, and fails under ``CI=true``.
``RCPKIT_UPDATE_SCREENSHOTS=1`` also writes the screenshots into ``docs/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rcpkit.eval.datasets import CorpusDocument, Dataset, write_beir
from rcpkit.inspector.sample_eval import sample_dataset
from rcpkit.transports.http import create_app as create_rcp_app
from support.example_server import build_test_server
from support.http import LoopbackServer
from support.schema import IN_CI

from .conftest import RCPKIT, assert_cancel_sent, sse_events

pytestmark = pytest.mark.wire  # every test drives a browser process

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    # Under CI a missing browser is a broken install step, not a reason to pass quietly.
    if IN_CI:
        raise RuntimeError("Chromium is not installed (.ci/run installs Debian's chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)
if IN_CI:
    import playwright.sync_api as sync_api  # the browser extra is part of the CI install
else:
    sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
DOCS = Path(__file__).resolve().parents[2] / "docs"
TIMEOUT_MS = 60_000


@contextlib.contextmanager
def _inspect(*args: str, cwd: Path | None = None) -> Iterator[str]:
    """``rcpkit inspect ARGS --no-open`` running; yields the address it printed."""
    process = subprocess.Popen([*RCPKIT, "inspect", *args, "--no-open"], cwd=cwd,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def inspector_url(sample_data: Path) -> Iterator[str]:
    # A relative --data keeps this machine's temporary path out of the screenshots.
    with _inspect("--data", sample_data.name, cwd=sample_data.parent) as url:
        yield url


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM,
            headless=True, args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        yield context
        context.close()


@pytest.fixture
def page(browser: Any, inspector_url: str) -> Iterator[Any]:
    """The loaded page; every request it makes must stay on the inspector (works offline)."""
    tab = browser.new_page()
    origin = inspector_url.split("/?")[0]
    foreign: list[str] = []
    errors: list[str] = []
    tab.on("request", lambda request: None if request.url.startswith((origin, "data:"))
           else foreign.append(request.url))
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda message: errors.append(message.text)
           if message.type == "error" else None)
    tab.set_default_timeout(TIMEOUT_MS)
    tab.goto(inspector_url)
    tab.wait_for_selector("body[data-ready=true]")
    yield tab
    tab.close()
    assert foreign == [] and errors == []


def _screenshot(page: Any, tmp_path: Path, name: str, selector: str | None = None) -> None:
    """The whole page, or only ``selector``'s element (a small PNG for one feature)."""
    if selector is None:
        page.screenshot(path=str(tmp_path / name), full_page=True)
    else:  # its top only, so that the PNG stays small
        box = page.locator(selector).bounding_box()
        page.screenshot(path=str(tmp_path / name), full_page=True,
                        clip={**box, "height": min(box["height"], 560)})
    if os.environ.get("RCPKIT_UPDATE_SCREENSHOTS"):
        shutil.copy(tmp_path / name, DOCS / name)


def _api_hits(url: str, params: dict[str, Any]) -> list[str]:
    base, token = url.split("/?token=")
    response = httpx.post(f"{base}/api/call", json={"method": "retrieve", "params": params},
                          headers={"x-inspector-token": token}, timeout=60)
    return [hit["id"] for hit in sse_events(response.content)[-1]["result"]["hits"]]


def test_overview_shows_identity_and_capabilities(page: Any, tmp_path: Path) -> None:
    assert "rcpkit-engine" in page.inner_text("#identity")
    assert "declares L" in page.inner_text("#identity")
    assert page.locator(".cap[data-cap=retrieve]").count() == 1
    assert "initialize" in page.inner_text("#handshake")
    _screenshot(page, tmp_path, "inspector-overview.png")


def test_retrieve_renders_the_hits_for_a_person(page: Any, inspector_url: str,
                                                tmp_path: Path) -> None:
    page.click("button[data-tab=retrieve]")
    page.fill("#retrieve-query", "why do bees swarm?")
    page.fill("#retrieve-k", "4")
    page.check("#retrieve-compare")
    page.select_option("#config-b select.mode", "sparse")
    page.click("#retrieve-send")
    page.wait_for_selector("#column-a .status-line .badge")
    page.wait_for_selector("#column-b .status-line .badge")
    hits = page.locator("#column-a .hits .hit")
    assert hits.count() == 4
    ranks = [hits.nth(i).locator(".rank").inner_text() for i in range(4)]
    assert ranks == ["#1", "#2", "#3", "#4"]
    shown = [hits.nth(i).get_attribute("data-hit-id") for i in range(4)]
    assert shown == _api_hits(inspector_url, {"query": "why do bees swarm?", "k": 4,
                                              "mode": "hybrid"})
    first = hits.nth(0)
    assert re.match(r"score -?\d", first.locator(".score").inner_text())
    assert "confidence" in first.inner_text()
    assert "trust: trusted" in first.inner_text()
    assert "cited from" in first.locator(".citation").first.inner_text()
    assert {"dense", "sparse"} <= {chip.split(" ")[0] for chip in
                                   first.locator(".stages .chip").all_inner_texts()}
    assert page.locator("#column-a .plot svg rect").count() == 4
    assert "recall" in page.inner_text("#column-a .progress .stages")  # live §9 progress
    sparse = page.locator("#column-b .hits .hit").evaluate_all(
        "cards => cards.map(card => card.dataset.hitId)")
    assert sparse == _api_hits(
        inspector_url, {"query": "why do bees swarm?", "k": 4, "mode": "sparse"})
    assert "in the other column" in page.inner_text("#column-b")
    _screenshot(page, tmp_path, "inspector-retrieve.png")
    page.click("#column-a details summary")
    assert "notifications/progress" in page.inner_text("#column-a .frames")


def test_the_filter_builder_and_pagination(page: Any) -> None:
    page.click("button[data-tab=retrieve]")
    page.click("#filter-box summary")
    page.click("#filter-builder .f-add")
    page.select_option("#filter-builder .f-field", "tag")
    page.select_option("#filter-builder .f-op", "eq")
    page.fill("#filter-builder .f-value", "bees")
    ops = page.locator("#filter-builder .f-op option").all_inner_texts()
    assert "gt" not in ops  # ordered comparison does not apply to a keyword field (§8)
    page.fill("#retrieve-query", "colony")
    page.fill("#retrieve-k", "2")
    page.click("#retrieve-send")
    page.wait_for_selector("#column-a .hits .hit >> nth=1")
    bee_notes = {"swarming", "honeybee-colonies", "waggle-dance", "abejas-miel"}
    first_page = page.locator("#column-a .hits .hit").evaluate_all(
        "cards => cards.map(card => card.dataset.hitId)")
    assert {hit.split("#")[0] for hit in first_page} <= bee_notes
    page.click("#column-a .next-page")
    page.wait_for_selector("#column-a .hits .hit >> nth=3")
    ranks = page.locator("#column-a .hits .hit .rank").all_inner_texts()
    assert ranks == ["#1", "#2", "#3", "#4"]
    all_ids = page.locator("#column-a .hits .hit").evaluate_all(
        "cards => cards.map(card => card.dataset.hitId)")
    assert len(set(all_ids)) == 4 and {hit.split("#")[0] for hit in all_ids} <= bee_notes


def test_compose_shows_the_servers_error_beside_the_raw_frames(page: Any,
                                                              tmp_path: Path) -> None:
    page.click("button[data-tab=compose]")
    assert page.input_value("#compose-method") == "retrieve"
    page.fill("#compose-form [data-field=query] input", "bees")
    page.fill("#compose-form [data-field=k] input", "0")
    page.click("#compose-send")
    page.wait_for_selector("#compose-status .error")
    assert "-32602" in page.inner_text("#compose-status")
    frames = page.locator("#compose-frames .frame")
    assert frames.count() == 2
    # Collapsed: one line each (what it is) until opened.
    assert frames.evaluate_all("frames => frames.map(frame => frame.open)") == [False, False]
    assert "→" in frames.nth(0).locator("summary").inner_text()
    assert "retrieve id" in frames.nth(0).locator("summary").inner_text()
    assert "error -32602" in frames.nth(1).locator("summary").inner_text()
    assert not frames.nth(0).locator("pre").is_visible()
    frames.nth(0).locator("summary").click()
    frames.nth(1).locator("summary").click()
    assert '"k": 0' in frames.nth(0).inner_text() and '"field": "k"' in frames.nth(1).inner_text()
    _screenshot(page, tmp_path, "inspector-compose.png")


def test_certify_and_eval_tabs(page: Any, tmp_path: Path) -> None:
    page.click("button[data-tab=certify]")
    page.fill("#certify-only", "life.*")
    page.click("#certify-run")
    page.wait_for_selector("#certify-summary .big")
    assert "partial run" in page.inner_text("#certify-summary")
    assert page.locator("#certify-results .check").count() > 3
    assert page.locator("#certify-results .badge.FAIL").count() == 0
    page.click("button[data-tab=eval]")
    page.fill("#eval-configs", 'bm25={"mode": "sparse"}\nhybrid={"mode": "hybrid"}')
    page.click("#eval-run")
    page.wait_for_selector("#eval-report table.metrics")
    row = page.locator("#eval-report tr[data-metric='nDCG@10'] td").all_inner_texts()
    assert row[0] == "nDCG@10" and all(0 < float(value) <= 1 for value in row[1:])
    assert page.locator("#eval-report .charts svg").count() == 3
    _screenshot(page, tmp_path, "inspector-eval.png")


def test_cancel_abandons_a_slow_call(browser: Any) -> None:
    """The page's Cancel closes the call's stream; the inspector then sends
    ``notifications/cancel`` for it (§7.14)."""
    with _inspect("--stdio", EXAMPLE) as url, _tab(browser, url) as tab:
        _sleep_with_progress(tab, seconds=60)
        tab.wait_for_selector("#notifications .note[data-method='notifications/progress']")
        tab.click("#compose-cancel")
        tab.wait_for_selector("#compose-status >> text=cancelled")
        assert tab.is_enabled("#compose-send") and tab.is_hidden("#compose-cancel")
        assert_cancel_sent(url, "x-test/sleep")


# ── the parts that put it on par with the MCP Inspector ─────────────────────

EXAMPLE = f"{sys.executable} {Path(__file__).parents[1] / 'support' / 'example_server.py'}"
SLOPPY = f"{sys.executable} {Path(__file__).with_name('sloppy_server.py')}"


@contextlib.contextmanager
def _tab(browser: Any, url: str) -> Iterator[Any]:
    """A new page on the inspector at ``url``, loaded; closed after, with no script error."""
    tab = browser.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        tab.goto(url)
        tab.wait_for_selector("body[data-ready=true]")
        yield tab
    finally:
        tab.close()
    assert errors == []


@pytest.fixture(scope="module")
def test_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An inspector on the test server that may also start the sloppy server (and nothing
    else), evaluating collections under a directory holding one that is not the server's."""
    root = tmp_path_factory.mktemp("eval-root")
    sample = sample_dataset()
    write_beir(Dataset(name="elsewhere", corpus=[CorpusDocument(id=f"other-{doc.id}", text=doc.text)
                                                 for doc in sample.corpus],
                       queries=sample.queries,
                       qrels={query: {f"other-{doc}": grade for doc, grade in judged.items()}
                              for query, judged in sample.qrels.items()}), root / "elsewhere")
    with _inspect("--stdio", EXAMPLE, "--allow-stdio", SLOPPY, "--eval-root", str(root)) as url:
        yield url


def _sleep_with_progress(tab: Any, *, seconds: float, timeout_ms: int | None = None) -> None:
    """Send the test server's ``x-test/sleep`` from Compose, with progress (§9)."""
    tab.click("button[data-tab=compose]")
    tab.fill("#compose-custom", "x-test/sleep")
    tab.click("#compose-json-box summary")
    tab.fill("#compose-json", f'{{"seconds": {seconds}}}')
    tab.check("#compose-stream")
    if timeout_ms is not None:
        tab.fill("#compose-timeout", str(timeout_ms))
    tab.click("#compose-send")


def _ping(tab: Any, nonce: str) -> None:
    """Send ``ping`` from the Compose form."""
    tab.click("button[data-tab=compose]")
    tab.select_option("#compose-method", "ping")
    tab.fill("#compose-form [data-field=nonce] input", nonce)
    tab.click("#compose-send")


def _connect_stdio(tab: Any, command: str, server_name: str) -> None:
    tab.click("button[data-tab=overview]")
    tab.select_option("#connect-transport", "stdio")
    tab.select_option("#connect-stdio", command)
    tab.click("#connect-go")
    tab.wait_for_selector("#connect-status .badge.ok")
    assert tab.inner_text("#identity .pill >> nth=0").startswith(server_name)


def test_forms_describe_each_param(page: Any) -> None:
    page.click("button[data-tab=compose]")
    assert "reranking" in page.inner_text("#compose-form [data-field=candidateK] .help")
    assert "nextCursor" in page.inner_text("#compose-form [data-field=cursor] .help")
    page.click("#compose-form [data-field=fusion] summary")
    assert page.inner_text("#compose-form [data-field='fusion.method'] .help").startswith("rrf")
    page.select_option("#compose-method", "ping")
    assert "echoes" in page.inner_text("#compose-form [data-field=nonce] .help")


def test_history_replays_a_request(page: Any) -> None:
    _ping(page, "first")
    page.wait_for_selector("#history .entry[data-entry='1']")
    page.fill("#compose-form [data-field=nonce] input", "second")
    page.click("#compose-send")
    page.wait_for_selector("#history .entry[data-entry='2']")
    assert '"second"' in page.inner_text("#history .entry[data-entry='2'] .params")
    page.click("#history .entry[data-entry='1'] .replay")
    page.wait_for_selector("#history .entry[data-entry='3']")
    third = page.inner_text("#history .entry[data-entry='3']")
    assert "ping" in third and '"first"' in third and "ok" in third
    assert page.locator("#history .entry").first.get_attribute("data-entry") == "3"  # newest first
    page.wait_for_selector("#compose-status .badge.ok")
    page.click("#compose-frames .frame >> nth=1 >> summary")
    assert '"nonce": "first"' in page.inner_text("#compose-frames .frame >> nth=1")


def test_notifications_have_their_own_pane_and_a_call_its_own_timeout(
        browser: Any, test_server_url: str, tmp_path: Path) -> None:
    with _tab(browser, test_server_url) as tab:
        _sleep_with_progress(tab, seconds=30, timeout_ms=1500)
        tab.wait_for_selector("#compose-status .error")
        assert "-32014" in tab.inner_text("#compose-status")  # the deadline, not 30 s
        note = tab.locator("#notifications .note[data-method='notifications/progress']")
        assert note.count() == 1 and "sleep 50% sleeping" in note.inner_text()
        assert "notifications/progress" not in tab.inner_text("#compose-frames")
        assert tab.inner_text("#notifications-count") == "1"
        assert "timeout 1500 ms" in tab.inner_text("#history .entry[data-entry='1']")
        tab.fill("#compose-json", '{"seconds": 0.01}')
        tab.click("#compose-send")
        tab.wait_for_selector("#history .entry[data-entry='2'] .badge.ok")
        assert tab.inner_text("#notifications-count") == "2"
        _screenshot(tab, tmp_path, "inspector-history.png", "#tab-compose > .grid2 >> nth=1")
        tab.click("#notifications-clear")
        assert tab.locator("#notifications .note").count() == 0


def test_every_frame_is_one_line_until_opened(page: Any) -> None:
    page.click("button[data-tab=frames]")
    frames = page.locator("#all-frames .frame")
    assert frames.count() >= 2
    assert "initialize id" in frames.nth(0).locator("summary").inner_text()
    assert not frames.nth(0).locator("pre").is_visible()
    frames.nth(0).locator("summary").click()
    assert '"protocolVersion"' in frames.nth(0).locator("pre").inner_text()


def test_connect_from_the_page_and_export_the_connection(browser: Any, test_server_url: str,
                                                         tmp_path: Path) -> None:
    with _tab(browser, test_server_url) as tab:
        options = tab.locator("#connect-stdio option").all_inner_texts()
        assert options == [EXAMPLE, SLOPPY]  # the allow-list, nothing else
        with LoopbackServer(create_rcp_app(build_test_server())) as upstream:
            tab.fill("#connect-url", upstream.url + "/rcp")
            tab.fill("#connect-headers", "X-Trace: inspector")
            tab.click("#connect-go")
            tab.wait_for_selector("#connect-status .badge.ok")
            assert f"http: {upstream.url}/rcp" in tab.inner_text("#identity")
            exported = tab.inner_text("#export-rcp")
            assert '"url": "' + upstream.url + '/rcp"' in exported
            assert "<X-Trace value>" in exported and "inspector" not in exported.replace(
                "rcpkit-inspect", "")
            assert '"--http"' in tab.inner_text("#export-mcp")
            _ping(tab, "over http")
            tab.wait_for_selector("#compose-status .badge.ok")
        tab.click("button[data-tab=overview]")
        tab.fill("#connect-url", "http://127.0.0.1:9/rcp")
        tab.click("#connect-go")
        tab.wait_for_selector("#connect-status .error")
        assert "cannot connect" in tab.inner_text("#connect-status")
        _connect_stdio(tab, SLOPPY, "sloppy")
        assert '"command": [' in tab.inner_text("#export-rcp")
        assert '"--stdio"' in tab.inner_text("#export-mcp")
        _screenshot(tab, tmp_path, "inspector-connect.png", "#tab-overview > .grid2 >> nth=1")


def test_certify_lists_failures_first(browser: Any, test_server_url: str,
                                      tmp_path: Path) -> None:
    with _tab(browser, test_server_url) as tab:
        _connect_stdio(tab, SLOPPY, "sloppy")  # its hits have no score: retrieve checks fail
        tab.click("button[data-tab=certify]")
        tab.fill("#certify-only", "life.* ret.*")
        tab.click("#certify-run")
        tab.wait_for_selector("#certify-summary .big")
        assert "null" not in tab.inner_text("#certify-summary")  # a partial run's summary
        outcomes = tab.locator("#certify-results .check").evaluate_all(
            "rows => rows.map(row => row.dataset.outcome)")
        order = {"FAIL": 0, "SKIP": 1, "PASS": 2}
        assert outcomes[0] == "FAIL" and "PASS" in outcomes
        assert outcomes == sorted(outcomes, key=order.__getitem__)
        _screenshot(tab, tmp_path, "inspector-certify.png", "#tab-certify .card")


def test_eval_warns_when_the_engine_holds_other_data(browser: Any, test_server_url: str,
                                                     tmp_path: Path) -> None:
    with _tab(browser, test_server_url) as tab:
        _connect_stdio(tab, EXAMPLE, "rcpkit-keyword-example")
        tab.click("button[data-tab=eval]")
        tab.fill("#eval-dataset", "elsewhere")
        tab.fill("#eval-configs", "default={}")
        tab.click("#eval-run")
        tab.wait_for_selector("#eval-report table.metrics")
        warning = tab.inner_text("#eval-report .warning")
        assert "say nothing about the engine" in warning and "absent from the engine" in warning
        _screenshot(tab, tmp_path, "inspector-eval-warning.png", "#eval-report")
