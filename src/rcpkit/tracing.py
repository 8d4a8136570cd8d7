"""OpenTelemetry traces (the ``otel`` extra): the one module that imports ``opentelemetry``.

Off by default, and then nothing here runs: the dispatcher, the transports, the client and
the bridges hold ``None`` instead of a :class:`Tracing` and skip every hook with one test.
On when

- ``rcpkit serve``, ``rcpkit gateway`` or ``rcpkit mcp`` start with tracing configured by
  the standard environment (:func:`from_environment`): ``OTEL_TRACES_EXPORTER`` (``otlp``,
  ``console``, ``none`` — spans made and propagated, none exported) or an OTLP endpoint
  (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless
  ``OTEL_SDK_DISABLED=true``. The SDK itself reads the rest (``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, the exporter's endpoint and headers);
- or an application embedding rcpkit calls :func:`enable` (with its own tracer provider, or
  the global one it configured).

A request's span is the child of the W3C trace context (``traceparent``, ``tracestate``)
the caller sent: in the HTTP headers, or over any transport in the namespaced
``_meta["x-tracecontext"]`` object (§4.4: peers that do not know it ignore it); the result
carries the span's own context back in the same key. Its stages
are child spans with the engine's own stage timings. Attributes are what an operator filters
on — method, collection, principal, mode, k, hit count, error code — never query or
document text (§15.6).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from . import __version__
from .protocol.errors import UsageError

__all__ = ["TRACE_META_KEY", "RequestTrace", "Tracing", "active", "disable", "enable",
           "from_environment"]

TRACE_META_KEY = "x-tracecontext"
"""The ``_meta`` key carrying ``{"traceparent": …, "tracestate": …}`` (§4.4, §17.2)."""

_FIELDS = ("traceparent", "tracestate")
_HEADER_FIELDS = tuple((name.encode(), name) for name in _FIELDS)
_PERF_TO_EPOCH_NS = time.time_ns() - time.perf_counter_ns()
"""Added to a :func:`time.perf_counter` instant (in ns) to place it on the wall clock
spans are stamped with; stage timings are taken on the former."""

_active: Tracing | None = None


def active() -> Tracing | None:
    """The process's tracing, None when off (the one test every hook makes)."""
    return _active


def enable(provider: Any = None) -> Tracing:
    """Trace with ``provider`` (an OpenTelemetry ``TracerProvider``; default the global one)
    from now on, in this process: servers built afterwards, the client and the bridges."""
    global _active
    _active = Tracing(provider)
    return _active


def disable() -> None:
    """No more spans nor propagation for what is built from now on."""
    global _active
    _active = None


def from_environment(environ: Mapping[str, str] = os.environ) -> Tracing | None:
    """:func:`enable` with the SDK configured from the ``OTEL_*`` environment when it asks
    for traces (see the module docstring), else None and nothing imported."""
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") \
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" \
            or not (exporters or endpoint):
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        raise UsageError("tracing (OTEL_* is set) needs the otel extra: "
                         "pip install 'rcpkit[otel]'") from None
    provider = TracerProvider()  # resource and sampler from OTEL_SERVICE_NAME etc.
    for name in filter(None, (part.strip() for part in (exporters or "otlp").split(","))):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            # stderr: over stdio, stdout carries protocol frames only (§5.1).
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        elif name != "none":
            raise UsageError(f"OTEL_TRACES_EXPORTER {name!r}: rcpkit knows otlp, console "
                             "and none")
    trace.set_tracer_provider(provider)
    return enable(provider)


