"""The torchrun and slurm launchers' plans as data, and Slurm's variables read: nothing is
started here (tests/distributed/test_torchrun.py and tests/cluster/test_slurm.py run them)."""

import os
import sys
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.frameworks.torch.cluster import torch_cluster_env
from dlscale.launchers.base import PlanEntry
from dlscale.launchers.slurm import SlurmLauncher, batch_script, slurm_mode
from dlscale.launchers.slurm_nodes import tasks_per_node
from dlscale.launchers.slurm_place import hosts_by_rank
from dlscale.launchers.torchrun import TorchrunLauncher
from dlscale.runtime.context import WorkerContext

SPEC = Path("/r/x/spec.json")


def test_torchrun_on_one_node_uses_c10d_and_leaves_the_torch_rendezvous_to_it():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="torchrun")
    plan = TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(29500, 29600), cores=8)
    (entry,) = plan.entries
    assert list(entry.ranks) == [0, 1]
    assert entry.argv == (
        "/py", "-P", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:29600", "--rdzv-id", "x",
        "--max-restarts", "0", "--monitor-interval", "0.5", "-m", "dlscale.worker", str(SPEC),
    )  # fmt: skip
    assert entry.env["DLSCALE_RANK_VARS"] == "RANK,LOCAL_RANK,WORLD_SIZE"
    assert plan.addresses.ports == (29500,) and plan.threads_per_worker == 4
    process = plan.layout.processes[1]
    assert torch_cluster_env(process, plan.layout, plan.addresses, cfg) == {}
    local = RunConfig.make(backend="torch-ddp", workers=2, model="tiny")
    assert torch_cluster_env(process, plan.layout, plan.addresses, local)["RANK"] == "1"


def test_torchrun_across_nodes_meets_in_c10d_at_addresses_that_sort_as_the_nodes():
    cfg = RunConfig.make(
        backend="torch-ps", workers=2, model="tiny", launcher="torchrun", num_servers=2, nnodes=2
    )
    plan = TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(29500, 29600), cores=8)
    assert [list(e.ranks) for e in plan.entries] == [[0, 1], [2, 3]]
    for node, entry in enumerate(plan.entries):
        args = " ".join(entry.argv)
        rendezvous = "--rdzv-backend c10d --rdzv-endpoint 127.0.1.100:29600 --rdzv-id x"
        assert f"{rendezvous} --rdzv-conf is_host={int(node == 0)}" in args
        assert f"--local-addr 127.0.1.{100 + node}" in args and "--nproc-per-node 2" in args
        assert entry.env["DLSCALE_ENTRY_RANKS"] == f"{2 * node}-{2 * node + 1}"
        assert entry.env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
        assert entry.stderr == Path(f"/r/x/torchrun{node}.stderr")
    # c10d ranks the nodes by the text of their addresses: it must be the nodes' order
    many = RunConfig.make(backend="torch-ddp", workers=12, launcher="torchrun", nnodes=12)
    entries = TorchrunLauncher().plan(many, SPEC, "/py", ports=(1,) * 13, cores=12).entries
    local = [e.argv[e.argv.index("--local-addr") + 1] for e in entries]
    assert sorted(local) == local and len(set(local)) == 12


def test_a_rank_numbered_outside_its_commands_block_is_refused(monkeypatch):
    monkeypatch.setenv("DLSCALE_ENTRY_RANKS", "2-3")
    WorkerContext.check_entry_rank(3)
    with pytest.raises(UserError, match="numbered this process rank 0, but its command was"):
        WorkerContext.check_entry_rank(0)


