"""Host lists for mpirun and horovodrun, as plans (nothing started); the worker's placement
check; a failed rank named with its host. The same launchers across emulated hosts, for real:
tests/cluster/test_hosts.py."""

import os
import socket
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.backends import BACKENDS
from dlscale.contract.errors import UserError
from dlscale.contract.events import EventWriter, events_path
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.records import Error, Start
from dlscale.launchers.base import PlanEntry
from dlscale.launchers.horovodrun import HorovodrunLauncher
from dlscale.launchers.host_list import parse_hosts, read_hostfile
from dlscale.launchers.mpirun import MpirunLauncher
from dlscale.launchers.watch import failed_rank
from dlscale.runtime.placement import check_placement

SPEC = Path("/r/x/spec.json")
TWO_HOSTS = "10.0.0.1:2,10.0.0.2:2"  # addresses resolve to themselves, without DNS


def test_a_host_list_reads_names_and_slots():
    assert parse_hosts(" a:2, b ,c.example.org:4", "hosts") == (
        ("a", 2),
        ("b", 1),
        ("c.example.org", 4),
    )


@pytest.mark.parametrize(
    "text, said",
    [
        ("a:0", "slots '0'"),
        ("a:two", "slots 'two'"),
        ("a;reboot:2", "is not a host name"),
        ("a:2,,b:2", "'' is not a host name"),
        ("a:2,b:1,a:1", "a named twice"),
        ("-oProxyCommand=x:1", "is not a host name"),  # never read as an ssh option
    ],
)
def test_a_bad_host_list_is_refused_in_one_line(text, said):
    with pytest.raises(UserError, match=said):
        parse_hosts(text, "hosts")
    with pytest.raises(UserError, match=said):  # at the study's check, before any run
        RunConfig.make(backend="torch-ddp", workers=2, launcher="mpirun", hosts=text).validate()


def test_a_hostfile_is_read_as_mpirun_and_horovodrun_read_it(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode1 slots=2\n\nnode2   slots = 3  # big one\nnode3\n")
    assert read_hostfile(str(hostfile)) == (("node1", 2), ("node2", 3), ("node3", 1))
    hostfile.write_text("node1 cpus=2\n")
    with pytest.raises(UserError, match=r"line 1: not NAME or NAME slots=N"):
        read_hostfile(str(hostfile))
    hostfile.write_text("# nobody\n")
    with pytest.raises(UserError, match="no host in it"):
        read_hostfile(str(hostfile))
    with pytest.raises(UserError, match="cannot read it"):
        read_hostfile(str(tmp_path / "missing"))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "fifo", "big", "secret"])
def test_a_hostfile_that_is_not_a_small_text_file_is_refused_without_reading_or_quoting_it(
    tmp_path, device
):
    """Issue 42 items 1 and 4: a device is never read (it grew to 20 GB), a FIFO never waited
    on (even in a dry run), a huge file read no further than its limit, and a file that is
    not a host file named by its line, never quoted (``/etc/shadow`` printed root's hash)."""
    path = Path(device)
    if device == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    elif device == "big":
        path = tmp_path / "big"
        path.write_bytes(b"a" * (2**20 + 1))
    elif device == "secret":
        path = tmp_path / "shadow"
        path.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    with pytest.raises(UserError) as caught:
        read_hostfile(str(path))
    said = str(caught.value)
    assert str(path) in said and "SECRETHASH" not in said and "\n" not in said
    assert ("line 1" in said) if device == "secret" else ("cannot read it" in said)
    cfg = RunConfig.make(backend="torch-ddp", workers=2, launcher="mpirun", hostfile=str(path))
    with pytest.raises(UserError, match="hostfile"):  # the plan, as a dry run makes it
        MpirunLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=4)


@pytest.mark.parametrize("slots", ["²", "٣", "1" * 5000, "+1", " 1"])
def test_slots_that_int_would_refuse_or_misread_are_one_line(slots):
    with pytest.raises(UserError, match="slots"):
        parse_hosts(f"localhost:{slots}", "hosts")


