"""`dlscale compare` and `dlscale ls runs` read at 80 and 100 columns: golden files made from
the stored results of tests/data/results, and no line past the width.

To remake the golden files after a deliberate change: ``UPDATE_GOLDEN=1 pytest THIS_FILE``,
then read the diff."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dlscale.cli import main as dlscale_main
from dlscale.store import read_json, write_json_atomic

DATA = Path(__file__).parent.parent / "data"
GOLDEN = DATA / "golden"

CANDIDATE = {  # the candidate's img/s and time to accuracy, as a share of the baseline's
    "tiny-torch-single-digits-w1-749c9ebe62": (0.8, 1.2),
    "tiny-torch-ddp-digits-w1-72be0cb5d8": (1.0, 1.0),
    "tiny-torch-ddp-digits-w2-adbf96d3da": (1.3, 0.9),
}


def candidate_results(root: Path) -> Path:
    """tests/data/results with each completed run's img/s (mean and windows) and time to
    accuracy scaled as `CANDIDATE` says."""
    shutil.copytree(DATA / "results", root)
    for run_id, (speed, tta) in CANDIDATE.items():
        path = root / run_id / "result.json"
        document = read_json(path, "result")
        metrics = document["metrics"]
        metrics["throughput_img_s"] *= speed
        windows = metrics["throughput_windows_img_s"]
        metrics["throughput_windows_img_s"] = [w * speed for w in windows]
        metrics["time_to_accuracy_s"] *= tta
        write_json_atomic(path, "result", document)
    return root


def run(capsys, monkeypatch, columns: int, *args: str) -> str:
    """The command's output at ``columns`` (off a terminal: $COLUMNS), each line's trailing
    blanks dropped."""
    monkeypatch.setenv("COLUMNS", str(columns))
    code = dlscale_main(list(args))
    captured = capsys.readouterr()
    assert code == 0 and captured.err == "", captured.err
    return "".join(line.rstrip() + "\n" for line in captured.out.splitlines())


def matches_golden(out: str, name: str) -> None:
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(out)
    assert out == golden.read_text()


@pytest.fixture
def stores(tmp_path: Path, monkeypatch) -> Path:
    """A (tests/data/results) and B (`candidate_results`) as ./a and ./b: paths that read the
    same on every machine."""
    shutil.copytree(DATA / "results", tmp_path / "a")
    candidate_results(tmp_path / "b")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("columns", [80, 100])
def test_compare_fits_the_width_and_matches_its_golden_file(stores, capsys, monkeypatch, columns):
    out = run(capsys, monkeypatch, columns, "compare", "a", "b")
    assert max(map(len, out.splitlines())) <= columns
    matches_golden(out, f"compare-{columns}.txt")
    header = next(line for line in out.splitlines() if "verdict" in line).split()
    # the settings that tell the points apart and the figures stay whole
    assert {"backend", "workers", "B", "ratio", "verdict"} <= set(header)
    assert ("TTA" in header) == (columns == 100)  # at 80: left out, and said so
    assert "0.800 [" in out and "possible regression" in out and "possibly faster" in out
    assert "…" not in out  # nothing cut
    assert "model tiny, data digits" in out  # said once, under the table


def test_compare_wide_shows_every_column_and_json_is_as_before(stores, capsys, monkeypatch):
    wide = run(capsys, monkeypatch, 80, "compare", "a", "b", "--wide")
    header = next(line for line in wide.splitlines() if "verdict" in line).split()
    assert {"A", "B", "p", "n", "A/B"} <= set(header) and "left out" not in wide
    fitted = run(capsys, monkeypatch, 80, "compare", "a", "b")
    assert "left out to fit 80 columns: " in fitted and "(--wide shows them)" in fitted
    narrow = run(capsys, monkeypatch, 80, "compare", "a", "b", "--json")
    assert narrow == run(capsys, monkeypatch, 250, "compare", "a", "b", "--json")
    assert narrow.count("\n") == 1 and '"matched": [' in narrow


def test_compare_says_the_options_every_point_shares_under_the_table(stores, capsys, monkeypatch):
    """An option every point set the same (and a backend's option the others lack) is no
    column: it is said once under the table."""
    for root in (stores / "a", stores / "b"):
        for path in root.glob("*/result.json"):
            document = read_json(path, "result")
            document["config"]["precision"] = "float64"
            write_json_atomic(path, "result", document)
    out = run(capsys, monkeypatch, 100, "compare", "a", "b")
    assert "precision float64" in out and "precision=" not in out
    assert "settings" not in next(line for line in out.splitlines() if "verdict" in line)


@pytest.mark.parametrize("columns", [80, 100])
def test_ls_runs_keeps_backend_and_workers(capsys, monkeypatch, columns):
    out = run(capsys, monkeypatch, columns, "ls", "runs", "--results", str(DATA / "results"))
    assert max(map(len, out.splitlines())) <= columns
    out = out.replace(str(DATA / "results"), "tests/data/results")
    matches_golden(out, f"ls-runs-{columns}.txt")
    header = next(line for line in out.splitlines() if "run_id" in line).split()
    assert {"backend", "workers", "speedup", "status"} <= set(header)
    assert ("eff." in header) == (columns == 100)
    assert "…72be0cb5d8" in out  # the run id's end: the columns say its start
    assert "left out to fit" in out and "the run ids' start" in out


def test_compare_shows_a_setting_that_tells_points_apart_literally(stores, capsys, monkeypatch):
    """A setting that differs between the points is a column, its value user text: shown as it
    is, never read as markup."""
    for root in (stores / "a", stores / "b"):
        path = root / "tiny-torch-ddp-digits-w1-72be0cb5d8" / "result.json"
        document = read_json(path, "result")
        document["config"]["data_dir"] = "/d[/x][bold]"
        write_json_atomic(path, "result", document)
    out = run(capsys, monkeypatch, 100, "compare", "a", "b")
    assert "settings" in next(line for line in out.splitlines() if "verdict" in line)
    assert "data_dir=/d[/x][bold]" in out
    assert max(map(len, out.splitlines())) <= 100
