"""The Ray launcher: each rank of a point a Ray actor, placed by a placement group a bundle a
rank (its CPUs, and one GPU under ``--device cuda``), running dlscale's own worker command, so
that every measurement is the one the other launchers take.

The plan is data (:class:`~dlscale.launchers.ray_cluster.RayCluster`, the commands); the
cluster is joined or started, the group placed and the actors started at launch
(:mod:`dlscale.launchers.ray_ranks`). The ranks' hosts are known once Ray placed them: each
rank reads them from its environment (:meth:`RayLauncher.hosts`), as under Slurm; the ports are
reserved here, as for Slurm, and a lost one is retried (:mod:`dlscale.launchers.port_retry`).
Every engine runs: its cluster variables (``MASTER_ADDR``, ``TF_CONFIG``, ``DMLC_*``) are a
function of the hosts and ports, set by each rank.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from dlscale.contract.errors import UserError
from dlscale.contract.layout import Addresses
from dlscale.contract.nodes import NodeFacts
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import (
    Launcher,
    LaunchPlan,
    PlanEntry,
    Running,
    WithSetups,
    common_env,
    thread_budget,
    worker_command,
    write_files,
)
from dlscale.launchers.local import reserved_ports
from dlscale.launchers.options import RayOptions
from dlscale.launchers.ray_cluster import (
    RayCluster,
    alive_nodes,
    answers,
    connect,
    import_ray,
    where,
)
from dlscale.runtime.gpus import BOUND_ENV


class RayLauncher(Launcher):
    def plan(
        self,
        config: RunConfig,
        spec_path: Path,
        python: str,
        *,
        ports: tuple[int, ...] | None = None,
        cores: int | None = None,
    ) -> LaunchPlan:
        options = config.typed(RayOptions)
        layout = config.layout()
        spec_path = spec_path.absolute()
        facts = self.node_facts(config, cores)
        threads, warnings = thread_budget(
            facts.per_node(layout.size), config.threads_per_worker, facts.cpus
        )
        gpu = config.device == "cuda"
        bundle = {"CPU": float(threads), **({"GPU": 1.0} if gpu else {})}
        cluster = RayCluster(
            address=options.ray_address,
            bundles=(bundle,) * layout.size,
            strategy=options.ray_placement,
            cpus=max(facts.cpus, threads * layout.size),
        )
        env = common_env(config, spec_path, threads)
        if gpu:
            env[BOUND_ENV] = "1"  # Ray sets each actor's CUDA_VISIBLE_DEVICES to its own GPU
        entries = [
            PlanEntry(
                ranks=range(rank, rank + 1),
                argv=worker_command(python, spec_path),
                env={**env, "DLSCALE_RANK": str(rank), "DLSCALE_WORLD_SIZE": str(layout.size)},
                stdout=spec_path.parent / f"rank{rank}.stdout",
                stderr=spec_path.parent / f"rank{rank}.stderr",
            )
            for rank in range(layout.size)
        ]
        return LaunchPlan(
            entries=tuple(entries),
            layout=layout,
            addresses=Addresses(hosts=(), ports=reserved_ports(config, ports)),
            threads_per_worker=threads,
            warnings=tuple(warnings),
            setups=(cluster,),
            nodes=f"{where(options.ray_address)}: {facts.nodes} node(s) of {facts.cpus} CPUs "
            f"({facts.source})",
        )

    def start(self, plan: LaunchPlan) -> Running:
        from dlscale.launchers.ray_ranks import RayRanks

        (cluster,) = (s for s in plan.setups if isinstance(s, RayCluster))
        write_files(plan)
        cluster.create()
        try:
            running = RayRanks(cluster, plan.entries, _ray_facts(cluster))
        except BaseException:
            cluster.remove()
            raise
        return WithSetups(running, [cluster])

    def check(self, python: str) -> None:
        import_ray()

    def node_facts(self, config: RunConfig, cores: int | None = None) -> NodeFacts:
        address = config.typed(RayOptions).ray_address
        if not address:
            return super().node_facts(config, cores)
        cpus, gpus, nodes = _asked(address)
        return NodeFacts(
            cpus=cpus, gpus=gpus, nodes=min(nodes, config.layout().size), source="ray.nodes()"
        )

    def hosts(self, size: int) -> tuple[str, ...]:
        from dlscale.launchers.ray_ranks import HOSTS_ENV

        hosts = tuple(h for h in os.environ.get(HOSTS_ENV, "").split(",") if h)
        if len(hosts) != size:
            raise UserError(
                f"this rank was not started by dlscale's Ray launcher ({HOSTS_ENV} names "
                f"{len(hosts)} hosts for {size} ranks): run it with --launcher ray"
            )
        return hosts

    def on_each_node(self, config: RunConfig, argv: tuple[str, ...]) -> tuple[str, ...]:
        address = config.typed(RayOptions).ray_address
        if not address:
            return argv
        import_ray()
        answers(address)  # here, in one line, rather than from inside the node check
        return (argv[0], "-P", "-m", "dlscale.launchers.ray_each_node", address, *argv)


@functools.cache
def _asked(address: str) -> tuple[int, int | None, int]:
    """The smallest alive node's CPUs and GPUs, and how many nodes, of the cluster at
    ``address`` (asked once a process)."""
    ray = connect(address, 0)
    try:
        nodes = alive_nodes(ray)
    finally:
        ray.shutdown()
    if not nodes:
        raise UserError(f"{where(address)} has no live node: ray status shows why")
    cpus = min(int(node["Resources"].get("CPU", 0)) for node in nodes)
    gpus = min(int(node["Resources"].get("GPU", 0)) for node in nodes)
    if cpus < 1:
        raise UserError(f"{where(address)} has a node without CPUs for the ranks: ray status")
    return cpus, gpus, len(nodes)


def _ray_facts(cluster: RayCluster) -> dict[str, str]:
    """What every rank's environment tells its result of Ray."""
    import ray

    return {
        "DLSCALE_RAY_VERSION": ray.__version__,
        "DLSCALE_RAY_CLUSTER": cluster.address or "local",
        "DLSCALE_RAY_RESOURCES": ",".join(f"{k}={v:g}" for k, v in cluster.bundles[0].items()),
    }
