"""A finding that cannot mislead (issue 45): a comparison whose points waited for a CPU, whose
runs disagree, whose speedup is impossible or whose baseline its siblings contradict is said,
first, not to be measured reliably, with why and what to do, and no ratio is stated as found;
and the run delay behind "waited", computed from the ranks' records."""

from dlscale.contract.records import Window
from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.noise import WAIT_LIMIT
from dlscale.report.figures import efficiency, throughput
from dlscale.report.finding import findings


def _point(backend, workers, img_s, *, half=None, **fields):
    metrics = {"throughput_samples_s": img_s, "throughput_ci95_samples_s": half,
               **fields.pop("metrics", {})}  # fmt: skip
    return {
        "run_id": f"{backend}-{workers}",
        "run_ids": [f"{backend}-{workers}"],
        "status": "completed",
        "framework": "torch",
        "config": {"backend": backend, "workers": workers, "model": "m", "scaling": "weak"},
        "config_options": {},
        "threads_per_worker": 1,
        "metrics": metrics,
        **fields,
    }


def _scaled(speedup, interval, **fields):
    base = ["torch-single-1"]
    return _point("torch-ddp", 2, 364.0, half=20.0, speedup=speedup, speedup_ci95=interval,
                  efficiency=speedup / 2, baseline_run_ids=base, **fields)  # fmt: skip


def test_a_baseline_that_waited_is_said_first_and_no_ratio_is_claimed():
    base = _point("torch-single", 1, 100.0, half=30.0, speedup=1.0,
                  metrics={"waited": True, "run_delay_max": 0.48})  # fmt: skip
    other = _point("tf-x", 2, 50.0, half=2.0, framework="tensorflow", speedup=1.9,
                   speedup_ci95=[1.8, 2.0], efficiency=0.95, baseline_run_ids=["tf-1"])  # fmt: skip
    said = findings([base, _scaled(3.64, [2.55, 5.62]), other])
    assert said[0] == (
        "torch-ddp at 2 workers over torch-single at 1 worker: not measured reliably "
        "(the baseline's process waited for a CPU 48% of a window; 3.64x [2.55, 5.62] is "
        "above 2 workers' 2x beyond its interval); rerun with --repeats 5 on a quiet machine"
    )
    assert "182%" not in " ".join(said) and "3.64x over" not in " ".join(said)
    assert said[1].startswith("tf-x at 2 workers: 1.90x [1.80, 2.00]")  # the others stand


def test_runs_that_disagree_and_a_baseline_its_siblings_contradict_are_doubted():
    base = _point("torch-single", 1, 940.6, half=1864.5, speedup=1.0)
    sibling = _point("torch-ddp", 1, 1937.6, half=10.0, speedup=2.06)
    (first, *_) = findings([base, sibling, _scaled(1.5, [1.2, 1.8])])
    assert first.startswith("torch-ddp at 2 workers over torch-single at 1 worker: not measured")
    assert "the baseline's runs disagree (±1864.5 img/s around 940.6)" in first
    assert "torch-ddp at 1 worker runs 2.06x the baseline's img/s" in first
    # a slower sibling is its engine's overhead; a point of two processes that waited for its
    # own threads, a note; neither doubts the comparison
    slow = _point("horovod-keras", 1, 40.0, half=1.0, speedup=0.42)
    waited = _scaled(1.5, [1.2, 1.8], layout=[{"rank": 0}, {"rank": 1}],
                     metrics={"waited": True, "run_delay_max": 1.34})  # fmt: skip
    calm = _point("torch-single", 1, 100.0, half=5.0, speedup=1.0)
    (first, *_) = findings([calm, slow, waited])
    assert first.startswith("torch-ddp at 2 workers: 1.50x [1.20, 1.80] over torch-single")
    # runs loaded in every window, and a speedup interval that reaches below 0
    loaded = dict(calm, metrics={**calm["metrics"], "runs_loaded": 3, "outside_load_max": 0.26})
    (first, *_) = findings([loaded, _scaled(1.06, [-0.48, 2.62])])
    assert "the baseline's runs loaded in every window (26% outside load)" in first
    assert "its speedup's interval reaches below 0 (-0.48)" in first
    # siblings that agree, honest intervals, no wait: the ratio is the finding
    calm = _point("torch-single", 1, 100.0, half=5.0, speedup=1.0)
    near = _point("torch-ddp", 1, 95.0, half=5.0, speedup=0.95)
    (first, *_) = findings([calm, near, _scaled(1.5, [1.2, 1.8])])
    assert first.startswith("torch-ddp at 2 workers: 1.50x [1.20, 1.80] over torch-single")


