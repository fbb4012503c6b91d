"""Every stored value is checked on read against its declared shape (dlscale.store.validate).

A result whose throughput is a 401-digit integer, NaN, negative or 1e308, whose finish time is
1e300, or whose nested metrics have the wrong types is skipped by every reader (`ls runs`,
`report`, `load_results`, `compare`, `predict --validate`) with one warning naming the file and
the field: never a traceback, never a figure in a table. The writer never stores such a run as
completed. A damaged microbench.json is one line naming the file.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dlscale
from dlscale.cli import main as dlscale_main
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.contract.shapes import METRICS, Shape
from dlscale.launchers.base import LaunchOutcome
from dlscale.metrics.aggregate import METRIC_KEYS, aggregate
from dlscale.metrics.compare import compare
from dlscale.runner import result_of
from dlscale.store import RunStore, write_json_atomic
from dlscale.store.migrate import current
from tests.unit.test_metrics import typed, window
from tests.unit.test_store_damage import good_result

FIXTURE = (
    Path(__file__).parent.parent / "data" / "results" / "tiny-torch-single-digits-w1-749c9ebe62"
)
"""A completed run with every nested metric (eval history, per-rank means, loss by window)."""
BAD_ID = FIXTURE.name
HUGE = 10**400


def reader_row(document: dict, schema: int) -> dict:
    """A stored document as readers see it, without the store's checks."""
    return Result.from_document(current(document, schema)).row()


