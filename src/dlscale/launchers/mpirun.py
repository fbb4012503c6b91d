"""``--launcher mpirun``: OpenMPI's mpirun (Debian's openmpi-bin: scripts/install-openmpi.sh).

Every rank runs on this machine (``--host localhost:N``), unbound (``--bind-to none``: the
thread budget, not core binding, shares the cores, as under the local launcher), with the
worker variables exported by name (``-x``). mpirun refuses to run as root unless told
(``--allow-run-as-root``). When a rank exits non-zero, mpirun stops the others and names it.
Horovod under mpirun uses its MPI controller; other backends only take their ranks from
OMPI_COMM_WORLD_*.
"""

from __future__ import annotations

import os
import re

from dlscale.launchers.one_command import OneCommandLauncher


class MpirunLauncher(OneCommandLauncher):
    rank_vars = "OMPI_COMM_WORLD_RANK,OMPI_COMM_WORLD_LOCAL_RANK,OMPI_COMM_WORLD_SIZE"
    install = "scripts/install-openmpi.sh (Debian's openmpi-bin)"
    failed_rank = (
        re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]"),  # a rank exited non-zero
        re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal"),
    )

    def tool(self, size: int, python: str, env: dict[str, str]) -> tuple[str, ...]:
        root = ("--allow-run-as-root",) if os.geteuid() == 0 else ()
        exported = tuple(arg for name in sorted(env) for arg in ("-x", name))
        return (
            "mpirun",
            *root,
            "-np",
            str(size),
            "--host",
            f"localhost:{size}",
            "--bind-to",
            "none",
            "--tag-output",
            *exported,
        )
