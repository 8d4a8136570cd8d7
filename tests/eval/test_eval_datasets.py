"""BEIR layout loading/writing and the FAQ and directory converters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rcpkit.eval.datasets import (
    CorpusDocument,
    Dataset,
    DatasetError,
    directory_to_beir,
    faq_to_beir,
    load_beir,
    write_beir,
)


@pytest.fixture(scope="module")
def faq_all() -> Dataset:
    return faq_to_beir("all")


def test_faq_english_subset_is_one_answer_per_question() -> None:
    dataset = faq_to_beir("en")
    assert len(dataset.corpus) == len(dataset.queries) == len(dataset.qrels) == 503
    doc_ids = {doc.id for doc in dataset.corpus}
    assert all(doc_id.startswith("en-") for doc_id in doc_ids)
    for judgements in dataset.qrels.values():
        assert list(judgements.values()) == [1]
        assert set(judgements) <= doc_ids
    assert {doc.metadata["language"] for doc in dataset.corpus} == {"en"}
    assert len({doc.metadata["category"] for doc in dataset.corpus}) == 39
    assert dataset.queries["q-en-bygglov-001"].startswith("What is a bygglov")


def test_faq_all_languages(faq_all: Dataset) -> None:
    assert len(faq_all.corpus) == 1006
    assert {doc.metadata["language"] for doc in faq_all.corpus} == {"en", "sv"}
    assert faq_all.qrels["q-sv-bygglov-001"] == {"sv-bygglov-001": 1}
    assert faq_to_beir("sv").corpus[0].id == "sv-bygglov-001"


def test_write_then_load_round_trips(faq_all: Dataset, tmp_path: Path) -> None:
    write_beir(faq_all, tmp_path / "faq")
    header = (tmp_path / "faq" / "qrels" / "test.tsv").read_text().splitlines()[0]
    assert header == "query-id\tcorpus-id\tscore"
    loaded = load_beir(tmp_path / "faq")
    assert loaded.name == "faq"
    assert (loaded.corpus, loaded.queries, loaded.qrels) == (
        faq_all.corpus, faq_all.queries, faq_all.qrels)


def test_only_judged_queries_are_evaluated(tmp_path: Path) -> None:
    dataset = Dataset(name="d", corpus=[CorpusDocument(id="1", text="t", title="T")],
                      queries={"a": "first", "b": "unjudged"}, qrels={"a": {"1": 2}})
    write_beir(dataset, tmp_path)
    loaded = load_beir(tmp_path)
    assert loaded.judged_queries() == {"a": "first"}
    assert loaded.corpus[0].body() == "T\n\nt"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture()
def docs_dir(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    _write(root / "alpha.txt", "Alpha text about cats.")
    _write(root / "guide" / "beta.md", "# Beta\nDogs and more dogs.")
    _write(root / "guide" / "alpha.md", "Another alpha, in markdown.")
    _write(root / "ignored.pdf", "not a document")
    return root


def test_directory_with_tsv_queries(docs_dir: Path, tmp_path: Path) -> None:
    queries = _write(tmp_path / "q.tsv",
                     "query\trelevant\ncats?\talpha.txt\ndogs\tbeta.md\tguide/alpha.md\n")
    dataset = directory_to_beir(docs_dir, queries)
    assert [doc.id for doc in dataset.corpus] == ["alpha.txt", "guide/alpha.md", "guide/beta.md"]
    assert dataset.corpus[2].title == "beta"
    assert dataset.queries == {"q2": "cats?", "q3": "dogs"}
    assert dataset.qrels == {"q2": {"alpha.txt": 1},
                             "q3": {"guide/beta.md": 1, "guide/alpha.md": 1}}


def test_directory_with_jsonl_queries(docs_dir: Path, tmp_path: Path) -> None:
    lines = [{"id": "cats", "query": "cats?", "relevant": ["alpha.txt"]},
             {"query": "dogs", "relevant": ["guide/beta.md"]}]
    queries = _write(tmp_path / "q.jsonl", "\n".join(json.dumps(line) for line in lines))
    dataset = directory_to_beir(docs_dir, queries)
    assert dataset.qrels == {"cats": {"alpha.txt": 1}, "q2": {"guide/beta.md": 1}}


@pytest.mark.parametrize(("content", "problem"), [
    ("cats\tnowhere.txt\n", "unknown relevant document"),
    ("cats\talpha\n", "unknown relevant document"),
    ("cats\n", "expected query"),
])
def test_directory_rejects_bad_queries(docs_dir: Path, tmp_path: Path, content: str,
                                       problem: str) -> None:
    queries = _write(tmp_path / "q.tsv", content)
    with pytest.raises(DatasetError, match=problem):
        directory_to_beir(docs_dir, queries)


def test_directory_rejects_ambiguous_names(tmp_path: Path) -> None:
    _write(tmp_path / "d" / "x" / "same.txt", "one")
    _write(tmp_path / "d" / "y" / "same.txt", "two")
    queries = _write(tmp_path / "q.tsv", "q\tsame.txt\n")
    with pytest.raises(DatasetError, match="ambiguous"):
        directory_to_beir(tmp_path / "d", queries)


def test_load_reports_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"corpus\.jsonl: file not found"):
        load_beir(tmp_path)
    _write(tmp_path / "corpus.jsonl", '{"_id": "1", "text": "ok"}\n{broken\n')
    with pytest.raises(DatasetError, match=r"corpus.jsonl:2: invalid JSON"):
        load_beir(tmp_path)
    _write(tmp_path / "corpus.jsonl", '{"_id": "1", "text": "ok"}\n')
    _write(tmp_path / "queries.jsonl", '{"_id": "q", "text": "hello"}\n')
    _write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nq\t1\thigh\n")
    with pytest.raises(DatasetError, match=r"test.tsv:2: expected"):
        load_beir(tmp_path)
    _write(tmp_path / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\nother\t1\t1\n")
    with pytest.raises(DatasetError, match=r"absent from queries\.jsonl"):
        load_beir(tmp_path)


def test_split_names_the_judgements_and_a_lone_split_is_found(faq_all: Dataset,
                                                              tmp_path: Path) -> None:
    write_beir(faq_all, tmp_path)
    qrels = tmp_path / "qrels"
    (qrels / "test.tsv").rename(qrels / "train.tsv")
    # A development collection that ships only its train split is loaded without naming it.
    assert load_beir(tmp_path).qrels == faq_all.qrels
    assert load_beir(tmp_path, "train").qrels == faq_all.qrels
    (qrels / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"test\.tsv"):  # two splits, no test: say which
        load_beir(tmp_path)
    assert load_beir(tmp_path, "dev").qrels == {}
