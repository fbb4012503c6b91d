"""Slurm plans from the compute nodes' facts, never the login node's (issue 43): the nodes'
CPUs and GPUs given or read from sinfo's lines, the nodes each point takes, threads per rank,
and GPUs per rank checked against the nodes. Plans as data; tests/cluster/test_slurm_nodes.py
asks a real Slurm whose nodes advertise more CPUs and GPUs than this machine has."""

import sys
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.config.study import expand
from dlscale.contract.errors import UserError
from dlscale.launchers.slurm import SlurmLauncher, slurm_mode
from dlscale.launchers.slurm_nodes import node_facts, parse_sinfo_line, partition_nodes

SPEC = Path("/r/x/spec.json")
NODES = {"launcher": "slurm", "slurm_mode": "srun", "cpus_per_node": 32, "gpus_per_node": 4}


@pytest.mark.parametrize("line, sizes", [
    ("16|gpu:4", (16, 4)),
    ("64|gpu:a100:8(S:0-1)", (64, 8)),
    ("32|(null)", (32, 0)),
    ("48|gpu:a100:2,gpu:v100:2,mps:100", (48, 4)),
    ("128+|tmpdisk:100", (128, 0)),
])  # fmt: skip
def test_sinfo_lines_give_each_nodes_cpus_and_gpus(line, sizes):
    assert parse_sinfo_line(line) == sizes


@pytest.mark.parametrize("line", ["n/a|gpu:4", "0|gpu:1", "|"])
def test_a_line_sinfo_should_not_print_is_refused_naming_it(line):
    with pytest.raises(UserError, match="cannot read sinfo's CPUs of a node"):
        parse_sinfo_line(line)


def _argv(config: RunConfig) -> tuple[str, ...]:
    (entry,) = SlurmLauncher().plan(config, SPEC, "/py", ports=tuple(range(1, 9))).entries
    return entry.argv


def test_a_gpu_study_takes_one_gpu_per_rank_and_threads_from_the_nodes_not_this_machine():
    """mahon2020's shape at cluster scale on nodes of 32 CPUs and 4 GPUs, planned on a machine
    said to have 2 cores (cores=2 is what this machine would give): 12 ranks take 3 nodes, each
    rank 8 threads (32 CPUs / 4 ranks on a node), the 1-worker baseline 1 node and 8 threads."""
    settings = {"backend": ["torch-single", "torch-ddp"], "workers": [1, 2, 4, 8, 12],
                "model": "resnet44", "device": "cuda", **NODES}  # fmt: skip
    study = expand(settings, cores=2)
    assert {p.threads_per_worker for p in study.points} == {8}
    nodes = {p.workers: node_facts(p).nodes for p in study.points}
    assert nodes == {1: 1, 2: 1, 4: 1, 8: 2, 12: 3}
    twelve = _argv(next(p for p in study.points if p.workers == 12))
    assert {"--nodes=3", "--ntasks=12", "--cpus-per-task=8", "--gpus-per-task=1"} <= set(twelve)
    baseline = _argv(next(p for p in study.points if p.backend == "torch-single"))
    assert {"--nodes=1", "--ntasks=1", "--cpus-per-task=8"} <= set(baseline)


def test_given_nodes_spread_the_ranks_and_the_baseline_stays_on_one_node():
    """The issue's case: nodes=4 and 16 workers on nodes of 32 CPUs gave every rank 1 thread
    (this machine's 2 cores / 2) and the baseline --nodes=4; now 4 ranks a node, 8 threads."""
    settings = {"backend": ["torch-single", "torch-ddp"], "workers": [1, 16], "nodes": 4,
                "machine_reference": True, **NODES}  # fmt: skip
    study = expand(settings, cores=2)
    by_point = {(p.backend, p.workers, p.threads_per_worker): _argv(p) for p in study.points}
    assert set(by_point) == {("torch-single", 1, 8), ("torch-ddp", 1, 8), ("torch-ddp", 16, 8),
                             ("torch-single", 1, 32)}  # fmt: skip  # 32: one whole node
    assert "--nodes=4" in by_point["torch-ddp", 16, 8]
    assert all("--nodes=1" in by_point[key] for key in by_point if key[1] == 1)


def test_cpu_ranks_fill_as_few_nodes_as_hold_their_threads():
    cpu = {**NODES, "device": "cpu", "gpus_per_node": 0}
    eight = RunConfig.make(backend="torch-ddp", workers=8, threads_per_worker=8, **cpu)
    assert node_facts(eight).nodes == 2 and "--nodes=2" in _argv(eight)  # 64 threads, 32 a node
    study = expand({"backend": "torch-ddp", "workers": [1, 2, 4], **cpu}, cores=2)
    assert {p.threads_per_worker for p in study.points} == {8}
    assert {node_facts(p).nodes for p in study.points} == {1}


