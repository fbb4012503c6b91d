"""What the noise guard did to a run and a point (windows left out, the throughput's shift),
and the load counters of the exposed-communication probe, from the kernel to the point."""

import contextlib
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.engine import Engine
from dlscale.contract.events import events_path, read_events
from dlscale.contract.records import from_dict
from dlscale.contract.result import Result
from dlscale.metrics.aggregate import aggregate
from dlscale.metrics.points import combine
from dlscale.runtime import load, schedule, script_probe
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.load import LoadSample
from dlscale.runtime.schedule import run_schedule
from dlscale.runtime.script_probe import ScriptProbe
from tests.worker_context import worker_context


def typed(per_rank):
    return {rank: [from_dict(e) for e in events] for rank, events in per_rank.items()}


def window(index, duration, steps=2, *, kind="measure", step_ms=None, **extra):
    return {
        "event": "window",
        "rank": 0,
        "kind": kind,
        "index": index,
        "steps": steps,
        "samples": 10 * steps,
        "duration_s": duration,
        "step_ms": step_ms or [duration * 1e3 / steps] * steps,
        "data_ms": [1.0] * steps,
        "loss_sum": 2.0 * steps,
        "loss_count": steps,
        **extra,
    }


def counters(busy, run_cpu, steal=0.0, **extra):
    return {
        "machine_busy_s": busy,
        "run_cpu_s": run_cpu,
        "machine_steal_s": steal,
        "machine_cores": 2,
        **extra,
    }


# --- a run: windows left out, the shift, and the figures over the kept windows --------------


def test_a_run_says_how_many_windows_the_guard_left_out_and_how_far_that_moved_it():
    per_rank = {
        0: [
            window(0, 1.0, **counters(1.05, 1.0)),  # 20 img/s, 2.5% outside: clean
            window(1, 2.0, **counters(2.0, 1.0)),  # 10 img/s, 25% outside: left out
            window(2, 1.0, **counters(1.0, 1.0, steal=0.2)),  # 20 img/s, 10% steal: left out
        ]
    }
    m = aggregate(typed(per_rank), target_accuracy=None)
    assert m["windows"] == 1 and m["windows_recorded"] == 3 and m["windows_left_out"] == 2
    # kept mean 20 img/s against every window's (20 + 10 + 20) / 3
    assert m["noise_guard_shift"] == pytest.approx(20 / (50 / 3) - 1)  # +20%
    # step times over the kept windows only: the left-out window's 1000 ms steps are not in
    assert m["step_time_p50_ms"] == 500.0 and m["step_time_p95_ms"] == 500.0
    clean = aggregate(typed({0: [window(0, 1.0), window(1, 2.0)]}), target_accuracy=None)
    assert clean["windows_left_out"] == 0 and clean["noise_guard_shift"] == 0.0
    loaded = {0: [window(0, 1.0, **counters(2.0, 0.5)), window(1, 2.0, **counters(4.0, 1.0))]}
    kept_all = aggregate(typed(loaded), target_accuracy=None)  # nothing cleaner: all kept
    assert kept_all["windows_left_out"] == 0 and kept_all["noise_guard_shift"] == 0.0


# --- a point: over its runs --------------------------------------------------------------------


def run(run_id, throughput, repeat, **metrics):
    return Result(
        run_id=run_id,
        status="completed",
        framework="torch",
        reference=True,
        threads_per_worker=1,
        config={"backend": "torch-single", "workers": 1, "model": "m", "repeat_id": repeat},
        metrics={
            "throughput_samples_s": throughput,
            "throughput_windows_samples_s": [throughput, throughput],
            **metrics,
        },
    )


def test_a_point_counts_the_windows_left_out_of_its_runs_and_the_whole_guards_shift():
    rows = [
        run("a0", 100.0, 0, windows_left_out=1, noise_guard_shift=0.25),  # every window: 80
        run("a1", 110.0, 1, windows_left_out=0, noise_guard_shift=0.0),
        run(  # loaded in every window: left out of the point, all its windows kept
            "a2",
            50.0,
            2,
            windows_left_out=0,
            noise_guard_shift=0.0,
            windows_recorded=2,
            windows_loaded=2,
        ),
    ]
    (point,) = combine([r.row() for r in rows])
    assert point["run_ids"] == ["a0", "a1"] and point["runs_left_out"] == ["a2"]
    m = point["metrics"]
    assert m["throughput_samples_s"] == pytest.approx(105.0)
    assert m["windows_left_out"] == 1  # over the runs the point uses
    # 105 img/s against (80 + 110 + 50) / 3 = 80 img/s with nothing left out at either level
    assert m["noise_guard_shift"] == pytest.approx(105 / 80 - 1)
    (single,) = combine([rows[0].row()])
    assert single["metrics"]["noise_guard_shift"] == 0.25
    # results stored before these figures: nothing made up
    old = [
        replace(r, metrics={"throughput_samples_s": r.metrics["throughput_samples_s"]})
        for r in rows
    ]
    (point,) = combine([r.row() for r in old])
    assert point["metrics"]["windows_left_out"] is None
    assert point["metrics"]["noise_guard_shift"] is None
    assert point["metrics"]["exposed_comm_noisy"] is None


# --- the probe's load --------------------------------------------------------------------------


def probe_windows(**extra):
    sync, nosync = [100.0, 104.0, 98.0, 102.0], [90.0, 92.0, 90.0, 88.0]
    return [
        window(0, 0.4, 4, kind="probe", step_ms=sync, **extra),
        window(0, 0.36, 4, kind="nosync", step_ms=nosync, **extra),
    ]


