"""A damaged result.json costs one warning line, never the whole store.

Every kind of damage (cut short, empty, not UTF-8, not an object, from a newer dlscale, keys
missing or of the wrong type) is read by RunStore.results(), load_results(), `dlscale ls runs`
and `dlscale run`: the damaged run is skipped with one line on stderr naming the file and what
is wrong, and everything else goes on. `dlscale run` reruns only its own damaged point, and
never a point stored by a newer dlscale.
"""

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import dlscale
from dlscale.contract.engine_code import engine_code
from dlscale.contract.result import Result
from dlscale.contract.run_config import RunConfig
from dlscale.runner import run_point
from dlscale.store import RunStore


def good_result(workers: int = 1, seed: int = 0) -> tuple[str, Result]:
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=workers, seed=seed)
    run_id = config.run_id()
    return run_id, Result(
        run_id=run_id,
        status="completed",
        config=config.to_dict(),
        batch_size_per_worker=config.batch_per_worker,
        global_batch_size=config.global_batch,
        metrics={"throughput_samples_s": 100.0 * workers, "throughput_windows_samples_s": [100.0]},
        environment={"hostname": "h", "engine_code": engine_code("torch-ddp")},  # made here
        finished_at=time.time(),
    )


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[str], bytes]:
    def damage(text: str) -> bytes:
        document = json.loads(text)
        change(document)
        return json.dumps(document).encode()

    return damage


# name -> (what turns a good result.json's text into damaged bytes, words the warning says)
DAMAGE: dict[str, tuple[Callable[[str], bytes], str]] = {
    "truncated": (lambda text: text[: len(text) // 2].encode(), "not valid JSON (truncated?"),
    "empty": (lambda text: b"", "empty"),
    "not-utf8": (lambda text: text.encode("utf-16"), "not UTF-8"),
    "array": (lambda text: b"[1, 2, 3]", "a JSON array"),
    "no-schema": (lambda text: b'{"hello": 1}', "not a dlscale result file"),
    "no-config": (_edit(lambda d: d.pop("config")), "no config"),
    "no-status": (_edit(lambda d: d.pop("status")), "no status"),
    "no-backend": (_edit(lambda d: d["config"].pop("backend")), "config has no backend"),
    "bad-workers": (_edit(lambda d: d["config"].update(workers="two")), "workers"),
    "bad-metrics": (_edit(lambda d: d.update(metrics=[1, 2])), "metrics"),
    "bad-options": (_edit(lambda d: d["config"].update(options=[1])), "options"),
    # issue 42: a stamp str.isdigit() accepts and int() refuses, or 5,000 digits long
    "schema-superscript": (_edit(lambda d: d.update(schema="dlscale.result/²")), "not a dlscale"),
    "schema-digits": (_edit(lambda d: d.update(schema="dlscale.result/" + "9" * 5000)), "schema"),
    "forged-run-id": (_edit(lambda d: d.update(run_id="another-run")), "copied or forged"),
}
NEWER = (_edit(lambda d: d.update(schema="dlscale.result/99")), "newer dlscale")
ALL_DAMAGE = {**DAMAGE, "newer": NEWER}
READ_ALIKE = {"schema-superscript", "schema-digits", "forged-run-id"}
"""Kinds read by the very code of another kind (the stamp's check, the run id's): checked by
every reader here, but not by a whole `dlscale run` each (seconds each, nothing more proved)."""


def damage(path: Path, kind: str) -> None:
    change, _ = ALL_DAMAGE[kind]
    path.write_bytes(change(path.read_text(encoding="utf-8")))


def store_with_damage(root: Path, kind: str) -> tuple[str, Path]:
    """Two good runs and a third one damaged; returns the damaged file."""
    store = RunStore(root)
    for workers in (1, 2):
        run_id, result = good_result(workers)
        store.write_result(run_id, result)
    run_id, result = good_result(4)
    store.write_result(run_id, result)
    path = root / run_id / "result.json"
    damage(path, kind)
    return run_id, path


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "warning" in line]


@pytest.mark.parametrize("kind", sorted(ALL_DAMAGE))
def test_results_skips_a_damaged_run_with_one_warning(tmp_path: Path, kind: str):
    run_id, path = store_with_damage(tmp_path, kind)
    warnings: list[str] = []
    store = RunStore(tmp_path, on_warning=warnings.append)
    rows = store.results()
    assert sorted(r.config["workers"] for r in rows) == [1, 2]
    store.results()  # read again: still one warning per file
    (message,) = warnings
    assert str(path) in message and ALL_DAMAGE[kind][1] in message
    assert "\n" not in message
    advice = "upgrade dlscale" if kind == "newer" else "rerun that point with dlscale run"
    assert advice in message
    assert store.completed(run_id) is None


@pytest.mark.parametrize("kind", sorted(ALL_DAMAGE))
def test_load_results_skips_a_damaged_run(tmp_path: Path, kind: str, capsys):
    _, path = store_with_damage(tmp_path, kind)
    frame = dlscale.load_results(tmp_path)
    assert sorted(frame["workers"]) == [1, 2]
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("dlscale: warning: skipped ") and str(path) in line


def test_results_survive_a_file_that_vanishes_or_is_a_directory(tmp_path: Path):
    store_with_damage(tmp_path, "empty")
    (tmp_path / "odd" / "result.json").mkdir(parents=True)
    warnings: list[str] = []
    rows = RunStore(tmp_path, on_warning=warnings.append).results()
    assert len(rows) == 2 and len(warnings) == 2
    assert any("cannot be read" in w for w in warnings)


def test_a_fifo_planted_where_a_reader_opens_a_file_is_skipped_not_waited_on(tmp_path: Path):
    """In a shared results directory anyone may plant a FIFO named result.json or
    microbench.json; opened for reading it would block `ls runs` and `report` forever."""
    import os

    from dlscale.perfmodel.networks import microbench_runs

    store_with_damage(tmp_path, "empty")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "result.json")
    (tmp_path / "microbench-x").mkdir()
    os.mkfifo(tmp_path / "microbench-x" / "microbench.json")
    warnings: list[str] = []
    rows = RunStore(tmp_path, on_warning=warnings.append).results()
    assert len(rows) == 2 and any("fifo/result.json: cannot be read" in w for w in warnings)
    skipped: list[str] = []
    assert microbench_runs(tmp_path, on_problem=skipped.append) == []
    assert len(skipped) == 1 and "not a regular file" in skipped[0]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlscale", *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("kind", sorted(ALL_DAMAGE))
