"""The OpenRPC document generated from the method table (:mod:`rcpkit.protocol.openrpc`):
valid against the OpenRPC meta-schema, exactly the methods a capability set offers (§6, the
§7 roster), and params schemas that agree with the typed params' decoding (§7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from protocol.test_types import VALID
from rcpkit.protocol.capabilities import CAPABILITY_TYPES, Capabilities
from rcpkit.protocol.methods import METHODS, decode_params
from rcpkit.protocol.openrpc import OPENRPC_VERSION, openrpc_document

META_SCHEMA = Path(__file__).parents[1] / "support" / "openrpc" / "meta-schema.json"
UNGATED = {"initialize", "info", "ping", "shutdown", "notifications/cancel"}

#: Every capability key advertised (an index that is writable).
EVERYTHING = Capabilities({key: {"writable": True} if key == "index" else {}
                           for key in CAPABILITY_TYPES})


def _meta_validator() -> jsonschema.Draft7Validator:
    """The OpenRPC meta-schema, its external JSON Schema meta-schema stood in by draft-07's
    (plus the one member the meta-schema points into), so it validates offline."""
    stand_in = {key: value for key, value in jsonschema.Draft7Validator.META_SCHEMA.items()
                if key != "$id"}
    stand_in["definitions"] = {**stand_in["definitions"], "JSONSchemaObject": {
        "properties": {"$ref": {"type": "string", "format": "uri-reference"}}}}
    resource = Resource.from_contents(stand_in, default_specification=DRAFT7)
    registry: Registry[Any] = Registry().with_resources(
        [("https://meta.json-schema.tools", resource),
         ("https://meta.json-schema.tools/", resource)])
    return jsonschema.Draft7Validator(json.loads(META_SCHEMA.read_text(encoding="utf-8")),
                                      registry=registry)


def _names(document: dict[str, Any]) -> set[str]:
    return {method["name"] for method in document["methods"]}


def _params_validator(document: dict[str, Any], method: str) -> jsonschema.Draft202012Validator:
    """One JSON Schema for ``method``'s params object, from its by-name content descriptors
    (their ``#/components/schemas/…`` references resolve against the document)."""
    (described,) = [entry for entry in document["methods"] if entry["name"] == method]
    assert described["paramStructure"] == "by-name"
    return jsonschema.Draft202012Validator({
        "type": "object",
        "properties": {param["name"]: param["schema"] for param in described["params"]},
        "required": [param["name"] for param in described["params"] if param["required"]],
        "components": document["components"]})


@pytest.mark.parametrize("caps", [EVERYTHING, Capabilities(),
                                  Capabilities({"retrieve": {"maxK": 5}, "filter": {}})],
                         ids=["everything", "nothing", "retrieve"])
def test_the_document_is_valid_openrpc(caps: Capabilities) -> None:
    document = openrpc_document("engine", "1.2", caps, url="http://127.0.0.1:1/rcp")
    _meta_validator().validate(document)
    assert document["openrpc"] == OPENRPC_VERSION
    assert document["info"]["title"] == "engine" and document["info"]["version"] == "1.2"
    assert document["servers"] == [{"name": "engine", "url": "http://127.0.0.1:1/rcp"}]


def _without_params(document: dict[str, Any]) -> None:
    del document["methods"][0]["params"]


def _bad_schema(document: dict[str, Any]) -> None:
    document["components"]["schemas"]["Hit"]["type"] = 5


@pytest.mark.parametrize("breaking", [_without_params, _bad_schema])
def test_the_meta_schema_rejects_a_broken_document(breaking: Any) -> None:
    """The offline meta-schema really checks, the embedded JSON Schemas included."""
    document = openrpc_document("engine", "1.2", EVERYTHING)
    _meta_validator().validate(document)
    breaking(document)
    with pytest.raises(jsonschema.ValidationError):
        _meta_validator().validate(document)


def test_every_method_appears_when_everything_is_advertised() -> None:
    document = openrpc_document("engine", "1.2", EVERYTHING)
    assert _names(document) == set(METHODS) | {"notifications/cancel"}
    retrieve = next(entry for entry in document["methods"] if entry["name"] == "retrieve")
    assert retrieve["x-rcp-capability"] == "retrieve"
    assert retrieve["result"]["schema"] == {"$ref": "#/components/schemas/RetrieveResult"}


@pytest.mark.parametrize(("wire", "gated"), [
    ({}, set()),
    ({"retrieve": {}, "streaming": {}}, {"retrieve"}),
    ({"embed": {}, "sparseEmbed": {}, "rerank": False}, {"embed", "embed/sparse"}),
    ({"index": {"writable": True}}, {"index/add", "index/delete"}),
    ({"index": {"writable": False}}, {"index/delete"}),  # §7 roster: index (writable)
    ({"index": {}}, {"index/delete"}),
    ({"memory": {}, "catalog": {}, "feedback": {}},
     {"memory/build", "memory/recall", "catalog/list", "feedback"}),
])
def test_only_the_advertised_methods_appear(wire: dict[str, Any], gated: set[str]) -> None:
    assert _names(openrpc_document("e", "1", Capabilities(wire))) == UNGATED | gated


def test_a_served_set_leaves_out_advertised_methods_without_a_handler() -> None:
    caps = Capabilities({"retrieve": {}, "index": {"writable": True}})
    document = openrpc_document("e", "1", caps, served={"retrieve", "index/delete"})
    assert _names(document) == UNGATED | {"retrieve", "index/delete"}


@pytest.mark.parametrize(("method", "params"),
                         [(method, params) for method, params in VALID
                          if method in METHODS or method == "notifications/cancel"])
def test_params_schemas_accept_the_valid_requests(method: str, params: dict[str, Any]) -> None:
    decode_params(method, params)  # the decoder agrees that they are valid
    _params_validator(openrpc_document("e", "1", EVERYTHING), method).validate(params)


@pytest.mark.parametrize(("method", "params"), [
    ("retrieve", {"k": 3}),                                    # no query
    ("retrieve", {"query": "q", "k": 0}),                      # k < 1
    ("retrieve", {"query": "q", "k": "3"}),
    ("retrieve", {"query": "q", "k": 1, "mmr": {"lambda": 1.5}}),
    ("embed", {"inputs": "a"}),
    ("rerank", {"query": "q", "passages": ["a"], "topN": 0}),
    ("graph", {"op": "local", "hops": 0}),
    ("index/add", {"documents": [{"text": "a"}, {"id": "c"}]}),  # a document without text
    ("index/delete", {"ids": "a"}),
    ("feedback", {"signals": [{"hitId": "a", "reward": 1.5}]}),
    ("initialize", {"protocolVersion": 0}),
    ("notifications/cancel", {}),
])
def test_params_schemas_reject_invalid_requests(method: str, params: dict[str, Any]) -> None:
    with pytest.raises(Exception) as decoded:  # the decoder refuses them too (-32602)
        decode_params(method, params)
    assert getattr(decoded.value, "code", None) == -32602
    assert not _params_validator(openrpc_document("e", "1", EVERYTHING), method).is_valid(params)


class BoostParams(msgspec.Struct, frozen=True):
    factor: float


def test_vendor_methods_appear_when_their_capability_is_advertised() -> None:
    """§6.2: ``x-acme/…`` methods are gated on the ``x-acme`` capability."""
    vendor = {"x-acme/boost": BoostParams, "x-acme/raw": None, "x-other/thing": None}
    document = openrpc_document("e", "1", Capabilities({"x-acme": {}}), vendor=vendor)
    _meta_validator().validate(document)
    described = {entry["name"]: entry for entry in document["methods"]}
    assert set(described) == UNGATED | {"x-acme/boost", "x-acme/raw"}
    assert described["x-acme/boost"]["x-rcp-capability"] == "x-acme"
    assert described["x-acme/raw"]["params"] == [] and \
        described["x-acme/raw"]["result"]["schema"] == {}
    validator = _params_validator(document, "x-acme/boost")
    assert validator.is_valid({"factor": 2.0}) and not validator.is_valid({"factor": "x"})
    assert "x-acme/boost" not in _names(openrpc_document("e", "1", Capabilities(),
                                                         vendor=vendor))


def test_a_synonym_is_described_beside_its_member() -> None:
    """``embed/sparse`` takes ``texts`` (§7.4) or ``inputs``: both are described."""
    document = openrpc_document("e", "1", EVERYTHING)
    validator = _params_validator(document, "embed/sparse")
    assert validator.is_valid({"texts": ["a"]}) and validator.is_valid({"inputs": ["a"]})
    assert not validator.is_valid({"texts": "a"})
