"""The engine's injected clock (``Engine.open(clock=)``, epoch seconds) drives recency decay
(§7.7), session expiry and the clock a cursor replays (§10): each is tested at exact instants,
with no sleeping, through relations that hold whatever the recency blend weight."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.test_pipeline import CORPUS, ids, make_config
from rcpkit.engine.core import Engine
from rcpkit.engine.types import DocumentIn, Recency, SearchRequest
from support.clock import FakeClock

DAY = 86_400.0
START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
DATED = [DocumentIn("weather report rain", id="today", meta={"published": START.isoformat()}),
         DocumentIn("weather report rain", id="month",
                    meta={"published": (START - dt.timedelta(days=30)).isoformat()}),
         DocumentIn("weather notes", id="undated")]  # less relevant: the candidates' floor
RECENT = SearchRequest("weather rain", k=3, mode="sparse", recency=Recency("published", 30))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START.timestamp())


@pytest.fixture
def engine(tmp_path: Path, clock: FakeClock) -> Iterator[Engine]:
    config = make_config(tmp_path, retention={"session_ttl_seconds": 60},
                         retrieve={"recency_weight": 0.5})
    with Engine.open(config, clock=clock) as opened:
        yield opened


def scores(engine: Engine, request: SearchRequest) -> dict[str, float]:
    return {hit.id: hit.score for hit in engine.search(request).hits}


def test_recency_decays_with_the_injected_clock(engine: Engine, clock: FakeClock) -> None:
    engine.add(DATED)
    now = scores(engine, RECENT)
    assert now["month#0"] < now["today#0"]  # same text, 30 days older
    clock.advance(30 * DAY)
    later = scores(engine, RECENT)
    assert later["today#0"] == pytest.approx(now["month#0"])  # now as old as "month" was
    assert later["month#0"] < now["month#0"]
    assert later["undated#0"] == now["undated#0"]  # no date, no decay


def test_a_cursor_page_replays_the_clock_of_its_first_page(engine: Engine,
                                                          clock: FakeClock) -> None:
    engine.add(DATED)
    before = scores(engine, RECENT)
    first = engine.search(SearchRequest("weather rain", k=1, mode="sparse",
                                        recency=Recency("published", 30)))
    assert ids(first) == ["today#0"] and first.next_cursor is not None
    clock.advance(365 * DAY)  # a year later the page still ranks as of its first page
    second = engine.search(SearchRequest("weather rain", k=1, mode="sparse",
                                         recency=Recency("published", 30),
                                         cursor=first.next_cursor))
    assert ids(second) == ["month#0"]
    assert second.hits[0].score == pytest.approx(before["month#0"])
    # live, "month" is 395 days old: its freshness is ~0, leaving half (1 - recency_weight)
    # of its relevance above the floor
    floor, relevance = before["undated#0"], before["today#0"] - before["undated#0"]
    assert scores(engine, RECENT)["month#0"] == pytest.approx(floor + relevance / 2, rel=1e-3)


def test_a_session_forgets_its_hits_exactly_after_its_ttl(engine: Engine,
                                                         clock: FakeClock) -> None:
    engine.add(CORPUS)
    query = SearchRequest("bees flowers", k=2, session_id="s")
    first = ids(engine.search(query))
    clock.advance(30)
    assert not set(ids(engine.search(query))) & set(first)  # seen hits are skipped
    clock.advance(60)  # the last use is 60 s old: not expired yet
    assert not set(ids(engine.search(query))) & set(first)
    clock.advance(60.5)
    assert ids(engine.search(query)) == first  # expired: the session starts afresh
