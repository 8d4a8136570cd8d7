"""The base install (``pip install rcpkit``, no extras) serves the engine: the README's first
command. The ``graph`` extra (scipy, igraph) only adds §7.8/§7.9/§7.17 and the hierarchical
``retrieve`` units, so nothing on the CLI or server path may import it at module level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wire

BLOCKED = ("igraph", "scipy", "scipy.sparse", "scipy.cluster", "scipy.cluster.vq")

PROGRAM = f"""
import json, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None  # as if the extra were not installed: importing it fails
import rcpkit.cli  # the console script's module
from rcpkit.binding import bind
from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest
engine = open_engine(sys.argv[1], embedder={{"name": "hashing"}})
server = bind(engine)
engine.add([DocumentIn("bees make honey from nectar", id="bees"),
            DocumentIn("stars burn hydrogen", id="stars")])
hits = [hit.doc_id for hit in engine.search(SearchRequest("honey", k=1)).hits]
print(json.dumps({{"methods": sorted(server.handlers), "caps": sorted(server.capabilities),
                  "hits": hits}}))
engine.close()
"""


def test_the_engine_serves_without_the_graph_extra(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "retrieve" in seen["methods"] and "index/add" in seen["methods"]
    assert not {"graph", "query/transform", "memory/build"} & set(seen["methods"])
    assert "graph" not in seen["caps"] and "memory" not in seen["caps"]
    assert seen["hits"] == ["bees"]


TRACING_OFF = """
import asyncio, json, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from rcpkit import tracing
from rcpkit.binding import bind
from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn
from rcpkit.protocol.errors import UsageError
from rcpkit.server import Dispatcher
import rcpkit.cli
assert tracing.from_environment({}) is None
try:
    tracing.from_environment({"OTEL_TRACES_EXPORTER": "console"})
except UsageError as exc:
    refused = str(exc)
engine = open_engine(sys.argv[1], embedder={"name": "hashing"})
engine.add([DocumentIn("bees make honey", id="bees")])
dispatcher = Dispatcher(bind(engine), stateless=True)
parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
reply = asyncio.run(dispatcher.handle(json.dumps({"jsonrpc": "2.0", "id": 1,
    "method": "retrieve", "params": {"query": "honey", "k": 1,
                                     "_meta": {"x-tracecontext": {"traceparent": parent}}}}
    ).encode()))
hits = len(json.loads(reply)["result"]["hits"])
print(json.dumps({"tracing": dispatcher.tracing is None, "refused": refused, "hits": hits}))
engine.close()
"""


def test_the_engine_serves_without_the_otel_extra(tmp_path: Path) -> None:
    """Tracing off costs no import: without OpenTelemetry the engine serves a request that
    carries a trace context, and asking for traces says which extra is missing."""
    done = subprocess.run([sys.executable, "-c", TRACING_OFF, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["tracing"] is True and seen["hits"] == 1
    assert "pip install 'rcpkit[otel]'" in seen["refused"]
