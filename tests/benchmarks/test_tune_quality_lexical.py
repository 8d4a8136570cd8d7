"""benchmarks/tune_quality.py ``--sweep lexical``: the BM25 variants it fuses are real BM25.

The sweep's claims (docs/benchmarks.md, "Issue 37, second round") rest on ``bm25_variant``:
with its defaults it must score exactly as the engine's ``LexicalIndex`` (the sweep asserts it
on the collections too), and each variant must change what it says, checked on hand-made
texts. ``expanded_sparse`` (``--sweep prf``, "Issue 37, third round") on the same texts. Also
``bench_fusion.py --before-lexical`` (the side-by-side timing of a scoring change).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np
import pytest

from rcpkit.engine.indexes.lexical import LexicalIndex
from rcpkit.engine.text import Analyzer
from support.benchmarks import BENCHMARKS, load_benchmark

LEXICAL_SOURCE = Path(__file__).resolve().parents[2] / "src/rcpkit/engine/indexes/lexical.py"
TEXTS = [
    "Vitamin D and bone density\n\nVitamin D intake raises bone density in older adults.",
    "Bone fractures in children\n\nFractures heal faster in children than in adults.",
    "Sleep and memory\n\nSleep consolidates memory; deprivation impairs recall.",
    "No title here, only a sentence about vitamin C and colds.",
    "Exercise\n\nExercise improves memory and sleep, and bone health in adults too.",
]
QUERIES = ["vitamin d bone density", "bone bone fractures heal", "memory sleep sleeping",
           "colds", "nothing matches this"]


@pytest.fixture(scope="module")
def tune() -> ModuleType:
    return load_benchmark("tune_quality")


def engine_scores(index: LexicalIndex) -> np.ndarray:
    rows = []
    for query in QUERIES:
        scores = index._score(query, None, None)
        rows.append(np.zeros(len(TEXTS)) if scores is None else scores[:len(TEXTS)])
    return np.stack(rows)


def matrices() -> SimpleNamespace:
    return SimpleNamespace(texts=TEXTS, queries=QUERIES)


def test_defaults_score_as_the_engine_index(tune: ModuleType) -> None:
    for repeat in (1, 2, 3):
        index = LexicalIndex(title_repeat=repeat)
        index.add(np.arange(len(TEXTS)), TEXTS)
        np.testing.assert_allclose(tune.bm25_variant(matrices(), title_repeat=repeat),
                                   engine_scores(index), rtol=1e-12, atol=1e-15)
    index = LexicalIndex(Analyzer(stem=False), k1=0.9, b=0.4, title_repeat=2)
    index.add(np.arange(len(TEXTS)), TEXTS)
    np.testing.assert_allclose(
        tune.bm25_variant(matrices(), analyzer=Analyzer(stem=False), k1=0.9, b=0.4),
        engine_scores(index), rtol=1e-12, atol=1e-15)


def test_counting_repeats_weighs_a_repeated_query_term_more(tune: ModuleType) -> None:
    """``distinct=False`` (Lucene's qtf): "bone bone fractures heal" counts "bone" twice, so each
    row's score grows by exactly its "bone" contribution; rows without "bone" keep theirs."""
    distinct = tune.bm25_variant(matrices())[1]
    counted = tune.bm25_variant(matrices(), distinct=False)[1]
    bone = tune.bm25_variant(SimpleNamespace(texts=TEXTS, queries=["bone"]))[0]
    np.testing.assert_allclose(counted, distinct + bone, rtol=1e-12)
    assert bone[2] == 0 and counted[2] == distinct[2]


def test_variants_change_only_what_they_name(tune: ModuleType) -> None:
    base = tune.bm25_variant(matrices())
    plus = tune.bm25_variant(matrices(), form="bm25+", delta=0.5)
    assert ((plus > base) == (base > 0)).all()  # every matching row gains, others stay 0
    # BM25L adds delta to the length-normalised tf before saturating: delta 0 is Okapi
    np.testing.assert_allclose(tune.bm25_variant(matrices(), form="bm25l"), base, rtol=1e-12)
    lifted = tune.bm25_variant(matrices(), form="bm25l", delta=0.5)
    assert ((lifted > base) == (base > 0)).all()
    field = tune.bm25_variant(matrices(), title_field=(3.0, 0.5))
    lighter = tune.bm25_variant(matrices(), title_field=(1.0, 0.5))
    untitled = 3  # no title: the title weight cannot move its score
    np.testing.assert_allclose(field[:, untitled], lighter[:, untitled], rtol=1e-12)
    assert field[0, 0] > lighter[0, 0]  # "vitamin d bone density" is row 0's title
    pairs = tune.bm25_variant(matrices(), pairs=1)
    assert pairs[0, 0] > 0 and pairs[2, 2] > 0  # "vitamin d", "memory sleep" ... as written
    assert pairs[3].sum() == 0  # a one-word query has no pair


def expanded(tune: ModuleType, docs: int, terms: int, original: float,
             selection: str = "rm3") -> tuple[np.ndarray, np.ndarray]:
    """(BM25, BM25 of the queries expanded from BM25's own top ``docs`` rows)."""
    model: dict[str, object] = {}
    bm25 = tune.bm25_variant(matrices(), terms=model)
    first = np.where(bm25 > 0, bm25, -np.inf)
    return bm25, tune.expanded_sparse(model, first, docs, terms, original, selection)


def test_feedback_at_original_weight_one_is_the_query_itself(tune: ModuleType) -> None:
    """``--sweep prf``: with the original terms at weight 1 the expanded query is the query,
    each distinct term at 1/n: BM25 divided by the number of its terms that occur."""
    bm25, same = expanded(tune, docs=2, terms=5, original=1.0)
    analyzer, vocabulary = Analyzer(), set(Analyzer().tokens(" ".join(TEXTS)))
    counts = [max(len(set(analyzer.tokens(q)) & vocabulary), 1) for q in QUERIES]
    np.testing.assert_allclose(same, bm25 / np.asarray(counts)[:, None], rtol=1e-12)


def test_feedback_brings_the_top_rows_terms_to_other_rows(tune: ModuleType) -> None:
    """"colds" matches row 3 only; expanded from that row, it reaches row 0, which shares
    "vitamin" with row 3, and never row 2, which shares no term with it; a query matching
    nothing has no feedback and stays at 0."""
    bm25, wider = expanded(tune, docs=1, terms=10, original=0.5)
    colds = QUERIES.index("colds")
    assert bm25[colds, 0] == 0 and wider[colds, 0] > 0
    assert wider[colds, 2] == 0
    assert wider[colds].argmax() == 3  # the feedback row stays first
    assert not wider[QUERIES.index("nothing matches this")].any()


@pytest.mark.slow
@pytest.mark.wire
def test_bench_fusion_times_an_earlier_lexical_class_side_by_side() -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_fusion.py"), "--quick", "--before-lexical",
         str(LEXICAL_SOURCE)], capture_output=True, text=True, timeout=110, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "before p50" in completed.stdout and "p50 ratio" in completed.stdout
