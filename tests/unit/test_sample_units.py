"""Throughput stored in samples per second with its unit, and read in img/s or tok/s
(dlscale.metrics.units; docs/metrics.md, "Throughput and its unit").

A result stored before the unit was (``throughput_img_s``...) reads as before, in images; a
run of token sequences (``sample_unit`` token, ``units_per_sample`` its block_size) shows
tokens per second = samples per second x block_size wherever a throughput is shown; a table of
both shows samples per second under ``samples/s``."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlscale.cli.compare_table import comparison_table
from dlscale.cli.study_progress import FinishedRun, figure_of, run_line
from dlscale.cli.tables import points_table
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.launchers.base import LaunchOutcome
from dlscale.metrics.compare import compare
from dlscale.metrics.impossible import impossible_figures
from dlscale.metrics.input_bound import input_findings
from dlscale.metrics.scaling import add_scaling
from dlscale.metrics.units import IMAGES, Rate, common_rate, rate_of, shown
from dlscale.report.figures import throughput
from dlscale.report.finding import findings
from dlscale.report.layout import human_layout, legend
from dlscale.report.tables import to_csv
from dlscale.runner import result_of
from dlscale.store import RunStore
from tests.unit.test_metrics import window

DATA = Path(__file__).resolve().parent.parent / "data"
TOKENS = {"sample_unit": "token", "units_per_sample": 64}
"""What a GPT run with block_size 64 stores beside its throughput."""


@pytest.fixture(scope="module")
def stored() -> list[Result]:
    """tests/data/results: runs stored before the unit was (schemas 1 to 3,
    ``throughput_img_s``)."""
    return RunStore(DATA / "results").results()


def _in_tokens(rows: list[dict]) -> list[dict]:
    """The rows as if their runs had trained on sequences of 64 tokens (same samples/s)."""
    rows = copy.deepcopy(rows)
    for row in rows:
        row["metrics"] = {**row["metrics"], **TOKENS}
        for run in row.get("run_rows") or []:
            run["metrics"] = {**run["metrics"], **TOKENS}
    return rows


def _cells(table) -> dict[str, list[str]]:
    return {str(column.header): [str(c) for c in column.cells] for column in table.columns}


def test_an_old_result_with_img_s_reads_as_before_same_figures(stored, tmp_path: Path):
    """Every figure a schema-3 result holds under ``throughput_img_s``,
    ``throughput_ci95_img_s`` and ``throughput_windows_img_s`` reads under the samples' names,
    unchanged, in images (one a sample); its run id is its folder's, as before."""
    for result in stored:
        raw = json.loads((DATA / "results" / result.run_id / "result.json").read_text())
        assert int(raw["schema"].rpartition("/")[2]) < 4  # written before the unit was
        assert "throughput_samples_s" not in raw["metrics"]
        old = raw["metrics"]
        for name in ("throughput", "throughput_ci95", "throughput_windows"):
            assert result.metrics[f"{name}_samples_s"] == old.get(f"{name}_img_s"), name
            assert f"{name}_img_s" not in result.metrics
        assert (result.metrics["sample_unit"], result.metrics["units_per_sample"]) == ("image", 1)
        assert rate_of(result.metrics).of(result.metrics) == old.get("throughput_img_s")
    # stored again (schema 4) and read back: the same figures, under today's names
    shutil.copytree(DATA / "results", tmp_path / "r")
    store = RunStore(tmp_path / "r", on_warning=pytest.fail)
    for result in stored:
        store.write_result(result.run_id, result)
    again = {r.run_id: r for r in store.results()}
    assert {r.run_id: r.metrics for r in stored} == {k: r.metrics for k, r in again.items()}
    text = (tmp_path / "r" / stored[0].run_id / "result.json").read_text()
    assert '"schema": "dlscale.result/4"' in text and "throughput_img_s" not in text


def test_an_old_result_shows_img_s_in_every_reader(stored):
    rows = add_scaling(stored)
    assert common_rate(rows) == IMAGES and IMAGES.label == "img/s"
    columns, _ = human_layout(rows)
    assert "img/s" in [c.label for c in columns]
    assert to_csv(rows).splitlines()[0].split(",")[9:11] == [
        "throughput_img_s",
        "throughput_ci95_img_s",
    ]
    figure = throughput(rows)
    assert figure is not None and figure.y_label == "images/s (all workers)"


