"""Names anyone can predict in a shared results directory (issue 70): a microbench's run
directory, a stale result's set-aside name and a study's points and claims files. A link, a
directory or a newer file planted there is never written through or replaced; each costs one
line naming the path and the fix, or another free name, and the store's other runs still read.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dlscale import runner
from dlscale.cli import main
from dlscale.config import RunConfig
from dlscale.contract.engine_code import other_code
from dlscale.contract.files import OutputError, refuse_foreign_document, write_json_atomic
from dlscale.metrics.points_file import points_path
from dlscale.runner import run_point
from dlscale.store import RunStore
from dlscale.store.claims import claims_path
from dlscale.store.rundir import LAST_NUMBER
from tests.filesystem import snapshot
from tests.unit.test_store_damage import good_result
from tests.unit.test_store_hostile import STUDY, _fake_launch

MICROBENCH = ("microbench", "--workers", "2", "--sizes", "4", "--collectives", "all_reduce",
              "--iterations", "1")  # fmt: skip


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another user's directory, which a link planted in the store points at."""
    target = tmp_path / "victim"
    target.mkdir()
    (target / "important.txt").write_text("precious\n")
    return target


def _one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one error line of a command refused with exit 2 (notes of skipped points aside)."""
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own refusal of a flag's value
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("dlscale: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def _plant_every_name(root: Path, name: str, target: Path) -> None:
    (root / name).symlink_to(target)
    for number in range(2, LAST_NUMBER + 1):
        (root / f"{name}-{number}").symlink_to(target)


def test_a_fresh_run_directory_never_uses_a_name_someone_made(tmp_path: Path, victim: Path):
    store = RunStore(tmp_path / "store")
    store.prepare()
    (store.root / "mb").symlink_to(victim)  # a link: skipped, never followed
    (store.root / "mb-2").mkdir()  # an earlier run's, or planted: skipped too
    (store.root / "mb-3").write_text("x")
    before = snapshot(victim)
    run_id = store.reserve_new("mb")
    assert run_id == "mb-4" and store.run_dir(run_id).is_dir()
    assert not store.run_dir(run_id).is_symlink() and not any(store.run_dir(run_id).iterdir())
    store.check_held(run_id)  # held: its own directory
    store.run_dir(run_id).rmdir()
    store.run_dir(run_id).symlink_to(victim)  # swapped for a link after it was made
    with pytest.raises(OutputError, match="was removed \\(or replaced\\)"):
        store.check_held(run_id)
    assert snapshot(victim) == before


def test_a_fresh_run_directory_is_one_line_when_every_name_is_taken(tmp_path: Path, victim: Path):
    store = RunStore(tmp_path / "store")
    store.prepare()
    _plant_every_name(store.root, "mb", victim)
    before = snapshot(victim)
    with pytest.raises(OutputError) as error:
        store.reserve_new("mb")
    said = str(error.value)
    assert "\n" not in said and f"mb and mb-2 to mb-{LAST_NUMBER} are all taken" in said
    assert "choose another --results" in said and snapshot(victim) == before


def test_a_microbench_never_writes_through_links_planted_for_its_names(
    tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]
):
    """As the issue ran it: links planted for the names of the next minute, each with -2 to
    -999, to another user's directory; the microbench refuses in one line, exit 2, and writes
    nothing there (it used ...-999, a planted link, and exited 0)."""
    results = tmp_path / "shared"
    results.mkdir()
    now = time.time()
    for second in range(-2, 90):
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now + second))
        _plant_every_name(results, f"microbench-torch-ddp-w2-local-{stamp}", victim)
    before = snapshot(victim)
    line = _one_error(capsys, [*MICROBENCH, "--results", str(results)])
    assert "cannot make a fresh run directory" in line and "are all taken" in line
    assert snapshot(victim) == before
    assert all(path.is_symlink() for path in results.iterdir())  # nothing made, nothing left


def _stale_store(tmp_path: Path) -> tuple[RunStore, RunConfig, Path]:
    """A store holding a completed point made by other engine code (a predictable code)."""
    config = RunConfig.make(model="tiny", backend="torch-ddp", workers=1)
    store = RunStore(tmp_path / "store")
    _, result = good_result()
    old = replace(result, environment={**result.environment, "engine_code": "0123456789abcdef"})
    store.write_result(config.run_id(), old)
    return store, config, store.run_dir(config.run_id())


@pytest.mark.parametrize("planted", ["directory", "link", "earlier-file"])
def test_a_stale_result_is_set_aside_under_a_free_name(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch, planted: str
):
    """A directory (a traceback in `dlscale run` before, and in every later run), a link or an
    earlier set-aside file at result.stale-CODE.json: the old result goes to -2, nothing there
    is replaced or followed, and the point runs."""
    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls))
    store, config, directory = _stale_store(tmp_path)
    old = (directory / "result.json").read_bytes()
    aside = directory / "result.stale-0123456789abcdef.json"
    if planted == "directory":
        aside.mkdir()
        (aside / "x").write_text("mine")
    elif planted == "link":
        aside.symlink_to(victim / "important.txt")
    else:
        aside.write_text("an earlier stale result")
    kept = snapshot(directory / aside.name) if aside.is_dir() else None
    before = snapshot(victim)
    for _ in range(2):  # and again: the next run is not blocked either
        outcome = run_point(config, store, force=False, command=["t"], study="t")
        assert outcome.state == "completed"
        store.write_result(config.run_id(), replace(
            outcome.result, environment={**outcome.result.environment, "engine_code": "0" * 16}
        ))  # fmt: skip
    assert (directory / "result.stale-0123456789abcdef-2.json").read_bytes() == old
    assert (directory / "result.stale-0000000000000000.json").is_file()
    assert snapshot(victim) == before and len(calls) == 2
    if planted == "directory":
        assert snapshot(aside) == kept
    elif planted == "link":
        assert aside.is_symlink()
    else:
        assert aside.read_text() == "an earlier stale result"


def test_every_set_aside_name_taken_is_one_line_and_the_result_stays(tmp_path: Path):
    store, config, directory = _stale_store(tmp_path)
    (directory / "s.json").mkdir()
    for number in range(2, LAST_NUMBER + 1):
        (directory / f"s-{number}.json").mkdir()
    old = (directory / "result.json").read_bytes()
    with pytest.raises(OutputError, match="are all taken") as error:
        store.set_aside(config.run_id(), "s")
    assert "\n" not in str(error.value) and "--keep-stale" in str(error.value)
    assert (directory / "result.json").read_bytes() == old


def test_a_planted_megabyte_engine_code_is_cut_in_the_warning_and_the_file_name(tmp_path: Path):
    code = "a" * 1_000_000
    said = other_code({"engine_code": code, "dlscale_version": "0.1"}, "torch-ddp")
    assert said is not None and len(said) < 300 and "..." in said
    store, config, directory = _stale_store(tmp_path)
    document = json.loads((directory / "result.json").read_text())
    document["environment"]["engine_code"] = code
    write_json_atomic(directory / "result.json", "result", document)
    store.reserve(config.run_id())
    try:
        assert runner._code(store.read(config.run_id())) == "unknown"
    finally:
        store.release(config.run_id())


@pytest.mark.parametrize("kind", ["points", "claims"])
@pytest.mark.parametrize("planted", ["link", "directory", "fifo", "newer"])
def test_a_studys_own_file_planted_is_refused_before_any_point_runs(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], kind: str, planted: str,
):  # fmt: skip
    """A link, a directory or a FIFO at points-<study>-<digest>.json or claims-...json, or a
    file of a newer dlscale: one line naming it before any point runs (the points file was
    found only after every point had run, and the study then printed no finding or table; a
    newer one was overwritten without a word)."""
    import os

    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls))
    results = tmp_path / "res"
    results.mkdir()
    path = (points_path if kind == "points" else claims_path)(results, "quick")
    if planted == "link":
        path.symlink_to(victim / "important.txt")
    elif planted == "directory":
        path.mkdir()
    elif planted == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(json.dumps({"schema": f"dlscale.{kind}/99", "study": "quick"}))
    before = snapshot(victim), path.read_bytes() if planted == "newer" else None
    line = _one_error(capsys, [*STUDY, "--results", str(results)])
    assert str(path) in line and calls == []
    assert ("newer dlscale" in line) == (planted == "newer")
    assert (snapshot(victim), path.read_bytes() if planted == "newer" else None) == before


def test_a_points_file_planted_during_the_study_costs_one_line_after_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    results = tmp_path / "res"
    path = points_path(results, "quick")

    def plant(run_id: str) -> None:
        if not path.exists():
            path.mkdir()

    monkeypatch.setattr(runner, "_launch", _fake_launch([], before=plant))
    code = main([*STUDY, "--results", str(results)])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err
    assert "torch-single" in captured.out and "results: " in captured.out  # the table came
    (error,) = [line for line in captured.err.splitlines() if "error" in line]
    assert str(path) in error and "Is a directory" in error


def test_refuse_foreign_document_leaves_its_own_and_damaged_files_alone(tmp_path: Path):
    path = tmp_path / "points-x.json"
    refuse_foreign_document(path, "points", "the study's points")  # missing
    write_json_atomic(path, "points", {"study": "x", "points": []})
    refuse_foreign_document(path, "points", "the study's points")  # ours
    path.write_text("{ damaged")
    refuse_foreign_document(path, "points", "the study's points")  # rewritten whole later
