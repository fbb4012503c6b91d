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
