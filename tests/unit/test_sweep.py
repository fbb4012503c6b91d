"""The processes that carry a run's token are found and ended (runtime/sweep.py), also those
that left every process group (a double-forked daemon), and nothing else is touched. The same
through a whole run: tests/e2e/test_own_training.py::test_a_scripts_daemon_ends_with_the_run_and_
its_output_is_bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dlscale.runtime.procfs import is_alive
from dlscale.runtime.sweep import MARK_ENV, marked, new_mark, sweep

DAEMONS = """
import os, sys, time
for n in range(3):  # three daemons, each in a session of its own, init its parent
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open(f"{sys.argv[1]}/daemon{n}", "w").write(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
"""


def _pids(folder: Path, count: int) -> list[int]:
    deadline = time.monotonic() + 30
    while len(list(folder.glob("daemon*"))) < count:
        assert time.monotonic() < deadline, "the daemons did not start"
        time.sleep(0.02)
    time.sleep(0.05)  # each file written whole
    return [int(path.read_text()) for path in sorted(folder.glob("daemon*"))]


def test_the_daemons_of_a_run_are_found_by_its_token_and_killed(tmp_path: Path):
    mark, other = new_mark(), new_mark()
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    for folder, token in (("ours", mark), ("theirs", other)):
        subprocess.run(
            [sys.executable, "-c", DAEMONS, str(tmp_path / folder)],
            env={**os.environ, MARK_ENV: token},
            check=True,
        )
    ours, theirs = _pids(tmp_path / "ours", 3), _pids(tmp_path / "theirs", 3)
    try:
        assert sorted(marked(mark)) == sorted(ours)
        assert sorted(sweep(mark)) == sorted(ours)
        deadline = time.monotonic() + 10
        while any(is_alive(pid, None) for pid in ours) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(is_alive(pid, None) for pid in ours)
        assert all(is_alive(pid, None) for pid in theirs)  # another run's token: untouched
        assert marked(mark) == []
    finally:
        sweep(other)


SLEEPER = "import time; time.sleep(600)"
DIES_SWEEPING = """
import os, signal
from dlscale.runtime import sweep

def kill_then_die(pid, sig):  # a sibling's sweep kills this one right after its first signal
    real(pid, sig)
    real(os.getpid(), signal.SIGKILL)

real, os.kill = os.kill, kill_then_die
sweep.sweep(os.environ[sweep.MARK_ENV])
"""


def test_a_sweep_cut_short_leaves_nothing_stopped(tmp_path: Path):
    """Every rank's watchdog sweeps the run's token once dlscale is gone, at about the same
    moment, and each kills the others: a sweep that stopped (SIGSTOP) what it found before
    killing it, cut short between the two, left a rank stopped for ever; two such sweeps could
    also stop each other (seen: a torchrun rank alive 60 s after kill -9 of dlscale,
    tests/cluster/test_network.py; 1 pair in 40 stopped each other sweeping at once)."""
    env = {**os.environ, MARK_ENV: new_mark()}
    rank = subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)
    try:
        sweeper = subprocess.run([sys.executable, "-c", DIES_SWEEPING], env=env, check=False)
        assert sweeper.returncode == -9  # it died right after signalling the rank
        deadline = time.monotonic() + 10
        while rank.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rank.poll() is not None  # killed, not left stopped
    finally:
        rank.kill()
        rank.wait()


SCRATCH = """
import os, sys, tempfile
from dlscale.runtime import scratch
own = scratch.enter()
assert os.environ["TMPDIR"] == str(own) == tempfile.gettempdir()
open(tempfile.mkstemp()[1], "w").write("left by a framework")
print(own, flush=True)
if sys.argv[1] == "leave":
    scratch.leave()
os._exit(0)
"""


def test_a_workers_own_temporary_directory_goes_with_it_or_with_the_run(tmp_path, monkeypatch):
    """A worker's temporary files go to a directory of its own (runtime/scratch.py), which it
    removes as it leaves; what a killed one left, the run's end removes by its token, and
    nothing of another run."""
    import tempfile

    from dlscale.runtime.scratch import remove_run_scratch

    mark, other = new_mark(), new_mark()

    def worker(how: str, token: str) -> Path:
        env = {**os.environ, MARK_ENV: token, "TMPDIR": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", SCRATCH, how], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return Path(done.stdout.strip())

    left = worker("leave", mark)
    assert left.parent == tmp_path and left.name.startswith(f"dlscale-{mark}-")
    assert not left.exists()
    killed, theirs = worker("die", mark), worker("die", other)
    assert killed.exists()  # the framework's file, beside the pid scope the worker wrote
    assert len([p for p in killed.iterdir() if p.name != ".dlscale-pid-scope"]) == 1
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run's parent looks
    assert remove_run_scratch(mark) == [killed] and not killed.exists()
    assert theirs.exists() and remove_run_scratch("../x") == []  # no token: nothing touched
    # without a token (a worker started by hand) nothing changes
    env = {k: v for k, v in os.environ.items() if k != MARK_ENV}
    code = "from dlscale.runtime import scratch; print(scratch.enter())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "None"


def test_the_next_run_removes_what_workers_killed_with_their_dlscale_left(tmp_path, monkeypatch):
    """A worker killed with its dlscale (kill -9: the parent-death signal, no watchdog ran)
    leaves its directory; the next run's start removes it, and keeps a live worker's, another
    tool's (dlscale-bench-*) and anything not named as a worker's."""
    import tempfile

    from dlscale.runtime.scratch import remove_orphaned_scratch

    mark = new_mark()
    env = {**os.environ, MARK_ENV: mark, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", SCRATCH, "die"], env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead = Path(done.stdout.strip())  # its worker is gone: an orphan
    pid = int(dead.name.split("-")[2])
    live = tmp_path / f"dlscale-{mark}-{os.getpid()}-abc"  # this process: alive
    others = [tmp_path / "dlscale-bench-abc", tmp_path / f"dlscale-{mark}-x1-abc",
              tmp_path / f"dlscale-{mark}-{pid}-noscope",  # wrote no scope: not known gone
              tmp_path / f"dlscale-{mark}-{pid}-elsewhere"]  # another pid namespace's  # fmt: skip
    for path in (live, *others):
        path.mkdir()
    (others[3] / ".dlscale-pid-scope").write_text("another-boot/pid:[1]")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the next run looks
    assert dead.exists() and remove_orphaned_scratch() == [dead]
    assert not dead.exists() and live.exists() and all(path.exists() for path in others)
