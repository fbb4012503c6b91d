"""The Ray launcher's plan as data, and its refusals of bad input: nothing is started here
(tests/distributed/test_ray.py and tests/cluster/test_ray_hosts.py run it on real Ray)."""

import os
import re
import socket
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.errors import UserError
from dlscale.contract.layout import Addresses
from dlscale.launchers.ray_cluster import RayCluster, answers, check_address
from dlscale.launchers.ray_launcher import RayLauncher
from dlscale.launchers.ray_ranks import HOSTS_ENV, _placed, _start_failure
from dlscale.runtime.gpus import BOUND_ENV

SPEC = Path("/r/x/spec.json")


def test_each_rank_is_a_bundle_of_its_threads_in_one_placement_group():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="ray")
    plan = RayLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=8)
    assert plan.threads_per_worker == 4 and plan.warnings == ()
    assert plan.addresses == Addresses(hosts=(), ports=(29555,))  # placed by Ray, read by ranks
    (cluster,) = plan.setups
    assert isinstance(cluster, RayCluster)
    assert cluster.address == "" and cluster.cpus == 8
    assert cluster.bundles == ({"CPU": 4.0},) * 2 and cluster.strategy == "pack"
    assert cluster.describe() == [
        "start a local Ray cluster of 8 CPUs (ray.init; stopped after the run)",
        "a placement group of 2 bundles {CPU: 4}, strategy PACK: one Ray actor a rank, "
        "which starts the rank's command",
    ]
    assert plan.nodes == "a local Ray cluster: 1 node(s) of 8 CPUs (this machine)"
    assert [list(e.ranks) for e in plan.entries] == [[0], [1]]
    entry = plan.entries[1]
    assert entry.argv == ("/py", "-P", "-m", "dlscale.worker", "/r/x/spec.json")
    assert entry.env["DLSCALE_RANK"] == "1" and entry.env["DLSCALE_WORLD_SIZE"] == "2"
    assert entry.env["OMP_NUM_THREADS"] == "4" and "MASTER_ADDR" not in entry.env
    assert BOUND_ENV not in entry.env and entry.stdout == Path("/r/x/rank1.stdout")


def test_an_oversubscribed_local_cluster_still_holds_every_bundle():
    cfg = RunConfig.make(backend="torch-ddp", workers=4, model="tiny", launcher="ray")
    plan = RayLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=2)
    (cluster,) = plan.setups
    assert plan.threads_per_worker == 1 and cluster.cpus == 4  # 4 bundles of 1 CPU on 2 cores
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="ray",
                         threads_per_worker=3)  # fmt: skip
    plan = RayLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=2)
    assert plan.setups[0].cpus == 6 and "oversubscribed" in plan.warnings[0]


def test_a_gpu_point_asks_one_gpu_a_bundle_and_each_rank_uses_the_one_it_sees():
    cfg = RunConfig.make(backend="torch-ddp", workers=2, model="tiny", launcher="ray",
                         device="cuda", ray_placement="strict_spread")  # fmt: skip
    plan = RayLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=8)
    (cluster,) = plan.setups
    assert cluster.bundles == ({"CPU": 4.0, "GPU": 1.0},) * 2
    assert cluster.describe()[0] == (
        "start a local Ray cluster of 8 CPUs and the GPUs Ray finds (ray.init; stopped after "
        "the run)"
    )
    assert cluster.strategy == "strict_spread"
    assert all(e.env[BOUND_ENV] == "1" for e in plan.entries)


def test_each_rank_learns_every_rank_s_node_and_its_local_rank_once_placed():
    cfg = RunConfig.make(backend="torch-ddp", workers=3, model="tiny", launcher="ray")
    plan = RayLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=6)
    hosts = Addresses(hosts=("10.0.0.1", "10.0.0.2", "10.0.0.1"), ports=())
    placed = [
        _placed(e, i, hosts, {"DLSCALE_RAY_VERSION": "9"}) for i, e in enumerate(plan.entries)
    ]
    assert [p.env["DLSCALE_LOCAL_RANK"] for p in placed] == ["0", "0", "1"]
    assert {p.env[HOSTS_ENV] for p in placed} == {"10.0.0.1,10.0.0.2,10.0.0.1"}
    assert placed[2].env["DLSCALE_RAY_VERSION"] == "9" and placed[2].env["DLSCALE_RANK"] == "2"


