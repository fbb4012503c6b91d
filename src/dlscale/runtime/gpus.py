"""Which GPU a rank uses: its own, never one another rank of its host uses.

Two ways a rank gets its GPU, whichever launcher started it:

* the launcher bound one to it (Slurm's ``--gpus-per-task=1``, which sets each task's
  ``CUDA_VISIBLE_DEVICES`` to its own GPU; the plan says so in :data:`BOUND_ENV`): the rank
  uses the one GPU it sees;
* otherwise the rank's local rank on its host picks one of the GPUs the host shows
  (``local_rank``-th), and a host that shows fewer GPUs than it has ranks is refused in one
  line: two ranks on one GPU would measure contention, not scaling.
"""

from __future__ import annotations

import os
import socket

from dlscale.contract.errors import UserError

BOUND_ENV = "DLSCALE_GPU_BOUND"
"""``1``: the launcher gave each rank its own GPU, the only one it sees."""


def gpu_index(local_rank: int, visible: int) -> int:
    """The index (among the GPUs this process sees) of the rank's own GPU."""
    host = socket.gethostname()
    if visible < 1:
        raise UserError(
            f"device cuda requested but this rank sees no CUDA GPU on host {host}; "
            "use --device cpu, or ask the scheduler for GPUs"
        )
    if os.environ.get(BOUND_ENV) == "1" and visible == 1:
        return 0
    if local_rank >= visible:
        raise UserError(
            f"host {host} shows {visible} GPU{'s' if visible > 1 else ''} and runs at least "
            f"{local_rank + 1} ranks (local rank {local_rank} has no GPU of its own): run at "
            f"most {visible} rank{'s' if visible > 1 else ''} per host (hosts = NAME:{visible}, "
            "or Slurm's --ntasks-per-node), or let the Slurm plan bind one GPU per task"
        )
    return local_rank
