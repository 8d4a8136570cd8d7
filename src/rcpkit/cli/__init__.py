"""The ``rcpkit`` command line. Each area contributes its commands via ``register(app)``."""

from __future__ import annotations

import functools
import importlib
import sys

import typer

#: Modules whose ``register(app)`` adds commands; a module not yet present is skipped.
_AREAS = (
    "rcpkit.cli.serve",
    "rcpkit.cli.index",
    "rcpkit.cli.watch",
    "rcpkit.cli.db",
    "rcpkit.cli.store",
    "rcpkit.cli.client",
    "rcpkit.cli.federation",
    "rcpkit.cli.certify",
    "rcpkit.cli.eval",
    "rcpkit.cli.mcp",
    "rcpkit.cli.inspector",
    "rcpkit.cli.tenancy",
)
#: Commands whose start-up time matters, by the area that registers them: ``rcpkit CMD``
#: imports only that area (every area together takes seconds to import, and an MCP host
#: waits that long for its ``initialize`` answer). Any other command loads every area.
_FAST_COMMANDS = {"mcp": "rcpkit.cli.mcp"}


def _build(areas: tuple[str, ...]) -> typer.Typer:
    built = typer.Typer(
        name="rcpkit",
        help="RCP/1 toolkit: serve an engine, query it, certify and evaluate any RCP server.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    if len(areas) == 1:
        # Typer runs a lone command without its name; a callback keeps ``rcpkit CMD``.
        built.callback()(lambda: None)
    for name in areas:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(built)
    return built


@functools.cache
def _full_app() -> typer.Typer:
    return _build(_AREAS)


def __getattr__(name: str) -> typer.Typer:
    """``rcpkit.cli.app``: every command (built on first use)."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    fast = _FAST_COMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    (_build((fast,)) if fast else _full_app())()
