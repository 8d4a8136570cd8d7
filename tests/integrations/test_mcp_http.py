"""``rcpkit mcp --listen`` in stateless streamable HTTP behind 2 worker processes, driven by
the ``mcp`` SDK's own client over loopback: calls spread across both workers and none lost,
rcpkit keys of a collections root and OAuth 2.1 access tokens of a local test issuer as
bearer tokens (§15.3, §15.6), and the OAuth resource-server surface (RFC 9728 metadata,
``WWW-Authenticate``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("jwt")  # the oauth extra

import httpx
import httpx2
import jwt
from bridge_support import rcpkit
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from rcpkit.integrations.engines import open_engine
from rcpkit.integrations.mcp_http import WORKER_HEADER
from rcpkit.protocol.errors import RcpError
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import Limits
from rcpkit.tenancy.scopes import Scopes
from support.net import free_port, wait_listening

pytestmark = [pytest.mark.timeout(240), pytest.mark.wire]

COLLECTION = "notes"
WRITE_TOOLS = {"index_add", "index_delete", "memory_build"}
QUERIES = ["why do bees swarm", "sourdough starter", "moon phases", "compost heap",
           "tide pools", "honey harvest", "bread crust", "lunar eclipse"]


class Issuer:
    """A local OAuth issuer: an RSA signing key whose JWKS is served on loopback."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**public, "kid": "test-key", "use": "sig",
                                     "alg": "RS256"}]}).encode()

        class Jwks(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.jwks_url = self.url + "/jwks.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def token(self, audience: str, scope: Any = "rcp:read rcp:write", *,
              expires_in: float = 600, issuer: str | None = None,
              key: rsa.RSAPrivateKey | None = None) -> str:
        now = time.time()
        claims = {"iss": issuer or self.url, "sub": "agent-7", "aud": audience,
                  "client_id": "test-agent", "scope": scope, "iat": int(now),
                  "exp": int(now + expires_in)}
        return jwt.encode(claims, key or self.key, algorithm="RS256",
                          headers={"kid": "test-key"})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class Served:
    url: str
    tokens: dict[str, str]
    issuer: Issuer
    announced: str
    collection: Path


