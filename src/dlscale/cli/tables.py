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

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dlscale.contract.text import shell_command, visible
from dlscale.report.columns import LEGEND, human_layout

__all__ = [
    "LEGEND",
    "cell",
    "console",
    "literal",
    "markup",
    "points_table",
    "results_command",
    "say",
    "visible",
]


def console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output is redirected, and
    turns no ``:name:`` in user text into an emoji."""
    probe = Console(stderr=stderr, emoji=False)
    return probe if probe.is_terminal else Console(stderr=stderr, width=240, emoji=False)


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


def results_command(*words: str, results: Any) -> str:
    """``dlscale WORDS --results RESULTS``, to paste into a shell: quoted, so that a results
    path with a space, ``;`` or ``$(...)`` stays one word and runs nothing."""
    return shell_command(["dlscale", *words, "--results", str(results)])


def points_table(
    rows: list[dict[str, Any]], title: str = "dlscale results", *, run_ids: bool = False
) -> Table:
    """One row per run; settings that are the same in every row go to the caption."""
    columns, caption = human_layout(rows, run_ids=run_ids)
    table = Table(
        title=literal(title, "table.title"),
        title_justify="left",
        caption=markup(", ".join(caption)) or None,
        caption_justify="left",
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
