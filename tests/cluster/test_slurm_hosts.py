"""A real Slurm of 2 nodes: ``scripts/slurm-local.sh start DIR --hosts 2 --cpus 16 --gpus 4`` makes
2 emulated hosts (network and UTS namespaces, sshd) with a slurmd in each, advertising 16 CPUs
and 4 GPUs (this 2-core machine without a GPU is the login node), slurmctld on this machine;
GPU and CPU studies are planned from what sinfo says of the nodes, and
engines run across both nodes as sbatch jobs: each rank where Slurm put it (its ``start`` record's
host is the node Slurm's step gave it), roles on both nodes, the processes' hosts in ``ls runs``,
and a rank killed on a node failing the run named with its host. Needs root. The other engines
cross hosts under mpirun and horovodrun (test_hosts.py says why once is enough)."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from dlscale.contract.events import events_path, read_events
from tests.cluster.test_hosts import TINY, _nothing_left
from tests.distributed.processes import kill_rank_and_check_the_run_fails, processes_naming
from tests.runs import per_rank_losses

pytestmark = pytest.mark.dist

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
NODES = ("dlsnode1", "dlsnode2")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.fail("these tests start Slurm's daemons and emulated hosts: run them as root")
    where = tmp_path_factory.mktemp("slurm-hosts")
    start = [str(SCRIPT), "start", str(where), "--hosts", "2", "--cpus", "16", "--gpus", "4",
             "--owner", str(os.getpid())]  # fmt: skip
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


def test_a_gpu_study_is_planned_from_the_nodes_slurm_describes_not_this_machine(
    tmp_path: Path, cli, slurm
):
    """mahon2020 at cluster scale, dry-run from this GPU-less 2-core machine: every rank one GPU
    and 4 threads (16 CPUs / 4 ranks on a node), 12 ranks on 3 nodes, the baseline on one;
    tf-mirrored's 8 and 12 replicas in one process skipped, naming the nodes' 4 GPUs."""
    dry = cli("run", "--preset", "mahon2020", "--set", "dataset=synthetic",
              "--dry-run", "--verbose", "--results", str(tmp_path / "res"), env=slurm)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "tf-mirrored x12 drives 12 GPUs from one process, and the nodes have 4" in dry.stderr
    points = _dry_points(dry.stdout)
    ddp = points["torch-ddp x12"]
    assert "planned for 3 nodes of 16 CPUs, 4 GPUs (sinfo, every partition)" in ddp
    # each node room for 4 tasks; the step's 12 tasks spread 4 a node by the host file
    for option in ("--nodes=3", "--ntasks-per-node=4", "--cpus-per-task=4", "--gpus-per-task=1"):
        assert f"#SBATCH {option}" in ddp, option
    assert "srun --ntasks=12 --distribution=arbitrary" in ddp
    assert "node 3: worker 8-11" in ddp
    assert "#SBATCH --nodes=1" in points["torch-single x1"]
    assert {_threads(text) for text in points.values()} == {4}
    assert not (tmp_path / "res").exists()


def test_a_cpu_study_takes_its_threads_from_the_nodes(tmp_path: Path, cli, slurm):
    dry = cli("run", "--launcher", "slurm", "--backend", "torch-ddp", "--workers", "1,2",
              "--model", "tiny", "--dry-run", "--verbose", "--results", str(tmp_path),
              env=slurm)  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    points = _dry_points(dry.stdout)
    assert "export OMP_NUM_THREADS=8" in points["torch-ddp x2"]  # 16 CPUs, 2 ranks on a node
    assert "#SBATCH --nodes=1" in points["torch-ddp x2"]
    assert "#SBATCH --cpus-per-task=16" in points["torch-single x1"]  # the whole node


def test_a_venv_made_with_pip_alone_plans_a_study_against_the_nodes(tmp_path: Path, slurm):
    """Installed as on a login node, without make, apt or root: a virtual environment of its
    own and ``pip install '.[torch]'``, whose requirements are found where a site's modules
    would give them (here the test environment's packages, on the new environment's path, so
    nothing is downloaded but the build's setuptools); its dlscale plans against the nodes."""
    source = tmp_path / "dlscale"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv)})
    site = sysconfig.get_path("purelib")  # the test environment's packages: the "site's"
    Path(purelib, "site-modules.pth").write_text(site + "\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    user = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a login shell's
    done = subprocess.run([*pip, "-q", f"{source}[torch]"], capture_output=True, text=True,
                          timeout=300, env={**user, "PIP_NO_CACHE_DIR": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    dry = subprocess.run(
        [str(venv / "bin" / "dlscale"), "run", "--launcher", "slurm", "--backend", "torch-ddp",
         "--workers", "2", "--model", "tiny", "--dry-run", "--verbose", "--results",
         str(tmp_path / "res")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**user, **slurm},
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    planned = "planned for 1 node of 16 CPUs, 4 GPUs (sinfo, every partition); 2 processes"
    assert planned in dry.stdout
    assert f"{venv}/bin/python -P -m dlscale.worker" in dry.stdout  # its own interpreter
    code = "import dlscale; print(dlscale.__file__)"
    imported = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True,
                              text=True, env=user)  # fmt: skip
    assert imported.stdout.startswith(str(venv)), imported.stdout


def test_the_node_check_runs_on_each_node_and_names_what_a_gpu_study_lacks(cli, slurm):
    """dlscale doctor through Slurm: one task a node, each reporting its own name, address
    and interface; the same on GPUs says each node sees none (their GPUs are a count only)."""
    ok = cli("doctor", "--launcher", "slurm", "--set", "nodes=2", "--json", env=slurm)
    assert ok.returncode == 0, ok.stderr
    nodes = [json.loads(line) for line in ok.stdout.splitlines()]
    assert sorted(node["hostname"] for node in nodes) == list(NODES)
    assert sorted(node["address"] for node in nodes) == ["10.98.0.101", "10.98.0.102"]
    assert all(node["interface"] and node["missing"] == [] for node in nodes), nodes
    gpu = cli("doctor", "--launcher", "slurm", "--set", "nodes=2", "--device", "cuda", "--json",
              env=slurm)  # fmt: skip
    assert gpu.returncode == 1, gpu.stderr
    lacks = [json.loads(line)["missing"] for line in gpu.stdout.splitlines()]
    assert lacks == [["a CUDA GPU (sees none; cuda absent)"]] * 2


STUDY = """
name = "one-job"
backend = ["torch-single", "torch-ddp"]
workers = [1, 2]
model = "tiny"
dataset = "digits"
steps = 500
windows = 1
warmup_steps = 1
threads_per_worker = 1
machine_reference = false
"""


def test_a_study_runs_in_one_slurm_job_and_the_same_command_resumes_it(tmp_path: Path, slurm):
    """slurm_mode = study from the login node: one job runs the study's 3 points as its steps.
    The job is ended once a point completed (scancel: Slurm ends a job at its time limit the
    same way, SIGTERM to its steps and batch script, SIGKILL after KillWait; a real time
    limit is slower to test, as slurmctld checks them about once a minute): the command says
    so and exits 1, the completed point is kept, and the same command runs the other two in a
    new job, taking over the lock a killed node left. The login node's dlscale killed with -9
    first: the job runs on, and the same command finds it and watches it instead of submitting
    another. Each run records the job and step it ran in."""
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    results = tmp_path / "res"
    command = [sys.executable, "-m", "dlscale", "run", str(study), "--launcher", "slurm",
               "--set", "slurm_mode=study", "--set", "nodes=2",
               "--results", str(results)]  # fmt: skip
    env = {**os.environ, **slurm}
    said = tmp_path / "first.err"
    with said.open("w") as first_err:
        first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=first_err, text=True,
                                 env=env, cwd=tmp_path)  # fmt: skip
    again = tmp_path / "again.err"
    try:
        deadline = time.monotonic() + 300
        while not list(results.glob("*/result.json")) and time.monotonic() < deadline:
            time.sleep(0.2)  # cancelled long before the next point can end
        (job,) = {json.loads(p.read_text())["environment"]["slurm_job_id"]
                  for p in results.glob("*/result.json")}  # fmt: skip
        first.kill()  # the login node's dlscale killed with -9: its job runs on
        first.wait(timeout=60)
        assert f"the study runs as Slurm job {job}" in said.read_text()
        with again.open("w") as again_err:  # the same command finds the job and watches it
            watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=again_err,
                                       text=True, env=env, cwd=tmp_path)  # fmt: skip
        while f"already runs as Slurm job {job}" not in again.read_text():
            assert watcher.poll() is None and time.monotonic() < deadline, again.read_text()
            time.sleep(0.2)
        ended = subprocess.run(["scancel", job], capture_output=True, text=True, env=env)
        assert ended.returncode == 0, ended.stderr
        watcher.communicate(timeout=300)
    finally:
        first.kill()
        with contextlib.suppress(NameError):
            watcher.kill()
    err = again.read_text()
    assert watcher.returncode == 1, err
    assert f"Slurm job {job} ended CANCELLED with 1 of 3 points completed; the same command" in err
    # a dlscale killed with -9 on a node (a node lost, KillWait over) leaves its point's lock,
    # which no other host can judge by its pid: its job ended, so the next job takes it over
    unfinished = [d for d in results.iterdir() if d.is_dir() and not (d / "result.json").exists()
                  and not d.name.startswith(".")]  # fmt: skip
    assert unfinished, "the cancelled job's running point left its directory"
    for run_dir in unfinished:
        owner = {"host": "dlsnode2", "pid": 4000000, "time": time.time(), "slurm_job": job}
        (run_dir / "lock").write_text(json.dumps(owner))
    second = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=600)  # fmt: skip
    assert second.returncode == 0, second.stderr
    stored = [json.loads(p.read_text()) for p in results.glob("*/result.json")]
    assert sorted(r["status"] for r in stored) == ["completed"] * 3
    jobs = [r["environment"]["slurm_job_id"] for r in stored]
    assert jobs.count(job) == 1 and len(set(jobs)) == 2  # the rest in one new job
    steps = [
        r["environment"]["slurm_step_id"] for r in stored if r["environment"]["slurm_job_id"] != job
    ]
    assert len(set(steps)) == 2  # each point a step of its own
    assert (results / ".slurm" / "study-one-job.sbatch").is_file()
    assert not processes_naming(tmp_path)


