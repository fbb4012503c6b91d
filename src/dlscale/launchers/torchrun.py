"""``--launcher torchrun``: PyTorch's elastic agent (``python -P -m torch.distributed.run``).

One torchrun agent per node (``nnodes``), each starting ``nproc-per-node`` ranks of the run;
here every agent runs on this machine, so ``nnodes = 2`` is two nodes' agents side by side, as
a multi-node job would start them. The agents meet in torch's c10d rendezvous at an endpoint
on node 0 (``--rdzv-endpoint``, hosted by node 0's agent: ``is_host``). c10d numbers the nodes
in the order of their addresses (``--local-addr``: each node's own, of one text width so that
text order is node order: 127.0.1.100+k on the loopback, the namespace's address on an
emulated network), so agent k starts ranks ``k*P .. k*P+P-1``, as the plan says; a worker
checks it (``DLSCALE_ENTRY_RANKS``). Across several agents every rendezvous round gives the
workers a store of their own (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``): after a restart the
agents' shared store would still hold the failed round's addresses. Each node's agent, and so
its ranks, runs on its own share of this machine's CPUs (its ranks times their threads:
:func:`~dlscale.contract.layout.node_cpus`), as on nodes of their own: otherwise every node's
local rank 0 took the same CPU where a framework pins by local rank (JAX: both nodes' ranks on
CPU 0, each waiting for it most of a window).

torchrun gives every rank RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT and keeps
the store torch.distributed's ``env://`` joins (``provides = ("torch",)``): the torch backends
take their rendezvous from it; other backends find their rank in RANK and their peers on the
loopback from the plan, as under the local launcher. The agent runs under the workers'
interpreter, which must hold torch (the MXNet environment does), with ``-P``; the ranks it
starts (``python -u -m dlscale.worker``) keep the working directory off their import path
through ``PYTHONSAFEPATH`` (:func:`~dlscale.launchers.base.common_env`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UserError
from dlscale.contract.layout import Addresses, node_cpus
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import (
    SAFE_PATH,
    Launcher,
    LaunchPlan,
    PlanEntry,
    common_env,
    killed_by_signal,
    missing_modules,
    output_text,
)
from dlscale.launchers.links import Link
from dlscale.launchers.local import LOOPBACK, on_this_machine, reserved_ports
from dlscale.launchers.network import MAX_NODES, EmulatedNetwork, address, interface_env
from dlscale.launchers.options import TorchrunOptions
from dlscale.runtime.checkpoint import ENABLED_ENV
from dlscale.runtime.context import ENTRY_RANKS_ENV

RANK_VARS = "RANK,LOCAL_RANK,WORLD_SIZE"
FAILURE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*exitcode\s*:\s*(-?\d+)")
"""A rank and its exit code in torchrun's summary of failed ranks."""


