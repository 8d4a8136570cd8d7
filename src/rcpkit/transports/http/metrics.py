"""Prometheus metrics of a serving process (``rcpkit serve --metrics``, off by default).

Labels are bounded on purpose: the method (only methods the server has; any other is
``unknown``), the collection, the outcome code (``ok`` or the §12 error code), a principal
kind, a refusal reason. Never a query, a document or an id: those are the caller's data
(§15.6).

Who may scrape: anyone who reaches ``/metrics``, unless a ``token`` is set — then only a
request bearing it (``Authorization: Bearer``), else 401. Without a token, a collection the
scraper may not see (:attr:`Metrics.hidden_for`: the tenancy's keys) is never named: its
series are left out, as the collection is from ``catalog/list``.

Several workers (``--workers N``): prometheus_client's multi-process mode. The supervisor
gives the workers one directory (``PROMETHEUS_MULTIPROC_DIR``) before they start; each
writes its counters and histograms there and whichever worker answers ``/metrics`` sums
them. Index sizes are read from the served server at scrape time: every worker reads the
same shared record, so the one answering speaks for all.
"""

from __future__ import annotations

import hmac
import importlib
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from ...protocol.errors import UsageError
from ...server.framework import Server

__all__ = ["CONTENT_TYPE", "MULTIPROCESS_ENV", "Metrics"]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)


