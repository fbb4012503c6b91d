"""One column of the runs table: how its value is read from a result row and written for people
and for machines (:mod:`dlscale.report.columns` lists the table's columns)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from dlscale.report import cells

Row = dict[str, Any]
Show = Literal["always", "varying", "present", "on_request", "exports"]


@dataclass(frozen=True)
class Column:
    name: str
    """Machine name: the Markdown and CSV header."""
    label: str
    """Short human label: the terminal and HTML header, and the caption's word for a setting."""
    value: Callable[[Row], Any]
    """Reads the value from a result row; None when the row has none."""
    human: Callable[[Any, Row], str] = cells.plain
    """Text for people, given a value that is not None (and its row)."""
    machine: str = ""
    """Format spec for Markdown and CSV ("" writes str(value))."""
    numeric: bool = False
    """Right-aligned in tables for people."""
    show: Show = "always"
    """In tables for people: always; only when it differs between rows ("varying", else it goes to
    the caption); only when some row has a value ("present"); only when asked for
    ("on_request"); or never ("exports": Markdown/CSV only)."""
    definition: str = ""
    """Its unit and meaning, for the LEGEND; "" when the label says it all."""
    term: str = ""
    """The word the LEGEND defines, where it is not the label."""
    short: str = ""
    """A few words for the legend under a terminal table ("" uses the definition)."""
    keep: int = 5
    """Where the terminal is too narrow, columns of lower ``keep`` are left out first (9:
    never, the columns that tell rows apart)."""
    missing: str = "-"
    """The cell for people of a row without a value (a mark's column: blank)."""
    per_run: str = ""
    """Its words in the legend of a table whose rows are runs (``dlscale ls runs``), where they
    differ from :attr:`short`."""

    def text(self, row: Row) -> str:
        """The cell for people: :attr:`missing` when there is no value."""
        value = self.value(row)
        return self.missing if value is None else self.human(value, row)

    def export(self, row: Row) -> str:
        """The cell for machines: "" when there is no value."""
        value = self.value(row)
        return "" if value is None else format(value, self.machine)