def test_torchrun_refuses_an_uneven_split_and_a_bad_node_count():
    cfg = RunConfig.make(
        backend="torch-ddp", workers=3, model="tiny", launcher="torchrun", nnodes=2
    )
    with pytest.raises(UserError, match="cannot split the run's 3 processes"):
        TorchrunLauncher().plan(cfg, SPEC, "/py", ports=(1, 2), cores=8)
    many = RunConfig.make(backend="torch-ddp", workers=302, launcher="torchrun", nnodes=151)
    with pytest.raises(UserError, match="at most 150 nodes' agents here, not 151"):
        TorchrunLauncher().plan(many, SPEC, "/py", ports=(1,) * 303, cores=8)
    with pytest.raises(UserError, match="nnodes must be >= 1"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", nnodes=0)
    with pytest.raises(UserError, match="nnodes must be int"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", nnodes="two")


def _slurm(mode: str, **options) -> RunConfig:
    """A tf-ps point under Slurm on nodes of 8 CPUs and 4 GPUs (given: no Slurm is asked)."""
    options = {"cpus_per_node": 8, "gpus_per_node": 4, **options}
    return RunConfig.make(
        backend="tf-ps", workers=2, model="tiny", launcher="slurm", slurm_mode=mode, **options
    )


def test_srun_plan_is_one_step_of_every_rank_with_its_allocation():
    cfg = _slurm("srun", partition="gpu", nodes=2, slurm_args="--account=p1 --qos='short q'")
    plan = SlurmLauncher().plan(cfg, SPEC, "/py", ports=(1, 2, 3, 4))
    (entry,) = plan.entries
    assert list(entry.ranks) == [0, 1, 2, 3]  # chief, 2 workers, ps
    assert entry.argv == (
        "srun", "--job-name=dlscale-x", "--nodes=2", "--ntasks=4", "--cpus-per-task=1",
        "--time=15", "--partition=gpu", "--account=p1", "--qos=short q",
        "--kill-on-bad-exit=1", "--export=ALL", "/py", "-P", "-m", "dlscale.worker", str(SPEC),
    )  # fmt: skip
    assert entry.env["DLSCALE_RANK_VARS"] == "SLURM_PROCID,SLURM_LOCALID,SLURM_NTASKS"
    assert plan.addresses.hosts == ()  # placed by Slurm: each rank reads the step's nodes
    # outside an allocation srun has no node names to place by before it runs: said
    assert "Slurm places the ranks in block order" in plan.warnings[0]


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
    # 4 processes of 4 threads on nodes of 8 CPUs: 2 nodes, each holding 2 (placement spread:
    # chief and worker 0 on the first, worker 1 and the ps on the second)
    assert "#SBATCH --nodes=2" in lines and "#SBATCH --ntasks-per-node=2" in lines
    assert entry.files[Path("/r/x/placement")] == "0\n0\n1\n1\n"
    assert "export SLURM_HOSTFILE=/r/x/hostfile" in lines
    assert lines[-1] == (
        "exec srun --ntasks=4 --distribution=arbitrary --cpus-per-task=4 --kill-on-bad-exit=1 "
        "--export=ALL /py -P -m dlscale.worker /r/x/spec.json"
    )
    assert plan.placed == (
        "placement spread:",
        "node 1: chief 0; worker 0",
        "node 2: worker 1; ps 0",
    )


def test_a_detached_batch_script_records_its_point_after_the_ranks_step():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, launcher="slurm", slurm_mode="sbatch",
                         wait=False, cpus_per_node=8)  # fmt: skip
    launcher = SlurmLauncher()
    assert launcher.detaches(cfg) and not launcher.detaches(_slurm("sbatch"))
    (entry,) = launcher.plan(cfg, SPEC, "/py", ports=(1, 2, 3, 4)).entries
    lines = entry.files[Path("/r/x/job.sbatch")].splitlines()
    step = ("srun --cpus-per-task=1 --kill-on-bad-exit=1 --export=ALL /py -P -m dlscale.worker "
            "/r/x/spec.json")  # fmt: skip
    finish = f"{sys.executable} -P -m dlscale.finish /r/x/spec.json"
    assert lines[-5:] == [
        "started=$(date +%s.%N)",
        step,
        "code=$?",
        f'{finish} "$code" "$started"',
        'exit "$code"',
    ]
    launcher.check_point(cfg)  # torch-ddp's ranks all exit: fine


def test_not_waiting_is_refused_for_srun_steps_and_roles_that_never_exit():
    with pytest.raises(UserError, match="set slurm_mode = sbatch"):
        SlurmLauncher().check_point(_slurm("srun", wait=False))
    ps = RunConfig.make(backend="tf-ps", workers=2, launcher="slurm", slurm_mode="sbatch",
                        wait=False, cpus_per_node=8)  # fmt: skip
    with pytest.raises(UserError, match="tf-ps: its ps, worker processes never exit by themselves"):
        SlurmLauncher().check_point(ps)


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
    plain = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="torchrun")
    (entry,) = TorchrunLauncher().plan(plain, SPEC, "/py", ports=(29500, 29600), cores=8).entries
    assert "--max-restarts 0" in " ".join(entry.argv) and "DLSCALE_CHECKPOINTS" not in entry.env


