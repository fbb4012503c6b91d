"""Which node each process of a run goes to, by a stated rule per role (pure data, no launcher).

Every backend calls the processes that compute a replica's steps ``worker`` (tf-ps's workers
too, whose steps its chief drives); the others serve them: parameter servers (``server``,
``ps``), MXNet's ``scheduler``, tf-ps's ``chief``. The rules (``placement``):

- ``spread`` (the default): the workers evenly over the workers' nodes, in blocks (node 1 holds
  workers 0..k-1, the first ``workers mod nodes`` nodes one more than the rest); then each
  other process, in rank order, on the node holding the fewest processes so far (the first
  such): one per node while they go round, beside the workers.
- ``apart``: the workers as for ``spread``; the others on nodes of their own after the
  workers' nodes, evenly, as many nodes as hold them at the workers' count per node (at least
  one): servers never share a node's CPUs, GPUs or network link with a worker.
- ``block``: the scheduler's own order (Slurm fills its nodes in rank order), as before the
  rules existed: no node is chosen here.

Node ``k`` is an index into the nodes the run gets, whichever names the scheduler gives them.
"""

from __future__ import annotations

from dlscale.contract.layout import ProcessLayout

RULES = ("spread", "apart", "block")
COMPUTE_ROLE = "worker"


def place_roles(layout: ProcessLayout, worker_nodes: int, rule: str) -> tuple[int, ...] | None:
    """The node index of each rank, in rank order; ``None`` under ``block`` (the scheduler
    places). ``worker_nodes`` is at most the number of workers (no node holds none)."""
    if rule not in RULES:
        raise ValueError(f"unknown placement rule {rule!r}")
    if rule == "block":
        return None
    workers = [p.rank for p in layout.processes if p.role == COMPUTE_ROLE]
    others = [p.rank for p in layout.processes if p.role != COMPUTE_ROLE]
    nodes = max(1, min(worker_nodes, len(workers)))
    node_of = dict(zip(workers, _blocks(len(workers), nodes), strict=True))
    load = [0] * nodes
    for node in node_of.values():
        load[node] += 1
    if rule == "spread":
        for rank in others:
            node = load.index(min(load))
            node_of[rank] = node
            load[node] += 1
    elif others:
        per_node = max(load) if workers else len(others)
        apart = -(-len(others) // per_node)
        for rank, node in zip(others, _blocks(len(others), apart), strict=True):
            node_of[rank] = nodes + node
    return tuple(node_of[p.rank] for p in layout.processes)


def _blocks(count: int, nodes: int) -> list[int]:
    """``count`` items over ``nodes`` evenly, in blocks, the first ``count mod nodes`` nodes
    one more: 5 over 2 is [0, 0, 0, 1, 1]."""
    base, extra = divmod(count, nodes)
    return [node for node in range(nodes) for _ in range(base + (node < extra))]


def per_node(node_of: tuple[int, ...]) -> tuple[int, ...]:
    """How many processes each node holds: (3, 2) for [0, 0, 1, 0, 1]."""
    counts = [0] * (max(node_of) + 1 if node_of else 0)
    for node in node_of:
        counts[node] += 1
    return tuple(counts)


def describe_placement(layout: ProcessLayout, node_of: tuple[int, ...]) -> list[str]:
    """One line per node, counted from 1: ``node 1: worker 0-1; scheduler 0``."""
    lines = []
    for node in range(len(per_node(node_of))):
        held = [p for p, n in zip(layout.processes, node_of, strict=True) if n == node]
        by_role: dict[str, list[int]] = {}
        for process in held:
            by_role.setdefault(process.role, []).append(process.index)
        parts = [f"{role} {_span(indices)}" for role, indices in by_role.items()]
        lines.append(f"node {node + 1}: {'; '.join(parts)}")
    return lines


def _span(indices: list[int]) -> str:
    """``0-3`` for consecutive indices, else ``0,2``."""
    if len(indices) > 1 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}-{indices[-1]}"
    return ",".join(str(i) for i in indices)
