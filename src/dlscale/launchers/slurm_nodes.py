"""The compute nodes a Slurm point runs on: their CPUs and GPUs, given (``cpus_per_node``,
``gpus_per_node``) or asked of Slurm (``sinfo``, the partition's nodes), and how many of them
the point takes. The plan is made from these, never from the machine dlscale runs on: a login
node has a few cores and often no GPU, and the nodes it submits to differ from it.

Nodes a point takes (``nodes = 0``, the default, lets the plan choose): under ``--device cuda``
as many as one GPU per rank needs, ``ceil(ranks / gpus_per_node)``; on CPUs one node while the
ranks fit its CPUs, else ``ceil(ranks / cpus_per_node)``. A given ``nodes`` is a ceiling: a
point never takes more nodes than it has workers, so the 1-worker baseline runs on one node
(with every role of its run). The training ranks spread evenly over the nodes (Slurm's block
distribution fills them in order, the fullest holding ``ceil(ranks / nodes)``), which is what
threads per rank are planned from (:class:`~dlscale.contract.nodes.NodeFacts`).

Where each rank runs, once Slurm placed it: :func:`slurm_hosts` reads the step's nodes and their
counts of tasks (every rank does, so the backends that need every peer's address have them).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import socket
import subprocess

from dlscale.contract.errors import UserError
from dlscale.contract.nodes import NodeFacts
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
    size = config.layout().size
    if options.nodes:
        nodes = min(options.nodes, config.workers)
    elif cuda:  # one GPU per replica: as many nodes as hold the ranks' GPUs
        per_node = gpus // gpus_per_task(config) if gpus else 0
        nodes = -(-size // per_node) if per_node else 1
    else:  # the ranks' threads on as few nodes as hold them
        nodes = -(-size * (config.threads_per_worker or 1) // cpus)
    return NodeFacts(cpus=cpus, gpus=gpus if cuda or gpus else None, nodes=nodes,
                     source="; ".join(given))  # fmt: skip


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


def slurm_hosts(environ: dict[str, str], size: int) -> tuple[str, ...]:
    """Each rank's host in a Slurm step: the step's nodes (``scontrol show hostnames``, as
    addresses) filled in order, each with its count of tasks (block distribution)."""
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
