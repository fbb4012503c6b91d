"""A Slurm study planned where Slurm is not (a laptop, a login node without its clients): the
dry run calls no Slurm command once the node facts are given, and says which it used; a data
directory that only the nodes have is a warning there, checked by each training rank on its
node; a real run without the clients stops in one line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.contract.run_config import RunConfig
from dlscale.launchers.launch_run import _write_spec
from dlscale.launchers.local import LocalLauncher

pytestmark = pytest.mark.e2e

SLURM = ("srun", "sbatch", "scontrol", "scancel", "sinfo")
POINT = ("--backend", "torch-ddp", "--workers", "1,2", "--model", "tiny", "--launcher", "slurm")
NODES = ("--set", "cpus_per_node=16", "--set", "gpus_per_node=4", "--device", "cuda")


def _without_slurm(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """``dlscale ARGS`` with a PATH of this Python alone, outside any allocation."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python", "python3"):
        if not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = str(bin_dir)
    assert not any(shutil.which(tool, path=env["PATH"]) for tool in SLURM)
    return subprocess.run(
        [sys.executable, "-m", "dlscale", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )


def test_a_dry_run_with_the_node_facts_needs_no_slurm_command(tmp_path: Path):
    results = tmp_path / "res"
    done = _without_slurm(tmp_path, "run", *POINT, *NODES, "--dry-run", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert "# node facts used: 16 CPUs, 4 GPUs a node (cpus_per_node=16; gpus_per_node=4)" in (
        done.stdout.splitlines()
    )
    assert "sbatch --parsable" in done.stdout  # each point's plan, from those facts
    assert "#   planned for 1 node of 16 CPUs, 4 GPUs (cpus_per_node=16; gpus_per_node=4)" in (
        done.stdout
    )
    (note,) = done.stderr.splitlines()  # what a real run from here would need, said once
    assert note.startswith("dlscale: note: a real run from here would stop: --launcher slurm ")
    assert "srun" in note and "Traceback" not in done.stderr
    assert not results.exists()


def test_a_dry_run_without_the_node_facts_says_in_one_line_which_to_give(tmp_path: Path):
    done = _without_slurm(tmp_path, "run", *POINT, "--dry-run", "--results", str(tmp_path / "r"))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("dlscale: error: cannot ask Slurm for its nodes' CPUs and GPUs: ")
    assert "not installed here" in line and line.endswith("or give --set cpus_per_node=C")


def test_a_data_directory_only_the_nodes_have_is_a_warning_in_a_dry_run(tmp_path: Path):
    absent = tmp_path / "scratch" / "cifar"
    done = _without_slurm(
        tmp_path, "run", *POINT, "--set", "cpus_per_node=8", "--dataset", "cifar10",
        "--data-dir", str(absent), "--dry-run", "--results", str(tmp_path / "res"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warning = next(line for line in done.stderr.splitlines() if "warning" in line)
    assert warning == (
        f"dlscale: warning: data_dir {absent} does not exist on this machine; not checked by "
        "this dry run (each training rank checks it on its node before it trains)"
    )
    assert "# node facts used: 8 CPUs a node (cpus_per_node=8)" in done.stdout
    assert "sbatch --parsable" in done.stdout and "tiny cifar10" in done.stdout
    # one this machine has is checked as before: a bad one stops even a dry run
    absent.mkdir(parents=True)
    bad = _without_slurm(
        tmp_path, "run", *POINT, "--set", "cpus_per_node=8", "--dataset", "cifar10",
        "--data-dir", str(absent), "--dry-run", "--results", str(tmp_path / "res"),
    )  # fmt: skip
    assert bad.returncode == 2 and "warning" not in bad.stderr
    assert f"dlscale: error: cifar10: no CIFAR-10 files in {absent}" in bad.stderr


def test_a_real_run_without_slurm_stops_in_one_line(tmp_path: Path):
    results = tmp_path / "res"
    done = _without_slurm(tmp_path, "run", *POINT, "--set", "cpus_per_node=8", "--results",
                          str(results))  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "dlscale: error: --launcher slurm needs srun, which is not installed: install Slurm's "
        "client commands (Debian: scripts/install-slurm.sh)\n"
    )
    assert not results.exists()


def test_a_training_rank_checks_the_data_directory_where_it_runs(tmp_path: Path):
    absent = tmp_path / "node-only" / "cifar"
    config = RunConfig.make(
        backend="torch-single", model="tiny", dataset="cifar10", data_dir=str(absent), workers=1
    )
    run_dir = tmp_path / "res" / config.run_id()
    run_dir.mkdir(parents=True)
    plan = LocalLauncher().plan(config, run_dir / "spec.json", sys.executable, cores=1)
    _write_spec(config, plan, run_dir, study="s", command=["dlscale", "run"], task=None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLSCALE_", "SLURM_"))}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "dlscale.worker", str(run_dir / "spec.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"dlscale worker rank 0: data_dir {absent} does not exist on {socket.gethostname()}, "
        "where this rank runs: put the data set on a file system the nodes share, or give "
        "--data-dir its path on the nodes\n"
    )