def _metric(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda document: document["metrics"].__setitem__(key, value)


# name -> (change to the stored document, the field the warning names, text of the bad value)
DAMAGE: dict[str, tuple[Callable[[dict[str, Any]], None], str, str | None]] = {
    "huge-int-throughput": (_metric("throughput_img_s", HUGE), "throughput_img_s", str(HUGE)),
    "nan-throughput": (_metric("throughput_img_s", math.nan), "throughput_img_s", "nan"),
    "inf-throughput": (_metric("throughput_img_s", math.inf), "throughput_img_s", "inf"),
    "negative-throughput": (_metric("throughput_img_s", -5.0), "throughput_img_s", "-5.0"),
    "huge-throughput": (_metric("throughput_img_s", 1e308), "throughput_img_s", "1e+308"),
    "negative-window": (
        _metric("throughput_windows_img_s", [6800.0, -5.0, 6900.0]),
        "throughput_windows_img_s[1]",
        "-5.0",
    ),
    "finished-far": (lambda d: d.update(finished_at=1e300), "finished_at", "1e+300"),
    "rank-means-strings": (
        _metric("rank_step_time_mean_ms", {"0": "x"}),
        "rank_step_time_mean_ms['0']",
        None,
    ),
    "rank-means-list": (
        _metric("rank_step_time_mean_ms", [1.0, 2.0]),
        "rank_step_time_mean_ms",
        None,
    ),
    "eval-history": (_metric("eval_history", [1, "x"]), "eval_history[0]", None),
    "huge-config": (lambda d: d["config"].update(seed=HUGE), "config key seed", str(HUGE)),
    # a whole number where one is meant (issue 70: 0.5 blocked report and predict for all)
    "half-a-batch": (lambda d: d.update(batch_size_per_worker=0.5), "batch_size_per_worker", None),
    "no-batch": (lambda d: d.update(batch_size_per_worker=0), "batch_size_per_worker", None),
    "half-a-config-batch": (
        lambda d: d["config"].update(batch_size=0.5),
        "config key batch_size",
        None,
    ),
    "float-config-steps": (lambda d: d["config"].update(steps=3.0), "config key steps", None),
    "negative-lr": (lambda d: d["config"].update(lr=-0.1), "config key lr", None),
    "study-not-text": (lambda d: d.update(study=["a", "b"]), "study", None),
    "huge-environment": (
        lambda d: d["environment"].update(memory_gib=HUGE),
        "environment memory_gib",
        str(HUGE),
    ),
}


def _write_damaged(root: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """The fixture's completed run copied into ``root`` with one field changed; written as
    raw JSON (NaN and Infinity as their bare tokens, as a hand edit or another tool would)."""
    target = root / BAD_ID
    shutil.copytree(FIXTURE, target)
    path = target / "result.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _good(workers: int, **metrics: Any) -> tuple[str, Result]:
    run_id, result = good_result(workers)
    return run_id, replace(result, metrics={**result.metrics, **metrics})


def results_with_damage(root: Path, kind: str, **metrics: Any) -> Path:
    """Two good runs (1 and 2 workers; ``metrics`` added to each) and the damaged fixture."""
    root.mkdir(parents=True, exist_ok=True)
    store = RunStore(root)
    for workers in (1, 2):
        store.write_result(*_good(workers, **metrics))
    return _write_damaged(root, DAMAGE[kind][0])


def one_warning(err: str, path: Path, field: str) -> str:
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("dlscale: warning: skipped ") and str(path) in line
    assert f"{field} is " in line, line
    assert "rerun that point with dlscale run" in line
    return line


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = dlscale_main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def absent(value: str | None, out: str) -> None:
    if value is not None:
        assert value not in out
        assert value[:20] not in out or len(value) < 20


@pytest.mark.parametrize("command", [("ls", "runs"), ("report", "--out", "r.html")])
def test_an_integer_past_pythons_digit_limit_skips_the_run(tmp_path: Path, command, capsys):
    """json.loads refuses integers of more than 4300 digits with a ValueError that is not a
    JSONDecodeError; it must read as one damaged file, not a traceback in every reader."""
    path = results_with_damage(tmp_path / "res", "nan-throughput")
    text = path.read_text(encoding="utf-8").replace("NaN", "9" * 5000)
    path.write_text(text, encoding="utf-8")
    args = [*command[:-1], tmp_path / command[-1]] if command[0] == "report" else [*command]
    code, out, err = cli(capsys, *args, "--results", tmp_path / "res")
    assert code == 0
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith(f"dlscale: warning: skipped {path}: holds an integer of more than")
    assert "9" * 50 not in out


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_ls_runs_lists_the_good_runs_and_names_the_bad_field(tmp_path: Path, kind: str, capsys):
    path = results_with_damage(tmp_path / "res", kind)
    code, out, err = cli(capsys, "ls", "runs", "--results", tmp_path / "res")
    assert code == 0
    one_warning(err, path, DAMAGE[kind][1])
    assert "(2)" in out and BAD_ID not in out
    absent(DAMAGE[kind][2], out)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_report_leaves_the_bad_run_out_with_one_warning(tmp_path: Path, kind: str, capsys):
    path = results_with_damage(tmp_path / "res", kind)
    out_file = tmp_path / "report" / "r.html"
    markdown = tmp_path / "report" / "r.md"
    code, out, err = cli(
        capsys, "report", "--results", tmp_path / "res", "--out", out_file, "--markdown", markdown
    )
    assert code == 0
    one_warning(err, path, DAMAGE[kind][1])
    assert "of 2 runs" in out
    page, table = out_file.read_text(encoding="utf-8"), markdown.read_text(encoding="utf-8")
    assert BAD_ID not in page and BAD_ID not in table
    absent(DAMAGE[kind][2], table)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_load_results_skips_the_bad_run(tmp_path: Path, kind: str, capsys):
    path = results_with_damage(tmp_path, kind)
    frame = dlscale.load_results(tmp_path)
    assert sorted(frame["workers"]) == [1, 2] and BAD_ID not in set(frame["run_id"])
    captured = capsys.readouterr()
    assert captured.out == ""
    one_warning(captured.err, path, DAMAGE[kind][1])


@pytest.mark.parametrize("kind", ["huge-int-throughput", "nan-throughput", "negative-window"])
def test_compare_gate_names_a_candidate_run_it_cannot_read(tmp_path: Path, kind: str, capsys):
    """The damaged point of B is named twice: the warning (file and field) and A's point
    listed as only in A; the points that can be read are compared as before, and the gate
    fails: it must not pass on a candidate it could not read."""
    baseline = tmp_path / "a"
    results_with_damage(baseline, kind)
    (baseline / BAD_ID / "result.json").write_text((FIXTURE / "result.json").read_text())
    path = results_with_damage(tmp_path / "b", kind)
    code, out, err = cli(capsys, "compare", baseline, tmp_path / "b", "--fail-on-regression", "5")
    assert code == 1  # the readable points did not regress, but one could not be judged
    gate = [line for line in err.splitlines() if "regression gate" in line]
    assert gate == [
        "dlscale: regression gate failed: 1 result file(s) of the candidate could not be read "
        "(named above)"
    ]
    one_warning(err.replace(gate[0], ""), path, DAMAGE[kind][1])
    assert "only in A" in out and BAD_ID in out
    assert "2 point(s) compared" in out
    absent(DAMAGE[kind][2], out)


@pytest.mark.parametrize("kind", ["huge-int-throughput", "finished-far", "eval-history"])
def test_predict_validate_skips_the_bad_run(tmp_path: Path, kind: str, capsys):
    predictable = {"step_time_nosync_p50_ms": 10.0, "gradient_bytes": 4_000_000}
    predictable["sync_pattern"] = "ring"
    path = results_with_damage(tmp_path / "res", kind, **predictable)
    code, out, err = cli(
        capsys, "predict", "--validate", tmp_path / "res", "--bandwidth", "1gbit", "--json"
    )
    assert code == 0
    one_warning(err, path, DAMAGE[kind][1])
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds == ["validation", "engine_median_abs_error", "median_abs_error"]
    absent(DAMAGE[kind][2], out)


def test_run_reruns_its_own_point_stored_with_a_nan_throughput(tmp_path: Path, monkeypatch):
    """A completed result holding NaN is damage: `dlscale run` runs that point again."""
    from dlscale.runner import run_point

    calls: list[str] = []

    def launch(config: RunConfig, store: RunStore, run_id: str, **_: Any) -> Result:
        calls.append(run_id)
        return good_result(config.workers)[1]

    monkeypatch.setattr("dlscale.runner._launch", launch)
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=1)
    run_id, result = good_result(1)
    warnings: list[str] = []
    store = RunStore(tmp_path, on_warning=warnings.append)
    store.write_result(run_id, result)
    path = tmp_path / run_id / "result.json"
    path.write_text(
        path.read_text().replace('"throughput_samples_s": 100.0', '"throughput_samples_s": NaN')
    )
    outcome = run_point(config, store, force=False, command=["t"], study="t")
    assert outcome.state == "completed" and calls == [run_id]
    (message,) = warnings
    assert str(path) in message and "throughput_samples_s is nan" in message


# ------------------------------------------------------------------------------------------
# every declared metric, of the wrong type


WRONG = {"number": "x", "count": 2.5, "flag": "yes", "list": {"a": 1}, "records": [1, "x"],
         "by_key": ["x"], "text": 3}  # fmt: skip


def _wrong(shape: Shape) -> Any:
    if shape.kind == "list" and shape.item is not None and shape.item.kind == "text":
        return [1]
    return WRONG[shape.kind]


@pytest.mark.parametrize("key", sorted(METRICS))
def test_every_declared_metric_of_the_wrong_type_skips_the_run(tmp_path: Path, key: str):
    path = results_with_damage(tmp_path, "nan-throughput")
    document = json.loads((FIXTURE / "result.json").read_text())
    document["metrics"][key] = _wrong(METRICS[key])
    path.write_text(json.dumps(document))
    warnings: list[str] = []
    rows = RunStore(tmp_path, on_warning=warnings.append).results()
    assert sorted(r.config["workers"] for r in rows) == [1, 2]
    (message,) = warnings
    assert str(path) in message and f"metric {key}" in message and "\n" not in message


def test_the_aggregate_writes_exactly_the_declared_metrics():
    """Writer and reader share one declaration: every key the aggregation writes is declared
    (and so checked on read), and docs/metrics.md defines every declared key."""
    per_rank = {0: [window(0, 0, 1.0, [10.0] * 4), window(0, 1, 1.0, [10.0] * 4)]}
    metrics = aggregate(typed(per_rank), target_accuracy=None)
    assert set(metrics) <= set(METRICS) and set(METRIC_KEYS) == set(METRICS)
    docs = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"`([a-z0-9_]+)`", docs))
    assert set(METRICS) - defined == set()


