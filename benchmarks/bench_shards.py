"""Sharded gateway (scale-out): two half-corpus engines fused by the gateway vs one whole.

The offline Zaragoza construction FAQ (``rcpkit.eval.faq_to_beir``) is split in two halves by a
hash of the document id. Three ``rcpkit serve --stdio`` engines are built through ``index/add``:
A (half 1), B (half 2) and W (the whole corpus). ``rcpkit gateway --stdio`` federates A and B
(§16). For each retrieval mode (sparse, dense, hybrid; the shards use their default hybrid
fusion, the gateway strips ``fusion`` before forwarding) and each gateway fusion (§16.3: rrf,
weighted, convex) the eval runner reports the gateway's nDCG@10 and Recall@10, and the mean
top-10 overlap with W in the same mode: ``|top10(gateway) ∩ top10(W)| / |top10(W)|`` per query.
W's own figures are the reference. A client-side "raw-score merge" row concatenates A's and B's
own rankings and sorts them by raw score: what fusion would give if the scores were comparable
across shards (they are for dense cosines, not for BM25). The engines embed with MiniLM (their
default); ``--quick`` uses the hashing embedder on a 40-pair English subset (a smoke run).

    python benchmarks/bench_shards.py                 # English FAQ (503 pairs)
    python benchmarks/bench_shards.py --langs en all  # also the mixed en+sv index (1006 pairs)
    python benchmarks/bench_shards.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from _common import stamp

from rcpkit.eval.datasets import CorpusDocument, Dataset, faq_to_beir
from rcpkit.eval.metrics import evaluate
from rcpkit.eval.report import ConfigResult
from rcpkit.eval.runner import EvalConfig, index_corpus, open_target, run_eval

MODES = ("sparse", "dense", "hybrid")
GATEWAY_FUSIONS = ("rrf", "weighted", "convex")
SHOWN = ("nDCG@10", "Recall@10", "MRR@10")
OVERLAP_DEPTH = 10
QUICK_PAIRS = 40
RCPKIT = str(Path(sys.executable).with_name("rcpkit"))


def shard_of(document_id: str) -> int:
    """0 or 1: a deterministic half of the corpus (first byte of the id's SHA-256)."""
    return hashlib.sha256(document_id.encode()).digest()[0] & 1


def split(corpus: list[CorpusDocument]) -> tuple[list[CorpusDocument], list[CorpusDocument]]:
    """The two shards of ``corpus``, each in corpus order."""
    return ([d for d in corpus if shard_of(d.id) == 0], [d for d in corpus if shard_of(d.id) == 1])


def quick_subset(dataset: Dataset) -> Dataset:
    """The first :data:`QUICK_PAIRS` questions and only their answers."""
    query_ids = list(dataset.qrels)[:QUICK_PAIRS]
    relevant = {doc for q in query_ids for doc in dataset.qrels[q]}
    return replace(dataset, corpus=[d for d in dataset.corpus if d.id in relevant],
                   queries={q: dataset.queries[q] for q in query_ids},
                   qrels={q: dataset.qrels[q] for q in query_ids})


def serve_command(data_dir: Path) -> list[str]:
    return [RCPKIT, "serve", "--stdio", "--data", str(data_dir)]


def make_data_dir(path: Path, quick: bool) -> Path:
    """An engine data dir; ``quick`` pins the hashing embedder in its ``rcpkit.toml``."""
    path.mkdir(parents=True)
    if quick:
        (path / "rcpkit.toml").write_text('embedder = "hashing"\n')
    return path


async def build_engine(data_dir: Path, corpus: list[CorpusDocument]) -> None:
    """Spawn an engine on ``data_dir``, ``index/add`` ``corpus``, and stop it (indexes saved)."""
    async with open_target(shlex.join(serve_command(data_dir)), None) as target:
        notes = await index_corpus(target, corpus)
    for note in notes:
        print(f"  note: {note}")


def mode_config(mode: str) -> EvalConfig:
    return EvalConfig(mode, {"mode": mode})


def gateway_config(mode: str, method: str) -> EvalConfig:
    return EvalConfig(f"{mode} / {method}", {"mode": mode, "fusion": {"method": method}})


def top_overlap(run: ConfigResult, reference: ConfigResult) -> float:
    """Mean over queries of the share of the reference's top 10 that ``run`` also ranks top 10."""
    shares = []
    for query_id, ranking in reference.run.items():
        expected = {doc for doc, _ in ranking[:OVERLAP_DEPTH]}
        if not expected:
            continue
        got = {doc for doc, _ in run.run.get(query_id, [])[:OVERLAP_DEPTH]}
        shares.append(len(got & expected) / len(expected))
    return sum(shares) / len(shares) if shares else 0.0


def raw_score_merge(shards: Sequence[ConfigResult], dataset: Dataset) -> ConfigResult:
    """The shards' rankings of one mode merged by raw score (ties: document id), then scored."""
    merged = ConfigResult(name=shards[0].name, params=shards[0].params)
    depth = max(len(ranking) for shard in shards for ranking in shard.run.values())
    for query_id in shards[0].run:
        pooled = [item for shard in shards for item in shard.run.get(query_id, [])]
        merged.run[query_id] = sorted(pooled, key=lambda item: (-item[1], item[0]))[:depth]
    summary = evaluate({q: [doc for doc, _ in ranking] for q, ranking in merged.run.items()},
                       dataset.qrels)
    merged.metrics = summary.means
    merged.evaluated, merged.excluded = summary.evaluated, summary.excluded
    return merged


async def eval_modes(data_dir: Path, dataset: Dataset, label: str) -> dict[str, ConfigResult]:
    """One engine's result for every mode, keyed by mode (corpus already indexed)."""
    async with open_target(shlex.join(serve_command(data_dir)), None) as target:
        report = await run_eval(target, dataset, [mode_config(m) for m in MODES],
                                engine=f"rcpkit serve --stdio ({label})", index=False)
    return {result.name: result for result in report.results}


@dataclass(frozen=True)
class ShardRun:
    """W's result per mode, the raw-score merge of A and B per mode, and the gateway's per
    (mode, fusion), plus the gateway's notes."""

    language: str
    shard_sizes: tuple[int, int]
    whole: dict[str, ConfigResult]
    raw_merge: dict[str, ConfigResult]
    gateway: dict[tuple[str, str], ConfigResult]
    gateway_notes: dict[tuple[str, str], list[str]]


async def fusion_notes(command: str, query: str) -> dict[tuple[str, str], list[str]]:
    """The gateway's ``usage.notes`` for one query under every (mode, fusion) pair."""
    notes: dict[tuple[str, str], list[str]] = {}
    async with open_target(command, None) as gateway:
        for mode in MODES:
            for method in GATEWAY_FUSIONS:
                result = await gateway.call("retrieve", {
                    "query": query, "k": OVERLAP_DEPTH, "mode": mode,
                    "fusion": {"method": method}})
                notes[(mode, method)] = list(result.get("usage", {}).get("notes", []))
    return notes


async def evaluate_language(language: str, quick: bool, work: Path) -> ShardRun:
    dataset = faq_to_beir(language)  # type: ignore[arg-type]
    if quick:
        dataset = quick_subset(dataset)
    half_a, half_b = split(dataset.corpus)
    root = work / language
    dirs = {name: make_data_dir(root / name, quick) for name in ("A", "B", "W")}
    await asyncio.gather(build_engine(dirs["A"], half_a), build_engine(dirs["B"], half_b),
                         build_engine(dirs["W"], dataset.corpus))
    registry = root / "rcp.json"
    registry.write_text(json.dumps({"engines": [
        {"id": name, "transport": "stdio", "command": serve_command(dirs[name])}
        for name in ("A", "B")]}))
    gateway_command = shlex.join([RCPKIT, "gateway", "--registry", str(registry), "--stdio"])
    whole, shard_a, shard_b = await asyncio.gather(*(
        eval_modes(dirs[name], dataset, name) for name in ("W", "A", "B")))
    pairs = [(mode, method) for mode in MODES for method in GATEWAY_FUSIONS]
    async with open_target(gateway_command, None) as gateway_target:
        fused = await run_eval(gateway_target, dataset, [gateway_config(*p) for p in pairs],
                               engine="rcpkit gateway --stdio (A+B)", index=False)
    first_query = next(iter(dataset.judged_queries().values()))
    return ShardRun(language, (len(half_a), len(half_b)), whole,
                    {mode: raw_score_merge([shard_a[mode], shard_b[mode]], dataset)
                     for mode in MODES},
                    dict(zip(pairs, fused.results, strict=True)),
                    await fusion_notes(gateway_command, first_query))


def print_report(outcome: ShardRun) -> None:
    size_a, size_b = outcome.shard_sizes
    queries = next(iter(outcome.whole.values())).evaluated
    print(f"\n== FAQ {outcome.language}: {queries} queries; shard A {size_a} docs, "
          f"shard B {size_b} docs, W {size_a + size_b} docs")
    print(f"{'mode':<8}{'engine / fusion':<20}" + "".join(f"{n:>11}" for n in SHOWN)
          + f"{'top10 ∩ W':>11}{'ΔnDCG@10':>10}")
    for mode in MODES:
        reference = outcome.whole[mode]
        print_row(mode, "W (whole)", reference, None)
        print_row(mode, "raw-score merge", outcome.raw_merge[mode], reference)
        for method in GATEWAY_FUSIONS:
            print_row(mode, f"gateway {method}", outcome.gateway[(mode, method)], reference)
    notes = {note for found in outcome.gateway_notes.values() for note in found}
    for note in sorted(notes):
        print(f"  gateway note: {note}")


def print_row(mode: str, label: str, result: ConfigResult,
              reference: ConfigResult | None) -> None:
    if result.error:
        print(f"{mode:<8}{label:<20} error: {result.error}")
        return
    line = f"{mode:<8}{label:<20}" + "".join(f"{result.metrics[n]:>11.4f}" for n in SHOWN)
    if reference is not None:
        delta = result.metrics["nDCG@10"] - reference.metrics["nDCG@10"]
        line += f"{top_overlap(result, reference):>11.3f}{delta:>+10.4f}"
    print(line)


async def run(languages: list[str], quick: bool) -> None:
    print(f"bench_shards {stamp()}  languages={languages}  "
          f"embedder={'hashing (quick)' if quick else 'MiniLM'}")
    with tempfile.TemporaryDirectory(prefix="rcpkit-shards-") as work:
        for language in languages:
            print_report(await evaluate_language(language, quick, Path(work)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--langs", nargs="+", choices=["en", "sv", "all"], default=["en"])
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK_PAIRS} English pairs, hashing embedder")
    args = parser.parse_args()
    asyncio.run(run(["en"] if args.quick else args.langs, args.quick))


if __name__ == "__main__":
    main()
