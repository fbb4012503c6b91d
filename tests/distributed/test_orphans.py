"""No worker outlives its dlscale: whatever kills the parent (``kill -9`` included), every worker
it started dies within seconds, whichever launcher started it; and a signal that lands while the
commands are being started stops the one being started too."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlscale.contract.layout import Addresses, ProcessLayout
from dlscale.launchers import processes
from dlscale.launchers.base import LaunchPlan, PlanEntry
from dlscale.runtime import procfs, watchdog
from tests.distributed.processes import (
    alive,
    kill_all,
    parent_pid,
    start_long_run,
    toy_env,
    wait_for_pids,
    wait_gone,
)

pytestmark = pytest.mark.dist

ORPHAN_DEADLINE_S = 5.0
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def test_kill_9_of_dlscale_run_kills_its_workers(tmp_path: Path):
    proc = start_long_run(tmp_path, timeout_s=600)
    pids: dict[int, int] = {}
    try:
        pids = wait_for_pids(tmp_path, proc=proc)
        assert {parent_pid(pid) for pid in pids.values()} == {proc.pid}
        proc.kill()  # no handler runs, nothing is cleaned up by the parent (left a zombie here)
        left = wait_gone(pids.values(), ORPHAN_DEADLINE_S)
        assert not left, f"workers {left} outlived their dlscale"
    finally:
        kill_all(pids.values(), proc)


def test_kill_9_of_dlscale_run_kills_ranks_a_one_command_tool_started(tmp_path: Path):
    """The ranks are the tool's children, not dlscale's: they must notice on their own."""
    results = tmp_path / "results"
    proc = start_long_run(
        results, 600, "toy-ps", model="softmax", extra=("--launcher", "toy-all"), env=toy_env()
    )
    pids: dict[int, int] = {}
    tools: set[int] = set()
    try:
        pids = wait_for_pids(results, ranks=3, ready_rank=1, proc=proc)  # rank 0 is the server
        tools = {parent_pid(pid) for pid in pids.values()}
        assert len(tools) == 1 and proc.pid not in tools  # one tool; the ranks are grandchildren
        (tool,) = tools
        assert parent_pid(tool) == proc.pid
        proc.kill()
        left = wait_gone([*pids.values(), tool], ORPHAN_DEADLINE_S)
        assert not left, f"processes {left} outlived their dlscale (tool {tool}, ranks {pids})"
        # The ranks' watchdogs did it (the tool, the direct child, died of its parent's death).
        (log,) = results.glob("*/launcher.stderr")
        assert f"the dlscale process {proc.pid} that started it is gone" in log.read_text()
    finally:
        kill_all([*pids.values(), *tools], proc)


WATCHED = """
import subprocess, sys, time
from dlscale.runtime.watchdog import start_watchdog
assert start_watchdog() is not None
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_the_watchdog_kills_the_group_when_the_watched_process_dies():
    """Without the parent-death signal: the watched process is not the worker's parent."""
    parent = subprocess.Popen(SLEEPER)
    worker = subprocess.Popen(
        [sys.executable, "-c", WATCHED],
        env={**os.environ, **watchdog.parent_env(parent.pid)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as start_processes gives every command
    )
    grandchild = 0
    try:
        assert worker.stdout is not None
        grandchild = int(worker.stdout.readline())
        assert alive(worker.pid) and alive(grandchild)
        parent.kill()  # a zombie until reaped below: a zombie parent is a dead one
        left = wait_gone([worker.pid, grandchild], ORPHAN_DEADLINE_S)
        assert not left, f"{left} outlived the watched process"
        assert worker.wait(timeout=5) == -signal.SIGKILL
    finally:
        kill_all([grandchild] if grandchild else [], parent, worker)


def test_a_reused_pid_is_not_the_parent():
    start = procfs.process_start(os.getpid())
    assert start is not None and start > 0
    assert watchdog.parent_alive(os.getpid(), start)
    assert watchdog.parent_alive(os.getpid(), None)  # no start time known: the pid decides
    assert not watchdog.parent_alive(os.getpid(), start + 1)  # same pid, other process
    gone = subprocess.Popen(SLEEPER)
    gone.kill()
    os.waitid(os.P_PID, gone.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
    assert procfs.process_state(gone.pid) == "Z"
    assert not watchdog.parent_alive(gone.pid, None)
    gone.wait()
    assert not watchdog.parent_alive(gone.pid, None)


def test_a_worker_started_by_hand_or_elsewhere_has_no_watchdog():
    assert watchdog.start_watchdog({}) is None
    assert watchdog.start_watchdog({watchdog.PARENT_PID_ENV: ""}) is None
    # A rank a tool started on another host (or in another pid namespace): there the parent's
    # pid means nothing, and the watchdog would kill it at once.
    elsewhere = {**watchdog.parent_env(), watchdog.PARENT_SCOPE_ENV: "another-boot/pid:[1]"}
    assert watchdog.start_watchdog(elsewhere) is None


def test_start_processes_tells_every_command_its_parent(tmp_path: Path):
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in os.environ}))"
    running = processes.start_processes(_plan(tmp_path, [sys.executable, "-c", code]))
    try:
        assert running.procs[0].wait(timeout=30) == 0
    finally:
        running.stop()
    env = json.loads((tmp_path / "out0").read_text())
    assert env[watchdog.PARENT_PID_ENV] == str(os.getpid())
    assert env[watchdog.PARENT_START_ENV] == str(procfs.process_start(os.getpid()))
    assert env[watchdog.PARENT_SCOPE_ENV] == watchdog.pid_scope()


