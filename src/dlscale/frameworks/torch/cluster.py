"""The environment torch.distributed's env:// rendezvous reads (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlscale.contract.layout import Addresses, Process, ProcessLayout

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig


def torch_cluster_env(
    process: Process, layout: ProcessLayout, addresses: Addresses, config: RunConfig
) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address (rank 0's host, first port);
    nothing under a launcher that sets these itself and keeps the store (torchrun)."""
    from dlscale.contract.launchers import LAUNCHERS

    if "torch" in LAUNCHERS.get(config.launcher).provides:
        return {}
    local = addresses.same_host(process.rank)
    return {
        "RANK": str(process.rank),
        "WORLD_SIZE": str(layout.size),
        "LOCAL_RANK": str(local.index(process.rank)),
        "LOCAL_WORLD_SIZE": str(len(local)),
        "MASTER_ADDR": addresses.hosts[0],
        "MASTER_PORT": str(addresses.ports[0]),
    }
