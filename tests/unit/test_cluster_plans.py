"""The torchrun and slurm launchers' plans as data, and Slurm's variables read: nothing is
started here (tests/distributed/test_torchrun.py and tests/cluster/test_slurm.py run them)."""

import os
from pathlib import Path

import pytest

from dlscale.backends.torch_cluster import torch_cluster_env
from dlscale.config import RunConfig
from dlscale.errors import UnsupportedPoint, UserError
from dlscale.launchers.slurm import (
    SlurmLauncher,
    batch_script,
    hosts_by_rank,
    slurm_mode,
    tasks_per_node,
)
from dlscale.launchers.torchrun import TorchrunLauncher

SPEC = Path("/r/x/spec.json")


def test_torchrun_on_one_node_uses_c10d_and_leaves_the_torch_rendezvous_to_it():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="torchrun")
    plan = TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(29500, 29600), cores=8)
    (entry,) = plan.entries
    assert list(entry.ranks) == [0, 1]
    assert entry.argv == (
        "/py", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29600", "--rdzv-id", "x",
        "--max-restarts", "0", "--monitor-interval", "0.5", "-m", "dlscale.worker", str(SPEC),
    )  # fmt: skip
    assert entry.env["DLSCALE_RANK_VARS"] == "RANK,LOCAL_RANK,WORLD_SIZE"
    assert plan.addresses.ports == (29500,) and plan.threads_per_worker == 4
    process = plan.layout.processes[1]
    assert torch_cluster_env(process, plan.layout, plan.addresses, cfg) == {}
    local = RunConfig.make(backend="torch-ddp", workers=2, model="tiny")
    assert torch_cluster_env(process, plan.layout, plan.addresses, local)["RANK"] == "1"


def test_torchrun_across_nodes_gives_each_agent_its_node_rank_and_block_of_ranks():
    cfg = RunConfig.make(
        backend="torch-ps", workers=2, model="tiny", launcher="torchrun", num_servers=2, nnodes=2
    )
    plan = TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(29500, 29600), cores=8)
    assert [list(e.ranks) for e in plan.entries] == [[0, 1], [2, 3]]
    for node, entry in enumerate(plan.entries):
        args = " ".join(entry.argv)
        assert "--rdzv-backend static --master-addr 127.0.0.1 --master-port 29600" in args
        assert f"--node-rank {node}" in args and "--nproc-per-node 2" in args
        assert entry.stderr == Path(f"/r/x/torchrun{node}.stderr")