# ------------------------------------------------------------------------------------------
# the writer: a run whose windows are impossible is never stored as completed


def _run_with(tmp_path: Path, durations: list[Any]) -> Result:
    config = RunConfig.make(model="tiny", backend="torch-single", workers=1)
    run_dir = tmp_path / config.run_id()
    run_dir.mkdir(parents=True)
    lines = [{"schema": 3, **window(0, i, d, [10.0] * 4)} for i, d in enumerate(durations)]
    text = "".join(json.dumps(line) + "\n" for line in lines)  # NaN as its bare token
    (run_dir / "events.rank0.jsonl").write_text(text)
    spec = {"run_id": config.run_id(), "study": "t", "command": ["t"]}
    outcome = LaunchOutcome(ok=True, returncodes={0: 0})
    result = result_of(spec, config, run_dir, outcome, started_at=1.7e9)
    RunStore(tmp_path).write_result(config.run_id(), result)  # storable: no NaN left in it
    stored = RunStore(tmp_path, on_warning=pytest.fail).read(config.run_id())
    assert stored.result == result  # the typed result back as it was written
    return result


@pytest.mark.parametrize(
    ("durations", "said"),
    [
        ([1.0, math.nan, 1.0], "throughput of window 2 is nan img/s"),
        ([1.0, 1.0, -0.5], "throughput of window 3 is -80.0 img/s"),
        ([0.0, 1.0], "throughput of window 1 is inf img/s"),
        ([1e-15, 1.0], "throughput of window 1 is 4e+16 img/s"),
    ],
)
def test_a_run_with_an_impossible_window_is_recorded_as_failed(tmp_path, durations, said):
    result = _run_with(tmp_path, durations)
    assert result.status == "failed"
    assert result.error.startswith(f"{said}: a measured figure must be a number in (0, 1e+15]")
    metrics = result.metrics
    assert metrics["throughput_samples_s"] is None
    assert metrics["throughput_windows_samples_s"] is None


