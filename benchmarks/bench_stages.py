"""Pipeline stage costs at 100k chunks, and where ColBERT rerank time goes.

Part 1 — the corpus of bench_scale.py (Zipfian pseudo-words, random unit vectors served by
``_common.LookupEmbedder``) at ``--size`` chunks; queries are embedded by the real MiniLM
(the lookup falls back to it), as is the ColBERT rerank. ``Engine.search`` (k=10,
candidateK=100) is timed with one stage switched on at a time, and the §9 progress callback
timestamps split each hybrid+rerank+MMR+pack request into recall (query embedding included),
fuse, rerank, diversify and pack — once with the reranker's passage cache cold, once warm.

Part 2 — ColBERT (MaxSim over MiniLM token vectors, ``rerank.py``) on real English FAQ
answers, uncached (``cache_bytes=0``) unless said: latency against topN, the split between
encoding and MaxSim, the passage window (256 / engine default / 64 tokens), one thread vs
two, the passage cache, and a pyinstrument profile. Wall and CPU time are both printed: on a
shared host CPU time is the steadier figure. The profile needs ``pip install pyinstrument``
(not a project dependency).

    python benchmarks/bench_stages.py                # 100k chunks, 40 queries (~15 min)
    python benchmarks/bench_stages.py --quick        # smoke run: 1k chunks, 2 queries
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
from _common import LookupEmbedder, figure_path, ingest, open_engine, stamp, unit_vectors
from bench_lexical import synthetic_corpus

from rcpkit.engine.config import EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.models.embedding import OnnxEmbedder, minilm
from rcpkit.engine.models.rerank import LateInteractionReranker, maxsim_many
from rcpkit.engine.search.searcher import STAGES
from rcpkit.engine.types import Hit, RerankOptions, SearchRequest


def configurations(k: int, top_n: int) -> dict[str, SearchRequest]:
    """The requests of part 1 (query filled in later): one stage switched on at a time."""
    base = SearchRequest(query="", k=k, candidate_k=100, include_text=False, seed=0)
    colbert = RerankOptions("colbert", top_n)
    return {
        "sparse": replace(base, mode="sparse"),
        "dense": replace(base, mode="dense"),
        "hybrid (rrf)": base,
        "hybrid + mmr 0.5": replace(base, mmr_lambda=0.5),
        "hybrid + pack 300 tok": replace(base, token_budget=300),
        f"hybrid + colbert top{top_n}": replace(base, rerank=colbert),
        "all stages": replace(base, rerank=colbert, mmr_lambda=0.5, token_budget=300),
    }

TOP_NS = (10, 20, 50, 100)


def timing(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU time (every thread of the process) of ``run()``, in ms."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return float(np.median(walls)), float(np.median(cpus))


def build_engine(size: int, work: Path, model: OnnxEmbedder) -> tuple[Engine, list[str]]:
    texts, queries = synthetic_corpus(size, seed=0)
    embedder = LookupEmbedder(fallback=model)
    embedder.register(texts, unit_vectors(size, seed=0))
    engine = open_engine(work / "stages", embedder)
    start = time.perf_counter()
    ingest(engine, texts, [{} for _ in texts])
    print(f"ingested {size:,} chunks in {time.perf_counter() - start:.0f} s (vectors injected)")
    return engine, queries


def time_configs(engine: Engine, queries: Sequence[str],
                 configs: dict[str, SearchRequest]) -> dict[str, float]:
    """Median ``Engine.search`` latency per configuration."""
    medians = {}
    for name, request in configs.items():
        samples = []
        for query in queries:
            start = time.perf_counter()
            engine.search(replace(request, query=query))
            samples.append((time.perf_counter() - start) * 1000)
        medians[name] = float(np.median(samples))
    return medians


def time_stages(engine: Engine, queries: Sequence[str],
                request: SearchRequest) -> dict[str, tuple[float, float]]:
    """Median wall and CPU ms spent before each §9 progress notification of ``request``."""
    walls: dict[str, list[float]] = {stage: [] for stage in STAGES}
    cpus: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for query in queries:
        marks: list[tuple[str, float, float]] = []

        def progress(stage: str, fraction: float, partial: list[Hit] | None,
                     marks: list[tuple[str, float, float]] = marks) -> None:
            marks.append((stage, time.perf_counter(), time.process_time()))

        wall, cpu = time.perf_counter(), time.process_time()
        engine.search(replace(request, query=query), progress=progress)
        for stage, wall_at, cpu_at in marks:
            walls[stage].append((wall_at - wall) * 1000)
            cpus[stage].append((cpu_at - cpu) * 1000)
            wall, cpu = wall_at, cpu_at
    return {stage: (float(np.median(walls[stage])), float(np.median(cpus[stage])))
            for stage in STAGES}


def part_one(size: int, query_count: int, model: OnnxEmbedder, k: int, top_n: int,
             quick: bool) -> None:
    """Configurations and the per-stage split; the rerank cache is cold on the first pass."""
    requests = configurations(k, top_n)
    with tempfile.TemporaryDirectory(prefix="rcpkit-stages-") as work:
        engine, queries = build_engine(size, Path(work), model)
        engine.search(replace(requests["all stages"], query=queries[-1]))  # load the model
        queries = queries[:query_count]
        embed_ms = timing(lambda: [model.embed([q], "query") for q in queries], 1)[0] / len(
            queries)
        cold = time_stages(engine, queries, requests["all stages"])
        warm = time_stages(engine, queries, requests["all stages"])
        configs = time_configs(engine, queries, requests)
        engine.close()
    print(f"\n== Engine.search at {size:,} chunks, {len(queries)} queries, median wall ms "
          f"(k={k}, candidateK=100; colbert rows: passages already in the rerank cache)")
    for name, value in configs.items():
        print(f"{name:<26} {value:9.2f}   x hybrid {value / configs['hybrid (rrf)']:6.2f}")
    print(f"{'(MiniLM query embed)':<26} {embed_ms:9.2f}")
    print("\n== 'all stages' split by the progress callback, median wall / CPU ms")
    print(f"{'stage':<10} {'cold rerank cache':>22} {'warm rerank cache':>22}")
    for stage in STAGES:
        print(f"{stage:<10} {cold[stage][0]:10.2f} / {cold[stage][1]:9.2f} "
              f"{warm[stage][0]:10.2f} / {warm[stage][1]:9.2f}")
    path = figure_path("stages", quick)
    if path is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4))
        left.barh(list(configs)[::-1], list(configs.values())[::-1])
        left.set(xscale="log", xlabel="median Engine.search wall ms (log)",
                 title=f"configurations at {size:,} chunks")
        for offset, (label, split) in enumerate((("cold cache", cold), ("warm cache", warm))):
            right.barh([i + 0.4 * offset for i in range(len(STAGES))],
                       [split[stage][1] for stage in STAGES], 0.4, label=label)
        right.set_yticks([i + 0.2 for i in range(len(STAGES))], list(STAGES))
        right.set(xscale="log", xlabel="median CPU ms (log)", title="'all stages' per stage")
        right.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        print(f"chart: {path}")


def colbert_breakdown(model: OnnxEmbedder, query: str, passages: Sequence[str],
                      repeat: int) -> dict[str, tuple[float, float]]:
    """Split one uncached colbert rerank into query encoding, passage encoding and MaxSim."""
    query_tokens = model.token_embeddings([query], "query")[0]
    passage_tokens = model.token_embeddings(list(passages), "document")
    return {
        "query tokens": timing(partial(model.token_embeddings, [query], "query"), repeat),
        "passage tokens": timing(partial(model.token_embeddings, list(passages), "document"),
                                 repeat),
        "MaxSim": timing(partial(maxsim_many, query_tokens, passage_tokens), repeat),
    }


def score_all(reranker: LateInteractionReranker, queries: Sequence[str],
              passages: Sequence[str]) -> None:
    """Rerank the same passages for every query (one colbert call each)."""
    for query in queries:
        reranker.score(query, passages)


def uncached(model: OnnxEmbedder, passage_tokens: int | None) -> LateInteractionReranker:
    """A colbert reranker that never caches (``cache_bytes=0``), so every call encodes."""
    return LateInteractionReranker(model, passage_tokens=passage_tokens, cache_bytes=0)


def part_two(model: OnnxEmbedder, query_count: int, repeat: int, top_ns: Sequence[int],
             quick: bool) -> None:
    """ColBERT cost on real text; wall and CPU (all threads) time, since hosts are shared."""
    import zaragoza_construction_faq as faq

    pairs = faq.load(lang="en")
    answers = [pair["a"] for pair in pairs]
    questions = [pair["q"] for pair in pairs][:query_count]
    head = answers[:top_ns[1]]
    long = [(answer + " ") * 5 for answer in head]
    window = EngineConfig().rerank.passage_tokens
    lengths = [len(t) for t in model.token_embeddings(answers[:100], "document")]
    print(f"\n== ColBERT rerank, MiniLM {model.model.threads} threads, median wall / CPU ms per "
          f"query; FAQ answers: mean {np.mean(lengths):.0f} tokens, max {max(lengths)}")
    shipped = uncached(model, window)
    shipped.score("warm up", answers[:2])  # loads its windowed ONNX session
    for top_n in top_ns:
        wall, cpu = timing(partial(score_all, shipped, questions, answers[:top_n]), 1)
        count = len(questions)
        print(f"uncached, topN {top_n:>4}: {wall / count:8.1f} / {cpu / count:8.1f}   "
              f"CPU per passage {cpu / count / top_n:5.1f}")
    parts = colbert_breakdown(model, questions[0], long, repeat)
    print(f"\nuncached topN {len(long)} of long passages (answers ×5), 256-token window "
          "(wall / CPU ms): " + ", ".join(f"{name} {w:.1f} / {c:.1f}"
                                          for name, (w, c) in parts.items()))
    variants = {
        "window 256 tokens (model limit)": uncached(model, None),
        f"window {window} tokens (engine default)": shipped,
    }
    if not quick:
        variants["window 64 tokens"] = uncached(model, 64)
        variants["window 256, 1 thread"] = uncached(minilm(threads=1), None)
    cached = LateInteractionReranker(model, passage_tokens=window)
    cached.score(questions[0], long)
    cached.score(questions[0], head)
    variants[f"window {window}, passages cached"] = cached
    print(f"\ntopN {len(head)}, wall / CPU ms: long passages (answers ×5) | FAQ answers")
    for name, variant in variants.items():
        variant.score("warm up", answers[:2])
        long_wall, long_cpu = timing(partial(variant.score, questions[0], long), repeat)
        wall, cpu = timing(partial(variant.score, questions[0], head), repeat)
        print(f"  {name:<36} {long_wall:8.1f} / {long_cpu:8.1f} | {wall:7.1f} / {cpu:7.1f}")
    if not quick:
        profile(uncached(model, window), questions[:5], long)


def profile(reranker: LateInteractionReranker, queries: Sequence[str],
            passages: Sequence[str]) -> None:
    """The heaviest functions (self time) of a few uncached colbert reranks, by pyinstrument."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("\n(pyinstrument is not installed: `pip install pyinstrument` for the profile)")
        return
    profiler = Profiler(interval=0.001)
    with profiler:
        score_all(reranker, queries, passages)
    print(f"\npyinstrument, {len(queries)} × uncached colbert topN {len(passages)}, self time:")
    print("\n".join(profiler.output_text(unicode=True, flat=True).splitlines()[7:22]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per micro-figure")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1k chunks, 2 queries")
    args = parser.parse_args()
    size, queries, repeat, top_ns, k = ((1_000, 2, 1, (1, 2), 1) if args.quick
                                        else (args.size, args.queries, args.repeat, TOP_NS, 10))
    print(f"bench_stages {stamp()}  size={size:,}  queries={queries}")
    model = minilm()
    model.embed(["warm up"])
    part_one(size, queries, model, k, top_ns[1], args.quick)
    part_two(model, queries, repeat, top_ns, args.quick)


if __name__ == "__main__":
    main()
