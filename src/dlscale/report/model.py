"""The performance model in the report, as figures (docs/perfmodel.md): the model's predictions
overlaid on a study's measured points, with the error of each, and each stored microbench
run's collectives against message size with the ring fit of its all-reduce."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlscale.metrics.units import rate_of
from dlscale.perfmodel.costs import collective_s
from dlscale.perfmodel.links import Link
from dlscale.perfmodel.networks import finite_number, stored_fit
from dlscale.perfmodel.validate import ASSUMED_SHARE, REPLAYED, compare, median_errors, per_engine
from dlscale.report.series import Figure, Row, Series, by_series

LinkOf = Callable[[Row], Link | None]
_DRAWN = ("bytes", "time_s", "busbw_bytes_s")


def predictable(rows: list[Row]) -> list[Row]:
    """Completed points the model could predict, given the network they ran on: 2 workers or
    more whose engine named its synchronization (``sync_pattern``) and recorded its
    gradient's bytes (their compute: their no-sync probe or their baseline's step)."""
    return [
        r
        for r in rows
        if r["status"] == "completed"
        and r["config"]["workers"] >= 2
        and (r.get("metrics") or {}).get("sync_pattern")
        and (r.get("metrics") or {}).get("gradient_bytes")
    ]


def model_figures(rows: list[Row], link_of: LinkOf, sources: dict[str, str]) -> list[Figure]:
    """A study's figures of the model, each point compared once (:func:`compare`): its error on
    each measured point and its forecast (:mod:`dlscale.report.forecast`); none where it
    predicts no point (no network measured)."""
    from dlscale.report.forecast import forecast

    compared = compare(rows, link_of)
    drawn = (prediction(rows, compared, sources), forecast(rows, compared, link_of))
    return [figure for figure in drawn if figure is not None]


def prediction(
    rows: list[Row], compared_rows: list[dict[str, Any]], sources: dict[str, str]
) -> Figure | None:
    """Each predictable point's error on its own engine's algorithm, predicted from its own
    compute on its network (where the algorithm overlaps, a second bar with the ideal
    overlap), one group of bars per point. ``compared_rows``: :func:`compare` of ``rows``;
    ``sources``: each network's words."""
    compared = {row["run_id"]: row for row in compared_rows}
    if not compared:
        return None
    labels, plain, overlap, flags = [], [], [], []
    for name, group in by_series(rows).items():
        for row in group:
            c = compared.get(row["run_id"])
            if c is None:
                continue
            label = f"{name} x{row['config']['workers']}" + (" (noisy)" if c["noisy"] else "")
            labels.append(label)
            plain.append(c["error"])
            overlap.append(c["overlap_error"])
            rate = rate_of(c)  # the point's unit (img/s, tok/s)
            bound = rate.of(c, "overlap_samples_s")
            with_overlap = (
                f", with its overlap bound {bound:,.1f} ({c['overlap_error']:+.1%}; "
                f"{share_words(c)})"
                if bound is not None
                else ""
            )
            measured, predicted = (rate.of(c, f"{k}_samples_s") for k in ("measured", "predicted"))
            flags.append(
                f"{label}: measured {measured:,.1f} {rate.label}; {c['algorithm']} "
                f"predicts {predicted:,.1f} ({c['error']:+.1%}){with_overlap}; "
                f"compute from its {c['compute_from']}, synchronization {c['comm_from']}"
            )
    chosen = list(compared.values())
    for engine, errors in per_engine(chosen).items():
        basis = median_basis([c for c in chosen if c["backend"] == engine])
        flags.append(f"{engine}: median absolute error {errors_in_words(errors)} over {basis}")
    flags.append(
        f"every engine: median absolute error {errors_in_words(median_errors(chosen))} over "
        f"{median_basis(chosen)}"
    )
    networks = "; ".join(f"{where}: {said}" for where, said in sources.items())
    return Figure(
        key="predicted",
        title="The model's error on each measured point",
        x_label="",
        y_label="predicted / measured throughput - 1",
        series=[
            Series(name="its own algorithm, no overlap", x=labels, y=plain, kind="bar"),
            Series(
                name="overlap bound (ideal, or the cycle replayed)", x=labels, y=overlap, kind="bar"
            ),
        ],
        x_categorical=True,
        y_percent=True,
        flags=flags,
        note="Each point's throughput predicted by dlscale's model (docs/perfmodel.md) on its "
        "engine's own algorithm (ring all-reduce, FSDP's all-gathers and reduce-scatter, "
        "parameter servers sync or async) from its own compute without synchronization (its "
        "no-sync probe, else its 1-worker baseline's step) and its gradient's bytes, on "
        f"the network a microbench measured there ({networks}). 0 is exact; above 0 the model "
        "is too optimistic. Where the algorithm overlaps, the measured point should lie "
        "between the two bars.",
    )


