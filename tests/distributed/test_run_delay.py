"""The run delay (issue 45): a worker pinned to a core another process keeps busy waits for
it, which the machine's load does not show (the other core may be idle); the run says so in
its result and its notes, and the finding does not state a ratio over such a point."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.dist


def test_a_worker_pinned_beside_a_busy_loop_says_it_waited(tmp_path: Path):
    busy = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
    try:
        run = subprocess.run(
            ["taskset", "-c", "0", sys.executable, "-m", "dlscale", "run", "--backend",
             "torch-single", "--model", "tiny", "--workers", "1", "--steps", "30", "--windows",
             "2", "--warmup-steps", "2", "--repeats", "1", "--set", "machine_reference=false",
             "--results", str(tmp_path)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        busy.kill()
        busy.wait()
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.glob("*/result.json")
    metrics = json.loads(path.read_text())["metrics"]
    assert metrics["waited"] is True and metrics["run_delay_max"] > 0.2, metrics
    events = [json.loads(line) for line in (path.parent / "events.rank0.jsonl").open()]
    windows = [e for e in events if e["event"] == "window" and e.get("kind") == "measure"]
    assert all(w["run_delay_s"] > 0 and w["involuntary_switches"] > 0 for w in windows)
    assert f"waited {metrics['run_delay_max'] * 100:.0f}%" in run.stdout  # its note
