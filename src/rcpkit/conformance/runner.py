"""Run every registered check against one server and build the :class:`Report` (§14.5).

Lanes (see :class:`~rcpkit.conformance.model.Lane`) run in a fixed order —
pre-initialize, lifecycle, shared session, fresh connections, whole-run — so
that a server with one process-wide HTTP session still shows its
pre-initialize behaviour before anything initializes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rcpkit.conformance import checks as _checks  # noqa: F401  (registers the checks)
from rcpkit.conformance.checks.corpus import SEEDED_IDS
from rcpkit.conformance.driver import (
    HttpTransport,
    ReceiveTimeout,
    ServerGone,
    StdioTransport,
    Transport,
)
from rcpkit.conformance.model import (
    CHECKS,
    GATED_METHODS,
    Check,
    CheckFailed,
    CheckSkipped,
    Ctx,
    Lane,
    Session,
    short,
)
from rcpkit.conformance.report import CheckResult, Outcome, Report

__all__ = ["Target", "run_checks"]

LANE_ORDER = (Lane.PREINIT, Lane.LIFECYCLE, Lane.SHARED, Lane.FRESH, Lane.FINAL)
CLIENT_INFO = {"name": "rcpkit-check", "version": "1"}


@dataclass(frozen=True)
class Target:
    """The server under test: a stdio command line or an HTTP base URL (§5)."""

    argv: tuple[str, ...] = ()
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        return self.url or " ".join(self.argv)

    def open(self, timeout: float) -> Transport:
        if self.url:
            return HttpTransport(self.url, headers=self.headers, timeout=timeout)
        return StdioTransport(self.argv, write_timeout=timeout)


def _exchange(session: Session, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """One raw request used by the runner itself; ``None`` when nothing usable came back."""
    rid = session.new_id()
    try:
        session.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            obj = session.receive().obj
            if isinstance(obj, dict) and "method" not in obj and str(obj.get("id")) == str(rid):
                return obj  # loosely matched: a mistyped id is reported by the id.echo checks
    except (ReceiveTimeout, ServerGone):
        return None


class _Run:
    """State of one run: the open sessions and what initialize/info revealed."""

    def __init__(self, target: Target, timeout: float, schema_path: str | None) -> None:
        self.target = target
        self.timeout = timeout
        self.schema_path = schema_path
        self.sessions: list[Session] = []
        self.lanes: dict[Lane, Session] = {}
        self.capabilities: dict[str, Any] = {}
        self.declared_level: str | None = None
        self.http_policy: str | None = None
        self.unresponsive: dict[Lane, str] = {}

    def open(self) -> Session:
        session = Session(self.target.open(self.timeout), self.timeout)
        self.sessions.append(session)
        return session

    def lane(self, lane: Lane) -> Session:
        """The lane's session, (re)opened when missing or dead.

        A replacement connection must answer (``initialize`` for the shared lane, ``ping``
        otherwise); if it does not, the lane is marked unresponsive and its remaining checks
        fail at once instead of each waiting out the timeout.
        """
        session = self.lanes.get(lane)
        if session is None or session.dead:
            replacing = session is not None
            session = self.open()
            self.lanes[lane] = session
            if lane is Lane.SHARED:
                answered = self._initialize(session)
            else:
                answered = not replacing or _exchange(session, "ping", {}) is not None
            if not answered:
                self.unresponsive[lane] = (
                    f"no usable answer on a new {lane} connection (timeout, exit, or a "
                    "response with another id); the lane's remaining checks are not run"
                )
        return session

    def discover(self) -> None:
        """``info`` before initialize gives the default capabilities (§13.2)."""
        session = self.lane(Lane.PREINIT)
        response = _exchange(session, "info", {})
        if response is None:
            reason = "no answer to info (§7.2) at start-up: the server is silent or hung"
            self.unresponsive = {lane: reason for lane in LANE_ORDER if lane is not Lane.FINAL}
        result = response.get("result") if response else None
        if isinstance(result, dict):
            self._adopt(result)
        if self.target.kind == "http":
            self.http_policy = self._probe_http_policy(session)

    def _adopt(self, result: dict[str, Any]) -> None:
        caps = result.get("capabilities")
        if isinstance(caps, dict):
            self.capabilities = caps
        meta = result.get("_meta")
        level = meta.get("conformance") if isinstance(meta, dict) else None
        self.declared_level = level if isinstance(level, str) else None

    def _probe_http_policy(self, session: Session) -> str:
        """``stateless`` if a gated call works without initialize (§5.2), else ``stateful``."""
        gated = next((m for m, cap in GATED_METHODS.items() if cap in self.capabilities), None)
        if gated is None:
            return "stateful"
        response = _exchange(session, gated, {"x-conformance-probe": True})
        error = response.get("error") if response else None
        return (
            "stateful" if isinstance(error, dict) and error.get("code") == -32001 else "stateless"
        )

    def _initialize(self, session: Session) -> bool:
        """Initialize the shared session and adopt its capabilities; ``False`` if unanswered."""
        response = _exchange(
            session,
            "initialize",
            {"protocolVersion": 1, "client": CLIENT_INFO, "capabilities": {}},
        )
        result = response.get("result") if response else None
        if not isinstance(result, dict) and self.target.kind == "http":
            # One process-wide HTTP session already initialized by the lifecycle lane.
            info = _exchange(session, "info", {})
            result = info.get("result") if info else None
        if not isinstance(result, dict):
            return response is not None
        self._adopt(result)
        meta = result.get("_meta")
        if isinstance(meta, dict) and isinstance(meta.get("session"), str):
            self.http_policy = "token"
        elif self.target.kind == "http" and self.http_policy == "stateful":
            self.http_policy = "single"
        return True

    def run_one(self, chk: Check) -> CheckResult:
        started = time.monotonic()
        outcome, detail = self._execute(chk)
        return CheckResult(chk, outcome, detail, time.monotonic() - started)

    def _execute(self, chk: Check) -> tuple[Outcome, str]:
        if chk.transport and chk.transport != self.target.kind:
            return Outcome.SKIP, f"applies to {chk.transport} only"
        missing = [cap for cap in chk.requires if cap not in self.capabilities]
        if missing:
            return Outcome.SKIP, f"capability not advertised: {', '.join(missing)}"
        session: Session | None = None
        try:
            if chk.lane is Lane.FRESH and chk.lane not in self.unresponsive:
                session = self.open()
            elif chk.lane not in (Lane.FRESH, Lane.FINAL, *self.unresponsive):
                session = self.lane(chk.lane)
            if chk.lane in self.unresponsive:
                reason = self.unresponsive[chk.lane]
                return Outcome.FAIL, f"expected: a responsive server\ngot: {reason}"
            ctx = Ctx(
                session,
                self.capabilities,
                http_policy=self.http_policy,
                sessions=self.sessions,
                schema_path=self.schema_path,
            )
            chk.run(ctx)
        except CheckSkipped as skipped:
            return Outcome.SKIP, str(skipped)
        except CheckFailed as failed:
            return Outcome.FAIL, _describe_failure(failed)
        except (ServerGone, ReceiveTimeout) as exc:
            if session is not None:
                session.dead = True
            return Outcome.FAIL, f"expected: a live, responsive server\ngot: {exc}"
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            return Outcome.FAIL, f"expected: a reply of the specified shape\ngot: {exc!r}"
        finally:
            if chk.lane is Lane.FRESH and session is not None:
                session.transport.close()
        return Outcome.PASS, ""

    def remove_seeded_documents(self) -> None:
        """Delete the seed corpus a check added to the shared session (§7.11)."""
        session = self.lanes.get(Lane.SHARED)
        ids = session.scratch.get(SEEDED_IDS) if session and not session.dead else None
        if session is not None and ids:
            _exchange(session, "index/delete", {"ids": ids})

    def close(self) -> None:
        """Stop every server process / HTTP client (idempotent)."""
        for session in self.sessions:
            session.transport.close()


def _describe_failure(failed: CheckFailed) -> str:
    lines = [f"expected: {failed.expected}"]
    lines.append(f"sent:     {short(failed.sent)}")
    lines.append(f"got:      {short(failed.got)}")
    return "\n".join(lines)


def run_checks(
    target: Target,
    *,
    timeout: float = 10.0,
    schema_path: str | None = None,
    select: Callable[[Check], bool] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run the registered checks (optionally a subset) and return the report.

    A subset run (``select``) is ``partial``: it reports outcomes but certifies no level.

    Every server process started here is stopped before returning; every read
    is bounded by ``timeout`` seconds, so a hung server fails instead of
    hanging the harness.
    """
    run = _Run(target, timeout, schema_path)
    chosen: Sequence[Check] = [c for c in CHECKS if select is None or select(c)]
    results: list[CheckResult] = []
    try:
        run.discover()
        for lane in LANE_ORDER:
            if lane is Lane.FINAL:
                run.close()
            for chk in (c for c in chosen if c.lane is lane):
                result = run.run_one(chk)
                results.append(result)
                if on_result is not None:
                    on_result(result)
            if lane is Lane.SHARED:
                run.remove_seeded_documents()
    finally:
        run.close()
    return Report(target.describe(), tuple(results), run.declared_level, partial=select is not None)
