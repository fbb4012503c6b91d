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
