"""``--launcher horovodrun``: Horovod's own launcher with its Gloo rendezvous.

horovodrun starts a rendezvous server, gives every rank its HOROVOD_* variables and starts the
ranks (``-H localhost:N``: all on this machine; or ``-H a:2,b:2`` from ``hosts``/``hostfile``,
reached by ssh, with ``interface`` as its ``--network-interface``); when one exits non-zero it
stops the others and names it. It is run from the workers' environment (the ``horovodrun``
beside their interpreter), where ``make horovod`` installed it. Other backends run under it
too: their processes find their ranks in HOROVOD_RANK.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from dlscale.launchers.base import PlanEntry, killed_by_signal, output_text
from dlscale.launchers.host_list import Placement
from dlscale.launchers.one_command import OneCommandLauncher

START_TIMEOUT_S = 120
"""How long horovodrun waits for every rank to register (its default is 30 s: too short for
many interpreters importing torch on 2 cores)."""
EXIT = re.compile(r"Process (\d+) exit with status code (-?\d+)")
"""horovodrun's line for each rank that exited non-zero, in the order it saw them."""


class HorovodrunLauncher(OneCommandLauncher):
    rank_vars = "HOROVOD_RANK,HOROVOD_LOCAL_RANK,HOROVOD_SIZE"
    install = "make horovod (it installs horovodrun beside the workers' interpreter)"
    failed_rank = (re.compile(r"failure of process (\d+)", re.IGNORECASE),)

    def blame(self, entry: PlanEntry) -> int | None:
        """A rank killed by a signal, else the one horovodrun names. horovodrun names the first
        rank it saw fail, but on a busy machine it can see a peer fail first: the peer that
        lost its connection to the killed rank ("Horovod has been shut down", exit code 1). Not
        SIGTERM, with which horovodrun itself stops the ranks still running."""
        exits = [(int(rank), int(code)) for rank, code in EXIT.findall(output_text(entry))]
        killed = [rank for rank, code in exits if killed_by_signal(code)]
        return killed[0] if killed else super().blame(entry)

    def tool(
        self, size: int, python: str, env: dict[str, str], where: Placement | None = None
    ) -> tuple[str, ...]:
        nic = ("--network-interface", where.interface) if where and where.interface else ()
        return (
            str(Path(shutil.which(python) or python).parent / "horovodrun"),
            "-np",
            str(size),
            "-H",
            where.tool_hosts() if where else f"localhost:{size}",
            "--gloo",
            *nic,
            "--start-timeout",
            str(START_TIMEOUT_S),
        )
