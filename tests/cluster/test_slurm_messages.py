"""Slurm that is not there to take a job, with the real Slurm clients (scripts/install-slurm.sh):
a SLURM_CONF naming no file (the clients would retry it silently for 60 s), no configuration
at all, and a configuration whose controller is not running. Each is one line before anything
is created, naming the problem and how to start a Slurm; a dry run asks no controller."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.launchers.slurm_controller import DEFAULT_CONF

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(shutil.which("scontrol") is None, reason="scripts/install-slurm.sh"),
]

POINT = ("--backend", "torch-single", "--workers", "1", "--model", "tiny", "--repeats", "1",
         "--set", "machine_reference=false")  # fmt: skip
FIX = "start one on this machine with `scripts/slurm-local.sh start DIR`"


def _dlscale(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, str, float]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-P", "-m", "dlscale", *args], capture_output=True, text=True,
        timeout=120, cwd=tmp_path, env={**environ, **env},
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - started


def _one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1 and err.startswith("dlscale: error:"), err
    assert "\\n" not in err  # no tool's message of several lines squeezed into one
    return err


def _down_controller(tmp_path: Path) -> Path:
    """A slurm.conf whose controller (this host, a free port) is not running."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    host = socket.gethostname().split(".")[0]
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        f"ClusterName=dlscale-down\nSlurmctldHost={host}\nSlurmctldPort={port}\n"
        f"NodeName={host} CPUs=2 State=UNKNOWN\nPartitionName=debug Nodes={host} Default=YES\n"
    )
    return conf


@pytest.mark.parametrize("mode", ["sbatch", "srun"])
def test_a_slurm_conf_that_names_no_file_is_one_line_at_once(tmp_path: Path, mode):
    results = tmp_path / "res"
    missing = tmp_path / "no" / "slurm.conf"
    code, err, took = _dlscale(tmp_path, {"SLURM_CONF": str(missing)}, "run", *POINT,
                               "--launcher", "slurm", "--set", f"slurm_mode={mode}",
                               "--results", str(results))  # fmt: skip
    assert code == 2 and took < 30, (took, err)  # not Slurm's 60 s of silent retries
    assert f"SLURM_CONF={missing} names no file" in _one_line(err) and FIX in err
    assert not results.exists()


def test_a_controller_that_is_not_running_is_one_line_naming_the_fix(tmp_path: Path):
    results = tmp_path / "res"
    conf = _down_controller(tmp_path)
    code, err, took = _dlscale(tmp_path, {"SLURM_CONF": str(conf)}, "run", *POINT,
                               "--launcher", "slurm", "--results", str(results))  # fmt: skip
    assert code == 2 and took < 60, (took, err)
    assert f"configured in {conf}) is not running: scontrol ping says DOWN" in _one_line(err)
    assert FIX in err and "export the SLURM_CONF it prints" in err
    assert not results.exists()
    # the microbench is refused the same way, before its run directory exists
    code, err, _ = _dlscale(tmp_path, {"SLURM_CONF": str(conf)}, "microbench", "--launcher",
                            "slurm", "--sizes", "4", "--results", str(results))  # fmt: skip
    assert code == 2 and "is not running" in _one_line(err) and not results.exists()


@pytest.mark.skipif(DEFAULT_CONF.exists(), reason=f"this machine has {DEFAULT_CONF}")
def test_no_slurm_configuration_at_all_is_one_line(tmp_path: Path):
    results = tmp_path / "res"
    code, err, took = _dlscale(tmp_path, {}, "run", *POINT, "--launcher", "slurm",
                               "--results", str(results))  # fmt: skip
    assert code == 2 and took < 60, (took, err)
    assert "no Slurm configuration here (SLURM_CONF is not set" in _one_line(err) and FIX in err
    assert not results.exists()


def test_a_dry_run_asks_no_controller_once_the_nodes_are_given(tmp_path: Path):
    """A study is planned from the compute nodes' CPUs: from a machine without Slurm a dry
    run needs them given (one line says so), and then runs without asking a controller."""
    results = tmp_path / "res"
    missing = tmp_path / "no" / "slurm.conf"
    flags = ("--launcher", "slurm", "--dry-run", "--results", str(results))
    env = {"SLURM_CONF": str(missing)}
    code, err, took = _dlscale(tmp_path, env, "run", *POINT, *flags)
    assert code == 2 and took < 60, (took, err)
    assert "cannot ask Slurm for its nodes' CPUs" in _one_line(err) and "cpus_per_node" in err
    code, err, _ = _dlscale(tmp_path, env, "run", *POINT, *flags, "--set", "cpus_per_node=16")
    assert code == 0, err
    assert not results.exists()
