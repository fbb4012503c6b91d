"""The two shapes of a registry's listing at the terminal's width: one row per entry (every
column but the last as wide as its widest cell, the name one types never cut, the last, a
description, cut with an ellipsis to what is left), and one entry in full (a field a line, the
value wrapped at words). Used by ``dlscale ls backends`` and ``dlscale ls models``."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from dlscale.cli.tables import cell, markup


def one_row_each(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], width: int
) -> Table:
    """``rows`` under ``headers`` in ``width`` columns: the last column alone is cut."""
    table = Table(title=markup(title))
    *kept, last = headers
    widest = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(kept)]
    for header, least in zip(kept, widest, strict=True):
        table.add_column(header, no_wrap=True, min_width=least)
    rest = width - sum(widest) - 3 * (len(widest) + 1) - 1  # borders and padding
    table.add_column(last, no_wrap=True, overflow="ellipsis", max_width=max(rest, 10))
    for row in rows:
        table.add_row(*map(cell, row))
    return table


def one_in_full(title: str, fields: list[tuple[str, str]], width: int) -> Table:
    """One entry, a field a line, each value wrapped at words to fit ``width``."""
    table = Table(title=markup(title), show_header=False)
    field_width = max(len(field) for field, _ in fields)
    table.add_column("", no_wrap=True, style="bold")
    table.add_column("", max_width=max(width - field_width - 7, 20))
    for field, value in fields:
        table.add_row(cell(field), cell(value))
    return table