class TorchrunLauncher(Launcher):
    def blame(self, entry: PlanEntry) -> int | None:
        text = output_text(entry)
        failures = [(int(r), int(code)) for r, code in FAILURE.findall(text)]
        # torchrun's "root cause" is the earliest by the second, the lowest rank on a tie; a
        # rank killed by a signal is the cause more often than its peers that then failed, but
        # not by SIGTERM, with which the agent itself stops the ranks still running
        killed = [rank for rank, code in failures if code < 0 and killed_by_signal(code)]
        root = FAILURE.findall(text.partition("Root Cause")[2])
        ranks = killed or [int(r) for r, _ in root] or [rank for rank, _ in failures]
        return ranks[0] if ranks else None

    def check(self, python: str) -> None:
        if missing_modules(python, ("torch",)):
            raise UserError(
                f"--launcher torchrun runs torch.distributed.run under {python}, which cannot "
                "import torch: install torch there (make demo does for .venv)"
            )

    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        ports: tuple[int, ...] | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        ports = reserved_ports(config, ports, extra=1)  # the last: torchrun's rendezvous
        here = on_this_machine(config, ports=ports[:-1], cores=cores)
        nnodes = config.typed(TorchrunOptions).nnodes
        if nnodes > MAX_NODES:  # the nodes' addresses (one text width) run out
            raise UserError(f"torchrun runs at most {MAX_NODES} nodes' agents here, not {nnodes}")
        size = here.layout.size
        per_node, left = divmod(size, nnodes)
        if left:
            raise UserError(
                f"torchrun with nnodes = {nnodes} cannot split the run's {size} processes "
                f"({config.backend} x{config.workers}) evenly between its nodes; choose nnodes "
                f"among the divisors of {size}"
            )
        network = self._network(config, spec_path, nnodes)

        def where(node: int) -> str:  # the node's address: its namespace's, or a loopback one
            return address(node) if network else node_address(node, nnodes)

        env = {**common_env(config, spec_path, here.threads), "DLSCALE_RANK_VARS": RANK_VARS}
        restarts = config.typed(TorchrunOptions).max_restarts
        if restarts:  # the kernel checkpoints and a restarted rank resumes (runtime/checkpoint)
            env[ENABLED_ENV] = "1"
        if nnodes > 1:  # a store of each round's own for the workers (the module's docstring)
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        if network is not None:  # every rank at its node's address in the namespaces
            hosts = tuple(address(rank // per_node) for rank in range(size))
            here = dataclasses.replace(
                here, addresses=Addresses(hosts=hosts, ports=here.addresses.ports)
            )
            env.update(interface_env())
        rendezvous: tuple[str, ...] = (
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"{where(0)}:{ports[-1]}",
        )
        rendezvous += ("--rdzv-id", spec_path.parent.name)
        entries = []
        for node in range(nnodes):
            ranks = range(node * per_node, (node + 1) * per_node)
            node_args: tuple[str, ...] = ()
            if nnodes > 1:  # node 0 hosts the rendezvous; the addresses order the nodes
                node_args = ("--rdzv-conf", f"is_host={int(node == 0)}")
                node_args += ("--local-addr", where(node))
            entries.append(
                PlanEntry(
                    ranks=ranks,
                    argv=(
                        *(network.exec_prefix(node) if network else ()),
                        python,
                        *SAFE_PATH,  # the agent too imports nothing from the working directory
                        "-m",
                        "torch.distributed.run",
                        "--nnodes",
                        str(nnodes),
                        "--nproc-per-node",
                        str(per_node),
                        *rendezvous,
                        *node_args,
                        "--max-restarts",
                        str(restarts),
                        "--monitor-interval",
                        "0.5",
                        "-m",
                        "dlscale.worker",
                        str(spec_path),
                    ),
                    env={**env, ENTRY_RANKS_ENV: f"{ranks.start}-{ranks.stop - 1}"},
                    stdout=spec_path.parent / f"torchrun{node}.stdout",
                    stderr=spec_path.parent / f"torchrun{node}.stderr",
                    cpus=node_cpus(node, per_node * here.threads) if nnodes > 1 else (),
                )
            )
        plan = here.plan(entries)
        return dataclasses.replace(plan, setups=(network,)) if network else plan

    def check_point(self, config: RunConfig) -> None:
        options = config.typed(TorchrunOptions)
        if options.max_restarts and not BACKENDS.get(config.backend).resumable:
            able = ", ".join(name for name, spec in BACKENDS if spec.resumable)
            raise UserError(
                f"max_restarts = {options.max_restarts}: {config.backend} cannot resume "
                f"from a checkpoint (its replicas do not share one state, or its engine does "
                f"not save it); backends that can: {able}"
            )
        if options.network:
            from dlscale.launchers.network import check_can_emulate

            check_can_emulate(Link.parse(options.network))

    @staticmethod
    def _network(config: RunConfig, spec_path: Path, nnodes: int) -> EmulatedNetwork | None:
        """The run's emulated network (``network`` set), its namespaces named after the run's
        directory."""
        text = config.typed(TorchrunOptions).network
        if not text:
            return None
        if nnodes < 2:
            raise UserError(
                f"network = {text!r} shapes the links between nodes, and this run has one: "
                "set nnodes = 2 or more (each node in its own namespace)"
            )
        tag = hashlib.sha256(str(spec_path.parent.absolute()).encode()).hexdigest()[:10]
        return EmulatedNetwork(
            link=Link.parse(text),
            nodes=nnodes,
            name=f"dlscale-{tag}",
            record=spec_path.parent / "network.json",
        )


def node_address(node: int, nnodes: int) -> str:
    """Node ``node``'s loopback address when every agent runs here (no emulated network):
    127.0.0.1 for a single agent; across agents 127.0.1.100+k, one text width, because c10d
    numbers the nodes in the text order of their addresses."""
    return LOOPBACK if nnodes == 1 else f"127.0.1.{100 + node}"
