"""The CI evaluation of our engine: the real MiniLM model, over the RCP wire,
on the offline English Zaragoza construction FAQ (question = query, answer =
document). To keep CI short it uses every other FAQ item (its answer indexed, its question
asked), for each of the sparse, dense and hybrid modes.

The floors sit a little below the first measured run, so a regression in any retriever, in
fusion, in the wire path or in a storage backend fails the test that calls this.
"""

from __future__ import annotations

from rcpkit.eval.datasets import Dataset, faq_to_beir
from rcpkit.eval.runner import EvalConfig, open_target, run_eval

__all__ = ["FLOORS", "assert_faq_quality"]

# First measured run: sparse 0.6165 / 0.7698 / 0.5674, dense 0.7766 / 0.8929 / 0.7390,
# hybrid (RRF) 0.7073 / 0.8373 / 0.6646 (nDCG@10 / Recall@10 / MRR@10, 252 queries).
FLOORS = {
    "sparse": {"nDCG@10": 0.59, "Recall@10": 0.74, "MRR@10": 0.54},
    "dense": {"nDCG@10": 0.75, "Recall@10": 0.87, "MRR@10": 0.71},
    "hybrid": {"nDCG@10": 0.68, "Recall@10": 0.81, "MRR@10": 0.64},
}


def _every_other_item() -> Dataset:
    full = faq_to_beir("en")
    corpus = full.corpus[::2]
    asked = [f"q-{document.id}" for document in corpus]
    return Dataset(name=f"{full.name}-half", corpus=corpus,
                   queries={q: full.queries[q] for q in asked},
                   qrels={q: full.qrels[q] for q in asked})


async def assert_faq_quality(command: str) -> None:
    """Index the half FAQ through ``index/add`` of the engine ``command`` (stdio) and hold
    every mode to its floors."""
    dataset = _every_other_item()
    configs = [EvalConfig(name, {"mode": name}) for name in FLOORS]
    async with open_target(command, None) as target:
        report = await run_eval(target, dataset, configs, engine="rcpkit")
    assert report.indexing == f"added {len(dataset.corpus)} documents"
    measured = {result.name: result for result in report.results}
    for name, floors in FLOORS.items():
        result = measured[name]
        assert result.error is None, result.error
        assert result.evaluated == len(dataset.queries)
        for metric, floor in floors.items():
            assert result.metrics[metric] >= floor, (name, metric, result.metrics[metric])
