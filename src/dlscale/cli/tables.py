"""Terminal tables of stored results (rich), shared by `run` and `ls runs`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

LEGEND = (
    "img/s: images per second over all workers, mean of the measurement windows; "
    "±95%: half-width of its 95% confidence interval (Student t over windows); "
    "step ms: median synchronous step time (slowest rank); "
    "speedup: img/s over the 1-worker baseline (*: that baseline is this row); "
    "eff.: speedup / workers; "
    "comm: exposed communication, the share of a step not hidden behind computation; "
    "acc.: evaluation accuracy; TTA: seconds to the target accuracy. "
    "Definitions: docs/metrics.md."
)

_VARYING = (
    ("backend", "backend"),
    ("model", "model"),
    ("dataset", "data"),
    ("scaling", "scaling"),
    ("device", "device"),
)


def console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output is redirected."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)


def _num(value: Any, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{suffix}"


def points_table(
    rows: list[dict[str, Any]], title: str = "dlscale results", *, run_ids: bool = False
) -> Table:
    """One row per run; settings that are the same in every row go to the caption."""
    varying = [
        (key, label)
        for key, label in _VARYING
        if len({r["config"][key] for r in rows}) > 1 or key == "backend"
    ]
    constant = [
        f"{label} {rows[0]['config'][key]}"
        for key, label in _VARYING
        if rows and (key, label) not in varying
    ]
    table = Table(
        title=title,
        title_justify="left",
        caption=", ".join(constant) or None,
        caption_justify="left",
    )
    for _, label in varying:
        table.add_column(label)
    for label in (
        "workers",
        "batch/w",
        "img/s",
        "±95%",
        "step ms",
        "speedup",
        "eff.",
        "comm",
        "acc.",
        "TTA s",
    ):
        table.add_column(label, justify="right")
    table.add_column("status")
    if run_ids:
        table.add_column("run_id", overflow="fold")
    for row in rows:
        cfg, m = row["config"], row.get("metrics") or {}
        comm = m.get("exposed_comm_fraction")
        efficiency = row.get("efficiency")
        accuracy = m.get("eval_accuracy")
        speedup = _num(row.get("speedup"), ".2f", "x")
        if row.get("baseline_run_id") == row["run_id"]:
            speedup += "*"
        table.add_row(
            *(str(cfg[key]) for key, _ in varying),
            str(cfg["workers"]),
            str(row.get("batch_size_per_worker", cfg["batch_size"])),
            _num(m.get("throughput_img_s"), ".1f"),
            _num(m.get("throughput_ci95_img_s"), ".1f"),
            _num(m.get("step_time_p50_ms"), ".1f"),
            speedup,
            _num(None if efficiency is None else efficiency * 100, ".0f", "%"),
            _num(None if comm is None else comm * 100, ".0f", "%"),
            _num(None if accuracy is None else accuracy * 100, ".1f", "%"),
            _num(m.get("time_to_accuracy_s"), ".1f"),
            "ok" if row["status"] == "completed" else row["status"].upper(),
            *([row["run_id"]] if run_ids else []),
        )
    return table