@pytest.mark.parametrize("other_thread", [False, True], ids=["one-thread", "another-thread-alive"])
def test_a_signal_while_spawning_stops_the_child_being_spawned(
    tmp_path: Path, monkeypatch, other_thread: bool
):
    """SIGTERM lands right after a child is forked, before it is recorded: it must be stopped
    with the others (and must not have inherited SIGTERM blocked). With another thread alive
    (a leftover of an earlier test; torch's OpenMP pool in a real parent) the kernel hands the
    signal to that thread, so holding it in the spawning thread alone would not defer it."""
    bystander_done = threading.Event()
    if other_thread:
        threading.Thread(target=bystander_done.wait, daemon=True).start()
    real_popen = subprocess.Popen
    spawned: list[subprocess.Popen] = []

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        spawned.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)
        if other_thread:  # the bystander takes it: wait until it has, not for a set time
            deadline = time.monotonic() + 10.0
            while signal.SIGTERM in signal.sigpending() and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.01)  # and the main thread reaches the Python handler in here
        return proc

    def interrupt(signum, frame):
        raise KeyboardInterrupt  # what the dlscale command line does with SIGTERM

    monkeypatch.setattr(processes.subprocess, "Popen", popen_then_signal)
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            processes.start_processes(_plan(tmp_path, SLEEPER, entries=2))
    finally:
        signal.signal(signal.SIGTERM, previous)
        bystander_done.set()
        monkeypatch.undo()
        stray = [proc.pid for proc in spawned if proc.poll() is None]
        kill_all(stray, *spawned)
        assert not stray, "a child started as the signal came is still running"
    assert len(spawned) == 1  # the next command was not started
    # Stopped by SIGTERM: the signal mask held while spawning was not left on the child.
    assert spawned[0].returncode == -signal.SIGTERM


def _plan(tmp_path: Path, argv: list[str], entries: int = 1) -> LaunchPlan:
    return LaunchPlan(
        entries=tuple(
            PlanEntry(
                ranks=range(i, i + 1),
                argv=tuple(argv),
                env={},
                stdout=tmp_path / f"out{i}",
                stderr=tmp_path / f"err{i}",
            )
            for i in range(entries)
        ),
        layout=ProcessLayout(processes=()),
        addresses=Addresses(hosts=(), ports=()),
        threads_per_worker=1,
    )
