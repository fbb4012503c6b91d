"""A real Slurm of 2 nodes: ``scripts/slurm-local.sh start DIR --hosts 2`` makes 2 emulated hosts
(network and UTS namespaces, sshd) with a slurmd in each and slurmctld on this machine, and
engines run across both nodes as sbatch jobs: each rank where Slurm put it (its ``start`` record's
host is the node Slurm's step gave it), roles on both nodes, the processes' hosts in ``ls runs``,
and a rank killed on a node failing the run named with its host. Needs root. The other engines
cross hosts under mpirun and horovodrun (test_hosts.py says why once is enough)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from dlscale.contract.events import events_path, read_events
from tests.cluster.test_hosts import TINY, _nothing_left
from tests.distributed.processes import kill_rank_and_check_the_run_fails, processes_naming

pytestmark = pytest.mark.dist

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
NODES = ("dlsnode1", "dlsnode2")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.fail("these tests start Slurm's daemons and emulated hosts: run them as root")
    where = tmp_path_factory.mktemp("slurm-hosts")
    start = [str(SCRIPT), "start", str(where), "--hosts", "2", "--owner", str(os.getpid())]
    started = subprocess.run(start, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    env = {"SLURM_CONF": str(where / "slurm.conf")}
    try:
        yield env
    finally:
        subprocess.run([str(SCRIPT), "stop", str(where)], timeout=120)
        assert not _nothing_left()


def test_the_cluster_has_a_slurmd_on_each_host(slurm):
    shown = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm},
    )
    assert shown.stdout.split() == ["dlsnode1", "idle", "dlsnode2", "idle"]
    step = subprocess.run(
        ["srun", "--nodes=2", "--ntasks=2", "hostname"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **slurm},
    )
    assert step.returncode == 0, step.stderr
    assert sorted(step.stdout.split()) == list(NODES)  # each task in its node's namespace


CASES = {
    "torch-ddp": ("torch-ddp", ()),
    "torch-ps": ("torch-ps", ()),
    "horovod-keras": ("horovod-keras", ()),
    "tf-mwms": ("tf-mwms", ()),
    "tf-ps": ("tf-ps", ("--set", "ps_mode=sync")),
    "keras-fit": ("keras-fit", ()),
    "mxnet-kv": ("mxnet-kv", ("--set", "kvstore=dist_sync")),
}
SERVING = {"server", "ps"}
"""Roles that Slurm's block distribution puts on a node of their own here (4 tasks: 3 on the
first node; 3 tasks: 2): the parameter servers apart from the workers, as the papers ran them."""


@pytest.mark.parametrize("case", list(CASES))
def test_an_engine_runs_across_two_slurm_nodes(tmp_path: Path, cli, slurm, case):
    backend, extra = CASES[case]
    run = cli(
        "run", *TINY, "--backend", backend, "--workers", "2", "--launcher", "slurm",
        "--set", "slurm_mode=sbatch", "--set", "nodes=2", *extra,
        "--json", "--results", str(tmp_path), env=slurm, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    points = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "point"]
    assert [p["status"] for p in points] == ["completed"], [p.get("error") for p in points]
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "result.json").exists()]
    result = json.loads((run_dir / "result.json").read_text())
    hosts = {}
    for process in result["layout"]:
        start = read_events(events_path(run_dir, process["rank"]))[0]
        assert start["host"] == process["host"] and start["role"] == process["role"]
        hosts.setdefault(process["host"], []).append(process["role"])
    assert sorted(hosts) == list(NODES), hosts  # both nodes ran part of the run
    for roles in hosts.values():
        if SERVING & set(roles):
            assert "worker" not in roles, hosts
    listed = cli("ls", "runs", "--results", str(tmp_path), env=slurm)
    assert "where the processes ran" in listed.stdout and "dlsnode2" in listed.stdout
    assert not processes_naming(tmp_path)


def test_a_rank_killed_on_a_node_fails_the_run_named_with_its_host(tmp_path: Path, slurm):
    os.environ.update(slurm)  # the long run's dlscale finds this Slurm
    try:
        flags = ("--launcher", "slurm", "--set", "slurm_mode=srun", "--set", "nodes=2")
        # rank 1 is blamed (the helper checks failure["failed_rank"]); srun's code is 137 or 143
        reason = "(role worker, on host dlsnode2)"
        kill_rank_and_check_the_run_fails(tmp_path, "torch-ddp", extra=flags, reason=reason)
    finally:
        os.environ.pop("SLURM_CONF", None)
