"""Engines across emulated hosts, for real: ``dlscale hosts start`` makes 2 hosts on this machine
(network and UTS namespaces, an OpenSSH server each), and mpirun and horovodrun reach them by
ssh from a host list, as on a cluster. Each run's ranks must run on the hosts the plan names (their
``start`` records say where they ran), ``dlscale ls runs`` shows it, a rank killed on a host fails
the run naming that host and role, and the hosts go with the module. Needs root (CI runs as root).

Every engine crosses hosts once, here or under Slurm (test_slurm_hosts.py): an engine's
variables are a function of the layout and the addresses, whichever launcher placed the ranks
(tests/unit holds each plan), so a second launcher adds nothing for it. Each launcher takes
several engines, a torch, a Horovod and a parameter server's among them, and the parameter
servers cross hosts under both placements (a host list's order, Slurm's blocks).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlscale.contract.events import events_path, read_events
from dlscale.launchers import testbed
from dlscale.launchers.network import namespaces
from tests.distributed.processes import kill_rank_and_check_the_run_fails, processes_naming
from tests.distributed.references import COMMON, torch_reference
from tests.runs import final_params

pytestmark = pytest.mark.dist

TINY = ("--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "2")
TINY += ("--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")
HOSTS = ("dlsnode1", "dlsnode2")


def _hosts(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlscale", "hosts", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _nothing_left() -> list[str]:
    """What a test bed leaves on this machine, if anything: its namespaces, its names in
    /etc/hosts, its ssh settings, its record, its root interface."""
    left = [n for n in namespaces() if n.startswith(testbed.PREFIX)]
    if testbed.BEGIN in testbed.HOSTS_FILE.read_text():
        left.append("/etc/hosts block")
    left += [str(p) for p in (testbed.SSH_CONFIG, testbed.RECORD) if p.exists()]
    if Path(f"/sys/class/net/{testbed.INTERFACE}").exists():
        left.append(testbed.INTERFACE)
    return left


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("these tests make network namespaces and ssh servers: run them as root")
    if not shutil.which("mpirun"):
        pytest.fail("mpirun is missing: scripts/install-openmpi.sh (make test runs it)")
    directory = tmp_path_factory.mktemp("hosts")
    started = _hosts("start", str(directory), "--hosts", "2", "--owner", str(os.getpid()))
    assert started.returncode == 0, started.stderr
    yield directory
    stopped = _hosts("stop", str(directory))
    assert stopped.returncode == 0, stopped.stderr
    assert not _nothing_left()


def _ssh(host: str, command: str) -> str:
    done = subprocess.run(["ssh", host, command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_each_host_has_its_own_name_address_and_ssh_server(bed):
    assert [_ssh(h, "hostname") for h in HOSTS] == list(HOSTS)
    assert "10.98.0.102/24" in _ssh("dlsnode2", "ip -br addr show dev dls0")
    assert _ssh("dlsnode1", "ssh dlsnode2 hostname") == "dlsnode2"  # host to host, as mpirun's
    # no name server to wait 10 s for (this machine's is out of reach): a lookup outside the
    # hosts file fails at once, as torch.distributed's store makes one
    assert "nameserver 127.0.0.1" in _ssh("dlsnode2", "cat /etc/resolv.conf")
    assert (bed / "hostfile").read_text() == "dlsnode1 slots=2\ndlsnode2 slots=2\n"
    shown = _hosts("show")
    assert shown.returncode == 0 and "dlsnode2 10.98.0.102 slots=2" in shown.stdout
    again = _hosts("start", str(bed / "other"), "--hosts", "2")
    assert again.returncode == 2 and "one test bed at a time" in again.stderr


def test_a_host_list_is_planned_from_the_hosts_and_checked_on_each(bed, tmp_path, cli):
    """Threads per rank from the listed hosts' CPUs (asked of them by ssh, or given), never
    from this machine; ``dlscale doctor`` through mpirun runs once on each listed host."""
    flags = ("--launcher", "mpirun", "--backend", "torch-ddp", "--workers", "4", "--set",
             "hosts=dlsnode1:2,dlsnode2:2", "--dry-run", "--results", str(tmp_path))  # fmt: skip
    asked = cli("run", *TINY, *flags)
    assert asked.returncode == 0, asked.stderr
    cpus = int(_ssh("dlsnode1", "nproc"))
    assert f"planned for 2 nodes of {cpus} CPUs (nproc on each host, by ssh)" in asked.stdout
    given = cli("run", *TINY, *flags, "--set", "cpus_per_host=16")
    assert given.returncode == 0, given.stderr
    assert "planned for 2 nodes of 16 CPUs (given (cpus_per_host)); 2 processes" in given.stdout
    assert "(8 threads/process;" in given.stdout  # 16 CPUs over the 2 ranks on a host
    doctor = cli("doctor", "--launcher", "mpirun", "--set", "hosts=dlsnode1,dlsnode2",
                 "--set", "interface=dls0", "--json")  # fmt: skip
    assert doctor.returncode == 0, doctor.stderr
    nodes = [json.loads(line) for line in doctor.stdout.splitlines()]
    assert [node["hostname"] for node in nodes] == list(HOSTS)
    assert [node["node"] for node in nodes] == [0, 1] and all(not n["missing"] for n in nodes)


TWO = "dlsnode1:1,dlsnode2:1"
APART = "dlsnode1:3,dlsnode2:1"  # the workers (and a chief, a scheduler) on one, a server alone
CASES = {  # (backend, launcher, hosts)
    "torch-ring-mpirun": ("torch-ring", "mpirun", TWO),
    "torch-fsdp-horovodrun": ("torch-fsdp", "horovodrun", TWO),
    "horovod-tf-horovodrun": ("horovod-tf", "horovodrun", TWO),
    "horovod-torch-mpirun": ("horovod-torch", "mpirun", TWO),
    "horovod-mxnet-horovodrun": ("horovod-mxnet", "horovodrun", TWO),
    "tf-ps-mpirun": ("tf-ps", "mpirun", APART),
    "mxnet-kv-mpirun": ("mxnet-kv", "mpirun", APART),
    "jax-dp-mpirun": ("jax-dp", "mpirun", TWO),
    "deepspeed-zero2-mpirun": ("deepspeed-zero2", "mpirun", TWO),
}
"""The engines Slurm does not place (test_slurm_hosts.py), and the parameter servers again;
DeepSpeed's ZeRO-2 here and under Slurm, without DeepSpeed's own launcher (ZeRO-3 runs on
torchrun's two nodes in tests/distributed/test_torchrun.py)."""
PROVES = ("horovod-tf-horovodrun", "horovod-mxnet-horovodrun", "deepspeed-zero2-mpirun")
"""Cases run on the equivalence proofs' points (tests/distributed/references.COMMON) and held
to their reference, step by step and parameter by parameter: horovodrun's proof for these
engines (test_tensorflow.py and test_mxnet.py hold them under the local launcher and mpirun),
and mpirun's for ZeRO-2 (test_deepspeed.py holds it to torch-ddp under the local launcher)."""
REFERENCE_FLAGS = (
    *("--model", COMMON["model"], "--dataset", COMMON["dataset"], "--batch-size", "8"),
    *("--steps", str(COMMON["steps"]), "--windows", str(COMMON["windows"])),
    *("--warmup-steps", str(COMMON["warmup_steps"]), "--lr", str(COMMON["lr"])),
    *("--set", f"comm_probe_steps={COMMON['comm_probe_steps']}", "--set", "save_params=true"),
    *("--repeats", "1", "--set", "machine_reference=false"),
)


@pytest.mark.parametrize("case", list(CASES))
def test_an_engine_runs_across_hosts_from_a_host_list(bed, tmp_path, cli, shared_store, case):
    backend, launcher, hosts = CASES[case]
    flags = ("--launcher", launcher, "--set", f"hosts={hosts}", "--set", "interface=dls0")
    run = cli(
        "run",
        *(REFERENCE_FLAGS if case in PROVES else TINY),
        "--backend",
        backend,
        "--workers",
        "2",
        "--json",
        "--results",
        str(tmp_path),
        *flags,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    points = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "point"]
    assert [p["status"] for p in points] == ["completed"], [p.get("error") for p in points]
    (run_dir,) = [d for d in tmp_path.iterdir() if (d / "result.json").exists()]
    result = json.loads((run_dir / "result.json").read_text())
    filled = [
        h for part in hosts.split(",") for h in [part.split(":")[0]] * int(part.split(":")[1])
    ]
    for process in result["layout"]:  # every rank ran where the host list put it
        rank = process["rank"]
        start = read_events(events_path(run_dir, rank))[0]
        assert start["host"] == process["host"] == filled[rank], (rank, start)
    assert {p["host"] for p in result["layout"]} == set(HOSTS)
    for host in HOSTS:  # a parameter server's host runs no worker
        roles = {p["role"] for p in result["layout"] if p["host"] == host}
        assert not (roles & {"ps", "server"} and "worker" in roles), result["layout"]
    listed = cli("ls", "runs", "--results", str(tmp_path))
    assert "where the processes ran" in listed.stdout and "dlsnode2" in listed.stdout
    assert not processes_naming(tmp_path)
    if case in PROVES:  # the mean of the ranks' losses is the loss of the batch of 16
        reference = torch_reference(shared_store)
        losses = result["metrics"]["train_loss_by_step"]
        np.testing.assert_allclose(losses, reference.losses, rtol=1e-4, atol=1e-5)
        params = final_params(run_dir)
        assert params.keys() == reference.params.keys()
        for name, value in params.items():
            np.testing.assert_allclose(
                value, reference.params[name], rtol=1e-4, atol=2e-5, err_msg=name
            )


def test_a_rank_killed_on_a_host_fails_the_run_naming_host_and_role(bed, tmp_path):
    """Rank 1 of 2, on dlsnode2, killed with -9 (the helper's defaults)."""
    flags = ("--launcher", "mpirun", "--set", f"hosts={TWO}")
    reason = "(role worker, on host dlsnode2)"
    kill_rank_and_check_the_run_fails(tmp_path, "torch-ddp", extra=flags, reason=reason)