def collectives(run: dict[str, Any]) -> list[Figure]:
    """A microbench run's bus bandwidth per collective, and its all-reduce's time against
    message size with the ring fit."""
    rows = [r for r in run.get("rows") or [] if _usable(r)]
    names = list(dict.fromkeys(r["collective"] for r in rows))
    if not names:
        return []
    busbw = [
        Series(
            name=name,
            x=[r["bytes"] for r in rows if r["collective"] == name],
            y=[r["busbw_bytes_s"] / 1e9 for r in rows if r["collective"] == name],
        )
        for name in names
    ]
    figures = [
        Figure(
            key="busbw",
            title="Bus bandwidth against message size",
            x_label="message size (bytes)",
            y_label="busbw (GB/s)",
            series=busbw,
            x_log=True,
            note="busbw: algorithm bandwidth times the collective's bus factor (nccl-tests' "
            "definitions, docs/metrics.md): comparable across collectives and worker counts. "
            "Each point: the median over iterations of the slowest rank's time.",
        )
    ]
    ring = [r for r in rows if r["collective"] == "all_reduce"]
    fit = run.get("fit")
    if ring:
        series = [
            Series(
                name="all_reduce: measured",
                x=[r["bytes"] for r in ring],
                y=[r["time_s"] * 1e3 for r in ring],
                group="all_reduce",
            )
        ]
        net = stored_fit(fit)
        if net is not None:
            processes = run.get("processes")
            p = int(processes) if finite_number(processes) and processes >= 2 else 2
            series.append(
                Series(
                    name="ring fit",
                    x=[r["bytes"] for r in ring],
                    y=[collective_s("all_reduce", r["bytes"], p, net) * 1e3 for r in ring],
                    dashed=True,
                )
            )
        figures.append(
            Figure(
                key="allreduce_time",
                title="All-reduce time against message size",
                x_label="message size (bytes)",
                y_label="time (ms)",
                series=series,
                x_log=True,
                y_log=True,
                note="Dashed: the ring cost 2(p-1) alpha + 2(p-1)/p n beta with the alpha and "
                "beta fitted to these times (docs/perfmodel.md).",
            )
        )
    return figures


def _usable(row: Any) -> bool:
    """A stored row with a name, a size and a time that can be drawn (a hand-edited or damaged
    file's other rows are left out, not drawn wrong)."""
    return (
        isinstance(row, dict)
        and isinstance(row.get("collective"), str)
        and all(finite_number(row.get(k)) and row[k] > 0 for k in _DRAWN)
    )


def span_words(span: tuple[float, float, int] | None) -> str:
    """An interval (:func:`~dlscale.perfmodel.trust.interval`) in words: ``-6%..+0% (2
    points)``, or ``not validated``."""
    if span is None:
        return "not validated"
    low, high, points = span
    return f"{low - 1:+.0%}..{high - 1:+.0%} ({points} point{'s' * (points != 1)})"


def share_words(row: dict[str, Any]) -> str:
    """``ideal: backward 61% measured``: the ideal overlap's window, and whether it was
    measured; or that the row's overlap bound is the engine's cycle replayed
    (:data:`REPLAYED`)."""
    if row.get("overlap_from") == REPLAYED:
        return REPLAYED
    assumed = row.get("backward_share_from", ASSUMED_SHARE) == ASSUMED_SHARE
    how = "assumed" if assumed else "measured"
    return f"ideal: backward {row.get('backward_share', 2 / 3):.0%} {how}"


def errors_in_words(medians: dict[str, float | None]) -> str:
    """``4.3% (overlap bound 2.1%)``: the median without overlap and, where there is one, with
    the overlap bound (ideal, or the engine's cycle replayed: ``overlap_from``)."""
    said = f"{medians['error']:.1%}" if medians["error"] is not None else "none"
    if medians["overlap_error"] is not None:
        said += f" (overlap bound {medians['overlap_error']:.1%})"
    return said


def median_basis(rows: list[dict[str, Any]]) -> str:
    """Which rows :func:`median_errors` took, in words."""
    noisy = sum(1 for r in rows if r.get("noisy"))
    if not noisy:
        return _count(len(rows), "point")
    if noisy == len(rows):
        return f"{_count(len(rows), 'point')}, every one flagged noisy"
    return f"{_count(len(rows) - noisy, 'quiet point')} ({noisy} flagged noisy left out)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
