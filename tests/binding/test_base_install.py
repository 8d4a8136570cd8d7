"""The base install (``pip install rcpkit``, no extras) serves the engine: the README's first
command. The ``graph`` extra (scipy, igraph) only adds §7.8/§7.9/§7.17 and the hierarchical
``retrieve`` units, so nothing on the CLI or server path may import it at module level."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BLOCKED = ("igraph", "scipy", "scipy.sparse", "scipy.cluster", "scipy.cluster.vq")

PROGRAM = f"""
import json, sys
for name in {BLOCKED!r}:
    sys.modules[name] = None  # as if the extra were not installed: importing it fails
import rcpkit.cli  # the console script's module
from rcpkit.binding import bind
from rcpkit.engine.core import open_engine
from rcpkit.engine.types import DocumentIn, SearchRequest
engine = open_engine(sys.argv[1], embedder="hashing")
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
