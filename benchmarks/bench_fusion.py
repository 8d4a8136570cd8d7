"""The default hybrid ``retrieve`` with and without score completion, side by side.

Under ``convex`` fusion each half of a hybrid search also scores the other half's candidates
(``[retrieve] fusion_complete_scores``, docs/benchmarks.md "Quality (development data)"):
the BM25 of the dense candidates comes from the lexical search's own scoring pass, the cosine
of the lexical candidates from their stored vectors. This measures what that costs: one
engine over the corpus of bench_engine.py (Zipfian pseudo-word texts, random unit vectors,
noisy-copy query vectors; 10k and 100k chunks by default), the same queries searched under
the configuration of the previous round (alpha 0.8, no completion) and under today's default,
interleaved query by query with each going first on every other query, ``Engine.search``
p50/p95 (k 10, candidateK 100, includeText false) and their ratio.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_fusion.py --sizes 10000 100000

``--before-lexical FILE`` compares a change to BM25's query-time scoring instead: "before" is
today's configuration searching with the ``LexicalIndex`` class of FILE (an earlier
``src/rcpkit/engine/indexes/lexical.py``, e.g. from ``git show``) over the same postings, so
both sides share one engine, one corpus and one index layout.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from _common import ingest, open_engine, percentiles
from bench_engine import Corpus

from rcpkit.engine.types import SearchRequest


def lexical_class(path: Path) -> type:
    """The ``LexicalIndex`` class defined by the module file ``path``."""
    spec = importlib.util.spec_from_file_location("lexical_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LexicalIndex  # type: ignore[no-any-return]


def compare(size: int, queries: int, seed: int, exact: bool,
            before_lexical: Path | None = None) -> None:
    corpus = Corpus.build(size, seed)
    with tempfile.TemporaryDirectory() as data:
        engine = open_engine(Path(data), corpus.embedder())
        started = time.perf_counter()
        ingest(engine, corpus.texts, [{}] * size)
        print(f"{size} chunks ingested in {time.perf_counter() - started:.0f}s", flush=True)
        searcher = engine.searcher
        configs = {"before": engine.config.with_overrides(retrieve={
                       "fusion_alpha": 0.8, "fusion_complete_scores": False}),
                   "default": engine.config}
        assert engine.indexes is not None
        lexical = engine.indexes.lexical
        classes = {"before": type(lexical), "default": type(lexical)}
        if before_lexical is not None:
            configs["before"] = engine.config
            classes["before"] = lexical_class(before_lexical)
        timings: dict[str, list[float]] = {name: [] for name in configs}
        texts = corpus.queries[:queries]
        for text in texts:  # warm the query-vector cache and the record cache
            engine.search(SearchRequest(text, k=10, include_text=False))
        for number, text in enumerate(texts):
            names = list(configs) if number % 2 else list(reversed(configs))
            for name in names:
                searcher._config = configs[name]  # the one setting the pipeline reads per call
                lexical.__class__ = classes[name]  # same attributes, the other scoring code
                request = SearchRequest(text, k=10, candidate_k=100, include_text=False,
                                        seed=42 if exact else None)
                begun = time.perf_counter()
                engine.search(request)
                timings[name].append((time.perf_counter() - begun) * 1000)
        searcher._config = configs["default"]
        lexical.__class__ = classes["default"]
        engine.close()
    before, after = (percentiles(timings[name]) for name in configs)
    path = "exact (seeded)" if exact else "default path"
    print(f"{size:>7} chunks, {path}: before p50 {before[0]:.2f} ms p95 {before[1]:.2f} ms | "
          f"default p50 {after[0]:.2f} ms p95 {after[1]:.2f} ms | p50 ratio "
          f"{after[0] / before[0]:.3f} ({len(texts)} queries each)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--exact", action="store_true",
                        help="seeded requests (the exact dense path, as rcpkit eval sends)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1k chunks, 10 queries")
    parser.add_argument("--before-lexical", type=Path, default=None,
                        help="an earlier lexical.py: before = today's config with its BM25")
    args = parser.parse_args()
    sizes, queries = ([1000], 10) if args.quick else (args.sizes, args.queries)
    for size in sizes:
        compare(size, queries, args.seed, args.exact, args.before_lexical)


if __name__ == "__main__":
    main()
