"""A loss that was never recorded is not measured, never diverged (docs/metrics.md,
``loss_diverged``): in the aggregation, the points, the notes of every table, and on reading
a result stored before, when each window without a loss read as a diverged one."""

import copy
import json
from pathlib import Path

from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.points import combine
from dlscale.report.cells import notes
from dlscale.report.figures import breakdown
from dlscale.store.results import RunStore
from tests.unit.test_metrics import typed, window


def _script_window(rank: int, index: int) -> dict:
    """A window of a user's script as ``runtime/script_steps.py`` writes it: no loss."""
    record = window(rank, index, 1.0, [10.0, 10.0])
    record.update(loss_sum=None, loss_count=0, data_ms=None)
    return record


def _nan_window(rank: int, index: int) -> dict:
    """A window whose loss was NaN, as ``runtime/schedule.py`` writes it."""
    record = window(rank, index, 1.0, [10.0, 10.0])
    record.update(loss_sum=None, loss_nonfinite=True, step_losses=[None, None])
    return record


def test_no_loss_in_any_window_is_not_measured_not_diverged():
    m = aggregate(
        typed({r: [_script_window(r, 0), _script_window(r, 1)] for r in (0, 1)}),
        target_accuracy=None,
    )
    assert m["windows"] == 2 and m["throughput_samples_s"] == 40.0  # the timing holds
    assert m["loss_diverged"] is None
    assert m["final_train_loss"] is None and m["train_loss_by_window"] == []


def test_a_nan_loss_is_diverged_and_a_finite_one_is_not():
    ranks = {0: [window(0, 0, 1.0, [10.0]), _nan_window(0, 1)]}
    m = aggregate(typed(ranks), target_accuracy=None)
    assert m["loss_diverged"] is True and m["final_train_loss"] == 2.0
    # one rank's NaN makes the window's (the global batch's) loss diverged
    both = {0: [_nan_window(0, 0)], 1: [window(1, 0, 1.0, [10.0, 10.0])]}
    assert aggregate(typed(both), target_accuracy=None)["loss_diverged"] is True
    finite = aggregate(typed({0: [window(0, 0, 1.0, [10.0])]}), target_accuracy=None)
    assert finite["loss_diverged"] is False and finite["final_train_loss"] == 2.0
    # records from before ``loss_nonfinite``: a None sum over counted steps is diverged
    old = window(0, 0, 1.0, [10.0])
    old["loss_sum"] = None
    assert aggregate(typed({0: [old]}), target_accuracy=None)["loss_diverged"] is True


def _run(run_id: str, diverged: bool | None) -> dict:
    return {
        "run_id": run_id,
        "status": "completed",
        "config": {"backend": "torch-script", "workers": 1, "repeat_id": int(run_id[-1])},
        "metrics": {"throughput_samples_s": 10.0, "loss_diverged": diverged},
    }


def test_a_point_and_a_run_say_diverged_only_where_a_loss_diverged():
    (point,) = combine([_run("a0", None), _run("a1", None)])
    assert point["metrics"]["runs_diverged"] is None and notes(point) is None
    (point,) = combine([_run("a0", True), _run("a1", None)])
    assert point["metrics"]["runs_diverged"] == 1
    assert notes(point) == "loss diverged in 1 of 2 runs"
    (point,) = combine([_run("a0", False), _run("a1", False)])
    assert point["metrics"]["runs_diverged"] == 0 and notes(point) is None
    # one run's row (ls runs) has no runs_diverged: its own flag speaks
    assert notes(_run("a0", True)) == "loss diverged"
    assert notes(_run("a0", None)) is None and notes(_run("a0", False)) is None


def _stored(tmp_path: Path, backend: str, metrics: dict) -> dict:
    """A result of a run stored by an earlier dlscale, read back through the store."""
    store = RunStore(tmp_path / str(len(list(tmp_path.iterdir()))))
    store.prepare()
    (store.root / "r0").mkdir()
    document = {
        "schema": "dlscale.result/3",
        "run_id": "r0",
        "status": "completed",
        "config": {"backend": backend, "model": "m.py", "dataset": "own", "workers": 2},
        "metrics": {"throughput_img_s": 10.0, **metrics},
    }
    (store.root / "r0" / "result.json").write_text(json.dumps(document))
    (result,) = store.results()
    return dict(result.metrics)


def test_a_stored_script_run_without_a_loss_no_longer_reads_as_diverged(tmp_path: Path):
    no_loss = {"loss_diverged": True, "final_train_loss": None, "train_loss_by_window": []}
    assert _stored(tmp_path, "torch-script", copy.deepcopy(no_loss))["loss_diverged"] is None
    # a backend that trains its own model recorded its loss: a stored divergence stands
    assert _stored(tmp_path, "torch-ddp", copy.deepcopy(no_loss))["loss_diverged"] is True
    with_loss = {**no_loss, "final_train_loss": 2.3, "train_loss_by_window": [2.3]}
    assert _stored(tmp_path, "torch-script", with_loss)["loss_diverged"] is True
    assert _stored(tmp_path, "torch-script", {"loss_diverged": False})["loss_diverged"] is False


def _timed(backend: str, workers: int, **metrics) -> dict:
    return {
        "status": "completed",
        "config": {"backend": backend, "workers": workers},
        "metrics": {"step_time_p50_ms": 100.0, **metrics},
    }


def test_a_part_of_the_step_not_measured_is_said_not_drawn_as_zero():
    rows = [
        _timed("torch-ddp", 2, input_time_p50_ms=10.0, exposed_comm_fraction=0.2),
        _timed("torch-script", 2, exposed_comm_fraction=0.2),  # a script: no input wait
        _timed("torch-fsdp", 2, input_time_p50_ms=0.0),  # no probe: no exposed comm
    ]
    figure = breakdown(rows)
    assert figure is not None
    compute, wait, comm = figure.series
    assert compute.x == [
        "torch-ddp x2",
        "torch-script x2 (input not measured)",
        "torch-fsdp x2 (comm not measured)",
    ]
    assert compute.y == [70.0, 80.0, 100.0] and comm.y == [20.0, 20.0, 0.0]
    assert wait.y == [10.0, 0.0, 0.0]  # drawn as none, and said to be not measured
