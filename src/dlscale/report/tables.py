"""The runs table as Markdown and CSV: every column of `dlscale.report.columns.COLUMNS`, under its
machine name, with its machine rounding."""

from __future__ import annotations

import csv
import io

from dlscale.report.columns import COLUMNS, Row


def table_rows(rows: list[Row]) -> list[list[str]]:
    """The exported cells: "" where a run has no value."""
    return [[column.export(row) for column in COLUMNS] for row in rows]


def to_markdown(rows: list[Row]) -> str:
    header = [column.name for column in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(cell.replace("|", "\\|") or "-" for cell in cells) + " |"
        for cells in table_rows(rows)
    ]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.name for column in COLUMNS])
    writer.writerows(table_rows(rows))
    return buffer.getvalue()