def test_the_same_machine_as_one_worker_is_not_compared_with_a_reference_that_cannot_be_trusted():
    """The issue's second sentence: "faster than the same machine as one 2-thread worker
    (10.65x [6.89, 18.90])" over a reference whose runs disagreed; the point's own
    comparison with its baseline stands."""
    base = _point("torch-single", 1, 100.0, half=5.0, speedup=1.0)
    whole = _point("torch-single", 1, 940.6, half=1864.5, speedup=9.4, threads_per_worker=2)
    point = _scaled(1.5, [1.2, 1.8], machine_speedup=10.65, machine_speedup_ci95=[6.89, 18.90],
                    machine_baseline="torch-single x1, 2 thr")  # fmt: skip
    (first, *_) = findings([base, whole, point])
    assert first.startswith("torch-ddp at 2 workers: 1.50x [1.20, 1.80] over torch-single")
    assert "10.65x" not in first and "faster than the same machine" not in first
    assert (
        "the same machine as one 2-thread worker: not measured reliably (its runs disagree "
        "(±1864.5 img/s around 940.6))"
    ) in first
    whole["metrics"]["throughput_ci95_samples_s"] = 20.0  # a reference whose runs agree
    (first, *_) = findings([base, whole, dict(point, machine_speedup_ci95=[-0.2, 3.0])])
    assert (
        "the same machine as one 2-thread worker: not measured reliably (the ratio's "
        "interval reaches below 0 (-0.20))"
    ) in first
    (first, *_) = findings([base, whole, point])
    assert "faster than the same machine as one 2-thread worker (10.65x [6.89, 18.90])" in first


def _window(rank, index, duration, delay):
    return Window(rank=rank, time=0.0, index=index, kind="measure", steps=2, samples=8,
                  duration_s=duration, run_delay_s=delay, involuntary_switches=3)  # fmt: skip


def test_the_run_delay_is_each_ranks_share_of_its_own_window_the_largest_kept():
    per_rank = {  # rank 1 waited 0.3 s of its 0.5 s second window; rank 0 hardly at all
        0: [_window(0, 0, 1.0, 0.01), _window(0, 1, 1.0, 0.02)],
        1: [_window(1, 0, 0.8, 0.04), _window(1, 1, 0.5, 0.3)],
    }
    metrics = aggregate(per_rank, target_accuracy=None)
    assert metrics["run_delay_max"] == 0.3 / 0.5 and metrics["waited"] is True
    calm = {0: [_window(0, 0, 1.0, WAIT_LIMIT / 2)]}
    assert aggregate(calm, target_accuracy=None)["waited"] is False
    unread = {0: [_window(0, 0, 1.0, None)]}
    unread_metrics = aggregate(unread, target_accuracy=None)
    assert unread_metrics["run_delay_max"] is None and unread_metrics["waited"] is None


def test_the_plots_cut_no_img_s_below_zero_and_mark_what_the_finding_doubts():
    base = _point("torch-single", 1, 940.6, half=1864.5, speedup=1.0)
    ddp = _point("torch-ddp", 2, 364.0, half=20.0, speedup=3.64, speedup_ci95=[2.55, 5.62],
                 efficiency=1.82, efficiency_ci95=[1.28, 2.81],
                 baseline_run_ids=["torch-single-1"])  # fmt: skip
    series = {s.group: s for s in throughput([base, ddp]).series if not s.dashed}
    single = series["torch-single"]
    assert single.low == [0.0] and single.high == [940.6 + 1864.5]
    assert single.name == "torch-single (interval wider than the mean, cut at 0 at 1 worker)"
    assert series["torch-ddp"].name == (
        "torch-ddp (not measured reliably, see the finding at 2 workers)"
    )
    (line,) = efficiency([base, ddp]).series
    assert line.name.endswith("(not measured reliably, see the finding at 2 workers)")
    calm = _point("torch-single", 1, 182.0, half=5.0, speedup=1.0)
    (line,) = efficiency([calm, dict(ddp, speedup_ci95=[1.9, 2.1], speedup=2.0)]).series
    assert line.name == "torch-ddp"  # nothing doubted, nothing marked
