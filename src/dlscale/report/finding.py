"""What a study found, in sentences: written from its stored points (rows of
`dlscale.metrics.scaling.add_scaling`), for any study, each figure with the interval it was
stored with. Nothing here claims what was not measured: a point without an interval says so, a
figure that is not there (communication of a 1-process loop, accuracy of synthetic data) is not
mentioned, and a loaded point carries its note. The end of `dlscale run` and the top of the
report print these first.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from dlscale.metrics.figures import Figures, memory_words, mfu_percent
from dlscale.metrics.scaling import describe, throughput_ratio
from dlscale.metrics.units import CI95, THROUGHPUT, rate_of, sample_unit, shown
from dlscale.report import cells
from dlscale.report.doubts import doubts, reference_doubts
from dlscale.report.series import series_label, varying_keys

Row = dict[str, Any]

MOST = 6
"""Sentences about single points before the rest is left to the table."""

FEW = 3
"""Scaled points said in full; past this many each gets its headline only (speedup, baseline,
efficiency), the rest of what it measured being in the table's columns."""

UNRELIABLE = "not measured reliably"
"""What the finding says, first, of a comparison `dlscale.report.doubts` doubts."""

_NOT_IN_A_NAME = {"threads_per_worker"}
"""Settings a point's name leaves out: the reference point's threads are said where it is used."""


def findings(rows: list[Row]) -> list[str]:
    """The study's findings, most workers first: each scaled point's speedup over its
    baseline with its efficiency, exposed communication and the same machine as one worker;
    then, where several backends ran at one worker count, which was fastest and how the others
    compare; then what failed."""
    done = [r for r in rows if r["status"] == "completed" and _finite(_samples_s(r))]
    varying = [k for k in varying_keys(rows) if k not in _NOT_IN_A_NAME]
    out: list[str] = []
    scaled = sorted(
        (r for r in done if r["config"]["workers"] > 1 and _finite(r.get("speedup"))),
        key=lambda r: (-r["config"]["workers"], -r["speedup"]),
    )
    full = len(scaled) <= FEW
    said = [_scaled(r, rows, varying, full=full) for r in scaled]
    said.sort(key=lambda text: UNRELIABLE not in text)  # what cannot be trusted first, kept
    out += said[:MOST]
    if len(scaled) > MOST:
        out.append(f"{len(scaled) - MOST} more scaled point(s): see the table")
    if not full:
        out.append("each point's communication, accuracy and notes: the table")
    out += _side_by_side(done, varying, intervals=full)
    if not scaled and done:
        out += [_single(r, varying) for r in done[:MOST]]
    out += _utilization(done, varying)
    out += sorted({m for r in done if (m := Figures.of(r).mfu_missing)})[:2]  # said once
    failed = [r for r in rows if r["status"] != "completed"]
    if failed:
        names = sorted({_name(r, varying, workers=True) for r in failed})
        out.append(f"{len(failed)} run(s) did not complete: {', '.join(names)}")
    return out


def _finite(value: Any) -> bool:
    """A figure to state: a positive finite number (a damaged result's NaN is not one)."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _samples_s(row: Row) -> float | None:
    return (row.get("metrics") or {}).get(THROUGHPUT)


def _rate(row: Row) -> str:
    """The row's throughput in its unit: ``240.0 img/s``, ``15360.0 tok/s``."""
    return shown(row.get("metrics"))


def _name(row: Row, varying: list[str], *, workers: bool = False) -> str:
    name = series_label(row, varying)
    if not workers:
        return name
    count = row["config"]["workers"]
    return f"{name} at {count} worker{'s' if count != 1 else ''}"


def _interval(low_high: Any, spec: str = ".2f", unit: str = "") -> str:
    if not low_high:
        return ""
    low, high = cells.feasible(low_high)
    return f" [{low:{spec}}{unit}, {high:{spec}}{unit}]"


