"""Each Slurm task on the node the placement rule chose for it, and each rank reading where its
peers are.

Slurm's own order (block) fills the nodes with ranks in turn: a parameter server and its
scheduler land wherever the count falls. Under a rule (``placement = spread | apart``,
:mod:`dlscale.contract.role_placement`) the plan knows each rank's node index; the nodes' names
only exist once the allocation does, so the step is started by a few shell lines inside it (the
batch script's, or ``bash -c`` before ``exec srun`` inside an allocation): they list the
allocation's nodes (``scontrol show hostnames $SLURM_JOB_NODELIST``), write one node name per
rank into the run's ``hostfile`` (from its ``placement``: one node index per line) and start
the step with ``--distribution=arbitrary`` (``SLURM_HOSTFILE``), which puts task ``k`` on line
``k``'s node. The allocation holds the fullest node's processes on every node
(``--ntasks-per-node``), so any node can take its share. An srun outside an allocation has no
node names before it runs: Slurm's block order there, and the dry run says so.

Each rank reads its peers' hosts from the same file (:func:`slurm_hosts`; block order from the
step's node list and counts where no host file was used).
"""

from __future__ import annotations

import shlex
import socket
import subprocess
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.files import read_bounded
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.role_placement import describe_placement
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.options import SlurmOptions
from dlscale.launchers.slurm_nodes import tasks_per_node

PLACEMENT_FILE = "placement"
HOSTFILE = "hostfile"
HOSTFILE_LIMIT = 64 * 2**20
"""A host file's most bytes: 65,536 ranks of names up to 1 KiB."""


def by_hostfile(facts: NodeFacts) -> bool:
    """Whether the step is placed by a host file: a rule chose the nodes and there is more
    than one (on one node every order is the same)."""
    return facts.node_of is not None and facts.nodes > 1


def allocation_nodes(facts: NodeFacts, size: int) -> list[str]:
    """An allocation's size: ``--nodes`` and, placed by a rule, every node room for the
    fullest node's tasks (``--ntasks-per-node``, which the step's host file then fills), else
    ``--ntasks`` (Slurm places them)."""
    if not by_hostfile(facts):
        return [f"--nodes={facts.nodes}", f"--ntasks={size}"]
    return [f"--nodes={facts.nodes}", f"--ntasks-per-node={facts.per_node(size)}"]


def placement_files(facts: NodeFacts, run_dir: Path) -> dict[Path, str]:
    """The run's ``placement`` file: each rank's node index, one per line."""
    if not by_hostfile(facts) or facts.node_of is None:
        return {}
    return {run_dir / PLACEMENT_FILE: "".join(f"{node}\n" for node in facts.node_of)}


def placement_lines(facts: NodeFacts, run_dir: Path) -> list[str]:
    """Shell lines, inside the allocation, that write the step's host file from its nodes and
    point srun at it; a one-line error (exit 1) where the allocation holds fewer nodes than
    the placement uses."""
    if not by_hostfile(facts):
        return []
    placement, hostfile = shlex.quote(str(run_dir / PLACEMENT_FILE)), run_dir / HOSTFILE
    need = facts.nodes
    return [
        'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        f'if [ "${{#nodes[@]}}" -lt {need} ]; then echo "dlscale: the allocation holds '
        f"${{#nodes[@]}} node(s) and the point is placed on {need}: ask for {need} nodes "
        f'(salloc --nodes={need}), or set nodes lower" >&2; exit 1; fi',
        f'while read -r node; do echo "${{nodes[$node]}}"; done < {placement} > '
        f"{shlex.quote(str(hostfile))}",
        f"export SLURM_HOSTFILE={shlex.quote(str(hostfile))}",
        "unset SLURM_NTASKS_PER_NODE  # the allocation's, not the step's",
    ]


def step_arguments(facts: NodeFacts, size: int) -> list[str]:
    """A step's own count of tasks and, placed, the host file's order."""
    if not by_hostfile(facts):
        return []
    return [f"--ntasks={size}", "--distribution=arbitrary"]


def placed_lines(config: RunConfig, facts: NodeFacts) -> tuple[str, ...]:
    """What the dry run says of where the processes go: the rule and each node's share."""
    rule = config.typed(SlurmOptions).placement
    if facts.nodes == 1:
        return ()
    if facts.node_of is None:
        return (f"placement {rule}: Slurm's block order",)
    layout = config.layout()
    return (f"placement {rule}:", *describe_placement(layout, facts.node_of))


def slurm_hosts(environ: dict[str, str], size: int) -> tuple[str, ...]:
    """Each rank's host in a Slurm step, as addresses: line ``k`` of the step's host file
    (``--distribution=arbitrary``), else the step's nodes (``scontrol show hostnames``)
    filled in order, each with its count of tasks (block distribution)."""
    hostfile = environ.get("SLURM_HOSTFILE", "")
    if environ.get("SLURM_DISTRIBUTION") == "arbitrary" and hostfile:
        return _from_hostfile(Path(hostfile), size)
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    counts = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    if not nodelist or not counts:
        raise UserError("not in a Slurm step: SLURM_STEP_NODELIST is not set")
    done = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise UserError(f"scontrol show hostnames {nodelist}: {done.stderr.strip()}")
    nodes = [_address(node) for node in done.stdout.split()]
    return hosts_by_rank(nodes, tasks_per_node(counts), size)


def _from_hostfile(path: Path, size: int) -> tuple[str, ...]:
    try:
        names = read_bounded(path, HOSTFILE_LIMIT).decode("utf-8", "replace").split()
    except OSError as error:
        raise UserError(f"cannot read the step's host file {path}: {error}") from None
    if len(names) < size:
        raise UserError(f"the step's host file {path} names {len(names)} ranks; the run has {size}")
    addresses = {name: _address(name) for name in dict.fromkeys(names[:size])}
    return tuple(addresses[name] for name in names[:size])


def _address(node: str) -> str:
    """A node's IPv4 address, which every engine can bind and connect to (ps-lite's ZeroMQ
    binds no host name); its name when it does not resolve."""
    try:
        return socket.gethostbyname(node)
    except OSError:
        return node


def hosts_by_rank(nodes: list[str], counts: list[int], size: int) -> tuple[str, ...]:
    hosts = tuple(node for node, count in zip(nodes, counts, strict=False) for _ in range(count))
    if len(hosts) != size or len(nodes) != len(counts):
        raise UserError(
            f"Slurm placed {len(hosts)} tasks on {nodes} ({counts} each); the run has {size}"
        )
    return hosts
