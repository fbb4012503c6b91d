"""Figures as plain data: what to draw for a study, independent of the plotting library.

Each builder takes the study's result rows (with speedups, see metrics/scaling.py) and
returns a :class:`Figure` or ``None`` when the data for it is absent (e.g. no accuracy target).
"""

from __future__ import annotations

import statistics
from typing import Any

from dlscale.metrics.figures import Figures
from dlscale.metrics.units import CI95, THROUGHPUT, Rate, common_rate
from dlscale.report.series import Figure, Row, Series, by_series, series_label, varying_keys

STRAGGLER_RATIO = 1.05
"""A rank whose mean step time exceeds the median rank's by this factor is flagged."""


def _m(row: Row, key: str) -> Any:
    return (row.get("metrics") or {}).get(key)


def _scaling_word(rows: list[Row]) -> str:
    modes = {r["config"]["scaling"] for r in rows}
    return "/".join(sorted(modes)) + " scaling"


def _rate_of(rate: Rate, row: Row, key: str = THROUGHPUT) -> Any:
    return rate.of(row.get("metrics"), key)


def _axis(rate: Rate) -> str:
    """A throughput axis's words: ``images/s (all workers)``, ``tokens/s``, ``samples/s``."""
    return f"{rate.words}/s (all workers)"


def throughput(rows: list[Row]) -> Figure | None:
    series = []
    rate = common_rate(rows)  # each point in the rows' unit (samples/s where they mix)
    for name, group in by_series(rows).items():
        x = [r["config"]["workers"] for r in group]
        y = [_rate_of(rate, r) for r in group]
        ci = [_rate_of(rate, r, CI95) for r in group]
        low = [None if c is None or v is None else v - c for v, c in zip(y, ci, strict=True)]
        high = [None if c is None or v is None else v + c for v, c in zip(y, ci, strict=True)]
        cut = [w for w, b in zip(x, low, strict=True) if b is not None and b < 0]
        low = [None if b is None else max(b, 0.0) for b in low]  # no rate is below 0
        label = name + _marked(cut, "interval wider than the mean, cut at 0")
        label += _doubted(group, rows)
        series.append(Series(name=label, x=x, y=y, low=low, high=high, group=name))
        base = next((r for r in group if r.get("speedup") is not None), None)
        if base is not None and base.get("speedup") and len(x) > 1:
            one = _rate_of(rate, base) / base["speedup"]  # the baseline's throughput
            series.append(
                Series(
                    name=f"{name}: ideal (linear)",
                    x=x,
                    y=[one * w for w in x],
                    dashed=True,
                    group=name,
                )
            )
    if not series:
        return None
    return Figure(
        key="throughput",
        title=f"Throughput against workers ({_scaling_word(rows)})",
        x_label="workers",
        y_label=_axis(rate),
        series=series,
        note="Bands: 95% confidence interval over runs (over windows for a point with a "
        "single run). Dashed: the 1-worker baseline times the number of workers.",
    )


def _marked(workers: list[int], words: str) -> str:
    """What a series' name says of its points at ``workers`` (nothing when none)."""
    if not workers:
        return ""
    return f" ({words} at {', '.join(map(str, workers))} worker{'s' if workers != [1] else ''})"


def _doubted(group: list[Row], rows: list[Row]) -> str:
    """The mark of a series' points whose comparison the finding does not state
    (`dlscale.report.doubts`): its band, however wide, is then no measurement to read."""
    from dlscale.report.doubts import doubts

    marked = []
    for row in group:
        if row.get("speedup") is None or row["config"]["workers"] < 2:
            continue
        base = next((r for r in rows if r.get("run_ids") == row.get("baseline_run_ids")), None)
        if doubts(row, base, rows, lambda point: point["config"]["backend"]):
            marked.append(row["config"]["workers"])
    return _marked(marked, "not measured reliably, see the finding")


def _lines(rows: list[Row], value: Any, interval: str | None = None) -> list[Series]:
    """One line per series of ``value(row)`` against workers, where the value exists, with
    the band ``row[interval]`` (low, high) where the row has one."""
    series = []
    for name, group in by_series(rows).items():
        pts = [r for r in group if value(r) is not None]
        if pts:
            bands = [r.get(interval) if interval else None for r in pts]
            series.append(
                Series(
                    name=name + _doubted(pts, rows),
                    x=[r["config"]["workers"] for r in pts],
                    y=[value(r) for r in pts],
                    low=[b[0] if b else None for b in bands] if interval else None,
                    high=[b[1] if b else None for b in bands] if interval else None,
                    group=name,
                )
            )
    return series