def _dry_points(text: str) -> dict[str, str]:
    """A dry run's lines by point (``torch-ddp x12``), from each point's header line
    (``# RUN_ID: BACKEND xN ...``) to the next; the first point of a name kept."""
    points: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        header = re.match(r"# \S+: (\S+ x\d+) ", line)
        if header:
            name = header.group(1) if header.group(1) not in points else None
            if name:
                points[name] = ""
        if name:
            points[name] += line + "\n"
    return points


def _threads(text: str) -> int:
    return int(text.split(" threads/process", 1)[0].rsplit("(", 1)[1])


CASES = {
    "torch-ddp": ("torch-ddp", ()),
    "torch-ps apart": ("torch-ps", ("--set", "placement=apart", "--set", "nodes=1")),
    "horovod-keras": ("horovod-keras", ()),
    "tf-mwms": ("tf-mwms", ()),
    "tf-ps": ("tf-ps", ("--set", "ps_mode=sync")),
    "keras-fit": ("keras-fit", ()),
    "mxnet-kv": ("mxnet-kv", ("--set", "kvstore=dist_sync")),
    "jax-dp": ("jax-dp", ()),
    "deepspeed-zero2": ("deepspeed-zero2", ()),
}
ONE_THREAD = ("--set", "threads_per_worker=1")
"""The runs here: one thread a rank, as this 2-core machine can give (the nodes advertise 16)."""
PLACED = {
    "torch-ps apart": {"dlsnode1": ["worker", "worker"], "dlsnode2": ["server"]},
    "tf-ps": {"dlsnode1": ["worker", "ps"], "dlsnode2": ["worker"]},
    "mxnet-kv": {"dlsnode1": ["worker", "scheduler"], "dlsnode2": ["worker", "server"]},
}
"""Where the rule puts each role (placement spread unless named): the others one worker a node."""


