"""Runs that are repeats: intervals over runs, Fieller on speedup, the baseline rule, the noise
guard, the interleaved probe, the study's thread budget and the order of rounds."""

from dataclasses import replace

import numpy as np
import pytest

from dlscale.cli.progress import relative_half_width, round_order
from dlscale.config.repeats import Repeats
from dlscale.config.study import expand, parse_set
from dlscale.contract.errors import UserError
from dlscale.contract.records import from_dict
from dlscale.contract.result import Result
from dlscale.metrics.aggregate import aggregate, exposed_fraction
from dlscale.metrics.points import combine
from dlscale.metrics.scaling import add_scaling
from dlscale.metrics.stats import mean_ci95, ratio_ci95
from dlscale.report.columns import COLUMNS


def typed(per_rank):
    return {rank: [from_dict(e) for e in events] for rank, events in per_rank.items()}


def window(index, duration, steps=2, *, kind="measure", rank=0, **extra):
    return {
        "event": "window",
        "rank": rank,
        "kind": kind,
        "index": index,
        "steps": steps,
        "samples": 10 * steps,
        "duration_s": duration,
        "step_ms": [duration * 1e3 / steps] * steps,
        "data_ms": [1.0] * steps,
        "loss_sum": 2.0 * steps,
        "loss_count": steps,
        **extra,
    }


def run(run_id, backend, workers, throughputs, *, repeat=0, threads=1, **config):
    """A stored run whose windows had these throughputs."""
    mean = float(np.mean(throughputs))
    return Result(
        run_id=run_id,
        status="completed",
        framework="torch",
        reference=backend == "torch-single",
        threads_per_worker=threads,
        config={
            "backend": backend,
            "workers": workers,
            "model": "m",
            "batch_size": 64,
            "repeat_id": repeat,
            "threads_per_worker": threads,
            **config,
        },
        metrics={
            "throughput_samples_s": mean,
            "throughput_windows_samples_s": list(throughputs),
            "throughput_ci95_samples_s": mean_ci95(throughputs)[1],
        },
    )


# --- Fieller -------------------------------------------------------------------------------


def test_fieller_by_hand():
    a, b = [200.0, 210.0, 190.0], [100.0, 104.0, 96.0]
    ratio, (low, high) = ratio_ci95(a, b)
    assert ratio == pytest.approx(2.0)
    # va = 100/3, vb = 16/3; at R = 2: va + 4 vb = 164/3; Welch df = (164/3)^2 /
    # ((100/3)^2/2 + 16 (16/3)^2/2) = 2.7869...; the bounds solve (a - R b)^2 = t^2 (va + R^2 vb)
    from scipy.stats import t

    va, vb = 100 / 3, 16 / 3
    df = (va + 4 * vb) ** 2 / (va**2 / 2 + 16 * vb**2 / 2)
    t2 = t.ppf(0.975, df) ** 2
    for bound in (low, high):
        assert (200 - bound * 100) ** 2 == pytest.approx(t2 * (va + bound**2 * vb), rel=1e-9)
    assert low < 2.0 < high
    assert 2.0 - low < high - 2.0  # a ratio's interval leans up


def test_fieller_has_no_interval_without_two_samples_or_with_a_vague_denominator():
    assert ratio_ci95([2.0, 2.2], [1.0])[1] is None
    assert ratio_ci95([2.0, 2.2, 2.1], [1.0, -1.0, 0.5])[1] is None  # b not distinguishable from 0
    assert ratio_ci95([2.0, 2.0], [1.0, 1.0]) == (2.0, (2.0, 2.0))


def test_fieller_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    held = 0
    for _ in range(2000):
        a, b = rng.normal(200, 10, 3), rng.normal(100, 5, 3)
        _, interval = ratio_ci95(a, b)
        held += interval is not None and interval[0] <= 2.0 <= interval[1]
    assert 0.93 <= held / 2000 <= 0.98


# --- points and the baseline rule ------------------------------------------------------------


