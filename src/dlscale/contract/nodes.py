"""What the machines a point runs on offer it: the facts a study plans its threads and GPUs
from. A launcher that starts every process here plans from this machine; one that runs the
ranks on compute nodes (Slurm) plans from those nodes, given or asked of their scheduler, and
never from the login node dlscale runs on, which may have fewer cores and no GPU at all."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class NodeFacts:
    cpus: int
    """CPUs of one node (Slurm's count: hardware threads where the node has them)."""
    gpus: int | None
    """GPUs of one node; ``None``: not known before launch (this machine's are asked by the
    preflight check under ``--device cuda``)."""
    nodes: int
    """Nodes the point's processes are spread over, its training ranks evenly."""
    source: str
    """Where the facts come from, as a dry run says it: ``this machine``, ``given
    (cpus_per_node)``, ``sinfo (partition gpu)``."""
    node_of: tuple[int, ...] | None = None
    """Each rank's node index where a placement rule chose it
    (:mod:`dlscale.contract.role_placement`); ``None``: spread evenly in rank order."""

    def __post_init__(self) -> None:
        if self.cpus < 1 or self.nodes < 1 or (self.gpus is not None and self.gpus < 0):
            raise ValueError(f"impossible node facts: {self}")
        if self.node_of is not None and len(set(self.node_of)) != self.nodes:
            raise ValueError(f"the placement uses other nodes than {self.nodes}: {self}")

    def per_node(self, processes: int) -> int:
        """The most of ``processes`` on one node: as placed, else spread evenly (the
        remainder on the first)."""
        if self.node_of:
            return max(Counter(self.node_of).values())
        return -(-processes // self.nodes)

    def threads(self, processes: int) -> int:
        """Threads each process gets when ``processes`` share the nodes: a node's CPUs over
        the processes on the fullest node, at least 1."""
        return max(1, self.cpus // self.per_node(processes))

    def describe(self, processes: int) -> str:
        gpus = "" if self.gpus is None else f", {self.gpus} GPUs"
        nodes = f"{self.nodes} node" + ("s" if self.nodes > 1 else "")
        per = self.per_node(processes)
        return (
            f"{nodes} of {self.cpus} CPUs{gpus} ({self.source}); "
            f"{per} process{'es' if per != 1 else ''} on the fullest"
        )