@pytest.mark.parametrize("case", list(CASES))
def test_an_engine_runs_across_two_slurm_nodes(tmp_path: Path, cli, slurm, case):
    backend, extra = CASES[case]
    run = cli(
        "run", *TINY, *ONE_THREAD, "--backend", backend, "--workers", "2", "--launcher", "slurm",
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
    assert hosts == PLACED.get(case, {"dlsnode1": ["worker"], "dlsnode2": ["worker"]})
    # each rank ran on the node of its line in the step's host file, written from the plan
    assert (run_dir / "hostfile").read_text().split() == [p["host"] for p in result["layout"]]
    if backend == "deepspeed-zero2":  # DeepSpeed's ZeRO-2 took each rank's steps
        events = read_events(events_path(run_dir, 0))
        (strategy,) = [e for e in events if e["event"] == "strategy"]
        assert strategy["facts"]["zero_stage"] == 2
        assert strategy["facts"]["deepspeed_config"]["zero_optimization"]["stage"] == 2
        losses = per_rank_losses(run_dir)  # TINY's 2 measured windows of 4 steps, each rank's own
        assert [len(losses[0]), len(losses[1])] == [8, 8] and losses[0] != losses[1]
    listed = cli("ls", "runs", "--results", str(tmp_path), env=slurm)
    assert "where the processes ran" in listed.stdout and "dlsnode2" in listed.stdout
    assert not processes_naming(tmp_path)


def test_a_rank_killed_on_a_node_fails_the_run_named_with_its_host(tmp_path: Path, slurm):
    os.environ.update(slurm)  # the long run's dlscale finds this Slurm
    try:
        flags = ("--launcher", "slurm", "--set", "slurm_mode=srun", "--set", "nodes=2", *ONE_THREAD)
        # rank 1 is blamed (the helper checks failure["failed_rank"]); srun's code is 137 or 143
        reason = "(role worker, on host dlsnode2)"
        kill_rank_and_check_the_run_fails(tmp_path, "torch-ddp", extra=flags, reason=reason)
    finally:
        os.environ.pop("SLURM_CONF", None)
