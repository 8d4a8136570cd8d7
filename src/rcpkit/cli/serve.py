"""``rcpkit serve``: serve a Server over stdio (§5.1) or HTTP (§5.2).

``--app module:attr`` names a :class:`Server` (or a zero-argument callable
returning one). Without it the built-in engine is served through
``rcpkit.binding.build_server(data_dir, **options)``. ``--workers N``
serves HTTP from N processes, each building its own server after the fork; it
needs ``--sessions stateless`` and a server declaring itself multi-process safe
(see :func:`rcpkit.transports.http.serve_http`). Any flag or configuration error
is one line on stderr and exit status 2.
"""

from __future__ import annotations

import atexit
import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ..protocol.errors import RcpError, UsageError
from ..server.framework import Server
from ..tenancy.collections import is_collection_root
from ..transports.access import FORMATS, AccessLog
from .support import LogLevelOption, configure_logging, configure_tracing, fail

__all__ = ["AUTH_TOKENS_ENV", "METRICS_TOKEN_ENV", "ConfigError", "load_app", "register"]

AUTH_TOKENS_ENV = "RCPKIT_AUTH_TOKENS"
"""Comma-separated bearer tokens, added to any ``--auth-token``."""
METRICS_TOKEN_ENV = "RCPKIT_METRICS_TOKEN"
"""The bearer token ``/metrics`` asks of scrapers (``--metrics-token``)."""

_SESSION_POLICIES = ("stateless", "token", "single")


class ConfigError(Exception):
    """A flag or configuration problem; reported as one line, exit 2."""


def _fail(message: str) -> NoReturn:
    fail("serve", message)


def load_app(spec: str) -> Server:
    """Resolve ``module:attr`` to a :class:`Server` (calling ``attr`` if it is a factory)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app must look like module:attr, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    try:
        target: Any = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{module_name!r} has no attribute {attr!r}") from None
    if callable(target) and not isinstance(target, Server):
        target = target()
    if not isinstance(target, Server):
        raise ConfigError(f"{spec} is not an rcpkit.server.Server")
    return target


def _engine_server(data_dir: Path | None, options: dict[str, Any]) -> Server:
    """The built-in engine's server; ``options`` are engine config overrides."""
    try:
        service = importlib.import_module("rcpkit.binding")
    except ModuleNotFoundError as exc:
        if exc.name not in ("rcpkit.binding", "rcpkit.engine"):
            raise
        raise ConfigError("the built-in engine is not available; pass --app module:attr") from None
    try:
        built: Server = service.build_server(data_dir, **options)
    except (RcpError, UsageError, ValueError, OSError) as exc:
        message = exc.message if isinstance(exc, RcpError) else str(exc)
        raise ConfigError(f"cannot open the engine: {message}") from None
    return built


def _check_data_directory(data: Path | None) -> None:
    """Refuse a data directory that does not exist: the engine would create it, and a
    mistyped ``--data`` would serve (and take writes into) a new, empty engine."""
    from ..engine.config import EngineConfig

    directory = data if data is not None else EngineConfig().data_dir
    if not directory.is_dir():
        raise ConfigError(f"no data directory {directory}: build one with `rcpkit index add "
                          f"FILES --data {directory}`, or pass --create to serve an empty one")


