"""Write a tiny store fixture with whatever rcpkit is on ``sys.path`` (an earlier commit of
main, checked out with ``git worktree add``), and the answers that rcpkit gave on it.

    git worktree add /tmp/old COMMIT
    PYTHONPATH=/tmp/old/src python tests/engine/store_fixtures/make_fixture.py NAME [DSN]

writes ``tests/engine/store_fixtures/NAME.tar.gz``: ``data/`` (record, saved indexes,
``rcpkit.toml``) and ``answers.json``. With ``DSN`` (a PostgreSQL database whose search path
starts with an empty schema named ``fixture``) the record is written there instead, and the
archive holds ``record.sql``, the schema dumped by ``pg_dump --inserts`` (the ``pg_dump`` on
``PATH`` or ``$PG_DUMP``). Only the API every released layout has is used:
``open_engine``, ``add``, ``delete``, ``search`` and ``close``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rcpkit.engine.types import DocumentIn, SearchRequest

CONFIG = """embedder = "hashing"
hashing_dimension = 16

[field_types]
topic = "keyword"
"""
DOCUMENTS = [("bee", "Bees dance to show where the flowers are.", "nature"),
             ("owl", "Owls hunt mice at night in the woods.", "nature"),
             ("forge", "The smith shapes iron on the anvil.", "craft"),
             ("loom", "A loom weaves thread into cloth.", "craft"),
             ("tide", "The moon pulls the tide of the sea.", "nature")]
QUERIES = [("bees and flowers", "sparse"), ("bees and flowers", "dense"),
           ("iron anvil", "hybrid"), ("night woods", "dense")]


def open_engine(data: Path):  # type: ignore[no-untyped-def]
    for home in ("rcpkit.engine.core", "rcpkit.engine.service"):
        try:
            return importlib.import_module(home).open_engine(data)
        except (ImportError, AttributeError):
            continue
    raise SystemExit("no open_engine in this rcpkit")


def main(name: str, dsn: str | None) -> None:
    with tempfile.TemporaryDirectory() as work:
        data = Path(work) / "data"
        data.mkdir()
        (data / "rcpkit.toml").write_text(CONFIG if dsn is None else
                                          f"backend = \"postgres\"\n{CONFIG}")
        if dsn is not None:  # from the environment: the archive names no database
            os.environ["RCPKIT_DSN"] = dsn
        engine = open_engine(data)
        engine.add([DocumentIn(id=doc_id, text=text, meta={"topic": topic})
                    for doc_id, text, topic in DOCUMENTS])
        engine.add([DocumentIn(id="loom", text="A loom weaves wool thread into cloth.",
                               meta={"topic": "craft"})])
        engine.delete(["tide"])
        answers = [[query, mode, [[hit.doc_id, round(hit.score, 5)] for hit in
                                  engine.search(SearchRequest(query=query, k=5, mode=mode)).hits]]
                   for query, mode in QUERIES]
        engine.close()
        (Path(work) / "answers.json").write_text(json.dumps(answers, indent=1))
        members = ["data", "answers.json"]
        if dsn is not None:
            subprocess.run([os.environ.get("PG_DUMP", "pg_dump"), f"--dbname={dsn}",
                            "--schema=fixture", "--inserts", "--no-owner", "--no-privileges",
                            f"--file={Path(work) / 'record.sql'}"], check=True)
            members.append("record.sql")
        target = Path(__file__).with_name(f"{name}.tar.gz")
        subprocess.run(["tar", "czf", str(target), "--owner=0", "--group=0", "-C", work,
                        *members], check=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