def test_a_run_with_good_windows_is_completed(tmp_path: Path):
    result = _run_with(tmp_path, [1.0, 2.0])
    assert result.status == "completed" and result.error is None
    assert result.metrics["throughput_windows_samples_s"] == [40.0, 20.0]


def test_compare_lists_a_completed_run_without_a_usable_throughput():
    """Rows handed to compare() directly (not through a store's checks): a run with a
    negative window is listed as unusable, never silently dropped."""
    good, bad = (good_result(w)[1].row() for w in (1, 2))  # unchecked rows
    bad["metrics"]["throughput_windows_samples_s"] = [200.0, -5.0]
    result = compare([good], [good, bad])
    (failed,) = result.failed
    assert failed.status == "unusable" and failed.side == "B"
    assert failed.error is not None and "window 2 is -5.0" in failed.error


# ------------------------------------------------------------------------------------------
# microbench.json


def _microbench(root: Path, name: str, text: str | None = None, **fields: Any) -> Path:
    (root / name).mkdir(parents=True)
    path = root / name / "microbench.json"
    stored = {
        "started_at": 1.7e9, "processes": 2, "error": None, "rows": [],
        "config": {"backend": "torch-ddp", "launcher": "local", "options": {}},
        "fit": {"alpha_s": 2e-5, "beta_s_per_byte": 1e-9, "median_error": 0.04}, **fields,
    }  # fmt: skip
    if text is not None:
        path.write_text(text)
    else:
        write_json_atomic(path, "microbench", stored)
    return path


