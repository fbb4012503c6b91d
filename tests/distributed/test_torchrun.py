"""The real torchrun (torch.distributed.run) starting the ranks: one node with the c10d
rendezvous, two nodes' agents side by side, the same numbers as the local launcher, other
engines under it, and a killed rank."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlscale.metrics.events import read_events
from dlscale.store import RunStore
from tests.distributed.processes import kill_all, kill_rank_and_check_the_run_fails

pytestmark = pytest.mark.dist

TINY = ("--model", "tiny", "--dataset", "digits", "--steps", "4", "--windows", "1")
TINY += ("--warmup-steps", "1", "--repeats", "1", "--set", "machine_reference=false")


def _point(cli, results: Path, *flags: str) -> dict:
    run = cli("run", *TINY, "--workers", "2", "--json", "--results", str(results), *flags)
    assert run.returncode == 0, run.stderr
    (point,) = [r for r in map(json.loads, run.stdout.splitlines()) if r["kind"] == "point"]
    assert point["status"] == "completed", point["error"]
    return point


@pytest.mark.parametrize("nnodes", [1, 2])
def test_torchrun_trains_exactly_as_the_local_launcher(tmp_path: Path, cli, nnodes):
    """DDP on 2 ranks sums 2 gradients (exact in either order): the same losses to the bit."""
    local = _point(cli, tmp_path / "local", "--backend", "torch-ddp")
    under = _point(
        cli,
        tmp_path / "torchrun",
        "--backend",
        "torch-ddp",
        "--launcher",
        "torchrun",
        "--set",
        f"nnodes={nnodes}",
    )
    assert under["final_train_loss"] == local["final_train_loss"]
    (result,) = RunStore(tmp_path / "torchrun").results()
    assert result["config"]["launcher"] == "torchrun"
    run_dir = tmp_path / "torchrun" / result["run_id"]
    agents = sorted(p.name for p in run_dir.glob("torchrun*.stderr"))
    assert agents == [f"torchrun{n}.stderr" for n in range(nnodes)]
    # torchrun's own store served the rendezvous: the ranks saw its variables
    starts = [json.loads(line) for line in (run_dir / "events.rank1.jsonl").open()][:1]
    assert starts[0]["world_size"] == 2 and starts[0]["local_rank"] == (1 if nnodes == 1 else 0)


def test_other_engines_run_under_torchrun_on_their_own_rendezvous(tmp_path: Path, cli):
    """tf-ps (chief, workers, ps task) takes its rank from torchrun and TF_CONFIG from the
    plan; its ps task, which never exits, is stopped once training ended."""
    point = _point(
        cli,
        tmp_path,
        "--backend",
        "tf-ps",
        "--launcher",
        "torchrun",
        "--set",
        "nnodes=2",
        "--set",
        "resource_guard=false",
    )
    assert point["eval_accuracy"] is not None


def test_an_uneven_split_between_nodes_is_one_line(tmp_path: Path, cli):
    run = cli(
        "run", *TINY, "--workers", "3", "--backend", "torch-ddp", "--launcher", "torchrun",
        "--set", "nnodes=2", "--results", str(tmp_path),
    )  # fmt: skip
    assert run.returncode == 2
    assert "cannot split the run's 3 processes" in run.stderr and "Traceback" not in run.stderr


def test_a_killed_rank_fails_the_run_named_by_torchrun(tmp_path: Path):
    kill_rank_and_check_the_run_fails(
        tmp_path,
        "torch-ddp",
        ranks=2,
        rank=1,
        role="worker",
        extra=("--launcher", "torchrun"),
        reason="rank 1 (command of ranks [0, 1]) exited with code 1",
    )


ELASTIC = ("--model", "tiny", "--dataset", "digits", "--steps", "40", "--windows", "4")
ELASTIC += ("--warmup-steps", "2", "--repeats", "1", "--set", "machine_reference=false")
ELASTIC += ("--backend", "torch-ddp", "--workers", "2", "--launcher", "torchrun", "--json")


def test_a_killed_rank_is_restarted_and_the_run_resumes_from_its_checkpoint(tmp_path: Path, cli):
    """torchrun restarts both ranks after a kill -9 of one; they resume after the last saved
    window and finish with the uninterrupted run's losses to the bit (the data skipped, the
    model and momentum restored); the result counts the restart and the seconds it cost."""
    results = tmp_path / "elastic"
    cmd = [sys.executable, "-m", "dlscale", "run", *ELASTIC, "--results", str(results)]
    proc = subprocess.Popen(
        [*cmd, "--set", "max_restarts=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    victim = None
    try:
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            events = [e for p in results.glob("*/events.rank1.jsonl") for e in read_events(p)]
            if any(e["event"] == "window" for e in events):  # mid-run: window 0 is done
                victim = next(e["pid"] for e in events if e["event"] == "start")
                os.kill(victim, signal.SIGKILL)
            time.sleep(0.05)
        assert victim is not None, "rank 1 never recorded a window"
        _, err = proc.communicate(timeout=300)
    finally:
        kill_all([victim] if victim else [], proc)
    assert proc.returncode == 0, err
    (stored,) = [json.loads(p.read_text()) for p in results.glob("*/result.json")]
    assert stored["status"] == "completed", stored["error"]
    metrics = stored["metrics"]
    assert metrics["restarts"] == 1 and metrics["restart_lost_s"] > 0
    assert metrics["windows"] == 4 and metrics["windows_recorded"] == 4
    run_dir = results / stored["run_id"]
    starts = [e for e in read_events(run_dir / "events.rank1.jsonl") if e["event"] == "start"]
    assert len(starts) == 2 and starts[0]["pid"] == victim
    (resume,) = [e for e in read_events(run_dir / "events.rank0.jsonl") if e["event"] == "resume"]
    # 0: killed before the first save (then it starts again); else after a saved window
    assert resume["restart"] == 1 and 0 <= resume["windows_done"] <= 3
    assert not (run_dir / "checkpoint").exists()  # removed once the run completed
    assert cli("run", *ELASTIC, "--results", str(tmp_path / "whole")).returncode == 0
    (whole,) = [json.loads(p.read_text())["metrics"] for p in tmp_path.glob("whole/*/result.json")]
    assert metrics["train_loss_by_window"] == whole["train_loss_by_window"]
    assert metrics["final_train_loss"] == whole["final_train_loss"]