def test_mpirun_places_the_ranks_in_the_hosts_order_and_tells_every_rank_its_peers():
    cfg = RunConfig.make(
        backend="torch-ddp",
        workers=3,
        launcher="mpirun",
        hosts=TWO_HOSTS,
        interface="ib0",
        cpus_per_host=4,
    )
    plan = MpirunLauncher().plan(cfg, SPEC, "/py", ports=(29555,), cores=64)
    (entry,) = plan.entries
    argv = list(entry.argv)
    assert argv[argv.index("--host") + 1] == "10.0.0.1:2,10.0.0.2:1"  # the ranks it holds
    assert argv[argv.index("--map-by") + 1] == "slot"  # filled in order, as planned
    assert plan.addresses.hosts == ("10.0.0.1", "10.0.0.1", "10.0.0.2")
    mca = [argv[i + 1 : i + 3] for i, a in enumerate(argv) if a == "--mca"]
    assert mca == [["btl_tcp_if_include", "ib0"], ["oob_tcp_if_include", "ib0"]]
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert {"GLOO_SOCKET_IFNAME", "DMLC_INTERFACE", "HOROVOD_GLOO_IFACE"} <= exported
    assert entry.env["GLOO_SOCKET_IFNAME"] == "ib0"
    # 2 ranks on the fullest host of 4 CPUs, whatever this machine has (cores=64)
    assert plan.threads_per_worker == 2
    assert plan.nodes == "2 nodes of 4 CPUs (given (cpus_per_host)); 2 processes on the fullest"
    rank2 = BACKENDS.get("torch-ddp").cluster_env(
        plan.layout.processes[2], plan.layout, plan.addresses, cfg
    )
    assert rank2["MASTER_ADDR"] == "10.0.0.1" and rank2["LOCAL_RANK"] == "0"


def test_horovodrun_takes_the_same_host_list_and_interface(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("10.0.0.1 slots=1\n10.0.0.2 slots=1\n")
    cfg = RunConfig.make(
        backend="horovod-torch",
        workers=2,
        launcher="horovodrun",
        hostfile=str(hostfile),
        interface="dls0",
        cpus_per_host=2,
    )
    (entry,) = HorovodrunLauncher().plan(cfg, SPEC, "/venv/bin/python", ports=(1,), cores=2).entries
    argv = list(entry.argv)
    assert argv[argv.index("-H") + 1] == "10.0.0.1:1,10.0.0.2:1"
    assert argv[argv.index("--network-interface") + 1] == "dls0"


@pytest.mark.parametrize(
    "options, said",
    [
        ({"hosts": "10.0.0.1:1,10.0.0.2:2"}, r"offer 3 slots .* the run has 4 processes"),
        ({"hosts": "10.0.0.1:4", "hostfile": "/x"}, "hosts or hostfile, not both"),
        ({"interface": "eth0"}, "give hosts or hostfile too"),
        ({"hosts": "no-such-host.invalid:4"}, "no-such-host.invalid does not resolve here"),
    ],
)
def test_a_placement_that_cannot_be_is_refused_before_anything_starts(options, said):
    cfg = RunConfig.make(backend="torch-ddp", workers=4, launcher="mpirun", **options)
    with pytest.raises(UserError, match=said):
        MpirunLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=2)


def test_the_resource_guard_leaves_ranks_on_other_hosts_alone():
    spec = LAUNCHERS.get("mpirun")
    assert spec.on_this_machine({}) and spec.on_this_machine({"hosts": ""})
    assert not spec.on_this_machine({"hosts": TWO_HOSTS})
    assert not spec.on_this_machine({"hostfile": "/etc/cluster"})
    assert not LAUNCHERS.get("slurm").on_this_machine({})


def test_a_rank_started_on_another_host_than_planned_ends_at_once_naming_both():
    check_placement(0, ("127.0.0.1", "10.0.0.2"))  # the loopback is every host's
    with pytest.raises(
        UserError, match=rf"rank 1 was planned on 192\.0\.2\.77 .* {socket.gethostname()}"
    ):
        check_placement(1, ("127.0.0.1", "192.0.2.77"))  # TEST-NET-1: no machine has it