@pytest.mark.parametrize("good", ["", "auto", "10.0.0.1:6379", "head-node:6379", "[::1]:6379"])
def test_an_address_is_empty_auto_or_host_and_port(good):
    check_address(good)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("ray://head:10001", "Ray Client address"),
        ("head", "is not HOST:PORT"),
        ("head:99999", "is not HOST:PORT"),
        ("head:0", "is not HOST:PORT"),
        ("$(reboot):1", "is not HOST:PORT"),
        ("a b:1", "is not HOST:PORT"),
    ],
)
def test_a_bad_address_is_refused(bad, said):
    with pytest.raises(UserError, match=said):
        check_address(bad)


@pytest.mark.parametrize("bad", ["ray://head:10001", "$(reboot):1"])
def test_a_bad_address_is_one_line_before_anything_runs(bad, cli, tmp_path):
    flags = ("--launcher", "ray", "--backend", "torch-ddp", "--workers", "2", "--model", "tiny")
    done = cli("run", *flags, "--set", f"ray_address={bad}", "--results", str(tmp_path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"dlscale: error: ray_address {bad!r} ")
    assert not any(tmp_path.iterdir())  # nothing made: refused before the study was planned


def test_an_address_that_does_not_answer_is_said_at_once():
    with socket.socket() as probe:  # a port nothing listens on (closed below)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(UserError, match=r"at 127.0.0.1:\d+ does not answer \(Connection refused"):
        answers(f"127.0.0.1:{port}")


@pytest.mark.parametrize("bad", ["ray://head:10001", "garbage", "head:port", "$(reboot)"])
def test_auto_with_a_ray_address_that_is_no_address_is_one_line(bad, cli, tmp_path):
    env = {**os.environ, "RAY_ADDRESS": bad}
    done = cli("run", "--launcher", "ray", "--set", "ray_address=auto", "--model", "tiny",
               "--results", str(tmp_path), env=env)  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"dlscale: error: ray_address=auto: RAY_ADDRESS {bad!r} is not HOST:PORT: unset it, or "
        "give the head's address as ray_address=HOST:PORT"
    ]


def test_auto_naming_a_dead_head_is_said_at_once_by_run_and_doctor(cli, tmp_path):
    """``auto`` joins what RAY_ADDRESS (or the newest ``ray start``) names; a head gone since
    (killed, its node rebooted) is one line at once, not minutes of Ray's retries."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    flags = ("--launcher", "ray", "--set", "ray_address=auto")
    run = cli("run", *flags, "--model", "tiny", "--results", str(tmp_path), env=env)
    doctor = cli("doctor", *flags, env=env)
    for done in (run, doctor):
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert re.match(
            rf"dlscale: error: the Ray cluster this machine belongs to at [\d.]+:{port} does not "
            r"answer \(Connection refused\): start it",
            done.stderr,
        ), done.stderr


def test_a_node_without_dlscale_or_the_python_is_named_with_the_fix():
    cluster = RayCluster(address="10.0.0.1:6379", bundles=({"CPU": 1.0},), strategy="pack")
    words = _start_failure(cluster, RuntimeError("ModuleNotFoundError: No module named 'dlscale'"))
    assert words.startswith("a node of the Ray cluster at 10.0.0.1:6379 cannot import dlscale")
    missing = RuntimeError("FileNotFoundError: [Errno 2] No such file or directory: '/venv/py'")
    assert "has no '/venv/py': the workers' Python must be at the same path" in _start_failure(
        cluster, missing
    )
