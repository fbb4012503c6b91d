"""A run that lost a port it was given, between choosing it and binding it, starts again.

The ports of a run on one machine are ones the operating system found free when the run was
planned (:func:`dlscale.launchers.local.free_ports`); the ranks bind them a few seconds later,
once their frameworks are imported. In between, anything on the machine may take one: another
run's rendezvous, or an outgoing connection given it as its ephemeral port. The rank that binds
it then fails at once (torch's TCPStore: ``EADDRINUSE``; Gloo, ZeroMQ, gRPC: ``Address already
in use``), before any training. Such a failure is the machine's, not the run's: the runner plans
the run again, with new ports, up to :data:`PORT_ATTEMPTS` times in all, and says so in one
warning line each time. A failure after a rank has trained (a window recorded) is never retried.
"""

from __future__ import annotations

import re
from pathlib import Path

from dlscale.contract.events import events_path, read_events
from dlscale.launchers.base import LaunchOutcome, LaunchPlan
from dlscale.launchers.watch import since_last_start

PORT_ATTEMPTS = 3
"""Launches of one run, in all, while each loses a port (two losses in a row are rare)."""
_LOST_PORT = re.compile(r"EADDRINUSE|[Aa]ddress already in use|\[Errno 98\]")


def lost_port(outcome: LaunchOutcome, plan: LaunchPlan, run_dir: Path) -> str | None:
    """The one line saying that a rank of this failed launch could not bind a port (read
    from the failure, the failed rank's output and every rank's records of its latest start),
    or ``None``: it did not fail, failed otherwise, or failed after training began."""
    if outcome.ok:
        return None
    texts = [outcome.reason or "", *outcome.stderr_tail]
    for process in plan.layout.processes:
        records = since_last_start(read_events(events_path(run_dir, process.rank)))
        if any(record.get("event") == "window" for record in records):
            return None
        texts += [str(r.get("message", "")) for r in records if r.get("event") == "error"]
    if not any(_LOST_PORT.search(text) for text in texts):
        return None
    ports = ", ".join(str(port) for port in plan.addresses.ports)
    return (
        f"rank {outcome.failed_rank} could not bind a port the run was given ({ports}): another "
        "process took it between planning and start"
    )
