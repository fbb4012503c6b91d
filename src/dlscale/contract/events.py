"""Per-rank structured records (JSON lines). Every rank writes its own file; the writer stamps
each record with the schema, rank, host and time, so a crashed rank still leaves its partial
record. The records themselves are defined once in :mod:`dlscale.contract.records`."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from dlscale.contract.errors import SchemaError
from dlscale.contract.records import EVENTS_SCHEMA, Record, from_dict


def events_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"events.rank{rank}.jsonl"


class EventWriter:
    """Appends one JSON object per line and flushes it, so readers see whole records."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        self.host = socket.gethostname()
        self._handle = path.open("a", encoding="utf-8")

    def write(self, record: Record) -> None:
        line = {
            "schema": EVENTS_SCHEMA,
            "event": record.event,
            "rank": self.rank,
            "host": self.host,
            "time": time.time(),
            **record.payload(),
        }
        self._handle.write(json.dumps(line, allow_nan=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """All whole records of one rank as stored; a torn last line (a rank killed mid-write) is
    dropped."""
    records: list[dict[str, Any]] = []
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("schema", 0) > EVENTS_SCHEMA:
            raise SchemaError(
                f"{path} was written by a newer dlscale (events schema {record['schema']}, "
                f"this version reads {EVENTS_SCHEMA}); upgrade dlscale"
            )
        records.append(record)
    return records


def read_records(path: Path) -> list[Record]:
    """One rank's records as their types (unknown or malformed events are skipped)."""
    out = []
    for data in read_events(path):
        try:
            record = from_dict(data)
        except TypeError:
            continue
        if record is not None:
            out.append(record)
    return out
