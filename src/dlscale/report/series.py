"""Figures as plain data (:class:`Figure` of :class:`Series`), and how a study's rows group into
the lines of a plot: one line per backend and per setting that differs between runs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from dlscale.contract.declared_options import scale_keys
from dlscale.contract.run_config import NOT_MATCHED_KEYS

Row = dict[str, Any]
_NOT_A_SERIES_KEY = {"backend", "workers", *NOT_MATCHED_KEYS}
"""Keys that never distinguish one line from another in a study's plots."""


@dataclass(frozen=True, kw_only=True)
class Series:
    name: str
    x: list[Any]
    y: list[float | None]
    kind: str = "line"
    """line | bar"""
    low: list[float | None] | None = None
    high: list[float | None] | None = None
    """A confidence band (lines) or error bar (bars) from low to high."""
    dashed: bool = False
    group: str | None = None
    """Series sharing a group share a colour and a legend entry (a line and its ideal)."""


@dataclass(frozen=True, kw_only=True)
class Figure:
    key: str
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    note: str = ""
    """One or two sentences under the plot saying how to read it."""
    x_categorical: bool = False
    x_log: bool = False
    """A logarithmic x axis (message sizes); else a worker axis ticked at the counts drawn."""
    y_log: bool = False
    stacked: bool = False
    y_percent: bool = False
    flags: list[str] = field(default_factory=list)
    """Findings to list under the figure (e.g. stragglers)."""


def x_ticks(figure: Figure) -> list[Any]:
    """Tick positions of a numeric worker axis: exactly the worker counts plotted."""
    return sorted({x for s in figure.series for x in s.x})


def series_label(row: Row, varying: list[str]) -> str:
    cfg = row["config"]
    extra = ", ".join(f"{key}={cfg[key]}" for key in varying if key in cfg)
    return f"{cfg['backend']} ({extra})" if extra else str(cfg["backend"])


def varying_keys(rows: list[Row]) -> list[str]:
    """Settings that differ between the completed runs that have them (failed runs draw no
    line; an option only some backends have varies only if it differs among those)."""
    done = [r for r in rows if r["status"] == "completed"]
    keys = dict.fromkeys(k for r in done for k in r["config"] if k not in _NOT_A_SERIES_KEY)
    scale = set(scale_keys())  # a 1-worker point runs on one node whatever its line's count

    def values(key: str) -> set[str]:
        return {
            str(r["config"][key])
            for r in done
            if key in r["config"] and (key not in scale or r["config"].get("workers") != 1)
        }

    return [k for k in keys if len(values(k)) > 1]


def by_series(rows: list[Row]) -> dict[str, list[Row]]:
    """Completed rows per line of a plot, each line sorted by worker count."""
    varying = varying_keys(rows)
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row["status"] == "completed":
            groups[series_label(row, varying)].append(row)
    return {name: sorted(g, key=lambda r: r["config"]["workers"]) for name, g in groups.items()}
