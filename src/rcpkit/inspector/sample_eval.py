"""A tiny test collection over the bundled sample notes, for the inspector's eval tab.

The corpus is :func:`rcpkit.ingest.sample.sample_documents` (what ``rcpkit demo``
indexes); the queries are written for it, each judged against the notes that
answer it (grade 2: the note is about it, 1: it helps). Small on purpose: it
shows what the eval tab does against a demo engine in a second, it is no
benchmark.
"""

from __future__ import annotations

from rcpkit.eval.datasets import CorpusDocument, Dataset
from rcpkit.ingest.sample import sample_documents

__all__ = ["SAMPLE_NAME", "sample_dataset"]

SAMPLE_NAME = "rcpkit-sample"

_JUDGED: dict[str, tuple[str, dict[str, int]]] = {
    "q1": ("why do honeybee colonies swarm in spring", {"swarming": 2, "honeybee-colonies": 1}),
    "q2": ("how do bees tell each other where flowers are", {"waggle-dance": 2}),
    "q3": ("water to flour ratio of bread dough", {"bread-hydration": 2,
                                                   "sourdough-starter": 1}),
    "q4": ("feeding a sourdough culture", {"sourdough-starter": 2}),
    "q5": ("how hot does a compost heap get", {"hot-composting": 2, "compost-basics": 1}),
    "q6": ("composting kitchen scraps on a balcony", {"worm-bins": 2, "compost-basics": 1}),
    "q7": ("keep tender plants alive on a cold clear night", {"frost-protection": 2}),
    "q8": ("which clouds come before a warm front", {"cloud-types": 2}),
    "q9": ("find north at night without a compass", {"star-navigation": 2}),
    "q10": ("when to see the Perseids", {"meteor-showers": 2}),
    "q11": ("why the moon changes shape over a month", {"moon-phases": 2}),
    "q12": ("planting basil next to tomatoes", {"companion-planting": 2,
                                                "tomato-growing": 1}),
}


def sample_dataset() -> Dataset:
    """The sample notes as a BEIR-style :class:`Dataset` with judged queries."""
    # Indexed through index/add by a writer, which cannot label content trusted (§15.2):
    # the notes go without their trust label, which no judgement depends on.
    corpus = [CorpusDocument(id=str(doc.id), text=doc.text,
                             metadata={k: v for k, v in (doc.meta or {}).items() if k != "trust"})
              for doc in sample_documents()]
    return Dataset(name=SAMPLE_NAME, corpus=corpus,
                   queries={qid: text for qid, (text, _) in _JUDGED.items()},
                   qrels={qid: dict(judged) for qid, (_, judged) in _JUDGED.items()})
