"""The runs table as Markdown and CSV: every column of `dlscale.report.columns.columns_for` the
rows, under its machine name, with its machine rounding (a throughput in the rows' unit:
``throughput_img_s``, ``throughput_tok_s``, ``throughput_samples_s`` where they mix units)."""

from __future__ import annotations

import csv
import html
import io
import re

from dlscale.contract.text import visible
from dlscale.report.columns import Row, columns_for


def table_rows(rows: list[Row]) -> list[list[str]]:
    """The exported cells: "" where a run has no value."""
    columns = columns_for(rows)
    return [[column.export(row) for column in columns] for row in rows]


_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")


def _markdown_cell(cell: str) -> str:
    """One table cell whatever the text: line breaks become spaces (a row is one line), other
    control characters are shown as escapes (the file is read in terminals too), ``|`` is
    escaped, and HTML is entity-escaped (Markdown passes raw HTML through to the page)."""
    text = visible(_BREAKS.sub(" ", cell))
    return html.escape(text, quote=False).replace("|", "\\|") or "-"


def to_markdown(rows: list[Row]) -> str:
    header = [column.name for column in columns_for(rows)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(_markdown_cell(cell) for cell in cells) + " |"
        for cells in table_rows(rows)
    ]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.name for column in columns_for(rows)])
    writer.writerows(table_rows(rows))
    return buffer.getvalue()
