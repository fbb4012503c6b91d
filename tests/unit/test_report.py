"""The report from a fixed results directory (tests/data/results, made by a real study)."""

from pathlib import Path

import pytest

from dlscale.metrics.scaling import add_scaling
from dlscale.report.figures import rank_spread, study_figures
from dlscale.report.html import build_html
from dlscale.report.tables import to_csv, to_markdown
from dlscale.store import RunStore

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def rows():
    return add_scaling(RunStore(DATA / "results").results())


def test_tables_match_golden_files(rows):
    assert to_markdown(rows) == (DATA / "golden" / "runs.md").read_text()
    assert to_csv(rows) == (DATA / "golden" / "runs.csv").read_text()


def test_every_figure_of_a_study_with_accuracy_is_built(rows):
    keys = [f.key for f in study_figures(rows)]
    assert keys == [
        "throughput",
        "speedup",
        "efficiency",
        "breakdown",
        "side_by_side",
        "tta",
        "tta_split",
        "accuracy_by_epoch",
        "accuracy_by_elapsed",
        "loss_by_epoch",
        "loss_by_elapsed",
        "train_loss",
        "ranks",
    ]


def test_throughput_ideal_line_is_baseline_times_workers(rows):
    figure = next(f for f in study_figures(rows) if f.key == "throughput")
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    ideal = next(s for s in figure.series if s.name == "torch-ddp: ideal (linear)")
    base = single["metrics"]["throughput_img_s"]
    assert ideal.x == [1, 2]
    assert ideal.y == pytest.approx([base, 2 * base])


def test_tta_split_is_hardware_times_statistics(rows):
    figure = next(f for f in study_figures(rows) if f.key == "tta_split")
    single = next(r for r in rows if r["config"]["backend"] == "torch-single")
    ddp2 = next(r for r in rows if r["config"]["workers"] == 2 and r["status"] == "completed")
    tta, hardware, stats = (s.y[0] for s in figure.series)
    assert tta == pytest.approx(
        single["metrics"]["time_to_accuracy_s"] / ddp2["metrics"]["time_to_accuracy_s"]
    )
    assert hardware == pytest.approx(
        ddp2["metrics"]["throughput_img_s"] / single["metrics"]["throughput_img_s"]
    )
    assert stats == pytest.approx(
        single["metrics"]["epochs_to_accuracy"] / ddp2["metrics"]["epochs_to_accuracy"]
    )


def _row(per_rank):
    return {
        "run_id": "r",
        "status": "completed",
        "config": {"backend": "torch-ddp", "workers": len(per_rank)},
        "metrics": {"rank_step_time_mean_ms": per_rank},
    }


def test_stragglers_are_flagged():
    slow = rank_spread([_row({"0": 100.0, "1": 100.0, "2": 120.0})])
    assert slow is not None and len(slow.flags) == 1 and "rank 2" in slow.flags[0]
    even = rank_spread([_row({"0": 100.0, "1": 101.0})])
    assert even is not None and even.flags == []


def test_html_is_self_contained_and_lists_failures(rows):
    page, plots = build_html(rows, title="t", source="tests/data/results")
    assert plots == len(study_figures(rows))
    assert f'data-plots="{plots}"' in page
    assert "<script src=" not in page  # no CDN: plotly.js is inline
    assert "Failed runs (1)" in page and "data set too small for the batch size" in page
    assert rows[0]["environment"]["cpu_model"] in page
    assert "dlscale run" in page  # the command that reproduces the study


def test_report_command_writes_html_figures_and_tables(tmp_path: Path, cli):
    result = cli(
        "report",
        "--results",
        str(DATA / "results"),
        "--out",
        str(tmp_path / "r.html"),
        "--figures",
        str(tmp_path / "fig"),
        "--markdown",
        str(tmp_path / "runs.md"),
        "--csv",
        str(tmp_path / "runs.csv"),
    )
    assert result.returncode == 0, result.stderr
    assert "report:" in result.stdout
    assert (tmp_path / "runs.md").read_text() == (DATA / "golden" / "runs.md").read_text()
    pngs = sorted((tmp_path / "fig").glob("*.png"))
    pdfs = sorted((tmp_path / "fig").glob("*.pdf"))
    assert len(pngs) == len(pdfs) == 13
    from PIL import Image

    with Image.open(pngs[0]) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 20  # drawn, not blank


def test_report_without_results_is_a_clear_error(tmp_path: Path, cli):
    result = cli("report", "--results", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "no results directory" in result.stderr and "Traceback" not in result.stderr
