"""How a table for people is laid out from `dlscale.report.columns.COLUMNS`: which columns it
shows (settings equal in every row go to the caption, columns empty in every row are left out),
the short legend of those it shows, and a column found by the name a person gives it."""

from __future__ import annotations

from collections.abc import Sequence

from dlscale.metrics.units import Rate
from dlscale.report.columns import COLUMNS, Column, Row, columns_for, columns_in


def legend(columns: Sequence[Column], *, per_run: bool = False) -> str:
    """The short legend of the columns a table shows, and where the rest is defined;
    ``per_run``: each row is one run."""

    def words(c: Column) -> str:
        return (c.per_run if per_run else "") or c.short or c.definition

    said = [f"{c.term or c.label}: {words(c)}" for c in columns if c.definition]
    more = "More: dlscale explain COLUMN, docs/metrics.md."
    return "; ".join(said) + (". " if said else "") + more


def find_column(name: str) -> Column:
    """The column a person names by its label (``eff.``, ``vs 1×all``, ``TTA``, ``tok/s``) or
    its machine name (``efficiency``), case and a trailing dot aside; KeyError otherwise."""
    wanted = name.strip().lower().rstrip(".")
    for column in every_column():
        if wanted and wanted in {
            column.name,
            column.label.lower().rstrip("."),
            column.term.lower(),
        }:
            return column
    raise KeyError(name)


def human_layout(rows: Sequence[Row], *, run_ids: bool = False) -> tuple[list[Column], list[str]]:
    """The columns a table for people shows, and caption items ("data digits") for the settings
    that are the same in every row."""
    shown: list[Column] = []
    caption: list[str] = []
    columns = columns_for(rows)  # the throughput in the rows' unit
    for column in (*columns[:2], *settings_column(rows), *columns[2:]):
        if column.show == "exports" or (column.show == "on_request" and not run_ids):
            continue
        if column.show == "present" and all(column.value(row) is None for row in rows):
            continue
        listed = run_ids and column.name == "status"  # a list of runs says each one's state
        if column.show == "varying" and not listed and len({column.text(r) for r in rows}) <= 1:
            if rows and column.text(rows[0]):  # an empty mark (no MFU's basis) is not said
                caption.append(f"{column.label} {column.text(rows[0])}")
            continue
        shown.append(column)
    return shown, caption + options_set(rows)


def every_column() -> list[Column]:
    """Every column of every rate, those of images first, each name once."""
    from dlscale.contract.workload import KINDS

    found: dict[str, Column] = {}
    for rate in [Rate(kind.unit) for kind in KINDS.values()] + [Rate(None)]:
        for column in columns_in(rate):
            found.setdefault(column.name, column)
    return list(found.values())


_SHOWN_ELSEWHERE = {c.name for c in COLUMNS} | {"batch_size"}


def options_set(rows: Sequence[Row]) -> list[str]:
    """Caption items for the plug-ins' options (and the core keys of :data:`_CORE_SAID`) every
    row that has them ran away from their default, the same in each (``compression fp16``,
    ``precision float64``): a setting the table does not tell apart is still said."""
    from dlscale.contract.declared_options import declared_options
    from dlscale.contract.run_config import config_defaults
    from dlscale.report.series import varying_keys

    defaults = {key: owners[0][1].default for key, owners in declared_options().items()}
    defaults.update({key: config_defaults()[key] for key in _CORE_SAID})
    varying = set(varying_keys(list(rows)))
    done = [r.get("config") or {} for r in rows if r.get("status") == "completed"]
    items = []
    for key in dict.fromkeys(k for config in done for k in config):
        if key not in defaults or key in varying or key in _SHOWN_ELSEWHERE:
            continue
        values = {str(config[key]) for config in done if key in config}
        if len(values) == 1 and values != {str(defaults[key])}:
            items.append(f"{key} {values.pop()}")
    return items


_CORE_SAID = ("precision", "image_size", "dropout", "loader_only")
"""Core keys that change what a step computes, said in a caption where every row ran away from
the default the same way (``precision float64``), as a plug-in's option is."""


def settings_column(rows: Sequence[Row]) -> list[Column]:
    """The other settings that differ between the rows (``compression=fp16``, ``ps_mode``...),
    so that two rows of one backend can be told apart; none when nothing else differs."""
    from dlscale.report.series import varying_keys

    keys = [k for k in varying_keys(list(rows)) if k not in _SHOWN_ELSEWHERE]
    if not keys:
        return []

    def value(row: Row) -> str | None:
        config = row.get("config") or {}
        return ", ".join(f"{k}={config[k]}" for k in keys if k in config) or None

    return [Column("settings", "settings", value, keep=9)]