def speedup(rows: list[Row]) -> Figure | None:
    series = _lines(rows, lambda r: r.get("speedup"), "speedup_ci95")
    if not series:
        return None
    most = max(max(s.x) for s in series)
    series.append(Series(name="ideal", x=[1, most], y=[1.0, float(most)], dashed=True))
    return Figure(
        key="speedup",
        title=f"Speedup ({_scaling_word(rows)})",
        x_label="workers",
        y_label="speedup over 1 worker",
        series=series,
        note="Throughput over the 1-worker baseline with the same threads per worker (the "
        "plain model when measured); bands: 95% interval (Fieller, over runs).",
    )


def efficiency(rows: list[Row]) -> Figure | None:
    series = _lines(rows, lambda r: r.get("efficiency"), "efficiency_ci95")
    if not series:
        return None
    return Figure(
        key="efficiency",
        title=f"Parallel efficiency ({_scaling_word(rows)})",
        x_label="workers",
        y_label="efficiency",
        series=series,
        y_percent=True,
        note="Speedup divided by the number of workers; 100% is linear scaling. Bands: 95% "
        "interval.",
    )


def mfu(rows: list[Row]) -> Figure | None:
    series = _lines(rows, lambda r: Figures.of(r).mfu)
    if not series:
        return None
    bases = sorted({b for r in rows if (b := Figures.of(r).mfu_basis) and Figures.of(r).mfu})
    return Figure(
        key="mfu",
        title=f"Model FLOPs utilization ({_scaling_word(rows)})",
        x_label="workers",
        y_label="MFU",
        series=series,
        y_percent=True,
        note="Training FLOP/s over the peak FLOP/s of every worker's device, "
        + "; ".join(bases)
        + " (docs/metrics.md, MFU).",
    )


def breakdown(rows: list[Row]) -> Figure | None:
    labels, compute, wait, comm = [], [], [], []
    for name, group in by_series(rows).items():
        for row in group:
            step = _m(row, "step_time_p50_ms")
            if step is None:
                continue
            input_ms = _m(row, "input_time_p50_ms") or 0.0
            comm_ms = (_m(row, "exposed_comm_fraction") or 0.0) * step
            # a part not measured (a script's input wait) is not 0: it is left in compute
            absent = [part for part, key in (("input", "input_time_p50_ms"),
                      ("comm", "exposed_comm_fraction")) if _m(row, key) is None]  # fmt: skip
            unmeasured = f" ({', '.join(absent)} not measured)" if absent else ""
            labels.append(f"{name} x{row['config']['workers']}{unmeasured}")
            wait.append(input_ms)
            comm.append(comm_ms)
            compute.append(max(0.0, step - input_ms - comm_ms))
    if not labels:
        return None
    return Figure(
        key="breakdown",
        title="Where a step's time goes",
        x_label="run",
        y_label="ms per step (median)",
        x_categorical=True,
        stacked=True,
        series=[
            Series(name="compute", x=labels, y=compute, kind="bar"),
            Series(name="input wait", x=labels, y=wait, kind="bar"),
            Series(name="exposed communication", x=labels, y=comm, kind="bar"),
        ],
        note="Median step split into the time to get a batch, the communication not hidden "
        "behind computation (step against the same step without gradient sync), and the rest "
        "(with a part a bar says was not measured).",
    )


def time_to_accuracy(rows: list[Row]) -> Figure | None:
    series = _lines(rows, lambda r: _m(r, "time_to_accuracy_s"))
    if not series:
        return None
    target = next(r["config"]["target_accuracy"] for r in rows if r["config"]["target_accuracy"])
    return Figure(
        key="tta",
        title=f"Time to {target:.0%} accuracy",
        x_label="workers",
        y_label="seconds",
        series=series,
        note="Wall time from the first training step to the first evaluation at or "
        "above the target.",
    )


def tta_decomposition(rows: list[Row]) -> Figure | None:
    labels, tta, hardware, stats = [], [], [], []
    for name, group in by_series(rows).items():
        for row in group:
            if row["config"]["workers"] > 1 and row.get("tta_speedup") is not None:
                labels.append(f"{name} x{row['config']['workers']}")
                tta.append(row["tta_speedup"])
                hardware.append(row.get("speedup"))
                stats.append(row.get("statistical_efficiency"))
    if not labels:
        return None
    return Figure(
        key="tta_split",
        title="Time-to-accuracy speedup = throughput speedup x statistical efficiency",
        x_label="run",
        y_label="ratio to 1 worker",
        x_categorical=True,
        series=[
            Series(name="time-to-accuracy speedup", x=labels, y=tta, kind="bar"),
            Series(name="throughput speedup (hardware)", x=labels, y=hardware, kind="bar"),
            Series(
                name="statistical efficiency (epochs at 1 / epochs at N)",
                x=labels,
                y=stats,
                kind="bar",
            ),
        ],
        note="More workers reach an accuracy sooner only as far as both throughput scales and "
        "the larger global batch needs no more epochs.",
    )


