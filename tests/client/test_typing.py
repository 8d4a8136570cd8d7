"""The public client is typed (§7 methods with real signatures): a type checker catches a
misspelt method or option, on the async and on the blocking client alike."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

import rcpkit

mypy_api = pytest.importorskip("mypy.api")

SNIPPET = textwrap.dedent('''\
    from rcpkit import AsyncClient, Client, filters
    from rcpkit.protocol.types import RetrieveResult

    async def use(aio: AsyncClient, blocking: Client) -> None:
        fine: RetrieveResult = await aio.retrieve("q", k=3, candidate_k=10, mode="hybrid")
        also: RetrieveResult = blocking.retrieve("q", 3, filter=filters.eq("lang", "en"))
        blocking.ping(nonce=1)
        for event in blocking.retrieve_stream("q", fusion={"method": "rrf"}):
            print(event.progress)
        blocking.retreive("q")  # wrong: 10
        blocking.retrieve("q", candiate_k=4)  # wrong: 11
        await aio.retrieve("q", k="ten")  # wrong: 12
        number: int = blocking.retrieve("q")  # wrong: 13
        blocking.batch().retrieve("q").result().hitz  # wrong: 14
        await aio.embed(["x"], encodnig="json")  # wrong: 15
        blocking.index_add([], meta={"idempotencyKey": "k"}, extra={"x-acme/tag": 1})
        blocking.graph("neighbors", seed_ids=["a"], hops=2)
''')


def test_only_the_misspelt_lines_fail_the_type_check(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    config = tmp_path / "mypy.ini"  # check this tree's rcpkit, not an installed one
    config.write_text(f"[mypy]\nmypy_path = {Path(rcpkit.__file__).parents[1]}\n")
    output, errors, status = mypy_api.run([
        "--config-file", str(config), "--follow-imports=silent", "--no-error-summary",
        "--cache-dir", str(tmp_path / "cache"), str(snippet)])
    flagged = {int(line) for line in re.findall(r"snippet\.py:(\d+): error", output)}
    assert status == 1, output + errors
    assert flagged == {10, 11, 12, 13, 14, 15}, output
    assert '"Client" has no attribute "retreive"' in output
    assert 'Unexpected keyword argument "candiate_k"' in output
