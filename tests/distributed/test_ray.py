"""Ray as the launcher, for real (Ray 2.60, installed by make test): a local cluster dlscale
starts for each point and stops after it, and a head started here with ``ray start --head``
that dlscale joins and leaves running. The same losses as the local launcher to the bit (the
engine is the only difference), Ray's facts in the result, a killed rank, a killed Ray actor
and a killed dlscale each ending the run with nothing left, ``dlscale doctor --launcher ray``.

Each test gives Ray a temporary directory of its own (``TMPDIR``, short: Ray's socket paths live
under it), so that the processes of its clusters are found by that directory alone."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlscale.store import RunStore
from tests.distributed.processes import (
    kill_all,
    kill_rank_and_check_the_run_fails,
    parent_pid,
    processes_given_tmpdir,
    processes_naming,
    start_long_run,
    stop_ray,
    wait_for_pids,
    wait_gone,
)

pytestmark = pytest.mark.dist

ray = pytest.importorskip("ray", reason="make test installs Ray (the ray extra)")
TINY = ("--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "1")
TINY += ("--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """A short temporary directory for Ray's files (``$TMPDIR/ray``); what names it must be
    gone at the end: every process of the clusters made under it."""
    directory = Path(tempfile.mkdtemp(prefix="dr", dir="/tmp"))
    try:
        yield directory
        left = wait_gone({*processes_naming(directory), *processes_given_tmpdir(directory)}, 20)
        assert not left, "a Ray process was left"
    finally:
        kill_all({*processes_naming(directory), *processes_given_tmpdir(directory)})
        shutil.rmtree(directory, ignore_errors=True)


TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""Ray's token authentication, as Ray 2.60 turns it on for a cluster it starts: a driver that
names the head's address must say so (Ray does not send its token to an address unasked)."""


def _env(ray_tmp: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(ray_tmp), **more}


def _study(cli, results: Path, env: dict[str, str], *flags: str) -> dict[tuple[str, int], dict]:
    done = cli("run", *TINY, "--json", "--results", str(results), *flags, env=env)
    assert done.returncode == 0, done.stderr
    points = [r for r in map(json.loads, done.stdout.splitlines()) if r["kind"] == "point"]
    assert all(p["status"] == "completed" for p in points), points
    return {(p["backend"], p["workers"]): p for p in points}


def test_a_local_ray_cluster_trains_exactly_as_the_local_launcher(tmp_path, cli, ray_tmp):
    """The issue's own command: DDP and FSDP at 1 and 2 workers, each point on a local Ray
    cluster started for it and stopped after; every loss the local launcher's to the bit. A
    RAY_ADDRESS left in the environment (a dead head's) is not joined: the cluster is local."""
    grid = ("--backend", "torch-ddp,torch-fsdp", "--workers", "1,2")
    local = _study(cli, tmp_path / "local", _env(ray_tmp), *grid)
    stale = _env(ray_tmp, RAY_ADDRESS="127.0.0.1:9")
    under = _study(cli, tmp_path / "ray", stale, *grid, "--launcher", "ray")
    assert sorted(under) == sorted(local) and len(under) == 4
    for key, point in under.items():
        assert point["final_train_loss"] == local[key]["final_train_loss"], key
    results = {
        (r.config["backend"], r.config["workers"]): r for r in RunStore(tmp_path / "ray").results()
    }
    ddp = results[("torch-ddp", 2)]
    assert ddp.config["launcher"] == "ray"
    environment = ddp.environment
    assert environment["ray_version"] == ray.__version__ and environment["ray_cluster"] == "local"
    assert environment["ray_resources"] == "CPU=1" and len(environment["ray_node_id"]) == 56
    assert [p["host"] for p in ddp.layout] == [socket.gethostname()] * 2
    # each point's cluster stopped with the point (Ray's agents end a moment after its raylet)
    assert not wait_gone(processes_given_tmpdir(ray_tmp), 20.0)


