"""``--launcher mpirun``: OpenMPI's mpirun (Debian's openmpi-bin: scripts/install-openmpi.sh).

Every rank runs on this machine (``--host localhost:N``), or on the hosts of ``hosts`` or
``hostfile`` (``--host a:2,b:2 --map-by slot``: filled in order, reached by ssh; ``interface``
becomes ``btl_tcp_if_include`` and ``oob_tcp_if_include``), unbound (``--bind-to none``: the
thread budget, not core binding, shares the cores, as under the local launcher), with the
worker variables exported by name (``-x``). mpirun refuses to run as root unless told
(``--allow-run-as-root``). When a rank exits non-zero, mpirun stops the others and names it.
Horovod under mpirun uses its MPI controller; other backends only take their ranks from
OMPI_COMM_WORLD_*.
"""

from __future__ import annotations

import os
import re

from dlscale.launchers.host_list import Placement
from dlscale.launchers.one_command import OneCommandLauncher


class MpirunLauncher(OneCommandLauncher):
    rank_vars = "OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_LOCAL_RANK,OMPI_COMM_WORLD_SIZE"
    install = "scripts/install-openmpi.sh (Debian's openmpi-bin)"
    lost_host = re.compile(  # a host cut off mid-run: mpirun's words do not name it
        r"unable to reliably start one or more daemons|lost communication with a remote daemon"
    )
    failed_rank = (
        re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]"),  # a rank exited non-zero
        re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal"),
    )

    def tool(
        self, size: int, python: str, env: dict[str, str], where: Placement | None = None
    ) -> tuple[str, ...]:
        root = ("--allow-run-as-root",) if os.geteuid() == 0 else ()
        exported = tuple(arg for name in sorted(env) for arg in ("-x", name))
        hosts = where.tool_hosts() if where else f"localhost:{size}"
        nic = where.interface if where else ""
        network = (
            ("--mca", "btl_tcp_if_include", nic, "--mca", "oob_tcp_if_include", nic) if nic else ()
        )
        return (
            "mpirun",
            *root,
            "-np",
            str(size),
            "--host",
            hosts,
            "--map-by",
            "slot",
            "--bind-to",
            "none",
            *network,
            "--tag-output",
            *exported,
        )
