"""Where each run's processes ran, for the runs not all on this machine (a host list, Slurm's
nodes, emulated hosts): one rule for ``dlscale ls runs`` and the report.

A result's ``layout`` gives each process's role, rank and ``host`` (its ``start`` record's); a
run whose processes all ran on the host that reads the results (or whose hosts were never
recorded: results stored before hosts were) is left out.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from typing import Any

TITLE = "where the processes ran (runs on other hosts)"


def placements(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """``(run id, host, "worker 0, worker 1")`` for each host of each run that left this one;
    the run id only on its first host's line."""
    here = socket.gethostname()
    out = []
    for row in rows:
        by_host: dict[str, list[str]] = {}
        for process in row.get("layout") or ():
            host = str(process.get("host") or "?")
            by_host.setdefault(host, []).append(f"{process.get('role')} {process.get('rank')}")
        if set(by_host) <= {here, "?"}:
            continue
        for index, (host, processes) in enumerate(by_host.items()):
            out.append((str(row.get("run_id")) if index == 0 else "", host, ", ".join(processes)))
    return out
