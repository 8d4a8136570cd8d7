"""``rcpkit eval`` charts a reader can trust, and latencies that exclude start-up work."""

from __future__ import annotations

from typing import Any

import pytest

from rcpkit.eval.datasets import CorpusDocument, Dataset
from rcpkit.eval.metrics import metric_names
from rcpkit.eval.report import ConfigResult, EvalReport, metrics_figure
from rcpkit.eval.runner import EvalConfig, run_config


def test_metrics_chart_keeps_the_legend_off_the_bars_and_shows_perfect_scores() -> None:
    pytest.importorskip("matplotlib")
    perfect = {name: 1.0 for name in metric_names()}
    results = [ConfigResult(name=name, params={}, metrics=perfect)
               for name in ("dense", "hybrid+rerank", "sparse")]
    figure = metrics_figure(EvalReport(dataset="faq", engine="e", indexing="", seed=None,
                                       index_version=None, results=results))
    figure.canvas.draw()
    axes = figure.axes[0]
    assert axes.get_ylim()[1] > 1.0  # a bar at 1.0 is drawn below the frame, not on it
    legend = axes.get_legend().get_window_extent()
    bars = [patch.get_window_extent() for patch in axes.patches]
    assert len(bars) == 3 * len(perfect)
    assert not any(legend.overlaps(bar) for bar in bars)


class _CountingTarget:
    def __init__(self) -> None:
        self.capabilities: dict[str, Any] = {}
        self.retrieves = 0

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.retrieves += 1
        return {"hits": [{"id": "d1", "score": 1.0}]}


async def test_one_untimed_warm_up_query_runs_before_timing() -> None:
    dataset = Dataset(name="tiny", corpus=[CorpusDocument("d1", "text")],
                      queries={"q1": "a", "q2": "b"}, qrels={"q1": {"d1": 1}, "q2": {"d1": 1}})
    target = _CountingTarget()
    result = await run_config(target, dataset, EvalConfig.parse("x={}"), {"k": 10})
    assert target.retrieves == 3 and len(result.latencies_ms) == 2
