"""``python -m rcpkit.eval``: the ``eval`` command group on its own."""

from rcpkit.cli.eval import build_app

build_app()(prog_name="python -m rcpkit.eval")
