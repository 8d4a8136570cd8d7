"""``rcpkit collection``, ``rcpkit keys``, ``rcpkit provenance`` and the ``--collection``
option of ``index``/``query``/``serve``, through the Typer app."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcpkit.cli import app
from rcpkit.client.client import connect_stdio
from rcpkit.engine import open_engine
from rcpkit.engine.types import DocumentIn, FeedbackSignal
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.provenance import stamp

CONFIG = 'embedder = "hashing"\nhashing_dimension = 64\n'
runner = CliRunner()


def rcpkit(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def make_root(tmp_path: Path, *names: str) -> Path:
    config = tmp_path / "hashing.toml"
    config.write_text(CONFIG)
    root = tmp_path / "root"
    for name in names:
        code, _, err = rcpkit("collection", "create", name, "--data", str(root),
                              "--config", str(config))
        assert code == 0, err
    return root


def test_collection_create_list_drop(tmp_path: Path) -> None:
    root = make_root(tmp_path, "docs", "notes")
    assert rcpkit("collection", "list", "--data", str(root))[1].split() == ["docs", "notes"]
    code, _, err = rcpkit("collection", "create", "docs", "--data", str(root))
    assert (code, err.strip()) == (2, "rcpkit collection create: error: collection 'docs' "
                                      "exists already")
    for bad in ("Docs", "retrieve", "x-acme", "../up"):
        code, _, err = rcpkit("collection", "create", bad, "--data", str(root))
        assert code == 2 and err.count("\n") == 1, err
    assert rcpkit("collection", "drop", "docs", "--data", str(root), "--yes")[0] == 0
    assert rcpkit("collection", "list", "--data", str(root))[1].split() == ["notes"]
    code, _, err = rcpkit("collection", "drop", "docs", "--data", str(root), "--yes")
    assert code == 2 and "no collection 'docs'" in err


def test_keys_are_stored_hashed_and_revocable(tmp_path: Path) -> None:
    root = tmp_path / "root"
    code, out, err = rcpkit("keys", "create", "alice", "--scope", "docs:read,write",
                            "--scope", "*:read", "--limit", "requests_per_second=2.5",
                            "--data", str(root))
    assert code == 0, err
    token = out.strip()
    store = KeyStore(root)
    record = store.authenticate(token)
    assert record is not None and record.principal == "alice"
    assert record.scopes.allows("docs", "write") and not record.scopes.allows("notes", "write")
    assert record.limits.requests_per_second == 2.5
    secret = token.split("_", 2)[2]  # the secret itself may hold "_"
    assert secret not in store.path.read_text()
    assert store.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    listed = json.loads(rcpkit("keys", "list", "--data", str(root), "--json")[1])
    assert [(k["principal"], k["revoked"], "sha256" in k) for k in listed] == \
        [("alice", False, False)]
    assert rcpkit("keys", "revoke", record.key_id, "--data", str(root))[0] == 0
    assert KeyStore(root).authenticate(token) is None
    code, _, err = rcpkit("keys", "create", "bob", "--scope", "docs:delete", "--data", str(root))
    assert code == 2 and "neither read nor write" in err
    code, _, err = rcpkit("keys", "create", "bob", "--scope", "docs", "--limit", "burst=0",
                          "--data", str(root))
    assert code == 2 and "burst must be a positive integer" in err


def test_provenance_lists_and_purges_by_principal_and_source(tmp_path: Path) -> None:
    root = make_root(tmp_path, "docs")
    engine = open_engine(root / "collections" / "docs")
    try:
        engine.add([DocumentIn(text=f"text {n}", id=f"d{n}",
                               meta=stamp({"source": f"feed-{n % 2}"}, who, 1_000.0))
                    for n, who in enumerate(["alice", "bob", "alice", "bob"])])
        engine.feedback([FeedbackSignal(hit_id="d1", poison_suspected=True),
                         FeedbackSignal(hit_id="d3", poison_suspected=True)])
    finally:
        engine.close()
    code, out, err = rcpkit("provenance", "sources", "--collection", "docs", "--data", str(root))
    assert code == 0, err
    rows = {line.split()[1]: line.split()[3] for line in out.splitlines() if ":" in line}
    assert rows == {"source:feed-1": "2", "written_by:bob": "2"}
    code, _, err = rcpkit("provenance", "clear", "--collection", "docs", "--data", str(root),
                          "--principal", "bob", "--source", "feed-1")
    assert code == 2 and "name a principal or a source" in err
    code, out, _ = rcpkit("provenance", "list", "--collection", "docs", "--data", str(root),
                          "--principal", "alice")
    assert "d0" in out and "d2" in out and "d1" not in out and "2 documents" in out
    code, out, _ = rcpkit("provenance", "purge", "--collection", "docs", "--data", str(root),
                          "--source", "feed-1", "--yes")
    assert (code, out.strip()) == (0, "deleted 2 documents")
    code, out, _ = rcpkit("provenance", "list", "--collection", "docs", "--data", str(root),
                          "--principal", "bob")
    assert "0 documents" in out
    code, _, err = rcpkit("provenance", "list", "--collection", "docs", "--data", str(root))
    assert code == 2 and "name a principal, a source or both" in err


def test_index_and_query_a_collection(tmp_path: Path) -> None:
    root = make_root(tmp_path, "docs", "notes")
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "owls.txt").write_text("owls hunt at night")
    code, _, err = rcpkit("index", "add", str(folder), "--data", str(root),
                          "--collection", "docs")
    assert code == 0, err
    code, out, _ = rcpkit("query", "owls", "--data", str(root), "--collection", "docs")
    assert code == 0 and "owls.txt" in out
    code, out, _ = rcpkit("query", "owls", "--data", str(root), "--collection", "notes")
    assert "owls.txt" not in out
    code, _, err = rcpkit("index", "stats", "--data", str(root), "--collection", "gone")
    assert code == 2 and "no collection 'gone'" in err
    code, out, _ = rcpkit("provenance", "list", "--collection", "docs", "--data", str(root),
                          "--source", "owls.txt")
    assert "local:" in out


def test_serve_needs_one_collection_over_stdio(tmp_path: Path) -> None:
    root = make_root(tmp_path, "docs")
    code, _, err = rcpkit("serve", "--stdio", "--data", str(root))
    assert code == 2 and "exactly one --collection" in err
    code, _, err = rcpkit("serve", "--http", "127.0.0.1:0", "--data", str(root),
                          "--sessions", "token")
    assert code == 2 and "--sessions stateless" in err
    code, _, err = rcpkit("serve", "--stdio", "--data", str(tmp_path / "plain"),
                          "--collection", "docs")
    assert code == 2 and "--collection needs --data ROOT" in err


@pytest.mark.wire
async def test_serve_over_stdio_serves_one_collection_and_stamps_its_writes(
        tmp_path: Path) -> None:
    root = make_root(tmp_path, "docs", "notes")
    argv = [sys.executable, "-c", "from rcpkit.cli import main; main()",
            "serve", "--stdio", "--data", str(root), "--collection", "notes"]
    async with await connect_stdio(argv) as client:
        await client.index_add([{"id": "n1", "text": "moths fly to the lamp"}])
        result = await client.retrieve("moths", k=1)
        assert [(hit.meta or {}).get("written_by") for hit in result.hits] == ["stdio"]
    engine = open_engine(root / "collections" / "docs")
    try:
        assert engine.stats()["documents"] == 0
    finally:
        engine.close()
