"""``python -m rcpkit.eval``: the ``eval`` command group on its own."""

from rcpkit.eval.cli import build_app

build_app()(prog_name="python -m rcpkit.eval")