def test_a_point_interval_is_over_its_runs_and_a_single_run_falls_back_to_windows():
    rows = [
        run("a0", "torch-ddp", 2, [100.0, 101.0], repeat=0),
        run("a1", "torch-ddp", 2, [110.0, 111.0], repeat=1),
        run("a2", "torch-ddp", 2, [120.0, 121.0], repeat=2),
        run("b0", "torch-ddp", 4, [200.0, 220.0]),
        replace(run("c0", "torch-ddp", 8, [1.0]), status="failed"),
    ]
    a, b, c = combine([r.row() for r in rows])
    assert a["runs"] == 3 and a["interval"] == "runs" and a["run_ids"] == ["a0", "a1", "a2"]
    assert a["metrics"]["throughput_samples_s"] == pytest.approx(110.5)
    assert a["metrics"]["throughput_ci95_samples_s"] == pytest.approx(
        mean_ci95([100.5, 110.5, 120.5])[1]
    )
    assert relative_half_width(a) == pytest.approx(
        100 * a["metrics"]["throughput_ci95_samples_s"] / 110.5
    )
    assert b["interval"] == "windows"
    assert b["metrics"]["throughput_ci95_samples_s"] == pytest.approx(mean_ci95([200.0, 220.0])[1])
    assert relative_half_width(b) is None  # windows are not what the stopping rule asks for
    assert c["status"] == "failed" and c["run_ids"] == ["c0"]


def test_speedup_interval_over_runs_and_baseline_with_the_same_threads():
    rows = [
        run("one1-0", "torch-single", 1, [100.0], repeat=0),
        run("one1-1", "torch-single", 1, [104.0], repeat=1),
        run("one1-2", "torch-single", 1, [96.0], repeat=2),
        run("all-0", "torch-single", 1, [150.0], threads=2),
        run("two-0", "torch-ddp", 2, [200.0], repeat=0),
        run("two-1", "torch-ddp", 2, [210.0], repeat=1),
        run("two-2", "torch-ddp", 2, [190.0], repeat=2),
    ]
    points = {p["run_id"]: p for p in add_scaling(rows)}
    two = points["two-0"]
    assert two["baseline"] == "torch-single x1, 1 thr"  # not the 2-thread run
    assert two["baseline_run_ids"] == ["one1-0", "one1-1", "one1-2"]
    _, interval = ratio_ci95([200.0, 210.0, 190.0], [100.0, 104.0, 96.0])
    assert two["speedup"] == pytest.approx(2.0)
    assert two["speedup_ci95"] == pytest.approx(list(interval))
    assert two["efficiency"] == pytest.approx(1.0)
    assert two["efficiency_ci95"] == pytest.approx([v / 2 for v in interval])
    # the whole-machine reference: the same work as 1 worker with every core
    assert two["machine_baseline"] == "torch-single x1, 2 thr"
    assert two["machine_speedup"] == pytest.approx(200.0 / 150.0)
    one = points["one1-0"]
    assert one["speedup"] == 1.0 and one["speedup_ci95"] is None  # its own baseline
    assert points["all-0"]["baseline"] == "torch-single x1, 2 thr"
    # per run: each run's own ratio over its point's baseline mean (100), no interval
    per_run = {r["run_id"]: r for r in add_scaling(rows, per="run")}
    two_1 = per_run["two-1"]
    assert two_1["speedup"] == pytest.approx(2.1) and two_1["speedup_ci95"] is None
    assert two_1["efficiency"] == pytest.approx(1.05) and two_1["efficiency_ci95"] is None
    assert two_1["machine_speedup"] == pytest.approx(1.4) and two_1["machine_speedup_ci95"] is None
    assert two_1["baseline_run_ids"] == ["one1-0", "one1-1", "one1-2"]
    assert two_1["runs"] == 3 and two_1["run_ids"] == ["two-0", "two-1", "two-2"]
    assert two_1["metrics"]["throughput_samples_s"] == 210.0
    # a baseline run over its own point's mean: not 1 by definition
    assert per_run["one1-1"]["speedup"] == pytest.approx(1.04)
    assert per_run["one1-2"]["speedup"] == pytest.approx(0.96)
    # its throughput's interval is over its own windows (tables mark it w), the point's not
    assert {r["interval"] for r in per_run.values()} == {"windows"}
    assert points["two-0"]["interval"] == "runs"


