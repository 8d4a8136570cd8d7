"""Retrieval quality of every engine configuration on the FAQ dataset, over the RCP wire.

For each language subset (English, Swedish, both) of the offline Zaragoza construction FAQ
(question = query, its answer = the one relevant document; ``rcpkit.eval.faq_to_beir``) a fresh
``rcpkit serve --stdio`` engine (real MiniLM embeddings) is spawned, the corpus is indexed
through ``index/add`` and every configuration is run through ``retrieve`` by the eval runner
(``rcpkit.eval.runner.run_eval``, the code behind ``rcpkit eval``): sparse, dense, hybrid ×
{rrf, weighted, convex} and hybrid + MMR over all queries.

The ColBERT rerank stage costs about half a second of CPU per query (bench_stages.py), so it
is judged on a seeded sample of queries (``--rerank-queries``): hybrid and hybrid + colbert
(topN 10 and 20) on the *same* queries, with the nDCG@10/MRR@10 deltas and how many queries
got better or worse. Contextual chunking is not applicable: FAQ answers have no title or
headings to prepend. Latency is client-side, transport included, one query at a time.

    python benchmarks/bench_quality.py                       # en, sv, all
    python benchmarks/bench_quality.py --langs en --rerank-queries 200
    python benchmarks/bench_quality.py --quick               # smoke run: 15 English pairs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from _common import figure_path, stamp

from rcpkit.eval.datasets import Dataset, faq_to_beir
from rcpkit.eval.metrics import query_metrics
from rcpkit.eval.report import ConfigResult, EvalReport
from rcpkit.eval.runner import EvalConfig, open_target, run_eval

CONFIGS: dict[str, dict[str, Any]] = {
    "sparse": {"mode": "sparse"},
    "dense": {"mode": "dense"},
    "hybrid rrf": {"mode": "hybrid", "fusion": {"method": "rrf"}},
    "hybrid weighted": {"mode": "hybrid", "fusion": {"method": "weighted"}},
    "hybrid convex": {"mode": "hybrid", "fusion": {"method": "convex"}},
    "hybrid rrf + mmr 0.7": {"mode": "hybrid", "mmr": {"lambda": 0.7}},
}
RERANK_BASE = "hybrid rrf (k 20)"
RERANK_CONFIGS: dict[str, dict[str, Any]] = {
    RERANK_BASE: {"mode": "hybrid", "k": 20},
    "+ colbert top10": {"mode": "hybrid", "k": 10, "rerank": {"method": "colbert", "topN": 10}},
    "+ colbert top20": {"mode": "hybrid", "k": 20, "rerank": {"method": "colbert", "topN": 20}},
}
SHOWN = ("nDCG@10", "Recall@10", "Recall@100", "MRR@10", "MAP")


def subset(dataset: Dataset, query_ids: list[str], *, keep_corpus: bool) -> Dataset:
    """``dataset`` restricted to ``query_ids`` (and to their answers unless ``keep_corpus``)."""
    relevant = {doc for q in query_ids for doc in dataset.qrels[q]}
    corpus = dataset.corpus if keep_corpus else [d for d in dataset.corpus if d.id in relevant]
    return replace(dataset, corpus=corpus, queries={q: dataset.queries[q] for q in query_ids},
                   qrels={q: dataset.qrels[q] for q in query_ids})


@dataclass(frozen=True)
class LanguageRun:
    """The reports of one language subset and the judgements of the rerank sample."""

    main: EvalReport
    rerank: EvalReport
    sample_qrels: dict[str, dict[str, int]]


async def evaluate_language(language: str, rerank_queries: int, quick: bool,
                            work: Path) -> LanguageRun:
    dataset = faq_to_beir(language)  # type: ignore[arg-type]
    if quick:
        dataset = subset(dataset, list(dataset.queries)[:15], keep_corpus=False)
    rcpkit = Path(sys.executable).with_name("rcpkit")
    command = f"{shlex.quote(str(rcpkit))} serve --stdio --create --data {work / language}"
    sample = sorted(random.Random(7).sample(list(dataset.queries),
                                            min(rerank_queries, len(dataset.queries))))
    async with open_target(command, None) as target:
        main = await run_eval(target, dataset, [EvalConfig(n, p) for n, p in CONFIGS.items()],
                              engine="rcpkit serve --stdio")
        sampled = subset(dataset, sample, keep_corpus=True)
        rerank = await run_eval(target, sampled,
                                [EvalConfig(n, p) for n, p in RERANK_CONFIGS.items()],
                                engine="rcpkit serve --stdio", index=False)
    return LanguageRun(main, rerank, sampled.qrels)


def print_report(language: str, outcome: LanguageRun) -> None:
    main, rerank = outcome.main, outcome.rerank
    queries = main.results[0].evaluated
    print(f"\n== FAQ {language}: {len(main.results[0].run)} queries, one relevant answer each "
          f"({main.indexing}; seed {main.seed}, indexVersion {main.index_version})")
    print(f"{'configuration':<24}" + "".join(f"{name:>11}" for name in SHOWN)
          + f"{'p50 ms':>9}{'p95 ms':>9}")
    for result in main.results:
        print_row(result)
    for note in main.notes:
        print(f"  note: {note}")
    base = next(r for r in rerank.results if r.name == RERANK_BASE)
    print(f"-- rerank, same {len(base.run)} sampled queries (of {queries}):")
    for result in rerank.results:
        print_row(result)
        if result is base or result.error:
            continue
        better, worse = paired(base, result, outcome.sample_qrels)
        print(f"{'':<24} ΔnDCG@10 {result.metrics['nDCG@10'] - base.metrics['nDCG@10']:+.4f}"
              f"  ΔMRR@10 {result.metrics['MRR@10'] - base.metrics['MRR@10']:+.4f}"
              f"  queries better {better}, worse {worse}")


def paired(base: ConfigResult, other: ConfigResult,
           qrels: dict[str, dict[str, int]]) -> tuple[int, int]:
    """How many queries have a higher / lower nDCG@10 under ``other`` than under ``base``."""
    better = worse = 0
    for query_id, judgements in qrels.items():
        before = query_metrics([d for d, _ in base.run.get(query_id, [])], judgements)
        after = query_metrics([d for d, _ in other.run.get(query_id, [])], judgements)
        better += after["nDCG@10"] > before["nDCG@10"]
        worse += after["nDCG@10"] < before["nDCG@10"]
    return better, worse


def print_row(result: ConfigResult) -> None:
    if result.error:
        print(f"{result.name:<24} error: {result.error}")
        return
    print(f"{result.name:<24}" + "".join(f"{result.metrics[name]:>11.4f}" for name in SHOWN)
          + f"{result.latency_ms['p50']:>9.1f}{result.latency_ms['p95']:>9.1f}")


def plot(reports: dict[str, LanguageRun], quick: bool) -> None:
    path = figure_path("quality_ndcg", quick)
    if path is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(CONFIGS)
    figure, axis = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(reports)
    for position, (language, outcome) in enumerate(reports.items()):
        values = [r.metrics.get("nDCG@10", 0.0) for r in outcome.main.results]
        axis.bar([i + position * width for i in range(len(names))], values, width,
                 label=f"FAQ {language}")
    axis.set_xticks([i + width * (len(reports) - 1) / 2 for i in range(len(names))], names,
                    rotation=15)
    axis.set(ylabel="nDCG@10", ylim=(0, 1), title="rcpkit engine on the FAQ, over stdio")
    axis.legend()
    axis.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"chart: {path}")


async def run(languages: list[str], rerank_queries: int, quick: bool,
              json_path: Path | None) -> None:
    print(f"bench_quality {stamp()}  languages={languages}  rerank sample={rerank_queries}")
    reports: dict[str, LanguageRun] = {}
    with tempfile.TemporaryDirectory(prefix="rcpkit-quality-") as work:
        for language in languages:
            reports[language] = await evaluate_language(language, rerank_queries, quick,
                                                        Path(work))
            print_report(language, reports[language])
    plot(reports, quick)
    if json_path is not None:
        document: dict[str, Any] = {lang: {"configs": run.main.to_json(),
                                           "rerank": run.rerank.to_json()}
                                    for lang, run in reports.items()}
        json_path.write_text(json.dumps(document, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--langs", nargs="+", choices=["en", "sv", "all"],
                        default=["en", "sv", "all"])
    parser.add_argument("--rerank-queries", type=int, default=150)
    parser.add_argument("--quick", action="store_true", help="smoke run: 15 English pairs")
    parser.add_argument("--json", type=Path, help="also write the reports as JSON here")
    args = parser.parse_args()
    languages = ["en"] if args.quick else args.langs
    asyncio.run(run(languages, 1 if args.quick else args.rerank_queries, args.quick, args.json))


if __name__ == "__main__":
    main()
