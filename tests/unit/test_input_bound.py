"""The input wait and the input cap, computed by hand from records."""

import pytest

from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.input_bound import input_findings, share
from tests.unit.test_metrics import typed, window


def test_the_input_wait_is_the_waits_over_the_step_times_max_over_ranks():
    first, second = window(0, 0, 1.0, [100.0, 50.0]), window(1, 0, 1.0, [80.0, 70.0])
    first["data_ms"], second["data_ms"] = [30.0, 5.0], [10.0, 20.0]
    m = aggregate(typed({0: [first], 1: [second]}), target_accuracy=None)
    # per step, the slowest rank: steps [100, 70], waits [30, 20] -> 50 / 170
    assert m["input_wait_fraction"] == pytest.approx(50 / 170)
    assert m["input_time_p50_ms"] == 25.0


def test_a_loader_only_window_has_no_loss_and_is_not_a_diverged_one():
    record = window(0, 0, 0.5, [2.0, 3.0])
    record["loss_sum"], record["loss_count"] = 0.0, 0
    m = aggregate(typed({0: [record]}), target_accuracy=None)
    assert m["final_train_loss"] is None and m["loss_diverged"] is None  # not measured
    record["loss_sum"], record["loss_nonfinite"] = None, True  # a diverged one still says so
    assert aggregate(typed({0: [record]}), target_accuracy=None)["loss_diverged"] is True


def _point(
    backend, workers, throughput, *, loader_only=False, wait=None, loaders=2, data="imagenet"
):
    return {
        "status": "completed",
        "config": {"backend": backend, "workers": workers, "dataset": data, "batch_size": 32,
                   "loader_only": loader_only, "repeat_id": 0},
        "config_options": {"dataset": {"loader_workers": loaders}},
        "metrics": {"throughput_samples_s": throughput, "input_wait_fraction": wait},
    }  # fmt: skip


def test_a_training_point_is_put_beside_the_loader_only_point_of_its_settings():
    points = [
        _point("torch-ddp", 2, 100.0, wait=0.25),
        _point("torch-ddp", 2, 400.0, loader_only=True, wait=1.0),
        _point("torch-ddp", 2, 900.0, loader_only=True, loaders=4),  # other settings: not its
        _point("torch-ddp", 1, 80.0, wait=0.05),
        _point("torch-ddp", 1, 80.0, data="synthetic", wait=0.0),  # no input pipeline
    ]
    two, one = input_findings(points)
    assert (two.train_per_worker, two.loader_per_worker) == (50.0, 200.0)
    assert two.sentence() == (
        "torch-ddp x2 on imagenet: trains at 50.0 img/s per worker; 25% of its step time waits "
        "for input; input caps you at 200.0 img/s per worker (training uses 25% of it): "
        "input-bound"
    )
    assert one.loader_per_worker is None
    assert share(0.0021) == "0.2%" and share(0.1) == "10%" and share(1.0) == "100%"
    assert one.sentence() == (
        "torch-ddp x1 on imagenet: trains at 80.0 img/s per worker; 5.0% of its step time waits "
        "for input"
    )


def test_keys_that_never_tell_points_apart_do_not_part_a_point_from_its_loader_twin():
    """The same keys as everywhere runs are matched (run_config.NOT_MATCHED_KEYS): a twin run
    with another resource_guard, python or timeout is still the point's."""
    from dlscale.contract.run_config import NOT_MATCHED_KEYS

    assert {"resource_guard", "python", "timeout_s"} <= set(NOT_MATCHED_KEYS)
    training = _point("torch-ddp", 2, 100.0, wait=0.25)
    twin = _point("torch-ddp", 2, 400.0, loader_only=True, wait=1.0)
    twin["config"].update(resource_guard=False, python="/other/python", timeout_s=9.0)
    (finding,) = input_findings([training, twin])
    assert finding.loader_per_worker == 200.0


def test_many_points_on_disk_are_said_in_one_line_after_the_table():
    """A few points: a sentence each; more (a preset's 30): one line naming the input-bound
    points and the loaders' caps, each point's wait being the table's input column."""
    from dlscale.metrics.input_bound import InputFinding, input_lines

    def finding(label: str, wait: float, cap: float | None = None) -> InputFinding:
        return InputFinding(label=label, dataset="imagenet-folder", train_per_worker=50.0,
                            wait_fraction=wait, loader_per_worker=cap)  # fmt: skip

    few = [finding("torch-ddp x1", 0.02), finding("torch-ddp x2", 0.3, 80.0)]
    assert input_lines(few) == [f.sentence() for f in few]
    many = [*few, finding("tf-mwms x2", 0.01), finding("mxnet-kv x2", 0.5)]
    (line,) = input_lines(many)
    assert line.startswith("4 points read their data from disk")
    assert "input-bound (>= 10% of a step waits): torch-ddp x2, mxnet-kv x2" in line
    assert line.endswith("the loaders alone deliver (img/s per worker): torch-ddp x2 80.0")
