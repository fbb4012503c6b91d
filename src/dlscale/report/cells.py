"""How the runs table writes each kind of value for people: numbers with their intervals,
shares, exposed communication with its significance, and the notes a row carries. Each
function takes the value (not None) and its row; `dlscale.report.columns` puts them to use."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dlscale.contract.engine_code import stored_code
from dlscale.contract.text import byte_size, excerpt
from dlscale.metrics.aggregate import OUTSIDE_LOAD_LIMIT, STEAL_LIMIT
from dlscale.metrics.figures import Figures
from dlscale.metrics.units import Rate

Row = dict[str, Any]


def plain(value: Any, row: Row) -> str:
    return str(value)


def field(key: str) -> Callable[[Row], Any]:
    return lambda row: row.get(key)


def setting(key: str) -> Callable[[Row], Any]:
    return lambda row: (row.get("config") or {}).get(key)


def metric(key: str) -> Callable[[Row], Any]:
    return lambda row: (row.get("metrics") or {}).get(key)


def bytes_sent(row: Row) -> Any:
    """The bytes one worker sends a step: those counted in the measured windows where the
    engine counts them, else its algorithm's model (``None``: nothing synchronized)."""
    metrics = row.get("metrics") or {}
    counted = metrics.get("bytes_sent_per_step_counted")
    return counted if counted is not None else metrics.get("bytes_sent_per_step_model")


def byte_words(value: float, row: Row) -> str:
    """Bytes for people, three digits: ``0 B``, ``18.6 MiB``."""
    return byte_size(value, ".3g")


def rate(shown: Rate, key: str) -> Callable[[Row], Any]:
    """The stored throughput figure ``key`` (samples per second) of a row, in ``shown``
    (:mod:`dlscale.metrics.units`: img/s, tok/s, samples/s)."""
    return lambda row: shown.of(row.get("metrics"), key)


def fixed(spec: str) -> Callable[[Any, Row], str]:
    return lambda value, row: format(value, spec)


def percent(digits: int) -> Callable[[Any, Row], str]:
    return lambda value, row: f"{value * 100:.{digits}f}%"


def interval(key: str, spec: str, scale: float = 1.0, unit: str = "") -> Callable[[Any, Row], str]:
    """A ratio with its interval from ``row[key]`` (low, high) in brackets, when it has one;
    a low end below 0 (runs that disagree: Fieller's set reaches where no ratio of throughputs
    can be) is shown as 0, the interval's feasible part."""

    def text(value: Any, row: Row) -> str:
        bounds = row.get(key)
        shown = format(value * scale, spec) + unit
        if not bounds:
            return shown
        low, high = (format(v * scale, spec) for v in feasible(bounds))
        return f"{shown} [{low}, {high}]"

    return text


def feasible(bounds: Any) -> tuple[float, float]:
    """A ratio of throughputs' interval from 0 up: the part of Fieller's set a ratio can be
    in."""
    return max(bounds[0], 0.0), bounds[1]


def speedup(value: Any, row: Row) -> str:
    own_baseline = row.get("baseline_run_ids") == row.get("run_ids")
    return interval("speedup_ci95", ".2f", unit="x")(value, row) + ("*" if own_baseline else "")


def threads(value: Any, row: Row) -> str:
    """Threads per worker; ``all`` marks the whole-machine reference (every core, one worker)."""
    return f"{value} all" if row.get("machine_reference") else str(value)


def ci(value: Any, row: Row) -> str:
    """The throughput interval's half-width; ``w``: over the windows of a single run."""
    return format(value, ".1f") + ("w" if row.get("interval") == "windows" else "")


def comm(value: Any, row: Row) -> str:
    metrics = row.get("metrics") or {}
    half = metrics.get("exposed_comm_ci95")
    text = f"{value * 100:.0f}%"
    if half is not None:
        text += f" ±{half * 100:.0f}%"  # the unit said on both
    if metrics.get("exposed_comm_significant") is False and value != 0:
        text += " n.s."
    return text


def waited_words(share: float) -> str:
    """How long a process's threads waited for a CPU, as a share of a window: its threads'
    waits add up, so past 100% it is said as a multiple of the window, with why."""
    if share > 1:
        return f"waited {share:.1f}x a window (its threads' waits summed)"
    return f"waited {share * 100:.0f}%"


def doubt_mark(row: Row) -> str | None:
    """``!`` where a figure of the row cannot be taken as it reads (:data:`DOUBTED`), else
    None: said in a column a narrow terminal never drops, the notes saying why."""
    metrics = row.get("metrics") or {}
    workers = (row.get("config") or {}).get("workers")
    interval = row.get("speedup_ci95")
    if isinstance(workers, int) and interval and interval[0] is not None and interval[0] > workers:
        return "!"  # above 100% efficient beyond its interval
    comm = metrics.get("exposed_comm_fraction")
    if isinstance(comm, int | float) and comm < 0:
        return "!"  # a negative share: noise larger than the communication
    if metrics.get("waited") and len(row.get("layout") or [None]) == 1:
        return "!"  # a one-process point (a baseline) that waited for a CPU
    if Figures.of(row).mfu_impossible:
        return "!"  # the FLOPs or the peak are wrong
    return None