def _parse_host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--http expects HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def serve(
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve NDJSON on stdin/stdout.")] = False,
    http: Annotated[str | None, typer.Option("--http", metavar="HOST:PORT",
                                             help="Serve HTTP on HOST:PORT.")] = None,
    sessions: Annotated[str, typer.Option(
        help="HTTP session policy: stateless, token or single.")] = "stateless",
    auth_token: Annotated[list[str] | None, typer.Option(
        "--auth-token", help=f"Accepted bearer token (repeatable; also ${AUTH_TOKENS_ENV}).",
    )] = None,
    api_key_header: Annotated[str | None, typer.Option(
        help="Also accept the token in this header (e.g. X-API-Key).")] = None,
    base: Annotated[str, typer.Option(help="HTTP base path.")] = "/rcp",
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", help="Allowed browser origin (repeatable).")] = None,
    app: Annotated[str | None, typer.Option(
        "--app", metavar="MODULE:ATTR", help="Serve this Server instead of the engine.")] = None,
    data: Annotated[Path | None, typer.Option(
        "--data", metavar="DIR", help="Engine data directory (without --app).")] = None,
    create: Annotated[bool, typer.Option(
        "--create", help="Create the data directory if it does not exist (else refused: a "
                         "typo would serve an empty engine).")] = False,
    embedder: Annotated[str | None, typer.Option(
        help="Engine embedder, e.g. minilm or hashing (without --app).")] = None,
    backend: Annotated[str | None, typer.Option(
        help="Engine system of record: sqlite or postgres (without --app).")] = None,
    dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL DSN for --backend postgres (also $RCPKIT_DSN).")] = None,
    llm_url: Annotated[str | None, typer.Option(
        help="OpenAI-compatible chat-completions API base for generated hyde passages and "
             "global summaries (key: llm_key in rcpkit.toml or $RCPKIT_LLM_KEY).")] = None,
    llm_model: Annotated[str | None, typer.Option(
        help="Model name sent to --llm-url.")] = None,
    timeout_ms: Annotated[float | None, typer.Option(
        help="Default per-request deadline in milliseconds (§13.1).")] = None,
    workers: Annotated[int, typer.Option(
        help="HTTP worker processes (stateless sessions, and a server that declares itself "
             "multi-process safe).")] = 1,
    max_sessions: Annotated[int, typer.Option(
        help="Token sessions kept at most; never-used, then least recently used, make room."
    )] = 10_000,
    session_ttl: Annotated[float, typer.Option(
        help="Seconds an idle token session lives.")] = 900.0,
    max_connections: Annotated[int, typer.Option(
        help="Open HTTP connections at most (per worker); idle ones make room, else 503."
    )] = 1024,
    max_header_bytes: Annotated[int, typer.Option(
        help="Largest HTTP request head (431 beyond).")] = 64 * 1024,
    header_timeout: Annotated[float, typer.Option(
        help="Seconds a request head may take to arrive (408 beyond).")] = 10.0,
    body_timeout: Annotated[float, typer.Option(
        help="Seconds a request body may take to arrive (408 beyond).")] = 60.0,
    collection: Annotated[list[str] | None, typer.Option(
        "--collection", help="Serve this collection of the --data root (repeatable over "
                             "HTTP; exactly one over stdio). Without it, HTTP serves all.")] = None,
    public_url: Annotated[str | None, typer.Option(
        help="Collections: the URL clients reach this server at, for catalog/list "
             "endpoints (default http://HOST:PORT).")] = None,
    metrics: Annotated[bool, typer.Option(
        "--metrics", help="Serve Prometheus metrics at /metrics beside the base (--http; "
                          "needs the metrics extra).")] = False,
    metrics_token: Annotated[str | None, typer.Option(
        "--metrics-token", envvar=METRICS_TOKEN_ENV, show_envvar=True,
        help="Scrapers of /metrics must send this bearer token (else 401).")] = None,
    log_bodies: Annotated[bool, typer.Option(
        "--log-bodies", help="Let failure logs and trace spans quote queries and documents "
                             "(off: replaced by their length, or left out).")] = False,
    access_log: Annotated[bool, typer.Option(
        "--access-log", help="One line per request on stderr: time, method, collection, "
                             "principal, status, code, duration, bytes; never bodies.")] = False,
    access_log_format: Annotated[str, typer.Option(
        help="Access log lines: text, or json (JSON lines).")] = "text",
    log_level: LogLevelOption = "warning",
    watch: Annotated[Path | None, typer.Option(
        "--watch", metavar="DIR", help="Keep the index in step with this folder while serving "
        "(as `rcpkit watch`; one worker; its progress is on /metrics).")] = None,
) -> None:
    """Serve an RCP server over stdio or HTTP."""
    try:
        if stdio == (http is not None):
            raise ConfigError("choose exactly one of --stdio or --http HOST:PORT")
        if sessions not in _SESSION_POLICIES:
            raise ConfigError(f"--sessions must be one of {', '.join(_SESSION_POLICIES)}")
        if timeout_ms is not None and timeout_ms <= 0:
            raise ConfigError("--timeout-ms must be positive")
        tokens = list(auth_token or [])
        tokens += [t.strip() for t in os.environ.get(AUTH_TOKENS_ENV, "").split(",") if t.strip()]
        if stdio and (tokens or cors_origin or api_key_header or metrics or metrics_token):
            raise ConfigError("--auth-token, --api-key-header, --cors-origin and --metrics "
                              "apply to --http")
        if metrics_token is not None and not metrics:
            raise ConfigError("--metrics-token needs --metrics")
        if access_log_format not in FORMATS:
            raise ConfigError(f"--access-log-format must be one of {', '.join(FORMATS)}")
        access = AccessLog("json" if access_log_format == "json" else "text") \
            if access_log else None
        address = _parse_host_port(http) if http is not None else None
        if min(max_sessions, max_connections, max_header_bytes) < 1 \
                or min(session_ttl, header_timeout, body_timeout) <= 0:
            raise ConfigError("--max-sessions, --session-ttl, --max-connections, "
                              "--max-header-bytes and the timeouts must be positive")
        if workers < 1:
            raise ConfigError("--workers must be at least 1")
        if workers > 1 and (address is None or sessions != "stateless"):
            raise ConfigError("--workers above 1 needs --http and --sessions stateless "
                              "(token and single sessions live in one process)")
        engine_options = {table: settings for table, settings in
                          (("embedder", {"name": embedder}),
                           ("store", {"backend": backend, "dsn": dsn}),
                           ("llm", {"url": llm_url, "model": llm_model}))
                          if any(value is not None for value in settings.values())}
        if app is not None and (data is not None or engine_options or create):
            raise ConfigError("--data, --create, --embedder, --backend, --dsn and --llm-* "
                              "configure the engine; not with --app")

        if watch is not None and (app is not None or workers != 1 or not watch.is_dir()
                                  or (data is not None and is_collection_root(data))):
            raise ConfigError(f"--watch {watch}: needs a folder and the engine of --data served "
                              "by one process; beside several workers or a collection, run "
                              "`rcpkit watch DIR --data DATA [--collection NAME]` as its own "
                              "process")
        if watch is not None and app is None:  # an edit or a rename embeds only new text
            _watch_cache(data, engine_options)
        if app is None and data is not None and is_collection_root(data):
            configure_logging("serve", log_level)
            configure_tracing("serve")
            raise typer.Exit(_serve_collections(data, collection or [], address, engine_options,
                                                tokens, workers, sessions, public_url, {
                "base": base, "api_key_header": api_key_header, "cors_origins": cors_origin or (),
                "request_timeout_ms": timeout_ms, "log_bodies": log_bodies, "metrics": metrics,
                "metrics_token": metrics_token, "access_log": access, "limits": {
                    "max_connections": max_connections, "max_header_bytes": max_header_bytes,
                    "header_timeout_s": header_timeout, "body_timeout_s": body_timeout}}))
        if collection:
            raise ConfigError("--collection needs --data ROOT holding collections "
                              "(rcpkit collection create NAME --data ROOT)")
        if app is None and not create:
            _check_data_directory(data)

        def build() -> Server:
            return load_app(app) if app is not None else _engine_server(data, engine_options)

        # With several workers each one builds its own server after the fork.
        source: Server | Callable[[], Server] = build() if workers == 1 else _in_worker(build)
    except ConfigError as exc:
        _fail(str(exc))
    configure_logging("serve", log_level)
    configure_tracing("serve")
    if watch is not None:
        _watch_beside(source, watch)
    if address is None:
        from ..transports.stdio import serve_stdio

        assert isinstance(source, Server)
        raise typer.Exit(serve_stdio(source, request_timeout_ms=timeout_ms,
                                     log_bodies=log_bodies, access_log=access))
    from ..transports.http import serve_http

    try:
        status = serve_http(source, *address, workers=workers, base=base, sessions=sessions,
                            auth_tokens=tokens, api_key_header=api_key_header,
                            cors_origins=cors_origin or (), request_timeout_ms=timeout_ms,
                            max_sessions=max_sessions, session_ttl_s=session_ttl,
                            metrics=metrics, metrics_token=metrics_token,
                            log_bodies=log_bodies, access_log=access,
                            limits={"max_connections": max_connections,
                                    "max_header_bytes": max_header_bytes,
                                    "header_timeout_s": header_timeout,
                                    "body_timeout_s": body_timeout})
    except UsageError as exc:
        _fail(str(exc))
    raise typer.Exit(status)


