"""The compute nodes a Slurm point runs on: their CPUs and GPUs, given (``cpus_per_node``,
``gpus_per_node``) or asked of Slurm (``sinfo``, the partition's nodes), and how many of them
the point takes. The plan is made from these, never from the machine dlscale runs on: a login
node has a few cores and often no GPU, and the nodes it submits to differ from it.

Nodes a point takes (``nodes = 0``, the default, lets the plan choose): under ``--device cuda``
as many as one GPU per rank needs, ``ceil(ranks / gpus_per_node)``; on CPUs one node while the
ranks fit its CPUs, else ``ceil(ranks / cpus_per_node)``. A given ``nodes`` is a ceiling: a
point never takes more nodes than it has workers, so the 1-worker baseline runs on one node
(with every role of its run). Each process's node is chosen by the ``placement`` rule
(:mod:`dlscale.contract.role_placement`; ``apart`` adds the servers' own nodes to those of the
workers), and threads per rank are planned from the fullest node
(:class:`~dlscale.contract.nodes.NodeFacts`).

Where each rank goes on those nodes, and how it learns its peers:
:mod:`dlscale.launchers.slurm_place`.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess

from dlscale.contract.errors import UserError
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.role_placement import COMPUTE_ROLE, place_roles
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.options import SlurmOptions
from dlscale.launchers.slurm_controller import START, controller_problem, said

SINFO_TIMEOUT_S = 30.0
GPU_GRES = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")
"""A GPU in sinfo's Gres column: ``gpu:4``, ``gpu:a100:4(S:0-1)``."""