@pytest.fixture
def head(ray_tmp: Path) -> Iterator[str]:
    """A Ray head started here as a user starts one (``ray start --head``), stopped after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    start = [ray_cli, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"]  # fmt: skip
    done = subprocess.run(
        start, capture_output=True, text=True, timeout=120, env=_env(ray_tmp, **TOKEN)
    )
    assert done.returncode == 0, done.stderr
    try:
        yield f"127.0.0.1:{port}"
    finally:
        assert not stop_ray(ray_tmp, port)  # not ``ray stop``: it stops every cluster here


def test_a_running_cluster_is_joined_checked_and_left_running(tmp_path, cli, ray_tmp, head):
    """dlscale joins the head's cluster, plans the threads from its nodes, runs the point there
    and leaves the cluster as it found it; ``doctor`` runs its node check on every node."""
    flags = ("--backend", "torch-ddp", "--workers", "2", "--launcher", "ray",
             "--set", f"ray_address={head}")  # fmt: skip
    env = _env(ray_tmp, **TOKEN)
    dry = cli("run", *TINY, *flags, "--dry-run", "--results", str(tmp_path), env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"planned for the Ray cluster at {head}: 1 node(s) of 2 CPUs (ray.nodes())" in dry.stdout
    assert f"join the Ray cluster at {head} (ray.init, address={head})" in dry.stdout
    assert len(_study(cli, tmp_path, env, *flags)) == 1
    (result,) = RunStore(tmp_path).results()
    assert result.environment["ray_cluster"] == head
    status = subprocess.run([str(Path(sys.executable).with_name("ray")), "status",
                             f"--address={head}"], capture_output=True, text=True,
                            timeout=60, env=env)  # fmt: skip
    assert status.returncode == 0 and "2.0 CPU" in status.stdout  # still up, every CPU free
    doctor = cli("doctor", "--launcher", "ray", "--set", f"ray_address={head}", "--json",
                 env=env)  # fmt: skip
    assert doctor.returncode == 0, doctor.stderr
    (node,) = [json.loads(line) for line in doctor.stdout.splitlines()]
    assert node["hostname"] == socket.gethostname() and node["missing"] == []


def test_a_cluster_too_small_or_refusing_is_said_in_one_line(tmp_path, cli, ray_tmp, head):
    flags = ("run", *TINY, "--backend", "torch-ddp", "--workers", "2", "--launcher", "ray",
             "--set", f"ray_address={head}", "--results", str(tmp_path))  # fmt: skip
    too_many = cli(*flags, "--set", "ray_placement=strict_spread", env=_env(ray_tmp, **TOKEN))
    assert too_many.returncode == 2 and "Traceback" not in too_many.stderr
    assert too_many.stderr.strip().splitlines() == [
        f"dlscale: error: the Ray cluster at {head} has 1 node(s) with 2 CPU; the point needs 2 "
        "bundles of {'CPU': 1.0} on as many nodes (strict_spread): fewer workers or "
        "threads_per_worker, or a larger cluster"
    ]
    unasked = cli(*flags, env=_env(ray_tmp))  # the token not offered: Ray's own retries unshown
    assert unasked.returncode == 2 and len(unasked.stderr.strip().splitlines()) == 1
    assert "requires Ray's token authentication" in unasked.stderr
    assert "set RAY_AUTH_MODE=token" in unasked.stderr


def test_a_killed_rank_fails_the_run_and_leaves_nothing(tmp_path):
    """The run's temporary directory is a long one here: Ray's files go to a short one of its
    own (``/tmp/ray-dlscale-UID``), as its socket paths must fit in 107 bytes."""
    kill_rank_and_check_the_run_fails(
        tmp_path / "results",
        "torch-ddp",
        extra=("--launcher", "ray"),
        reason="rank 1 was killed by SIGKILL",
    )


def test_a_killed_ray_actor_fails_the_run_naming_it(tmp_path, ray_tmp):
    """``kill -9`` of the Ray worker process (the actor) that started rank 1: the rank dies
    with it, the run fails naming the actor, and nothing of the run or the cluster is left."""
    results = tmp_path / "results"
    proc = start_long_run(results, 300, extra=("--launcher", "ray"), env=_env(ray_tmp))
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(results, ranks=2, proc=proc)
        actor = parent_pid(pids[1])
        assert "RankProcess" in Path(f"/proc/{actor}/cmdline").read_text()
        os.kill(actor, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        record = json.loads(out.strip().splitlines()[-1])
        assert record["status"] == "failed" and "Traceback" not in err
        error = record["error"]  # Ray's words, then the rank's end as the watcher saw it
        assert error.startswith("its Ray actor on node ") and " died (" in error, error
        assert error.endswith("): rank 1 was killed by SIGKILL") and len(error) < 300, error
        assert not wait_gone(pids.values(), 10.0)
        assert not processes_naming(results)
    finally:
        kill_all(pids.values(), proc)


def test_a_killed_dlscale_takes_its_ranks_and_its_local_cluster_with_it(tmp_path, ray_tmp):
    results = tmp_path / "results"
    proc = start_long_run(results, 300, extra=("--launcher", "ray"), env=_env(ray_tmp))
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(results, ranks=2, proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert not wait_gone(pids.values(), 30.0)
        assert not processes_naming(results)
        # the cluster's processes too; Ray's two agents after its 60 s attempt to report the
        # raylet's death (report_raylet_error_logs), which a SIGKILL leaves them to make
        assert not wait_gone(processes_given_tmpdir(ray_tmp), 120.0)
    finally:
        kill_all(pids.values(), proc)