def _watch_cache(data: Path | None, engine_options: dict[str, Any]) -> None:
    """``--watch``: the data directory's embedding cache, as ``rcpkit watch`` has it."""
    from ..engine.config import EngineConfig
    from ..engine.errors import EngineError
    from .watch import cache_override

    store = engine_options.get("store", {})
    try:
        cache = cache_override(data or EngineConfig().data_dir, store.get("backend"),
                               store.get("dsn"))
    except EngineError as exc:
        raise ConfigError(f"cannot open the engine: {exc}") from None
    for table, settings in cache.items():
        engine_options[table] = {**engine_options.get(table, {}), **settings}


def _watch_beside(source: Server | Callable[[], Server], folder: Path) -> None:
    """``--watch``: the folder synced into the served engine on a thread of this process,
    stopped at exit before the engine closes (``atexit`` runs the later registration first)."""
    from ..binding.server import served_engine
    from .watch import watch_beside

    server = source if isinstance(source, Server) else None
    engine = served_engine(server) if server is not None else None
    if server is None or engine is None:
        _fail("--watch needs the built-in engine (--data)")
    watcher, stop = watch_beside(engine, folder)
    served_engine(server, watcher.stats.gauges)
    atexit.register(stop)


def _serve_collections(root: Path, names: list[str], address: tuple[str, int] | None,
                       engine_options: dict[str, Any], tokens: list[str], workers: int,
                       sessions: str, public_url: str | None, options: dict[str, Any]) -> int:
    """``serve --data ROOT`` on a root of collections: one over stdio, some or all over HTTP
    at ``<base>/<name>`` behind the root's keys (:mod:`rcpkit.tenancy`)."""
    from ..tenancy.collections import CollectionError, CollectionRegistry
    from ..tenancy.serving import as_stdio_peer, build_access, serve_root

    try:
        if "store" in engine_options:
            raise ConfigError("each collection's rcpkit.toml names its record: no --backend "
                              "or --dsn with a root of collections")
        if address is None:
            if len(names) != 1:
                raise ConfigError("over stdio, name exactly one --collection")
            server = _engine_server(CollectionRegistry(root).path(names[0]), engine_options)
            as_stdio_peer(server)
            from ..transports.stdio import serve_stdio

            return serve_stdio(server, request_timeout_ms=options["request_timeout_ms"],
                               log_bodies=options["log_bodies"],
                               access_log=options["access_log"])
        if workers != 1 or sessions != "stateless":
            raise ConfigError("collections are served by one process with --sessions stateless; "
                              "scale out with more processes behind a load balancer")
        access = build_access(root, auth_tokens=tokens,
                              api_key_header=options.pop("api_key_header"))
        host, port = address
        limits = options.pop("limits")
        metrics_token = options.pop("metrics_token")
        if options.pop("metrics"):
            from ..transports.http.metrics import Metrics

            options["metrics"] = Metrics(metrics_token)
        app = serve_root(root, names or None, access, engine_options=engine_options,
                         public_url=public_url or (f"http://{host}:{port}" if port else None),
                         **options)
    except (CollectionError, ValueError, ConfigError, UsageError) as exc:
        _fail(str(exc))
    from ..transports.http import serve_app

    try:
        return serve_app(app, host, port, base=options["base"], limits=limits)
    except UsageError as exc:
        _fail(str(exc))


def _in_worker(build: Callable[[], Server]) -> Callable[[], Server]:
    """``build`` for a worker process, where a configuration error is a :class:`UsageError`
    (reported by the worker supervisor as one line, exit 2)."""
    def build_in_worker() -> Server:
        try:
            return build()
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    return build_in_worker


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the ``rcpkit`` command line."""
    app.command("serve")(serve)
