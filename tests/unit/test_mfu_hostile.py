"""MFU and peak memory against a hostile cache, hostile settings and hostile stored values: what
holds (docs/metrics.md, "MFU" and "Peak memory"). Each test states behaviour that is right."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlscale.cli import main as dlscale_main
from dlscale.config import RunConfig
from dlscale.contract.errors import UserError
from dlscale.contract.records import Environment
from dlscale.metrics.figures import Figures
from dlscale.metrics.scaling import add_scaling
from dlscale.metrics.utilization import utilization_metrics
from dlscale.report import cells
from dlscale.report.columns import columns_for
from dlscale.report.finding import findings
from dlscale.report.html import build_html
from dlscale.report.tables import to_markdown
from dlscale.runtime import peak as peak_module
from dlscale.runtime import utilization as runtime_utilization
from dlscale.runtime.peak import measured_cpu_peak, peak_of
from dlscale.runtime.procfs import HAS_PROC, reset_rss_peak, rss_peak_bytes
from dlscale.store import RunStore, read_json, write_json_atomic

DATA = Path(__file__).resolve().parent.parent / "data"
MEASURED = 1.5e11


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CPU peak measured instantly (1.5e11 FLOP/s); each measurement is listed."""
    made: list[int] = []

    def fake(threads: int, dtype: str = "fp32", seconds: float = 0.5, n: int | None = None):
        made.append(threads)
        return MEASURED

    monkeypatch.setattr(peak_module, "measure_cpu_peak", fake)
    return made


# --- the peak cache -----------------------------------------------------------------------


def _kept(root: Path) -> Path:
    path = measured_cpu_peak(1, "fp32", root).path
    assert path is not None
    return path


@pytest.mark.parametrize(
    "flops",
    ["NaN", "Infinity", "-1e11", "0", "true", '"1e11"', "1" + "0" * 400, "null", "[1]"],
)
def test_a_cache_file_whose_rate_is_not_a_rate_is_measured_again_and_replaced(
    tmp_path: Path, calls: list[int], flops: str
):
    path = _kept(tmp_path)
    record = path.read_text().replace(f'"flops_s": {MEASURED}', f'"flops_s": {flops}')
    assert record != path.read_text()
    path.write_text(record)
    found = measured_cpu_peak(1, "fp32", tmp_path)
    assert found.flops_s == MEASURED and not found.cached and len(calls) == 2
    assert json.loads(path.read_text())["flops_s"] == MEASURED  # replaced whole


def test_a_folder_where_the_cache_file_goes_gives_the_peak_unkept(tmp_path: Path, calls: list[int]):
    path = _kept(tmp_path)
    path.unlink()
    path.mkdir()
    found = measured_cpu_peak(1, "fp32", tmp_path)
    assert found.flops_s == MEASURED and found.path is None and path.is_dir()


def test_a_link_where_the_cache_file_goes_is_never_read_or_replaced(
    tmp_path: Path, calls: list[int]
):
    path = _kept(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    forged = json.loads(path.read_text()) | {"flops_s": 1.0}  # a forged, far too low peak
    elsewhere.write_text(json.dumps(forged))
    path.unlink()
    path.symlink_to(elsewhere)
    found = measured_cpu_peak(1, "fp32", tmp_path)
    assert found.flops_s == MEASURED and found.path is None  # measured, not the link's
    assert path.is_symlink() and json.loads(elsewhere.read_text()) == forged  # untouched


@pytest.mark.parametrize("lock", ["folder", "link"])
def test_a_lock_that_cannot_be_made_leaves_the_peak_measured_and_kept(
    tmp_path: Path, calls: list[int], lock: str
):
    path = _kept(tmp_path)
    path.unlink()
    lock_path = path.with_suffix(".lock")
    lock_path.unlink()
    target = tmp_path / "target-of-the-link"
    if lock == "folder":
        lock_path.mkdir()
    else:
        lock_path.symlink_to(target)
    found = measured_cpu_peak(1, "fp32", tmp_path)
    assert found.flops_s == MEASURED and found.path == path
    assert not target.exists()  # the lock is never made through a link


@pytest.mark.parametrize("root", ["a-file", "/proc/self/no-such-folder"])
def test_a_cache_that_cannot_be_made_gives_the_peak_unkept(
    tmp_path: Path, calls: list[int], root: str
):
    (tmp_path / "a-file").write_text("x")
    folder = tmp_path / root if not root.startswith("/") else Path(root)
    found = measured_cpu_peak(1, "fp32", folder)
    assert found.flops_s == MEASURED and found.path is None and not found.cached


def test_a_peak_that_cannot_be_read_in_the_worker_is_one_line_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
):
    def broken(*args: object) -> None:
        raise ImportError("No module named 'threadpoolctl'")

    monkeypatch.setattr(runtime_utilization, "peak_of", broken)
    ctx = SimpleNamespace(
        config=RunConfig.make(model="tiny"), threads=1, process=SimpleNamespace(replicas=1)
    )
    engine = SimpleNamespace(compute_dtype=None, model_flops=dict)
    facts = runtime_utilization.utilization_facts(ctx, engine, {})  # type: ignore[arg-type]
    assert facts["peak"] == {} and "threadpoolctl" in facts["peak_missing"]
    assert facts["peak_missing"].startswith("no MFU: ") and "\n" not in facts["peak_missing"]


