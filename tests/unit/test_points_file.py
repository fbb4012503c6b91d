"""The points file (issue 45, "every printed figure stored"): what the finding and the table
print, kept at full precision beside the runs, and recomputed by hand from it and from the
raw events."""

import json
import statistics
from pathlib import Path

import pytest

from dlscale.contract.files import write_json_atomic
from dlscale.metrics.points_file import POINT_FIGURES, points_path, read_points, write_points
from dlscale.metrics.scaling import SCALING_KEYS, add_scaling
from dlscale.store import RunStore

DATA = Path(__file__).resolve().parent.parent / "data"


def _events(run_dir: Path, rank: int) -> list[dict]:
    lines = (run_dir / f"events.rank{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_the_points_file_holds_the_printed_figures_and_recomputes_by_hand(tmp_path: Path):
    rows = add_scaling(RunStore(DATA / "results").results())
    path = write_points(RunStore(tmp_path), "fixture", rows)
    assert path == points_path(tmp_path, "fixture") and path.name.startswith("points-fixture-")
    document = json.loads(path.read_text())
    assert document["schema"] == "dlscale.points/2" and document["study"] == "fixture"
    assert len(document["points"]) == len(rows)
    for row, kept in zip(rows, document["points"], strict=True):
        assert kept["run_ids"] == row["run_ids"] and kept["config"] == row["config"]
        assert (kept["sample_unit"], kept["units_per_sample"]) == ("image", 1)  # stored before
        for key in SCALING_KEYS:  # ratios and intervals: not rounded
            assert kept[key] == (list(row[key]) if isinstance(row[key], tuple) else row[key])
        for key in POINT_FIGURES:
            assert kept["figures"][key] == row["metrics"].get(key), key
    (ddp2,) = [p for p in document["points"] if p["config"]["workers"] == 2 and p["speedup"]]
    (base,) = [p for p in document["points"] if p["run_ids"] == ddp2["baseline_run_ids"]]
    # by hand, from the file: img/s the mean of the windows' (one run), speedup the ratio
    figures = ddp2["figures"]
    assert figures["throughput_samples_s"] == pytest.approx(
        statistics.fmean(figures["throughput_windows_samples_s"]), rel=1e-12
    )
    assert ddp2["speedup"] == pytest.approx(
        figures["throughput_samples_s"] / base["figures"]["throughput_samples_s"], rel=1e-12
    )
    assert ddp2["efficiency"] == pytest.approx(ddp2["speedup"] / 2, rel=1e-12)
    # and each window's img/s from the raw events: both ranks' images over the slower rank's
    run_dir = DATA / "results" / ddp2["run_ids"][0]
    windows = [[e for e in _events(run_dir, rank) if e["event"] == "window"] for rank in (0, 1)]
    by_hand = [
        (a["samples"] + b["samples"]) / max(a["duration_s"], b["duration_s"])
        for a, b in zip(*windows, strict=True)
        if a.get("kind", "measure") == "measure"
    ]
    assert figures["throughput_windows_samples_s"] == pytest.approx(by_hand, rel=1e-12)


def test_a_study_without_points_writes_no_file_and_a_nan_is_null(tmp_path: Path):
    assert write_points(RunStore(tmp_path), "s", []) is None and not list(tmp_path.iterdir())
    rows = add_scaling(RunStore(DATA / "results").results())
    rows[0]["metrics"] = {**rows[0]["metrics"], "throughput_cv": float("nan")}
    path = write_points(RunStore(tmp_path), "s", rows)
    assert json.loads(path.read_text())["points"][0]["figures"]["throughput_cv"] is None


def test_a_points_file_of_images_per_second_reads_as_before(tmp_path: Path):
    """A points file written before the unit was stored (schema 1: ``throughput_img_s``...)
    reads with today's names, the same figures, in images."""
    rows = add_scaling(RunStore(DATA / "results").results())
    new = read_points(write_points(RunStore(tmp_path / "new"), "s", rows))
    old = json.loads(json.dumps(new).replace("_samples_s", "_img_s"))
    for point in old["points"]:
        del point["sample_unit"], point["units_per_sample"]
    path = tmp_path / "points-s.json"
    write_json_atomic(path, "points", {**old, "schema": "dlscale.points/1"})
    assert '"throughput_img_s"' in path.read_text()
    assert read_points(path) == {**new, "schema": "dlscale.points/1"}
