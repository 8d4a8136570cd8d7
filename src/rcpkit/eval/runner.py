"""Run a test collection through any RCP engine's ``retrieve`` and score it (Appendix F).

The runner only needs :class:`RetrievalTarget` — capabilities plus one async
``call`` — so it works against any engine, ours or not. :func:`open_target` is the
single place that obtains one from a command line or URL.

Indexing rule (``index/add``, §7.10): the corpus is added only when the engine
advertises ``index.writable: true`` and does not hold it yet. "Holds it" is
decided by a probe: up to three corpus documents (first, middle, last) are
searched for with their own opening words; if every one comes back among the
top 10 hits the corpus counts as loaded. Adds carry the collection's ids, so a
re-add after a wrong guess is an idempotent upsert. Batches that the engine
refuses as too large (``-32013``) are split in half and retried.

Reproducibility (§7.7.1): when the engine advertises ``retrieve.deterministic``
every retrieve carries ``seed``; when it advertises ``retrieve.snapshots`` the
``indexVersion`` returned by the first evaluated retrieve is pinned on all later
ones. Both are recorded in the report. Every retrieve defaults to ``k`` =
:data:`DEFAULT_K` (clamped to ``retrieve.maxK``) and ``includeText: false``; a
configuration's params override these. Latency is client-side wall time of each
``retrieve`` call, transport included; queries run one at a time.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from rcpkit import __version__
from rcpkit.client import AsyncClient, connect_http, connect_stdio
from rcpkit.eval.datasets import CorpusDocument, Dataset
from rcpkit.eval.metrics import document_id, document_ranking, evaluate, latency_percentiles
from rcpkit.eval.report import ConfigResult, EvalReport
from rcpkit.protocol.errors import (
    BackendUnavailable,
    PayloadTooLarge,
    RcpError,
    UsageError,
)

__all__ = [
    "DEFAULT_K",
    "ClientTarget",
    "EvalConfig",
    "ProgressCallback",
    "RetrievalTarget",
    "corpus_is_loaded",
    "corpus_mismatch",
    "index_corpus",
    "open_target",
    "run_config",
    "run_eval",
]

DEFAULT_K = 100
"""Retrieve depth when a configuration sets no ``k`` (Recall@100 needs 100 hits)."""

_PROBE_WORDS = 32
_PROBE_K = 10

ProgressCallback = Callable[[str, int, int], None]
"""``(stage label, done, total)``; called after every unit of work."""


class RetrievalTarget(Protocol):
    """What the runner needs from an engine connection (the client SDK satisfies it)."""

    capabilities: dict[str, Any]

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request; return its ``result`` or raise :class:`RcpError`."""
        ...


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """A named set of ``retrieve`` params (§7.7): mode, fusion, rerank, mmr, k, candidateK …"""

    name: str
    params: dict[str, Any]

    @classmethod
    def parse(cls, spec: str) -> EvalConfig:
        """Parse ``NAME=JSON`` (``hybrid={"mode":"hybrid","fusion":{"method":"rrf"}}``)."""
        name, separator, raw = spec.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"config {spec!r}: expected NAME=JSON")
        try:
            params = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise UsageError(f"config {name!r}: invalid JSON ({exc.msg})") from None
        if not isinstance(params, dict):
            raise UsageError(f"config {name!r}: params must be a JSON object")
        if "query" in params:
            raise UsageError(f"config {name!r}: 'query' comes from the dataset")
        return cls(name=name.strip(), params=params)


def _ignore_progress(stage: str, done: int, total: int) -> None:
    """Default :data:`ProgressCallback`: report nothing."""


def _retrieve_capability(target: RetrievalTarget) -> dict[str, Any]:
    meta = target.capabilities.get("retrieve")
    if meta is None:
        raise UsageError("the engine does not advertise the 'retrieve' capability")
    return meta if isinstance(meta, dict) else {}


def _probe_query(document: CorpusDocument) -> str:
    return " ".join(document.body().split()[:_PROBE_WORDS])