def test_a_run_loaded_in_every_window_is_left_out_while_a_clean_run_remains():
    """The noise guard one level up: hypervisor steal halved whole runs on this machine."""

    def noisy(row, loaded):
        metrics = {**row.metrics, "windows_recorded": 2, "windows_loaded": loaded}
        metrics.update(noisy=loaded > 0, outside_load_max=0.01, steal_max=0.4 if loaded else 0.0)
        return replace(row, metrics=metrics)

    rows = [
        noisy(run("a0", "torch-single", 1, [100.0, 102.0], repeat=0), 0),
        noisy(run("a1", "torch-single", 1, [50.0, 52.0], repeat=1), 2),  # stolen throughout
        noisy(run("a2", "torch-single", 1, [104.0, 106.0], repeat=2), 1),  # one clean window
        noisy(run("b0", "torch-ddp", 2, [90.0, 92.0], repeat=0), 2),
        noisy(run("b1", "torch-ddp", 2, [60.0, 62.0], repeat=1), 2),
    ]
    points = {p["config"]["backend"]: p for p in add_scaling(rows)}
    single, ddp = points["torch-single"], points["torch-ddp"]
    assert single["run_ids"] == ["a0", "a2"] and single["runs_left_out"] == ["a1"]
    assert single["runs"] == 2 and single["metrics"]["throughput_samples_s"] == pytest.approx(103.0)
    assert single["metrics"]["runs_loaded"] == 1 and single["metrics"]["noisy"] is True
    # every run loaded throughout: all kept (nothing cleaner to measure)
    assert ddp["run_ids"] == ["b0", "b1"] and ddp["runs_left_out"] == []
    assert ddp["speedup"] == pytest.approx(76.0 / 103.0)
    # per run: every run is still listed, the left-out one says so through its point
    per_run = {r["run_id"]: r for r in add_scaling(rows, per="run")}
    assert set(per_run) == {"a0", "a1", "a2", "b0", "b1"}
    assert per_run["a1"]["runs_left_out"] == ["a1"]
    notes = next(c for c in COLUMNS if c.name == "notes").text(single)
    assert notes == "steal 40%, 1 loaded run(s) left out"


# --- the noise guard, page faults, exposed communication, epochs -----------------------------


def loaded(index, duration, busy, run_cpu, steal=0.0, faults=100):
    return window(
        index,
        duration,
        machine_busy_s=busy,
        run_cpu_s=run_cpu,
        machine_steal_s=steal,
        machine_cores=2,
        minor_faults=faults,
    )


