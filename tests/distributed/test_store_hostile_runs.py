"""A real `dlscale run` whose results directory is removed while its point runs: one line saying
so, a non-zero exit, no traceback, the directory not made again, no process left behind."""

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.dist

LONG = (
    "run", "--repeats", "1", "--set", "machine_reference=false", "--backend", "torch-single",
    "--model", "tiny", "--steps", "400", "--windows", "4", "--warmup-steps", "1",
)  # fmt: skip


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line mentions ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if text.encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_results_directory_removed_while_a_point_runs(tmp_path: Path):
    results = tmp_path / "res"
    run = subprocess.Popen(
        [sys.executable, "-m", "dlscale", *LONG, "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(results.glob("*/events.rank0.jsonl")):  # the worker has started
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        shutil.rmtree(results)
        _, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 2, stderr
    assert "Traceback" not in stderr
    (line,) = [line for line in stderr.splitlines() if "error" in line]
    assert line.startswith(f"dlscale: error: the results directory {results} was removed")
    assert "not recorded" in line
    assert not results.exists()  # not made again
    assert _processes_naming(str(results)) == []  # every worker of the run is gone