MICROBENCH = {
    "started-far": ({"started_at": 1e300}, "started_at is 1e+300"),
    "huge-alpha": ({"fit": {"alpha_s": HUGE, "beta_s_per_byte": 1e-9}}, "alpha an integer of"),
    "damaged": ({"text": "{damaged"}, "not valid JSON"),
    "too-many-digits": (
        {"text": '{"schema": "dlscale.microbench/1", "started_at": ' + "9" * 5000 + "}"},
        "digits",
    ),
}


@pytest.mark.parametrize("kind", sorted(MICROBENCH))
def test_a_bad_microbench_file_is_one_warning_in_the_report(tmp_path: Path, kind: str, capsys):
    fields, said = MICROBENCH[kind]
    root = tmp_path / "res"
    root.mkdir()
    for workers in (1, 2):
        RunStore(root).write_result(*good_result(workers))
    path = _microbench(root, "microbench-x", **fields)
    code, _, err = cli(capsys, "report", "--results", root, "--out", tmp_path / "r.html")
    assert code == 0 and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("dlscale: warning: ") and said in line
    assert str(path) in line


@pytest.mark.parametrize("kind", sorted(MICROBENCH))
def test_predict_network_from_names_the_bad_microbench_file(tmp_path: Path, kind: str, capsys):
    fields, said = MICROBENCH[kind]
    path = _microbench(tmp_path, "microbench-x", **fields)
    args = ("predict", "--network-from", tmp_path, "--compute-ms", "10", "--gradient-bytes", "1e6")
    code, out, err = cli(capsys, *args, "--workers", "1,2")
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.splitlines()
    assert line.startswith("dlscale: error: ") and said in line and str(path) in line
    if kind == "huge-alpha":  # a readable run whose fit cannot be used: refused, as before
        return
    # beside a usable microbench: that one is used, and the bad file is one warning
    _microbench(tmp_path, "microbench-good", started_at=1.0)
    code, out, err = cli(capsys, *args, "--workers", "1,2")
    assert code == 0 and "microbench-good" in out
    (line,) = err.splitlines()
    assert line.startswith("dlscale: warning: skipped ") and str(path) in line


@pytest.mark.parametrize("batch", [0.5, 0])
def test_one_result_with_no_whole_batch_never_blocks_a_store(tmp_path: Path, batch, capsys):
    """Issue 70: one result.json with ``batch_size_per_worker: 0.5`` made every reader exit 2
    ("a profile needs ... batch >= 1", naming no file): report, predict --validate and predict
    --network-from. Now it is one damaged file, named, and the other points are read."""
    predictable = {"step_time_nosync_p50_ms": 10.0, "gradient_bytes": 4_000_000}
    root = tmp_path / "res"
    store = RunStore(root)
    for workers in (1, 2, 4):
        store.write_result(*_good(workers, sync_pattern="ring", **predictable))
    bad = store.result_path(good_result(4)[0])
    document = json.loads(bad.read_text())
    document["batch_size_per_worker"] = batch
    bad.write_text(json.dumps(document))
    _microbench(root, "microbench-x")
    for args in (
        ("predict", "--validate", root, "--bandwidth", "1gbit", "--json"),
        ("predict", "--validate", root, "--json"),
        ("predict", "--network-from", root, "--workers", "2", "--compute-ms", "5",
         "--gradient-bytes", "1e6", "--json"),
        ("report", "--results", root, "--out", tmp_path / "r.html"),
    ):  # fmt: skip
        code, out, err = cli(capsys, *args)
        assert code == 0, err
        one_warning(err, bad, "batch_size_per_worker")
        assert args[0] == "report" or '"kind": "' in out  # the other points were read
    assert (tmp_path / "r.html").is_file()