def test_torchrun_refuses_an_uneven_split_and_a_bad_node_count():
    cfg = RunConfig.make(
        backend="torch-ddp", workers=3, model="tiny", launcher="torchrun", nnodes=2
    )
    with pytest.raises(UserError, match="cannot split the run's 3 processes"):
        TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(1, 2), cores=8)
    with pytest.raises(UserError, match="nnodes must be >= 1"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", nnodes=0)
    with pytest.raises(UserError, match="nnodes must be int"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", nnodes="two")


def _slurm(mode: str, **options) -> RunConfig:
    return RunConfig.make(
        backend="tf-ps", workers=2, model="tiny", launcher="slurm", slurm_mode=mode, **options
    )


def test_srun_plan_is_one_step_of_every_rank_with_its_allocation():
    cfg = _slurm("srun", partition="gpu", nodes=2, slurm_args="--account=p1 --qos='short q'")
    plan = SlurmLauncher().plan(cfg, SPEC, "/py", ports=(1, 2, 3, 4))
    (entry,) = plan.entries
    assert list(entry.ranks) == [0, 1, 2, 3]  # chief, 2 workers, ps
    assert entry.argv == (
        "srun", "--job-name=dlscale-x", "--ntasks=4", "--cpus-per-task=1", "--time=15",
        "--partition=gpu", "--nodes=2", "--account=p1", "--qos=short q",
        "--kill-on-bad-exit=1", "--export=ALL", "/py", "-m", "dlscale.worker", str(SPEC),
    )  # fmt: skip
    assert entry.env["DLSCALE_RANK_VARS"] == "SLURM_PROCID,SLURM_LOCALID,SLURM_NTASKS"
    assert plan.addresses.hosts == ()  # placed by Slurm: each rank reads the step's nodes


def test_sbatch_plan_writes_a_batch_script_that_runs_one_srun_step():
    cfg = _slurm("sbatch", threads_per_worker=4, timeout_s=3601)
    plan = SlurmLauncher().plan(cfg, SPEC, "/py", ports=(1, 2, 3, 4))
    (entry,) = plan.entries
    assert entry.argv == ("sbatch", "--parsable", "/r/x/job.sbatch")
    script = entry.files[Path("/r/x/job.sbatch")]
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --cpus-per-task=4" in lines and "#SBATCH --time=61" in lines
    assert "#SBATCH --output=/r/x/slurm.stdout" in lines
    assert "export OMP_NUM_THREADS=4" in lines
    assert lines[-1] == (
        "exec srun --kill-on-bad-exit=1 --export=ALL /py -m dlscale.worker /r/x/spec.json"
    )


def test_batch_script_quotes_what_it_exports_and_every_option():
    args = ("--comment=a b", "--ntasks=2")
    script = batch_script(args, {"A": "x; rm -rf / $(id)"}, ("/p y",), Path("/o"), Path("/e"))
    assert "export A='x; rm -rf / $(id)'" in script
    # sbatch splits an #SBATCH line at spaces unless quoted (tests/cluster checks a real one)
    assert "#SBATCH '--comment=a b'" in script and "#SBATCH --ntasks=2" in script
    assert script.splitlines()[-1].endswith("'/p y'")


@pytest.mark.parametrize(
    "option", [{"partition": "debug\nrm -rf ~"}, {"slurm_args": "--qos='a\rb'"}]
)
def test_a_line_break_cannot_smuggle_a_command_into_the_batch_script(option):
    with pytest.raises(UserError, match="control character"):
        SlurmLauncher().plan(_slurm("sbatch", **option), SPEC, "/py", ports=(1,) * 4)


def test_auto_mode_is_srun_inside_an_allocation_else_sbatch():
    cfg = _slurm("auto")
    assert slurm_mode(cfg, {"SLURM_JOB_ID": "7"}) == "srun"
    assert slurm_mode(cfg, {}) == "sbatch"
    with pytest.raises(UnsupportedPoint, match="slurm_mode"):
        _slurm("qsub")
    with pytest.raises(UserError, match="slurm_args"):
        SlurmLauncher().plan(_slurm("srun", slurm_args="--x 'open"), SPEC, "/py", ports=(1,) * 4)


@pytest.mark.parametrize(
    ("text", "counts"),
    [("4", [4]), ("2(x3),1", [2, 2, 2, 1]), ("1,3(x2)", [1, 3, 3])],
)
def test_tasks_per_node_reads_slurms_compressed_counts(text, counts):
    assert tasks_per_node(text) == counts


def test_hosts_follow_slurms_block_distribution_and_a_mismatch_is_refused():
    assert hosts_by_rank(["10.0.0.1", "10.0.0.2"], [2, 1], 3) == ("10.0.0.1",) * 2 + ("10.0.0.2",)
    with pytest.raises(UserError, match="Slurm placed 3 tasks"):
        hosts_by_rank(["a", "b"], [2, 1], 4)
    with pytest.raises(UserError, match="tasks per node"):
        tasks_per_node("2(x")


def test_a_missing_slurm_is_one_line_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="needs srun, which is not installed: install Slurm"):
        SlurmLauncher().check("/py")
    assert os.environ["PATH"] == str(tmp_path)


def test_torchrun_restarts_ask_the_ranks_for_checkpoints():
    cfg = RunConfig.make(
        backend="torch-ddp", workers=2, model="tiny", launcher="torchrun", max_restarts=2
    )
    (entry,) = TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(29500, 29600), cores=8).entries
    assert "--max-restarts 2" in " ".join(entry.argv)
    assert entry.env["DLSCALE_CHECKPOINTS"] == "1"
    assert entry.env["DLSCALE_RESTART_VAR"] == "TORCHELASTIC_RESTART_COUNT"
    plain = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="torchrun")
    (entry,) = TorchrunLauncher().plan(plain, SPEC, "/py", ports=(29500, 29600), cores=8).entries
    assert "--max-restarts 0" in " ".join(entry.argv) and "DLSCALE_CHECKPOINTS" not in entry.env


def test_restarts_are_refused_across_agents_and_for_engines_that_cannot_resume():
    across = RunConfig.make(
        backend="torch-ddp", workers=2, launcher="torchrun", nnodes=2, max_restarts=1
    )
    with pytest.raises(UserError, match="max_restarts = 1 needs nnodes = 1"):
        TorchrunLauncher().plan(across, SPEC, "/py", ports=(1, 2), cores=8)
    ps = RunConfig.make(backend="torch-ps", workers=2, launcher="torchrun", max_restarts=1)
    with pytest.raises(UserError, match="torch-ps cannot resume") as caught:
        TorchrunLauncher().check_point(ps)
    assert "torch-ddp" in str(caught.value) and "torch-ps," not in str(caught.value)
    with pytest.raises(UserError, match="max_restarts must be >= 0"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", max_restarts=-1)
