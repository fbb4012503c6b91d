"""Terminal tables of stored results (rich), shared by `run` and `ls runs`.

The columns are those of `dlscale.report.columns` (the same as the Markdown, CSV and HTML tables);
this module only draws them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dlscale.report.columns import LEGEND, human_layout

__all__ = ["LEGEND", "console", "points_table"]


def console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output is redirected."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)


def points_table(
    rows: list[dict[str, Any]], title: str = "dlscale results", *, run_ids: bool = False
) -> Table:
    """One row per run; settings that are the same in every row go to the caption."""
    columns, caption = human_layout(rows, run_ids=run_ids)
    table = Table(
        title=title,
        title_justify="left",
        caption=escape(", ".join(caption)) or None,
        caption_justify="left",
    )
    for column in columns:
        if column.numeric:
            table.add_column(column.label, justify="right")
        else:
            table.add_column(column.label, overflow="fold")
    for row in rows:
        table.add_row(*(escape(column.text(row)) for column in columns))
    return table
