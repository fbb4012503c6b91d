"""Independent runs of real worker processes: interleaved rounds, the stopping rule, the noise
guard's counters and exposed communication at one worker."""

import json
from pathlib import Path

import pytest

import dlscale
from dlscale.config import RunConfig
from dlscale.metrics.stats import ratio_ci95
from dlscale.runner import run_point
from dlscale.store import RunStore

pytestmark = pytest.mark.dist

TINY = ["--model", "tiny", "--steps", "2", "--windows", "2", "--warmup-steps", "1"]


def test_repeats_are_independent_runs_in_abba_order_with_a_stopping_rule(tmp_path: Path, cli):
    results = tmp_path / "res"
    run = cli(
        "run",
        "--backend",
        "torch-single,torch-ddp",
        "--workers",
        "1",
        *TINY,
        "--repeats",
        "1",
        "--target-ci",
        "0.001",  # unreachable: the rule adds a round until max_repeats
        "--max-repeats",
        "2",
        "--set",
        "machine_reference=false",
        "--json",
        "--results",
        str(results),
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    runs = [r for r in lines if r["kind"] == "run"]
    # round 0 in study order, round 1 (the stopping rule's) reversed: the baseline is not
    # always first (the order of later rounds: tests/unit/test_repeats.py)
    assert [(r["backend"], r["repeat_id"]) for r in runs] == [
        ("torch-single", 0),
        ("torch-ddp", 0),
        ("torch-ddp", 1),
        ("torch-single", 1),
    ]
    assert len({r["run_id"] for r in runs}) == 4  # each run its own directory and processes
    points = [r for r in lines if r["kind"] == "point"]
    # 2 runs a point; on a busy machine the noise guard may leave out runs loaded in every
    # window (docs/metrics.md), which the point names
    assert [(p["backend"], p["runs"] + len(p["runs_left_out"])) for p in points] == [
        ("torch-single", 2),
        ("torch-ddp", 2),
    ]
    for point in points:
        assert point["interval"] == ("runs" if point["runs"] >= 2 else "windows")
        assert len(point["throughput_runs_samples_s"]) == point["runs"]
    single, ddp = points
    mean = sum(single["throughput_runs_samples_s"]) / single["runs"]
    assert single["throughput_samples_s"] == pytest.approx(mean)  # one run: its own
    assert ddp["baseline_run_ids"] == single["run_ids"]
    # recomputed from the runs' throughputs (Fieller over runs; None when the baseline's runs
    # scatter too much for a bounded interval)
    if single["runs"] >= 2 and ddp["runs"] >= 2:
        _, interval = ratio_ci95(
            ddp["throughput_runs_samples_s"], single["throughput_runs_samples_s"]
        )
        assert ddp["speedup_ci95"] == (None if interval is None else pytest.approx(list(interval)))
    assert ddp["speedup"] == pytest.approx(
        ddp["throughput_samples_s"] / single["throughput_samples_s"]
    )
    assert "after 2 runs (max_repeats)" in run.stderr.splitlines()[-1]
    # the public loader gives the same points, and the runs behind them
    frame = dlscale.load_results(results, per="point").set_index("backend")
    assert list(frame.loc["torch-single", "run_ids"]) == single["run_ids"]
    assert frame.loc["torch-ddp", "speedup"] == pytest.approx(ddp["speedup"])
    assert len(dlscale.load_results(results)) == 4
    stored = json.loads((results / runs[0]["run_id"] / "result.json").read_text())
    metrics = stored["metrics"]
    assert metrics["page_faults_per_step"] is not None and metrics["page_faults_per_step"] >= 0
    assert metrics["outside_load_max"] is not None  # the machine's counters were read
    assert stored["environment"]["worker"]["synchronizes"] is False


@pytest.mark.alone  # its pairs of steps are timed: other tests beside it would be its noise
def test_a_one_worker_run_reads_exposed_communication_within_noise_of_zero(tmp_path: Path):
    """DDP at one worker synchronizes with nobody: the probe's pairs must not show a cost.

    The check is statistical: a 95% interval misses zero in one run of twenty even when the
    estimate is unbiased, more often on a loaded CI machine. Three independent runs are
    allowed; a biased probe (the old one, after evaluation, read 0 to 8% every time) fails all
    three, an unbiased one fails all three about once in 8,000.
    """
    cfg = RunConfig.make(
        backend="torch-ddp",
        model="resnet20",
        batch_size=16,
        workers=1,
        steps=1,
        windows=1,
        warmup_steps=1,
        comm_probe_steps=8,
    )
    seen = []
    for attempt in range(3):
        store = RunStore(tmp_path / str(attempt))
        outcome = run_point(cfg, store, force=False, command=["test"], study="t")
        assert outcome.state == "completed", outcome.result and outcome.result.error
        metrics = outcome.result.metrics
        fraction, half = metrics["exposed_comm_fraction"], metrics["exposed_comm_ci95"]
        assert half is not None and half > 0, (fraction, half)
        seen.append((fraction, half))
        if abs(fraction) <= max(half, 0.05):
            return
    pytest.fail(f"exposed communication at one worker away from zero in 3 runs: {seen}")
