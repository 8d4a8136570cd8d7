"""What the inspector does against one server: describe it, call it, certify it, evaluate it.

One :class:`Inspector` holds one client connection (opened with ``strict=False``,
so a composed request reaches the server and the server's own answer — error
or not — is what the page shows) and a :class:`~.frames.FrameLog` of every
frame on it. Each operation reports what happens as it happens through an
``emit`` callback of JSON-ready events; the web app turns them into SSE.
Upstream credentials (``--header``) stay in this process: nothing here puts
them in an event.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from .. import __version__
from ..client import AsyncClient
from ..client.transports import StdioTransport
from ..conformance.report import CheckResult
from ..conformance.runner import Target, run_checks
from ..eval.datasets import Dataset, load_beir
from ..eval.runner import ClientTarget, EvalConfig, run_eval
from ..protocol.errors import ProtocolViolation, RcpError, UsageError
from ..protocol.methods import METHODS, decode_result
from ..protocol.param_help import param_help
from .frames import Frame, FrameLog, TappedHttpTransport, TappedStdioTransport
from .sample_eval import SAMPLE_NAME, sample_dataset

__all__ = ["CHOICES", "ENGINE_COMMAND", "Emit", "Inspector", "TargetSpec"]

Emit = Callable[[dict[str, Any]], None]
"""Receives each event of an operation (``{"type": …, …}``)."""

ENGINE_COMMAND = (sys.executable, "-c", "from rcpkit.cli import main; main()", "serve", "--stdio")
"""The built-in engine over stdio (``--data DIR`` is appended)."""

#: Params (``method.path``) whose acceptable values the server advertises (capability path):
#: the forms offer these values (§6.1); the server still has the last word (§7.7 ``strict``).
CHOICES: dict[str, str] = {f"{method.name}.{param}": capability
                           for method in METHODS.values()
                           for param, capability in method.choices.items()}

#: Methods the forms offer: every request of §7 except ``initialize`` (the inspector's
#: client is already initialised; a second one is a lifecycle error, §13).
FORM_METHODS = tuple(method for name, method in METHODS.items() if name != "initialize")

_DEFAULT_DEADLINE_MS = 60_000


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """The server to inspect: an HTTP base URL, a stdio command, or an engine data directory."""

    http: str | None = None
    stdio: Sequence[str] | None = None
    data: Path | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if sum(value is not None for value in (self.http, self.stdio, self.data)) != 1:
            raise UsageError("give exactly one of --http URL, --stdio 'CMD' or --data DIR")
        if self.headers and self.http is None:
            raise UsageError("--header applies to --http only")

    @property
    def command(self) -> list[str] | None:
        """The stdio command line (the engine's for ``--data``); None over HTTP."""
        if self.data is not None:
            return [*ENGINE_COMMAND, "--data", str(self.data)]
        return list(self.stdio) if self.stdio is not None else None

    def describe(self) -> dict[str, str]:
        """Transport and address, for the page (never the headers: they may be credentials)."""
        if self.http is not None:
            return {"transport": "http", "address": self.http}
        if self.data is not None:
            return {"transport": "stdio", "address": f"rcpkit engine on {self.data}"}
        return {"transport": "stdio", "address": " ".join(self.command or [])}

    def check_target(self) -> Target:
        """The same server for ``rcpkit check`` (a stdio server is started anew by it)."""
        if self.http is not None:
            return Target(url=self.http, headers=dict(self.headers))
        return Target(argv=tuple(self.command or ()))

    def export(self, name: str) -> dict[str, Any]:
        """This connection as an MCP host's server entry (``rcpkit mcp …``, the JSON Claude
        Desktop and similar hosts read) and as an ``rcp.json`` entry (§16.1). Header values
        become placeholders: credentials never reach the page."""
        engine_id = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "rcp"
        placeholders = {header: f"<{header} value>" for header in self.headers}
        if self.http is not None:
            bridge = ["--http", self.http, *(item for header, value in placeholders.items()
                                             for item in ("--header", f"{header}: {value}"))]
            entry: dict[str, Any] = {"id": engine_id, "transport": "http", "url": self.http,
                                     **({"headers": placeholders} if placeholders else {})}
        elif self.data is not None:
            data = str(self.data.resolve())
            bridge = ["--data", data]
            entry = {"id": engine_id, "transport": "stdio",
                     "command": ["rcpkit", "serve", "--stdio", "--data", data]}
        else:
            bridge = ["--stdio", shlex.join(self.command or [])]
            entry = {"id": engine_id, "transport": "stdio", "command": self.command}
        return {"mcpHost": {"mcpServers": {engine_id: {"command": "rcpkit",
                                                       "args": ["mcp", *bridge]}}},
                "rcpJson": {"engines": [entry]}}


class Inspector:
    """One connection to the inspected server plus the operations of the web app."""

    def __init__(self, spec: TargetSpec, client: AsyncClient, frames: FrameLog, *,
                 timeout: float = 30.0, eval_root: Path | None = None,
                 allowed_stdio: Sequence[TargetSpec] = ()) -> None:
        self.spec = spec
        self.allowed_stdio = {target.describe()["address"]: target for target in
                              [*([spec] if spec.http is None else []), *allowed_stdio]}
        """The only stdio servers the page may start (``--allow-stdio``, and the first one)."""
        self.eval_root = (eval_root or Path.cwd()).resolve()
        """The only directory tree evaluations read datasets from (``--eval-root``)."""
        self.client = client
        self.frames = frames
        self.timeout = timeout
        self._certifying = asyncio.Lock()
        self._evaluating = asyncio.Lock()

    @classmethod
    async def open(cls, spec: TargetSpec, *, timeout: float = 30.0,
                   eval_root: Path | None = None,
                   allowed_stdio: Sequence[TargetSpec] = ()) -> Inspector:
        """Connect and initialize (§7.1); a server that cannot be reached is an error.
        Evaluations read datasets under ``eval_root`` only (default: the current directory);
        the page may switch to an HTTP server or to one of ``allowed_stdio``."""
        frames = FrameLog()
        return cls(spec, await _connect(spec, frames, timeout), frames, timeout=timeout,
                   eval_root=eval_root, allowed_stdio=allowed_stdio)

    async def connect(self, *, http: str | None = None, headers: dict[str, str] | None = None,
                      stdio: str | None = None) -> None:
        """Switch to another server: an HTTP base URL, or a stdio server named by its
        address in :attr:`allowed_stdio` (anything else is refused before anything starts).
        The current connection is kept until the new one has initialised."""
        if stdio is not None:
            if http is not None or headers or stdio not in self.allowed_stdio:
                raise UsageError("only a stdio server from the allow-list given at start "
                                 "(rcpkit inspect --allow-stdio CMD) can be started")
            spec = self.allowed_stdio[stdio]
        elif http is not None and re.match(r"https?://[^/\s]", http):
            spec = TargetSpec(http=http, headers=dict(headers or {}))
        else:
            raise UsageError("give an http(s):// URL or a stdio server from the allow-list")
        client = await _connect(spec, self.frames, self.timeout)
        await self.client.close()
        self.spec, self.client = spec, client

    async def reconnect(self) -> None:
        """A new connection (and, over stdio, a new server process) after the old one died
        or was shut down; the frame history carries on."""
        await self.client.close()
        self.client = await _connect(self.spec, self.frames, self.timeout)

    async def close(self) -> None:
        await self.client.close()

    # ── overview ─────────────────────────────────────────────────────────────

    def overview(self) -> dict[str, Any]:
        """Identity, negotiated version, capabilities, declared level, and the method forms."""
        client = self.client
        capabilities = client.capabilities.to_wire()
        schemas, definitions = msgspec.json.schema_components(
            [method.params for method in FORM_METHODS], ref_template="#/$defs/{name}")
        methods = []
        for method, schema in zip(FORM_METHODS, schemas, strict=True):
            capability = method.capability
            methods.append({"name": method.name, "capability": capability, "schema": schema,
                            "help": param_help(method.name),
                            "advertised": capability is None or client.capabilities.has(
                                capability)})
        return {
            "target": self.spec.describe(),
            "allowedStdio": list(self.allowed_stdio),
            "export": self.spec.export(client.server.name),
            "connected": not client.is_closed,
            "server": msgspec.to_builtins(client.server),
            "protocolVersion": client.protocol_version,
            "conformance": client.conformance,
            "capabilities": capabilities,
            "methods": methods,
            "definitions": definitions,
            "choices": CHOICES,
            "sampleDataset": SAMPLE_NAME,
            "frames": [frame.to_json() for frame in self.frames.recent],
            "stderr": self.stderr_tail(),
        }

    def stderr_tail(self) -> list[str]:
        """The last lines a stdio server wrote to stderr (its logs, its last words)."""
        transport = self.client.session.transport
        return transport.stderr_tail if isinstance(transport, StdioTransport) else []

    # ── one call ─────────────────────────────────────────────────────────────

    async def call(self, method: str, params: dict[str, Any], emit: Emit, *,
                   stream: bool = False, deadline_ms: int | None = None,
                   log_level: str | None = None) -> None:
        """Send one request; emit each of its frames as it passes, then the outcome.

        With ``stream`` the request carries a progress token (§9): the server's
        ``notifications/progress`` frames arrive as ``frame`` events before the result.
        ``log_level`` asks for this request's ``notifications/log`` frames from that level
        up (``_meta.logLevel``, §17.1); they carry the progress token, so it implies ``stream``.
        """
        if log_level is not None:
            meta = params.get("_meta")
            params = {**params, "_meta": {**(meta if isinstance(meta, dict) else {}),
                                          "logLevel": log_level}}
            stream = True
        def on_frame(frame: Frame) -> None:
            emit({"type": "frame", **frame.to_json()})

        started = time.perf_counter()
        outcome: dict[str, Any] = {"type": "outcome", "method": method}
        with self.frames.watch(on_frame):
            try:
                result = await self.client.call(
                    method, params, deadline_ms=deadline_ms or _DEFAULT_DEADLINE_MS,
                    on_progress=(lambda _event: None) if stream else None)
            except RcpError as exc:
                outcome["error"] = exc.to_wire()
            except UsageError as exc:
                outcome["error"] = {"code": None, "message": str(exc)}
            else:
                outcome["result"] = result
                outcome["problem"] = _result_problem(method, result)
        outcome["elapsedMs"] = round((time.perf_counter() - started) * 1000, 3)
        outcome["connected"] = not self.client.is_closed
        emit(outcome)

    # ── certify ──────────────────────────────────────────────────────────────

    async def certify(self, emit: Emit, *, only: Sequence[str] = (),
                      timeout: float = 10.0) -> None:
        """Run the conformance checks (``rcpkit check``) against the same server (§14.5).

        Each check's outcome is emitted as it completes, then the whole report.
        """
        if self._certifying.locked():
            raise UsageError("a certification is already running")
        async with self._certifying:
            loop = asyncio.get_running_loop()

            def on_result(result: CheckResult) -> None:
                loop.call_soon_threadsafe(emit, {"type": "check", **result.to_json()})

            def select(check: Any) -> bool:
                return any(fnmatch.fnmatch(check.id, pattern) for pattern in only)

            report = await asyncio.to_thread(
                run_checks, self.spec.check_target(), timeout=timeout,
                select=select if only else None, on_result=on_result)
            emit({"type": "report", "report": report.to_json()})

    # ── eval ─────────────────────────────────────────────────────────────────

    async def evaluate(self, emit: Emit, *, dataset: str, configs: Sequence[EvalConfig],
                       index: bool = False, seed: int = 42) -> None:
        """Run a BEIR-layout collection through ``retrieve`` (Appendix F) over this connection.

        ``dataset`` is a collection directory under :attr:`eval_root` (relative to it, or
        absolute), or the bundled sample's name; a path that leaves the root, by ``..`` or a
        symlink, is refused unread. The corpus is added only with ``index`` (and only to a
        writable engine that lacks it).
        """
        if self._evaluating.locked():
            raise UsageError("an evaluation is already running")
        async with self._evaluating:
            collection = sample_dataset() if dataset == SAMPLE_NAME else \
                await asyncio.to_thread(self._load_dataset, dataset)

            def on_progress(stage: str, done: int, total: int) -> None:
                emit({"type": "progress", "stage": stage, "done": done, "total": total})

            report = await run_eval(ClientTarget(self.client), collection, configs,
                                    engine=self.spec.describe()["address"], index=index,
                                    seed=seed, on_progress=on_progress)
            document = report.to_json()
            latencies = {result.name: result.latencies_ms for result in report.results}
            emit({"type": "report", "report": document, "latencies": latencies})


    def _load_dataset(self, dataset: str) -> Dataset:
        directory = (self.eval_root / Path(dataset).expanduser()).resolve()
        if not directory.is_relative_to(self.eval_root):
            raise UsageError(f"{dataset} is outside the evaluation root {self.eval_root} "
                             "(rcpkit inspect --eval-root DIR)")
        return load_beir(directory, within=self.eval_root)


async def _connect(spec: TargetSpec, frames: FrameLog, timeout: float) -> AsyncClient:
    info = {"name": "rcpkit-inspect", "version": __version__}
    transport: TappedHttpTransport | TappedStdioTransport
    if spec.http is not None:
        transport = TappedHttpTransport(frames, spec.http, headers=spec.headers)
    else:
        transport = TappedStdioTransport(frames, spec.command or [])
    return await AsyncClient.open(transport, strict=False, log_level=None, timeout=timeout,
                                  client_info=info)


def _result_problem(method: str, result: dict[str, Any]) -> dict[str, Any] | None:
    """Why ``result`` does not have the §7 shape of ``method``'s result (None if it does)."""
    try:
        decode_result(method, result)
    except ProtocolViolation as exc:
        return {"message": exc.message, **(exc.data or {})}
    return None
