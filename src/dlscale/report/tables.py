"""The runs table as Markdown and CSV (same columns and rounding as the terminal table)."""

from __future__ import annotations

import csv
import io
from typing import Any

Row = dict[str, Any]

# (header, getter, format): one place defines what the exported tables hold.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("study", "study", ""),
    ("backend", "config.backend", ""),
    ("model", "config.model", ""),
    ("dataset", "config.dataset", ""),
    ("scaling", "config.scaling", ""),
    ("workers", "config.workers", ""),
    ("batch_size_per_worker", "batch_size_per_worker", ""),
    ("throughput_img_s", "metrics.throughput_img_s", ".1f"),
    ("throughput_ci95_img_s", "metrics.throughput_ci95_img_s", ".1f"),
    ("step_time_p50_ms", "metrics.step_time_p50_ms", ".1f"),
    ("speedup", "speedup", ".3f"),
    ("efficiency", "efficiency", ".3f"),
    ("exposed_comm_fraction", "metrics.exposed_comm_fraction", ".3f"),
    ("eval_accuracy", "metrics.eval_accuracy", ".4f"),
    ("time_to_accuracy_s", "metrics.time_to_accuracy_s", ".1f"),
    ("status", "status", ""),
    ("run_id", "run_id", ""),
)


def _get(row: Row, path: str) -> Any:
    value: Any = row
    for part in path.split("."):
        value = (value or {}).get(part)
    return value


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for row in rows:
        cells = []
        for _, path, fmt in COLUMNS:
            value = _get(row, path)
            cells.append("" if value is None else format(value, fmt) if fmt else str(value))
        out.append(cells)
    return out


def to_markdown(rows: list[Row]) -> str:
    header = [name for name, _, _ in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c or "-" for c in cells) + " |" for cells in table_rows(rows)]
    return "\n".join(lines) + "\n"


def to_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([name for name, _, _ in COLUMNS])
    writer.writerows(table_rows(rows))
    return buffer.getvalue()
