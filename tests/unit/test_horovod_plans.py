"""horovodrun and mpirun plans, and Horovod's cluster variables, as data: nothing is started."""

import os
import re
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UnsupportedPoint, UserError
from dlscale.frameworks.horovod.declare import RENDEZVOUS_ENV, horovod_build
from dlscale.launchers.base import PlanEntry
from dlscale.launchers.horovodrun import HorovodrunLauncher
from dlscale.launchers.local import LocalLauncher
from dlscale.launchers.mpirun import MpirunLauncher
from dlscale.launchers.slurm import SlurmLauncher

SPEC = Path("/r/x/spec.json")


def _cluster(cfg, plan, rank):
    return BACKENDS.get(cfg.backend).cluster_env(
        plan.layout.processes[rank], plan.layout, plan.addresses, cfg
    )


def test_horovodrun_plan_is_one_command_with_the_gloo_rendezvous_left_to_it():
    cfg = RunConfig.make(backend="horovod-torch", workers=2, model="tiny", launcher="horovodrun")
    plan = HorovodrunLauncher().plan(cfg, SPEC, "/venv/bin/python", ports=(29555,), cores=8)
    (entry,) = plan.entries
    assert entry.ranks == range(2) and plan.threads_per_worker == 4
    assert entry.argv == (
        "/venv/bin/horovodrun",
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        "--start-timeout",
        "120",
        "/venv/bin/python",
        "-P",
        "-m",
        "dlscale.worker",
        "/r/x/spec.json",
    )
    assert entry.env["DLSCALE_RANK_VARS"] == "HOROVOD_RANK,HOROVOD_LOCAL_RANK,HOROVOD_SIZE"
    assert entry.env["OMP_NUM_THREADS"] == "4"
    assert entry.stderr == Path("/r/x/launcher.stderr")
    # horovodrun gives the ranks their HOROVOD_* variables itself
    assert _cluster(cfg, plan, 0) == {} and _cluster(cfg, plan, 1) == {}


def test_mpirun_plan_exports_the_worker_variables_and_mpi_controls_horovod():
    cfg = RunConfig.make(backend="horovod-torch", workers=3, model="tiny", launcher="mpirun")
    plan = MpirunLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=6)
    (entry,) = plan.entries
    argv = list(entry.argv)
    assert argv[0] == "mpirun"
    assert ("--allow-run-as-root" in argv) == (os.geteuid() == 0)
    assert argv[argv.index("-np") + 1] == "3"
    assert argv[argv.index("--host") + 1] == "localhost:3"
    assert argv[argv.index("--bind-to") + 1] == "none"
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert exported == set(entry.env)  # every worker variable reaches every rank by name
    assert argv[-5:] == ["/py", "-P", "-m", "dlscale.worker", "/r/x/spec.json"]
    assert entry.env["DLSCALE_RANK_VARS"].startswith("OMPI_COMM_WORLD_RANK,")
    assert _cluster(cfg, plan, 2) == {"HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi"}


def test_other_backends_keep_their_own_variables_under_mpirun():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="mpirun")
    plan = MpirunLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=2)
    assert _cluster(cfg, plan, 1)["MASTER_PORT"] == "29555"
    assert _cluster(cfg, plan, 1)["RANK"] == "1"


def test_local_launcher_gives_horovod_gloo_variables_and_rank0_the_rendezvous():
    cfg = RunConfig.make(backend="horovod-torch", workers=2, model="tiny")
    plan = LocalLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=2)
    rank0, rank1 = (entry.env for entry in plan.entries)
    assert {k: rank1[k] for k in rank1 if k.startswith("HOROVOD_")} == {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "29555",
        "HOROVOD_GLOO_IFACE": "lo",
        "HOROVOD_HOSTNAME": "127.0.0.1",
        "HOROVOD_RANK": "1",
        "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "0",
        "HOROVOD_CROSS_SIZE": "1",
    }
    # only rank 0 starts the rendezvous server, with the host plan horovodrun would give it
    assert rank0[RENDEZVOUS_ENV] == "127.0.0.1:2" and RENDEZVOUS_ENV not in rank1