def test_a_rank_that_died_on_another_host_is_named_with_its_host_and_role(tmp_path):
    for rank, (host, role) in enumerate([(socket.gethostname(), "ps"), ("dlsnode2", "worker")]):
        writer = EventWriter(events_path(tmp_path, rank), rank)
        writer.host = host
        writer.write(Start(pid=1, world_size=2, role=role))
        writer.close()
    entry = PlanEntry(
        ranks=range(2), argv=("x",), env={}, stdout=tmp_path / "o", stderr=tmp_path / "e"
    )
    assert failed_rank(entry, -9, tmp_path, 1) == (
        1,
        "rank 1 (command of ranks [0, 1]) was killed by SIGKILL (role worker, on host dlsnode2)",
    )
    assert failed_rank(entry, 1, tmp_path, 0)[1].endswith("exited with code 1 (role ps)")


def test_where_the_processes_ran_lists_runs_on_other_hosts_with_their_names_escaped():
    """ls runs and the report list only runs that left this machine; a host name is data
    (an event file's text) and reaches the HTML escaped."""
    from dlscale.report.html import _placement
    from dlscale.report.placement import placements

    here = socket.gethostname()
    rows = [
        {"run_id": "here", "layout": [{"role": "worker", "rank": 0, "host": here}]},
        {"run_id": "old", "layout": [{"role": "worker", "rank": 0}]},  # stored before hosts
        {
            "run_id": "spread",
            "layout": [
                {"role": "worker", "rank": 0, "host": here},
                {"role": "worker", "rank": 1, "host": here},
                {"role": "ps", "rank": 2, "host": "<script>alert(1)</script>"},
            ],
        },
    ]
    assert placements(rows) == [
        ("spread", here, "worker 0, worker 1"),
        ("", "<script>alert(1)</script>", "ps 2"),
    ]
    html = _placement(rows)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert _placement(rows[:2]) == ""


def test_when_mpirun_lost_a_host_the_rank_that_fell_silent_there_is_blamed(tmp_path):
    """Seen with a host's link cut mid-run: mpirun's words name no node ("unable to reliably
    start one or more daemons") and rank 0 records the lost connection; rank 1, on the host
    that went away, recorded nothing since. It is the one named, with its host."""
    for rank, host, late in ((1, "dlsnode2", False), (0, socket.gethostname(), True)):
        writer = EventWriter(events_path(tmp_path, rank), rank)
        writer.host = host
        writer.write(Start(pid=1, world_size=2))
        if late:
            writer.write(Error(kind="RuntimeError", message="Connection reset by peer"))
        writer.close()
    (tmp_path / "launcher.stderr").write_text(
        "ORTE was unable to reliably start one or more daemons.\nThis usually is caused by:\n"
    )
    entry = PlanEntry(
        ranks=range(2),
        argv=("x",),
        env={},
        stdout=tmp_path / "launcher.stdout",
        stderr=tmp_path / "launcher.stderr",
    )
    assert MpirunLauncher().blame(entry) == 1
    assert failed_rank(entry, 255, tmp_path, 1)[1] == (
        "rank 1 (command of ranks [0, 1]) exited with code 255 (role worker, on host dlsnode2)"
    )
    (tmp_path / "launcher.stderr").write_text("something else\n")
    assert MpirunLauncher().blame(entry) is None  # then the events decide, as before


def test_a_hosts_cpus_are_asked_of_it_by_ssh_and_an_unreachable_one_is_one_line():
    """Without cpus_per_host the plan asks each host the ranks use (``ssh HOST nproc``); a host
    ssh cannot reach without a password stops the plan in one line naming the fix."""
    cfg = RunConfig.make(backend="torch-ddp", workers=2, launcher="mpirun", hosts="127.0.0.1:2")
    with pytest.raises(UserError, match=r"cannot ask host 127.0.0.1 for its CPUs .*cpus_per_host"):
        MpirunLauncher().plan(cfg, SPEC, "/py", ports=(1,), cores=2)


def test_the_node_check_runs_one_rank_on_each_listed_host():
    cfg = RunConfig.make(backend="torch-ddp", launcher="mpirun", hosts="10.0.0.1:4,10.0.0.2:4")
    argv = list(MpirunLauncher().on_each_node(cfg, ("/py", "-m", "check")))
    assert argv[argv.index("-np") + 1] == "2" and argv[-3:] == ["/py", "-m", "check"]
    assert argv[argv.index("--host") + 1] == "10.0.0.1:1,10.0.0.2:1"
    here = RunConfig.make(backend="torch-ddp", launcher="mpirun")
    assert MpirunLauncher().on_each_node(here, ("/py",)) == ("/py",)