def node_facts(config: RunConfig) -> NodeFacts:
    """The nodes ``config`` runs on: each node's CPUs and GPUs (given; inside an allocation,
    what it holds; else the smallest of the partition's nodes, so that the plan fits whichever
    Slurm gives) and how many."""
    options = config.typed(SlurmOptions)
    cuda = config.device == "cuda"
    cpus, gpus = options.cpus_per_node, options.gpus_per_node
    given = [f"{key}={value}" for key, value in (("cpus_per_node", cpus), ("gpus_per_node", gpus))
             if value]  # fmt: skip
    held = allocation(dict(os.environ))
    if held is not None and (not cpus or (cuda and not gpus and held[1])):
        cpus, gpus = cpus or held[0], gpus or held[1]
        given.append("this allocation")
    if not cpus or (cuda and not gpus):
        asked_cpus, asked_gpus = partition_nodes(options.partition, cuda)
        cpus, gpus = cpus or asked_cpus, gpus or asked_gpus
        where = f"partition {options.partition}" if options.partition else "every partition"
        given.append(f"sinfo, {where}")
    layout = config.layout()
    apart = options.placement == "apart"  # the workers' nodes hold the workers alone
    share = len(layout.of_role(COMPUTE_ROLE)) if apart else layout.size
    if options.nodes:
        nodes = min(options.nodes, config.workers)
    elif cuda:  # one GPU per replica: as many nodes as hold the ranks' GPUs
        per_node = gpus // gpus_per_task(config) if gpus else 0
        nodes = -(-share // per_node) if per_node else 1
    else:  # the ranks' threads on as few nodes as hold them
        nodes = -(-share * (config.threads_per_worker or 1) // cpus)
    node_of = place_roles(layout, nodes, options.placement)
    return NodeFacts(
        cpus=cpus,
        gpus=gpus if cuda or gpus else None,
        nodes=len(set(node_of)) if node_of else nodes,
        source="; ".join(given),
        node_of=node_of,
    )


def allocation(environ: dict[str, str]) -> tuple[int, int] | None:
    """Inside an allocation (salloc, a batch script, a study's own job): the fewest CPUs it
    holds on a node and the GPUs it holds on this one (``SLURM_JOB_CPUS_PER_NODE``,
    ``SLURM_GPUS_ON_NODE``); a point planned there fits what the job was given, which may be
    less than its nodes have. ``None`` outside one."""
    text = environ.get("SLURM_JOB_CPUS_PER_NODE")
    if "SLURM_JOB_ID" not in environ or not text:
        return None
    try:
        cpus = min(tasks_per_node(text))
    except UserError:
        return None  # a count Slurm would not write: the nodes are asked instead
    gpus = environ.get("SLURM_GPUS_ON_NODE", "")
    return cpus, int(gpus) if gpus.isdigit() else 0


def gpus_per_task(config: RunConfig) -> int:
    """GPUs each task gets under ``--device cuda``: one, except for a run of one process
    training several replicas (tf-mirrored: every replica's GPU driven from that process).
    tf-ps's chief counts every replica as its own but drives none: it has other processes."""
    processes = config.layout().processes
    return processes[0].replicas if len(processes) == 1 and processes[0].replicas > 1 else 1


def check_gpus(config: RunConfig, facts: NodeFacts) -> None:
    """Under ``--device cuda`` each rank needs GPUs of its node's own, one per replica."""
    if config.device != "cuda":
        return
    size, each = config.layout().size, gpus_per_task(config)
    per_node = facts.per_node(size)
    if facts.gpus and each > facts.gpus:
        raise UserError(
            f"{config.backend} x{config.workers} drives {each} GPUs from one process, and "
            f"the nodes have {facts.gpus} ({facts.source}); use fewer workers, or another "
            "backend across nodes"
        )
    if not facts.gpus or per_node * each > facts.gpus:
        fewest = -(-size // (facts.gpus // each)) if facts.gpus else None
        fix = (
            f"set nodes = {fewest} or more (or 0: as many as the GPUs need)"
            if fewest is not None
            else "choose a partition with GPUs (partition = NAME), or give gpus_per_node"
        )
        gpus = "one GPU each" if each == 1 else f"{each} GPUs each"
        raise UserError(
            f"{config.backend} x{config.workers} on {facts.nodes} node(s) puts {per_node} "
            f"ranks on a node, {gpus}, and the nodes have {facts.gpus or 0} GPUs "
            f"({facts.source}); {fix}"
        )


@functools.cache
def partition_nodes(partition: str, gpus: bool) -> tuple[int, int]:
    """The fewest CPUs and GPUs of any node of ``partition`` (every node when empty), from
    ``sinfo``; asked once per partition and process."""
    give = "--set cpus_per_node=C" + (" and --set gpus_per_node=G" if gpus else "")
    problem = controller_problem(dict(os.environ))
    if problem is not None:
        raise UserError(
            f"cannot ask Slurm for its nodes' CPUs and GPUs: {problem}; {START}, or give {give}"
        )
    argv = ["sinfo", "--noheader", "--Node", "--format=%c|%G"]
    if partition:
        argv.append(f"--partition={partition}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        raise UserError(f"cannot run sinfo ({error}); give {give}") from None
    if done.returncode != 0:
        raise UserError(f"sinfo: {said(done.stderr or done.stdout)}; give {give}")
    sizes = [parse_sinfo_line(line) for line in done.stdout.splitlines() if line.strip()]
    if not sizes:
        where = f"partition {partition}" if partition else "this cluster"
        raise UserError(f"sinfo lists no node in {where}; check partition, or give {give}")
    return min(c for c, _ in sizes), min(g for _, g in sizes)


def parse_sinfo_line(line: str) -> tuple[int, int]:
    """``CPUS|GRES`` (sinfo's ``%c|%G``) as (CPUs, GPUs): ``16|gpu:a100:4(S:0-1)`` is (16, 4)."""
    cpus, _, gres = line.strip().partition("|")
    found = re.fullmatch(r"(\d+)\+?", cpus.strip())
    if found is None or int(found.group(1)) < 1:
        raise UserError(f"cannot read sinfo's CPUs of a node: {line.strip()!r}")
    return int(found.group(1)), sum(int(n) for n in GPU_GRES.findall(gres))


def srun_on_each_node(config: RunConfig, argv: tuple[str, ...]) -> tuple[str, ...]:
    """``argv`` once on each node the point's largest run would take (``nodes``, at least
    one), as a step of this allocation or of one srun asks for: each task labelled with its
    number (``--label``), under ``--device cuda`` with the GPUs a node gives its ranks."""
    options = config.typed(SlurmOptions)
    nodes = max(options.nodes, 1)
    args = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--label"]
    args += ["--job-name=dlscale-doctor", "--time=5"]
    if config.device == "cuda":
        args.append(f"--gpus-per-node={node_facts(config).gpus or 1}")
    return (*args, *users_options(options), *argv)


def users_options(options: SlurmOptions) -> list[str]:
    """The user's own Slurm options: ``partition`` and ``slurm_args`` (shell-quoted words)."""
    args = [f"--partition={options.partition}"] if options.partition else []
    try:
        args += shlex.split(options.slurm_args)
    except ValueError as error:
        raise UserError(f"slurm_args = {options.slurm_args!r}: {error}") from None
    return one_line_each(args)


def one_line_each(args: list[str]) -> list[str]:
    """``args`` as they are, or one line refusing the first that holds a control character:
    a line break in an ``#SBATCH`` line would end it and start a command of the batch script
    (a partition, slurm_args, a results directory's path)."""
    for arg in args:
        if any(ord(c) < 32 or ord(c) == 127 for c in arg):
            raise UserError(
                f"Slurm option {arg!r} holds a control character (a line break?); give "
                "partition, slurm_args and the results directory on one line"
            )
    return args


def tasks_per_node(text: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE (``2(x3),1``) as one count per node: [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in text.split(","):
        found = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if found is None:
            raise UserError(f"cannot read Slurm's tasks per node {text!r}")
        counts += [int(found.group(1))] * int(found.group(2) or 1)
    return counts
