"""A restartable run (torchrun's ``max_restarts``) whose rank 1 is killed with SIGKILL after it
recorded a window: what test_torchrun.py and test_jax.py resume from checkpoints with."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlscale.contract.events import read_events
from dlscale.contract.result import Result
from dlscale.store import RunStore
from tests.distributed.processes import kill_all

RESTARTABLE = ("--model", "tiny", "--dataset", "digits", "--steps", "40", "--windows", "4")
RESTARTABLE += ("--warmup-steps", "2", "--repeats", "1", "--set", "machine_reference=false")
RESTARTABLE += ("--workers", "2", "--launcher", "torchrun", "--json")


def kill_rank1_after_a_window(proc: subprocess.Popen, results: Path, kills: int) -> list[int]:
    """kill -9 rank 1's process ``kills`` times, each after that process recorded a window."""
    victims: list[int] = []
    deadline = time.monotonic() + 240
    while len(victims) < kills and time.monotonic() < deadline and proc.poll() is None:
        events = [e for p in results.glob("*/events.rank1.jsonl") for e in read_events(p)]
        starts = [i for i, e in enumerate(events) if e["event"] == "start"]
        if starts and len(starts) > len(victims):  # the latest process, once it did a window
            latest = events[starts[-1] :]
            if any(e["event"] == "window" for e in latest):
                victims.append(latest[0]["pid"])
                os.kill(victims[-1], signal.SIGKILL)
        time.sleep(0.05)
    assert len(victims) == kills, f"rank 1 recorded no window in attempt {len(victims) + 1}"
    return victims


def elastic_run(
    results: Path, kills: int, flags: tuple[str, ...], *settings: str
) -> tuple[int, str, Result, list[int]]:
    """A restartable run (:data:`RESTARTABLE` and ``flags``) whose rank 1 is killed ``kills``
    times: (dlscale's exit code, its stderr, the stored result, the killed pids)."""
    cmd = [sys.executable, "-m", "dlscale", "run", *RESTARTABLE, *flags, "--results", str(results)]
    for setting in settings:
        cmd += ["--set", setting]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victims: list[int] = []
    try:
        victims = kill_rank1_after_a_window(proc, results, kills)
        _, err = proc.communicate(timeout=300)
    finally:
        kill_all(victims, proc)
    (stored,) = RunStore(results).results()
    return proc.returncode, err, stored, victims
