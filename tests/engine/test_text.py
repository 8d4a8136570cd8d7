"""Analyzer and token counting (§7.7 sparse recall, §7.7.2 tokenBudget)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rcpkit.engine.text import ENGLISH_STOPWORDS, Analyzer, count_tokens

ANALYZER = Analyzer()


def test_english_stems_and_drops_stop_words() -> None:
    assert ANALYZER.tokens("The companies' engineers are RUNNING inspections") == [
        "compani",
        "engin",
        "run",
        "inspect",
    ]
    assert ANALYZER.tokens("Running") == ANALYZER.tokens("runs")


def test_unicode_normalisation_and_case_folding() -> None:
    assert ANALYZER.tokens("ＳＴＲＡßＥ") == ANALYZER.tokens("strasse")
    assert ANALYZER.tokens("don’t stop") == ANALYZER.tokens("don't stop") == ["stop"]
    assert Analyzer(stopwords=False, stem=False).tokens("snake_case x-ray") == [
        "snake",
        "case",
        "x",
        "ray",
    ]


def test_swedish_words_keep_their_accents_and_match_themselves() -> None:
    for word in ["hållbarhet", "åtgärd", "Åtgärd"]:
        tokens = ANALYZER.tokens(word)
        assert len(tokens) == 1 and tokens == ANALYZER.tokens(f"om {word}.")[-1:]
    assert ANALYZER.tokens("hållbarhet")[0] == "hållbarhet"
    assert ANALYZER.tokens("åtgärd")[0] == "åtgärd"


def test_cjk_runs_become_bigrams_and_single_characters_stay() -> None:
    assert ANALYZER.tokens("東京都") == ["東京", "京都"]
    assert ANALYZER.tokens("中") == ["中"]
    assert ANALYZER.tokens("我爱abc东京") == ["我爱", "abc", "东京"]
    assert ANALYZER.tokens("建築許可")[0] in ANALYZER.tokens("東京都の建築許可について")


def test_numbers_are_kept_and_other_scripts_are_not_stemmed() -> None:
    assert ANALYZER.tokens("Room 101 in 2024") == ["room", "101", "2024"]
    assert ANALYZER.tokens("Привет мир") == ["привет", "мир"]


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "the and of"])
def test_blank_or_stop_word_only_text_has_no_tokens(text: str) -> None:
    assert ANALYZER.tokens(text) == []


def test_options_and_batch() -> None:
    raw = Analyzer(stopwords=False, stem=False)
    assert raw.tokens("The Running") == ["the", "running"]
    assert ANALYZER.tokens_batch(["a running", "", "東京"]) == [["run"], [], ["東京"]]
    assert Analyzer("swedish").tokens("byggnaderna") == ["byggnad"]
    assert "the" in ENGLISH_STOPWORDS
    with pytest.raises(ValueError):
        Analyzer("klingon")


def test_count_tokens_rule() -> None:
    assert count_tokens("") == 0
    assert count_tokens("   ") == 0
    # 3 words (4 tokens by the word rule) beat 11 chars / 4 = 3.
    assert count_tokens("a b cdefghi") == 4
    # 1 word of 40 chars: 10 tokens by the character rule.
    assert count_tokens("x" * 40) == 10
    # 4 CJK characters count one each, plus the Latin word.
    assert count_tokens("東京都市 hello") == 4 + 2
    sentence = "The municipality decides on building permits within ten weeks."
    assert 10 <= count_tokens(sentence) <= 20


def test_threads_share_an_analyzer_safely() -> None:
    texts = [f"running inspections number {i} of the buildings" for i in range(400)]
    expected = ANALYZER.tokens_batch(texts)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(ANALYZER.tokens, texts)) == expected