class Tracing:
    """Spans through one OpenTelemetry tracer, and the W3C propagation around them."""

    def __init__(self, provider: Any = None) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._context = context
        self._server_kind = trace.SpanKind.SERVER
        self.provider = provider or trace.get_tracer_provider()
        self.tracer = self.provider.get_tracer("rcpkit", __version__)
        self._propagator = TraceContextTextMapPropagator()

    # ── servers ─────────────────────────────────────────────────────────────
    def request(self, method: str, headers: Mapping[bytes, bytes] | None, meta: Any,
                attributes: Mapping[str, Any], *, bodies: bool = False) -> RequestTrace:
        """The span of one request, started now, child of the trace context in ``meta``
        (``_meta[TRACE_META_KEY]``) or else in the HTTP ``headers``. ``bodies``: the server
        runs with ``--log-bodies``, so handlers may add the query text."""
        # Only the wire parents it: no carrier, a new trace, whatever span is current here.
        parent = self._propagator.extract(carrier_of(headers, meta))
        started = time.perf_counter()  # the clock of its stages: they nest exactly
        span = self.tracer.start_span(method, context=parent, kind=self._server_kind,
                                      attributes={"rpc.system": "jsonrpc", "rpc.method": method,
                                                  **attributes},
                                      start_time=_epoch_ns(started))
        return RequestTrace(self, span, started, bodies)

    def flush(self) -> None:
        """Export the spans still buffered (a provider without buffers has nothing to do)."""
        force_flush = getattr(self.provider, "force_flush", None)
        if force_flush is not None:
            force_flush()

    # ── clients ─────────────────────────────────────────────────────────────
    def inject(self, carrier: MutableMapping[str, str]) -> None:
        """Write the current trace context into ``carrier`` (HTTP headers or the ``_meta``
        object); nothing when no span is current."""
        self._propagator.inject(carrier)


class RequestTrace:
    """The span of one request being answered; its stages become child spans."""

    __slots__ = ("_last", "_tracing", "bodies", "span")

    def __init__(self, tracing: Tracing, span: Any, started: float, bodies: bool) -> None:
        self._tracing = tracing
        self.span = span
        self.bodies = bodies
        """Whether query text may be recorded (``--log-bodies``); never otherwise (§15.6)."""
        self._last = started

    def lap(self, name: str) -> None:
        """The stage ``name`` ran from the previous lap (or the span's start) until now."""
        now = time.perf_counter()
        self.stages(((name, self._last, now - self._last),))
        self._last = now

    def annotate(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes (what the handler learned: mode, k, hits…); None values skipped."""
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(key, value)

    def stages(self, stages: Iterable[tuple[str, float, float]]) -> None:
        """One child span per ``(name, started, seconds)`` stage, on the perf-counter clock."""
        tracing = self._tracing
        parent = tracing._trace.set_span_in_context(self.span)
        for name, started, seconds in stages:
            child = tracing.tracer.start_span(name, context=parent,
                                              start_time=_epoch_ns(started))
            child.end(end_time=_epoch_ns(started + seconds))

    def stamp(self, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` with this span's trace context in ``_meta[TRACE_META_KEY]`` (§17.2:
        correlation ids in ``_meta``), so the caller can find the trace it answered in."""
        carrier: dict[str, str] = {}
        tracing = self._tracing
        tracing._propagator.inject(carrier, context=tracing._trace.set_span_in_context(self.span))
        meta = result.get("_meta")
        return {**result, "_meta": {**(meta if isinstance(meta, Mapping) else {}),
                                    TRACE_META_KEY: carrier}}

    def activated(self) -> Any:
        """A context manager making the span current for the block, so what the handler
        calls downstream (the gateway's engines) continues the trace."""
        return self._tracing._trace.use_span(self.span, end_on_exit=False,
                                             record_exception=False,
                                             set_status_on_exception=False)

    def end(self, code: int) -> None:
        """The request was answered with ``code`` (0: a result, else the §12 error code)."""
        span = self.span
        if code:
            span.set_attribute("rpc.jsonrpc.error_code", code)
            span.set_status(self._tracing._trace.StatusCode.ERROR)
        span.end(end_time=_epoch_ns(time.perf_counter()))


def _epoch_ns(instant: float) -> int:
    """A :func:`time.perf_counter` instant on the wall clock spans are stamped with."""
    return _PERF_TO_EPOCH_NS + int(instant * 1e9)


def carrier_of(headers: Mapping[bytes, bytes] | None, meta: Any) -> dict[str, str]:
    """The W3C fields in ``_meta[TRACE_META_KEY]`` (strings only), else in the headers."""
    sent = meta.get(TRACE_META_KEY) if isinstance(meta, Mapping) else None
    if isinstance(sent, Mapping):
        return {name: value for name in _FIELDS
                if isinstance(value := sent.get(name), str)}
    if headers is None:
        return {}
    return {name: value.decode("latin-1") for key, name in _HEADER_FIELDS
            if (value := headers.get(key)) is not None}
