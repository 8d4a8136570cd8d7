"""LexicalIndex: BM25 scoring against a brute-force reference, masks (§7.7.1), persistence."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from rcpkit.engine.indexes.lexical import IDF_EXPONENT, TITLE_CHARS, LexicalIndex, leading_title
from rcpkit.engine.text import Analyzer

PLAIN = Analyzer(stopwords=False, stem=False)
WORDS = [f"w{i}" for i in range(40)]


def reference_bm25(
    docs: dict[int, str], query: str, k1: float = 1.2, b: float = 0.75
) -> dict[int, float]:
    """Lucene BM25 computed naively over ``docs`` (the visible rows), each distinct query term
    counted once and weighted by its idf to the power ``IDF_EXPONENT``."""
    tokens = {row: PLAIN.tokens(text) for row, text in docs.items()}
    n = len(docs)
    avgdl = sum(map(len, tokens.values())) / n
    scores: dict[int, float] = {}
    for term in set(PLAIN.tokens(query)):
        df = sum(term in toks for toks in tokens.values())
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5)) ** IDF_EXPONENT
        for row, toks in tokens.items():
            tf = toks.count(term)
            if tf:
                norm = k1 * (1 - b + b * len(toks) / avgdl)
                scores[row] = scores.get(row, 0.0) + idf * tf / (tf + norm)
    return scores


def random_corpus(seed: int, size: int) -> dict[int, str]:
    rng = random.Random(seed)
    return {
        row: " ".join(rng.choices(WORDS[: rng.randint(5, 40)], k=rng.randint(0, 30)))
        for row in range(size)
    }


def expected_ranking(scores: dict[int, float], k: int) -> list[int]:
    return sorted(scores, key=lambda row: (-scores[row], row))[:k]


def build(docs: dict[int, str], batch: int | None = None) -> LexicalIndex:
    index = LexicalIndex(PLAIN)
    rows = list(docs)
    step = batch or max(len(rows), 1)
    for i in range(0, len(rows), step):
        part = rows[i : i + step]
        index.add(np.array(part), [docs[r] for r in part])
    return index


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_bm25_with_masks(seed: int) -> None:
    docs = random_corpus(seed, 120)
    index = build(docs, batch=17)
    rng = np.random.default_rng(seed)
    visible = rng.random(130) < 0.7  # longer than the rows: extra entries are harmless
    allow = visible & (rng.random(130) < 0.6)
    query = "w1 w3 w3 w7 w30 nothere"
    reference = reference_bm25({r: t for r, t in docs.items() if visible[r]}, query)
    rows, scores = index.search(query, 15, visible=visible, allow=allow)
    allowed = {r: s for r, s in reference.items() if allow[r]}
    assert rows.tolist() == expected_ranking(allowed, 15)
    np.testing.assert_allclose(scores, [allowed[r] for r in rows.tolist()], rtol=1e-12)
    assert rows.dtype == np.int64 and scores.dtype == np.float64
    picked = np.array([*rows.tolist(), 10_000, -1])
    np.testing.assert_array_equal(
        index.scores_for(query, picked, visible=visible)[: len(rows)], scores
    )
    assert index.scores_for(query, picked, visible=visible)[-2:].tolist() == [0.0, 0.0]


def test_search_scoring_is_search_plus_the_given_rows_scores() -> None:
    """One scoring pass gives the top k and the BM25 scores of other rows (a hybrid search's
    dense candidates): 0 for a row that does not match, is not allowed or is unknown."""
    docs = random_corpus(3, 80)
    index = build(docs)
    visible = np.ones(80, dtype=bool)
    visible[5:15] = False
    allow = visible.copy()
    allow[20:30] = False
    query = "w1 w3 w7"
    rows, scores = index.search(query, 5, visible=visible, allow=allow)
    given = np.array([rows[0], 6, 22, 40, 41, 79, 500, -3])
    top_rows, top_scores, of_given = index.search_scoring(query, 5, given, visible=visible,
                                                          allow=allow)
    assert top_rows.tolist() == rows.tolist() and top_scores.tolist() == scores.tolist()
    reference = reference_bm25({r: t for r, t in docs.items() if visible[r]}, query)
    expected = [reference.get(int(r), 0.0) if 0 <= r < 80 and allow[r] else 0.0 for r in given]
    np.testing.assert_allclose(of_given, expected, rtol=1e-12)
    assert of_given[0] == scores[0] > 0 and of_given[1] == of_given[2] == 0.0
    none = index.search_scoring("nothere", 5, np.array([1, 2]))
    assert none[0].size == 0 and none[2].tolist() == [0.0, 0.0]


def test_a_query_term_counts_once_however_often_the_query_writes_it() -> None:
    """A repeated query word, or two words of one stem, weigh as one term: the ranking and the
    scores are those of the query writing it once, where counting repeats (Lucene's qtf)
    would lift the repeated term's row to the top."""
    index = LexicalIndex(Analyzer())
    index.add(np.arange(4), ["infection of the lung", "fever and more fever in children",
                             "weather report", "stock market news"])
    once = index.search("infection fever", 4)
    assert once[0].tolist() == [1, 0]  # two occurrences of "fever" beat one of "infection"
    for query in ("infection infection fever", "infection infected fever"):
        rows, scores = index.search(query, 4)
        assert rows.tolist() == [1, 0]
        np.testing.assert_array_equal(scores, once[1])
    rows, scores = index.search("infected infections", 4)
    np.testing.assert_array_equal(scores, index.search("infection", 4)[1])
    assert rows.tolist() == [0]


def test_a_term_weighs_its_idf_to_the_power_of_the_exponent() -> None:
    """Two rows of one length and one tf, each holding one of the query's terms: their scores
    stand in the ratio of the terms' idf raised to ``IDF_EXPONENT``."""
    index = LexicalIndex(PLAIN)
    texts = ["rare pad", "common pad", "common other", "common other", "other", "other"]
    index.add(np.arange(len(texts)), texts)
    rows, scores = index.search("rare common", 2)
    n = len(texts)
    idf_rare = math.log(1 + (n - 1 + 0.5) / 1.5)
    idf_common = math.log(1 + (n - 3 + 0.5) / 3.5)
    assert rows.tolist()[0] == 0
    assert scores[0] / index.scores_for("rare common", [1])[0] == pytest.approx(
        (idf_rare / idf_common) ** IDF_EXPONENT)


def test_the_rarest_matching_term_outranks_a_shorter_row_with_a_common_one() -> None:
    """The reason for an exponent above 1: with the idf alone (Lucene) a one-word row holding
    the common query term beats a longer row holding the rare one; with the default exponent
    the rare term leads."""
    texts = ["rare pad", "common", "common other", *["other"] * 7]
    for exponent, first in ((1.0, 1), (IDF_EXPONENT, 0)):
        index = LexicalIndex(PLAIN, idf_exponent=exponent)
        index.add(np.arange(len(texts)), texts)
        assert index.search("rare common", 2)[0].tolist()[0] == first


def test_statistics_follow_the_visible_snapshot() -> None:
    """Searching an old version's mask scores exactly like an index of that version (§7.7.1)."""
    docs = random_corpus(7, 60)
    index = build(docs)
    visible = np.zeros(60, dtype=bool)
    visible[:25] = True
    snapshot = build({r: docs[r] for r in range(25)})
    query = "w2 w5 w11"
    old_rows, old_scores = snapshot.search(query, 10)
    rows, scores = index.search(query, 10, visible=visible)
    assert rows.tolist() == old_rows.tolist()
    np.testing.assert_allclose(scores, old_scores, rtol=1e-12)
    short_mask = visible[:25]  # rows beyond the mask count as invisible
    assert index.search(query, 10, visible=short_mask)[0].tolist() == old_rows.tolist()


def test_ties_break_on_smaller_rowid_and_only_positive_scores() -> None:
    index = LexicalIndex(PLAIN)
    index.add(np.array([9, 3, 5, 7]), ["apple pie", "apple pie", "banana", "apple pie"])
    rows, scores = index.search("apple", 2)
    assert rows.tolist() == [3, 7]
    assert scores[0] == scores[1] > 0
    assert index.search("apple", 10)[0].tolist() == [3, 7, 9]
    assert index.search("cherry", 10)[0].size == 0
    assert index.search("", 10)[0].size == 0
    assert index.search("apple", 0)[0].size == 0


def test_incremental_batches_equal_one_batch() -> None:
    """Enough postings to fold the delta into the CSR block several times."""
    rng = random.Random(1)
    vocabulary = [f"t{i}" for i in range(3000)]
    docs = {row: " ".join(rng.choices(vocabulary, k=60)) for row in range(3000)}
    whole, pieces = build(docs), build(docs, batch=97)
    for query in ["t1 t2 t3", "t2999 t15 t15", "t0"]:
        a_rows, a_scores = whole.search(query, 20)
        b_rows, b_scores = pieces.search(query, 20)
        assert a_rows.tolist() == b_rows.tolist()
        np.testing.assert_array_equal(a_scores, b_scores)  # bit-identical (§7.7.1)


def test_scores_do_not_change_when_the_delta_is_folded(tmp_path: Path) -> None:
    docs = random_corpus(11, 200)
    index = build(docs, batch=50)
    before = index.search("w1 w2 w2 w9 w17", 30)
    index.save(tmp_path)  # folds the delta into the CSR block
    after = index.search("w1 w2 w2 w9 w17", 30)
    assert index._delta_size == 0
    assert before[0].tolist() == after[0].tolist()
    np.testing.assert_array_equal(before[1], after[1])


def test_duplicate_rowids_are_rejected_without_side_effects() -> None:
    index = LexicalIndex(PLAIN)
    index.add(np.array([1, 2]), ["a b", "b c"])
    with pytest.raises(ValueError):
        index.add(np.array([2, 3]), ["x", "y"])
    with pytest.raises(ValueError):
        index.add(np.array([4, 4]), ["x", "y"])
    with pytest.raises(ValueError):
        index.add(np.array([5]), ["x", "y"])
    assert index.count == 2
    assert index.search("x", 5)[0].size == 0


def test_remove_is_physical_and_ignores_unknown_rows() -> None:
    docs = random_corpus(3, 50)
    index = build(docs, batch=7)
    index.remove(np.array([0, 1, 2, 999, -4, 1]))
    assert index.count == 47
    rest = {r: t for r, t in docs.items() if r > 2}
    rows, _ = index.search("w1 w4", 50)
    assert rows.tolist() == expected_ranking(reference_bm25(rest, "w1 w4"), 50)
    assert index._delta_size + len(index._rows) == sum(len(set(t.split())) for t in rest.values())
    index.remove(np.array([0]))
    assert index.count == 47
    index.add(np.array([50]), ["w1 w1"])
    assert index.search("w1", 1)[0].tolist() == [50]


@pytest.mark.parametrize(("text", "title"), [
    ("Bee dances\n\nHoney bees dance to point at flowers.", "Bee dances"),
    ("No title here. Just one paragraph.", None),
    ("Heading only\n\n", None),  # nothing follows: a paragraph, not a title
    ("\n\nBody after an empty first paragraph", None),
    ("x" * (TITLE_CHARS + 1) + "\n\nBody", None),  # too long for a title
])
def test_leading_title_is_a_short_first_paragraph(text: str, title: str | None) -> None:
    assert leading_title(text) == title


def test_a_repeated_title_counts_as_if_written_that_many_times(tmp_path: Path) -> None:
    """BM25 with ``title_repeat`` 2 scores a titled text as the plain index scores the text with
    its title written twice; untitled texts score as before; the weight survives a save."""
    texts = ["Bee dances\n\nHoney bees dance to point at flowers.",
             "Flower fields\n\nBees visit fields of flowers for nectar.",
             "Dancing is not only for bees: cranes dance too."]
    doubled = [texts[0].replace("Bee dances", "Bee dances Bee dances", 1),
               texts[1].replace("Flower fields", "Flower fields Flower fields", 1), texts[2]]
    weighted = LexicalIndex(title_repeat=2)
    weighted.add(np.arange(3), texts)
    plain = LexicalIndex()
    plain.add(np.arange(3), doubled)
    for query in ("bee dance", "flower fields", "cranes"):
        rows, scores = weighted.search(query, 3)
        expected_rows, expected_scores = plain.search(query, 3)
        assert rows.tolist() == expected_rows.tolist()
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-12)
    assert weighted.search("flower", 1)[0].tolist() == [1]  # the title outweighs the body
    weighted.save(tmp_path / "lex")
    loaded = LexicalIndex.load(tmp_path / "lex")
    assert loaded.title_repeat == 2
    assert loaded.search("bee dance", 3)[1].tolist() == weighted.search("bee dance", 3)[1].tolist()
    with pytest.raises(ValueError):
        LexicalIndex(title_repeat=0)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    analyzer = Analyzer(language="english", stopwords=True, stem=True)
    index = LexicalIndex(analyzer, k1=0.9, b=0.4)
    index.add(np.arange(4), ["Building permits", "Energy declaration", "Permit fees", "Roofs"])
    index.add(np.array([10]), ["unique zebra"])
    index.remove(np.array([10]))  # "zebra" loses all postings and leaves the vocabulary
    target = tmp_path / "lex"
    index.save(target)
    index.save(target)  # a second save replaces the first and cleans up after itself
    assert len([p for p in target.iterdir() if p.suffix == ".npz"]) == 1
    manifest = json.loads((target / "lexical.json").read_text())
    assert "zebra" not in manifest["terms"] and "permit" in manifest["terms"]
    loaded = LexicalIndex.load(target)
    assert (loaded.k1, loaded.b, loaded.count) == (0.9, 0.4, 4)
    assert loaded.analyzer.stem and loaded.analyzer.stopwords
    for query in ["permit", "energy declarations", "zebra"]:
        expected, got = index.search(query, 5), loaded.search(query, 5)
        assert expected[0].tolist() == got[0].tolist()
        np.testing.assert_array_equal(expected[1], got[1])
    loaded.add(np.array([11]), ["permit permit"])
    assert loaded.search("permit", 1)[0].tolist() == [11]


