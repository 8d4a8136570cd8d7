"""Test collections in the BEIR layout, and converters that produce it.

A collection directory holds ``corpus.jsonl`` (``_id``, ``title``, ``text``,
``metadata``), ``queries.jsonl`` (``_id``, ``text``) and ``qrels/<split>.tsv``
(header ``query-id  corpus-id  score``). Only queries judged in the chosen split are
evaluated: ``test`` by default, or the only split a development collection ships (the
SciFact train split holds ``qrels/train.tsv`` alone). Converters: the offline Zaragoza
construction FAQ (``zaragoza_construction_faq``) and a directory of ``.txt``/``.md`` documents
with a queries file.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rcpkit.protocol.errors import UsageError

__all__ = [
    "CorpusDocument",
    "Dataset",
    "DatasetError",
    "FaqLanguage",
    "directory_to_beir",
    "faq_to_beir",
    "load_beir",
    "write_beir",
]

FaqLanguage = Literal["en", "sv", "all"]

_DOCUMENT_SUFFIXES = (".txt", ".md")


class DatasetError(UsageError):
    """A collection or converter input is missing or malformed (names file and line)."""


@dataclass(frozen=True, slots=True)
class CorpusDocument:
    """One corpus entry; ``metadata`` becomes the indexed document's ``meta`` (§7.10)."""

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def body(self) -> str:
        """The text sent to ``index/add``: the title (when any) heads the text."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class Dataset:
    """A test collection: corpus, query texts and graded judgements."""

    name: str
    corpus: list[CorpusDocument]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def judged_queries(self) -> dict[str, str]:
        """The queries to evaluate: those with judgements, in ``qrels`` order."""
        return {qid: self.queries[qid] for qid in self.qrels}


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise DatasetError(f"{path}:{number}: expected a JSON object")
            yield number, record


def _required_str(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DatasetError(f"{where}: missing string field {key!r}")
    return value


def load_beir(directory: Path, split: str | None = None, *,
              within: Path | None = None) -> Dataset:
    """Load a BEIR-layout collection; raises :class:`DatasetError` on malformed input.

    ``split`` names the judgements file (``qrels/<split>.tsv``); without it, ``test`` when
    present, else the collection's only split. With ``within`` (a resolved directory), a
    file that is not under it once symlinks and ``..`` are resolved is refused unread.
    """
    def checked(path: Path) -> Path:
        if within is None:
            return path
        resolved = path.resolve()
        if not resolved.is_relative_to(within):
            raise DatasetError(f"{path} is outside the evaluation root {within}")
        return resolved

    corpus: list[CorpusDocument] = []
    for number, record in _read_jsonl(checked(directory / "corpus.jsonl")):
        where = f"{directory / 'corpus.jsonl'}:{number}"
        metadata = record.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise DatasetError(f"{where}: 'metadata' must be an object")
        corpus.append(CorpusDocument(
            id=_required_str(record, "_id", where), text=_required_str(record, "text", where),
            title=str(record.get("title") or ""), metadata=metadata))
    queries = {
        _required_str(record, "_id", f"{directory / 'queries.jsonl'}:{number}"):
            _required_str(record, "text", f"{directory / 'queries.jsonl'}:{number}")
        for number, record in _read_jsonl(checked(directory / "queries.jsonl"))
    }
    qrels = _read_qrels(checked(_qrels_path(directory, split)))
    unknown = [qid for qid in qrels if qid not in queries]
    if unknown:
        raise DatasetError(f"qrels reference queries absent from queries.jsonl: {unknown[:5]}")
    return Dataset(name=directory.resolve().name, corpus=corpus, queries=queries, qrels=qrels)


def _qrels_path(directory: Path, split: str | None) -> Path:
    if split is not None:
        return directory / "qrels" / f"{split}.tsv"
    default = directory / "qrels" / "test.tsv"
    splits = sorted((directory / "qrels").glob("*.tsv"))
    return splits[0] if not default.is_file() and len(splits) == 1 else default


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if not row or (number == 1 and row[0] == "query-id"):
                continue
            try:
                query_id, doc_id, grade = row[0], row[1], int(row[2])
            except (IndexError, ValueError):
                raise DatasetError(f"{path}:{number}: expected query-id, corpus-id, "
                                   "integer score") from None
            qrels.setdefault(query_id, {})[doc_id] = grade
    return qrels


def write_beir(dataset: Dataset, directory: Path) -> None:
    """Write ``dataset`` in the BEIR layout under ``directory`` (created if needed)."""
    (directory / "qrels").mkdir(parents=True, exist_ok=True)
    with (directory / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for doc in dataset.corpus:
            out.write(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text,
                                  "metadata": doc.metadata}, ensure_ascii=False) + "\n")
    with (directory / "queries.jsonl").open("w", encoding="utf-8") as out:
        for query_id, text in dataset.queries.items():
            out.write(json.dumps({"_id": query_id, "text": text}, ensure_ascii=False) + "\n")
    with (directory / "qrels" / "test.tsv").open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["query-id", "corpus-id", "score"])
        for query_id, judgements in dataset.qrels.items():
            writer.writerows([query_id, doc_id, grade] for doc_id, grade in judgements.items())


def faq_to_beir(language: FaqLanguage = "all") -> Dataset:
    """The Zaragoza construction FAQ as a collection: question = query, answer = document.

    Each question has exactly one relevant answer (grade 1). Document ids are
    ``<lang>-<faq id>`` (e.g. ``en-bygglov-001``), query ids ``q-<lang>-<faq id>``;
    ``category`` and ``language`` become document metadata for §8 filter tests.
    """
    try:
        import zaragoza_construction_faq as faq
    except ImportError:
        raise UsageError("the FAQ collection needs its package: pip install "
                         "'rcpkit[faq]'") from None

    languages: tuple[Literal["en", "sv"], ...] = ("en", "sv") if language == "all" else (language,)
    corpus: list[CorpusDocument] = []
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for lang in languages:
        for item in faq.load(lang=lang):
            doc_id = f"{lang}-{item['id']}"
            corpus.append(CorpusDocument(id=doc_id, text=item["a"], metadata={
                "category": item["category"], "language": lang}))
            queries[f"q-{doc_id}"] = item["q"]
            qrels[f"q-{doc_id}"] = {doc_id: 1}
    return Dataset(name=f"zaragoza-faq-{language}", corpus=corpus, queries=queries, qrels=qrels)


def directory_to_beir(docs_dir: Path, queries_file: Path) -> Dataset:
    """A collection from ``.txt``/``.md`` files plus a queries file naming relevant files.

    Document id = the file's path relative to ``docs_dir`` (POSIX separators),
    title = file stem. ``queries_file`` is either JSONL (``{"query": str,
    "relevant": [file, ...], "id"?: str}`` per line) or TSV (``query<TAB>file
    [<TAB>file ...]``, an optional header row starting with ``query``). A
    relevant file is named by its relative path or, when unambiguous, its bare
    file name. Query ids default to ``q<line number>``.
    """
    if not docs_dir.is_dir():
        raise DatasetError(f"{docs_dir}: not a directory")
    paths = sorted(p for p in docs_dir.rglob("*") if p.is_file() and p.suffix in _DOCUMENT_SUFFIXES)
    if not paths:
        raise DatasetError(f"{docs_dir}: no .txt or .md documents")
    corpus = [CorpusDocument(id=p.relative_to(docs_dir).as_posix(), title=p.stem,
                             text=p.read_text(encoding="utf-8")) for p in paths]
    resolve = _file_resolver([doc.id for doc in corpus])
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for number, query_id, text, relevant in _read_query_file(queries_file):
        where = f"{queries_file}:{number}"
        if query_id in queries:
            raise DatasetError(f"{where}: duplicate query id {query_id!r}")
        queries[query_id] = text
        qrels[query_id] = {resolve(name, where): 1 for name in relevant}
    return Dataset(name=docs_dir.resolve().name, corpus=corpus, queries=queries, qrels=qrels)


def _read_query_file(path: Path) -> Iterator[tuple[int, str, str, list[str]]]:
    """``(line, query id, query text, relevant file names)`` from a JSONL or TSV file."""
    if path.suffix == ".jsonl":
        for number, record in _read_jsonl(path):
            where = f"{path}:{number}"
            relevant = record.get("relevant")
            if not isinstance(relevant, list) or not all(isinstance(r, str) for r in relevant):
                raise DatasetError(f"{where}: 'relevant' must be a list of file names")
            query_id = str(record.get("id") or f"q{number}")
            yield number, query_id, _required_str(record, "query", where), relevant
        return
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            cells = [cell.strip() for cell in row if cell.strip()]
            if not cells or (number == 1 and cells[0].lower() == "query"):
                continue
            if len(cells) < 2:
                raise DatasetError(f"{path}:{number}: expected query<TAB>file[<TAB>file ...]")
            yield number, f"q{number}", cells[0], cells[1:]


def _file_resolver(doc_ids: list[str]) -> Callable[[str, str], str]:
    by_name: dict[str, list[str]] = {}
    for doc_id in doc_ids:
        by_name.setdefault(doc_id.rsplit("/", 1)[-1], []).append(doc_id)
    known = set(doc_ids)

    def resolve(name: str, where: str) -> str:
        if name in known:
            return name
        candidates = by_name.get(name, [])
        if len(candidates) != 1:
            problem = "ambiguous" if candidates else "unknown"
            raise DatasetError(f"{where}: {problem} relevant document {name!r}")
        return candidates[0]

    return resolve
