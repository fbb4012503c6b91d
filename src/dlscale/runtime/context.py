"""What a worker knows about itself: its rank, its run and where to write."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dlscale.config.run_config import RunConfig
from dlscale.metrics.events import EventWriter


@dataclass(frozen=True, kw_only=True)
class WorkerContext:
    config: RunConfig
    run_dir: Path
    rank: int
    local_rank: int
    world_size: int
    threads: int
    events: EventWriter

    @staticmethod
    def rank_from_environment() -> tuple[int, int, int]:
        """(rank, local_rank, world_size) from the variables torchrun, Slurm or MPI set."""
        for rank_var, local_var, size_var in (
            ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
            ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
            ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
            ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
        ):
            if rank_var in os.environ and size_var in os.environ:
                rank = int(os.environ[rank_var])
                return rank, int(os.environ.get(local_var, rank)), int(os.environ[size_var])
        return 0, 0, 1
