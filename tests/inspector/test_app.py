"""The inspector's web API against the built-in engine over stdio (the sample notes)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from rcpkit.eval.datasets import CorpusDocument, Dataset, write_beir
from rcpkit.eval.runner import EvalConfig
from rcpkit.federation.registry import Registry
from rcpkit.inspector import Inspector, TargetSpec, create_app
from rcpkit.inspector.app import TOKEN_HEADER
from rcpkit.inspector.sample_eval import sample_dataset
from rcpkit.protocol.errors import RcpError
from rcpkit.transports.http import create_app as create_rcp_app
from support.example_server import build_test_server
from support.http import LoopbackServer
from support.mcp_stdio import mcp_stdio_replies

from .conftest import RCPKIT, engine_dir, sse_events

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN = "test-token"
HOST = "127.0.0.1:8999"
EXAMPLE_SERVER = TargetSpec(
    stdio=[sys.executable, str(Path(__file__).parents[1] / "support" / "example_server.py")])


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def inspector(sample_data: Path) -> AsyncIterator[Inspector]:
    opened = await Inspector.open(TargetSpec(data=sample_data))
    yield opened
    await opened.close()


@contextlib.asynccontextmanager
async def _served(spec: TargetSpec, **options: Any
                  ) -> AsyncIterator[tuple[Inspector, httpx.AsyncClient]]:
    """An inspector on ``spec`` (``options`` for :meth:`Inspector.open`) and a client of its
    web app (closed afterwards)."""
    inspector = await Inspector.open(spec, **options)
    try:
        app = create_app(inspector, TOKEN, hosts={HOST})
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=f"http://{HOST}",
                                     headers={TOKEN_HEADER: TOKEN}, timeout=60) as web:
            yield inspector, web
    finally:
        await inspector.close()


@pytest_asyncio.fixture(loop_scope="module")
async def web(inspector: Inspector) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(inspector, TOKEN, hosts={HOST})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{HOST}",
                                 headers={TOKEN_HEADER: TOKEN}, timeout=60) as client:
        yield client


async def _events(web: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await web.post(path, json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return sse_events(response.content)


async def _outcome(web: httpx.AsyncClient, method: str, params: dict[str, Any],
                   **options: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events = await _events(web, "/api/call", {"method": method, "params": params, **options})
    assert events[-1]["type"] == "outcome"
    return [event for event in events if event["type"] == "frame"], events[-1]


# ── access control ───────────────────────────────────────────────────────────

async def test_the_api_and_the_page_need_the_token(web: httpx.AsyncClient) -> None:
    assert (await web.get("/api/overview", headers={TOKEN_HEADER: ""})).status_code == 403
    assert (await web.get("/api/overview", headers={TOKEN_HEADER: "guess"})).status_code == 403
    assert (await web.post("/api/call", json={"method": "ping"},
                           headers={TOKEN_HEADER: "guess"})).status_code == 403
    assert (await web.get("/")).status_code == 403
    page = await web.get("/", params={"token": TOKEN})
    assert page.status_code == 200 and "RCP inspector" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"


async def test_a_foreign_host_header_is_refused(web: httpx.AsyncClient) -> None:
    """A DNS-rebinding page would reach the loopback port under its own host name."""
    response = await web.get("/api/overview", headers={"host": "attacker.example:8999"})
    assert response.status_code == 421


async def test_assets_are_served_from_the_package_without_a_token(web: httpx.AsyncClient) -> None:
    script = await web.get("/static/inspector.js", headers={TOKEN_HEADER: ""})
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript")
    assert "http://" not in script.text.replace("http://www.w3.org/2000/svg", "")
    assert (await web.get("/static/missing.js")).status_code == 404


# ── overview ─────────────────────────────────────────────────────────────────

async def test_overview_describes_the_server_and_its_forms(web: httpx.AsyncClient) -> None:
    view = (await web.get("/api/overview")).json()
    assert view["server"]["name"] == "rcpkit-engine"
    assert view["protocolVersion"] == 1 and view["conformance"] in ("L0", "L1", "L2")
    assert "hybrid" in view["capabilities"]["retrieve"]["modes"]
    assert view["capabilities"]["filter"]["fields"]["tag"] == "keyword"
    methods = {method["name"]: method for method in view["methods"]}
    assert "initialize" not in methods
    assert all(method["advertised"] == (method["capability"] is None
                                        or method["capability"] in view["capabilities"])
               for method in methods.values())
    assert methods["retrieve"]["advertised"] and methods["ping"]["capability"] is None
    retrieve = view["definitions"]["RetrieveParams"]
    assert methods["retrieve"]["schema"] == {"$ref": "#/$defs/RetrieveParams"}
    assert set(retrieve["required"]) == {"query", "k"} and "candidateK" in retrieve["properties"]
    assert view["choices"]["retrieve.mode"] == "retrieve.modes"
    assert "reranking" in methods["retrieve"]["help"]["candidateK"]  # the forms' hints
    assert methods["retrieve"]["help"]["fusion.method"] and "nonce" in methods["ping"]["help"]
    handshake = [frame["frame"].get("method") for frame in view["frames"][:1]]
    assert handshake == ["initialize"]


# ── calls ────────────────────────────────────────────────────────────────────

async def test_a_streamed_retrieve_shows_request_progress_and_response_frames(
        web: httpx.AsyncClient) -> None:
    frames, outcome = await _outcome(web, "retrieve", {"query": "why do bees swarm", "k": 3},
                                     stream=True)
    request = frames[0]["frame"]
    assert frames[0]["direction"] == "sent" and request["method"] == "retrieve"
    token = request["params"]["_meta"]["progressToken"]
    progress = [f["frame"] for f in frames if f["frame"].get("method") == "notifications/progress"]
    assert progress and all(p["params"]["progressToken"] == token for p in progress)
    assert frames[-1]["frame"]["id"] == request["id"] and "result" in frames[-1]["frame"]
    hits = outcome["result"]["hits"]
    assert len(hits) == 3 and outcome["problem"] is None and outcome["connected"]
    assert {"swarming#0", "honeybee-colonies#0"} & {hit["id"] for hit in hits}


async def test_without_stream_no_progress_token_is_sent(web: httpx.AsyncClient) -> None:
    frames, outcome = await _outcome(web, "retrieve", {"query": "compost", "k": 2})
    assert "progressToken" not in frames[0]["frame"]["params"].get("_meta", {})
    assert [f["direction"] for f in frames] == ["sent", "received"]
    assert len(outcome["result"]["hits"]) == 2


async def test_the_servers_own_errors_are_shown_not_the_clients(web: httpx.AsyncClient) -> None:
    _, bad_k = await _outcome(web, "retrieve", {"query": "x", "k": 0})
    assert bad_k["error"]["code"] == -32602 and bad_k["error"]["data"]["field"] == "k"
    _, bad_mode = await _outcome(web, "retrieve", {"query": "x", "k": 1, "mode": "psychic"})
    assert bad_mode["error"]["code"] == -32005 and bad_mode["error"]["data"]["option"] == "psychic"
    view = (await web.get("/api/overview")).json()
    missing = next(m["name"] for m in view["methods"] if not m["advertised"])
    _, unadvertised = await _outcome(web, missing, {})
    assert unadvertised["error"]["code"] == -32003  # the server refuses it, not the client
    _, pong = await _outcome(web, "ping", {"nonce": 5})
    assert pong["result"] == {"nonce": 5}


@pytest.mark.parametrize(("body", "field"), [
    ({"params": {}}, "method"),
    ({"method": 3}, "method"),
    ({"method": "ping", "params": [1]}, "params"),
    ({"method": "ping", "stream": "yes"}, "stream"),
    ({"method": "ping", "deadlineMs": 0}, "deadlineMs"),
    ({"method": "ping", "deadlineMs": True}, "deadlineMs"),
])
async def test_a_malformed_call_body_is_400_naming_the_field(
        web: httpx.AsyncClient, body: dict[str, Any], field: str) -> None:
    response = await web.post("/api/call", json=body)
    assert response.status_code == 400 and response.json()["error"]["field"] == field


async def test_a_body_that_is_not_a_json_object_is_400(web: httpx.AsyncClient) -> None:
    for content in (b"{", b"[1, 2]"):
        response = await web.post("/api/call", content=content)
        assert response.status_code == 400 and "message" in response.json()["error"]


# ── certify and eval ─────────────────────────────────────────────────────────

async def test_certify_streams_each_check_then_the_report(web: httpx.AsyncClient) -> None:
    events = await _events(web, "/api/certify", {"only": ["life.*"]})
    checks = [event for event in events if event["type"] == "check"]
    report = events[-1]
    assert report["type"] == "report" and report["report"]["partial"] is True
    assert checks and all(check["id"].startswith("life.") for check in checks)
    assert [check["id"] for check in checks] == [c["id"] for c in report["report"]["checks"]]
    assert report["report"]["counts"]["fail"] == 0


async def test_certify_refuses_a_malformed_selection(web: httpx.AsyncClient) -> None:
    response = await web.post("/api/certify", json={"only": ["life.*", 3]})
    assert response.status_code == 400 and response.json()["error"]["field"] == "only"


async def test_eval_on_the_bundled_sample_scores_the_loaded_corpus(
        web: httpx.AsyncClient) -> None:
    events = await _events(web, "/api/eval", {"configs": ['bm25={"mode": "sparse"}',
                                                          'hybrid={"mode": "hybrid"}']})
    progress = [event for event in events if event["type"] == "progress"]
    final = events[-1]
    assert final["type"] == "report", events[-3:]
    report = final["report"]
    assert report["dataset"] == "rcpkit-sample" and report["indexing"].startswith("skipped")
    assert [config["name"] for config in report["configs"]] == ["bm25", "hybrid"]
    bm25 = report["configs"][0]
    assert bm25["error"] is None and bm25["queriesEvaluated"] == len(final["latencies"]["bm25"])
    assert 0.5 < bm25["metrics"]["nDCG@10"] <= 1.0  # BM25 finds these notes by their words
    assert progress and progress[-1]["done"] == progress[-1]["total"]


async def test_eval_reports_a_missing_collection_and_bad_configs(
        web: httpx.AsyncClient) -> None:
    events = await _events(web, "/api/eval", {"dataset": "no-such-dataset"})  # under the cwd
    assert events[-1]["type"] == "failed" and "not found" in events[-1]["message"]
    response = await web.post("/api/eval", json={"configs": ["no-equals-sign"]})
    assert response.status_code == 400 and response.json()["error"]["field"] == "configs"


@pytest.mark.wire
async def test_eval_warns_when_the_engine_holds_none_of_the_collection(
        web: httpx.AsyncClient, tmp_path: Path) -> None:
    """The sample collection under other ids against the test server (other data): it
    returns only documents the qrels do not know, and the report says why every score is 0;
    the matching collection on the sample engine gets no warning."""
    sample = sample_dataset()
    renamed = Dataset(name="renamed", corpus=[CorpusDocument(id=f"other-{doc.id}", text=doc.text)
                                              for doc in sample.corpus],
                      queries=sample.queries,
                      qrels={query: {f"other-{doc}": grade for doc, grade in judged.items()}
                             for query, judged in sample.qrels.items()})
    write_beir(renamed, tmp_path / "renamed")
    configs = ['bm25={"mode": "sparse"}']
    matching = (await _events(web, "/api/eval", {"configs": configs}))[-1]["report"]
    assert matching["warnings"] == []
    events: list[dict[str, Any]] = []
    opened = await Inspector.open(EXAMPLE_SERVER, eval_root=tmp_path)
    try:
        await opened.evaluate(events.append, dataset="renamed",
                              configs=[EvalConfig(name="bm25", params={})])
    finally:
        await opened.close()
    report = events[-1]["report"]
    assert report["configs"][0]["metrics"]["nDCG@10"] == 0.0
    [warning] = report["warnings"]
    assert "absent from the engine" in warning and "'renamed'" in warning


@pytest.mark.wire
async def test_eval_without_index_never_writes_to_the_engine(tmp_path: Path) -> None:
    """The corpus goes into the inspected engine only when the user asks for it."""
    empty = await Inspector.open(TargetSpec(data=engine_dir(tmp_path / "empty",
                                                            with_sample=False)))
    try:
        events: list[dict[str, Any]] = []
        await empty.evaluate(events.append, dataset="rcpkit-sample",
                             configs=[EvalConfig(name="bm25", params={"mode": "sparse"})])
        report = events[-1]["report"]
        assert report["indexing"] == "skipped (--no-index)"
        sent = [frame.frame.get("method") for frame in empty.frames.recent
                if frame.direction == "sent"]
        assert "index/add" not in sent
        assert report["configs"][0]["metrics"]["nDCG@10"] == 0.0
        [warning] = report["warnings"]  # 0.000 everywhere, and why
        assert "returned no hits" in warning
    finally:
        await empty.close()



@pytest.mark.wire
async def test_eval_reads_only_datasets_under_the_root_given_at_start(tmp_path: Path) -> None:
    """The page names a directory; the inspector reads it only under ``--eval-root``, whatever
    ``..``, an absolute path or a symlink (of the directory or of a file in it) says."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    sample = sample_dataset()
    write_beir(sample, root / "notes")
    write_beir(sample, outside / "secret")
    (root / "linked").symlink_to(outside / "secret", target_is_directory=True)
    (root / "mixed" / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        target = outside / "secret" / name
        (root / "mixed" / name).symlink_to(target) if name == "corpus.jsonl" else \
            (root / "mixed" / name).write_bytes(target.read_bytes())
    configs = ['bm25={"mode": "sparse"}']
    async with _served(EXAMPLE_SERVER, eval_root=root) as (_, web):
        for dataset in (str(outside / "secret"), "../outside/secret", "linked", "mixed",
                        str(root / "notes" / ".." / ".." / "outside" / "secret")):
            events = await _events(web, "/api/eval", {"dataset": dataset, "configs": configs})
            assert events[-1]["type"] == "failed", (dataset, events[-1])
            assert "outside the evaluation root" in events[-1]["message"], dataset
            assert not [event for event in events if event["type"] == "progress"], dataset
        for dataset in ("notes", str(root / "notes")):
            events = await _events(web, "/api/eval", {"dataset": dataset, "configs": configs})
            assert events[-1]["type"] == "report", (dataset, events[-1])
            assert events[-1]["report"]["dataset"] == "notes"


# ── an HTTP server of someone else's, with credentials ──────────────────────

@pytest.mark.wire
async def test_over_http_credentials_stay_out_of_the_page_and_progress_streams() -> None:
    secret = "sekret-token-never-in-the-page"
    rcp_app = create_rcp_app(build_test_server(), auth_tokens=[secret])
    with LoopbackServer(rcp_app) as upstream:
        with pytest.raises(RcpError) as refused:  # no credentials: the server says no
            await Inspector.open(TargetSpec(http=upstream.url + "/rcp"))
        assert refused.value.code == -32012
        spec = TargetSpec(http=upstream.url + "/rcp",
                          headers={"Authorization": f"Bearer {secret}"})
        async with _served(spec) as (_, web):
            overview = await web.get("/api/overview")
            assert overview.json()["target"] == {"transport": "http",
                                                 "address": upstream.url + "/rcp"}
            frames, outcome = await _outcome(web, "x-test/sleep", {"seconds": 0.01},
                                             stream=True)
            page_bytes = overview.content + b"".join(
                [(await web.get(f"/static/{name}")).content
                 for name in ("index.html", "inspector.js")])
    assert secret.encode() not in page_bytes
    assert secret not in str(frames)  # frames hold messages, never HTTP headers
    assert outcome["result"] == {"slept": 0.01}
    progress = [f["frame"] for f in frames if f["frame"].get("method") == "notifications/progress"]
    assert progress and progress[0]["params"]["stage"] == "sleep"  # over SSE (§5.2, §9)


@pytest.mark.wire
async def test_after_shutdown_the_page_sees_it_and_can_reconnect() -> None:
    """A stdio server that was sent ``shutdown`` exits (§7.12); reconnect starts a new one."""
    async with _served(EXAMPLE_SERVER) as (inspector, web):
        _, shutdown = await _outcome(web, "shutdown", {})
        assert shutdown["result"] == {}
        await inspector.client.session.transport.close()  # the connection ends
        _, dead = await _outcome(web, "ping", {})
        assert "error" in dead and dead["connected"] is False
        assert (await web.get("/api/overview")).json()["connected"] is False
        again = await web.post("/api/reconnect", json={})
        assert again.status_code == 200 and again.json()["connected"] is True
        _, pong = await _outcome(web, "ping", {"nonce": "back"})
        assert pong["result"] == {"nonce": "back"}
        methods = [frame["frame"].get("method") for frame in again.json()["frames"]]
        assert methods.count("initialize") == 2  # the history spans both connections


@pytest.mark.wire
async def test_a_result_without_the_spec_shape_is_flagged_with_the_servers_stderr() -> None:
    """The inspector shows what the server sent, and says where it breaks §7.7."""
    sloppy = [sys.executable, str(Path(__file__).with_name("sloppy_server.py"))]
    async with _served(TargetSpec(stdio=sloppy)) as (_, web):
        _, outcome = await _outcome(web, "retrieve", {"query": "x", "k": 1})
        assert outcome["result"] == {"hits": [{"id": "a", "text": "no score here"}]}
        assert outcome["problem"]["field"] == "hits[0].score"
        overview = (await web.get("/api/overview")).json()
    assert "sloppy: answering without scores" in overview["stderr"]


@pytest.mark.wire
async def test_a_call_can_ask_for_its_own_server_logs() -> None:
    """``logLevel`` asks for the request's ``notifications/log`` frames (§17.1 per request)."""
    async with _served(EXAMPLE_SERVER) as (_, web):
        frames, outcome = await _outcome(web, "x-test/log", {}, logLevel="info")
        quiet, _ = await _outcome(web, "x-test/log", {})
        bad = await web.post("/api/call", json={"method": "ping", "logLevel": "loud"})
    assert outcome["result"] == {}
    logs = [f["frame"]["params"] for f in frames if f["frame"].get("method") ==
            "notifications/log"]
    assert [log["level"] for log in logs] == ["info", "warning"]  # debug is below info
    assert frames[0]["frame"]["params"]["_meta"]["logLevel"] == "info"
    assert not any(f["frame"].get("method") == "notifications/log" for f in quiet)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "logLevel"


# ── connecting elsewhere from the page, and exporting the connection ─────────

SLOPPY = TargetSpec(stdio=[sys.executable, str(Path(__file__).with_name("sloppy_server.py"))])


@pytest.mark.wire
async def test_the_page_connects_to_an_http_server_and_to_allowed_commands_only(
        tmp_path: Path) -> None:
    """HTTP: any URL; stdio: only a command of the allow-list (and the first target); any
    other command is refused before anything starts, and a failed connect keeps the old
    connection."""
    marker = tmp_path / "launched"
    with LoopbackServer(create_rcp_app(build_test_server())) as upstream:
        async with _served(EXAMPLE_SERVER, allowed_stdio=[SLOPPY]) as (_, web):
            first = (await web.get("/api/overview")).json()
            assert first["allowedStdio"] == [EXAMPLE_SERVER.describe()["address"],
                                             SLOPPY.describe()["address"]]
            for body, field in [({"stdio": f"touch {marker}"}, "stdio"),
                                ({"stdio": SLOPPY.describe()["address"] + " --more"}, "stdio"),
                                ({"http": "file:///etc/passwd"}, "http"),
                                ({}, "http"),
                                ({"http": upstream.url + "/rcp", "headers": {"A": 1}}, "headers")]:
                refused = await web.post("/api/connect", json=body)
                assert refused.status_code == 400, body
                assert refused.json()["error"]["field"] == field, body
            unreachable = await web.post("/api/connect", json={"http": "http://127.0.0.1:9/rcp"})
            assert unreachable.status_code == 502
            _, pong = await _outcome(web, "ping", {"nonce": "still here"})
            assert pong["result"] == {"nonce": "still here"}

            over_http = await web.post("/api/connect", json={"http": upstream.url + "/rcp"})
            assert over_http.status_code == 200
            assert over_http.json()["target"] == {"transport": "http",
                                                  "address": upstream.url + "/rcp"}
            _, slept = await _outcome(web, "x-test/sleep", {"seconds": 0.01})
            assert slept["result"] == {"slept": 0.01}

            sloppy = await web.post("/api/connect",
                                    json={"stdio": SLOPPY.describe()["address"]})
            assert sloppy.status_code == 200 and sloppy.json()["server"]["name"] == "sloppy"
            _, hits = await _outcome(web, "retrieve", {"query": "x", "k": 1})
            assert hits["result"]["hits"][0]["id"] == "a"
            back = await web.post("/api/connect",
                                  json={"stdio": EXAMPLE_SERVER.describe()["address"]})
            assert back.status_code == 200 and back.json()["server"]["name"] != "sloppy"
    assert not marker.exists()


async def test_the_export_is_a_working_mcp_host_entry_and_a_valid_registry_entry(
        web: httpx.AsyncClient, sample_data: Path) -> None:
    exported = (await web.get("/api/overview")).json()["export"]
    registry = Registry.from_dict(exported["rcpJson"])  # the federation's own rcp.json parser
    [engine] = registry.engines
    assert engine.id == "rcpkit-engine"
    assert list(engine.replicas[0].command) == ["rcpkit", "serve", "--stdio", "--data",
                                                str(sample_data.resolve())]
    server = exported["mcpHost"]["mcpServers"]["rcpkit-engine"]
    assert server["command"] == "rcpkit" and server["args"][0] == "mcp"
    # What a host would run answers MCP's initialize and lists the retrieve tool.
    answers, process = await mcp_stdio_replies([*RCPKIT, *server["args"]],
                                               [{"method": "tools/list"}])
    process.kill()
    await process.communicate()
    assert answers[0]["result"]["serverInfo"]["name"]
    assert "retrieve" in {tool["name"] for tool in answers[1]["result"]["tools"]}


async def test_an_http_export_keeps_the_credentials_out() -> None:
    secret = "sekret-never-exported"
    spec = TargetSpec(http="http://127.0.0.1:1/rcp", headers={"Authorization": f"Bearer {secret}"})
    exported = spec.export("Acme Search 2")
    assert secret not in json.dumps(exported)
    [entry] = exported["rcpJson"]["engines"]
    assert entry == {"id": "acme-search-2", "transport": "http", "url": "http://127.0.0.1:1/rcp",
                     "headers": {"Authorization": "<Authorization value>"}}
    Registry.from_dict(exported["rcpJson"])
    assert exported["mcpHost"]["mcpServers"]["acme-search-2"]["args"] == [
        "mcp", "--http", "http://127.0.0.1:1/rcp", "--header",
        "Authorization: <Authorization value>"]
