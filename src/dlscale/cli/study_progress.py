"""How a running study says how far it is, on stderr: in a terminal, one live line (a bar, the
runs done, the time elapsed and left) redrawn in place; anywhere else (a pipe, ``| tee log``, a
batch job's log file) one plain line per finished run, written and flushed as the run ends,
with no escape code, so that a log shows the study moving while it runs:

    dlscale: run 2 of 6: torch-ddp x2, 1 thr, tiny #0 completed, 812.3 img/s in 9 s; 0:00:17
    elapsed, about 40 s left

(one line; a run of token sequences says tok/s). Under ``--json`` neither: stdout's records say
it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dlscale.cli.eta import StudyClock, TimeLeftColumn
from dlscale.contract.text import visible
from dlscale.metrics.units import IMAGES, rate_of

OUTCOME_WORDS = {
    "completed": "completed",
    "failed": "failed",
    "skipped": "kept (stored, not run again)",
    "busy": "skipped (busy in another dlscale process)",
    "newer": "kept (stored by a newer dlscale)",
    "submitted": "submitted",
}
"""How each outcome of `dlscale.runner.run_point` reads in a run's line."""


def study_progress(err: Console, *, disable: bool) -> Progress:
    """The live progress line of a study on ``err`` (off for ``--json`` or off a terminal).
    Its descriptions are plain text, not markup: rich would turn ``:smile:`` in a study name
    into an emoji there whatever the console says (`study_description`)."""
    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        TimeLeftColumn(),
        console=err,
        disable=disable or not err.is_terminal,
    )


def study_description(name: str) -> str:
    """The progress line's text before a study's first point starts: plain text, one line,
    control characters shown as escapes."""
    return visible(f"study {name}")


def point_description(config: Any, number: int) -> str:
    """The progress line's text while a point runs (as `study_description`): its threads
    per worker too, which tell the whole-machine reference from the baseline."""
    threads = config.threads_per_worker
    per = f", {threads} thr," if isinstance(threads, int) else ""
    return visible(f"{config.backend} x{config.workers}{per} {config.model} #{number}")


@dataclass(frozen=True, kw_only=True)
class FinishedRun:
    """One run as its line says it."""

    number: int
    """The run's place among the study's runs, from 1."""
    total: int
    """The runs planned so far (the stopping rule may add rounds)."""
    name: str
    """`point_description`'s text."""
    state: str
    """The outcome's state (`OUTCOME_WORDS`)."""
    throughput: float | None = None
    """The run's figure, for a run that completed, in ``rate``."""
    rate: str = "img/s"
    """Its unit (:mod:`dlscale.metrics.units`: ``tok/s`` for a run of token sequences)."""
    took_s: float | None = None
    """Seconds the run took here; ``None`` for one that did not run here."""


def run_line(run: FinishedRun, elapsed_s: float, clock: StudyClock) -> str:
    """The plain line of a finished run: which run of how many, its point, how it ended, its
    figure and time, the study's time elapsed and left. One line, control characters written
    as escapes (`visible`)."""
    said = OUTCOME_WORDS.get(run.state, run.state)
    if run.state == "completed" and run.throughput is not None:
        said += f", {run.throughput:.1f} {run.rate}"
    if run.took_s is not None:
        said += f" in {run.took_s:.0f} s"
    elapsed = datetime.timedelta(seconds=round(elapsed_s))
    return visible(
        f"dlscale: run {run.number} of {run.total}: {run.name} {said}; "
        f"{elapsed} elapsed, {time_left(clock)}"
    )


def time_left(clock: StudyClock) -> str:
    """``about 2 min left`` (`StudyClock.words`), ``none left`` after the last planned run."""
    if clock.seconds_left() is None:
        return "time left not known yet"
    return clock.words() or "none left"


class RunLines:
    """The per-run lines of a study: written where stderr is no terminal and the output is
    not ``--json`` (``on``), else nothing (the live line, or stdout's records, say it)."""

    def __init__(self, err: Console, *, on: bool, clock: StudyClock, started: float) -> None:
        self.err, self.on, self.clock, self.started = err, on, clock, started
        self.count = 0

    def finished(
        self, name: str, outcome: Any, *, total: int, took_s: float | None, now: float
    ) -> None:
        """Say the run ``outcome`` ended (`dlscale.runner.PointOutcome`) at once: rich
        flushes the stream after each write."""
        self.count += 1
        if not self.on:
            return
        throughput, rate = figure_of(outcome)
        run = FinishedRun(
            number=self.count,
            total=max(total, self.count),
            name=name,
            state=outcome.state,
            throughput=throughput,
            rate=rate,
            took_s=took_s,
        )
        self.err.out(run_line(run, now - self.started, self.clock), highlight=False)


def figure_of(outcome: Any) -> tuple[float | None, str]:
    """A completed run's throughput in its unit and the unit (``img/s``, ``tok/s``:
    :mod:`dlscale.metrics.units`), else ``None``."""
    result = getattr(outcome, "result", None)
    if outcome.state != "completed" or result is None:
        return None, IMAGES.label
    rate = rate_of(result.metrics)
    value = rate.of(result.metrics)
    return (None if value is None else float(value)), rate.label