# --- microbench --peak's arguments --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--threads", "0"], "--threads '0'"),
        (["--threads", "abc"], "--threads 'abc'"),
        (["--threads", "100000"], "--threads '100000'"),
        (["--threads", "1,,2"], "--threads '1,,2'"),
        (["--threads", "²"], "--threads '²'"),
        (["--dtype", "bf16"], "--dtype 'bf16'"),
        (["--dtype", "<b>"], "--dtype '<b>'"),
        (["--dtype", "[red]x[/red]"], "--dtype '[red]x[/red]'"),
        (["--dtype", "fp32\x1b[31m"], "--dtype 'fp32\\x1b[31m'"),
    ],
)
def test_microbench_peak_refuses_a_bad_argument_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], said: str
):
    code = dlscale_main(["microbench", "--peak", "--results", str(tmp_path), *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"dlscale: error: {said}"), lines[0]


# --- peak_tflops ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0, -1, math.nan, math.inf, -math.inf, float("1e400"), 1e9, True, "abc", "0x10"]
)
def test_a_peak_tflops_that_is_no_peak_is_refused_before_anything_runs(value: object):
    with pytest.raises(UserError) as raised:
        RunConfig.make(model="tiny", peak_tflops=value)
    assert "peak_tflops" in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400", "abc", "true", "1e-400"])
def test_a_peak_tflops_set_on_the_command_line_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
):
    argv = ["run", "--model", "tiny", "--results", str(tmp_path), "--dry-run"]
    code = dlscale_main([*argv, "--set", f"peak_tflops={value}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dlscale: error: peak_tflops")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", '"abc"', "true", "{a = 1}"])
def test_a_peak_tflops_in_a_study_file_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str
):
    study = tmp_path / "s.toml"
    study.write_text(f'name = "s"\nmodel = "tiny"\nbackend = "torch-ddp"\npeak_tflops = {value}\n')
    code = dlscale_main(["run", str(study), "--results", str(tmp_path / "r"), "--dry-run"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "peak_tflops" in lines[0]


def _row(metrics: dict[str, object], workers: int = 2) -> dict[str, object]:
    return {
        "run_id": "tiny-torch-ddp-synthetic-w2-0123456789",
        "status": "completed",
        "study": "s",
        "config": {
            "backend": "torch-ddp",
            "model": "tiny",
            "dataset": "synthetic",
            "workers": workers,
            "scaling": "weak",
            "device": "cpu",
        },
        "metrics": {"throughput_samples_s": 600.0, **metrics},
        "batch_size_per_worker": 64,
        "global_batch_size": 64 * workers,
        "environment": {},
    }


def test_a_set_peak_is_recorded_as_set_and_mfu_is_the_formula_by_hand(calls: list[int]):
    config = RunConfig.make(model="tiny", workers=2, peak_tflops=12.5)
    peak, missing = peak_of("cpu", [], 1, "fp32", config.peak_tflops)
    assert peak is not None and missing is None and calls == []  # nothing measured
    facts = utilization_metrics(config, Environment(rank=0, peak=peak.to_dict()))
    assert facts["peak_source"] == "set" and facts["peak_flops_per_worker"] == 12.5e12
    assert facts["peak_basis"] == "of peak_tflops = 12.5 set by the user"
    figures = Figures.of(_row(facts))
    by_hand = facts["train_flops_per_sample"] * 600.0 / (12.5e12 * 2)
    assert figures.mfu == pytest.approx(by_hand) and figures.mfu_missing is None


def test_an_mfu_above_100_percent_is_marked_and_named_in_the_notes_and_never_shown():
    facts = {
        "train_flops_per_sample": 3.1e6,
        "peak_flops_per_worker": 1e3,
        "peak_basis": "of peak_tflops = 1e-09 set by the user",
        "peak_source": "set",
    }
    row = _row(facts)
    figures = Figures.of(row)
    assert figures.mfu is None and figures.mfu_impossible
    assert cells.doubt_mark(row) == "!"
    assert "MFU above 100%: not stated" in (cells.notes(row) or "")
    (mfu,) = [c for c in columns_for([row]) if c.name == "mfu"]
    assert mfu.text(row) == "-"
    said = [line for line in findings([row]) if line.startswith("MFU and peak memory")]
    assert not any("%" in line for line in said)  # the per-point list states no MFU for it


# --- hostile stored values ------------------------------------------------------------------


def _results(root: Path, **metrics: object) -> Path:
    """tests/data/results with ``metrics`` written into every result."""
    for run in sorted((DATA / "results").iterdir()):
        target = root / run.name
        shutil.copytree(run, target)
        document = read_json(target / "result.json", "result")
        document["metrics"].update(metrics)
        write_json_atomic(target / "result.json", "result", document)
    return root


GOOD = {
    "train_flops_per_sample": 3111936.0,
    "peak_flops_per_worker": 1.5e11,
    "peak_source": "measured",
    "rss_peak_bytes": 352 * 2**20,
}


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ({"peak_flops_per_worker": 0}, "peak_flops_per_worker"),
        ({"peak_flops_per_worker": -5e12}, "peak_flops_per_worker"),
        ({"peak_flops_per_worker": "12.5e12"}, "peak_flops_per_worker"),
        ({"peak_flops_per_worker": True}, "peak_flops_per_worker"),
        ({"train_flops_per_sample": 1e30}, "train_flops_per_sample"),
        ({"rss_peak_bytes_by_rank": {"a": 5}}, "rss_peak_bytes_by_rank"),
        ({"rss_peak_bytes": -1}, "rss_peak_bytes"),
        ({"rss_peak_bytes": 1.5}, "rss_peak_bytes"),
        ({"peak_basis": 12}, "peak_basis"),
        ({"rss_peak_reset": "yes"}, "rss_peak_reset"),
    ],
)
def test_a_stored_mfu_fact_outside_its_shape_skips_that_run_with_one_warning(
    tmp_path: Path, damage: dict[str, object], words: str
):
    root = _results(tmp_path, **GOOD)
    victim = sorted(root.iterdir())[0] / "result.json"
    document = read_json(victim, "result")
    document["metrics"].update(damage)
    victim.write_text(json.dumps(document))
    warnings: list[str] = []
    rows = RunStore(root, on_warning=warnings.append).results()
    assert len(rows) == len(list(root.iterdir())) - 1
    (message,) = warnings
    assert str(victim) in message and words in message and "\n" not in message