class Metrics:
    """The counters of one process, fed by the HTTP app and by whoever refuses requests
    (rate limits). Create one per process and pass it to every app it serves."""

    def __init__(self, token: str | None = None) -> None:
        # Imported here, in the serving process: prometheus_client picks its multi-process
        # value store at import, from the environment the supervisor prepared.
        try:
            self._client: Any = importlib.import_module("prometheus_client")
        except ImportError:
            raise UsageError("metrics need the metrics extra: "
                             "pip install 'rcpkit[metrics]'") from None
        Counter, Histogram = self._client.Counter, self._client.Histogram
        self.token = token.encode() if token else None
        """The bearer token a scraper must present (None: none needed)."""
        self.hidden_for: Callable[[Mapping[bytes, bytes]], Collection[str]] | None = None
        """The collections not to name to the scraper sending these headers (lower-case
        names); None hides none."""
        self._servers: dict[str, Server] = {}
        self._children: dict[tuple[str | None, str, int], tuple[Any, Any]] = {}
        """The labelled counter and histogram of each outcome seen, looked up once."""
        self._registry = self._client.CollectorRegistry()
        self._registry.register(_Gauges(self._servers, self._client))
        self._requests = Counter(
            "rcpkit_requests", "RCP requests answered, by method, collection and outcome code.",
            ["method", "collection", "code"], registry=self._registry)
        self._latency = Histogram(
            "rcpkit_request_seconds", "Seconds to answer an RCP request, by method.",
            ["method", "collection"], buckets=_LATENCY_BUCKETS, registry=self._registry)
        self._stages = Histogram(
            "rcpkit_stage_seconds", "Seconds spent in each stage of a request's pipeline "
            "(retrieve: recall, fuse, rerank, diversify, pack).",
            ["method", "collection", "stage"], buckets=_LATENCY_BUCKETS, registry=self._registry)
        self._rate_limited = Counter(
            "rcpkit_rate_limited", "Requests refused for load or a rate limit (-32011).",
            ["collection", "principal_kind"], registry=self._registry)
        self._refusals = Counter(
            "rcpkit_refusals", "Requests refused, by reason: unauthenticated (401), forbidden "
            "(403, -32012), rate_limited (429, -32011), payload_too_large (413, -32013), "
            "bad_request (400: a credential header twice), shed (load).",
            ["collection", "reason"], registry=self._registry)
        # RSS, CPU seconds, open files… of the process answering the scrape.
        self._client.ProcessCollector(registry=self._registry)

    def watch(self, collection: str, server: Server) -> None:
        """Expose ``server``'s :meth:`~rcpkit.server.Server.gauges` and the stage timings
        it reports under ``collection``."""
        if self._servers.get(collection) is server:
            return
        self._servers[collection] = server

        def stage_done(method: str, stage: str, seconds: float) -> None:
            self._stages.labels(method, collection, stage).observe(seconds)
        server.stage_observers.append(stage_done)

    def request_done(self, method: str | None, collection: str, code: int,
                     seconds: float) -> None:
        """One answered request; ``method`` None when the server has no such method."""
        key = (method, collection, code)
        children = self._children.get(key)
        if children is None:  # a bounded set: known methods × collections × §12 codes
            name = method or "unknown"
            children = self._children[key] = (
                self._requests.labels(name, collection, "ok" if code == 0 else str(code)),
                self._latency.labels(name, collection))
        children[0].inc()
        children[1].observe(seconds)
        reason = _REFUSED_CODES.get(code)
        if reason is not None:
            self.refused(collection, reason)

    def refused(self, collection: str, reason: str) -> None:
        """One request refused before or instead of being served (see ``rcpkit_refusals``);
        shed load is also a ``-32011`` of ``rcpkit_rate_limited`` (principal kind
        ``server``)."""
        self._refusals.labels(collection, reason).inc()
        if reason == "shed":
            self.rate_limited(collection, "server")

    def rate_limited(self, collection: str, principal_kind: str) -> None:
        """One request refused with ``-32011`` (``principal_kind``: ``server`` for load
        shedding, else the kind of caller whose limit it hit)."""
        self._rate_limited.labels(collection, principal_kind).inc()

    def scrape(self, headers: Mapping[bytes, bytes]) -> bytes | None:
        """What ``/metrics`` answers the scraper sending ``headers`` (lower-case names):
        the exposition it may see, or None when it lacks the token (401)."""
        if self.token is not None:
            authorization = headers.get(b"authorization", b"")
            presented = authorization[7:].strip() \
                if authorization[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(presented, self.token):
                return None
            return self.exposition()
        return self.exposition(() if self.hidden_for is None else self.hidden_for(headers))

    def exposition(self, hidden: Collection[str] = ()) -> bytes:
        """The current values in the Prometheus text format, all workers summed, without
        the series of the ``hidden`` collections."""
        directory = os.environ.get(MULTIPROCESS_ENV)
        if not directory:
            registry = self._registry
        else:
            registry = self._client.CollectorRegistry()
            importlib.import_module("prometheus_client.multiprocess").MultiProcessCollector(
                registry, path=directory)
            registry.register(_Gauges(self._servers, self._client))
            self._client.ProcessCollector(registry=registry)
        return bytes(self._client.generate_latest(_Visible(registry, frozenset(hidden))
                                                  if hidden else registry))


_REFUSED_CODES = {-32012: "forbidden", -32011: "rate_limited", -32013: "payload_too_large"}
"""A reply's §12 code that refuses the request, and its ``rcpkit_refusals`` reason."""


class _Visible:
    """A registry's families without the samples labelled with a hidden collection."""

    def __init__(self, registry: Any, hidden: frozenset[str]) -> None:
        self.registry = registry
        self.hidden = hidden

    def collect(self) -> Iterator[Any]:
        for family in self.registry.collect():
            family.samples = [sample for sample in family.samples
                              if sample.labels.get("collection") not in self.hidden]
            yield family


class _Gauges:
    """Reads the watched servers' gauges when scraped."""

    def __init__(self, servers: dict[str, Server], client: Any) -> None:
        self.servers = servers
        self.family = importlib.import_module("prometheus_client.core").GaugeMetricFamily

    def collect(self) -> Iterator[Any]:
        family = self.family("rcpkit_index", "Corpus and index sizes, background work.",
                             labels=["collection", "name"])
        for collection, server in self.servers.items():
            for name, value in server.gauges().items():
                family.add_metric([collection, name], value)
        yield family
