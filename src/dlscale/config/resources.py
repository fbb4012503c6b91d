"""The threads every point of a study gets, planned from the machines its launcher runs it on
(:class:`~dlscale.contract.nodes.NodeFacts`: this machine for a launcher that runs every
process here, the compute nodes for Slurm), and the whole-machine reference points."""

from __future__ import annotations

import dataclasses

from dlscale.contract.backends import BACKENDS
from dlscale.contract.declared_options import on_one_machine
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.run_config import RunConfig


def node_facts(point: RunConfig, cores: int | None = None) -> NodeFacts:
    """The machines ``point``'s launcher runs it on (``cores``: this machine's usable cores,
    for a launcher that runs every process here)."""
    facts: NodeFacts = LAUNCHERS.get(point.launcher).create().node_facts(point, cores)
    return facts


def thread_budget(points: tuple[RunConfig, ...], facts: list[NodeFacts]) -> int:
    """Threads per process that fit every point on its nodes (``facts``, one per point): the
    least over the points of a node's CPUs // the processes on the point's fullest node."""
    return min(f.threads(p.layout().size) for p, f in zip(points, facts, strict=True))


def machine_points(points: tuple[RunConfig, ...], facts: list[NodeFacts]) -> list[RunConfig]:
    """For each distinct setting, the framework's reference backend at 1 worker with every
    core of its node (``facts``, one per point): what the same machine does as one worker."""
    out: list[RunConfig] = []
    for point, node in zip(points, facts, strict=True):
        reference = BACKENDS.reference_of(point.framework)
        if reference is None:
            continue
        grouped = point.grouped_options()  # the backend's own options are another backend's
        dataset_options = grouped["dataset"] | grouped["launcher"] | grouped["model"]
        try:
            candidate = on_one_machine(
                dataclasses.replace(
                    point,
                    backend=reference,
                    workers=1,
                    threads_per_worker=node.cpus,
                    options=dataset_options,
                )
            )
        except (UnsupportedPoint, UserError):
            continue
        if candidate not in out:
            out.append(candidate)
    return out