def test_a_stored_nan_peak_skips_that_run(tmp_path: Path):
    root = _results(tmp_path, **GOOD)
    victim = sorted(root.iterdir())[0] / "result.json"
    victim.write_text(
        victim.read_text().replace(
            '"peak_flops_per_worker": 150000000000.0', '"peak_flops_per_worker": NaN'
        )
    )
    warnings: list[str] = []
    RunStore(root, on_warning=warnings.append).results()
    (message,) = warnings
    assert "peak_flops_per_worker" in message and "nan" in message


HOSTILE_BASIS = "<script>alert(1)</script> [red]x[/red] [link=http://e]y[/link]"
HOSTILE_WHY = "<img src=x onerror=alert(1)> [bold red]BOOM[/bold red]"


def test_hostile_words_beside_mfu_reach_the_report_and_markdown_escaped(tmp_path: Path):
    root = _results(tmp_path / "a", **GOOD, peak_basis=HOSTILE_BASIS)
    rows = add_scaling(RunStore(root).results())
    measured = [r for r in rows if r["metrics"].get("throughput_samples_s")]
    assert measured and all(Figures.of(r).mfu is not None for r in measured)
    missing = _results(
        tmp_path / "b", **{**GOOD, "peak_flops_per_worker": None}, mfu_missing=HOSTILE_WHY
    )
    rows += add_scaling(RunStore(missing).results())
    page, _ = build_html(rows, title="t", source="s")
    body = page.split("<body", 1)[1]
    assert "<script>alert" not in body and "<img" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "&lt;img src=x" in body
    assert "[red]x[/red]" in body and "[bold red]BOOM[/bold red]" in body  # literally
    table = to_markdown(rows)
    assert "<script>" not in table and "&lt;script&gt;" in table


def test_ls_runs_shows_hostile_markup_literally(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    root = _results(tmp_path, **GOOD, peak_basis=HOSTILE_BASIS)
    assert dlscale_main(["ls", "runs", "--results", str(root), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "[red]x[/red]" in " ".join(out.split())  # the caption may wrap it
    assert "\x1b]8;" not in out  # no hyperlink made of the text


def test_explain_says_what_mfu_and_its_basis_are(capsys: pytest.CaptureFixture[str]):
    for term in ("MFU", "mfu", "MFU of", "mem"):
        assert dlscale_main(["explain", term]) == 0
        out = capsys.readouterr().out
        assert "Traceback" not in out and out.strip()
    assert dlscale_main(["explain", "MFU"]) == 0
    assert "peak FLOP/s" in " ".join(capsys.readouterr().out.split())


# --- the memory mark ------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_PROC, reason="VmHWM and clear_refs are Linux's")
def test_the_memory_mark_resets_to_what_the_process_holds_now():
    block = bytearray(os.urandom(1)) * (300 * 2**20)  # 300 MiB touched, then freed
    before = rss_peak_bytes()
    del block
    assert reset_rss_peak() is True
    after = rss_peak_bytes()
    assert before is not None and after is not None
    assert after < before - 200 * 2**20  # the freed block's peak is gone from the mark
