"""Real worker processes on gloo: runs, failures, hangs and what they leave behind."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.metrics.events import read_events
from dlscale.runner import run_point
from dlscale.store import RunStore
from tests.distributed.processes import alive, start_long_run, wait_for_pids

pytestmark = pytest.mark.dist


def test_two_worker_ddp_run_records_everything(tmp_path: Path):
    cfg = RunConfig.make(
        backend="torch-ddp",
        model="tiny",
        workers=2,
        steps=4,
        repeats=2,
        warmup_steps=1,
        comm_probe_steps=2,
    )
    outcome = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert outcome.state == "completed", outcome.result and outcome.result["error"]
    result = outcome.result
    run_dir = tmp_path / outcome.run_id
    assert {p.name for p in run_dir.iterdir()} >= {
        "spec.json",
        "result.json",
        "events.rank0.jsonl",
        "events.rank1.jsonl",
    }
    assert not (run_dir / "lock").exists()
    m = result["metrics"]
    assert m["windows"] == 2 and m["measured_steps"] == 8
    assert m["measured_images"] == 2 * 2 * 4 * 64  # windows x ranks x steps x batch
    assert m["throughput_img_s"] > 0 and m["throughput_ci95_img_s"] is not None
    assert 0 <= m["exposed_comm_fraction"] < 1
    assert m["step_time_nosync_p50_ms"] > 0
    assert result["environment"]["torch_version"].startswith("2.")
    assert result["environment"]["dlscale_version"]
    assert result["global_batch_size"] == 128 and result["batch_size_per_worker"] == 64
    for rank in (0, 1):
        kinds = [e["event"] for e in read_events(run_dir / f"events.rank{rank}.jsonl")]
        assert kinds[0] == "start" and kinds[-1] == "end"
    # resume: a completed point is not run again
    again = run_point(cfg, RunStore(tmp_path), force=False, command=["test"], study="t")
    assert again.state == "skipped"


def test_a_killed_worker_fails_the_run_and_stops_its_sibling(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=120)
    pids = wait_for_pids(results)
    time.sleep(1.0)
    os.kill(pids[1], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    record = json.loads(out.strip().splitlines()[-1])
    assert record["status"] == "failed"
    assert "rank 1 was killed by SIGKILL" in record["error"]
    assert "Traceback" not in err
    assert not alive(pids[0]) and not alive(pids[1])
    (result,) = RunStore(results).results()
    assert result["failure"]["failed_rank"] == 1


def test_a_hung_worker_is_stopped_by_the_run_timeout(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=15)
    pids = wait_for_pids(results)
    os.kill(pids[1], signal.SIGSTOP)  # hangs: alive, never answers its peer
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        if alive(pids[1]):
            os.kill(pids[1], signal.SIGKILL)
    assert proc.returncode == 1
    record = json.loads(out.strip().splitlines()[-1])
    assert record["status"] == "failed" and "timed out after 15 s" in record["error"]
    assert not alive(pids[0]) and not alive(pids[1])


def test_a_failed_point_does_not_stop_the_study(tmp_path: Path, cli):
    # batch 2000 is more than a digits shard holds: the workers fail with a data error;
    # the next point (batch 16) must still run.
    result = cli(
        "run",
        "--backend",
        "torch-ddp",
        "--model",
        "tiny",
        "--dataset",
        "digits",
        "--workers",
        "2",
        "--batch-size",
        "2000,16",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--json",
        "--results",
        str(tmp_path),
    )
    assert result.returncode == 1, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["status"] for r in records] == ["failed", "completed"]
    assert "too small" in records[0]["error"]
    assert "Traceback" not in result.stderr


def test_stopping_dlscale_stops_its_workers(tmp_path: Path):
    results = tmp_path
    proc = start_long_run(results, timeout_s=120)
    pids = wait_for_pids(results)
    proc.send_signal(signal.SIGTERM)  # e.g. a batch scheduler ending the job
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert not alive(pids[0]) and not alive(pids[1])
    assert not list(results.glob("*/lock"))  # the point can be rerun