def test_a_token_result_shows_tok_s_samples_s_times_64_in_the_table_row(stored):
    rows = add_scaling(stored)
    tokens = _in_tokens(rows)
    images, shown_tokens = (
        _cells(points_table(rows, wide=True)),
        _cells(points_table(tokens, wide=True)),
    )
    assert "tok/s" in shown_tokens and "img/s" not in shown_tokens
    for row, image, token in zip(rows, images["img/s"], shown_tokens["tok/s"], strict=True):
        samples = row["metrics"].get("throughput_samples_s")
        if samples is None:  # a run that failed: nothing in either
            assert image == token == "-"
            continue
        assert float(image) == pytest.approx(samples, abs=0.05)
        assert float(token) == pytest.approx(samples * 64, abs=0.05)
    # its interval too, and the legend and the exports say tokens
    for row, token in zip(rows, shown_tokens["±95%"], strict=True):
        half = row["metrics"].get("throughput_ci95_samples_s")
        assert (
            token == "-"
            if half is None
            else float(token.rstrip("w")) == pytest.approx(half * 64, abs=0.05)
        )
    columns, _ = human_layout(tokens)
    said = legend(columns)
    assert "tok/s: tokens per second, all workers" in said and "img/s" not in said
    (batch,) = [c for c in columns if c.name == "batch_size_per_worker"] or [None]
    assert batch is None or "token sequences" in batch.definition  # in the caption, else
    header, first = to_csv(tokens).splitlines()[:2]
    assert header.split(",")[9:11] == ["throughput_tok_s", "throughput_ci95_tok_s"]
    samples = rows[0]["metrics"]["throughput_samples_s"]
    assert float(first.split(",")[9]) == pytest.approx(samples * 64, abs=0.05)
    figure = throughput(tokens)
    assert figure is not None and figure.y_label == "tokens/s (all workers)"
    assert figure.series[0].y[0] == pytest.approx(rows[0]["metrics"]["throughput_samples_s"] * 64)


def test_a_token_runs_progress_line_says_tok_s(stored):
    result = stored[0]
    tokens = replace(result, metrics={**result.metrics, **TOKENS})
    outcome = SimpleNamespace(state="completed", result=tokens)
    value, rate = figure_of(outcome)
    samples = result.metrics["throughput_samples_s"]
    assert rate == "tok/s" and value == pytest.approx(samples * 64)
    line = run_line(
        FinishedRun(number=1, total=2, name="torch-ddp x1 gpt-nano #0", state="completed",
                    throughput=value, rate=rate, took_s=9.0),
        17.0,
        SimpleNamespace(seconds_left=lambda: None),
    )  # fmt: skip
    assert f"completed, {samples * 64:.1f} tok/s in 9 s" in line
    assert figure_of(SimpleNamespace(state="completed", result=result))[1] == "img/s"
    assert figure_of(SimpleNamespace(state="failed", result=result)) == (None, "img/s")


def test_a_table_of_images_and_tokens_shows_samples_s(stored):
    rows = add_scaling(stored)
    mixed = rows[:1] + _in_tokens(rows[1:])
    assert common_rate(mixed) == Rate(None)
    cells = _cells(points_table(mixed, wide=True))
    assert "samples/s" in cells and "img/s" not in cells and "tok/s" not in cells
    for row, value in zip(mixed, cells["samples/s"], strict=True):
        samples = row["metrics"].get("throughput_samples_s")
        assert value == "-" if samples is None else float(value) == pytest.approx(samples, abs=0.05)
    assert to_csv(mixed).splitlines()[0].split(",")[9] == "throughput_samples_s"
    columns, _ = human_layout(mixed)
    assert "samples/s: samples (images or token sequences) per second" in legend(columns)


def test_the_finding_and_the_doubts_say_the_points_unit(stored):
    rows = _in_tokens(add_scaling(stored))
    text = " ".join(findings(rows))
    assert "img/s" not in text
    single = next(r for r in rows if r["config"]["workers"] == 1 and r["status"] == "completed")
    assert shown(single["metrics"]).endswith(" tok/s")
    assert shown(single["metrics"]) == (
        f"{single['metrics']['throughput_samples_s'] * 64:.1f} tok/s"
    )


