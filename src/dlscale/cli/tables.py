"""Terminal tables of stored results (rich), shared by `run` and `ls runs`.

The columns are those of `dlscale.report.columns` (the same as the Markdown, CSV and HTML tables);
this module only draws them.

User text (study names, paths, settings, errors) is never rich markup: ``[/x]`` in a study name
would end a tag that was never opened (a crash) and ``[bold]`` would vanish. Titles and messages
are passed as `Text` (`literal`, `say`), text inside markup (table cells and captions, progress
descriptions, coloured messages) through `markup`, which both escapes the markup and shows
control characters as escapes (`dlscale.contract.text.visible`), and `console()` replaces no
``:emoji:`` codes. So no text moves the cursor, sets the window title or colours the terminal, and a
message, a caption and a cell of the runs table stay one line (only `cell`, for plug-in text
such as a list of options, keeps its own line breaks).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dlscale.contract.numbers import whole_number
from dlscale.contract.text import shell_command, visible
from dlscale.report.cells import notes
from dlscale.report.columns import LEGEND, Column
from dlscale.report.layout import human_layout, legend
from dlscale.report.series import series_label, varying_keys

__all__ = [
    "DEFAULT_WIDTH",
    "LEGEND",
    "cell",
    "console",
    "drawn_width",
    "left_out_line",
    "literal",
    "markup",
    "paragraph",
    "points_table",
    "print_at_width",
    "print_findings",
    "results_command",
    "say",
    "show_table",
    "table_width",
    "visible",
]


DEFAULT_WIDTH = 100
"""The width a runs table fits when the terminal's is not known (output to a file or a pipe)."""

FEW_NOTES = 3
"""Points whose notes are said under a table that left its notes column out; past this many,
their names only."""


def console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output is redirected, and
    turns no ``:name:`` in user text into an emoji."""
    probe = Console(stderr=stderr, emoji=False)
    return probe if probe.is_terminal else Console(stderr=stderr, width=240, emoji=False)


def _columns() -> int | None:
    text = os.environ.get("COLUMNS", "")
    return whole_number(text, low=1, high=100_000)


def table_width(out: Console) -> int:
    """The columns a runs table may take on ``out``: the terminal's, else $COLUMNS, else
    `DEFAULT_WIDTH`."""
    if out.is_terminal:
        return out.width
    return _columns() or DEFAULT_WIDTH


def literal(text: Any, style: str = "") -> Text:
    """User text for rich, shown as it is (no markup, no emoji, one line)."""
    return Text(visible(text), style=style)


def markup(text: Any, *, lines: bool = False) -> str:
    """User text as a markup string that renders literally, on one line (with ``lines``: its
    own lines): the one helper for user text that rich reads as markup."""
    return escape(visible(text, lines=lines))


def cell(text: Any) -> str:
    """Plug-in text for a table cell (a list of options): literal, keeping its line breaks."""
    return markup(text, lines=True)


def say(out: Console, text: Any, style: str = "") -> None:
    """Print a message as one line, literally: never wrapped at the console's width."""
    out.print(literal(text, style), soft_wrap=True)


def paragraph(out: Console, text: Any, style: str = "", indent: str = "  ") -> None:
    """Print a message literally, wrapped at words to `table_width` (the terminal's, else
    $COLUMNS, else 100: in a pipe too), its later lines under ``indent``; a word longer than
    a line (a path) stays whole."""
    import textwrap

    lines = textwrap.wrap(
        visible(text), table_width(out), subsequent_indent=indent, break_long_words=False,
        break_on_hyphens=False,
    )  # fmt: skip
    for line in lines or [""]:
        say(out, line, style)


def results_command(*words: str, results: Any) -> str:
    """``dlscale WORDS --results RESULTS``, to paste into a shell: quoted, so that a results
    path with a space, ``;`` or ``$(...)`` stays one word and runs nothing."""
    return shell_command(["dlscale", *words, "--results", str(results)])


def points_table(
    rows: list[dict[str, Any]],
    title: str = "dlscale results",
    *,
    run_ids: bool = False,
    width: int = DEFAULT_WIDTH,
    wide: bool = False,
) -> Table:
    """One row per run or point, settings the same in every row in the caption, fitted to
    ``width`` (`fitted_columns`), which the caption names."""
    columns, caption, hidden = fitted_columns(rows, run_ids=run_ids, width=width, wide=wide)
    return _table(rows, columns, title, [*caption, *_left_out(rows, hidden, width)])


def fitted_columns(
    rows: list[dict[str, Any]], *, run_ids: bool, width: int, wide: bool
) -> tuple[list[Column], list[str], list[str]]:
    """The columns of a table for people that fit ``width``, its caption items, and the labels
    of the columns left out. Where the table would be wider, the columns least needed to read
    it (the baseline's name, step time...) go first, lowest `Column.keep` first; those that
    tell rows apart stay (the terminal folds them). ``wide``: every column, however wide."""
    columns, caption = human_layout(rows, run_ids=run_ids)
    hidden: list[str] = []
    while not wide and drawn_width(_table(rows, columns, "", [])) > width:
        if any(c.name == "run_id" for c in columns) and RUN_ID_START not in hidden:
            # the other columns say what a run id's start spells: it goes before any of them
            columns = [_run_id_end(c) if c.name == "run_id" else c for c in columns]
            hidden.append(RUN_ID_START)
            continue
        droppable = [c for c in columns if c.keep < 9]
        if not droppable:
            break
        dropped = min(droppable, key=lambda c: c.keep)
        columns = [c for c in columns if c is not dropped]
        hidden.append(dropped.label)
    return columns, caption, hidden


