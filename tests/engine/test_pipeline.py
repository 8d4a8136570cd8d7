"""The Engine (§7.7, §7.10, §7.11, §7.16): modes, fusion, funnel, filters, snapshots, paging."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rcpkit.binding import bind
from rcpkit.client import Client
from rcpkit.engine.config import EmbedderConfig, EngineConfig
from rcpkit.engine.core import Engine
from rcpkit.engine.errors import (
    Cancelled,
    InvalidInput,
    SnapshotUnavailable,
    TooLarge,
    Unavailable,
    UnknownCursor,
    Unsupported,
)
from rcpkit.engine.types import (
    DocumentIn,
    FeedbackSignal,
    Recency,
    RerankOptions,
    SearchRequest,
)
from rcpkit.ingest.sample import sample_documents
from support.schema import load_schema

CORPUS = [
    DocumentIn("Honeybees dance to tell nest mates where the flowers are.", id="bees",
               meta={"tag": "bees", "year": 2021, "lang": "en",
                     "title": "Bees", "uri": "https://example.org/bees"}),
    DocumentIn("Compost heaps need green nitrogen and brown carbon material.", id="compost",
               meta={"tag": "garden", "year": 2019, "lang": "en"}),
    DocumentIn("Sourdough starter is wild yeast living in flour and water.", id="bread",
               meta={"tag": "baking", "year": 2023, "lang": "en"}),
    DocumentIn("Las abejas producen miel a partir del néctar de las flores.", id="abejas",
               meta={"tag": "bees", "year": 2022, "lang": "es"}),
    DocumentIn("Polaris, the pole star, shows where north is at night.", id="stars",
               meta={"tag": "astronomy", "year": 2016, "lang": "en"}),
]


LABELLED = [DocumentIn(CORPUS[0].text, id=CORPUS[0].id,
                      meta={**(CORPUS[0].meta or {}), "trust": "community"}), *CORPUS[1:]]
"""CORPUS with its first document labelled ``community`` by the operator (§15.2)."""


def make_config(path: Path, **overrides: Any) -> EngineConfig:
    return EngineConfig(data_dir=path,
                        embedder=EmbedderConfig(name="hashing")).with_overrides(**overrides)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with Engine.open(make_config(tmp_path)) as opened:
        opened.add(LABELLED, max_trust="community")
        yield opened


def ids(result: Any) -> list[str]:
    return [hit.id for hit in result.hits]


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_each_mode_finds_the_matching_document(engine: Engine, mode: str) -> None:
    result = engine.search(SearchRequest("sourdough starter yeast flour", k=3, mode=mode))
    assert ids(result)[0] == "bread#0"
    stage = {"dense": {"dense"}, "sparse": {"sparse"}, "hybrid": {"dense", "sparse", "fused"}}
    assert stage[mode] <= set(result.hits[0].scores)
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("fusion", ["rrf", "weighted", "convex"])
def test_fusion_methods_rank_the_obvious_match_first(engine: Engine, fusion: str) -> None:
    result = engine.search(SearchRequest("compost nitrogen carbon", k=2, fusion=fusion))
    assert ids(result)[0] == "compost#0"
    assert result.hits[0].scores["fused"] == pytest.approx(result.hits[0].score)


def test_fusion_weights_and_alpha_select_one_retriever(engine: Engine) -> None:
    query = "flowers nectar honeybees"
    dense_only = engine.search(SearchRequest(query, k=5, mode="dense"))
    weighted = engine.search(SearchRequest(query, k=5, fusion="weighted",
                                           weights={"dense": 1.0, "sparse": 0.0}))
    convex = engine.search(SearchRequest(query, k=5, fusion="convex", alpha=1.0))
    assert ids(weighted)[:2] == ids(dense_only)[:2] == ids(convex)[:2]


def test_unsupported_options_are_rejected(engine: Engine) -> None:
    with pytest.raises(Unsupported):
        engine.search(SearchRequest("x", mode="graph"))
    with pytest.raises(Unsupported):
        engine.search(SearchRequest("x", fusion="borda"))
    with pytest.raises(Unsupported):
        engine.search(SearchRequest("x", unit="community"))
    with pytest.raises(Unsupported):
        engine.search(SearchRequest("x", rerank=RerankOptions("cross-encoder")))
    with pytest.raises(InvalidInput) as bad_k:
        engine.search(SearchRequest("x", k=0))
    assert bad_k.value.field == "k"


def test_funnel_is_clamped_to_max_k(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path,
                                 requests={"max_k": 3, "default_candidate_k": 2})) as small:
        small.add(CORPUS)
        result = small.search(SearchRequest("bees", k=10, candidate_k=50,
                                            rerank=RerankOptions("colbert", top_n=1)))
        assert len(result.hits) <= 3
        assert result.usage.candidates == 3 and result.usage.k == 3
        assert result.usage.reranked == 3  # topN raised to k: candidateK ≥ topN ≥ k (§3.3)
        assert any("maxK" in note for note in result.usage.notes)
        assert small.search(SearchRequest("bees", k=1)).usage.candidates == 2


def test_rerank_scores_are_reported(engine: Engine) -> None:
    result = engine.search(SearchRequest("pole star north", k=2,
                                         rerank=RerankOptions("colbert", top_n=4)))
    assert ids(result)[0] == "stars#0"
    assert result.usage.reranked == 4
    assert all("rerank" in hit.scores for hit in result.hits)


def test_filters_apply_through_the_engine(engine: Engine) -> None:
    flt = {"and": [{"field": "tag", "op": "eq", "value": "bees"},
                   {"field": "year", "op": "gte", "value": 2022}]}
    assert ids(engine.search(SearchRequest("flowers", k=5, filter=flt))) == ["abejas#0"]
    with pytest.raises(InvalidInput) as unknown:
        engine.search(SearchRequest("x", filter={"field": "nope", "op": "eq", "value": 1}))
    assert unknown.value.field == "filter.nope"


def test_min_score_uses_the_final_scale(engine: Engine) -> None:
    everything = engine.search(SearchRequest("bees flowers honey", k=5, mode="dense"))
    threshold = everything.hits[2].score
    kept = engine.search(SearchRequest("bees flowers honey", k=5, mode="dense",
                                       min_score=threshold))
    assert ids(kept) == [h.id for h in everything.hits if h.score >= threshold]
    assert 3 <= len(kept.hits) < 5


def test_recency_prefers_newer_documents(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as fresh:
        now = dt.datetime.now(dt.UTC)
        fresh.add([DocumentIn("weather report rain", id="old",
                              meta={"published": (now - dt.timedelta(days=400)).isoformat()}),
                   DocumentIn("weather report rain", id="new",
                              meta={"published": (now - dt.timedelta(days=1)).isoformat()})])
        assert fresh.describe().filter_fields["published"] == "date"
        result = fresh.search(SearchRequest("weather rain", k=2, mode="sparse",
                                            recency=Recency("published", 30)))
        assert ids(result) == ["new#0", "old#0"]
        with pytest.raises(InvalidInput):
            fresh.search(SearchRequest("rain", recency=Recency("nope", 30)))


def test_document_unit_aggregates_chunks(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, chunking={"max_chars": 80, "overlap_chars": 0})) as eng:
        long_text = "\n\n".join(f"Paragraph {i} talks about bees and honey in detail here."
                                for i in range(6))
        added = eng.add([DocumentIn(long_text, id="long"), CORPUS[1]], chunk=True)
        assert added.chunks > 2
        chunks = eng.search(SearchRequest("bees honey", k=10, mode="sparse"))
        assert len([h for h in chunks.hits if h.doc_id == "long"]) > 1
        docs = eng.search(SearchRequest("bees honey", k=10, mode="sparse", unit="document"))
        assert ids(docs) == ["long"]
        best = chunks.hits[0]
        assert docs.hits[0].citation is not None and best.citation is not None
        assert (docs.hits[0].citation.start, docs.hits[0].unit) == (best.citation.start,
                                                                    "document")


def test_token_budget_packs_whole_hits(engine: Engine) -> None:
    unbounded = engine.search(SearchRequest("the", k=5, mode="dense"))
    budget = 30
    packed = engine.search(SearchRequest("the", k=5, mode="dense", token_budget=budget))
    assert packed.usage.tokens is not None and packed.usage.tokens <= budget
    assert ids(packed) == ids(unbounded)[:len(packed.hits)]
    assert 0 < len(packed.hits) < 5


def test_hits_carry_citation_trust_chunk_and_valid_wire_form(engine: Engine) -> None:
    result = engine.search(SearchRequest("honeybees dance", k=5, include_vectors=True))
    hit = result.hits[0]
    assert hit.id == "bees#0" and hit.trust_level == "community"
    assert hit.citation is not None and hit.citation.uri == "https://example.org/bees"
    assert hit.citation.title == "Bees" and hit.citation.end == len(CORPUS[0].text)
    assert all(0.0 <= h.confidence <= 1.0 for h in result.hits if h.confidence is not None)
    others = [h for h in result.hits if h.doc_id == "compost"]
    assert all(h.trust_level == "untrusted" for h in others)  # never trusted by default
    schema = load_schema()
    result_schema = {**schema["$defs"]["RetrieveResult"], "$defs": schema["$defs"]}
    with Client.connect_memory(bind(engine)) as client:  # the reply the binding sends (§7.7)
        wire = client.call("retrieve", {"query": "honeybees dance", "k": 5,
                                        "includeVectors": True})
    jsonschema.validate(wire, result_schema)
    assert all(hit["chunk"]["docId"] and len(hit["vector"]) == 64 for hit in wire["hits"])


def test_add_upserts_replays_and_mints_ids(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as eng:
        first = eng.add(CORPUS[:2])
        again = eng.add(CORPUS[:2])
        assert again == first  # identical re-add: same ids, chunks and version
        minted = eng.add([DocumentIn("no id here")])
        assert len(minted.ids[0]) == 32 and minted.index_version != first.index_version
        keyed = eng.add([DocumentIn("keyed")], idempotency_key="k")
        assert eng.add([DocumentIn("keyed")], idempotency_key="k") == keyed
        changed = eng.add([DocumentIn("Totally different bees text", id="bees")])
        assert changed.index_version != keyed.index_version
        assert eng.stats()["documents"] == 4


def test_add_validates_and_enforces_limits(tmp_path: Path) -> None:
    limits = {"max_documents_per_add": 2, "max_text_bytes": 10}
    with Engine.open(make_config(tmp_path, requests=limits)) as eng:
        with pytest.raises(TooLarge):
            eng.add([DocumentIn("a")] * 3)
        with pytest.raises(TooLarge):
            eng.add([DocumentIn("x" * 11)])
        with pytest.raises(InvalidInput) as bad_text:
            eng.add([DocumentIn("ok"), DocumentIn(None)])  # type: ignore[arg-type]
        assert bad_text.value.field == "documents[1].text"
        with pytest.raises(InvalidInput) as bad_trust:
            eng.add([DocumentIn("ok", meta={"trust": "root"})])
        assert bad_trust.value.field == "documents[0].meta.trust"
        eng.add([DocumentIn("ok", meta={"year": 2020})])
        with pytest.raises(InvalidInput) as bad_type:
            eng.add([DocumentIn("ok", meta={"year": "soon"})])
        assert bad_type.value.field == "documents[0].meta.year"


def test_delete_is_idempotent_and_versions_are_pinnable(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, retention={"versions": 1, "seconds": 0})) as eng:
        before = eng.add(CORPUS).index_version
        removed = eng.delete(["bees", "bees", "ghost"])
        assert removed.deleted == 1 and eng.delete(["bees"]).deleted == 0
        pinned = eng.search(SearchRequest("honeybees dance", k=5, index_version=before))
        assert "bees#0" in ids(pinned) and pinned.index_version == before
        assert "bees#0" not in ids(eng.search(SearchRequest("honeybees dance", k=5)))
        eng.add([DocumentIn("more", id="more")])  # retention of 1 collects `before`
        with pytest.raises(SnapshotUnavailable):
            eng.search(SearchRequest("bees", index_version=before))
        with pytest.raises(SnapshotUnavailable):
            eng.search(SearchRequest("bees", index_version="otherdb.1"))
        assert eng.stats()["stored_rows"] == eng.stats()["dense_rows"]


def test_pagination_visits_each_hit_once_under_concurrent_writes(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, retention={"versions": 10_000})) as eng:
        eng.add([DocumentIn(f"shared topic number {i}", id=f"d{i}") for i in range(40)])
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                eng.add([DocumentIn(f"shared topic fresh {n}", id=f"new{n}")])
                eng.delete([f"d{n % 40}"])
                n += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            request = SearchRequest("shared topic", k=6, mode="sparse")
            page = eng.search(request)
            seen = ids(page)
            while page.next_cursor:
                page = eng.search(SearchRequest("shared topic", k=6, mode="sparse",
                                                cursor=page.next_cursor))
                seen.extend(ids(page))
        finally:
            stop.set()
            thread.join()
        whole = eng.search(SearchRequest("shared topic", k=200, mode="sparse",
                                         index_version=page.index_version))
        # The first page may land between the writer's add and its delete (41 visible).
        assert len(seen) == len(set(seen)) and len(seen) in (40, 41)
        assert seen == ids(whole)


def test_cursor_must_match_query_and_be_authentic(engine: Engine) -> None:
    page = engine.search(SearchRequest("the", k=1, mode="dense"))
    assert page.next_cursor
    with pytest.raises(UnknownCursor):
        engine.search(SearchRequest("other", k=1, mode="dense", cursor=page.next_cursor))
    body, _, tag = page.next_cursor.partition(".")
    with pytest.raises(UnknownCursor):
        engine.search(SearchRequest("the", k=1, mode="dense", cursor=f"{body}.{tag[::-1]}"))


def test_sessions_skip_hits_already_returned(engine: Engine) -> None:
    first = engine.search(SearchRequest("bees flowers", k=2, session_id="s1"))
    second = engine.search(SearchRequest("bees flowers", k=2, session_id="s1"))
    assert not set(ids(first)) & set(ids(second))
    other = engine.search(SearchRequest("bees flowers", k=2, session_id="s2"))
    assert ids(other) == ids(first)


def test_sessions_expire_after_their_ttl(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, retention={"session_ttl_seconds": 0})) as eng:
        eng.add(CORPUS)
        first = eng.search(SearchRequest("bees flowers", k=2, session_id="s"))
        assert ids(eng.search(SearchRequest("bees flowers", k=2, session_id="s"))) == ids(first)


def test_poison_feedback_demotes_later_retrieves(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, poison={"threshold": 2, "penalty": 0.01})) as eng:
        eng.add(CORPUS)
        before = eng.search(SearchRequest("honeybees dance flowers", k=2, mode="dense"))
        assert ids(before)[0] == "bees#0"
        flag = FeedbackSignal(hit_id="bees#0", poison_suspected=True)
        assert eng.feedback([flag], session_id="s", query="q") == 1
        assert ids(eng.search(SearchRequest("honeybees dance flowers", k=2,
                                            mode="dense")))[0] == "bees#0"
        eng.feedback([flag, FeedbackSignal(hit_id="bees#0", used=True)])
        after = eng.search(SearchRequest("honeybees dance flowers", k=2, mode="dense"))
        assert ids(after)[0] != "bees#0"


def test_mmr_diversifies_near_duplicates(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path)) as eng:
        eng.add([DocumentIn("bees make honey from nectar", id="a"),
                 DocumentIn("bees make honey from nectar", id="b"),
                 DocumentIn("honey bees", id="c")])
        query = "bees make honey from nectar"
        plain = eng.search(SearchRequest(query, k=3, mode="dense"))
        diverse = eng.search(SearchRequest(query, k=3, mode="dense", mmr_lambda=0.1))
        assert ids(plain) == ["a#0", "b#0", "c#0"]
        assert ids(diverse) == ["a#0", "c#0", "b#0"]
        scores = [hit.score for hit in diverse.hits]
        assert scores == sorted(scores, reverse=True)


def test_progress_stages_and_cancellation(engine: Engine) -> None:
    stages: list[str] = []
    engine.search(SearchRequest("bees", k=2),
                  progress=lambda stage, fraction, partial: stages.append(stage))
    assert stages == ["recall", "fuse", "rerank", "diversify", "pack"]
    with pytest.raises(Cancelled):
        engine.search(SearchRequest("bees"), cancelled=lambda: True)


def test_reads_never_see_half_a_write(tmp_path: Path) -> None:
    config = make_config(tmp_path, chunking={"max_chars": 60, "overlap_chars": 0})
    text = "\n\n".join(f"shared paragraph {i} with several more words" for i in range(3))
    with Engine.open(config) as eng:
        per_doc = eng.add([DocumentIn(text, id="seed")], chunk=True).chunks
        assert per_doc == 3
        errors: list[str] = []
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                hits = eng.search(SearchRequest("shared paragraph", k=200, mode="sparse")).hits
                counts: dict[str, int] = {}
                for hit in hits:
                    counts[hit.doc_id] = counts.get(hit.doc_id, 0) + 1
                errors.extend(doc for doc, n in counts.items() if n != per_doc)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        for thread in readers:
            thread.start()
        for i in range(25):
            eng.add([DocumentIn(text, id=f"doc{i}")], chunk=True)
        stop.set()
        for thread in readers:
            thread.join()
        assert errors == []


@pytest.mark.slow
def test_minilm_on_the_sample_corpus(tmp_path: Path) -> None:
    with Engine.open(EngineConfig(data_dir=tmp_path)) as eng:
        eng.add(sample_documents(), chunk=True, contextual=True, max_trust="trusted")
        description = eng.describe()
        assert description.embed_dimension == 384
        assert {"tag": "keyword", "year": "int", "date": "date"}.items() <= \
            description.filter_fields.items()
        shooting = eng.search(SearchRequest("when can I see shooting stars", k=3, mode="dense"))
        assert shooting.hits[0].doc_id == "meteor-showers"
        yeast = eng.search(SearchRequest("keeping bread yeast alive", k=3))
        assert yeast.hits[0].doc_id == "sourdough-starter"
        assert yeast.hits[0].trust_level == "trusted"  # bundled, operator-curated content
        spanish = eng.search(SearchRequest("compost", k=3, filter={
            "field": "lang", "op": "eq", "value": "es"}))
        assert ids(spanish)[0].startswith("compost-es")


def test_config_loads_from_files_and_rejects_a_foreign_embedder(tmp_path: Path) -> None:
    toml_file = tmp_path / "engine.toml"
    toml_file.write_text(f'[engine]\ndata_dir = "{tmp_path / "d"}"\nembedder = "hashing"\n'
                         'max_k = 50\n[engine.field_types]\nyear = "int"\n')
    loaded = EngineConfig.load(toml_file)
    assert (loaded.requests.max_k, loaded.field_types, loaded.data_dir) == (50, {"year": "int"},
                                                                   tmp_path / "d")
    json_file = tmp_path / "engine.json"
    json_file.write_text(json.dumps({"embedder": "hashing", "hashing_dimension": 32}))
    assert EngineConfig.load(json_file).embedder.hashing_dimension == 32
    with pytest.raises(ValueError):
        EngineConfig.from_mapping({"max_kk": 1})
    with Engine.open(loaded) as eng:
        eng.add([DocumentIn("text", id="x", meta={"year": 2020})])
    with pytest.raises(Unavailable):
        Engine.open(loaded.with_overrides(embedder={"hashing_dimension": 32}))


def test_pages_keep_their_ranking_when_feedback_arrives_midway(tmp_path: Path) -> None:
    config = make_config(tmp_path, poison={"threshold": 1, "penalty": 0.001})
    with Engine.open(config) as eng:
        eng.add([DocumentIn(f"shared topic {i}", id=f"d{i}",
                            meta={"published": f"2024-01-{i + 1:02d}"}) for i in range(12)])
        request = SearchRequest("shared topic", k=4, mode="dense",
                                recency=Recency("published", 10))
        page = eng.search(request)
        seen = ids(page)
        # Demote a hit already served: without the cursor's feedback mark it would sink into
        # a later page and be served twice.
        eng.feedback([FeedbackSignal(hit_id=seen[0], poison_suspected=True),
                      FeedbackSignal(hit_id="d11#0", poison_suspected=True)])
        while page.next_cursor:
            page = eng.search(replace(request, cursor=page.next_cursor))
            seen.extend(ids(page))
        assert sorted(seen) == sorted(f"d{i}#0" for i in range(12))
        assert eng.search(request).hits[0].id != seen[0]  # a fresh query sees the feedback


@pytest.mark.parametrize("candidate_k", [None, 8])
def test_hybrid_pages_reach_at_most_candidate_k_hits(tmp_path: Path,
                                                     candidate_k: int | None) -> None:
    """§3.3, §10: paging walks the recall stage's candidates, which are clamped to maxK,
    though hybrid recall's dense and sparse lists together hold up to twice that."""
    with Engine.open(make_config(tmp_path, requests={"max_k": 8, "default_candidate_k": 6})) as eng:
        eng.add([DocumentIn(f"{' '.join(['paddle'] * (1 + i % 5))} kayak trip {i} "
                            f"{'fjord ' * (i % 7)}", id=f"d{i}") for i in range(40)])
        request = SearchRequest("paddle fjord", k=3, mode="hybrid", candidate_k=candidate_k)
        page = eng.search(request)
        seen = ids(page)
        while page.next_cursor:
            page = eng.search(replace(request, cursor=page.next_cursor))
            seen.extend(ids(page))
        assert len(seen) == len(set(seen)) == page.usage.candidates == (candidate_k or 6)


