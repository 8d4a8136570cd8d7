"""Trust is the operator's to grant, on every write path of a server of collections (§15.2,
§15.3), over real loopback HTTP: a key writes at most the level its grant names (``keys
create --trust``), else the collection's ``trust`` setting; a higher label is ``-32602`` on
``documents[i].meta.trust`` for a request, one document of several, or a batch member, and
nothing of it is written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rcpkit.cli import app as rcpkit_app
from rcpkit.tenancy.keys import KeyStore
from rcpkit.tenancy.limits import Limits
from rcpkit.tenancy.scopes import Scopes
from support.http import LOOPBACK_KINDS

from .test_http_collections import CONFIG, Deployment, Tenant


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """Collections ``alpha`` and ``beta`` at the default trust setting, on one server kind
    (test_http_collections runs both)."""
    made = Deployment(tmp_path, LOOPBACK_KINDS[0])
    yield made
    made.close()


def add(tenant: Tenant, collection: str, *documents: dict[str, Any]) -> dict[str, Any]:
    """The whole JSON-RPC reply of an ``index/add`` to ``collection``."""
    return tenant.frame(f"/rcp/{collection}", "index/add", {"documents": list(documents)})


def levels(tenant: Tenant, collection: str) -> dict[str, str]:
    """document id → its hits' ``trust.level``."""
    hits = tenant.ok(f"/rcp/{collection}", "retrieve", {"query": "zqx", "k": 50,
                                                        "unit": "document"})["hits"]
    return {hit["id"]: hit["trust"]["level"] for hit in hits}


def doc(doc_id: str, level: str | None = None) -> dict[str, Any]:
    return {"id": doc_id, "text": f"zqx words of {doc_id}",
            **({"meta": {"trust": level}} if level else {})}


def refused_field(reply: dict[str, Any]) -> str:
    assert reply.get("error", {}).get("code") == -32602, reply
    field: str = reply["error"]["data"]["field"]
    return field


@pytest.mark.wire
def test_a_key_without_a_grant_cannot_label_trusted_or_community(
        deployment: Deployment) -> None:
    token = deployment.key("mallory", "alpha:read,write")
    for _app, client in deployment.serve():
        mallory = Tenant(client, token)
        assert refused_field(add(mallory, "alpha", doc("t", "trusted"))) \
            == "documents[0].meta.trust"
        assert refused_field(add(mallory, "alpha", doc("ok"), doc("c", "community"))) \
            == "documents[1].meta.trust"
        batch = [{"jsonrpc": "2.0", "id": n, "method": "index/add",
                  "params": {"documents": [document]}}
                 for n, document in enumerate([doc("fine"), doc("forged", "trusted")])]
        replies = {reply["id"]: reply for reply in client.post(
            "/rcp/alpha", json=batch, headers=mallory.headers).json()}
        assert replies[0]["result"]["ids"] == ["fine"]
        assert refused_field(replies[1]) == "documents[0].meta.trust"
        assert levels(mallory, "alpha") == {"fine": "untrusted"}


@pytest.mark.wire
def test_a_key_granted_trusted_may_label_up_to_it(deployment: Deployment) -> None:
    """The grant is a permission, not a label: unlabelled writes keep the collection's
    level; the key names ``trusted`` where it means it, in any collection it writes."""
    _, token = deployment.keys.create("editor", Scopes.parse(["*:read,write"]),
                                      trust="trusted")
    for _app, client in deployment.serve():
        editor = Tenant(client, token)
        assert "result" in add(editor, "alpha", doc("vetted", "trusted"), doc("peer", "community"),
                               doc("plain"))
        assert "result" in add(editor, "beta", doc("vetted", "trusted"))
        assert levels(editor, "alpha") == {"vetted": "trusted", "peer": "community",
                                           "plain": "untrusted"}
        assert levels(editor, "beta") == {"vetted": "trusted"}


@pytest.mark.wire
def test_the_collection_setting_is_the_default_and_the_ceiling_without_a_grant(
        tmp_path: Path) -> None:
    made = Deployment(tmp_path, LOOPBACK_KINDS[0], config='trust = "community"\n' + CONFIG)
    writer = made.key("writer", "alpha:read,write")
    _, narrow = made.keys.create("feed", Scopes.parse(["alpha:read,write"]), trust="untrusted")
    try:
        for _app, client in made.serve():
            feed, writer_tenant = Tenant(client, narrow), Tenant(client, writer)
            assert "result" in add(writer_tenant, "alpha", doc("plain"), doc("low", "untrusted"))
            assert refused_field(add(writer_tenant, "alpha", doc("high", "trusted"))) \
                == "documents[0].meta.trust"
            # A key granted less than the collection's level writes at its own.
            assert "result" in add(feed, "alpha", doc("fed"))
            assert refused_field(add(feed, "alpha", doc("fed2", "community"))) \
                == "documents[0].meta.trust"
            assert levels(writer_tenant, "alpha") == {"plain": "community", "low": "untrusted",
                                                      "fed": "untrusted"}
    finally:
        made.close()


@pytest.mark.wire
def test_a_fixed_auth_token_holds_no_grant(tmp_path: Path) -> None:
    """``--auth-token`` credentials reach every collection but grant no trust."""
    made = Deployment(tmp_path, LOOPBACK_KINDS[0])
    made.access.tokens = (b"s3cret",)
    try:
        for _app, client in made.serve():
            legacy = Tenant(client, "s3cret")
            assert refused_field(add(legacy, "alpha", doc("t", "trusted"))) \
                == "documents[0].meta.trust"
            assert levels(legacy, "alpha") == {}
    finally:
        made.close()


def test_keys_create_records_the_grant_and_refuses_an_unknown_level(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(rcpkit_app, ["keys", "create", "editor", "--scope", "docs:write",
                                      "--trust", "community", "--data", str(tmp_path)])
    assert made.exit_code == 0, made.stderr
    bad = runner.invoke(rcpkit_app, ["keys", "create", "x", "--scope", "docs:write",
                                     "--trust", "gospel", "--data", str(tmp_path)])
    assert bad.exit_code == 2 and "gospel" in bad.stderr
    [record] = KeyStore(tmp_path).records().values()
    assert record.trust == "community"
    listed = runner.invoke(rcpkit_app, ["keys", "list", "--json", "--data", str(tmp_path)])
    assert '"trust": "community"' in listed.stdout


@pytest.mark.parametrize("value", ["gospel", 1, None])
def test_a_keys_file_with_a_bad_grant_is_refused(tmp_path: Path, value: Any) -> None:
    """A hand-edited grant the server cannot read fails closed: no key of the file works."""
    store = KeyStore(tmp_path)
    store.create("editor", Scopes.parse(["docs:write"]), Limits())
    document = json.loads(store.path.read_text())
    document["keys"][0]["trust"] = value
    store.path.write_text(json.dumps(document))
    if value is None:  # no grant: the collection's level
        assert next(iter(KeyStore(tmp_path).records().values())).trust is None
        return
    with pytest.raises(ValueError, match="trust"):
        KeyStore(tmp_path).records()
