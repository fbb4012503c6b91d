"""What a worker knows about itself: its rank and role, its run and where to write."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.events import EventWriter
from dlscale.contract.layout import Addresses, Process, ProcessLayout
from dlscale.contract.run_config import RunConfig

RANK_VARS_ENV = "DLSCALE_RANK_VARS"
"""Set by a launcher whose tool names ranks its own way: ``RANK_VAR,LOCAL_VAR,SIZE_VAR``."""
ENTRY_RANKS_ENV = "DLSCALE_ENTRY_RANKS"
"""Set by a launcher on a command that starts several ranks whose numbers its tool assigns
(torchrun's agents): ``FIRST-LAST``, the ranks the plan expects that command to start."""
STANDARD_RANK_VARS = (
    ("DLSCALE_RANK", "DLSCALE_LOCAL_RANK", "DLSCALE_WORLD_SIZE"),
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


@dataclass(frozen=True, kw_only=True)
class WorkerContext:
    config: RunConfig
    run_dir: Path
    rank: int
    local_rank: int
    layout: ProcessLayout
    addresses: Addresses
    threads: int
    events: EventWriter

    @property
    def process(self) -> Process:
        """This process's place in the layout: its role, index and replicas."""
        return self.layout.processes[self.rank]

    @property
    def processes(self) -> int:
        """Processes in the run, every role included."""
        return self.layout.size

    @staticmethod
    def rank_from_environment() -> tuple[int, int, int]:
        """(rank, local_rank, processes) from the variables the launcher's tool set."""
        candidates = list(STANDARD_RANK_VARS)
        if custom := os.environ.get(RANK_VARS_ENV):
            candidates.insert(0, tuple(custom.split(",")))  # type: ignore[arg-type]
        for rank_var, local_var, size_var in candidates:
            if rank_var in os.environ and size_var in os.environ:
                rank = int(os.environ[rank_var])
                return rank, int(os.environ.get(local_var, rank)), int(os.environ[size_var])
        return 0, 0, 1

    @staticmethod
    def check_entry_rank(rank: int) -> None:
        """Raise :class:`UserError` when the launcher's tool gave this process a rank that its
        command was not planned to start (``DLSCALE_ENTRY_RANKS``): its peers' addresses and
        the blame for a failure would then be another rank's."""
        text = os.environ.get(ENTRY_RANKS_ENV)
        if not text:
            return
        first, _, last = text.partition("-")
        if not int(first) <= rank <= int(last):
            raise UserError(
                f"the launcher's tool numbered this process rank {rank}, but its command was "
                f"planned to start ranks {first} to {last}; the nodes met in another order than "
                "planned: report it with the run's directory"
            )
