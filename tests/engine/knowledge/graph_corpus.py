"""A small three-topic corpus for the graph and transform tests (written for them), and a
spy on concept extraction."""

from __future__ import annotations

import pytest

from rcpkit.engine.knowledge.graph import ConceptExtractor
from rcpkit.engine.types import DocumentIn

TOPICS = {
    "bees": [
        "Honey bees pollinate flowering plants. A worker bee visits hundreds of flowers a day.",
        "The honey bee colony stores nectar as honey. Worker bees fan the nectar to dry it.",
        "Pollination by honey bees raises fruit yields. Flowering plants depend on bees.",
        "A beekeeper inspects the colony for the queen bee. The queen bee lays the eggs.",
    ],
    "bread": [
        "Sourdough starter is wild yeast in flour and water. Feed the starter daily.",
        "Bread dough rises when yeast ferments the flour. Knead the dough for elasticity.",
        "A sourdough loaf needs a long fermentation. The starter gives the bread its sour taste.",
        "Bake the bread dough in a hot oven. Steam gives the loaf a crisp crust.",
    ],
    "stars": [
        "Polaris is the pole star of the northern sky. Sailors found north by the pole star.",
        "A telescope gathers starlight from distant galaxies. Galaxies hold billions of stars.",
        "The northern sky shows constellations around the pole star. Constellations guide sailors.",
        "Astronomers point a telescope at a galaxy to measure starlight and redshift.",
    ],
}

DOCUMENTS = [DocumentIn(text, id=f"{topic}-{i}")
             for topic, texts in TOPICS.items() for i, text in enumerate(texts)]


def topic_of(hit_id: str) -> str:
    return hit_id.split("-")[0]


def spy_on_extraction(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts concepts are extracted from from now on (extraction still runs)."""
    extracted: list[str] = []
    original = ConceptExtractor.extract

    def spy(self: ConceptExtractor, text: str) -> list:  # type: ignore[type-arg]
        extracted.append(text)
        return original(self, text)

    monkeypatch.setattr(ConceptExtractor, "extract", spy)
    return extracted
