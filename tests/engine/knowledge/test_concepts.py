"""Concept extraction (§7.9 graph building): keyphrases from the engine's analyzer."""

from __future__ import annotations

import pytest

from rcpkit.engine.knowledge.graph import ConceptExtractor


def keys(text: str, **options: object) -> dict[str, int]:
    return {c.key: c.count for c in ConceptExtractor(**options).extract(text)}  # type: ignore[arg-type]


def test_phrases_split_at_function_words_and_punctuation() -> None:
    found = keys("The honey bees of the colony, and the queen bee.")
    assert found["honey bee"] == 1
    assert found["queen bee"] == 1
    assert found["bee"] == 2
    assert "bee colony" not in found  # "of the" separates them
    assert not {"the", "of", "and"} & found.keys()


def test_inflections_share_one_concept_with_the_first_label() -> None:
    extractor = ConceptExtractor()
    concepts = {c.key: c for c in extractor.extract("Neural networks. A neural network.")}
    assert concepts["neural network"].count == 2
    assert concepts["neural network"].label == "neural networks"
    assert extractor.key("Neural Network") == "neural network"


def test_runs_give_their_ngrams_up_to_max_words_and_numbers_are_not_concepts() -> None:
    found = keys("deep convolutional neural network architectures 2024", max_words=3)
    assert {"deep convolut", "network architectur", "neural network architectur"} <= set(found)
    assert "deep convolut neural network" not in found
    assert "2024" not in found


def test_ideographic_bigrams_stay_single_concepts() -> None:
    found = keys("机器学习")
    assert set(found) == {"机器", "器学", "学习"}


def test_other_languages_are_stemmed_with_their_snowball_stemmer() -> None:
    found = keys("Städerna bygger cykelbanor. Kommunen planerar cykelbanorna.",
                 language="swedish")
    assert found["cykelban"] == 2


def test_most_frequent_concepts_are_kept_first() -> None:
    concepts = ConceptExtractor(per_text=2).extract("bees, bees, bees, honey, honey, wax")
    assert [c.key for c in concepts] == ["bee", "honey"]


def test_invalid_options_are_refused() -> None:
    with pytest.raises(ValueError):
        ConceptExtractor(max_words=0)