RUN_ID_START = "the run ids' start"
"""What `fitted_columns` names as left out where it shortened the run ids to their ends."""


def _run_id_end(column: Column) -> Column:
    """The run id column showing the end of each id, after ``-w<workers>-`` (its hash, and a
    repeat's suffix), as ``…<end>``: the backend, model, data and workers columns or the
    caption say its start (``model-backend-data-wN-``). An id of another shape stays whole."""

    def end(row: dict[str, Any]) -> str | None:
        run_id = column.value(row)
        if run_id is None:
            return None
        workers = (row.get("config") or {}).get("workers")
        start, marker, rest = str(run_id).rpartition(f"-w{workers}-")
        return f"…{rest}" if start and marker and rest else str(run_id)

    return dataclasses.replace(column, value=end)


def _left_out(rows: list[dict[str, Any]], hidden: list[str], width: int) -> list[str]:
    """What the table left out to fit, and the points whose notes it hid: the notes say how
    the figures must be read (a loaded machine, runs left out), so who has one is said."""
    if not hidden:
        return []
    out = [left_out_line(hidden, width)]
    if "notes" in hidden:
        varying = [k for k in varying_keys(rows) if k not in ("workers", "threads_per_worker")]
        noted = [
            (f"{series_label(row, varying)} x{row['config'].get('workers')}", notes(row), row)
            for row in rows
            if notes(row)
        ]
        said = [name for name, _, _ in noted]
        noted = [  # two points told apart by their threads alone (the whole-machine reference)
            (f"{name} ({row.get('threads_per_worker')} thr)" if said.count(name) > 1 else name,
             text, row)
            for name, text, row in noted
        ]  # fmt: skip
        if 0 < len(noted) <= FEW_NOTES:
            out.append("notes: " + "; ".join(f"{name}: {text}" for name, text, _ in noted))
        elif noted:
            names = ", ".join(name for name, _, _ in noted)
            out.append(f"{len(noted)} points have notes (--wide shows them): {names}")
    return out


def left_out_line(hidden: list[str], width: int) -> str:
    """The sentence under a fitted table naming the columns it left out (``hidden``)."""
    return f"left out to fit {width} columns: {', '.join(hidden)} (--wide shows them)"


def drawn_width(table: Table) -> int:
    """The width ``table`` takes unwrapped."""
    return Console(width=100_000).measure(table).maximum


def print_at_width(out: Console, table: Table, width: int) -> None:
    """``table`` on ``out`` as wide as it is, at least ``width``: rich would squeeze it to the
    console's width, which off a terminal is not $COLUMNS."""
    console_width, out.width = out.width, max(width, drawn_width(table))
    try:
        out.print(table)
    finally:
        out.width = console_width


def _table(
    rows: list[dict[str, Any]], columns: list[Column], title: str, caption: list[str]
) -> Table:
    table = Table(
        title=literal(title, "table.title") if title else None,
        title_justify="left",
        caption=markup(", ".join(caption)) or None,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in columns:
        if column.numeric:
            table.add_column(column.label, justify="right")
        elif column.name == "run_id":  # copied into commands: never broken across lines
            table.add_column(column.label, no_wrap=True)
        else:
            table.add_column(column.label, overflow="fold")
    for row in rows:
        table.add_row(*(markup(column.text(row)) for column in columns))
    return table


def print_findings(out: Console, rows: list[dict[str, Any]]) -> None:
    """What the study found (`dlscale.report.finding`), a line each, before its table."""
    from dlscale.report.finding import findings

    for sentence in findings(rows):  # wrapped at words to the table's width, in a pipe too
        out.print(Text("found: ", style="bold") + literal(sentence), width=table_width(out))


def show_table(
    out: Console, rows: list[dict[str, Any]], title: str, *, run_ids: bool = False, wide: bool
) -> None:
    """The runs table on ``out`` under its title, then its caption, what it left out and the
    legend of what it shows, each a paragraph of the console's width: fitted to the terminal
    (`table_width`), or with ``wide`` every column, as wide as that takes."""
    width = table_width(out)
    out.print(literal(title, "table.title"), soft_wrap=True)  # a long path: one line, unbroken
    columns, caption, hidden = fitted_columns(rows, run_ids=run_ids, width=width, wide=wide)
    print_at_width(out, _table(rows, columns, "", []), width)  # fitted to `width` unless --wide
    for paragraph in (", ".join(caption), *_left_out(rows, hidden, width)):
        if paragraph:
            out.print(literal(paragraph, "table.caption"), width=width)
    out.print(Text(legend(columns, per_run=run_ids), style="dim"), width=width)