async def corpus_is_loaded(target: RetrievalTarget, corpus: Sequence[CorpusDocument]) -> bool:
    """The probe of the module docstring: sampled documents retrieve themselves."""
    if not corpus:
        return True
    picks = sorted({0, len(corpus) // 2, len(corpus) - 1})
    for document in (corpus[i] for i in picks):
        result = await target.call("retrieve", {"query": _probe_query(document), "k": _PROBE_K,
                                                "includeText": False})
        if document.id not in {document_id(hit) for hit in result.get("hits", [])}:
            return False
    return True


async def index_corpus(target: RetrievalTarget, corpus: Sequence[CorpusDocument], *,
                       batch_size: int = 64,
                       on_progress: ProgressCallback = _ignore_progress) -> list[str]:
    """``index/add`` the corpus in batches (split on ``-32013``); returns notes on id mismatches."""
    mismatched = 0
    done = 0

    async def add(batch: Sequence[CorpusDocument]) -> None:
        nonlocal mismatched, done
        documents = [{"id": d.id, "text": d.body(), **({"meta": d.metadata} if d.metadata else {})}
                     for d in batch]
        try:
            result = await target.call("index/add", {"documents": documents})
        except PayloadTooLarge:
            if len(batch) == 1:
                raise
            half = len(batch) // 2
            await add(batch[:half])
            await add(batch[half:])
            return
        ids = result.get("ids", [])
        mismatched += sum(1 for d, got in zip(batch, ids, strict=False) if str(got) != d.id)
        done += len(batch)
        on_progress("indexing", done, len(corpus))

    for start in range(0, len(corpus), batch_size):
        await add(corpus[start:start + batch_size])
    if mismatched:
        return [f"{mismatched} documents were stored under ids other than the collection's; "
                "their hits cannot match the judgements"]
    return []


async def run_config(target: RetrievalTarget, dataset: Dataset, config: EvalConfig,
                     base_params: dict[str, Any], *, pin_snapshot: bool = False,
                     on_progress: ProgressCallback = _ignore_progress) -> ConfigResult:
    """Retrieve every judged query with ``base_params`` overlaid by the config's params.

    Timing starts after one untimed warm-up query. With ``pin_snapshot`` and no
    ``indexVersion`` in the params yet, the version served to the warm-up is pinned on
    every timed query (§7.7.1). An
    :class:`RcpError` (e.g. ``-32005`` for an unadvertised mode) ends this
    configuration and is recorded in ``ConfigResult.error``.
    """
    result = ConfigResult(name=config.name, params=config.params)
    pinned: dict[str, Any] = {}
    queries = dataset.judged_queries()
    if queries:
        # One untimed query first: a model or index the engine loads on first use is
        # start-up cost, not the first query's latency.
        warm_up = {**base_params, **config.params, "query": next(iter(queries.values()))}
        try:
            served = (await target.call("retrieve", warm_up)).get("indexVersion")
        except RcpError as exc:
            result.error = str(exc)
            return result
        if pin_snapshot and served is not None and "indexVersion" not in warm_up:
            pinned["indexVersion"] = str(served)
    for done, (query_id, text) in enumerate(queries.items(), start=1):
        params = {**base_params, **config.params, **pinned, "query": text}
        started = time.perf_counter()
        try:
            response = await target.call("retrieve", params)
        except RcpError as exc:
            result.error = str(exc)
            return result
        result.latencies_ms.append((time.perf_counter() - started) * 1000)
        result.run[query_id] = document_ranking(response.get("hits", []))
        served = response.get("indexVersion")
        if served is not None:
            result.index_version = str(served)
            if pin_snapshot and "indexVersion" not in params:
                pinned["indexVersion"] = result.index_version
        on_progress(config.name, done, len(queries))
    summary = evaluate({q: [doc for doc, _ in ranking] for q, ranking in result.run.items()},
                       dataset.qrels)
    result.metrics = summary.means
    result.evaluated, result.excluded = summary.evaluated, summary.excluded
    result.latency_ms = latency_percentiles(result.latencies_ms)
    return result


async def run_eval(target: RetrievalTarget, dataset: Dataset, configs: Sequence[EvalConfig], *,
                   engine: str, index: bool = True, seed: int = 42, batch_size: int = 64,
                   on_progress: ProgressCallback = _ignore_progress) -> EvalReport:
    """Index when needed, run every configuration, and build the report (module docstring)."""
    retrieve_meta = _retrieve_capability(target)
    notes: list[str] = []
    indexing = await _prepare_corpus(target, dataset, index, batch_size, on_progress, notes)
    base_params: dict[str, Any] = {"k": _default_k(retrieve_meta), "includeText": False}
    report_seed: int | None = None
    if retrieve_meta.get("deterministic") is True:
        base_params["seed"] = report_seed = seed
    else:
        notes.append("engine does not advertise retrieve.deterministic: no seed sent")
    snapshots = retrieve_meta.get("snapshots") is True
    results: list[ConfigResult] = []
    for config in configs:
        result = await run_config(target, dataset, config, base_params,
                                  pin_snapshot=snapshots and "indexVersion" not in base_params,
                                  on_progress=on_progress)
        if snapshots and "indexVersion" not in base_params and result.index_version is not None:
            base_params["indexVersion"] = result.index_version
        results.append(result)
    pinned = base_params.get("indexVersion")
    if not snapshots:
        notes.append("engine does not advertise retrieve.snapshots: indexVersion not pinned")
    elif any(r.index_version not in (None, pinned) for r in results):
        notes.append("engine served an indexVersion other than the pinned one")
    mismatch = corpus_mismatch(dataset, results)
    return EvalReport(dataset=dataset.name, engine=engine, indexing=indexing, seed=report_seed,
                      index_version=pinned, results=results, notes=notes,
                      warnings=[mismatch] if mismatch else [])


def corpus_mismatch(dataset: Dataset, results: Sequence[ConfigResult]) -> str | None:
    """Why the scores say nothing about the engine, when the documents it returned are none
    of the collection's: the judged ids are then absent from the engine and every metric
    is 0 (it holds other data, or the corpus was never added). None when they overlap."""
    runs = [result for result in results if result.error is None and result.run]
    if not runs:
        return None
    known = {document.id for document in dataset.corpus}
    known.update(doc for judged in dataset.qrels.values() for doc in judged)
    returned = {doc for result in runs for ranking in result.run.values() for doc, _ in ranking}
    if returned & known:
        return None
    if not returned:
        return ("the engine returned no hits for any query: it holds none of the "
                f"collection's {len(known)} documents, so every score is 0")
    example = sorted(returned)[0]
    return (f"none of the {len(returned)} documents the engine returned (e.g. {example!r}) is "
            f"in the collection {dataset.name!r}: the judged documents are absent from the "
            "engine (it holds other data, or the corpus was never added), so every score is 0")


def _default_k(retrieve_meta: dict[str, Any]) -> int:
    max_k = retrieve_meta.get("maxK")
    return min(DEFAULT_K, max_k) if isinstance(max_k, int) and max_k > 0 else DEFAULT_K


async def _prepare_corpus(target: RetrievalTarget, dataset: Dataset, index: bool,
                          batch_size: int, on_progress: ProgressCallback,
                          notes: list[str]) -> str:
    """Apply the indexing rule; returns the report's one-line indexing summary."""
    if not index:
        return "skipped (--no-index)"
    index_meta = target.capabilities.get("index")
    if not isinstance(index_meta, dict) or index_meta.get("writable") is not True:
        return "skipped (engine not writable; corpus assumed loaded)"
    if await corpus_is_loaded(target, dataset.corpus):
        return "skipped (probe found the corpus already loaded)"
    notes.extend(await index_corpus(target, dataset.corpus, batch_size=batch_size,
                                    on_progress=on_progress))
    return f"added {len(dataset.corpus)} documents"


class ClientTarget:
    """Adapts the client SDK to :class:`RetrievalTarget` (raw params, raw results)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.capabilities: dict[str, Any] = client.capabilities.to_wire()

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return await self.client.call(method, params)


@asynccontextmanager
async def open_target(stdio: str | None, http: str | None) -> AsyncIterator[RetrievalTarget]:
    """An initialised connection to the engine: a command line to spawn, or a base URL."""
    if (stdio is None) == (http is None):
        raise UsageError("give exactly one of --stdio CMD or --http URL")
    info = {"name": "rcpkit-eval", "version": __version__}
    try:
        if stdio is not None:
            client = await connect_stdio(shlex.split(stdio), client_info=info, log_level=None)
        else:
            assert http is not None
            client = await connect_http(http, client_info=info, log_level=None)
    except OSError as exc:
        raise BackendUnavailable(f"cannot reach the engine: {exc}") from None
    try:
        yield ClientTarget(client)
    finally:
        await client.close()
