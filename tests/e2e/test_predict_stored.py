"""``dlscale predict --results DIR`` starts from the study stored there (issue 71): its model,
batch and the 1-worker step its scaling was measured against, named, with nothing measured or
written; a step measured under load in every window is said in one warning."""

import json
import re
import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "data" / "results"
BASELINE = "tiny-torch-single-digits-w1-749c9ebe62"
"""The 1-worker point the fixture's torch-ddp x2 points are measured against."""


@pytest.fixture
def store(tmp_path: Path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(FIXTURE, copy)
    return copy


def _files(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in where.rglob("*") if p.is_file()}


def test_the_stored_studys_model_batch_and_baseline_step_are_predicted(cli, store: Path):
    before = _files(store)
    flags = ("predict", "--workers", "1,64", "--bandwidth", "10Gbit", "--results", str(store))
    run = cli(*flags, env={"COLUMNS": "80"})
    assert run.returncode == 0, run.stderr
    assert "measuring" not in run.stderr and _files(store) == before  # nothing run, nothing written
    # the title, wrapped at 80 columns
    assert run.stdout.startswith(
        "predicted: tiny, batch 32/worker, 10 Gbit/s, 5 us links"
    )  # wrapped
    metrics = json.loads((store / BASELINE / "result.json").read_text())["metrics"]
    step = metrics["step_time_p50_ms"]
    lines = [x for x in run.stdout.splitlines() if x[:1] not in "┏┃┡│└" and str(store) not in x]
    assert max(len(line) for line in lines) <= 80, lines  # a path longer than a line stays whole
    said = re.sub(r"\n {4}", " ", run.stdout)  # each figure's line, wrapped at words to 80
    assert (
        f"  step: {step:.1f} ms, stored in {store}: torch-single x1, the baseline of torch-ddp x2 "
        f"(run {BASELINE})" in said
    )
    # each figure on a line of its own; a 1-worker ring step is the stored step itself
    assert re.search(
        r"^  gradient: 15,848 bytes \(tiny's trainable parameters\)$", run.stdout, re.M
    )
    records = [json.loads(line) for line in cli(*flags, "--json").stdout.splitlines()]
    (one,) = [r for r in records if r["workers"] == 1 and r["strategy"] == "ring"]
    assert one["step_s"] == pytest.approx(step / 1e3) and one["batch"] == 32


def test_a_model_or_batch_the_store_lacks_is_not_taken_from_it(cli, store: Path):
    run = cli("predict", "--workers", "2", "--bandwidth", "10Gbit", "--results", str(store),
              "--model", "resnet20", "--compute-ms", "10")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "predicted: resnet20, batch 32/worker" in run.stdout and "stored in" not in run.stdout
    assert "  step: 10 ms (given)" in run.stdout


def test_a_stored_step_measured_under_load_in_every_window_is_said(cli, store: Path):
    path = store / BASELINE / "result.json"
    result = json.loads(path.read_text())
    windows = result["metrics"]["windows"]
    result["metrics"].update(windows_loaded=windows, outside_load_max=0.42)
    path.write_text(json.dumps(result))
    run = cli("predict", "--workers", "2", "--bandwidth", "10Gbit", "--results", str(store))
    assert run.returncode == 0, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if "under load" in x]
    assert line.startswith(
        "dlscale: warning: the step of torch-single x1 was measured under load in every window "
        "(up to 42% of the machine busy outside it)"
    )


def test_a_planted_model_name_is_one_short_line(cli, store: Path):
    """A stored study whose model is 5,000 characters of markup and escapes: one line naming
    it cut, exit 2; and a --results that is a file is said to be one."""
    for path in store.glob("*/result.json"):
        result = json.loads(path.read_text())
        result["config"]["model"] = "evil\x1b[31m[red]x" + "A" * 5000
        path.write_text(json.dumps(result))
    run = cli("predict", "--workers", "2", "--bandwidth", "10Gbit", "--results", str(store))
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("dlscale: error: unknown model 'evil\\x1b[31m[red]xAAA")
    assert len(run.stderr) < 400 and "\x1b" not in run.stderr
    afile = store / "tiny-torch-single-digits-w1-749c9ebe62" / "result.json"
    run = cli("predict", "--workers", "2", "--bandwidth", "10Gbit", "--model", "tiny",
              "--batch", "7", "--results", str(afile))  # fmt: skip
    assert run.returncode == 2 and "which is not a directory; give --results DIR" in run.stderr


def test_the_studys_model_is_taken_at_a_batch_the_store_lacks(store: Path):
    """--batch 16 without --model: the study's model (tiny), whose step at 16 is then
    measured; never the default model. The store is read once for every batch."""
    import argparse

    from dlscale.cli.stored_profile import stored_points, stored_profile, study_profile

    args = argparse.Namespace(model=None, batch="16,32", framework=None, compute_ms=None,
                              results=str(store))  # fmt: skip
    points = stored_points(store)
    study_profile(args, "resnet50", 32, points)
    assert (args.model, args.batch, args.framework) == ("tiny", "16,32", "torch")
    assert stored_profile(points, "tiny", 16, "torch") is None  # measured, then
    assert stored_profile(points, "tiny", 32, "torch").run_ids == (BASELINE,)