@pytest.fixture(scope="module")
def served(sample_kb: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``rcpkit mcp --data ROOT --collection notes --listen … --workers 2`` with the root's
    keys and a local OAuth issuer, in a subprocess."""
    root = tmp_path_factory.mktemp("mcp-root")
    collection = Path(shutil.copytree(sample_kb, root / "collections" / COLLECTION))
    (root / "collections" / "secret").mkdir()
    keys = KeyStore(root)
    tokens = {name: keys.create(name, Scopes.parse(scopes))[1] for name, scopes in (
        ("writer", [f"{COLLECTION}:read,write"]), ("reader", [f"{COLLECTION}:read"]),
        ("everywhere", ["*:read"]), ("elsewhere", ["secret:read,write"]),
        ("revoked", [f"{COLLECTION}:read"]))}
    keys.revoke([next(record.key_id for record in keys.records().values()
                      if record.principal == "revoked")])
    # One call per 1000 s: the second call to a worker is refused (each worker counts its own).
    tokens["limited"] = keys.create("limited", Scopes.parse([f"{COLLECTION}:read"]), Limits(
        requests_per_second=0.001, burst=1))[1]
    tokens["capped"] = keys.create("capped", Scopes.parse([f"{COLLECTION}:read"]), Limits(
        transform_n=1, graph_hops=1))[1]
    tokens["editor"] = keys.create("editor", Scopes.parse([f"{COLLECTION}:read,write"]),
                                   trust="trusted")[1]
    issuer = Issuer()
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    stderr = root / "stderr.txt"
    with stderr.open("wb") as err:
        process = subprocess.Popen(rcpkit(
            "mcp", "--data", str(root), "--collection", COLLECTION,
            "--listen", f"127.0.0.1:{port}", "--workers", "2",
            "--oauth-issuer", issuer.url, "--oauth-jwks", issuer.jwks_url), stderr=err)
    try:
        wait_listening(port, process=process, timeout_s=90)
        yield Served(url, tokens, issuer, announcement(stderr), collection)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        issuer.close()


def announcement(stderr: Path) -> str:
    """The line the server says where it listens (printed as it starts listening)."""
    for _ in range(200):
        if "serving MCP" in (said := stderr.read_text()):
            return said
        time.sleep(0.05)
    raise AssertionError(f"no announcement on stderr: {stderr.read_text()!r}")


@asynccontextmanager
async def mcp_client(url: str, token: str | None, workers: list[str] | None = None,
                     ) -> AsyncIterator[Client]:
    """The SDK's client with ``token``, one connection per request (so the kernel hands
    each to whichever worker accepts first); ``workers`` collects who answered."""
    async def record(response: httpx2.Response) -> None:
        if workers is not None and WORKER_HEADER in response.headers:
            workers.append(response.headers[WORKER_HEADER])

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60,
                                  limits=httpx2.Limits(max_keepalive_connections=0),
                                  event_hooks={"response": [record]}) as http, \
            Client(streamable_http_client(url, http_client=http)) as client:
        yield client


def tool_names(listing: Any) -> set[str]:
    return {tool.name for tool in listing.tools}


def post(url: str, token: str | None = None) -> httpx.Response:
    """A raw ``tools/list`` POST."""
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(url, headers=headers, timeout=60,
                      json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})


async def test_calls_spread_over_two_workers_and_none_is_lost(served: Served) -> None:
    async with open_engine(data=served.collection) as direct:
        expected = {query: [hit.id for hit in (await direct.retrieve(query, k=3)).hits]
                    for query in QUERIES}
    answered: list[str] = []
    async with mcp_client(served.url, served.tokens["reader"], answered) as client:
        calls = [client.call_tool("retrieve", {"query": query, "k": 3})
                 for _ in range(4) for query in QUERIES]
        results = await asyncio.gather(*calls)
    assert "in 2 worker processes" in served.announced
    assert served.url in served.announced
    assert len(results) == 4 * len(QUERIES)
    for result, query in zip(results, [q for _ in range(4) for q in QUERIES], strict=True):
        assert not result.is_error, result.content
        assert [hit["id"] for hit in result.structured_content["hits"]] == expected[query]
    assert len(set(answered)) == 2, answered  # both workers answered some


async def test_a_write_on_one_worker_is_read_on_every_worker(served: Served) -> None:
    answered: list[str] = []
    async with mcp_client(served.url, served.tokens["writer"], answered) as client:
        added = await client.call_tool("index_add", {"documents": [
            {"id": "zqx-note", "text": "zqxwritten by the writer key"}]})
        found = await asyncio.gather(*[client.call_tool(
            "retrieve", {"query": "zqxwritten", "k": 1, "mode": "sparse"}) for _ in range(16)])
    assert not added.is_error, added.content
    assert all(result.structured_content["hits"][0]["id"] == "zqx-note#0" for result in found)
    assert len(set(answered)) == 2, answered


async def test_the_key_scopes_decide_the_tools_and_the_calls(served: Served) -> None:
    async with mcp_client(served.url, served.tokens["writer"]) as client:
        writer_tools = tool_names(await client.list_tools())
    async with mcp_client(served.url, served.tokens["everywhere"]) as client:
        wildcard_tools = tool_names(await client.list_tools())
    async with mcp_client(served.url, served.tokens["reader"]) as client:
        reader_tools = tool_names(await client.list_tools())
        refused = await client.call_tool("index_add", {"documents": [{"text": "nope"}]})
        read = await client.call_tool("retrieve", {"query": "bees", "k": 1})
        resources = (await client.list_resources()).resources
    assert writer_tools >= WRITE_TOOLS
    assert "retrieve" in reader_tools and not reader_tools & WRITE_TOOLS
    assert wildcard_tools == reader_tools
    assert refused.is_error and refused.structured_content["error"]["code"] == -32012
    assert not read.is_error and resources


async def test_a_key_rate_limit_holds_for_mcp_calls(served: Served) -> None:
    """§15.5 on the MCP surface: the key's token bucket refuses calls with ``-32011`` and
    ``retryAfterMs``; with 2 workers at most one call per worker passes."""
    async with mcp_client(served.url, served.tokens["limited"]) as client:
        results = [await client.call_tool("retrieve", {"query": "bees", "k": 1})
                   for _ in range(5)]
    refused = [result for result in results if result.is_error]
    assert 3 <= len(refused) <= 4
    for result in refused:
        error = result.structured_content["error"]
        assert error["code"] == -32011 and error["data"]["retryAfterMs"] > 0


async def test_a_keys_fan_out_caps_hold_for_mcp_calls(served: Served) -> None:
    """§15.5 on the MCP surface, by the rule RCP requests follow: ``n``/``hops`` over the
    key's cap (``2.0`` too) is ``-32602`` naming the field; left out, the default is lowered
    to the cap."""
    async with mcp_client(served.url, served.tokens["capped"]) as client:
        over = [await client.call_tool("transform", {"query": "bees and honey",
                                                     "method": "multi-query", "n": n})
                for n in (2, 2.0)]
        hops = await client.call_tool("graph", {"op": "neighbors", "query": "bees",
                                                "hops": 2})
        left_out = await client.call_tool("transform", {"query": "bees and honey",
                                                        "method": "multi-query"})
    for result, field in zip((*over, hops), ("n", "n", "hops"), strict=True):
        error = result.structured_content["error"]
        assert error["code"] == -32602 and error["data"]["field"] == field, error
    assert not left_out.is_error, left_out.content
    assert len(left_out.structured_content["queries"]) == 1


async def _write_and_find(client: Client, doc_id: str, level: str | None) -> tuple[Any, Any]:
    """An ``index_add`` of one document labelled ``level``, then a search for it."""
    marker = f"zq{doc_id.replace('-', '')}"
    meta = {"trust": level} if level else {}
    added = await client.call_tool("index_add", {"documents": [
        {"id": doc_id, "text": f"{marker} written through MCP", "meta": meta}]})
    found = await client.call_tool("retrieve", {"query": marker, "k": 1, "mode": "sparse"})
    return added, found


async def test_a_keys_trust_grant_and_principal_hold_for_mcp_writes(served: Served) -> None:
    """§15.2, §15.3 on the MCP surface as over RCP: a key granted ``trusted`` labels its
    write so and it is read back so; a key without a grant gets the very refusal RCP sends
    (``-32602`` on ``documents[0].meta.trust``, the engine's message) and writes nothing;
    every write is stamped with the key's principal."""
    async with mcp_client(served.url, served.tokens["editor"]) as client:
        vetted, vetted_found = await _write_and_find(client, "vetted-note", "trusted")
    async with mcp_client(served.url, served.tokens["writer"]) as client:
        forged, forged_found = await _write_and_find(client, "forged-note", "trusted")
        plain, plain_found = await _write_and_find(client, "plain-note", None)
    async with open_engine(data=served.collection) as rcp:  # the same write over RCP
        with pytest.raises(RcpError) as over_rcp:
            await rcp.index_add([{"id": "forged-note", "text": "zqforgednote",
                                  "meta": {"trust": "trusted"}}])
    assert not vetted.is_error, vetted.content
    [hit] = vetted_found.structured_content["hits"]
    assert hit["id"] == "vetted-note#0" and hit["trust"] == {"level": "trusted"}
    assert hit["meta"]["written_by"] == "editor"
    assert forged.is_error and forged_found.structured_content["hits"] == []
    assert forged.structured_content["error"] == {
        "code": over_rcp.value.code, "message": over_rcp.value.message,
        "data": {"field": "documents[0].meta.trust"}}
    assert over_rcp.value.code == -32602
    assert not plain.is_error, plain.content
    [hit] = plain_found.structured_content["hits"]
    assert hit["trust"] == {"level": "untrusted"} and hit["meta"]["written_by"] == "writer"


async def test_an_oauth_subject_is_the_principal_of_its_writes(served: Served) -> None:
    async with mcp_client(served.url, served.issuer.token(served.url)) as client:
        added, found = await _write_and_find(client, "subject-note", None)
    assert not added.is_error, added.content
    [hit] = found.structured_content["hits"]
    assert hit["meta"]["written_by"] == "oauth:agent-7" and "written_at" in hit["meta"]


@pytest.mark.parametrize("token", ["elsewhere", "revoked", "forged", None])
def test_no_valid_key_for_the_collection_is_401(served: Served, token: str | None) -> None:
    presented = {"forged": served.tokens["reader"][:-4] + "AAAA", None: None}.get(
        token, served.tokens.get(token or ""))
    response = post(served.url, presented)
    assert response.status_code == 401, response.text
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
    assert 'resource_metadata="http://127.0.0.1:' in challenge
    assert "tools" not in response.text


def test_protected_resource_metadata(served: Served) -> None:
    challenge = post(served.url).headers["WWW-Authenticate"]
    advertised = challenge.split('resource_metadata="')[1].split('"')[0]
    origin = served.url.removesuffix("/mcp")
    assert advertised == origin + "/.well-known/oauth-protected-resource/mcp"
    for where in (advertised, origin + "/.well-known/oauth-protected-resource"):
        response = httpx.get(where, timeout=30)
        assert response.status_code == 200, where
        metadata = response.json()
        assert metadata["resource"] == served.url
        assert metadata["authorization_servers"] == [served.issuer.url]
        assert metadata["scopes_supported"] == ["rcp:read", "rcp:write"]
        assert metadata["bearer_methods_supported"] == ["header"]


async def test_oauth_tokens_of_the_issuer_map_their_scopes(served: Served) -> None:
    issuer = served.issuer
    async with mcp_client(served.url, issuer.token(served.url)) as client:
        full = tool_names(await client.list_tools())
        added = await client.call_tool("index_add", {"documents": [{"id": "oauth-note",
                                                                    "text": "via a JWT"}]})
    async with mcp_client(served.url, issuer.token(served.url, "rcp:read")) as client:
        read_only = tool_names(await client.list_tools())
        refused = await client.call_tool("index_delete", {"ids": ["oauth-note"]})
        found = await client.call_tool("retrieve", {"query": "bees", "k": 1})
    assert full >= WRITE_TOOLS and not added.is_error, added.content
    assert "retrieve" in read_only and not read_only & WRITE_TOOLS
    assert refused.is_error and refused.structured_content["error"]["code"] == -32012
    assert not found.is_error


def test_bad_oauth_tokens_are_refused(served: Served) -> None:
    issuer = served.issuer
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused = {
        "expired": issuer.token(served.url, expires_in=-120),
        "wrong audience": issuer.token("http://127.0.0.1:1/mcp"),
        "wrong issuer": issuer.token(served.url, issuer="http://127.0.0.1:1"),
        "wrong signing key": issuer.token(served.url, key=other_key),
    }
    for case, token in refused.items():
        response = post(served.url, token)
        assert response.status_code == 401, case
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"], case
    for scope in ("profile email", 7, {"rcp:read": True}):  # odd claims are no grant either
        wrong_scope = post(served.url, issuer.token(served.url, scope))
        assert wrong_scope.status_code == 403, scope
        assert 'error="insufficient_scope"' in wrong_scope.headers["WWW-Authenticate"]
    listed = post(served.url, issuer.token(served.url, ["rcp:read"]))
    assert listed.status_code == 200 and '"retrieve"' in listed.text
    assert post(served.url, issuer.token(served.url)).status_code == 200


def test_cli_refuses_http_options_without_listen(tmp_path: Path) -> None:
    (tmp_path / "collections" / "notes").mkdir(parents=True)
    runs = [subprocess.run(rcpkit("mcp", *args), capture_output=True, text=True, timeout=60)
            for args in (["--data", str(tmp_path), "--workers", "2"],
                         ["--data", str(tmp_path)],
                         ["--data", str(tmp_path), "--collection", "missing"],
                         ["--data", str(tmp_path / "collections" / "notes"),
                          "--collection", "notes"],
                         ["--data", str(tmp_path), "--collection", "notes", "--listen",
                          "127.0.0.1:9", "--oauth-issuer", "http://127.0.0.1:1"])]
    for run in runs:
        assert run.returncode == 2, run.stderr
        assert run.stdout == ""
        assert run.stderr.startswith("rcpkit mcp: error: ") and "Traceback" not in run.stderr
    assert "name one with --collection" in runs[1].stderr