def test_ls_runs_lists_the_rest_and_warns_once(tmp_path: Path, kind: str):
    run_id, path = store_with_damage(tmp_path, kind)
    run = _cli("ls", "runs", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith("dlscale: warning: skipped ") and str(path) in line
    assert ALL_DAMAGE[kind][1] in line
    assert "runs in" in run.stdout and "(2)" in run.stdout and run_id not in run.stdout


# ------------------------------------------------------------------------------------------
# run_point: its own damaged result is rerun (only that point); a newer one is kept


def _fake_launch(calls: list[str]) -> Callable[..., Result]:
    def launch(config: RunConfig, store: RunStore, run_id: str, **_: Any) -> Result:
        calls.append(run_id)
        _, result = good_result(config.workers, config.seed)
        return replace(result, metrics={"throughput_samples_s": 1.0}, study="fresh")

    return launch


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_run_point_reruns_its_own_damaged_result(tmp_path: Path, kind: str, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr("dlscale.runner._launch", _fake_launch(calls))
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=1)
    run_id, result = good_result(1)
    assert run_id == config.run_id()
    warnings: list[str] = []
    store = RunStore(tmp_path, on_warning=warnings.append)
    store.write_result(run_id, result)
    damage(tmp_path / run_id / "result.json", kind)
    outcome = run_point(config, store, force=False, command=["t"], study="t")
    assert outcome.state == "completed" and calls == [run_id]
    fresh = store.completed(run_id)
    assert fresh is not None and fresh.study == "fresh"  # the damaged file was replaced
    (message,) = warnings
    assert str(tmp_path / run_id / "result.json") in message and "again" in message
    again = run_point(config, store, force=False, command=["t"], study="t")
    assert again.state == "skipped" and calls == [run_id]
    assert len(warnings) == 1


def test_run_point_keeps_a_result_of_a_newer_dlscale(tmp_path: Path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr("dlscale.runner._launch", _fake_launch(calls))
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=1)
    run_id, result = good_result(1)
    warnings: list[str] = []
    store = RunStore(tmp_path, on_warning=warnings.append)
    store.write_result(run_id, result)
    path = tmp_path / run_id / "result.json"
    damage(path, "newer")
    before = path.read_bytes()
    outcome = run_point(config, store, force=False, command=["t"], study="t")
    assert outcome.state == "newer" and calls == []
    assert path.read_bytes() == before  # not overwritten
    (message,) = warnings
    assert str(path) in message and "newer dlscale" in message and "upgrade" in message
    assert store.results() == [] and len(warnings) == 1  # the same file warns once
    forced = run_point(config, store, force=True, command=["t"], study="t")
    assert forced.state == "completed" and calls == [run_id]


# ------------------------------------------------------------------------------------------
# dlscale run as a user runs it: a real 2-point study, then damage


STUDY = (
    "run",
    "--repeats",
    "1",
    "--set",
    "machine_reference=false",
    "--backend",
    "torch-single",
    "--model",
    "tiny",
    "--steps",
    "2",
    "--windows",
    "2",
    "--warmup-steps",
    "1",
    "--seed",
    "0,1",
)


@pytest.fixture(scope="module")
def ran_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("study") / "res"
    run = _cli(*STUDY, "--results", str(results), "--json")
    assert run.returncode == 0, run.stderr
    assert len(list(results.glob("*/result.json"))) == 2
    return results


def _copy(ran_study: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    results = tmp_path / "res"
    shutil.copytree(ran_study, results)
    return results, sorted(results.glob("*/result.json"))


RUN_CASES = [(kind, False) for kind in sorted(ALL_DAMAGE) if kind not in READ_ALIKE] + [
    (kind, True) for kind in ("truncated", "no-config", "newer")
]


@pytest.mark.e2e
@pytest.mark.parametrize(("kind", "as_json"), RUN_CASES)
def test_run_with_an_unrelated_damaged_run(ran_study: Path, tmp_path: Path, kind, as_json):
    results, _ = _copy(ran_study, tmp_path)
    _, path = store_with_damage(results / "other", kind)
    shutil.move(path.parent, results / path.parent.name)
    path = results / path.parent.name / "result.json"
    run = _cli(*STUDY, "--results", str(results), *(["--json"] if as_json else []))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = warning_lines(run.stderr)
    assert line.startswith("dlscale: warning: skipped ") and str(path) in line
    if as_json:
        kinds = [json.loads(x)["kind"] for x in run.stdout.splitlines()]
        assert kinds == ["run", "run", "point", "point"]
    else:
        assert run.stderr.count("already completed") == 2


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["truncated", "not-utf8", "no-status", "no-backend"])
def test_run_reruns_only_its_own_damaged_point(ran_study: Path, tmp_path: Path, kind: str):
    results, (damaged, kept) = _copy(ran_study, tmp_path)
    kept_bytes = kept.read_bytes()
    damage(damaged, kind)
    run = _cli(*STUDY, "--results", str(results))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = warning_lines(run.stderr)
    assert str(damaged) in line and "again" in line
    assert run.stderr.count("already completed") == 1 and kept.parent.name in run.stderr
    assert json.loads(damaged.read_text())["status"] == "completed"  # rerun, replaced
    assert kept.read_bytes() == kept_bytes


@pytest.mark.e2e
def test_run_keeps_its_own_point_from_a_newer_dlscale(ran_study: Path, tmp_path: Path):
    results, (newer, _) = _copy(ran_study, tmp_path)
    damage(newer, "newer")
    before = newer.read_bytes()
    run = _cli(*STUDY, "--results", str(results))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    (line,) = warning_lines(run.stderr)
    assert str(newer) in line and "newer dlscale" in line and "upgrade" in line
    assert newer.read_bytes() == before
