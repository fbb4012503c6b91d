"""A Ray cluster across emulated hosts, for real: ``dlscale hosts start`` makes 2 hosts (network
and UTS namespaces, an ssh server each); the test starts Ray's head on one (``ray start
--head``) and a worker node on the other (``ray start --address``), Ray's own processes on each
host, and runs dlscale on the head's host as a user of the cluster would. Each 2-worker point's
ranks run one a host (a bundle of 1 CPU on nodes of 1), with the losses of the local launcher
to the bit; ``doctor`` answers for both nodes; the cluster is stopped by the test that started
it. Needs root (CI runs as root)."""

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.store import RunStore
from tests.distributed.processes import (
    kill_all,
    processes_naming,
    stop_ray,
    wait_gone,
    with_descendants,
)

pytestmark = pytest.mark.dist

ray = pytest.importorskip("ray", reason="make test installs Ray (the ray extra)")
HOSTS = ("dlsnode1", "dlsnode2")
HEAD = "10.98.0.101:6379"
TINY = ("--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "1")
TINY += ("--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")
BIN = Path(sys.executable).parent
TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
"""The cluster's token, given to every Ray process and driver on both hosts (as a cluster's
nodes share it: docs/clusters.md, "Ray")."""


def _ssh(host: str, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", host, command], capture_output=True, text=True, timeout=timeout)


def _on(host: str, ray_tmp: Path, *argv: str) -> str:
    """``argv`` on ``host`` with Ray's files under ``ray_tmp`` and the cluster's token, from this
    checkout's directory."""
    env = {"TMPDIR": str(ray_tmp), **TOKEN}
    assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    return f"cd {shlex.quote(os.getcwd())} && {assignments} {shlex.join(argv)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("these tests make network namespaces and ssh servers: run them as root")
    bed = tmp_path_factory.mktemp("rayhosts")
    hosts = [sys.executable, "-m", "dlscale", "hosts"]
    start = [*hosts, "start", str(bed), "--hosts", "2", "--owner", str(os.getpid())]
    started = subprocess.run(start, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    ray_tmp = Path("/tmp/drhosts")
    ray_cli = str(BIN / "ray")
    common = ("--num-cpus=1", "--disable-usage-stats")
    try:
        head = _ssh(HOSTS[0], _on(HOSTS[0], ray_tmp, ray_cli, "start", "--head", "--port=6379",
                                  "--node-ip-address=10.98.0.101", "--include-dashboard=false",
                                  *common))  # fmt: skip
        assert head.returncode == 0, head.stderr
        node = _ssh(HOSTS[1], _on(HOSTS[1], ray_tmp, ray_cli, "start", f"--address={HEAD}",
                                  "--node-ip-address=10.98.0.102", *common))  # fmt: skip
        assert node.returncode == 0, node.stderr
        yield ray_tmp
    finally:
        left = stop_ray(ray_tmp, 6379)  # not ``ray stop``: it stops every cluster of the machine
        stopped = subprocess.run([*hosts, "stop", str(bed)], capture_output=True, text=True,
                                 timeout=120)  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
    assert not left and not processes_naming(ray_tmp), "a Ray process was left"
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _points(done: subprocess.CompletedProcess) -> dict[tuple[str, int], dict]:
    assert done.returncode == 0, done.stderr
    points = [r for r in map(json.loads, done.stdout.splitlines()) if r["kind"] == "point"]
    assert all(p["status"] == "completed" for p in points), points
    return {(p["backend"], p["workers"]): p for p in points}


def test_a_study_runs_across_two_hosts_ray_placed_as_the_local_launcher(cluster, tmp_path):
    grid = ("--backend", "torch-ddp,torch-fsdp", "--workers", "1,2", "--json")
    local = _points(subprocess.run([sys.executable, "-m", "dlscale", "run", *TINY, *grid,
                                    "--results", str(tmp_path / "local")],
                                   capture_output=True, text=True, timeout=300))  # fmt: skip
    argv = (sys.executable, "-m", "dlscale", "run", *TINY, *grid, "--launcher", "ray",
            "--set", f"ray_address={HEAD}", "--results", str(tmp_path / "ray"))  # fmt: skip
    under = _points(_ssh(HOSTS[0], _on(HOSTS[0], cluster, *argv)))
    assert sorted(under) == sorted(local)
    for key, point in under.items():
        assert point["final_train_loss"] == local[key]["final_train_loss"], key
    for result in RunStore(tmp_path / "ray").results():
        hosts = sorted(p["host"] for p in result.layout)
        assert hosts == (list(HOSTS) if result.config["workers"] == 2 else [hosts[0]]), result
        assert result.environment["ray_cluster"] == HEAD
        assert result.environment["ray_resources"] == "CPU=1"


def test_doctor_answers_for_every_node_of_the_cluster(cluster):
    argv = (sys.executable, "-m", "dlscale", "doctor", "--launcher", "ray", "--set",
            f"ray_address={HEAD}", "--json")  # fmt: skip
    done = _ssh(HOSTS[0], _on(HOSTS[0], cluster, *argv))
    assert done.returncode == 0, done.stderr
    nodes = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(n["hostname"] for n in nodes) == list(HOSTS)
    assert all(n["missing"] == [] for n in nodes)


def test_a_node_without_dlscale_is_named_before_any_rank_starts(cluster, tmp_path):
    """The worker node restarted with a Python that cannot import dlscale (a ``dlscale`` first
    on its path that is not there, as on a node where it was never installed): a point whose
    ranks need that node fails in one line naming the fix, and ``doctor`` says what it lacks.
    Last in this module: the node stays so until the module's cluster is stopped."""
    missing = tmp_path / "without-dlscale" / "dlscale"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'dlscale'\", name='dlscale')\n"
    )
    ray_cli = str(BIN / "ray")
    node = with_descendants(processes_naming("10.98.0.102"))  # its raylet names its address
    kill_all(node)
    assert not wait_gone(node, 20.0)
    restart = _on(HOSTS[1], cluster, ray_cli, "start", f"--address={HEAD}",
                  "--node-ip-address=10.98.0.102", "--num-cpus=1",
                  "--disable-usage-stats")  # fmt: skip
    path = f"PYTHONPATH={shlex.quote(str(missing.parent))} "
    started = _ssh(HOSTS[1], restart.replace(" && ", " && " + path, 1))
    assert started.returncode == 0, started.stderr
    argv = (sys.executable, "-m", "dlscale", "run", *TINY, "--backend", "torch-ddp",
            "--workers", "2", "--launcher", "ray", "--set", f"ray_address={HEAD}",
            "--set", "ray_placement=strict_spread", "--results", str(tmp_path / "r"))  # fmt: skip
    done = _ssh(HOSTS[0], _on(HOSTS[0], cluster, *argv))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"dlscale: error: a node of the Ray cluster at {HEAD} cannot import dlscale: install "
        "dlscale and the engine's framework on every node, in the Python that Ray runs there"
    )
    argv = (sys.executable, "-m", "dlscale", "doctor", "--launcher", "ray", "--set",
            f"ray_address={HEAD}", "--json")  # fmt: skip
    doctor = _ssh(HOSTS[0], _on(HOSTS[0], cluster, *argv))
    assert doctor.returncode == 1, doctor.stderr
    nodes = {n["hostname"]: n for n in map(json.loads, doctor.stdout.splitlines())}
    assert nodes["dlsnode1"]["missing"] == []
    assert any(m.startswith("dlscale ") for m in nodes["dlsnode2"]["missing"]), nodes