def _scaled(row: Row, rows: list[Row], varying: list[str], *, full: bool = True) -> str:
    """``torch-ddp at 2 workers: 1.93x [1.50, 2.37] over torch-single at 1 worker (96%
    efficient); ...``: the headline, and unless not ``full`` what else the point measured."""
    base = _by_runs(rows, row.get("baseline_run_ids"))
    over = _name(base, varying, workers=True) if base else row.get("baseline") or "its baseline"
    why = doubts(row, base, rows, lambda point: _name(point, varying, workers=True))
    if why:  # no ratio stated as found: what is wrong with it, and what to do
        return (
            f"{_name(row, varying, workers=True)} over {over}: {UNRELIABLE} "
            f"({'; '.join(why)}); rerun with --repeats 5 on a quiet machine"
        )
    text = f"{_name(row, varying, workers=True)}: {row['speedup']:.2f}x"
    if row.get("speedup_ci95"):
        text += _interval(row["speedup_ci95"])
        if row.get("interval") == "windows":
            text += (" (over one run's windows, which are not independent)" if full
                     else " (one run's windows)")  # fmt: skip
    else:
        text += " (no interval: too few samples)"
    text += f" over {over} ({row['efficiency']:.0%} efficient{_beyond_linear(row)})"
    if not full:
        return text + ("; see its notes" if cells.notes(row) else "")
    parts = [text]
    comm = _comm(row)
    if comm:
        parts.append(comm)
    machine = _machine(row, rows)
    if machine:
        parts.append(machine)
    parts += _accuracy(row)
    notes = cells.notes(row)
    if notes:
        parts.append(f"note: {notes}")
    return "; ".join(parts)


def _beyond_linear(row: Row) -> str:
    """Words for an efficiency over 100% whose interval holds 100% (a drifting machine's
    means); one beyond its interval is not stated as found at all (:mod:`.doubts`)."""
    interval = row.get("efficiency_ci95")
    if row["efficiency"] > 1 and interval and interval[0] <= 1:
        return ", but its interval holds 100%: not shown faster than linear"
    return ""


def _comm(row: Row) -> str:
    metrics = row.get("metrics") or {}
    value = metrics.get("exposed_comm_fraction")
    if value is None:
        return ""
    half = metrics.get("exposed_comm_ci95")
    shown = f"{value:.0%}" + (f" ±{half:.0%}" if half is not None else "")
    if metrics.get("exposed_comm_significant") is False:
        return f"exposed communication not significant ({shown} of a step)"
    return f"exposed communication {shown} of a step"


def _machine(row: Row, rows: list[Row]) -> str:
    """How the point compares with the same machine used as one worker with every core."""
    ratio = row.get("machine_speedup")
    if ratio is None:
        return ""
    reference = next(
        (r for r in rows if r["status"] == "completed" and describe(r) == row["machine_baseline"]),
        None,
    )
    threads = reference.get("threads_per_worker") if reference else None
    who = f"one {threads}-thread worker" if threads else "one worker with every core"
    ci = row.get("machine_speedup_ci95")
    why = reference_doubts(reference, ci) if reference else []
    if why:
        return f"the same machine as {who}: {UNRELIABLE} ({'; '.join(why)})"
    shown = f"{ratio:.2f}x{_interval(ci)}"
    if not ci:
        return f"{shown} the speed of the same machine as {who} (no interval: too few samples)"
    low, high = ci
    if low > 1:
        return f"faster than the same machine as {who} ({shown})"
    if high < 1:
        return f"slower than the same machine as {who} ({shown})"
    return f"as fast as the same machine as {who} ({shown}, not distinguishable)"


def _accuracy(row: Row) -> list[str]:
    metrics, config = row.get("metrics") or {}, row.get("config") or {}
    out = []
    tokens = sample_unit(metrics) == "token"
    if metrics.get("eval_accuracy") is not None:
        what = "next-token accuracy" if tokens else "accuracy"
        out.append(f"{what} {metrics['eval_accuracy']:.1%}")
    if metrics.get("time_to_accuracy_s") is not None:
        target = config.get("target_accuracy")
        to = f" to {target:.0%}" if isinstance(target, float) else ""
        out.append(f"{metrics['time_to_accuracy_s']:.1f} s{to}")
    elif config.get("target_accuracy") is not None and metrics.get("eval_accuracy") is not None:
        out.append(f"never reached {config['target_accuracy']:.0%}")
    loss = metrics.get("eval_loss")
    if isinstance(loss, float) and tokens:  # a language model's
        out.append(f"held-out loss {loss:.3f} a token (perplexity {math.exp(min(loss, 700)):.1f})")
    target = config.get("target_loss")
    if metrics.get("time_to_loss_s") is not None:
        out.append(f"{metrics['time_to_loss_s']:.1f} s to loss {target}")
    elif target is not None and loss is not None:
        out.append(f"never reached loss {target}")
    return out


