"""Metric arithmetic against values computed by hand."""

import math

import pytest

from dlscale.contract.records import from_dict
from dlscale.contract.result import Result
from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.scaling import add_scaling
from dlscale.metrics.stats import mean_ci95, percentile


def typed(per_rank):
    """Stored records (as written to the events files) read back as their types."""
    return {rank: [from_dict(e) for e in events] for rank, events in per_rank.items()}


def window(rank, index, duration, step_ms, *, kind="measure", samples=None, epoch=None, loss=2.0):
    return {
        "event": "window",
        "rank": rank,
        "kind": kind,
        "index": index,
        "epoch": epoch,
        "steps": len(step_ms),
        "samples": samples or 10 * len(step_ms),
        "duration_s": duration,
        "step_ms": step_ms,
        "data_ms": [1.0] * len(step_ms),
        "loss_sum": loss * len(step_ms),
        "loss_count": len(step_ms),
    }


def test_mean_ci95_by_hand():
    mean, half = mean_ci95([10.0, 12.0, 14.0])
    # s = 2, t_{0.975,2} = 4.302653, half = 4.302653 * 2 / sqrt(3)
    assert mean == 12.0
    assert half == pytest.approx(4.302653 * 2 / math.sqrt(3), rel=1e-5)
    assert mean_ci95([5.0]) == (5.0, None)
    assert percentile([1, 2, 3, 4], 50) == 2.5


