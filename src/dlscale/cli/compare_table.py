"""The table `dlscale compare` prints for people, fitted to the terminal's width.

One row per matched point: the settings that tell the points apart (backend and workers always,
the others where they differ; a setting the same in every point is said once under the table),
then the figures: each side's img/s (tok/s for token sequences, samples/s where the points
count different units: `dlscale.metrics.units`), the ratio with its 95% interval, the p-value,
the samples, the verdict in words, and the time-to-accuracy ratio where a point has one. Where
the table is wider than the terminal, the figures least needed to read it go first (samples, p,
A's and B's img/s), lowest `CompareColumn.keep` first, and the sentence under the table names
them, as under the runs table (`dlscale.cli.tables`); ``--wide`` shows every column. The
statistics are `dlscale.metrics.compare`'s, defined in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from dlscale.cli.tables import drawn_width, left_out_line, markup
from dlscale.report.columns import COLUMNS, Column
from dlscale.report.layout import options_set, settings_column

if TYPE_CHECKING:
    from dlscale.metrics.compare import Comparison, PointComparison, RatioEstimate
    from dlscale.metrics.units import Rate

SETTINGS = ("backend", "model", "dataset", "scaling", "device", "workers", "threads_per_worker")
"""The runs table's setting columns a comparison shows (where they differ), in its order."""

_BATCH = "{} per worker per step (weak scaling) or per step in all (strong)"


@dataclass(frozen=True, eq=False)
class CompareColumn:
    label: str
    text: Callable[[PointComparison], str]
    """The cell of a point as rich markup (user text escaped: `dlscale.cli.tables.markup`)."""
    keep: int = 9
    """Where the terminal is too narrow, lower ``keep`` goes first (9: never, the settings
    that tell the points apart, the ratio and the verdict)."""
    numeric: bool = False
    short: str = ""
    """Its words in the legend ("": none, a setting)."""


def comparison_table(
    comparison: Comparison, *, width: int, wide: bool
) -> tuple[Table, list[str], str]:
    """The table of the matched points fitted to ``width`` (``wide``: every column), the
    paragraphs under it (the settings every point shares; the columns left out to fit), and
    the legend of the columns it shows."""
    every, same = _layout(comparison.matched)
    columns = every if wide else _fitted(comparison.matched, every, width)
    hidden = [c.label for c in every if c not in columns]
    under = [", ".join(same)] if same else []
    if hidden:
        under.append(left_out_line(hidden, width))
    return _table(comparison.matched, columns), under, legend(columns)


def _fitted(
    points: Sequence[PointComparison], columns: list[CompareColumn], width: int
) -> list[CompareColumn]:
    """``columns`` less those of lowest ``keep`` until the table fits ``width``; then each
    one left out that fits in the room a wider one left, most needed first."""

    def fits(shown: list[CompareColumn]) -> bool:
        return drawn_width(_table(points, shown)) <= width

    shown = list(columns)
    while not fits(shown):
        droppable = [c for c in shown if c.keep < 9]
        if not droppable:
            return shown  # what tells the points apart and the verdicts stay: the terminal folds
        shown.remove(min(droppable, key=lambda c: c.keep))
    for column in sorted((c for c in columns if c not in shown), key=lambda c: -c.keep):
        wider = [c for c in columns if c in shown or c is column]
        if fits(wider):
            shown = wider
    return shown


def legend(columns: Sequence[CompareColumn]) -> str:
    said = [f"{c.label}: {c.short}" for c in columns if c.short]
    more = "Definitions: docs/metrics.md, Comparing two sets of runs."
    return "; ".join(said) + (". " if said else "") + more


def _layout(points: Sequence[PointComparison]) -> tuple[list[CompareColumn], list[str]]:
    """The columns of the comparison, and caption items for the settings every point shares
    (``model tiny``, an option every point set away from its default: ``compression fp16``)."""
    rows = [_as_row(p) for p in points]
    by_name = {c.name: c for c in COLUMNS}
    columns: list[CompareColumn] = []
    same: list[str] = []
    for name in SETTINGS:
        column = by_name[name]
        if column.show == "varying" and len({column.text(row) for row in rows}) <= 1:
            if column.value(rows[0]) is not None:  # thr/w None: as many as the cores allow
                same.append(f"{column.label} {column.text(rows[0])}")
        else:
            columns.append(_setting(column))
    batches = {str(p.config.get("batch_size")) for p in points}
    if len(batches) > 1:
        said = _BATCH.format(_rate(points).noun)
        batch = CompareColumn("batch", _config_text("batch_size"), 8, numeric=True, short=said)
        columns.append(batch)
    else:
        same.append(f"batch {batches.pop()}")
    columns += [_setting(column) for column in settings_column(rows)]
    columns += _figures(points)
    return columns, same + options_set(rows)


