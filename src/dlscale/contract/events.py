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
from dlscale.contract.files import UnreadableFile, read_bounded, unreadable
from dlscale.contract.numbers import finite_number
from dlscale.contract.records import EVENTS_SCHEMA, Record, from_dict

EVENTS_LIMIT = 256 * 2**20
"""The most bytes one rank's events file may hold (a run of a million steps writes about
200 MB); a larger one, a FIFO or a device planted there is damage, never read whole."""


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
    try:
        raw = read_bounded(path, EVENTS_LIMIT)
    except FileNotFoundError:
        return records
    except OSError as error:
        raise UnreadableFile(path, f"cannot be read ({unreadable(error)})") from None
    for line in raw.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # a torn line, 5,000 digits, nesting 3,000 deep
            continue
        if not isinstance(record, dict) or finite_number(record.get("schema", 0)) is None:
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
