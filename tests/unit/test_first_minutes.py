"""The first five minutes (issue 30): the runs table fits the terminal and says what its columns
mean, the finding is written from the stored figures, `dlscale explain` and the time left."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from dlscale.cli.eta import StudyClock
from dlscale.cli.explain import describe
from dlscale.cli.tables import show_table
from dlscale.metrics.scaling import add_scaling
from dlscale.report.columns import COLUMNS
from dlscale.report.finding import findings
from dlscale.report.layout import find_column, human_layout
from dlscale.store.results import RunStore

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def rows():
    return add_scaling(RunStore(DATA / "results").results())


def _shown(rows, width: int, *, wide: bool = False, run_ids: bool = False) -> str:
    out = Console(width=width, file=io.StringIO(), record=True, force_terminal=True)
    show_table(out, rows, "study t: " + "a long description " * 8, run_ids=run_ids, wide=wide)
    return out.export_text()


@pytest.mark.parametrize("run_ids", [False, True])
def test_the_table_fits_100_columns_and_names_what_it_left_out(rows, run_ids):
    text = _shown(rows, 100, run_ids=run_ids)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines[1:]) <= 100  # the title: one line, below
    assert lines[0].startswith("study t: a long description")
    header = next(line for line in lines if line.startswith("backend") or "img/s" in line)
    assert "img/s" in header and "speedup" in header
    assert "left out to fit 100 columns:" in text and "(--wide shows them)" in text
    left_out = text.split("left out to fit 100 columns:")[1].split("(--wide")[0]
    assert "baseline" in left_out  # the least needed go first
    legend = text.split("(--wide shows them)")[1]
    # the legend defines what is shown, and nothing that is not
    assert "speedup:" in legend and "baseline:" not in legend and "step ms:" not in legend
    assert "More: dlscale explain COLUMN, docs/metrics.md." in " ".join(legend.split())


def test_wide_shows_every_column_on_one_line_each(rows):
    text = _shown(rows, 100, wide=True)
    shown, _ = human_layout(rows)
    header = next(line for line in text.splitlines() if line.startswith("backend"))
    assert header.split() == " ".join(c.label for c in shown).split()
    assert len(header.rstrip()) > 100 and "left out" not in text


def test_a_wide_terminal_shows_every_column(rows):
    text = _shown(rows, 250)
    assert "left out" not in text and "baseline" in text and "step ms" in text


def test_columns_empty_in_every_row_are_not_shown(rows):
    synthetic = [dict(r, metrics={**r["metrics"], "eval_accuracy": None}) for r in rows]
    for row in synthetic:
        row["metrics"]["time_to_accuracy_s"] = None
    labels = [c.label for c in human_layout(synthetic)[0]]
    assert "acc." not in labels and "TTA s" not in labels
    assert "acc." in [c.label for c in human_layout(rows)[0]]


def test_the_finding_is_the_stored_figures(rows):
    (ddp2, failed) = findings(rows)
    point = next(r for r in rows if r["config"]["workers"] == 2 and r.get("speedup"))
    low, high = point["speedup_ci95"]
    assert ddp2.startswith(
        f"torch-ddp at 2 workers: {point['speedup']:.2f}x [{low:.2f}, {high:.2f}] (over one "
        "run's windows, which are not independent) over torch-single at 1 worker "
        f"({point['efficiency']:.0%} efficient)"
    )
    comm = point["metrics"]["exposed_comm_fraction"]
    assert f"exposed communication {comm:.0%} of a step" in ddp2
    assert f"accuracy {point['metrics']['eval_accuracy']:.1%}" in ddp2
    assert f"{point['metrics']['time_to_accuracy_s']:.1f} s to 50%" in ddp2
    assert "note: baseline threads differ" in ddp2
    assert failed == "1 run(s) did not complete: torch-ddp at 2 workers"


def _point(backend, workers, img_s, **fields):
    metrics = {"throughput_samples_s": img_s, **fields.pop("metrics", {})}
    return {
        "run_id": f"{backend}-{workers}",
        "run_ids": [f"{backend}-{workers}"],
        "status": "completed",
        "config": {"backend": backend, "workers": workers, "model": "m"},
        "metrics": metrics,
        **fields,
    }


def test_the_finding_says_only_what_was_measured():
    base = _point("torch-single", 1, 100.0, threads_per_worker=1, speedup=1.0)
    machine = _point("torch-single", 1, 180.0, threads_per_worker=2)
    machine["run_ids"] = ["machine"]
    ddp = _point(
        "torch-ddp",
        2,
        192.0,
        speedup=1.92,
        speedup_ci95=[1.79, 2.06],
        efficiency=0.96,
        baseline_run_ids=["torch-single-1"],
        machine_speedup=1.04,
        machine_speedup_ci95=[0.97, 1.12],
        machine_baseline="torch-single x1, 2 thr",
        metrics={
            "exposed_comm_fraction": 0.02,
            "exposed_comm_ci95": 0.04,
            "exposed_comm_significant": False,
        },
    )
    (said,) = findings([base, machine, ddp])
    assert said == (
        "torch-ddp at 2 workers: 1.92x [1.79, 2.06] over torch-single at 1 worker (96% "
        "efficient); exposed communication not significant (2% ±4% of a step); as fast as the "
        "same machine as one 2-thread worker (1.04x [0.97, 1.12], not distinguishable)"
    )
    # no communication measured, no machine point, no interval: none of it is claimed
    bare = dict(ddp, speedup_ci95=None, machine_speedup=None, metrics={"throughput_samples_s": 1.0})
    (said,) = findings([base, bare])
    assert said.endswith("1.92x (no interval: too few samples) over torch-single at 1 worker "
                         "(96% efficient)")  # fmt: skip
    assert "communication" not in said and "machine" not in said
    # over 100%: said whether its interval shows it (the demo's 118% on a drifting machine)
    drift = dict(bare, speedup=2.37, speedup_ci95=[1.63, 3.26], efficiency=1.185,
                 efficiency_ci95=[0.815, 1.63])  # fmt: skip
    (said,) = findings([base, drift])
    assert said.endswith("(118% efficient, but its interval holds 100%: not shown faster than "
                         "linear)")  # fmt: skip
    cache = dict(drift, speedup_ci95=[2.2, 2.5], efficiency_ci95=[1.1, 1.25])
    (said,) = findings([base, cache])
    assert "not measured reliably (2.37x [2.20, 2.50] is above 2 workers' 2x" in said


def test_the_finding_compares_backends_side_by_side():
    rows = [
        _point("a", 2, 200.0, run_rows=None, interval="runs"),
        _point("b", 2, 100.0),
    ]
    for row in rows:
        row["metrics"]["throughput_windows_samples_s"] = [
            row["metrics"]["throughput_samples_s"]
        ] * 3
    said = findings(rows)
    assert said[0].startswith("at 2 workers the fastest was a (200.0 img/s); of its speed: b 0.50x")
    assert said[1:] == ["a at 2 workers: 200.0 img/s", "b at 2 workers: 100.0 img/s"]


def test_explain_finds_a_column_by_its_label_or_export_name():
    assert find_column("eff.") is find_column("efficiency") is find_column("EFF")
    assert find_column("vs 1×all").name == "machine_speedup"
    for bad in ("", "spedup", "\x1b[31m"):
        with pytest.raises(KeyError):
            find_column(bad)
    lines = describe(find_column("step ms"))
    assert lines[0] == "step ms (step_time_p50_ms in Markdown, CSV and --json)"
    assert "noise guard kept" in lines[1]
    assert all(c.short or c.definition or c.show == "exports" for c in COLUMNS)


def test_explain_on_the_command_line():
    def explain(*words: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "dlscale", "explain", *words]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    done = explain("speedup")
    assert done.returncode == 0 and "Fieller" in done.stdout
    wrong = explain("spedup")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.strip() == (
        "dlscale: error: no column 'spedup' (did you mean speedup, speedup low, speedup "
        "high?): dlscale explain lists them all"
    )


def test_the_time_left_comes_from_the_runs_already_timed():
    clock = StudyClock(workers=[1, 1, 2], runs_each=2)
    assert clock.seconds_left() is None and "after the first run" in clock.words()
    clock.record(0, 10.0)
    assert clock.seconds_left() == pytest.approx(5 * 10.0)  # nothing else timed: like it
    clock.record(2, 30.0)
    # point 0: 1 more at 10 s; point 1 (1 worker, never run): 2 at point 0's 10 s; point 2: 30
    assert clock.seconds_left() == pytest.approx(10 + 2 * 10 + 30)
    clock.plan([2])  # the stopping rule added a run
    assert clock.seconds_left() == pytest.approx(10 + 2 * 10 + 2 * 30)
    clock.skip(1)
    assert clock.seconds_left() == pytest.approx(10 + 10 + 2 * 30)
    assert clock.words() == "about 80 s left"


def test_the_notes_say_what_the_noise_guard_did_and_a_loaded_probe():
    from dlscale.report.cells import notes

    row = {
        "config": {},
        "metrics": {
            "windows_left_out": 2,
            "noise_guard_shift": 0.028,
            "exposed_comm_noisy": True,
            "exposed_comm_outside_load_max": 0.31,
            "exposed_comm_steal_max": 0.02,
        },
    }
    assert notes(row) == "2 loaded window(s) left out (+2.8%), comm probe loaded 31%"
    assert notes({"config": {}, "metrics": {"windows_left_out": 0}}) is None
    # a diverged run: its speed stands, its loss and accuracy do not, and the table says so
    diverged = {"config": {}, "runs": 3, "metrics": {"runs_diverged": 1}}
    assert notes(diverged) == "loss diverged in 1 of 3 runs"
    assert notes({**diverged, "metrics": {"runs_diverged": 3}}) == "loss diverged"
    assert notes({**diverged, "metrics": {"runs_diverged": 0}}) is None


def test_ls_runs_fits_100_columns_and_wide_shows_all():
    def ls_runs(*flags: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "dlscale", "ls", "runs", "--results", str(DATA / "results"),
             *flags],
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "100"},
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout

    fitted, wide = ls_runs(), ls_runs("--wide")
    assert max(map(len, fitted.splitlines())) <= 100
    assert "left out to fit 100 columns" in fitted
    assert max(map(len, wide.splitlines())) > 100 and "left out" not in wide
    header = next(line for line in wide.splitlines() if "run_id" in line)
    assert {"backend", "workers", "step", "baseline", "status", "run_id"} <= set(header.split())


def test_the_finding_states_no_figure_a_damaged_result_lacks():
    nan = _point("torch-ps", 2, float("nan"), speedup=float("nan"), efficiency=float("nan"))
    ok = _point("torch-ps", 2, 150.0, speedup=1.5, efficiency=0.75, speedup_ci95=[1.2, 1.9])
    ok["config"]["ps_mode"], nan["config"]["ps_mode"] = "sync", "async"
    assert findings([nan, ok]) == [
        "torch-ps (ps_mode=sync) at 2 workers: 1.50x [1.20, 1.90] over its baseline (75% efficient)"
    ]


def test_the_whole_machine_reference_row_says_so(rows):
    """Two ``torch-single 1`` rows that differ in threads: the one every core trains, which
    ``vs 1×all`` is over, reads ``8 all`` in thr/w (the legend says what ``all`` means)."""
    import dataclasses

    results = RunStore(DATA / "results").results()
    single = next(r for r in results if r.config["backend"] == "torch-single")
    whole = dataclasses.replace(single, run_id=single.run_id + "-all", threads_per_worker=8,
                                config={**single.config, "threads_per_worker": 8})  # fmt: skip
    column = find_column("thr/w")
    shown = {row["threads_per_worker"]: column.text(row)
             for row in add_scaling([*results, whole]) if row["config"]["workers"] == 1
             and row["config"]["backend"] == "torch-single"}  # fmt: skip
    assert shown == {2: "2", 8: "8 all"}


def test_an_option_set_for_every_row_is_said_under_the_table(rows):
    """``--set compression=fp16`` on every point: no column tells the rows apart by it, and
    the caption says it; an option at its default is not said."""
    fp16 = [{**row, "config": {**row["config"], "compression": "fp16"}} for row in rows]
    _, caption = human_layout(fp16)
    assert "compression fp16" in caption
    plain = [{**row, "config": {**row["config"], "compression": "none"}} for row in rows]
    assert not any(item.startswith("compression") for item in human_layout(plain)[1])
    hostile = [
        {**row, "config": {**row["config"], "script_args": "[bold]x[/] <b>"}} for row in rows
    ]
    shown = _shown(hostile, 200)  # a user's text in the caption stays literal
    assert "script_args [bold]x[/] <b>" in " ".join(shown.split())


def test_a_table_that_left_its_notes_out_says_whose_they_are(rows):
    text = " ".join(_shown(rows, 100).split())
    assert "left out to fit 100 columns:" in text and "notes (--wide shows them)" in text
    assert "notes: torch-ddp x2: baseline threads differ" in text
    loaded = [dict(r, metrics={**r["metrics"], "noisy": True, "outside_load_max": 0.52})
              for r in rows if r["status"] == "completed"]  # fmt: skip
    text = " ".join(_shown(loaded, 100).split())
    assert ("notes: torch-single x1: loaded 52%; torch-ddp x1: loaded 52%; torch-ddp x2: "
            "loaded 52%, baseline threads differ") in text  # fmt: skip
    loaded.append(dict(loaded[-1], config={**loaded[-1]["config"], "workers": 4}))
    text = " ".join(_shown(loaded, 100).split())
    assert "4 points have notes (--wide shows them): torch-single x1, torch-ddp x1, " \
           "torch-ddp x2, torch-ddp x4" in text  # fmt: skip
    assert "have notes" not in " ".join(_shown(loaded, 250).split())  # the column shows them


def test_many_scaled_points_get_a_headline_each_and_the_rest_is_the_table():
    rows = [_point("torch-single", 1, 100.0, speedup=1.0)]
    for number in range(8):
        measured = {"exposed_comm_fraction": 0.1, "eval_accuracy": 0.9}
        rows.append(_point(f"engine-{number}", 2, 150.0 + number, speedup=1.5 + number / 100,
                           speedup_ci95=[1.4, 1.6 + number / 100], efficiency=0.75,
                           baseline_run_ids=["torch-single-1"], metrics=measured))  # fmt: skip
    rows[-1]["runs_left_out"] = ["r"]
    said = findings(rows)
    headlines = said[:6]
    assert headlines[0] == (
        "engine-7 at 2 workers: 1.57x [1.40, 1.67] over torch-single at 1 worker (75% "
        "efficient); see its notes"
    )
    assert all(len(line) < 110 for line in said[:6]) and "communication" not in said[1]
    assert said[6] == "2 more scaled point(s): see the table"
    assert said[7] == "each point's communication, accuracy and notes: the table"
    # three or fewer are said in full
    (*full, _side) = findings(rows[:4])
    assert all("exposed communication 10% of a step; accuracy 90.0%" in line for line in full)