def test_horovod_options_are_validated():
    cfg = RunConfig.make(
        backend="horovod-torch", compression="fp16", fusion_mb=0, backward_passes_per_step=4
    )
    assert cfg.options["compression"] == "fp16" and cfg.options["fusion_mb"] == 0.0
    with pytest.raises(UnsupportedPoint, match="compression"):
        RunConfig.make(backend="horovod-torch", compression="powersgd")
    for bad in ({"cycle_ms": 0}, {"fusion_mb": float("nan")}, {"backward_passes_per_step": 0}):
        with pytest.raises(UserError):
            RunConfig.make(backend="horovod-torch", **bad)
    with pytest.raises(UnsupportedPoint, match="fusion_mb"):
        RunConfig.make(backend="torch-ddp", fusion_mb=8)


@pytest.mark.parametrize(
    ("launcher", "text", "rank"),
    [
        (
            HorovodrunLauncher(),
            "[1]<stderr>:boom\nTerminating remaining workers after failure of Process 1.\n",
            1,
        ),
        (  # seen in CI: the peer that lost its connection was seen first, the killed one after
            HorovodrunLauncher(),
            "Process 0 exit with status code 1.\nTerminating remaining workers after failure of "
            "Process 0.\nProcess 1 exit with status code 137.\n",
            1,
        ),
        (  # the others, stopped by horovodrun with SIGTERM, are not the cause
            HorovodrunLauncher(),
            "Process 2 exit with status code 3.\nTerminating remaining workers after failure of "
            "Process 2.\nProcess 0 exit with status code 143.\nProcess 1 exit with status code "
            "-15.\n",
            2,
        ),
        (
            MpirunLauncher(),
            "The first process to do so was:\n\n  Process name: [[23077,1],2]\n  Exit code:    3\n",
            2,
        ),
        (
            MpirunLauncher(),
            "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
            "(Killed).\n",
            1,
        ),
        (MpirunLauncher(), "nothing useful", None),
        (  # seen on a Slurm of 2 emulated nodes: the killed task, not the peer it took down
            SlurmLauncher(),
            "srun: error: dlsnode2: task 1: Killed\nsrun: launch/slurm: _step_signal: "
            "Terminating StepId=9.0\nsrun: error: dlsnode1: task 0: Exited with exit code 1\n",
            1,
        ),
        (SlurmLauncher(), "srun: error: node1: tasks 0-1: Exited with exit code 1\n", None),
    ],
)
def test_the_failed_rank_is_read_from_the_tools_output(tmp_path, launcher, text, rank):
    (tmp_path / "launcher.stderr").write_text(text)
    entry = PlanEntry(
        ranks=range(3),
        argv=("x",),
        env={},
        stdout=tmp_path / "launcher.stdout",
        stderr=tmp_path / "launcher.stderr",
    )
    assert launcher.blame(entry) == rank


def test_ls_says_what_horovod_was_built_with_or_how_to_install_it(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = str(venv / "bin" / "python")
    assert horovod_build(python) == "no: make horovod"
    (venv / "horovod-build.json").write_text(
        '{"horovod": "0.28.1", "key": "k", "frameworks": "torch", "controllers": "gloo,mpi", '
        '"gpu_operations": "none"}'
    )
    assert re.fullmatch(
        r"yes: horovod 0\.28\.1 built for torch; controllers gloo,mpi; GPU operations none",
        horovod_build(python),
    )
    (venv / "horovod-build.json").write_text("{damaged")
    assert horovod_build(python) == "no: make horovod"


@pytest.mark.parametrize(
    ("source", "keras2"),
    [
        ("import horovod.tensorflow as hvd\nimport tensorflow as tf\n", True),
        ("import horovod.tensorflow.keras as hvd\n", True),
        ("from horovod import tensorflow as hvd\n", True),
        ("import horovod.keras as hvd\n", True),
        ("import horovod.torch as hvd\nimport torch\n", False),
    ],
)
@pytest.mark.parametrize("launcher", ["local", "horovodrun", "mpirun"])
def test_a_horovod_tensorflow_script_runs_on_keras_2(
    tmp_path, monkeypatch, source, keras2, launcher
):
    """Horovod's TensorFlow API needs Keras 2 (Variable.ref()): every rank of such a script
    gets TF_USE_LEGACY_KERAS=1, as horovod-tf's engine runs, under every launcher."""
    script = tmp_path / "train.py"  # a path of its own: models are looked up once by name
    script.write_text(source)
    cfg = RunConfig.make(
        backend="horovod-script", model=str(script), dataset="own", workers=2, launcher=launcher
    )
    plan = LocalLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=2)
    for rank in (0, 1):
        env = _cluster(cfg, plan, rank)
        assert env.get("TF_USE_LEGACY_KERAS") == ("1" if keras2 else None)
