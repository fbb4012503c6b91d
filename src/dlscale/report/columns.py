"""The runs table, defined once: which columns it has, how each value is read from a result row,
and how it is written for people (terminal table, HTML report) and for machines (Markdown, CSV).

Every table of runs derives from `COLUMNS`; `human_layout` is the one rule for tables read by
people (settings equal in every row go to the caption), and `LEGEND` is built from the columns'
definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dlscale.metrics.aggregate import OUTSIDE_LOAD_LIMIT, STEAL_LIMIT
from dlscale.metrics.input_bound import share

Row = dict[str, Any]
Show = Literal["always", "varying", "present", "on_request", "exports"]


def _plain(value: Any, row: Row) -> str:
    return str(value)


@dataclass(frozen=True)
class Column:
    name: str
    """Machine name: the Markdown and CSV header."""
    label: str
    """Short human label: the terminal and HTML header, and the caption's word for a setting."""
    value: Callable[[Row], Any]
    """Reads the value from a result row; None when the row has none."""
    human: Callable[[Any, Row], str] = _plain
    """Text for people, given a value that is not None (and its row)."""
    machine: str = ""
    """Format spec for Markdown and CSV ("" writes str(value))."""
    numeric: bool = False
    """Right-aligned in tables for people."""
    show: Show = "always"
    """In tables for people: always; only when it differs between rows ("varying", else it goes to
    the caption); only when some row has a value ("present"); only when asked for
    ("on_request"); or never ("exports": Markdown/CSV only)."""
    definition: str = ""
    """Its unit and meaning, for the LEGEND; "" when the label says it all."""
    term: str = ""
    """The word the LEGEND defines, where it is not the label."""

    def text(self, row: Row) -> str:
        """The cell for people: "-" when there is no value."""
        value = self.value(row)
        return "-" if value is None else self.human(value, row)

    def export(self, row: Row) -> str:
        """The cell for machines: "" when there is no value."""
        value = self.value(row)
        return "" if value is None else format(value, self.machine)


def _field(key: str) -> Callable[[Row], Any]:
    return lambda row: row.get(key)


def _setting(key: str) -> Callable[[Row], Any]:
    return lambda row: (row.get("config") or {}).get(key)


def _metric(key: str) -> Callable[[Row], Any]:
    return lambda row: (row.get("metrics") or {}).get(key)


def _fixed(spec: str) -> Callable[[Any, Row], str]:
    return lambda value, row: format(value, spec)


def _percent(digits: int) -> Callable[[Any, Row], str]:
    return lambda value, row: f"{value * 100:.{digits}f}%"


def _interval(key: str, spec: str, scale: float = 1.0, unit: str = "") -> Callable[[Any, Row], str]:
    """A value with its interval from ``row[key]`` (low, high) in brackets, when it has one."""

    def text(value: Any, row: Row) -> str:
        interval = row.get(key)
        shown = format(value * scale, spec) + unit
        if not interval:
            return shown
        low, high = (format(v * scale, spec) for v in interval)
        return f"{shown} [{low}, {high}]"

    return text


def _speedup(value: Any, row: Row) -> str:
    own_baseline = row.get("baseline_run_ids") == row.get("run_ids")
    return _interval("speedup_ci95", ".2f", unit="x")(value, row) + ("*" if own_baseline else "")


def _ci(value: Any, row: Row) -> str:
    """The throughput interval's half-width; ``w``: over the windows of a single run."""
    return format(value, ".1f") + ("w" if row.get("interval") == "windows" else "")


def _comm(value: Any, row: Row) -> str:
    metrics = row.get("metrics") or {}
    half = metrics.get("exposed_comm_ci95")
    text = f"{value * 100:.0f}%"
    if half is not None:
        text += f" ±{half * 100:.0f}"
    if metrics.get("exposed_comm_significant") is False and value != 0:
        text += " n.s."
    return text


