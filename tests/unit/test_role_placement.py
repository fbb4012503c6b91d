"""Placement by role (issue 43): the rules as data, a Slurm point's nodes and threads under
each, the plan's host file, and each rank reading its peers from it. A real Slurm places by
them in tests/cluster/test_slurm_hosts.py."""

from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UserError
from dlscale.contract.layout import ProcessLayout, Role
from dlscale.contract.role_placement import describe_placement, per_node, place_roles
from dlscale.launchers.slurm import SlurmLauncher
from dlscale.launchers.slurm_nodes import node_facts
from dlscale.launchers.slurm_place import slurm_hosts

MXNET_KV = ProcessLayout.from_roles((
    Role(name="worker", count=3),
    Role(name="scheduler", count=1, trains=False),
    Role(name="server", count=2, trains=False),
))  # fmt: skip
TF_PS = ProcessLayout.from_roles((
    Role(name="chief", count=1, replicas_per_process=4),
    Role(name="worker", count=4, trains=False, exits=False),
    Role(name="ps", count=1, trains=False, exits=False),
))  # fmt: skip


def test_spread_puts_the_workers_in_even_blocks_and_each_other_process_on_the_emptiest_node():
    # workers 0-1 on node 0, 2 on node 1; the scheduler on node 1 (1 < 2), then server 0 on
    # node 0 (2 = 2: the first), server 1 on node 1
    assert place_roles(MXNET_KV, 2, "spread") == (0, 0, 1, 1, 0, 1)
    assert per_node((0, 0, 1, 1, 0, 1)) == (3, 3)
    assert describe_placement(MXNET_KV, (0, 0, 1, 1, 0, 1)) == [
        "node 1: worker 0-1; server 0",
        "node 2: worker 2; scheduler 0; server 1",
    ]
    # tf-ps: its chief is not a worker (it drives the workers' steps); 4 workers over 4 nodes
    assert place_roles(TF_PS, 4, "spread") == (0, 0, 1, 2, 3, 1)


def test_apart_gives_the_others_nodes_of_their_own_at_the_workers_count_per_node():
    # 3 workers over 2 nodes: 2 on the fullest, so scheduler + 2 servers take 2 nodes more
    assert place_roles(MXNET_KV, 2, "apart") == (0, 0, 1, 2, 2, 3)
    # 4 workers on 2 nodes: the chief and the ps fit one node of their own
    assert place_roles(TF_PS, 2, "apart") == (2, 0, 0, 1, 1, 2)
    assert describe_placement(TF_PS, (2, 0, 0, 1, 1, 2))[2] == "node 3: chief 0; ps 0"


def test_block_leaves_the_order_to_the_scheduler_and_no_node_holds_no_worker():
    assert place_roles(MXNET_KV, 2, "block") is None
    # more nodes than workers: a node each, never an empty one
    assert place_roles(MXNET_KV, 5, "spread") == (0, 1, 2, 0, 1, 2)
    with pytest.raises(ValueError, match="unknown placement rule"):
        place_roles(MXNET_KV, 2, "scatter")


def _slurm(backend: str, **options) -> RunConfig:
    return RunConfig.make(backend=backend, workers=4, model="tiny", launcher="slurm",
                          slurm_mode="sbatch", cpus_per_node=16, **options)  # fmt: skip


def test_a_slurm_points_nodes_and_threads_follow_its_rule():
    """mxnet-kv at 4 workers and 2 servers on 2 nodes of 16 CPUs: spread holds 4 processes a
    node (4 threads each); apart keeps 2 workers a node and gives the scheduler and servers 2
    nodes more at that count (8 threads each); block is Slurm's order, the fullest node
    ceil(7 / 2)."""
    spread = node_facts(_slurm("mxnet-kv", nodes=2, num_servers=2))
    assert (spread.nodes, spread.per_node(7), spread.threads(7)) == (2, 4, 4)
    apart = node_facts(_slurm("mxnet-kv", nodes=2, num_servers=2, placement="apart"))
    assert apart.node_of == (0, 0, 1, 1, 2, 2, 3)
    assert (apart.nodes, apart.threads(7)) == (4, 8)
    block = node_facts(_slurm("mxnet-kv", nodes=2, num_servers=2, placement="block"))
    assert (block.node_of, block.nodes, block.per_node(7)) == (None, 2, 4)
    block_point = _slurm("mxnet-kv", nodes=2, placement="block")
    (entry,) = (
        SlurmLauncher().plan(block_point, Path("/r/x/spec.json"), "/py", ports=(1,) * 8).entries
    )
    script = entry.files[Path("/r/x/job.sbatch")]
    assert "#SBATCH --ntasks=6" in script and "SLURM_HOSTFILE" not in script


def test_the_rule_is_part_of_the_run_id_and_block_is_what_earlier_runs_had():
    assert _slurm("torch-ps").run_id() != _slurm("torch-ps", placement="apart").run_id()
    # a run stored before the rule existed was placed in Slurm's block order: the same id
    block = _slurm("torch-ps", placement="block").identity()["options"]["launcher"]
    assert "placement" not in block


def test_each_rank_reads_its_peers_from_the_steps_host_file(tmp_path: Path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost\nlocalhost\n127.0.0.2\n")
    environ = {"SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": str(hostfile)}
    assert slurm_hosts(environ, 3) == ("127.0.0.1", "127.0.0.1", "127.0.0.2")
    with pytest.raises(UserError, match="names 3 ranks; the run has 4"):
        slurm_hosts(environ, 4)
    hostfile.unlink()
    with pytest.raises(UserError, match="cannot read the step's host file"):
        slurm_hosts(environ, 3)
