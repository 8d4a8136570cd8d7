"""``python -m rcpkit.conformance check …`` — the harness without the full rcpkit CLI."""

import typer

from rcpkit.cli.certify import register

app = typer.Typer(add_completion=False, help="RCP/1 conformance harness (§14.5).")


@app.callback()
def main() -> None:
    """RCP/1 conformance harness."""


register(app)

if __name__ == "__main__":
    app()