def curves(rows: list[Row], *, y: str, x: str) -> Figure | None:
    """Evaluation accuracy or loss against epochs or wall time, one line per run."""
    varying = varying_keys(rows)
    series = []
    for row in rows:
        history = _m(row, "eval_history") or []
        points = [h for h in history if h.get("epoch")]
        if row["status"] != "completed" or not points:
            continue
        series.append(
            Series(
                name=f"{series_label(row, varying)} x{row['config']['workers']}",
                x=[h["epoch"] if x == "epoch" else h["elapsed_s"] for h in points],
                y=[h[y] for h in points],
            )
        )
    if not series:
        return None
    what = "Accuracy" if y == "accuracy" else "Evaluation loss"
    return Figure(
        key=f"{y}_by_{x}",
        title=f"{what} against {'epochs' if x == 'epoch' else 'time'}",
        x_label="epoch" if x == "epoch" else "seconds since training started",
        y_label="accuracy" if y == "accuracy" else "cross-entropy (nats)",
        series=series,
        y_percent=y == "accuracy",
        note="Evaluated on the held-out set after each epoch.",
    )


def train_loss(rows: list[Row]) -> Figure | None:
    varying = varying_keys(rows)
    series = []
    for row in rows:
        losses = _m(row, "train_loss_by_window") or []
        if row["status"] == "completed" and len(losses) > 1:
            series.append(
                Series(
                    name=f"{series_label(row, varying)} x{row['config']['workers']}",
                    x=list(range(1, len(losses) + 1)),
                    y=losses,
                )
            )
    if not series:
        return None
    unit = "epoch" if any(r["config"]["epochs"] for r in rows) else "measurement window"
    return Figure(
        key="train_loss",
        title=f"Training loss by {unit}",
        x_label=unit,
        y_label="cross-entropy (nats)",
        series=series,
        note="Mean training loss over the steps of each window and all workers.",
    )


def rank_spread(rows: list[Row]) -> Figure | None:
    varying = varying_keys(rows)
    series, flags = [], []
    for row in rows:
        per_rank = _m(row, "rank_step_time_mean_ms") or {}
        if row["status"] != "completed" or len(per_rank) < 2:
            continue
        name = f"{series_label(row, varying)} x{row['config']['workers']}"
        ranks = sorted(per_rank, key=int)
        times = [per_rank[r] for r in ranks]
        series.append(Series(name=name, x=[int(r) for r in ranks], y=times))
        middle = statistics.median(times)
        for rank, value in zip(ranks, times, strict=True):
            if value > STRAGGLER_RATIO * middle:
                flags.append(
                    f"straggler: rank {rank} of {name} averages {value:.1f} ms per step, "
                    f"{value / middle - 1:.0%} above the median rank ({middle:.1f} ms)"
                )
    if not series:
        return None
    return Figure(
        key="ranks",
        title="Per-rank step time",
        x_label="rank",
        y_label="mean step time (ms, this rank's own)",
        series=series,
        flags=flags,
        note=f"Each rank's own mean step time; ranks above {STRAGGLER_RATIO:.2f} x the "
        "median rank are flagged as stragglers.",
    )


def comparison(rows: list[Row]) -> Figure | None:
    groups = by_series(rows)
    if len(groups) < 2:
        return None
    workers = sorted({r["config"]["workers"] for g in groups.values() for r in g})
    rate = common_rate(rows)
    series = []
    for name, group in groups.items():
        by_workers = {r["config"]["workers"]: r for r in group}
        ys = [_rate_of(rate, by_workers[w]) if w in by_workers else None for w in workers]
        ci = [_rate_of(rate, by_workers[w], CI95) if w in by_workers else None for w in workers]
        series.append(
            Series(
                name=name,
                x=[f"{w} workers" for w in workers],
                y=ys,
                kind="bar",
                low=[
                    None if v is None or c is None else v - c for v, c in zip(ys, ci, strict=True)
                ],
                high=[
                    None if v is None or c is None else v + c for v, c in zip(ys, ci, strict=True)
                ],
            )
        )
    return Figure(
        key="side_by_side",
        title="Backends side by side",
        x_label="",
        y_label=_axis(rate),
        series=series,
        x_categorical=True,
        note="Same model and data; error bars: 95% confidence interval.",
    )


def study_figures(rows: list[Row]) -> list[Figure]:
    builders = (
        throughput,
        speedup,
        efficiency,
        mfu,
        breakdown,
        comparison,
        time_to_accuracy,
        tta_decomposition,
        lambda r: curves(r, y="accuracy", x="epoch"),
        lambda r: curves(r, y="accuracy", x="elapsed"),
        lambda r: curves(r, y="loss", x="epoch"),
        lambda r: curves(r, y="loss", x="elapsed"),
        train_loss,
        rank_spread,
    )
    return [f for f in (build(rows) for build in builders) if f is not None]
