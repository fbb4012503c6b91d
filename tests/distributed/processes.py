"""Starting a long dlscale run and finding its worker processes, for the failure tests."""

import os
import subprocess
import sys
import time
from pathlib import Path

from dlscale.metrics.events import read_events


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def start_long_run(
    results: Path,
    timeout_s: float,
    backend: str = "torch-ddp",
    *,
    model: str = "tiny",
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """A 2-worker run of a million steps: it ends only by failure, timeout or signal."""
    cmd = [
        sys.executable,
        "-m",
        "dlscale",
        "run",
        "--backend",
        backend,
        "--model",
        model,
        "--workers",
        "2",
        "--steps",
        "1000000",
        "--repeats",
        "1",
        "--json",
        "--results",
        str(results),
        "--set",
        f"timeout_s={timeout_s}",
        *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_pids(results: Path, ranks: int = 2, deadline_s: float = 90) -> dict[int, int]:
    """Rank -> pid once every rank has started and rank 0 has set up its model."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        pids = {}
        for path in results.glob("*/events.rank*.jsonl"):
            events = read_events(path)
            if events and events[0]["event"] == "start":
                pids[events[0]["rank"]] = events[0]["pid"]
        env_seen = any(
            e["event"] == "environment"
            for p in results.glob("*/events.rank0.jsonl")
            for e in read_events(p)
        )
        if len(pids) == ranks and env_seen:
            return pids
        time.sleep(0.2)
    raise AssertionError("ranks did not start")
