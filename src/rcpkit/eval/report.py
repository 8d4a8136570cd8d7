"""The evaluation report and its renderings: rich table, JSON, TREC run files, PNG charts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcpkit.eval.metrics import metric_names
from rcpkit.protocol.errors import UsageError

__all__ = ["ConfigResult", "EvalReport", "metrics_figure", "render_table", "write_plots",
           "write_trec_runs"]

_LATENCY_KEYS = ("p50", "p95", "p99")


@dataclass(slots=True)
class ConfigResult:
    """Outcome of one named retrieve configuration over every judged query.

    ``run`` maps a query id to its ``(document id, score)`` ranking. ``error`` is set
    (and the metrics are empty) when the engine rejected the configuration.
    """

    name: str
    params: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    evaluated: int = 0
    excluded: int = 0
    run: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    index_version: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form without the per-query run (that goes to TREC files)."""
        return {"name": self.name, "params": self.params, "metrics": self.metrics,
                "latencyMs": self.latency_ms, "queriesEvaluated": self.evaluated,
                "queriesExcluded": self.excluded, "indexVersion": self.index_version,
                "error": self.error}


@dataclass(slots=True)
class EvalReport:
    """A whole evaluation: provenance (§7.7.1 seed, pinned snapshot) and a result per config."""

    dataset: str
    engine: str
    indexing: str
    seed: int | None
    index_version: str | None
    results: list[ConfigResult]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What makes the figures meaningless (the engine holds none of the judged documents)."""

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"dataset": self.dataset, "engine": self.engine, "indexing": self.indexing,
                "seed": self.seed, "indexVersion": self.index_version,
                "metricNames": metric_names(),
                "configs": [result.to_json() for result in self.results], "notes": self.notes,
                "warnings": self.warnings}


def render_table(report: EvalReport) -> Table:
    """Configurations side by side: one column per configuration, one row per figure.

    A failed configuration shows dashes; its error is listed in the caption.
    """
    caption = [*(f"WARNING: {warning}" for warning in report.warnings),
               f"indexing: {report.indexing}", f"seed: {report.seed}",
               f"indexVersion: {report.index_version}", *report.notes,
               *(f"{r.name} failed: {r.error}" for r in report.results if r.error)]
    table = Table(title=escape(f"{report.dataset} @ {report.engine}"),
                  caption=escape("\n".join(caption)))
    table.add_column("metric", style="bold")
    for result in report.results:
        table.add_column(escape(result.name), justify="right")
    for name in metric_names():
        table.add_row(name, *(_cell(r, r.metrics.get(name), "{:.4f}") for r in report.results))
    for key in _LATENCY_KEYS:
        table.add_row(f"latency {key} (ms)",
                      *(_cell(r, r.latency_ms.get(key), "{:.1f}") for r in report.results))
    table.add_row("queries", *(_cell(r, r.evaluated, "{}") for r in report.results))
    return table


def _cell(result: ConfigResult, value: float | None, template: str) -> str:
    return "-" if result.error is not None or value is None else template.format(value)


def _file_stem(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "config"


def write_trec_runs(report: EvalReport, directory: Path) -> list[Path]:
    """One TREC run file per successful configuration: ``qid Q0 docid rank score tag``."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for result in report.results:
        if result.error is not None:
            continue
        tag = _file_stem(result.name)
        path = directory / f"{tag}.trec"
        with path.open("w", encoding="utf-8") as out:
            for query_id, ranking in result.run.items():
                for rank, (doc_id, score) in enumerate(ranking, start=1):
                    out.write(f"{query_id} Q0 {doc_id} {rank} {score:.6f} {tag}\n")
        written.append(path)
    return written


def metrics_figure(report: EvalReport) -> Any:
    """The grouped-bar chart of ``metrics.png`` (a matplotlib ``Figure``, Agg backend):
    one group per metric, one bar per successful configuration."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("charts need matplotlib: pip install 'rcpkit[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [r for r in report.results if r.error is None]
    names = metric_names()
    width = 0.8 / max(1, len(results))
    figure, axes = plt.subplots(figsize=(max(6.0, 1.4 * len(names)) + 2.0, 4.0))
    for offset, result in enumerate(results):
        positions = [i + offset * width for i in range(len(names))]
        axes.bar(positions, [result.metrics[n] for n in names], width, label=result.name)
    axes.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(names))], names)
    # Headroom above 1.0, so a perfect score is a visible bar, not the frame's top edge;
    # the legend sits outside the axes, so it never covers a bar.
    axes.set_ylim(0, 1.08)
    axes.set_ylabel("score")
    axes.set_title(f"Retrieval quality — {report.dataset}")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    return figure


def write_plots(report: EvalReport, directory: Path) -> list[Path]:
    """``metrics.png`` (:func:`metrics_figure`) and ``latency.png`` (box plot).

    Only successful configurations are drawn; nothing is written when there is none.
    """
    results = [r for r in report.results if r.error is None]
    if not results:
        return []
    figure = metrics_figure(report)
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    metrics_path = directory / "metrics.png"
    figure.savefig(metrics_path, dpi=120)
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(max(5.0, 1.5 * len(results)), 4.0))
    axes.boxplot([r.latencies_ms for r in results], showfliers=True)
    axes.set_xticks(range(1, len(results) + 1), [r.name for r in results])
    axes.set_ylabel("retrieve latency (ms)")
    axes.set_title("Client-side latency per query")
    figure.tight_layout()
    latency_path = directory / "latency.png"
    figure.savefig(latency_path, dpi=120)
    plt.close(figure)
    return [metrics_path, latency_path]