def test_cursor_of_a_collected_snapshot_is_not_found(tmp_path: Path) -> None:
    with Engine.open(make_config(tmp_path, retention={"versions": 1, "seconds": 0})) as eng:
        eng.add(CORPUS)
        request = SearchRequest("the", k=1, mode="dense")
        page = eng.search(request)
        eng.add([DocumentIn("one", id="one")])
        eng.delete(["one"])
        with pytest.raises(UnknownCursor):
            eng.search(replace(request, cursor=page.next_cursor))


def test_seeded_and_pinned_dense_recall_is_exact_while_the_graph_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§7.7.1: the HNSW graph is published by a background build at any moment, so a request
    with a ``seed`` or a pinned snapshot takes the exact path and repeats exactly."""
    with Engine.open(make_config(tmp_path, dense={"exact_threshold": 2})) as opened:
        opened.add(CORPUS)
        assert opened.indexes is not None
        dense = opened.indexes.dense
        calls: list[bool] = []
        search = dense.search

        def spy(*args: Any, exact: bool = False, **kwargs: Any) -> Any:
            calls.append(exact)
            return search(*args, exact=exact, **kwargs)

        monkeypatch.setattr(dense, "search", spy)
        query = SearchRequest("bees flowers honey", k=3, mode="dense", seed=7)
        seeded = ids(opened.search(query))
        version = opened.index_version
        opened.search(SearchRequest("bees flowers honey", k=3, mode="dense",
                                    index_version=version))
        opened.search(SearchRequest("bees flowers honey", k=3, mode="dense"))
        assert calls == [True, True, False]
        assert opened.wait_for_indexes(60) and dense.uses_graph
        assert ids(opened.search(query)) == seeded


def test_a_graph_waited_for_before_close_is_saved_and_reopened_built(tmp_path: Path) -> None:
    """A bulk load that waits for the background build saves the graph with the rows: the
    next process restores it (its vectors rebuilt from the record on the builder thread)
    instead of building it again."""
    notes = [DocumentIn(f"note {i} on {'bees' if i % 2 else 'rain'} {i % 9}", id=f"n{i}")
             for i in range(120)]
    with Engine.open(make_config(tmp_path, dense={"exact_threshold": 50})) as eng:
        eng.add(notes)
        assert eng.wait_for_indexes(120) and eng.indexes is not None
        assert eng.indexes.dense.uses_graph
        graph = eng.indexes.dense.whole._view.graph
        assert graph is not None
        saved = graph.index.save()
    with Engine.open(make_config(tmp_path, dense={"exact_threshold": 50})) as reopened:
        assert reopened.wait_for_indexes(60) and reopened.indexes is not None
        assert reopened.indexes.dense.uses_graph
        restored = reopened.indexes.dense.whole._view.graph
        assert restored is not None and restored.index.save() == saved


def test_paging_a_graph_served_query_visits_its_first_ranking_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """§10 above the HNSW threshold: the first page is recalled approximately, and its
    cursor pages replay those very candidates instead of an exact recall, which could rank
    differently from the graph."""
    with Engine.open(make_config(tmp_path, dense={"exact_threshold": 50})) as eng:
        eng.add([DocumentIn(f"note {i} about {'bees' if i % 3 else 'soil'} and weather {i % 7}",
                            id=f"n{i}") for i in range(400)])
        assert eng.wait_for_indexes(120) and eng.indexes is not None
        assert eng.indexes.dense.uses_graph
        whole = ids(eng.search(SearchRequest("bees and weather", k=60, candidate_k=60,
                                             mode="dense")))
        recalls: list[str] = []
        recall = eng.searcher._recall

        def counted(request: SearchRequest, *args: Any) -> Any:
            recalls.append(request.cursor or "first page")
            return recall(request, *args)

        monkeypatch.setattr(eng.searcher, "_recall", counted)
        page = eng.search(SearchRequest("bees and weather", k=7, candidate_k=60, mode="dense"))
        seen = ids(page)
        while page.next_cursor:
            page = eng.search(SearchRequest("bees and weather", k=7, candidate_k=60,
                                            mode="dense", cursor=page.next_cursor))
            seen.extend(ids(page))
        assert seen == whole
        assert recalls == ["first page"]