def test_a_window_under_outside_load_is_flagged_and_left_out():
    per_rank = {
        0: [
            loaded(0, 1.0, busy=1.05, run_cpu=1.0),  # 2.5% outside: clean
            loaded(1, 2.0, busy=2.0, run_cpu=1.0),  # 1 s of 4 CPU-s: 25% outside
            loaded(2, 1.0, busy=1.0, run_cpu=1.0, steal=0.2),  # 10% steal
        ]
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    assert m["windows"] == 1 and m["throughput_samples_s"] == 20.0  # only the clean window
    assert m["windows_loaded"] == 2 and m["noisy"] is True
    assert m["outside_load_max"] == pytest.approx(0.25) and m["steal_max"] == pytest.approx(0.1)
    assert m["page_faults_per_step"] == pytest.approx(50.0)  # 100 faults / 2 steps, clean window
    # the losses are every window's: load moves a window's times, not what it trained
    assert len(m["train_loss_by_window"]) == 3 and m["windows_recorded"] == 3


def test_every_window_loaded_keeps_them_all():
    per_rank = {0: [loaded(0, 1.0, busy=2.0, run_cpu=0.5), loaded(1, 2.0, busy=4.0, run_cpu=1.0)]}
    m = aggregate(typed(per_rank), target_accuracy=None)
    assert m["windows"] == 2 and m["noisy"] is True and m["windows_loaded"] == 2


def test_exposed_comm_from_interleaved_pairs_unclipped_with_an_interval():
    sync, nosync = [100.0, 104.0, 98.0, 102.0], [90.0, 92.0, 90.0, 88.0]
    per_rank = {
        0: [
            window(0, 1.0),
            {**window(0, 0.4, 4, kind="probe"), "step_ms": sync},
            {**window(0, 0.36, 4, kind="nosync"), "step_ms": nosync},
        ]
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    diffs = np.array(sync) - np.array(nosync)
    assert m["exposed_comm_fraction"] == pytest.approx(diffs.mean() / np.mean(sync))
    assert m["exposed_comm_ci95"] == pytest.approx(mean_ci95(diffs)[1] / np.mean(sync))
    assert m["exposed_comm_significant"] is True
    fraction, half = exposed_fraction(np.array([100.0, 98.0]), np.array([101.0, 99.0]))
    assert fraction < 0 and half is not None  # noise below 0 stays visible


def test_exposed_comm_is_zero_by_definition_without_synchronization():
    per_rank = {0: [{"event": "environment", "synchronizes": False}, window(0, 1.0)]}
    m = aggregate(typed(per_rank), target_accuracy=None)
    assert m["exposed_comm_fraction"] == 0.0 and m["exposed_comm_significant"] is False


def test_epoch_time_counts_whole_epochs_and_epochs_to_accuracy_only_in_epoch_mode():
    evaluation = {"event": "eval", "epoch": 1, "correct": 9, "total": 10, "elapsed_s": 5.0}
    epochs = {
        0: [
            window(0, 1.0, steps=8, epoch=0, epoch_steps=10),  # warm-up cut: 8 of 10 steps
            window(1, 1.2, steps=10, epoch=1, epoch_steps=10),
            evaluation,
        ]
    }
    m = aggregate(typed(epochs), target_accuracy=0.5)
    assert m["epoch_time_s"] == pytest.approx((1.0 * 10 / 8 + 1.2) / 2)
    assert m["epochs_to_accuracy"] == 1
    steps = {0: [window(0, 1.0), {**evaluation, "epoch": 0}]}
    m = aggregate(typed(steps), target_accuracy=0.5)
    assert m["epochs_to_accuracy"] is None and m["time_to_accuracy_s"] == 5.0


# --- the study: thread budget, whole-machine point, rounds, bad values ------------------------


def test_every_point_gets_the_same_threads_and_the_machine_reference_is_added():
    settings = {"backend": ["torch-single", "torch-ddp"], "workers": [1, 2], "model": "tiny"}
    study = expand({**settings, "machine_reference": True}, cores=4)
    threads = {(p.backend, p.workers, p.threads_per_worker) for p in study.points}
    assert threads == {
        ("torch-single", 1, 2),
        ("torch-ddp", 1, 2),
        ("torch-ddp", 2, 2),
        ("torch-single", 1, 4),  # the whole machine as one worker
    }
    assert {p.threads_per_worker for p in expand(settings, cores=4).points} == {2}
    pinned = expand({**settings, "threads_per_worker": 3}, cores=4)
    assert {p.threads_per_worker for p in pinned.points} == {3}


def test_rounds_alternate_abba_and_random_is_seeded():
    plan = Repeats(repeats=4)
    assert [round_order([0, 1, 2], n, plan) for n in range(3)] == [
        [0, 1, 2],
        [2, 1, 0],
        [0, 1, 2],
    ]
    shuffled = Repeats(repeats=2, order="random", order_seed=3)
    assert round_order([0, 1, 2, 3], 1, shuffled) == round_order([0, 1, 2, 3], 1, shuffled)
    assert sorted(round_order([0, 1, 2, 3], 1, shuffled)) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "setting",
    [
        "repeats=0",
        "repeats=two",
        "target_ci=nan",
        "target_ci=inf",
        "target_ci=0",
        "target_ci=150",
        "time_budget_s=-1",
        "time_budget_s=nan",
        "order=sideways",
        "max_repeats=1",
    ],
)
def test_bad_study_settings_are_refused_in_one_line(setting):
    settings = {"model": "tiny", "repeats": 2}
    with pytest.raises(UserError) as error:
        settings.update(parse_set([setting]))
        expand(settings)
    assert "\n" not in str(error.value)
    assert setting.split("=")[0] in str(error.value)
