"""dlscale explain [COLUMN]: what a column of the runs table means, with its unit, where it is
defined, and its machine name in the exports (Markdown, CSV, `--json`)."""

from __future__ import annotations

import argparse
import difflib
import re

from dlscale.cli.tables import console, paragraph, say
from dlscale.contract.errors import UserError
from dlscale.report.columns import COLUMNS, Column
from dlscale.report.layout import every_column, find_column


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "column",
        nargs="?",
        help="a column's label as the table shows it (speedup, eff., 'vs 1×all', comm) or its "
        "export name (efficiency); without one, every column",
    )


def main(args: argparse.Namespace) -> int:
    out = console()
    if not args.column:
        for column in COLUMNS:
            if column.show != "exports":
                text = f"{column.label:10} {column.short or column.definition or column.name}"
                paragraph(out, text, indent=" " * 11)
        say(out, "dlscale explain COLUMN says more; docs/metrics.md has every formula")
        return 0
    try:
        column = find_column(args.column)
    except KeyError:
        names = [c.label for c in every_column()] + [c.name for c in every_column()]
        close = difflib.get_close_matches(args.column.lower(), list(dict.fromkeys(names)), 3, 0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(
            f"no column {args.column!r}{hint}: dlscale explain lists them all"
        ) from None
    for text in describe(column):
        paragraph(out, text)
    return 0


UNITS = (
    "in the rows' unit: img/s for images, tok/s for token sequences (their samples per second x "
    "the tokens in each, block_size: sample_unit and units_per_sample in --json); samples/s "
    "where one table holds both"
)
"""What `dlscale explain` adds of a throughput column: its unit follows the rows'."""


def describe(column: Column) -> list[str]:
    """The lines `dlscale explain` prints for one column."""
    stored = re.sub(r"_[a-z]+_s$", "_samples_s", column.name)
    if column.name.startswith("throughput_"):  # --json says what is stored, and its unit
        where = f"{column.name} in Markdown and CSV, {stored} in --json"
    else:
        where = f"{column.name} in Markdown, CSV and --json"
    lines = [f"{column.label} ({where})"]
    lines.append(column.definition or f"the run's {column.label}, as set")
    if column.name.startswith("throughput_"):
        lines.append(UNITS)
    shown = {
        "always": "always shown",
        "varying": "shown when it differs between rows, else said once under the table",
        "present": "shown when some row has a value",
        "on_request": "shown by dlscale ls runs",
        "exports": "",
    }[column.show]
    if not shown:
        lines.append("not in the terminal table: in the exports only")
    elif column.keep >= 9:
        lines.append(f"in the terminal table: {shown}, whatever the width")
    else:
        where = "shown" if column.show == "always" else f"{shown}, and"
        lines.append(
            f"in the terminal table: {where} where it fits: a terminal too narrow leaves it "
            "out (named under the table), the lowest priority first; --wide shows it"
        )
    lines.append("formulas and units: docs/metrics.md")
    return lines