def _notes(row: Row) -> str | None:
    metrics = row.get("metrics") or {}
    notes = []
    if metrics.get("noisy"):  # name what was over its limit: other processes, the hypervisor
        load, steal = metrics.get("outside_load_max") or 0, metrics.get("steal_max") or 0
        over = [f"loaded {load * 100:.0f}%"] if load > OUTSIDE_LOAD_LIMIT else []
        over += [f"steal {steal * 100:.0f}%"] if steal > STEAL_LIMIT else []
        notes.extend(over or [f"loaded {load * 100:.0f}%"])
    if row.get("runs_left_out"):
        notes.append(f"{len(row['runs_left_out'])} loaded run(s) left out")
    if row.get("oversubscribed"):
        notes.append("oversubscribed")
    if row.get("baseline_threads_differ"):
        notes.append("baseline threads differ")
    if (row.get("config") or {}).get("loader_only"):
        notes.append("loader only")
    if metrics.get("restarts"):
        notes.append(f"restarted {metrics['restarts']}x, {metrics['restart_lost_s']:.1f} s lost")
    return ", ".join(notes) or None


def _input(row: Row) -> Any:
    """The input wait of a data set read by loaders (none for synthetic data: its one batch
    sits on the device)."""
    if (row.get("config") or {}).get("dataset") == "synthetic":
        return None
    return (row.get("metrics") or {}).get("input_wait_fraction")


def _bound(key: str, index: int) -> Callable[[Row], Any]:
    return lambda row: row[key][index] if row.get(key) else None


def _status(value: Any, row: Row) -> str:
    return "ok" if value == "completed" else str(value).upper()


COLUMNS: tuple[Column, ...] = (
    Column("study", "study", _field("study"), show="exports"),
    Column("backend", "backend", _setting("backend")),
    Column("model", "model", _setting("model"), show="varying"),
    Column("dataset", "data", _setting("dataset"), show="varying"),
    Column("scaling", "scaling", _setting("scaling"), show="varying"),
    Column("device", "device", _setting("device"), show="varying"),
    Column("workers", "workers", _setting("workers"), numeric=True),
    Column(
        "batch_size_per_worker",
        "batch/w",
        _field("batch_size_per_worker"),
        numeric=True,
        definition="images each worker takes a step",
    ),
    Column(
        "throughput_img_s",
        "img/s",
        _metric("throughput_img_s"),
        _fixed(".1f"),
        ".1f",
        numeric=True,
        definition="images per second over all workers, mean over the point's runs",
    ),
    Column(
        "throughput_ci95_img_s",
        "±95%",
        _metric("throughput_ci95_img_s"),
        _ci,
        ".1f",
        numeric=True,
        definition="half-width of its 95% confidence interval, Student t over runs "
        "(w: over the windows of a single run, which are not independent; -: one run with "
        "one clean window, too few samples)",
    ),
    Column(
        "runs",
        "runs",
        _field("runs"),
        numeric=True,
        show="varying",
        definition="independent runs of the point",
    ),
    Column(
        "threads_per_worker",
        "thr/w",
        _field("threads_per_worker"),
        numeric=True,
        show="varying",
        definition="intra-op threads of each worker process (cores / processes unless "
        "threads_per_worker is set)",
    ),
    Column(
        "step_time_p50_ms",
        "step ms",
        _metric("step_time_p50_ms"),
        _fixed(".1f"),
        ".1f",
        numeric=True,
        definition="median synchronous step time (slowest rank)",
    ),
    Column(
        "speedup",
        "speedup",
        _field("speedup"),
        _speedup,
        ".3f",
        numeric=True,
        definition="img/s over the baseline, [95% interval] (Fieller; none when either side "
        "has too few samples; *: the baseline is this row)",
    ),
    Column(
        "speedup_ci95_low", "speedup low", _bound("speedup_ci95", 0), machine=".3f", show="exports"
    ),
    Column(
        "speedup_ci95_high",
        "speedup high",
        _bound("speedup_ci95", 1),
        machine=".3f",
        show="exports",
    ),
    Column(
        "efficiency",
        "eff.",
        _field("efficiency"),
        _interval("efficiency_ci95", ".0f", 100, unit="%"),
        ".3f",
        numeric=True,
        definition="speedup / workers, in percent",
    ),
    Column(
        "efficiency_ci95_low",
        "eff. low",
        _bound("efficiency_ci95", 0),
        machine=".3f",
        show="exports",
    ),
    Column(
        "efficiency_ci95_high",
        "eff. high",
        _bound("efficiency_ci95", 1),
        machine=".3f",
        show="exports",
    ),
    Column(
        "baseline",
        "baseline",
        _field("baseline"),
        show="varying",
        definition="the 1-worker point with the same threads per worker that speedup is over",
    ),
    Column(
        "machine_speedup",
        "vs 1×all",
        _field("machine_speedup"),
        _interval("machine_speedup_ci95", ".2f", unit="x"),
        ".3f",
        numeric=True,
        show="present",
        definition="img/s over the same machine used as 1 worker with every core",
    ),
    Column(
        "input_wait_fraction",
        "input",
        _input,
        lambda value, row: share(value),
        ".3f",
        numeric=True,
        show="present",
        definition="input wait, the share of step time spent waiting for the next batch "
        "(-: synthetic data, whose one batch stays on the device)",
    ),
    Column(
        "exposed_comm_fraction",
        "comm",
        _metric("exposed_comm_fraction"),
        _comm,
        ".3f",
        numeric=True,
        definition="exposed communication, the share of a step not hidden behind computation "
        "±95% (n.s.: not distinguishable from 0)",
    ),
    Column(
        "eval_accuracy",
        "acc.",
        _metric("eval_accuracy"),
        _percent(1),
        ".4f",
        numeric=True,
        definition="evaluation accuracy",
    ),
    Column(
        "time_to_accuracy_s",
        "TTA s",
        _metric("time_to_accuracy_s"),
        _fixed(".1f"),
        ".1f",
        numeric=True,
        definition="seconds to the target accuracy",
        term="TTA",
    ),
    Column(
        "notes",
        "notes",
        _notes,
        show="present",
        definition="loaded: other processes used that share of the machine in a window, "
        "steal: the hypervisor gave that share to other machines (docs/metrics.md, noise "
        "guard); loaded runs left out: runs loaded in every window, not in the point's "
        "figures; oversubscribed: threads exceed the cores; "
        "baseline threads differ: no 1-worker point had the same threads per worker; "
        "restarted: ranks restarted (max_restarts) and resumed from a checkpoint, and the "
        "seconds that cost; loader only: the input pipeline timed alone (loader_only), img/s "
        "is what the loaders deliver",
    ),
    Column("status", "status", _field("status"), _status),
    Column("run_id", "run_id", _field("run_id"), show="on_request"),
)

