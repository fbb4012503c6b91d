"""dlscale ls models|backends|datasets|launchers|presets|runs."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from dlscale.cli.ls_backends import backends
from dlscale.cli.ls_models import models
from dlscale.cli.tables import cell, console, markup, table_width
from dlscale.contract.errors import UserError
from dlscale.contract.options import Option

WHAT = ("models", "backends", "datasets", "launchers", "presets", "runs")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=WHAT, help="what to list")
    parser.add_argument(
        "name",
        nargs="?",
        help="ls backends NAME, ls models NAME: that one in full (its options, its install)",
    )
    parser.add_argument(
        "--results",
        default="dlscale-results",
        metavar="DIR",
        help="results directory for `ls runs` (default: ./dlscale-results)",
    )
    parser.add_argument(
        "--wide",
        action="store_true",
        help="`ls runs`: every column, however wide (default: those that fit the terminal)",
    )


def main(args: argparse.Namespace) -> int:
    if args.name is not None and args.what not in ("backends", "models"):
        raise UserError(
            f"ls {args.what} takes no NAME ({args.name!r}): it lists them all; one in full: "
            "dlscale ls backends NAME or dlscale ls models NAME"
        )
    table = {
        "models": lambda: models(args.name, table_width(console())),
        "backends": lambda: backends(args.name, table_width(console())),
        "datasets": _datasets,
        "launchers": _launchers,
        "presets": _presets,
        "runs": lambda: _runs(args.results, wide=args.wide),
    }[args.what]()
    for each in table if isinstance(table, list) else [table]:
        if callable(each):
            each(console())
        else:
            console().print(each)
    return 0


def _add(table: Table, *cells: str) -> None:
    """A row of plug-in text (names, descriptions, options), shown literally, never as markup."""
    table.add_row(*map(cell, cells))


def _options(options: tuple[Option, ...]) -> str:
    return (
        "\n".join(
            f"{o.name}={o.default!r}" + (f" ({'|'.join(map(str, o.choices))})" if o.choices else "")
            for o in options
        )
        or "-"
    )


def _datasets() -> Table:
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.workload import KINDS

    table = Table(title="datasets (sample: what one sample is, and its task)")
    for column in ("name", "sample", "needs --data-dir", "held-out", "options", "description"):
        table.add_column(column)
    for name, spec in DATASETS.listed():
        kind = KINDS[spec.sample]
        _add(
            table,
            name,
            f"{kind.unit} ({kind.task})",
            "yes" if spec.needs_data_dir else "no",
            ("accuracy" if spec.sample == "image" else "loss") if spec.has_eval else "no",
            _options(spec.options),
            spec.description,
        )
    return table


def _launchers() -> Table:
    from dlscale.contract.launchers import LAUNCHERS

    table = Table(title="launchers")
    for column in ("name", "options", "description"):
        table.add_column(column)
    for name, spec in LAUNCHERS.listed():
        _add(table, name, _options(spec.options), spec.description)
    return table


def _presets() -> Table:
    """The studies shipped with dlscale, each with its description."""
    from dlscale.config.presets import preset_descriptions

    table = Table(title="presets (dlscale run --preset NAME; --dry-run shows its points)")
    for column in ("name", "description"):
        table.add_column(column)
    for name, description in preset_descriptions():
        _add(table, name, description)
    return table


def _placement(stored: list[Any]) -> Table | None:
    """Where the processes of each run ran, for runs not all on this machine; ``None`` when
    every run stayed here."""
    from dlscale.report.placement import TITLE, placements

    lines = placements(result.document() for result in stored)
    if not lines:
        return None
    table = Table(title=TITLE)
    for column in ("run", "host", "processes"):
        table.add_column(column)
    for line in lines:  # stored text (host names from the events): each cell literal
        table.add_row(*map(markup, line))
    return table


def _runs(results: str, *, wide: bool) -> list[Table | Callable[[Console], None]]:
    """The stored runs (each with its point's speedup), then the points submitted detached
    that have no result yet, with where their jobs stand (a job that ended without recording
    its result is recorded as failed first, and listed with the runs)."""
    from dlscale.cli.tables import show_table
    from dlscale.metrics.scaling import add_scaling
    from dlscale.runner import submitted_points
    from dlscale.store.results import RunStore

    store = RunStore(results)
    waiting = submitted_points(store)
    tables: list[Table | Callable[[Console], None]] = []
    if not waiting or any(store.root.glob("*/result.json")):
        stored = store.results()
        rows = add_scaling(stored, per="run")  # each run, its own ratio over its baseline point
        title = f"runs in {results} ({len(rows)})"
        tables.append(lambda out: show_table(out, rows, title, run_ids=True, wide=wide))
        if placed := _placement(stored):
            tables.append(placed)
    if waiting:
        table = Table(title=f"submitted, no result yet ({len(waiting)})")
        for column in ("run", "state", "where it stands", "to stop it"):
            table.add_column(column)
        for run_id, submitted in waiting:  # stored text: each cell one line, literally
            table.add_row(
                *map(markup, (run_id, submitted.state, submitted.words, submitted.stop_hint))
            )
        tables.append(table)
    return tables