def test_load_rejects_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "lexical.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError):
        LexicalIndex.load(tmp_path)


def test_unicode_queries_match_through_the_default_analyzer() -> None:
    index = LexicalIndex()
    index.add(
        np.arange(4),
        [
            "Krav på hållbarhet och åtgärd vid ombyggnad",
            "東京都の建築許可について",
            "Running the building inspections",
            "Energy performance certificates",
        ],
    )
    assert index.search("hållbarhet", 5)[0].tolist() == [0]
    assert index.search("åtgärd", 5)[0].tolist() == [0]
    assert index.search("建築許可", 5)[0].tolist() == [1]
    assert index.search("inspection run", 5)[0].tolist() == [2]


def test_rejects_invalid_parameters() -> None:
    with pytest.raises(ValueError):
        LexicalIndex(k1=-1)
    with pytest.raises(ValueError):
        LexicalIndex(b=1.5)
    with pytest.raises(ValueError):
        LexicalIndex(idf_exponent=0)


def test_agrees_with_bm25s_lucene_on_the_same_tokens() -> None:
    """With the idf to the power 1, the scores are Lucene's."""
    bm25s = pytest.importorskip("bm25s")
    rng = random.Random(4)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 30))) for _ in range(300)]
    index = LexicalIndex(PLAIN, idf_exponent=1.0)
    index.add(np.arange(300), texts)
    other = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    other.index(PLAIN.tokens_batch(texts), show_progress=False)
    query = "w1 w2 w3 w39"
    their_rows, their_scores = other.retrieve([PLAIN.tokens(query)], k=10, show_progress=False)
    rows, scores = index.search(query, 10)
    np.testing.assert_allclose(scores, their_scores[0], rtol=1e-5)
    assert set(rows.tolist()) == set(their_rows[0].tolist())
