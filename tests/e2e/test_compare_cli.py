"""`dlscale compare A B` as a user runs it, on results directories written through the store."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.store import RunStore

pytestmark = pytest.mark.e2e

WORKERS = (1, 2)
WINDOWS = 8


def write_results(root: Path, *, slowdown: float = 1.0, seed: int = 0) -> Path:
    """One completed tiny run per worker count, 8 windows each, throughput scaled by slowdown."""
    rng = np.random.default_rng(seed)
    store = RunStore(root)
    for workers in WORKERS:
        config = RunConfig.make(model="tiny", backend="torch-ddp", workers=workers, batch_size=32)
        windows = list(slowdown * 500.0 * workers * (1 + 0.01 * rng.standard_normal(WINDOWS)))
        store.write_result(
            config.run_id(),
            Result(
                run_id=config.run_id(),
                status="completed",
                config=config.to_dict(),
                batch_size_per_worker=config.batch_per_worker,
                global_batch_size=config.global_batch,
                metrics={
                    "throughput_samples_s": float(np.mean(windows)),
                    "throughput_windows_samples_s": windows,
                    "time_to_accuracy_s": None,
                },
                finished_at=time.time(),
            ),
        )
    return root


def compare_cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlscale", "compare", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_twenty_percent_slowdown_fails_the_gate(tmp_path: Path):
    a = write_results(tmp_path / "a", seed=1)
    b = write_results(tmp_path / "b", slowdown=0.8, seed=2)
    run = compare_cli(a, b, "--fail-on-regression", "10")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REGRESSION" in run.stdout
    assert "2 point(s) compared" in run.stdout
    assert "Traceback" not in run.stderr


def test_identical_copy_passes(tmp_path: Path):
    a = write_results(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    run = compare_cli(a, b, "--fail-on-regression", "10")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "REGRESSION" not in run.stdout
    assert "possible regression" not in run.stdout
    assert "0 point(s) regressed" in run.stdout


def test_missing_directory_is_one_line_exit_2(tmp_path: Path):
    a = write_results(tmp_path / "a")
    run = compare_cli(a, tmp_path / "nope")
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlscale: error:"), run.stderr
    assert "nope" in lines[0]
    assert "Traceback" not in run.stderr


def test_nothing_matched_names_the_differing_key(tmp_path: Path):
    a = write_results(tmp_path / "a")
    store = RunStore(tmp_path / "b")
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=1, batch_size=64)
    store.write_result(
        config.run_id(),
        Result(
            run_id=config.run_id(),
            status="completed",
            config=config.to_dict(),
            metrics={"throughput_samples_s": 100.0, "throughput_windows_samples_s": [100.0, 101.0]},
            finished_at=time.time(),
        ),
    )
    run = compare_cli(a, tmp_path / "b")
    assert run.returncode == 2
    assert run.stderr.startswith("dlscale: error:") and "batch_size" in run.stderr


def test_json_output_parses(tmp_path: Path):
    a = write_results(tmp_path / "a", seed=1)
    b = write_results(tmp_path / "b", slowdown=0.8, seed=2)
    run = compare_cli(a, b, "--json")
    assert run.returncode == 0, run.stderr  # no --fail-on-regression: report only
    data = json.loads(run.stdout)
    assert data["regressions"] == 2
    assert data["threshold"] == pytest.approx(0.05)
    point = data["matched"][0]
    assert point["throughput_verdict"] == "regression" and point["regressed"] is True
    assert point["throughput"]["ratio"] == pytest.approx(0.8, rel=0.02)
    assert point["throughput"]["n_a"] == point["throughput"]["n_b"] == WINDOWS
    assert data["only_in_a"] == data["only_in_b"] == data["failed"] == []
