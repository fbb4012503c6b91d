"""A user's own script records no loss for dlscale (its loop is its own): no view of its
run says the loss diverged, while the script's own loss was finite all along (it prints it).
Before 2026-12-02 each of its windows counted as diverged and every table said so."""

import json
import shutil
from pathlib import Path

import pytest

from dlscale.metrics.scaling import add_scaling
from dlscale.report.cells import notes
from dlscale.store.results import RunStore

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_a_script_that_records_no_loss_is_never_said_to_diverge(tmp_path: Path, cli):
    shutil.copy(SCRIPTS / "ddp_train.py", tmp_path / "ddp_train.py")
    run = cli(
        "run", "--script", "ddp_train.py", "--workers", "1", "--warmup-steps", "1",
        "--steps", "3", "--windows", "2", "--set", "run_to_end=true", "--wide",
        "--", "--epochs", "1", "--batch-size", "16", "--samples", "128",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    results = tmp_path / "dlscale-results"
    (run_dir,) = results.glob("ddp_train.py-torch-script-own-w1-*")
    said = (run_dir / "rank0.stdout").read_text()  # "epoch 0 loss 2.3..."
    assert float(said.split("epoch 0 loss ")[1].split()[0]) < 10  # its loss was finite
    assert "ddp_train.py" in run.stdout  # the run's table was printed, notes and all
    assert "diverged" not in run.stdout + run.stderr
    metrics = json.loads((run_dir / "result.json").read_text())["metrics"]
    assert metrics["windows"] == 2 and metrics["throughput_samples_s"] > 0
    assert metrics["loss_diverged"] is None and metrics["final_train_loss"] is None
    listed = cli("ls", "runs", "--wide", "--results", str(results), cwd=tmp_path)
    assert listed.returncode == 0 and "torch-script" in listed.stdout, listed.stderr
    assert "diverged" not in listed.stdout + listed.stderr
    # the points and runs the report, the points file and load_results are made from
    stored = RunStore(results).results()
    (point,) = add_scaling(stored)
    assert point["metrics"]["runs_diverged"] is None
    for row in (point, *add_scaling(stored, per="run")):
        assert "diverged" not in (notes(row) or ""), notes(row)  # the report's notes cell
