"""The emulated hosts' own life: made and removed whole, refused in one line when asked for the
impossible, and a test bed whose owner was killed with -9 removed by the next start. Needs root."""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from dlscale.launchers import testbed
from tests.cluster.test_hosts import HOSTS, _hosts, _nothing_left, _ssh
from tests.distributed.processes import alive

pytestmark = pytest.mark.dist


@pytest.mark.parametrize(
    "args, said",
    [
        (("--hosts", "0"), "1 to 64 emulated hosts"),
        (("--prefix", "a;reboot"), "host names are a lower-case letter"),
        (("--link", "fast"), "cannot read the rate"),
        (("--slots", "0"), "1 to 256 slots"),
        (("--cpus", "-1"), "--cpus: '-1' is not a whole number from 0"),
        (("--cpus", "100000"), "CPUs a host, not 100000"),
    ],
)
def test_an_impossible_test_bed_is_refused_in_one_line(tmp_path, args, said):
    done = _hosts("start", str(tmp_path), *args)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert not _nothing_left()


def test_a_test_bed_whose_owner_was_killed_goes_with_the_next_start(tmp_path: Path):
    owner = subprocess.Popen(["sleep", "600"])
    try:
        first = _hosts("start", str(tmp_path / "a"), "--hosts", "1", "--owner", str(owner.pid))
        assert first.returncode == 0, first.stderr
        sshd = int((tmp_path / "a" / "sshd-dlsnode1.pid").read_text())
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        second = _hosts("start", str(tmp_path / "b"), "--hosts", "2", "--owner", str(os.getpid()))
        assert second.returncode == 0, second.stderr
        assert testbed.Testbed.read(testbed.RECORD).dir == str(tmp_path / "b")
        assert not alive(sshd)  # the first test bed's sshd was killed
    finally:
        owner.kill()
        stopped = _hosts("stop")
        assert stopped.returncode == 0, stopped.stderr
    assert not _nothing_left()
    gone = subprocess.run(["ssh", "dlsnode1", "true"], capture_output=True, text=True, timeout=30)
    assert gone.returncode != 0


@pytest.mark.parametrize("damaged", ["[1, 2]", '{"hosts": ["dlsnode1"]}', "{", "\x00" * 8])
def test_a_damaged_record_is_one_line_and_stop_removes_it(damaged):
    """``/run/dlscale-hosts.json`` as a list, without a key, cut short or binary: ``show`` said
    it with a traceback (AttributeError, KeyError) before; now one line naming the fix, and
    ``stop`` removes the record and whatever hosts it left."""
    assert not testbed.RECORD.exists()  # no test bed runs beside this test
    testbed.RECORD.write_text(damaged)
    try:
        shown = _hosts("show")
        assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
        assert shown.stderr.startswith("dlscale: error: the emulated hosts' record cannot be read")
        assert "dlscale hosts stop removes it" in shown.stderr
        stopped = _hosts("stop")
        assert stopped.returncode == 0, stopped.stderr
        assert "removed a damaged record of emulated hosts" in stopped.stdout
    finally:
        testbed.RECORD.unlink(missing_ok=True)
    assert not _nothing_left()


def test_each_host_runs_on_its_own_share_of_the_cpus(tmp_path: Path):
    """``--cpus 1``: each host's processes (anything started over ssh) on a CPU of their own, as
    a node's are, so a rank pinned to its host's first CPU (JAX's) is not pinned beside every
    other host's; ``nproc`` on a host says its share."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 CPUs or more, one a host")
    started = _hosts("start", str(tmp_path), "--hosts", "2", "--cpus", "1")
    assert started.returncode == 0, started.stderr
    try:
        allowed = [_ssh(host, "grep Cpus_allowed_list /proc/self/status") for host in HOSTS]
        assert [_ssh(host, "nproc") for host in HOSTS] == ["1", "1"]
        first, second = (line.split()[-1] for line in allowed)
        assert first != second  # a CPU each, not the same one
        shown = _hosts("show")
        assert f"dlsnode1 10.98.0.101 slots=2 cpus={first}" in shown.stdout
    finally:
        stopped = _hosts("stop")
        assert stopped.returncode == 0, stopped.stderr
    assert not _nothing_left()


@pytest.mark.parametrize("name", ["a b", "a\nHost *\n ProxyCommand x", "a'b", "a#b"])
def test_a_directory_that_would_change_sshs_settings_is_refused(tmp_path, name):
    """DIR is written into sshd_config, ssh_config.d and /etc/hosts: a space, a quote, a '#' or
    a line break there would add settings or names of the caller's choosing."""
    done = _hosts("start", str(tmp_path / name), "--hosts", "1")
    assert done.returncode == 2 and "letters, digits and '._+-/' only" in done.stderr
    assert not (tmp_path / name).exists() and not _nothing_left()


def test_a_planted_link_in_the_directory_is_refused_and_its_target_kept(tmp_path):
    """As root, writing DIR/hostfile through a link planted there would empty any file."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    bed = tmp_path / "bed"
    bed.mkdir()
    (bed / "hostfile").symlink_to(victim)
    done = _hosts("start", str(bed), "--hosts", "1")
    assert done.returncode == 2 and "is a symbolic link" in done.stderr, done.stderr
    assert victim.read_text() == "precious\n"
    assert not _nothing_left()