def test_aggregate_takes_max_over_ranks_and_sums_images():
    per_rank = {
        0: [window(0, 0, 1.0, [100.0, 110.0]), window(0, 1, 2.0, [90.0, 100.0])],
        1: [window(1, 0, 1.25, [120.0, 100.0]), window(1, 1, 1.0, [95.0, 130.0])],
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    # window 0: 40 images in max(1.0, 1.25) s = 32 img/s; window 1: 40 in 2.0 s = 20 img/s
    assert m["throughput_windows_samples_s"] == [32.0, 20.0]
    assert m["throughput_samples_s"] == 26.0
    # per-step max over ranks: [120, 110, 95, 130] -> p50 = 115
    assert m["step_time_p50_ms"] == 115.0
    assert m["measured_images"] == 80 and m["measured_steps"] == 4
    assert m["final_train_loss"] == 2.0
    assert m["epoch_time_s"] is None  # step mode: no epochs
    assert m["rank_step_time_mean_ms"] == {"0": 100.0, "1": 111.25}


def test_the_loss_of_each_step_is_the_mean_over_ranks_and_null_where_not_finite():
    def with_losses(rank, index, losses):
        return {**window(rank, index, 1.0, [10.0] * len(losses)), "step_losses": losses}

    per_rank = {
        0: [with_losses(0, 0, [2.0, 1.5]), with_losses(0, 1, [1.0, None])],
        1: [with_losses(1, 0, [3.0, 2.5]), with_losses(1, 1, [0.5, 0.25])],
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    assert m["train_loss_by_step"] == [2.5, 2.0, 0.75, None]
    # an engine that trains whole windows says no step's loss: none is made up
    per_rank[1][1] = window(1, 1, 1.0, [10.0, 10.0])
    assert aggregate(typed(per_rank), target_accuracy=None)["train_loss_by_step"] is None


def test_aggregate_drops_a_window_a_rank_did_not_finish():
    per_rank = {
        0: [window(0, 0, 1.0, [10.0]), window(0, 1, 1.0, [10.0])],
        1: [window(1, 0, 1.0, [10.0])],
    }
    assert aggregate(typed(per_rank), target_accuracy=None)["windows"] == 1


def test_a_restarted_run_keeps_each_windows_latest_record_and_counts_its_restarts():
    """Attempt 1 recorded windows 0 and 1 and saved after window 0; attempt 2 resumed from
    that state (1 window kept) and measured windows 1 and 2 again."""
    start = {"event": "start", "pid": 1}
    per_rank = {
        r: [
            start,
            window(r, 0, 1.0, [10.0]),
            window(r, 1, 4.0, [40.0]),  # its step was interrupted: measured again below
            start,
            *(
                [{"event": "resume", "restart": 1, "windows_done": 1, "lost_s": 7.5}]
                if r == 0
                else []
            ),
            window(r, 1, 2.0, [20.0]),
            window(r, 2, 2.0, [20.0]),
        ]
        for r in (0, 1)
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    # 20 images a window over both ranks: 20/1.0, 20/2.0, 20/2.0 (the first attempt's window 1
    # is replaced by the second's, not counted beside it)
    assert m["throughput_windows_samples_s"] == [20.0, 10.0, 10.0]
    assert m["windows"] == 3 and m["windows_recorded"] == 3
    assert m["restarts"] == 1 and m["restart_lost_s"] == 7.5
    plain = aggregate(typed({0: per_rank[0][:3]}), target_accuracy=None)
    assert plain["restarts"] == 0 and plain["restart_lost_s"] == 0.0


def test_exposed_comm_and_time_to_accuracy():
    per_rank = {
        0: [
            window(0, 0, 1.0, [100.0, 100.0], epoch=0),
            window(0, 0, 1.0, [100.0, 100.0], kind="probe"),
            window(0, 0, 1.0, [75.0, 75.0], kind="nosync"),
            {
                "event": "eval",
                "epoch": 1,
                "correct": 40,
                "total": 50,
                "loss_sum": 10.0,
                "elapsed_s": 3.0,
            },
            {
                "event": "eval",
                "epoch": 2,
                "correct": 45,
                "total": 50,
                "loss_sum": 5.0,
                "elapsed_s": 6.0,
            },
        ],
    }
    m = aggregate(typed(per_rank), target_accuracy=0.85)
    assert m["exposed_comm_fraction"] == pytest.approx(0.25)
    assert m["eval_accuracy"] == pytest.approx(0.9)
    assert m["time_to_accuracy_s"] == 6.0 and m["epochs_to_accuracy"] == 2
    assert m["epoch_time_s"] == 1.0
    assert aggregate(typed(per_rank), target_accuracy=0.95)["time_to_accuracy_s"] is None


def test_one_process_times_its_plain_step_and_forward_but_measures_no_exposed_comm():
    """A 1-process run's compute probe (runtime/schedule.py) has ``nosync`` and ``forward``
    windows and no ``probe`` one: their medians are stored (the backward's share of the step
    for the model), its exposed communication is 0 where nothing synchronizes and otherwise
    not measured (torch-fsdp at 1 worker)."""
    measure = window(0, 0, 1.0, [100.0, 100.0], epoch=0)
    probe = [window(0, 0, 1.0, [40.0, 44.0, 50.0], kind="nosync"),
             window(0, 0, 1.0, [10.0, 12.0, 30.0], kind="forward")]  # fmt: skip
    alone = {"event": "environment", "synchronizes": False}
    m = aggregate(typed({0: [alone, measure, *probe]}), target_accuracy=None)
    assert m["step_time_nosync_p50_ms"] == 44.0 and m["forward_time_p50_ms"] == 12.0
    assert m["exposed_comm_fraction"] == 0.0 and m["exposed_comm_significant"] is False
    fsdp = aggregate(typed({0: [measure, *probe]}), target_accuracy=None)
    assert fsdp["step_time_nosync_p50_ms"] == 44.0 and fsdp["forward_time_p50_ms"] == 12.0
    assert fsdp.get("exposed_comm_fraction") is None
    # without its probe (comm_probe_steps 0): neither
    bare = aggregate(typed({0: [alone, measure]}), target_accuracy=None)
    assert bare.get("step_time_nosync_p50_ms") is None and bare.get("forward_time_p50_ms") is None


def row(
    run_id, backend, workers, throughput, *, framework=None, reference=None, options=None, **config
):
    """A stored run; ``options``: its backend's, grouped as a result stores them."""
    cfg = {
        "backend": backend,
        "workers": workers,
        "model": "m",
        "batch_size": 64,
        "repeat_id": 0,
        **config,
        "options": {"backend": options or {}},
    }
    return Result(
        run_id=run_id,
        status="completed",
        framework=framework,
        reference=reference,
        config=cfg,
        metrics={"throughput_samples_s": throughput},
    )


def test_speedup_prefers_reference_backend_at_one_worker():
    rows = add_scaling(
        [
            row("single", "torch-single", 1, 100.0),
            row("ddp1", "torch-ddp", 1, 95.0),
            row("ddp2", "torch-ddp", 2, 180.0),
            row("other", "torch-ddp", 2, 90.0, batch_size=32),  # no baseline with batch 32
        ]
    )
    by_id = {r["run_id"]: r for r in rows}
    assert by_id["ddp2"]["speedup"] == pytest.approx(1.8)
    assert by_id["ddp2"]["efficiency"] == pytest.approx(0.9)
    assert by_id["ddp2"]["baseline_run_ids"] == ["single"]
    assert by_id["ddp1"]["speedup"] == pytest.approx(0.95)
    assert by_id["other"]["speedup"] is None


def test_speedup_falls_back_to_same_backend():
    rows = add_scaling([row("a1", "torch-ddp", 1, 50.0), row("a4", "torch-ddp", 4, 150.0)])
    assert rows[1]["speedup"] == pytest.approx(3.0)
    assert rows[1]["efficiency"] == pytest.approx(0.75)


def test_a_diverged_window_keeps_its_timing_and_is_flagged():
    bad = window(0, 1, 1.0, [10.0])
    bad["loss_sum"] = None
    m = aggregate(typed({0: [window(0, 0, 1.0, [10.0]), bad]}), target_accuracy=None)
    assert m["windows"] == 2 and m["throughput_samples_s"] == 10.0
    assert m["loss_diverged"] is True and m["final_train_loss"] == 2.0


def test_run_labels_do_not_separate_a_run_from_its_baseline():
    rows = add_scaling(
        [
            row("one", "torch-single", 1, 100.0, save_params=False),
            row("two", "torch-ddp", 2, 150.0, save_params=True),
        ]
    )
    assert rows[1]["speedup"] == pytest.approx(1.5)


def test_a_baseline_is_never_taken_from_another_framework():
    def framework_row(run_id, backend, workers, throughput, framework, reference):
        return row(run_id, backend, workers, throughput, framework=framework, reference=reference)

    rows = add_scaling(
        [
            framework_row("torch1", "torch-single", 1, 100.0, "torch", True),
            framework_row("tf1", "tf-mirrored", 1, 50.0, "tensorflow", False),
            framework_row("tf2", "tf-mirrored", 2, 90.0, "tensorflow", False),
            framework_row("mx2", "mxnet-kv", 2, 90.0, "mxnet", False),
        ]
    )
    by_id = {r["run_id"]: r for r in rows}
    assert by_id["tf2"]["baseline_run_ids"] == ["tf1"]
    assert by_id["tf2"]["speedup"] == pytest.approx(1.8)
    assert by_id["mx2"]["speedup"] is None  # no MXNet run at 1 worker: no speedup at all


def test_same_backend_with_other_options_is_not_a_baseline():
    def with_options(run_id, workers, throughput, bucket_mb):
        return row(run_id, "torch-ddp", workers, throughput, options={"bucket_mb": bucket_mb})

    rows = add_scaling([with_options("small1", 1, 50.0, 1.0), with_options("big2", 2, 90.0, 25.0)])
    assert rows[1]["speedup"] is None
    rows = add_scaling([with_options("big1", 1, 50.0, 25.0), with_options("big2", 2, 90.0, 25.0)])
    assert rows[1]["baseline_run_ids"] == ["big1"]


def test_among_reference_runs_the_one_with_the_points_options_is_the_baseline():
    def mx_row(run_id, backend, workers, throughput, mkldnn, reference):
        options = {"weights": "torch", "mkldnn": mkldnn}
        return row(
            run_id,
            backend,
            workers,
            throughput,
            framework="mxnet",
            reference=reference,
            options=options,
        )

    for order in (1, -1):  # whichever comes first
        rows = add_scaling(
            [
                mx_row("on", "mxnet-single", 1, 100.0, True, True),
                mx_row("off", "mxnet-single", 1, 60.0, False, True),
                mx_row("hvd2", "horovod-mxnet", 2, 108.0, False, False),
                mx_row("kv2", "mxnet-kv", 2, 180.0, True, False),
            ][::order]
        )
        by_id = {r["run_id"]: r for r in rows}
        assert by_id["hvd2"]["baseline_run_ids"] == ["off"]
        assert by_id["hvd2"]["speedup"] == pytest.approx(1.8)
        assert by_id["kv2"]["baseline_run_ids"] == ["on"]
