"""A row whose figure cannot be taken as it reads carries ``!`` in a column a narrow terminal
never drops, defined under the table, the notes saying why; a wait longer than its window is
said as a multiple, not a share above 100% (issue 71, item 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlscale.cli import main as dlscale_main
from dlscale.report.cells import doubt_mark, notes
from dlscale.store import read_json, write_json_atomic

DATA = Path(__file__).parent.parent / "data"
WAITED = "tiny-torch-single-digits-w1-749c9ebe62"  # a one-process point
NEGATIVE = "tiny-torch-ddp-digits-w2-adbf96d3da"
PLAIN = "tiny-torch-ddp-digits-w1-72be0cb5d8"


def _doubted(root: Path) -> Path:
    shutil.copytree(DATA / "results", root)
    for run_id, changes in ((WAITED, {"waited": True, "run_delay_max": 1.48}),
                            (NEGATIVE, {"exposed_comm_fraction": -0.07})):  # fmt: skip
        path = root / run_id / "result.json"
        document = read_json(path, "result")
        document["metrics"].update(changes)
        write_json_atomic(path, "result", document)
    return root


def test_ls_runs_marks_the_doubted_rows_at_80_columns(tmp_path, capsys, monkeypatch):
    results = _doubted(tmp_path / "results")
    monkeypatch.setenv("COLUMNS", "80")
    assert dlscale_main(["ls", "runs", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("backend"))
    assert header.split()[:3] == ["backend", "workers", "!"]
    marked = {line.split()[-1][1:]: line.split()[2] == "!" for line in out.splitlines()
              if line.startswith("torch-") and "…" in line}  # fmt: skip
    assert {run[-10:]: marked[run[-10:]] for run in (WAITED, NEGATIVE, PLAIN)} == {
        WAITED[-10:]: True,
        NEGATIVE[-10:]: True,
        PLAIN[-10:]: False,
    }
    said = " ".join(out.split())
    assert "!: a figure not to take as it reads (dlscale explain !)" in said
    assert "waited 1.5x a window (its threads' waits summed)" in said
    assert "148%" not in said


def test_efficiency_above_100_percent_beyond_its_interval_is_marked():
    row = {"config": {"workers": 2}, "metrics": {}, "speedup_ci95": [2.2, 2.9]}
    assert doubt_mark(row) == "!"
    assert doubt_mark({**row, "speedup_ci95": [1.6, 2.4]}) is None  # 100% inside its interval
    assert doubt_mark({"config": {"workers": 2}, "metrics": {"exposed_comm_fraction": 0.0}}) is None
    several = {"config": {"workers": 2}, "layout": [{}, {}], "metrics": {"waited": True}}
    assert doubt_mark(several) is None  # several processes wait for each other: a note only
    assert notes({"metrics": {"waited": True, "run_delay_max": 0.3}}) == "waited 30%"


def test_points_told_apart_by_their_threads_alone_are_named_with_them():
    """The demo's baseline and whole-machine reference are both torch-single x1: where the
    notes column was left out, the line naming the points with notes tells them apart."""
    import copy

    from dlscale.cli.tables import _left_out
    from dlscale.metrics.scaling import add_scaling
    from dlscale.store.results import RunStore

    rows = add_scaling(RunStore(DATA / "results").results())
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    every_core = copy.deepcopy(single)
    every_core["threads_per_worker"] = 4  # the baseline has 2
    noisy = {"noisy": True, "outside_load_max": 0.5}
    for row in [*rows, every_core]:
        row["metrics"] = {**(row.get("metrics") or {}), **noisy}
    lines = _left_out([*rows, every_core], ["notes"], 100)
    said = " ".join(lines)
    assert "torch-single x1 (2 thr)" in said and "torch-single x1 (4 thr)" in said
    assert "torch-ddp x1," in said  # a name said once stays bare