def test_compare_shows_each_sides_mean_in_tok_s(stored):
    rows = [r.row() for r in stored]
    tokens = [{**r, "metrics": {**r["metrics"], **TOKENS}} for r in rows]
    comparison = compare(tokens, tokens)
    table, _, said = comparison_table(comparison, width=200, wide=True)
    cells = _cells(table)
    assert "A tok/s" in cells and "B tok/s" in cells and "tok/s" in said
    point = comparison.matched[0]
    assert point.sample_unit == "token" and point.units_per_sample == 64
    assert float(cells["A tok/s"][0]) == pytest.approx(point.throughput.mean_a * 64, abs=0.05)
    images, _, _ = comparison_table(compare(rows, rows), width=200, wide=True)
    assert "A img/s" in _cells(images)


def test_compare_shows_samples_s_where_the_sides_count_other_units(stored):
    """A side stored with another unit or sequence length (a damaged or foreign result) is
    not multiplied by the other side's: both are shown in samples/s."""
    rows = [r.row() for r in stored]
    tokens = [{**r, "metrics": {**r["metrics"], **TOKENS}} for r in rows]
    other = [{**r, "metrics": {**r["metrics"], "sample_unit": "token", "units_per_sample": 7}}
             for r in rows]  # fmt: skip
    comparison = compare(tokens, other)
    point = comparison.matched[0]
    assert point.sample_unit is None and point.units_per_sample == 1
    cells = _cells(comparison_table(comparison, width=200, wide=True)[0])
    assert "B samples/s" in cells, cells.keys()
    assert float(cells["B samples/s"][0]) == pytest.approx(point.throughput.mean_b, abs=0.05)


def test_an_impossible_window_of_a_token_run_is_said_in_tok_s():
    metrics = {
        "throughput_samples_s": 10.0,
        "throughput_windows_samples_s": [10.0, -2.0],
        **TOKENS,
    }
    _, said = impossible_figures(metrics)
    assert said is not None and said.startswith("throughput of window 2 is -128.0 tok/s")


def test_the_input_line_says_the_points_unit(stored):
    tokens = _in_tokens(add_scaling(stored))
    said = [finding.sentence() for finding in input_findings(tokens)]
    assert said and all(" tok/s per worker" in text for text in said)


def test_a_result_records_its_unit_from_its_workload(tmp_path: Path):
    """The writer records ``sample_unit`` and ``units_per_sample`` once, from the point's
    workload: an image run's image, 1; a GPT's on tokens, its block_size; stored and read
    back as written."""
    from tests.unit.test_store_values import _run_with

    result = _run_with(tmp_path / "images", [1.0, 2.0])
    assert result.metrics["sample_unit"] == "image" and result.metrics["units_per_sample"] == 1
    config = RunConfig.make(
        model="gpt-nano", dataset="tokens", backend="torch-single", workers=1, block_size=32
    )
    run_dir = tmp_path / config.run_id()
    run_dir.mkdir()
    lines = [{"schema": 3, **window(0, i, d, [10.0] * 4)} for i, d in enumerate([1.0, 2.0])]
    (run_dir / "events.rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = {"run_id": config.run_id(), "study": "t", "command": ["t"]}
    outcome = LaunchOutcome(ok=True, returncodes={0: 0})
    gpt = result_of(spec, config, run_dir, outcome, started_at=1.7e9)
    assert gpt.status == "completed", gpt.error
    assert (gpt.metrics["sample_unit"], gpt.metrics["units_per_sample"]) == ("token", 32)
    RunStore(tmp_path).write_result(config.run_id(), gpt)
    (stored,) = RunStore(tmp_path, on_warning=pytest.fail).results()
    assert stored == gpt
    samples = gpt.metrics["throughput_samples_s"]
    assert shown(stored.metrics) == f"{samples * 32:.1f} tok/s"


def test_a_unit_this_dlscale_does_not_know_is_shown_in_samples():
    """A stored unit not of :data:`~dlscale.contract.workload.KINDS` (a hand edit, a planted
    ``[red]`` markup) never becomes a label: the figure reads in samples per second."""
    for unit in ("[red]x", "frame", 3):
        metrics = {"throughput_samples_s": 10.0, "sample_unit": unit, "units_per_sample": 5}
        rate = rate_of(metrics)
        assert rate.label == "samples/s" and rate.of(metrics) == 10.0
    assert common_rate([{"metrics": metrics}, {"metrics": {"throughput_samples_s": 1.0}}]) == (
        Rate(None)
    )
