"""``rcpkit eval``: score an engine on a BEIR collection; ``rcpkit eval convert``: build one."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeRemainingColumn

from rcpkit.cli.support import fail
from rcpkit.eval.datasets import directory_to_beir, faq_to_beir, load_beir, write_beir
from rcpkit.eval.report import EvalReport, render_table, write_plots, write_trec_runs
from rcpkit.eval.runner import EvalConfig, ProgressCallback, open_target, run_eval
from rcpkit.protocol.errors import RcpError, UsageError

__all__ = ["build_app", "register"]

_EXIT_USAGE = 2
_EXIT_ENGINE = 1

_stdout = Console()
_stderr = Console(stderr=True)


class FaqSubset(StrEnum):
    """``--lang`` choices of ``convert faq``."""

    EN = "en"
    SV = "sv"
    ALL = "all"

    @property
    def language(self) -> Literal["en", "sv", "all"]:
        return "en" if self is FaqSubset.EN else "sv" if self is FaqSubset.SV else "all"



async def _evaluate(dataset_dir: Path, stdio: str | None, http: str | None,
                    configs: list[EvalConfig], index: bool, seed: int, batch_size: int,
                    on_progress: ProgressCallback, split: str | None) -> EvalReport:
    dataset = load_beir(dataset_dir, split)
    async with open_target(stdio, http) as target:
        return await run_eval(target, dataset, configs, engine=stdio or http or "", index=index,
                              seed=seed, batch_size=batch_size, on_progress=on_progress)


def evaluate_command(
    ctx: typer.Context,
    dataset: Annotated[Path | None, typer.Option(help="BEIR-layout collection directory.")] = None,
    split: Annotated[str | None, typer.Option(
        help="Judgements to score (qrels/SPLIT.tsv); default test, or the only split.")] = None,
    stdio: Annotated[str | None, typer.Option(help="Engine command line to spawn (stdio).")] = None,
    http: Annotated[str | None, typer.Option(help="Engine base URL (http://h:8000/rcp).")] = None,
    config: Annotated[list[str] | None, typer.Option(
        help='NAME=JSON retrieve params, repeatable, e.g. bm25=\'{"mode":"sparse"}\'.')] = None,
    no_index: Annotated[bool, typer.Option("--no-index", help="Never call index/add.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents per index/add.")] = 64,
    seed: Annotated[int, typer.Option(help="Seed sent when retrieve.deterministic.")] = 42,
    json_stdout: Annotated[bool, typer.Option(
        "--json", help="Print the JSON report on stdout instead of the table.")] = False,
    report_file: Annotated[Path | None, typer.Option(
        "--report", help="Also write the JSON report to this file.")] = None,
    trec: Annotated[Path | None, typer.Option(help="Directory for TREC run files.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Directory for PNG charts.")] = None,
) -> None:
    """Run every query of a collection through `retrieve` per configuration (Appendix F).

    Exit status: 0 when every configuration ran, 1 when the engine failed or rejected
    one (the report still lists the others), 2 on a usage or dataset error.
    """
    if ctx.invoked_subcommand is not None:
        return
    if dataset is None:
        fail("eval", "--dataset is required", code=_EXIT_USAGE)
    try:
        configs = [EvalConfig.parse(spec) for spec in config or ["default={}"]]
        with Progress("[progress.description]{task.description}", BarColumn(),
                      MofNCompleteColumn(), TimeRemainingColumn(), console=_stderr) as bars:
            tasks: dict[str, TaskID] = {}

            def on_progress(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bars.add_task(stage, total=total)
                bars.update(tasks[stage], completed=done)

            report = asyncio.run(_evaluate(dataset, stdio, http, configs, not no_index, seed,
                                           batch_size, on_progress, split))
    except UsageError as exc:
        fail("eval", str(exc), code=_EXIT_USAGE)
    except RcpError as exc:
        fail("eval", str(exc), code=_EXIT_ENGINE)
    document = json.dumps(report.to_json(), indent=2, ensure_ascii=False)
    if json_stdout:
        typer.echo(document)
    else:
        _stdout.print(render_table(report))
    if report_file is not None:
        report_file.write_text(document + "\n", encoding="utf-8")
    try:
        written = [*(write_trec_runs(report, trec) if trec else []),
                   *(write_plots(report, plot) if plot else [])]
    except UsageError as exc:
        fail("eval", str(exc), code=_EXIT_USAGE)
    for path in written:
        _stderr.print(f"wrote {path}")
    if any(result.error for result in report.results):
        raise typer.Exit(_EXIT_ENGINE)


def convert_faq(
    out_dir: Annotated[Path, typer.Argument(help="Output directory (BEIR layout).")],
    lang: Annotated[FaqSubset, typer.Option(help="Language subset.")] = FaqSubset.ALL,
) -> None:
    """The offline Zaragoza construction FAQ as a BEIR collection."""
    try:
        dataset = faq_to_beir(lang.language)
    except UsageError as exc:
        fail("eval convert faq", str(exc), code=_EXIT_USAGE)
    write_beir(dataset, out_dir)
    _stderr.print(f"wrote {len(dataset.corpus)} documents, {len(dataset.queries)} queries "
                  f"to {out_dir}")


def convert_dir(
    docs_dir: Annotated[Path, typer.Argument(help="Directory of .txt/.md documents.")],
    queries_file: Annotated[Path, typer.Argument(help="Queries: .jsonl or TSV.")],
    out_dir: Annotated[Path, typer.Argument(help="Output directory (BEIR layout).")],
) -> None:
    """A document directory plus a queries file as a BEIR collection."""
    try:
        dataset = directory_to_beir(docs_dir, queries_file)
    except UsageError as exc:
        fail("eval", str(exc), code=_EXIT_USAGE)
    write_beir(dataset, out_dir)
    _stderr.print(f"wrote {len(dataset.corpus)} documents, {len(dataset.queries)} queries "
                  f"to {out_dir}")


def build_app() -> typer.Typer:
    """The ``eval`` command group (also runnable alone as ``python -m rcpkit.eval``)."""
    app = typer.Typer(help="Retrieval quality evaluation (Appendix F).", add_completion=False)
    app.callback(invoke_without_command=True)(evaluate_command)
    convert = typer.Typer(help="Produce BEIR-layout collections.", no_args_is_help=True)
    convert.command("faq")(convert_faq)
    convert.command("dir")(convert_dir)
    app.add_typer(convert, name="convert")
    return app


def register(app: typer.Typer) -> None:
    """Add the ``eval`` command group to the main ``rcpkit`` app."""
    app.add_typer(build_app(), name="eval")
