"""The runs table, defined once: which columns it has, how each value is read from a result row,
and how it is written for people (terminal table, HTML report) and for machines (Markdown, CSV).

Every table of runs derives from `columns_in` (`dlscale.report.layout` lays out those for
people): the columns of rows whose throughput is read in one rate (`dlscale.metrics.units`:
img/s, tok/s, or samples/s where the rows count different units), `columns_for` those of given
rows; `COLUMNS` are those of images, and `LEGEND` is built from their definitions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from dlscale.metrics.input_bound import share
from dlscale.metrics.units import CI95, IMAGES, THROUGHPUT, Rate, common_rate
from dlscale.report import cells
from dlscale.report.column import Column, Row, Show
from dlscale.report.outcome_columns import OUTCOMES
from dlscale.report.utilization_columns import UTILIZATION

__all__ = ["COLUMNS", "LEGEND", "Column", "Row", "Show", "columns_for", "columns_in"]

_BACKEND = "the engine that trained (dlscale ls backends)"
_MODEL = "the model trained (dlscale ls models)"
_DATA = "the data set (dlscale ls datasets)"
_WORKERS = "training processes, each with its replica of the model"


@functools.cache
def columns_in(rate: Rate) -> tuple[Column, ...]:
    """Every column of a table whose throughputs are shown in ``rate``."""
    return (
        *_SETTINGS, *_figures(rate), *_ratios(rate), *UTILIZATION, *OUTCOMES, _notes(rate),
        *_LAST,
    )  # fmt: skip


def columns_for(rows: Iterable[Row]) -> tuple[Column, ...]:
    """The columns of a table of ``rows``: their throughputs in their one unit, or in samples
    per second where they count different ones (:func:`~dlscale.metrics.units.common_rate`)."""
    return columns_in(common_rate(rows))


def _throughput_words(rate: Rate) -> tuple[str, str]:
    """The throughput column's definition and short words (``images per second over all
    workers...``); a unit of which a sample holds several says how it is counted."""
    unit = rate.noun if rate.unit is None else rate.words
    how = "" if rate.unit in (None, IMAGES.unit) else f" ({rate.noun}/s x {rate.words} in each)"
    return (
        f"{unit} per second over all workers{how}, mean over the point's runs",
        f"{unit} per second, all workers",
    )


_SETTINGS: tuple[Column, ...] = (
    Column("study", "study", cells.field("study"), show="exports"),
    Column("backend", "backend", cells.setting("backend"), keep=9, short=_BACKEND),
    Column("model", "model", cells.setting("model"), show="varying", keep=8, short=_MODEL),
    Column("dataset", "data", cells.setting("dataset"), show="varying", keep=8, short=_DATA),
    Column(
        "scaling",
        "scaling",
        cells.setting("scaling"),
        show="varying",
        keep=8,
        short="weak: the batch per worker is fixed; strong: the global batch is fixed, split over "
        "the workers",
    ),
    Column(
        "device", "device", cells.setting("device"), show="varying", keep=8, short="cpu or cuda"
    ),
    Column("workers", "workers", cells.setting("workers"), numeric=True, keep=9, short=_WORKERS),
    Column(
        "doubt",
        "!",
        cells.doubt_mark,
        show="present",
        definition=f"a figure of the row cannot be taken as it reads: {cells.DOUBTED}; the "
        "notes say which",
        short="a figure not to take as it reads (dlscale explain !)",
        keep=9,
        missing="",
    ),
)
"""The columns before the figures: what tells the rows apart."""


def _figures(rate: Rate) -> tuple[Column, ...]:
    """The batch, the throughput in ``rate`` with its interval, and every column up to the
    notes, whose words name the rate."""
    definition, short = _throughput_words(rate)
    return (
        Column(
            "batch_size_per_worker",
            "batch/w",
            cells.field("batch_size_per_worker"),
            numeric=True,
            show="varying",
            definition=f"{rate.noun} each worker takes a step",
            short=f"{rate.noun} per worker per step",
            keep=3,
        ),
        Column(
            rate.name(THROUGHPUT),
            rate.label,
            cells.rate(rate, THROUGHPUT),
            cells.fixed(".1f"),
            ".1f",
            numeric=True,
            definition=definition,
            short=short,
            keep=8,
        ),
        Column(
            rate.name(CI95),
            "±95%",
            cells.rate(rate, CI95),
            cells.ci,
            ".1f",
            numeric=True,
            definition="half-width of its 95% confidence interval, Student t over runs "
            "(w: over the windows of a single run, which are not independent; -: one run with "
            "one clean window, too few samples)",
            short="its 95% interval's half-width over runs (w: over one run's windows)",
            keep=7,
            per_run="its 95% interval's half-width over the run's windows (w)",
        ),
    )


def _ratios(rate: Rate) -> tuple[Column, ...]:
    """The columns from the runs to exposed communication, whose words name the rate."""
    return (
        Column(
            "runs",
            "runs",
            cells.field("runs"),
            numeric=True,
            show="varying",
            definition="independent runs of the point",
            short="runs of the point",
            keep=4,
        ),
        Column(
            "threads_per_worker",
            "thr/w",
            cells.field("threads_per_worker"),
            cells.threads,
            numeric=True,
            show="varying",
            definition="intra-op threads of each worker process (cores / processes unless "
            "threads_per_worker is set); all: the whole-machine reference, every core as one "
            "worker, which 'vs 1×all' is over",
            short="threads per worker process (all: the whole-machine reference)",
            keep=8,
        ),
        Column(
            "step_time_p50_ms",
            "step ms",
            cells.metric("step_time_p50_ms"),
            cells.fixed(".1f"),
            ".1f",
            numeric=True,
            definition="median synchronous step time (slowest rank), over the windows the noise "
            "guard kept",
            short="median step time, slowest rank",
            keep=2,
        ),
        Column(
            "speedup",
            "speedup",
            cells.field("speedup"),
            cells.speedup,
            ".3f",
            numeric=True,
            definition=f"{rate.label} over the baseline, [95% interval] (Fieller; none when either "
            "side has too few samples; *: the baseline is this row)",
            short=f"{rate.label} over the 1-worker baseline [95% interval] (*: the baseline "
            "itself)",
            keep=8,
            per_run=f"the run's {rate.label} over its baseline point's mean (*: a run of the "
            "baseline)",
        ),
        Column(
            "speedup_ci95_low",
            "speedup low",
            cells.bound("speedup_ci95", 0),
            machine=".3f",
            show="exports",
        ),
        Column(
            "speedup_ci95_high",
            "speedup high",
            cells.bound("speedup_ci95", 1),
            machine=".3f",
            show="exports",
        ),
        Column(
            "efficiency",
            "eff.",
            cells.field("efficiency"),
            cells.percent(0),
            ".3f",
            numeric=True,
            definition="speedup / workers, in percent (its interval is the speedup's divided by "
            "the workers: the exports' efficiency_ci95_low and _high)",
            short="speedup / workers",
            keep=7,  # the scaling figure: it outlives comm and the interval's half-width
        ),
        Column(
            "efficiency_ci95_low",
            "eff. low",
            cells.bound("efficiency_ci95", 0),
            machine=".3f",
            show="exports",
        ),
        Column(
            "efficiency_ci95_high",
            "eff. high",
            cells.bound("efficiency_ci95", 1),
            machine=".3f",
            show="exports",
        ),
        Column(
            "baseline",
            "baseline",
            cells.field("baseline"),
            show="varying",
            definition="the 1-worker point with the same threads per worker that speedup is over",
            short="the point speedup is over",
            keep=1,
        ),
        Column(
            "machine_speedup",
            "vs 1×all",
            cells.field("machine_speedup"),
            cells.interval("machine_speedup_ci95", ".2f", unit="x"),
            ".3f",
            numeric=True,
            show="present",
            definition=f"{rate.label} over the same machine used as 1 worker with every core",
            short=f"{rate.label} over this machine as 1 worker with every core",
            keep=5,
            per_run=f"the run's {rate.label} over this machine as 1 worker with every core",
        ),
        Column(
            "input_wait_fraction",
            "input",
            cells.input_wait,
            lambda value, row: share(value),
            ".3f",
            numeric=True,
            show="present",
            definition="input wait, the share of step time spent waiting for the next batch "
            "(-: synthetic data, whose one batch stays on the device)",
            short="share of step time waiting for data",
            keep=5,
        ),
        Column(
            "exposed_comm_fraction",
            "comm",
            cells.metric("exposed_comm_fraction"),
            cells.comm,
            ".3f",
            numeric=True,
            show="present",
            definition="exposed communication, the share of a step not hidden behind computation "
            "±95% (n.s.: not distinguishable from 0)",
            short="exposed communication, share of a step ±95% (n.s.: not significant)",
            keep=6,
        ),
        Column(
            "bytes_sent_per_step",
            "sent/step",
            cells.bytes_sent,
            cells.byte_words,
            ".0f",
            numeric=True,
            show="present",
            definition="bytes one worker sends a step to synchronize: counted during the "
            "measured windows where the engine counts them, else its algorithm's model "
            "(docs/metrics.md, Synchronization and bytes)",
            short="bytes a worker sends per step (counted, else modelled)",
            keep=2,
        ),
    )


def _notes(rate: Rate) -> Column:
    """The notes column, whose words name the rate."""
    return Column(
        "notes",
        "notes",
        cells.notes,
        show="present",
        definition="loaded: other processes used that share of the machine in a window, "
        "steal: the hypervisor gave that share to other machines (docs/metrics.md, noise "
        "guard); waited: a training process's threads waited that share of a window for a "
        "CPU (the kernel's run delay: contention on its own cores, which the machine's load "
        "misses); loaded windows left out: windows the noise guard dropped, and how much that "
        f"moved {rate.label} (noise_guard_shift); loaded runs left out: runs loaded in every "
        "window, not in the point's figures; comm probe loaded: other processes or the "
        "hypervisor took more "
        "than the limits while exposed communication was measured; "
        "oversubscribed: threads exceed the cores; "
        "baseline threads differ: no 1-worker point had the same threads per worker; "
        "restarted: ranks restarted (max_restarts) and resumed from a checkpoint, and the "
        "seconds that cost; loss diverged: a recorded training loss became NaN, infinite or "
        "beyond 1e15 nats (in that many of the runs; a run that records no loss, as a "
        "script's own loop, never says it): the speed holds, the loss and accuracy mean "
        "nothing (lower lr); loader only: the input pipeline timed alone (loader_only), "
        f"{rate.label} is what the loaders deliver; MFU above 100%: the FLOPs or the peak "
        "are wrong, so no MFU is stated",
        short="what the figures need to be read with (dlscale explain notes)",
        keep=5,
    )


_LAST: tuple[Column, ...] = (
    Column(
        "status",
        "status",
        cells.field("status"),
        cells.status,
        show="varying",
        keep=8,
        short="ok, or FAILED and the like (dlscale report lists the causes)",
    ),
    Column(
        "code",
        "code",
        cells.code,
        show="varying",
        definition="the dlscale version that made the runs and the commit it was installed from "
        "(0.1.0 at b2b2af9; +changes: the checkout had uncommitted changes; the version alone "
        "for an install without git); mixed (N): N different ones",
        short="dlscale version and the commit it was installed from",
        keep=4,
    ),
    Column(
        "engine_code",
        "engine code",
        cells.engine_code,
        show="on_request",
        definition="the first 7 hex digits of the fingerprint of the engine's code that made the "
        "runs (its worker's and framework's folders, runtime/, datasets/, worker.py), which a "
        "resume compares with this checkout's before reusing a point (mixed (N): N different "
        "ones; docs/reliability.md)",
        short="fingerprint of the engine's code that made the runs",
        keep=1,
    ),
    Column(
        "run_id",
        "run_id",
        cells.field("run_id"),
        show="on_request",
        keep=9,
        short="the run's directory in the results (model-backend-data-wN-hash)",
    ),
)
"""The columns after the notes: the runs' state and what made them."""

COLUMNS: tuple[Column, ...] = columns_in(IMAGES)
"""The columns of a table of images (results stored before the unit was: every one)."""

LEGEND = (
    "; ".join(f"{c.term or c.label}: {c.definition}" for c in COLUMNS if c.definition)
    + ". Definitions: docs/metrics.md."
)
"""Every column's definition, one paragraph (`dlscale explain` and docs/metrics.md say more)."""
