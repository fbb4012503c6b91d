"""The model's forward predictions in the report (docs/perfmodel.md, "In the report"): each line
of a study whose points the model predicts, carried from its point of the most workers to
:data:`FORECAST_TO` workers on its own pattern and network, each predicted count with the span
that pattern's validating points in the study measured on that network kind
(:func:`~dlscale.perfmodel.trust.interval`), or said to be not validated."""

from __future__ import annotations

from typing import Any

from dlscale.contract.errors import UserError
from dlscale.metrics.units import common_rate
from dlscale.perfmodel.predict import Predicted, Profile, predict
from dlscale.perfmodel.trust import interval, kind_words, row_kind
from dlscale.report.model import LinkOf, span_words
from dlscale.report.series import Figure, Row, Series, by_series

FORECAST_TO = 256
"""The most workers a line is carried to (powers of 2 from its measured count)."""


def forecast(
    rows: list[Row], compared_rows: list[dict[str, Any]], link_of: LinkOf
) -> Figure | None:
    """Each line's measured throughput (solid) and its forecast (dashed, with the span its
    pattern was measured within on the line's network kind as a band); ``compared_rows``:
    :func:`~dlscale.perfmodel.validate.compare` of ``rows`` on ``link_of``'s networks; ``None``
    where the model predicts no point of the study."""
    compared = {row["run_id"]: row for row in compared_rows}
    if not compared:
        return None
    rate = common_rate(compared_rows)
    series: list[Series] = []
    flags: list[str] = []
    for name, group in by_series(rows).items():
        done = [compared[r["run_id"]] for r in group if r["run_id"] in compared]
        if not done:
            continue
        last = max(done, key=lambda c: c["workers"])
        point = next(r for r in group if r["run_id"] == last["run_id"])
        predicted = _carried(last, link_of(point))
        if not predicted:
            continue
        span = interval(compared_rows, last["algorithm"], row_kind(last), last["servers"] or 1)
        measured = [r for r in group if rate.of(r.get("metrics")) is not None]
        series.append(
            Series(
                name=f"{name}: measured",
                x=[r["config"]["workers"] for r in measured],
                y=[rate.of(r.get("metrics")) for r in measured],
                group=name,
            )
        )
        ahead = [rate.per_second(p.throughput_samples_s, last) for p in predicted]
        series.append(
            Series(
                name=f"{name}: predicted ({last['algorithm']})",
                x=[p.workers for p in predicted],
                y=list(ahead),
                low=None if span is None else [v * span[0] for v in ahead],
                high=None if span is None else [v * span[1] for v in ahead],
                dashed=True,
                group=name,
            )
        )
        end = predicted[-1]
        flags.append(
            f"{name}: {last['algorithm']} from its {last['workers']}-worker point on the "
            f"{kind_words(row_kind(last))}'s network: {end.workers} workers "
            f"{ahead[-1]:,.1f} {rate.label}, {end.efficiency:.0%} of its compute alone; measured "
            f"within {span_words(span)} on this network"
        )
    if not series:
        return None
    return Figure(
        key="forecast",
        title=f"The model's forecast to {FORECAST_TO} workers",
        x_label="workers",
        y_label=f"throughput ({rate.label})",
        series=series,
        x_log=True,
        y_log=True,
        flags=flags,
        note="Both axes logarithmic: ideal scaling is a straight line rising as fast as the "
        "workers. Solid: each line's measured points. Dashed: dlscale's model "
        "(docs/perfmodel.md) carried from the line's point of the most workers on its own "
        "pattern, with that point's compute, gradient and messages, on the network a "
        "microbench measured there (as many ranks a node as that point had). The band is the "
        "span the pattern's points in this study measured against their predictions on that "
        "network; none: not validated.",
    )


def _carried(row: dict[str, Any], link: Any) -> list[Predicted]:
    """A validated point's profile predicted from its worker count to :data:`FORECAST_TO` in
    powers of 2 (none where its figures give no finite prediction)."""
    counts, p = [row["workers"]], 2 ** row["workers"].bit_length()
    while p <= FORECAST_TO:
        counts.append(p)
        p *= 2
    if link is None or len(counts) < 2:
        return []
    try:
        profile = Profile(
            compute_s=row["compute_ms"] / 1e3, batch=row["batch"],
            gradient_bytes=row["gradient_bytes"], backward_share=row["backward_share"],
            messages=row["messages"] or 1,
        )  # fmt: skip
        return predict(profile, row["algorithm"], counts, link, row["servers"] or 1)
    except UserError:
        return []