DOUBTED = (
    "efficiency above 100% beyond its interval, a negative exposed communication (the noise "
    "is larger than what it measures), a one-process point (a baseline) whose process "
    "waited for a CPU, or an MFU above 100% (its FLOPs or peak are wrong)"
)
"""What :func:`doubt_mark` marks, in words."""


def notes(row: Row) -> str | None:
    metrics = row.get("metrics") or {}
    notes = []
    if metrics.get("noisy"):  # name what was over its limit: other processes, the hypervisor
        load, steal = metrics.get("outside_load_max") or 0, metrics.get("steal_max") or 0
        over = [f"loaded {load * 100:.0f}%"] if load > OUTSIDE_LOAD_LIMIT else []
        over += [f"steal {steal * 100:.0f}%"] if steal > STEAL_LIMIT else []
        notes.extend(over or [f"loaded {load * 100:.0f}%"])
    if metrics.get("waited"):  # its own processes waited for a CPU: contention the load misses
        notes.append(waited_words(metrics["run_delay_max"]))
    if metrics.get("windows_left_out"):  # and how far leaving them out moved the throughput
        shift = metrics.get("noise_guard_shift")
        moved = f" ({shift:+.1%})" if shift is not None else ""
        notes.append(f"{metrics['windows_left_out']} loaded window(s) left out{moved}")
    if row.get("runs_left_out"):
        notes.append(f"{len(row['runs_left_out'])} loaded run(s) left out")
    if metrics.get("exposed_comm_noisy"):
        load = max(metrics.get("exposed_comm_outside_load_max") or 0,
                   metrics.get("exposed_comm_steal_max") or 0)  # fmt: skip
        notes.append(f"comm probe loaded {load * 100:.0f}%")
    if row.get("oversubscribed"):
        notes.append("oversubscribed")
    if row.get("baseline_threads_differ"):
        notes.append("baseline threads differ")
    if (row.get("config") or {}).get("loader_only"):
        notes.append("loader only")
    if "runs_diverged" not in metrics:  # one run's row (ls runs): its own flag
        notes.extend(["loss diverged"] if metrics.get("loss_diverged") else [])
    elif diverged := metrics["runs_diverged"]:  # its speed holds, its loss and accuracy not
        runs = row.get("runs") or diverged
        notes.append(
            "loss diverged" + (f" in {diverged} of {runs} runs" if diverged < runs else "")
        )
    if Figures.of(row).mfu_impossible:
        notes.append("MFU above 100%: not stated")
    if metrics.get("restarts"):
        notes.append(f"restarted {metrics['restarts']}x, {metrics['restart_lost_s']:.1f} s lost")
    return ", ".join(notes) or None


def input_wait(row: Row) -> Any:
    """The input wait of a data set read by loaders (none for synthetic data: its one batch
    sits on the device)."""
    if (row.get("config") or {}).get("dataset") == "synthetic":
        return None
    return (row.get("metrics") or {}).get("input_wait_fraction")


def bound(key: str, index: int) -> Callable[[Row], Any]:
    return lambda row: row[key][index] if row.get(key) else None


def status(value: Any, row: Row) -> str:
    return "ok" if value == "completed" else str(value).upper()


def code(row: Row) -> str | None:
    """The dlscale version and the commit it was installed from (``0.1.0 at b2b2af9``, with
    ``+changes`` where the checkout had uncommitted changes; the version alone for an install
    without git) that made the row's runs; ``mixed (N)`` where N different ones made them."""
    return _made_by(row, _installed_code)


def engine_code(row: Row) -> str | None:
    """The first 7 hex digits of the fingerprint of the engine's code that made the row's runs
    (`dlscale.contract.engine_code`: what a resume compares); ``mixed (N)`` as :func:`code`."""
    return _made_by(row, _engine_fingerprint)


def _made_by(row: Row, said: Callable[[dict[str, Any]], str]) -> str | None:
    made = {said(run.get("environment") or {}) for run in row.get("run_rows") or [row]}
    made.discard("")
    if len(made) > 1:
        return f"mixed ({len(made)})"
    return next(iter(made), None)


_COMMIT = re.compile(r"([0-9a-f]{7,64})(\+dirty)?")
"""A commit as `dlscale.runtime.environment.git_commit` records it."""


def _installed_code(environment: dict[str, Any]) -> str:
    version, commit = environment.get("dlscale_version"), environment.get("git_commit")
    words = [] if version is None else [_stored_text(version)]
    if commit is not None:
        known = _COMMIT.fullmatch(commit) if isinstance(commit, str) else None
        shown = known[1][:7] + ("+changes" if known[2] else "") if known else _stored_text(commit)
        words.append(f"at {shown}")
    return " ".join(words)


def _engine_fingerprint(environment: dict[str, Any]) -> str:
    engine = environment.get("engine_code")
    if engine is None:
        return ""
    return engine[:7] if stored_code(engine) else _stored_text(engine)


def _stored_text(value: Any, limit: int = 24) -> str:
    """A short stored value as it is; anything else (a planted megabyte, a control character)
    cut and quoted as :func:`~dlscale.contract.text.excerpt` quotes it."""
    if isinstance(value, str) and len(value) <= limit and value.isprintable():
        return value
    return excerpt(value, limit)