def test_the_probes_load_is_read_over_its_whole_span_by_the_measured_windows_limits():
    clean = window(0, 1.0, **counters(1.0, 1.0))
    # 0.3 CPU-s of others over the probe's 1.0 s on 2 CPUs: 15% (over a window's own 0.4 s
    # it would read 37.5%); steal 0.04 / 2 = 2%
    loaded = counters(1.5, 1.2, steal=0.04, load_span_s=1.0)
    m = aggregate(typed({0: [clean, *probe_windows(**loaded)]}), target_accuracy=None)
    assert m["noisy"] is False  # the measured windows were clean
    assert m["exposed_comm_outside_load_max"] == pytest.approx(0.15)
    assert m["exposed_comm_steal_max"] == pytest.approx(0.02)
    assert m["exposed_comm_noisy"] is True
    assert m["exposed_comm_significant"] is True  # how it is computed is unchanged
    quiet = counters(1.1, 1.0, load_span_s=1.0)  # 5%
    m = aggregate(typed({0: [clean, *probe_windows(**quiet)]}), target_accuracy=None)
    assert m["exposed_comm_noisy"] is False
    unread = aggregate(typed({0: [clean, *probe_windows()]}), target_accuracy=None)
    assert unread["exposed_comm_fraction"] is not None and unread["exposed_comm_noisy"] is None
    assert unread["exposed_comm_outside_load_max"] is None


def test_a_point_is_exposed_comm_noisy_when_a_probe_behind_it_was():
    rows = [
        run("a0", 100.0, 0, exposed_comm_fraction=0.2, exposed_comm_outside_load_max=0.02),
        run("a1", 100.0, 1, exposed_comm_fraction=0.3, exposed_comm_outside_load_max=0.3),
    ]
    rows[0].metrics.update(exposed_comm_noisy=False, exposed_comm_steal_max=0.0)
    rows[1].metrics.update(exposed_comm_noisy=True, exposed_comm_steal_max=0.01)
    (point,) = combine([r.row() for r in rows])
    m = point["metrics"]
    assert m["exposed_comm_fraction"] == pytest.approx(0.25)
    assert m["exposed_comm_outside_load_max"] == pytest.approx(0.3)
    assert m["exposed_comm_steal_max"] == pytest.approx(0.01)
    assert m["exposed_comm_noisy"] is True


class _Synchronizing(Engine):
    """Steps of about a millisecond that 'synchronize' and can be told not to."""

    steps_per_epoch = 4

    def batches(self, epoch):
        return iter([None] * self.steps_per_epoch)

    def step(self, batch):
        time.sleep(0.001)
        return 1.0

    def no_sync(self):
        return contextlib.nullcontext()


def _context(tmp_path: Path, cfg: RunConfig) -> WorkerContext:
    return worker_context(tmp_path, cfg)


def _busy_machine(share: float):
    """Counters of a machine whose other processes use ``share`` of its 2 CPUs."""

    def sample(root, starts_window=False):
        assert root == 4242  # the first training rank reads the machine
        now = time.perf_counter()
        return LoadSample(minor_faults=0, busy_s=now * 2 * share, steal_s=0.0, run_s=0.0)

    return sample


def test_the_kernels_probe_windows_carry_the_machines_counters(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(schedule, "local_parent", lambda: 4242)
    monkeypatch.setattr(schedule, "sample", _busy_machine(0.3))
    monkeypatch.setattr(load, "machine_cores", lambda: 2)
    cfg = RunConfig(model="tiny", backend="torch-single", windows=2, steps=2, warmup_steps=1)
    ctx = _context(tmp_path, replace(cfg, comm_probe_steps=4))
    run_schedule(ctx, _Synchronizing())
    ctx.events.close()
    records = read_events(events_path(tmp_path, 0))
    probes = [r for r in records if r["event"] == "window" and r["kind"] != "measure"]
    assert {r["kind"] for r in probes} == {"probe", "nosync"}
    for record in probes:  # the same counters on both: read around the whole probe
        assert record["load_span_s"] > record["duration_s"] > 0
        assert record["machine_busy_s"] == probes[0]["machine_busy_s"]
        assert record["minor_faults"] is None  # the measured windows' figure only
    m = aggregate({0: [from_dict(r) for r in records]}, target_accuracy=None)
    assert m["exposed_comm_outside_load_max"] == pytest.approx(0.3, rel=0.2)
    assert m["exposed_comm_noisy"] is True


def test_a_scripts_probe_windows_carry_the_machines_counters(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(script_probe, "sample", _busy_machine(0.02))
    monkeypatch.setattr(load, "machine_cores", lambda: 2)
    ctx = _context(tmp_path, RunConfig(model="tiny", backend="torch-ddp", workers=2))
    probe = ScriptProbe(ctx, 2, lambda synced: True, root=4242)
    assert probe.start()
    done = False
    while not done:
        time.sleep(0.001)
        done = probe.stepped(1.0, 10)
    ctx.events.close()
    records = [r for r in read_events(events_path(tmp_path, 0)) if r["event"] == "window"]
    assert [r["kind"] for r in records] == ["probe", "nosync"]
    assert all(r["load_span_s"] > 0 and r["machine_cores"] == 2 for r in records)
    measured = from_dict(window(0, 1.0))  # the script's windows came before
    m = aggregate({0: [measured, *map(from_dict, records)]}, target_accuracy=None)
    assert m["exposed_comm_outside_load_max"] == pytest.approx(0.02, rel=0.2)
    assert m["exposed_comm_noisy"] is False
