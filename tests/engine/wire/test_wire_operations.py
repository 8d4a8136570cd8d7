"""The served engine's operational routes: ``rcpkit serve --http --workers 2 --metrics``
answers ``/readyz`` and sums every worker's request counts in ``/metrics``, with the corpus
and index sizes of the shared record."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from engine_wire import HttpEngine, make_data_dir

REQUESTS = 12


def _total(text: str, metric: str, **labels: str) -> float:
    """The sum of the samples of ``metric`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.fullmatch(rf"{metric}\{{(.*)\}} (\S+)", line)
        if match and all(f'{key}="{value}"' in match.group(1) for key, value in labels.items()):
            total += float(match.group(2))
    return total


def test_metrics_sum_the_workers_and_show_the_index_sizes(tmp_path: Path) -> None:
    server = HttpEngine(make_data_dir(tmp_path / "kb"), "--workers", "2", "--metrics")
    try:
        root = server.base.removesuffix("/rcp")
        assert httpx.get(f"{root}/readyz").json() == {"ready": True}
        added = server.ok("index/add", {"documents": [
            {"id": "a", "text": "Tower cranes lift steel beams."},
            {"id": "b", "text": "Scaffolds are inspected weekly."}]})
        assert added["ids"] == ["a", "b"]
        for _ in range(REQUESTS):  # fresh connections: both workers answer some
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            httpx.post(f"{server.base}/ping", json=ping,
                       headers={"Connection": "close"}).raise_for_status()
        text = httpx.get(f"{root}/metrics", headers={"Connection": "close"}).text
        assert _total(text, "rcpkit_requests_total", method="ping", code="ok") == REQUESTS
        assert _total(text, "rcpkit_requests_total", method="index/add", code="ok") == 1
        assert _total(text, "rcpkit_index", name="documents") == 2
        assert "Tower" not in text
    finally:
        server.close()
