"""Several dlscale processes on one results directory: every point runs once, and a point that
another process is running is waited for and reported as done there, not as a failure."""

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from dlscale import runner
from dlscale.config import RunConfig
from dlscale.contract.events import read_events
from dlscale.runner import run_point
from dlscale.store import RunStore
from tests.unit.test_store_damage import STUDY

pytestmark = pytest.mark.dist

TINY = {"backend": "torch-single", "model": "tiny", "steps": 2, "windows": 2, "warmup_steps": 1}


def test_a_point_finished_just_before_its_lock_is_taken_is_not_run_again(
    tmp_path: Path, monkeypatch
):
    """B finds the point not done, then (delayed) takes the lock just after A released it: B
    must see A's result, neither run the point again nor clear A's files."""
    config = RunConfig.make(**TINY)
    a_launching, b_checked, a_done = threading.Event(), threading.Event(), threading.Event()
    launches: list[str] = []
    real_launch = runner._launch

    def launch(*args: Any, **kwargs: Any) -> dict[str, Any]:
        launches.append(threading.current_thread().name)
        a_launching.set()
        assert b_checked.wait(60)  # A finishes only after B looked for a result
        return real_launch(*args, **kwargs)

    monkeypatch.setattr(runner, "_launch", launch)

    class LateStore(RunStore):
        """Takes the lock only once A has released it (the injected delay)."""

        def reserve(self, run_id: str) -> bool:
            b_checked.set()
            assert a_done.wait(120)
            return super().reserve(run_id)

    outcomes: dict[str, runner.PointOutcome] = {}

    def run(name: str, store: RunStore) -> None:
        try:
            outcomes[name] = run_point(config, store, force=False, command=["t"], study="t")
        finally:
            if name == "A":
                a_done.set()

    first = threading.Thread(target=run, args=("A", RunStore(tmp_path)), name="A")
    first.start()
    assert a_launching.wait(60)
    second = threading.Thread(target=run, args=("B", LateStore(tmp_path)), name="B")
    second.start()
    first.join(180)
    second.join(180)
    assert launches == ["A"]  # the point ran once
    assert outcomes["A"].state == "completed", outcomes["A"].result
    assert outcomes["B"].state == "skipped" and outcomes["B"].elsewhere
    stored = RunStore(tmp_path).completed(config.run_id())
    assert stored is not None and stored.finished_at == outcomes["A"].result.finished_at
    run_dir = tmp_path / config.run_id()
    assert (run_dir / "spec.json").exists() and not (run_dir / "lock").exists()
    starts = [e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "start"]
    assert len(starts) == 1


def test_two_identical_studies_at_once_both_succeed_and_run_each_point_once(tmp_path: Path):
    results = tmp_path / "res"
    command = [
        sys.executable,
        "-m",
        "dlscale",
        *STUDY,
        "--results",
        str(results),
    ]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    for proc, (_, stderr) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, stderr
        assert "Traceback" not in stderr and "busy" not in stderr
    run_dirs = sorted(p.parent for p in results.glob("*/result.json"))
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        assert RunStore(results).completed(run_dir.name) is not None
        assert not (run_dir / "lock").exists()
        starts = [e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "start"]
        assert len(starts) == 1
        # exactly one of the two processes skipped the point: the other one ran it, once
        skipped_by = [
            i
            for i, (_, stderr) in enumerate(outputs)
            if any(
                line.startswith(run_dir.name)
                and ("completed by another dlscale process" in line or "already completed" in line)
                for line in stderr.splitlines()
            )
        ]
        assert len(skipped_by) == 1, outputs
    for stdout, _ in outputs:  # each process shows both points in its table
        assert sum(line.startswith("torch-single ") for line in stdout.splitlines()) == 2