def test_restarts_are_refused_for_engines_that_cannot_resume():
    ps = RunConfig.make(backend="torch-ps", workers=2, launcher="torchrun", max_restarts=1)
    with pytest.raises(UserError, match="torch-ps cannot resume") as caught:
        TorchrunLauncher().check_point(ps)
    assert "torch-ddp" in str(caught.value) and "torch-ps," not in str(caught.value)
    with pytest.raises(UserError, match="max_restarts must be >= 0"):
        RunConfig.make(backend="torch-ddp", launcher="torchrun", max_restarts=-1)


def _summary(failures: list[tuple[int, int]], root: tuple[int, int]) -> str:
    """torchrun's failure summary (torch 2.13's words), as an agent prints it on stderr."""

    def item(rank: int, code: int) -> str:
        return f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: 9)\n"

    return (
        "dlscale.worker FAILED\nFailures:\n"
        + "".join(item(*f) for f in failures)
        + "Root Cause (first observed failure):\n"
        + item(*root)
    )


@pytest.mark.parametrize(
    ("failures", "root", "blamed"),
    [
        ([(0, -15)], (1, -9), 1),  # the agent stopped rank 0 with SIGTERM after rank 1's kill
        ([(1, -9)], (0, 1), 1),  # rank 0 failed first, seconds apart, because rank 1 was killed
        ([(1, 1)], (0, 1), 0),  # no signal: torchrun's root cause
        ([], (0, -15), 0),  # a SIGTERM from outside is still the cause when it is the only one
    ],
)
def test_torchrun_blames_the_rank_a_signal_killed_then_its_root_cause(
    tmp_path, failures, root, blamed
):
    entry = PlanEntry(
        ranks=range(2), argv=("torchrun",), env={},
        stdout=tmp_path / "out", stderr=tmp_path / "err",
    )  # fmt: skip
    entry.stderr.write_text(_summary(failures, root))
    assert TorchrunLauncher().blame(entry) == blamed


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["/nope/spec.json", "0", "nan"], "usage:"),
        (["/nope/spec.json", "x", "1.5"], "usage:"),
        (["only-one"], "usage:"),
        (["/nope/spec.json", "0", "1.5"], "/nope/spec.json: cannot be read"),
    ],
)
def test_the_finishing_step_refuses_bad_arguments_in_one_line(argv, said, capsys):
    from dlscale.finish import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_on_gpus_slurm_binds_each_task_to_its_own_gpu_and_the_rank_uses_it(monkeypatch):
    """Under --device cuda the plan asks one GPU per task (Slurm then sets each task's
    CUDA_VISIBLE_DEVICES to its own) and tells the ranks so; on CPUs it asks none."""
    from dlscale.runtime.gpus import BOUND_ENV, gpu_index

    for mode in ("srun", "sbatch"):
        plan = SlurmLauncher().plan(_slurm(mode, device="cuda"), SPEC, "/py", ports=(1, 2, 3, 4))
        (entry,) = plan.entries
        text = " ".join(entry.argv) + "".join(entry.files.values())
        assert "--gpus-per-task=1" in text
        assert entry.env.get(BOUND_ENV) == "1" or f"export {BOUND_ENV}=1" in text
        cpu = SlurmLauncher().plan(_slurm(mode), SPEC, "/py", ports=(1, 2, 3, 4)).entries[0]
        assert "gpus-per-task" not in " ".join(cpu.argv) + "".join(cpu.files.values())
    monkeypatch.setenv(BOUND_ENV, "1")
    assert gpu_index(local_rank=3, visible=1) == 0  # bound: the one GPU it sees is its own
    monkeypatch.delenv(BOUND_ENV)
    assert gpu_index(local_rank=1, visible=2) == 1  # unbound: its local rank's GPU


@pytest.mark.parametrize("local_rank, visible, said", [
    (2, 2, r"shows 2 GPUs and runs at least 3 ranks \(local rank 2 has no GPU of its own\)"),
    (1, 1, r"shows 1 GPU and runs at least 2 ranks"),
    (0, 0, "sees no CUDA GPU on host"),
])  # fmt: skip
def test_a_host_with_fewer_gpus_than_ranks_is_refused_in_one_line(
    monkeypatch, local_rank, visible, said
):
    """Two ranks on one GPU would measure contention, not scaling: refused, never shared (a
    bound rank that sees several GPUs falls back to the same rule)."""
    from dlscale.runtime.gpus import BOUND_ENV, gpu_index

    monkeypatch.setenv(BOUND_ENV, "1" if visible != 1 else "0")
    with pytest.raises(UserError, match=said):
        gpu_index(local_rank, visible)
