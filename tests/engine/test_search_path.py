"""The per-query search path (§7.7, §8): what one retrieve reads and validates.

Speed is measured in ``benchmarks/bench_peers.py``; these tests pin the work a request may
do, which is what the figures there rest on: a page reads the records of its own hits, not
of every candidate, and a filter is validated once per request.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rcpkit import fusion
from rcpkit.binding import bind
from rcpkit.engine.config import (
    EmbedderConfig,
    EngineConfig,
    LexicalConfig,
    RetentionConfig,
    RetrieveConfig,
)
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import InvalidInput
from rcpkit.engine.search import planner, stages
from rcpkit.engine.search.recall import Candidate
from rcpkit.engine.types import DocumentIn, FeedbackSignal, SearchRequest
from rcpkit.protocol import gating
from rcpkit.server import Dispatcher

TOPICS = ["bees", "bread", "stars", "compost"]
CORPUS = [DocumentIn(f"{TOPICS[i % 4]} note {i}: honey flour telescope soil mix {i % 7}",
                     id=f"d{i}", meta={"topic": TOPICS[i % 4], "n": i})
          for i in range(40)]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"))
    with Engine.open(config) as opened:
        opened.add(CORPUS)
        yield opened


def _count_reads(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Row ids the engine reads from its store from now on."""
    store = engine._store
    read: list[int] = []
    original = store.chunks

    def chunks(rowids: Any) -> Any:
        read.extend(int(r) for r in rowids)
        return original(rowids)

    monkeypatch.setattr(store, "chunks", chunks)
    return read


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_a_page_reads_the_records_of_its_hits_only(engine: Engine, mode: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    read = _count_reads(engine, monkeypatch)
    result = engine.search(SearchRequest("honey flour telescope", k=3, mode=mode,
                                         candidate_k=30))
    assert len(result.hits) == 3
    assert len(read) == 3
    assert result.usage.candidates == 30


def test_a_repeated_page_is_served_from_the_record_cache(engine: Engine,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    request = SearchRequest("honey flour telescope", k=3, mode="hybrid", candidate_k=30,
                            include_vectors=True)
    first = engine.search(request)
    read = _count_reads(engine, monkeypatch)
    floors: list[int] = []
    gc_floor = engine._store.gc_floor
    monkeypatch.setattr(engine._store, "gc_floor", lambda: floors.append(gc_floor()) or 0)
    again = engine.search(request)
    assert read == [] and floors == []  # no store query beyond the refresh
    assert again.hits == first.hits
    # A hit of a row not seen before is still read from the store.
    engine.search(SearchRequest("compost soil", k=3, mode="sparse", candidate_k=30))
    assert read


def test_the_record_cache_can_be_turned_off(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          retrieve=RetrieveConfig(record_cache_size=0))
    with Engine.open(config) as opened:
        opened.add(CORPUS[:8])
        read = _count_reads(opened, monkeypatch)
        for _ in range(2):
            opened.search(SearchRequest("honey", k=2, mode="sparse"))
        assert len(read) == 4


def test_a_repeated_filter_is_evaluated_once_per_version(engine: Engine,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    assert engine.indexes is not None
    columns = engine.indexes.columns
    evaluated: list[Any] = []
    monkeypatch.setattr(columns, "mask", _counting(evaluated, columns.mask))
    request = SearchRequest("honey flour telescope", k=20, mode="dense",
                            filter={"field": "topic", "op": "eq", "value": "stars"})
    first = engine.search(request)
    assert engine.search(request).hits == first.hits
    assert len(evaluated) == 1
    assert len(first.hits) == 10 and {h.meta["topic"] for h in first.hits} == {"stars"}
    other = engine.search(SearchRequest("honey", k=20, mode="sparse",
                                        filter={"field": "n", "op": "lt", "value": 3}))
    assert len(evaluated) == 2
    assert sorted(h.meta["n"] for h in other.hits) == [0, 1, 2]
    # A write publishes a new version: its rows are selected too.
    engine.add([DocumentIn("stars note: telescope", id="new", meta={"topic": "stars"})])
    after = engine.search(request)
    assert len(evaluated) == 3
    assert "new" in {h.doc_id for h in after.hits}


def test_hits_without_text_still_pack_by_their_bodies(engine: Engine) -> None:
    with_text = engine.search(SearchRequest("honey flour", k=6, mode="sparse", token_budget=30))
    without = engine.search(SearchRequest("honey flour", k=6, mode="sparse", token_budget=30,
                                          include_text=False))
    assert [h.id for h in without.hits] == [h.id for h in with_text.hits]
    assert 0 < len(without.hits) < 6
    assert without.usage.tokens == with_text.usage.tokens
    assert all(h.text is None for h in without.hits)
    assert all(h.text for h in with_text.hits)


def test_the_next_page_reads_only_its_own_records(engine: Engine,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    first = engine.search(SearchRequest("honey flour", k=4, mode="sparse", candidate_k=20))
    assert first.next_cursor is not None
    read = _count_reads(engine, monkeypatch)
    second = engine.search(SearchRequest("honey flour", k=4, mode="sparse", candidate_k=20,
                                         cursor=first.next_cursor))
    assert len(second.hits) == 4
    assert not {h.id for h in first.hits} & {h.id for h in second.hits}
    assert len(read) == 4


def test_stages_that_look_at_every_candidate_still_see_them(engine: Engine) -> None:
    # unit=document keeps one hit per document: it needs every candidate's document id.
    result = engine.search(SearchRequest("honey flour telescope", k=5, mode="hybrid",
                                         unit="document", candidate_k=40))
    assert len({h.doc_id for h in result.hits}) == len(result.hits) == 5
    # MMR needs every candidate's vector; scores stay non-increasing (§4.6).
    diverse = engine.search(SearchRequest("honey flour telescope", k=5, mode="hybrid",
                                          mmr_lambda=0.3, candidate_k=40))
    scores = [h.score for h in diverse.hits]
    assert scores == sorted(scores, reverse=True) and len(scores) == 5


def test_progress_gets_partial_hits_with_their_records(engine: Engine) -> None:
    seen: dict[str, list[Any]] = {}

    def progress(stage: str, fraction: float, partial: Any) -> None:
        seen[stage] = partial

    engine.search(SearchRequest("honey", k=2, mode="sparse"), progress=progress)
    recalled = seen["recall"]
    assert recalled is not None and len(recalled) == 2
    assert all(hit.text and hit.doc_id for hit in recalled)


def _counting(calls: list[Any], function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return function(*args, **kwargs)
    return counted


async def test_a_retrieve_filter_is_validated_once(engine: Engine,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(gating, "validate", _counting(calls, gating.validate))
    monkeypatch.setattr(planner, "validate", _counting(calls, planner.validate))
    dispatcher = Dispatcher(bind(engine))
    await dispatcher.handle(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                        "params": {"protocolVersion": 1}}).encode())
    flt = {"and": [{"field": "topic", "op": "eq", "value": "stars"},
                   {"field": "n", "op": "lt", "value": 20}]}
    reply = json.loads(await dispatcher.handle(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "retrieve",
        "params": {"query": "telescope", "k": 10, "mode": "sparse", "filter": flt}}).encode()))
    hits = reply["result"]["hits"]
    assert {h["meta"]["topic"] for h in hits} == {"stars"}
    assert all(h["meta"]["n"] < 20 for h in hits) and len(hits) == 5
    assert calls == [flt]


def test_a_filter_given_to_the_engine_directly_is_still_validated(engine: Engine) -> None:
    with pytest.raises(InvalidInput) as info:
        engine.search(SearchRequest("honey", filter={"field": "n", "op": "lt", "value": "x"}))
    assert info.value.field == "filter.n"


def test_a_repeated_query_is_embedded_once(engine: Engine,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = engine._embedder
    embedded: list[list[str]] = []
    original = embedder.embed

    def embed(texts: Any, kind: str = "document") -> Any:
        embedded.append(list(texts))
        return original(texts, kind)

    monkeypatch.setattr(embedder, "embed", embed)
    first = engine.search(SearchRequest("telescope stars", k=3, mode="dense"))
    again = engine.search(SearchRequest("telescope stars", k=3, mode="hybrid"))
    engine.search(SearchRequest("honey bees", k=3, mode="dense"))
    assert embedded == [["telescope stars"], ["honey bees"]]
    assert [h.id for h in first.hits] == [h.id for h in engine.search(
        SearchRequest("telescope stars", k=3, mode="dense")).hits]
    assert again.hits


def test_the_query_cache_can_be_turned_off(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config = EngineConfig(data_dir=tmp_path,
                          embedder=EmbedderConfig(name="hashing", query_cache_size=0))
    with Engine.open(config) as opened:
        opened.add(CORPUS[:4])
        calls: list[str] = []
        original = opened._embedder.embed
        monkeypatch.setattr(opened._embedder, "embed",
                            lambda texts, kind="document": calls.append(kind) or original(
                                texts, kind))
        for _ in range(2):
            opened.search(SearchRequest("honey", k=2, mode="dense"))
        assert calls == ["query", "query"]


def test_visibility_masks_agree_with_the_store_without_scanning_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """§7.7.1 snapshots: the mask of rows a version shows is the rows the indexes hold minus
    what the store says that version hides (later additions, old versions), at every seq,
    and a query at the latest version never reads every visible rowid from the store."""
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"))
    with Engine.open(config) as engine:
        engine.add(CORPUS[:20])
        engine.add([DocumentIn(f"rewritten note {i} about bees", id=f"d{i}") for i in range(5)])
        engine.delete(["d7", "d8"])
        engine.add(CORPUS[20:])
        store = engine._store
        indexes = engine.indexes
        assert indexes is not None
        latest = store.current_seq()
        for seq in range(1, latest + 1):
            indexes._masks.clear()
            assert indexes.visible_mask(seq).nonzero()[0].tolist() == \
                store.visible_rowids(seq).tolist()

        def scan(seq: int) -> Any:
            raise AssertionError("a query read every visible rowid")

        monkeypatch.setattr(store, "visible_rowids", scan)
        indexes._masks.clear()
        hits = engine.search(SearchRequest("rewritten bees", k=40, mode="sparse")).hits
        ids = [hit.doc_id for hit in hits]
        assert len(ids) == len(set(ids)) and not {"d7", "d8"} & set(ids)
        assert {f"d{i}" for i in range(5)} <= set(ids)
        assert all("rewritten" in hit.text for hit in hits if hit.doc_id in {"d0", "d1"})


def _candidates(rng: random.Random, size: int) -> list[Candidate]:
    """Candidates found by the dense list, the sparse one or both, with tied scores and row
    ids whose string order differs from their numeric order (9 < 10, "10" < "9")."""
    found = []
    for rowid in rng.sample(range(1, 400), size):
        scores: dict[str, float] = {}
        side = rng.randrange(3)
        if side != 1:
            scores["dense"] = rng.choice([0.5, 0.25, rng.uniform(-1, 1)])
        if side != 0:
            scores["sparse"] = rng.choice([2.0, 0.0, rng.uniform(0, 9)])
        found.append(Candidate(rowid, next(iter(scores.values())), scores))
    return found


def _reference(candidates: list[Candidate], method: str,
               weights: list[float] | None, alpha: float, rrf_k: int) -> list[tuple[int, float]]:
    """:mod:`rcpkit.fusion` itself over the two lists, as the engine once called it."""
    lists = [sorted(((str(c.rowid), c.scores[name]) for c in candidates if name in c.scores),
                    key=lambda item: (-item[1], int(item[0]))) for name in ("dense", "sparse")]
    if method == "rrf":
        fused = fusion.rrf(lists, weights, k=rrf_k)
    elif method == "convex":
        fused = fusion.convex(lists, [-1.0, 0.0], [alpha, 1.0 - alpha])
    else:
        fused = fusion.weighted(lists, weights or [alpha, 1.0 - alpha])
    return [(int(item.key), item.score) for item in fused]


@pytest.mark.parametrize("method", ["rrf", "weighted", "convex"])
def test_hybrid_fusion_matches_the_fusion_module_to_the_bit(method: str) -> None:
    rng = random.Random(19)
    for trial in range(60):
        candidates = _candidates(rng, rng.randrange(1, 60))
        weights = {"dense": rng.uniform(0, 1), "sparse": rng.uniform(0, 1)} if trial % 3 else None
        request = SearchRequest("q", mode="hybrid", fusion=method, weights=weights,
                                alpha=rng.choice([None, 0.0, 0.3, 1.0]),
                                rrf_k=rng.choice([0, 1, 60]))
        alpha = 0.5 if request.alpha is None else request.alpha
        expected = _reference(candidates, method,
                              None if weights is None else [weights["dense"],
                                                            weights["sparse"]],
                              alpha, request.rrf_k)
        ranked = stages.fuse(request, candidates, default_method="rrf", default_alpha=0.5)
        assert [(c.rowid, c.score) for c in ranked] == expected
        assert all(c.scores["fused"] == c.score for c in ranked)


def _without_fields(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every record read come from the store, as when no fields were kept."""
    monkeypatch.setattr(engine.searcher.recall, "fields", lambda rowids: {})
    engine.searcher._loaded.clear()


REQUESTS = [SearchRequest("honey flour telescope", k=6, mode=mode, include_text=text,
                          candidate_k=30, include_vectors=True)
            for mode in ("dense", "sparse", "hybrid") for text in (False, True)]


def test_a_page_without_text_reads_nothing_from_the_store(engine: Engine,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    read = _count_reads(engine, monkeypatch)
    floors: list[int] = []
    gc_floor = engine._store.gc_floor
    monkeypatch.setattr(engine._store, "gc_floor", lambda: floors.append(gc_floor()) or 0)
    for mode in ("dense", "sparse", "hybrid"):
        hits = engine.search(SearchRequest("honey flour", k=5, mode=mode,
                                           include_text=False)).hits
        assert len(hits) == 5 and all(h.text is None and h.meta["topic"] for h in hits)
    assert read == [] and floors == []
    # A page with text reads the records of its hits, once: then they are cached.
    request = SearchRequest("honey flour", k=5, mode="dense")
    with_text = engine.search(request).hits
    assert len(read) == 5 and all(h.text for h in with_text)
    assert engine.search(request).hits == with_text and len(read) == 5


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.mode}-{r.include_text}")
def test_hits_from_the_kept_fields_equal_hits_from_the_store(
        engine: Engine, monkeypatch: pytest.MonkeyPatch, request_: SearchRequest) -> None:
    engine.searcher._loaded.clear()
    kept = engine.search(request_).hits
    _without_fields(engine, monkeypatch)
    stored = engine.search(request_).hits
    assert kept == stored and len(kept) == 6


def test_stages_after_a_page_without_text_read_the_text_they_need(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # The poison policy reads every candidate without its text; the page then includes it.
    engine.feedback([FeedbackSignal(hit_id="d3#0", poison_suspected=True)])
    engine.searcher._loaded.clear()
    result = engine.search(SearchRequest("honey flour", k=4, mode="sparse",
                                         unit="document", token_budget=200))
    assert len(result.hits) == 4 and all(h.text for h in result.hits)
    _without_fields(engine, monkeypatch)
    assert engine.search(SearchRequest("honey flour", k=4, mode="sparse", unit="document",
                                       token_budget=200)).hits == result.hits


def test_kept_fields_are_saved_with_the_indexes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"))
    with Engine.open(config) as first:
        first.add(CORPUS)
        expected = first.search(SearchRequest("honey flour", k=5, include_text=False)).hits
    with Engine.open(config) as reopened:
        read = _count_reads(reopened, monkeypatch)
        assert reopened.search(SearchRequest("honey flour", k=5,
                                             include_text=False)).hits == expected
        assert read == []
    # A saved state without them (or with them damaged) rebuilds them from the store.
    for fields_dir in (tmp_path / "indexes").glob("state-*/fields"):
        for part in fields_dir.iterdir():
            part.unlink()
    with Engine.open(config) as rebuilt:
        read = _count_reads(rebuilt, monkeypatch)
        assert rebuilt.search(SearchRequest("honey flour", k=5,
                                            include_text=False)).hits == expected
        assert read == []


def test_kept_fields_follow_deletes_and_collection(tmp_path: Path) -> None:
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          retention=RetentionConfig(versions=1, seconds=0))
    with Engine.open(config) as engine:
        engine.add(CORPUS[:6])
        assert engine.indexes is not None
        fields = engine.indexes.fields

        def held() -> set[int]:
            return {rowid for rowid, row in enumerate(fields._rows) if row}

        before = held()
        engine.delete(["d2"])
        engine.add([DocumentIn("honey again", id="d9")])
        hits = engine.search(SearchRequest("honey", k=10, mode="sparse",
                                           include_text=False)).hits
        assert "d2" not in {h.doc_id for h in hits} and "d9" in {h.doc_id for h in hits}
        collected = before - held()
        assert len(collected) == 1 and engine._store.chunks(list(collected)) == {}
        assert engine.indexes.fields is fields  # caught up in place, not rebuilt
        assert held() == set(engine._store.visible_rowids(engine._store.current_seq()).tolist())


PINNED = [DocumentIn(f"{TOPICS[i % 4]} note {i}: honey flour telescope soil mix {i % 7}",
                     id=f"d{i}", meta={"topic": TOPICS[i % 4], "n": i, "title": f"Note {i}",
                                       "uri": f"https://x/{i}"})
          for i in range(40)]
PINNED_REQUESTS = [
    *(SearchRequest("honey flour telescope", k=4, mode=mode, include_text=text, candidate_k=30)
      for mode in ("dense", "sparse", "hybrid") for text in (False, True)),
    SearchRequest("telescope soil", k=4, mode="dense", include_text=False,
                  filter={"field": "topic", "op": "eq", "value": "stars"}),
    SearchRequest("telescope soil", k=4, mode="hybrid", include_text=False, unit="document",
                  candidate_k=40),
    SearchRequest("honey", k=3, mode="sparse", token_budget=40, include_text=False),
]


def test_hits_are_those_the_store_read_path_gave(tmp_path: Path) -> None:
    """Every field of these hits (ids, scores, confidences, texts, metadata, citations),
    recorded from the engine before it kept chunk fields in memory and made hits msgspec
    structs; float scores compare exactly. The hybrid fusion and the BM25 term weights are
    the ones they were recorded with (this pins the read path, not the scoring)."""
    expected = json.loads((Path(__file__).parent / "search_path_hits.json").read_text())
    config = EngineConfig(data_dir=tmp_path, embedder=EmbedderConfig(name="hashing"),
                          retrieve=RetrieveConfig(fusion_alpha=0.8, fusion_complete_scores=False),
                          lexical=LexicalConfig(idf_exponent=1.0))
    with Engine.open(config) as engine:
        engine.add(PINNED)
        engine.delete(["d5"])
        found = [[_hit_fields(hit) for hit in engine.search(request).hits]
                 for request in PINNED_REQUESTS]
    assert found == expected


def _hit_fields(hit: Any) -> list[Any]:
    cited = hit.citation
    return [hit.id, hit.score, hit.confidence, hit.doc_id, hit.chunk_index, hit.text,
            dict(hit.meta), dict(hit.scores),
            None if cited is None else [cited.source, cited.uri, cited.title, cited.start,
                                        cited.end, cited.page],
            hit.trust_level, hit.context]
