"""A TensorFlow custom training loop, measured as a Keras ``fit`` or a torch loop is: Horovod's
own synthetic benchmark written small (tests/scripts/tf_hvd_benchmark.py: a ``tf.function``
step of ``GradientTape``, ``hvd.DistributedGradientTape`` and ``apply_gradients``, its own
timing loop) at 1 and 2 workers, and a plain TensorFlow loop (tf_custom_loop.py) at 1, both
unmodified; their steps are counted from the optimizer's ``iterations``."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from dlscale.contract.events import read_events

pytestmark = [pytest.mark.e2e, pytest.mark.dist]  # starts workers: not in make check
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SHORT = ["--warmup-steps", "1", "--steps", "3", "--windows", "2", "--json"]
"""7 steps measured: 1 untimed, then 2 windows of 3; the run then stops the script."""


def _points(stdout: str) -> dict[int, dict]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {row["workers"]: row for row in rows if row["kind"] == "point"}


def _windows(run_dir: Path, rank: int) -> list[tuple[int, int]]:
    events = read_events(run_dir / f"events.rank{rank}.jsonl")
    return [(e["steps"], e["samples"]) for e in events if e["event"] == "window"]


def _stopped_at_the_seventh_step(out: str, first: str, second: str) -> None:
    """The script prints its optimizer's ``iterations`` after its 4th step (``first``) and
    would again after its 7th (``second``), had dlscale not stopped it in that step: with the
    two windows of 3 written, dlscale counted 7 steps where the script applied 7, no more
    (it would have stopped it before the 4th's print) and no fewer (the script went on)."""
    assert first in out, out
    assert second not in out, out


def test_horovods_tensorflow_benchmark_is_measured(tmp_path: Path, cli):
    assert importlib.util.find_spec("horovod"), "Horovod is not installed here: run make horovod"
    shutil.copy(SCRIPTS / "tf_hvd_benchmark.py", tmp_path)
    run = cli(
        "run", "--script", "tf_hvd_benchmark.py", "--workers", "1,2", *SHORT,
        "--", "--no-cuda", "--batch-size", "8", "--num-warmup-batches", "0",
        "--num-batches-per-iter", "3", "--num-iters", "3",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "TF_USE_LEGACY_KERAS=1" in run.stderr  # said: Horovod's TensorFlow API on Keras 2
    points = _points(run.stdout)
    assert {w: (p["backend"], p["status"]) for w, p in points.items()} == {
        1: ("horovod-script", "completed"),
        2: ("horovod-script", "completed"),
    }
    assert points[1]["throughput_samples_s"] > 0 and points[2]["speedup"] > 0
    for workers in (1, 2):
        (run_dir,) = (tmp_path / "dlscale-results").glob(f"tf_hvd_benchmark.py-*-w{workers}-*")
        for rank in range(workers):
            assert _windows(run_dir, rank) == [(3, 24), (3, 24)]
        out = (run_dir / "rank0.stdout").read_text()
        _stopped_at_the_seventh_step(out, "Iter #0: ", "Iter #1: ")
        assert "4 steps applied" in out


def test_a_plain_tensorflow_loop_is_measured(tmp_path: Path, cli):
    shutil.copy(SCRIPTS / "tf_custom_loop.py", tmp_path)
    run = cli(
        "run", "--script", "tf_custom_loop.py", "--workers", "1", *SHORT,
        "--", "--epochs", "2", "--batch-size", "16", "--samples", "64",
        cwd=tmp_path, timeout=200,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (point,) = _points(run.stdout).values()
    assert point["backend"] == "tf-script" and point["status"] == "completed"
    assert point["throughput_samples_s"] > 0
    (run_dir,) = (tmp_path / "dlscale-results").glob("tf_custom_loop.py-*")
    assert _windows(run_dir, 0) == [(3, 48), (3, 48)]
    out = (run_dir / "rank0.stdout").read_text()
    _stopped_at_the_seventh_step(out, "epoch 0 loss", "epoch 1 loss")
    assert "4 steps applied" in out