def test_more_ranks_on_a_node_than_it_has_gpus_is_refused_in_one_line():
    config = RunConfig.make(backend="torch-ddp", workers=8, device="cuda", nodes=1, **NODES)
    with pytest.raises(UserError, match=r"puts 8 ranks on a node, one GPU each, and the nodes "
                       r"have 4 GPUs .*set nodes = 2 or more"):  # fmt: skip
        SlurmLauncher().check_point(config)
    none = RunConfig.make(backend="torch-ddp", workers=2, device="cuda",
                          **{**NODES, "gpus_per_node": 0})  # fmt: skip
    partition_nodes.cache_clear()
    with pytest.raises(UserError, match=r"cannot ask Slurm .*give --set cpus_per_node=C and "
                       r"--set gpus_per_node=G"):  # fmt: skip
        SlurmLauncher().check_point(none)


def test_without_slurm_the_nodes_must_be_given_and_the_message_says_how(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "none.conf"))
    partition_nodes.cache_clear()
    settings = {"backend": "torch-ddp", "workers": [1, 2], "launcher": "slurm"}
    with pytest.raises(UserError, match=r"SLURM_CONF=.* names no file; .* give --set cpus_per_n"):
        expand(settings, cores=2)
    given = expand({**settings, "cpus_per_node": 16}, cores=2)
    assert {p.threads_per_worker for p in given.points} == {8}


def test_the_nodes_facts_are_not_part_of_the_run_id():
    """Given or read from sinfo, the same point has the same id; what the facts change is
    threads_per_worker, which is in it."""
    plain = RunConfig.make(backend="torch-ddp", workers=2, launcher="slurm", threads_per_worker=4)
    given = RunConfig.make(backend="torch-ddp", workers=2, launcher="slurm", threads_per_worker=4,
                           cpus_per_node=16, gpus_per_node=2)  # fmt: skip
    assert plain.run_id() == given.run_id()


def test_a_study_in_one_job_asks_an_allocation_that_holds_its_largest_point():
    from dlscale.launchers.slurm_study import in_one_job, study_script

    settings = {**NODES, "backend": "torch-ddp", "workers": [1, 4, 12], "device": "cuda",
                "slurm_mode": "study", "partition": "gpu",
                "slurm_args": "--time=2:00:00 --account='p 1'"}  # fmt: skip
    points = expand(settings, cores=2).points
    script = study_script(points, ["dlscale", "run", "s.toml", "--set", "slurm_mode=study"],
                          Path("/shared/me"), Path("/r/.slurm/study-s-%j.out"), "s")  # fmt: skip
    lines = script.splitlines()
    for option in ("--nodes=3", "--exclusive", "--gpus-per-node=4", "--partition=gpu",
                   "--time=2:00:00", "'--account=p 1'", "--job-name=dlscale-study-s"):  # fmt: skip
        assert f"#SBATCH {option}" in lines, option
    assert lines[-2:] == ["cd /shared/me", f"exec {sys.executable} -m dlscale run s.toml --set "
                          "slurm_mode=study"]  # fmt: skip
    assert in_one_job(points, {}) and not in_one_job(points, {"SLURM_JOB_ID": "7"})
    assert {slurm_mode(p, {}) for p in points} == {"srun"}  # steps of its job, wherever planned
    submitted = RunConfig.make(backend="torch-ddp", **{**NODES, "slurm_mode": "study"}, wait=False)
    SlurmLauncher().check_point(submitted)  # wait = false: of the study's one job, not a step
    other = RunConfig.make(backend="torch-ddp", **{**NODES, "slurm_mode": "sbatch"})
    with pytest.raises(UserError, match="give it to every point"):
        in_one_job((*points, other), {})
    assert not in_one_job((other,), {})


def test_a_results_path_with_a_line_break_cannot_add_a_command_to_a_batch_script():
    config = RunConfig.make(backend="torch-ddp", workers=2, **{**NODES, "slurm_mode": "sbatch"})
    spec = Path("/r/x\nrm -rf ~\n/run/spec.json")
    with pytest.raises(UserError, match=r"holds a control character .* the results directory"):
        SlurmLauncher().plan(config, spec, "/py", ports=(1, 2))


def test_inside_an_allocation_a_point_is_planned_from_what_the_job_holds(monkeypatch):
    """salloc --ntasks=2 holds 2 CPUs of a 16-CPU node: 2 ranks get 1 thread each (planning
    from the node's 16 would ask more CPUs than the job has); given facts still win."""
    from dlscale.launchers.slurm_nodes import allocation

    assert allocation({"SLURM_JOB_CPUS_PER_NODE": "2"}) is None  # not inside a job
    assert allocation({"SLURM_JOB_ID": "4", "SLURM_JOB_CPUS_PER_NODE": "16(x2),8"}) == (8, 0)
    monkeypatch.setenv("SLURM_JOB_ID", "4")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "1")
    study = expand({"backend": "torch-ddp", "workers": 2, "launcher": "slurm"}, cores=64)
    (point,) = study.points
    facts = node_facts(point)
    assert point.threads_per_worker == 1 and (facts.cpus, facts.source) == (2, "this allocation")
    given = RunConfig.make(backend="torch-ddp", workers=2, launcher="slurm", cpus_per_node=32)
    assert node_facts(given).cpus == 32