LEGEND = (
    "; ".join(f"{c.term or c.label}: {c.definition}" for c in COLUMNS if c.definition)
    + ". Definitions: docs/metrics.md."
)


def human_layout(rows: Sequence[Row], *, run_ids: bool = False) -> tuple[list[Column], list[str]]:
    """The columns a table for people shows, and caption items ("data digits") for the settings
    that are the same in every row."""
    shown: list[Column] = []
    caption: list[str] = []
    for column in (*COLUMNS[:2], *_settings_column(rows), *COLUMNS[2:]):
        if column.show == "exports" or (column.show == "on_request" and not run_ids):
            continue
        if column.show == "present" and all(column.value(row) is None for row in rows):
            continue
        if column.show == "varying" and len({column.text(row) for row in rows}) <= 1:
            if rows:
                caption.append(f"{column.label} {column.text(rows[0])}")
            continue
        shown.append(column)
    return shown, caption


_SHOWN_ELSEWHERE = {c.name for c in COLUMNS} | {"batch_size"}


def _settings_column(rows: Sequence[Row]) -> list[Column]:
    """The other settings that differ between the rows (``compression=fp16``, ``ps_mode``...),
    so that two rows of one backend can be told apart; none when nothing else differs."""
    from dlscale.report.series import varying_keys

    keys = [k for k in varying_keys(list(rows)) if k not in _SHOWN_ELSEWHERE]
    if not keys:
        return []

    def value(row: Row) -> str | None:
        config = row.get("config") or {}
        return ", ".join(f"{k}={config[k]}" for k in keys if k in config) or None

    return [Column("settings", "settings", value)]