def _single(row: Row, varying: list[str]) -> str:
    """A point of a study that scaled nothing: its throughput and what else it measured."""
    metrics = row.get("metrics") or {}
    half = rate_of(metrics).of(metrics, CI95)
    over = " over one run's windows" if row.get("interval") == "windows" else ""
    spread = f" ±{half:.1f}{over}" if half is not None else ""
    parts = [f"{_name(row, varying, workers=True)}: {_rate(row)}{spread}"]
    return "; ".join(parts + _accuracy(row))


def _utilization(done: list[Row], varying: list[str]) -> list[str]:
    """``MFU and peak memory per process: torch-ddp at 1 worker 47.0%, 405 MiB; ... (MFU of
    measured fp32 matmul peak, 1 thread)``: every point's, with the peaks they are of (a study
    of many points: the table); an impossible MFU is never stated, and why a point has none is
    said once."""
    said = []
    threads = len({r.get("threads_per_worker") for r in done}) > 1  # say each point's
    for row in done:
        figures = Figures.of(row)
        parts = [mfu_percent(figures.mfu)] if figures.mfu is not None else []
        parts += [memory_words(figures.rss_peak_bytes)] if figures.rss_peak_bytes else []
        name = _name(row, varying, workers=True)
        if threads and row.get("threads_per_worker"):
            name += f" x {row['threads_per_worker']} thr"
        if parts:
            said.append(f"{name} {', '.join(parts)}")
    if not said or len(said) > 2 * MOST:
        return []
    peaks = {  # each basis with its figure, so that every MFU can be recomputed from the line
        f.mfu_basis: f.peak_flops_per_worker
        for f in map(Figures.of, done)
        if f.mfu is not None and f.mfu_basis and f.peak_flops_per_worker
    }
    bases = {f"{basis}: {_gflops(peak)}" for basis, peak in peaks.items()}
    common = {re.sub(r", \d+ threads?$", "", basis) for basis in peaks}
    if len(peaks) > 1 and len(common) == 1:  # the same peak, each with its worker's threads
        each = ", ".join(
            f"{_gflops(peak)} with {re.sub(r'^.*, ', '', basis)}"
            for basis, peak in sorted(peaks.items(), key=lambda item: item[1])
        )
        bases = {f"{common.pop()} with each worker's threads: {each}"}
    of = f" (MFU {'; '.join(sorted(bases))})" if bases else ""
    return [f"MFU and peak memory per process: {'; '.join(said)}{of}"]


def _gflops(flops_s: float) -> str:
    return f"{flops_s / 1e12:.3g} TFLOP/s" if flops_s >= 1e12 else f"{flops_s / 1e9:.1f} GFLOP/s"


def _side_by_side(done: list[Row], varying: list[str], *, intervals: bool) -> list[str]:
    """At each worker count above 1 where several points ran: the fastest, and each other
    point's throughput as a share of it, with its interval unless not ``intervals`` (a study
    of many points: the line would run to hundreds of characters)."""
    by_workers: dict[int, list[Row]] = defaultdict(list)
    for row in done:  # a loader-only point times the loaders, not training: not a rival
        if row["config"]["workers"] > 1 and not row["config"].get("loader_only"):
            by_workers[row["config"]["workers"]].append(row)
    out = []
    for workers in sorted(by_workers, reverse=True):
        group = sorted(by_workers[workers], key=lambda r: -(_samples_s(r) or 0))
        if len(group) < 2:
            continue
        best, others = group[0], group[1:]
        compared = []
        for row in others[:MOST]:
            ratio, ci = throughput_ratio(row, best)
            shown = _interval(ci) if intervals else ""
            compared.append(f"{_name(row, varying)} {ratio:.2f}x{shown}")
        more = f", and {len(others) - MOST} more" if len(others) > MOST else ""
        out.append(
            f"at {workers} workers the fastest was {_name(best, varying)} "
            f"({_rate(best)}); of its speed: {', '.join(compared)}{more}"
        )
    return out


def _by_runs(rows: list[Row], run_ids: Any) -> Row | None:
    if not run_ids:
        return None
    return next((r for r in rows if r.get("run_ids") == run_ids), None)
