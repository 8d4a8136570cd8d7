"""The ``rcpkit`` command line. Each area contributes its commands via ``register(app)``."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="rcpkit",
    help="RCP/1 toolkit: serve an engine, query it, certify and evaluate any RCP server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: Modules whose ``register(app)`` adds commands; a module not yet present is skipped.
_AREAS = (
    "rcpkit.transports.cli",
    "rcpkit.engine.cli",
    "rcpkit.engine.dbcli",
    "rcpkit.engine.storecli",
    "rcpkit.client.cli",
    "rcpkit.federation.cli",
    "rcpkit.conformance.cli",
    "rcpkit.eval.cli",
    "rcpkit.integrations.cli",
    "rcpkit.inspector.cli",
    "rcpkit.tenancy.cli",
)

for _name in _AREAS:
    try:
        _module = importlib.import_module(_name)
    except ModuleNotFoundError as _exc:
        if _exc.name != _name:
            raise
        continue
    _module.register(app)


def main() -> None:
    app()