def _rate(points: Sequence[PointComparison]) -> Rate:
    """The rate the points' throughputs are shown in: their unit, or samples/s where the
    points count different units."""
    from dlscale.metrics.units import rate_for

    return rate_for(p.sample_unit for p in points)


def _mean(rate: Rate, side: str) -> Callable[[PointComparison], str]:
    """A side's mean throughput (samples per second) in ``rate``."""

    def text(p: PointComparison) -> str:
        mean = p.throughput.mean_a if side == "A" else p.throughput.mean_b
        unit = {"sample_unit": p.sample_unit, "units_per_sample": p.units_per_sample}
        return f"{rate.per_second(mean, unit):.1f}"

    return text


def _figures(points: Sequence[PointComparison]) -> list[CompareColumn]:
    rate = _rate(points)
    figures = [
        CompareColumn(
            f"A {rate.label}",
            _mean(rate, "A"),
            keep=5,
            numeric=True,
            short=f"mean {rate.words} per second in A, the baseline",
        ),
        CompareColumn(
            f"B {rate.label}",
            _mean(rate, "B"),
            keep=6,
            numeric=True,
            short=f"mean {rate.words} per second in B, the candidate",
        ),
        CompareColumn(
            "ratio [95% CI]",
            lambda p: _ratio(p.throughput),
            numeric=True,
            short=f"B/A mean {rate.label} (above 1: B faster) [95% interval of the ratio of "
            f"geometric means: Welch t on log {rate.label}; none: too few samples]",
        ),
        CompareColumn(
            "p",
            lambda p: _p(p.throughput.p_value),
            keep=4,
            numeric=True,
            short=f"two-sided Mann-Whitney U test of the {rate.label} samples",
        ),
        CompareColumn(
            "n A/B",
            lambda p: f"{p.throughput.n_a}/{p.throughput.n_b}",
            keep=3,
            numeric=True,
            short="samples a side: windows, or runs where both sides have 2 or more",
        ),
        CompareColumn(
            "verdict",
            lambda p: verdict_text(p.throughput_verdict.value),
            short="ok, or a change beyond the threshold: tested (p < alpha), or possible "
            "with too few samples to test",
        ),
    ]
    if any(p.tta is not None for p in points):
        figures.append(
            CompareColumn(
                "TTA B/A",
                _tta_text,
                keep=7,
                numeric=True,
                short="time-to-accuracy ratio (below 1: B faster) and its verdict",
            )
        )
    return figures


def _as_row(point: PointComparison) -> dict[str, Any]:
    """A point as the runs table's columns read a result row."""
    threads = point.config.get("threads_per_worker")
    return {"status": "completed", "config": point.config, "threads_per_worker": threads}


def _setting(column: Column) -> CompareColumn:
    keep = max(column.keep, 8)  # a setting that tells points apart outlives any figure but two
    return CompareColumn(
        column.label, lambda p: markup(column.text(_as_row(p))), keep, numeric=column.numeric
    )


def _config_text(key: str) -> Callable[[PointComparison], str]:
    return lambda point: markup(point.config.get(key))


def _table(points: Sequence[PointComparison], columns: Sequence[CompareColumn]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for column in columns:
        if column.numeric:
            table.add_column(column.label, justify="right", no_wrap=True)
        else:
            table.add_column(column.label, overflow="fold")
    for point in points:
        table.add_row(*(column.text(point) for column in columns))
    return table


def _ratio(estimate: RatioEstimate) -> str:
    if estimate.ci_low is None or estimate.ci_high is None:
        return f"{estimate.ratio:.3f}"
    return f"{estimate.ratio:.3f} [{estimate.ci_low:.3f}, {estimate.ci_high:.3f}]"


def _p(p_value: float | None) -> str:
    if p_value is None:
        return "-"
    return "<0.001" if p_value < 0.001 else f"{p_value:.3f}"


def verdict_text(verdict: str) -> str:
    """A verdict in words, as markup: a regression red, a possible one yellow, faster green."""
    if verdict == "regression":
        return "[bold red]REGRESSION[/]"
    if verdict == "possible regression":
        return "[yellow]possible regression[/]"
    if verdict in ("faster", "possibly faster"):
        return f"[green]{verdict}[/]"
    return verdict


def _tta_text(point: PointComparison) -> str:
    if point.tta is None or point.tta_verdict is None:
        return "-"
    text = f"{point.tta.ratio:.3f}"
    if point.tta_verdict.value != "ok":
        text += f" {verdict_text(point.tta_verdict.value)}"
    return text
