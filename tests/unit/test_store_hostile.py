"""The store against a hostile or broken file system, on real files (no mocks of it).

A link planted where a run directory goes, a file or a dangling link there, a lock that is a
directory, links planted inside a run directory, a full disk (a real tmpfs), the results
directory removed while a point runs, a spec.json whose config is not an object: each costs one
line naming the path and the fix, never a traceback, and nothing outside the store changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dlscale import runner
from dlscale.cli import build_parser, main
from dlscale.cli.run import settings_from
from dlscale.config import RunConfig
from dlscale.config.study import expand
from dlscale.contract.files import OutputError
from dlscale.contract.result import Result
from dlscale.launchers.base import LaunchOutcome
from dlscale.runner import run_point
from dlscale.runtime.worker_path import prepare_worker_path
from dlscale.store import RunStore
from tests.filesystem import fill, small_tmpfs, snapshot
from tests.unit.test_store_damage import good_result

TINY = {"backend": "torch-single", "model": "tiny", "steps": 2, "windows": 2, "warmup_steps": 1}
STUDY = (
    "run", "--repeats", "1", "--set", "machine_reference=false", "--backend", "torch-single",
    "--model", "tiny", "--steps", "2", "--windows", "2", "--warmup-steps", "1", "--seed", "0,1",
)  # fmt: skip


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another user's directory, which a link planted in the store points at."""
    target = tmp_path / "victim"
    (target / "sub").mkdir(parents=True)
    (target / "important.txt").write_text("precious\n")
    (target / "sub" / "deep.txt").write_text("also precious\n")
    return target


def one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def _fake_launch(calls: list[str], *, before: Any = None) -> Any:
    """runner._launch without processes: ``before(run_id)`` runs first (a file system prank)."""

    def launch(config: RunConfig, store: RunStore, run_id: str, **_: Any) -> Result:
        calls.append(run_id)
        if before is not None:
            before(run_id)
        _, result = good_result(config.workers, config.seed)
        return replace(result, run_id=run_id, config=config.to_dict())

    return launch


def _study_ids(results: Path) -> list[str]:
    """The run ids `dlscale run STUDY --results results` runs, in its order."""
    args = build_parser().parse_args([*STUDY, "--results", str(results)])
    settings, name, description = settings_from(args)
    return [
        config.run_id() for config in expand(settings, name=name, description=description).points
    ]


def _cli_one_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("dlscale: error:"), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------------------
# a link, a dangling link or a file where a run directory goes


@pytest.mark.parametrize("force", [False, True], ids=["resume", "force"])
def test_a_link_at_a_run_directory_is_refused_and_its_target_untouched(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch, force: bool
):
    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls))
    store = RunStore(tmp_path / "store")
    store.root.mkdir()
    config = RunConfig.make(**TINY)
    planted = store.run_dir(config.run_id())
    planted.symlink_to(victim)
    before = snapshot(victim)
    with pytest.raises(OutputError) as error:
        run_point(config, store, force=force, command=["t"], study="t")
    message = one_line(error)
    assert str(planted) in message and "symbolic link" in message and "remove the link" in message
    assert calls == [] and snapshot(victim) == before
    with pytest.raises(OutputError):
        store.reserve(config.run_id())  # the store itself refuses it too
    assert snapshot(victim) == before and planted.is_symlink()


@pytest.mark.parametrize("force", [False, True], ids=["resume", "force"])
def test_dlscale_run_stops_at_a_planted_link_before_any_point(
    tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str], force: bool
):
    """A two-point study whose second point's directory is a planted link: one line naming it,
    exit 2, no point run, nothing changed in the store or behind the link."""
    results = tmp_path / "res"
    results.mkdir()
    first, second = _study_ids(results)
    (results / second).symlink_to(victim)
    before = snapshot(victim), snapshot(results)
    line = _cli_one_error(
        capsys, [*STUDY, "--results", str(results), *(["--force"] if force else [])]
    )
    assert str(results / second) in line and "symbolic link" in line
    assert (snapshot(victim), snapshot(results)) == before
    assert not (results / first).exists()


def test_a_link_planted_during_a_study_stops_it_and_releases_the_lock(
    tmp_path: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
):
    """Planted after the command's checks, while the first point runs: that point is
    recorded and its lock released, the second is refused with one line, nothing followed."""
    from dlscale.cli.progress import run_study

    results = tmp_path / "res"
    results.mkdir()
    first, second = _study_ids(results)
    args = build_parser().parse_args([*STUDY, "--results", str(results)])
    settings, name, description = settings_from(args)
    study = expand(settings, name=name, description=description)
    calls: list[str] = []
    plant = lambda run_id: (results / second).symlink_to(victim)  # noqa: E731
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls, before=plant))
    before = snapshot(victim)
    with pytest.raises(OutputError) as error:
        run_study(study, results, force=False, as_json=True, command=["t"])
    assert str(results / second) in one_line(error)
    assert calls == [first] and RunStore(results).completed(first) is not None
    assert not (results / first / "lock").exists()
    assert snapshot(victim) == before


def test_a_dangling_link_at_a_run_directory_is_refused(tmp_path: Path, capsys):
    store = RunStore(tmp_path)
    planted = store.run_dir("r")
    planted.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError) as error:
        store.reserve("r")
    assert str(planted) in one_line(error) and "nowhere" in str(error.value)
    assert planted.is_symlink() and not (tmp_path / "nowhere").exists()  # nothing made there
    results = tmp_path / "res"
    results.mkdir()
    _, second = _study_ids(results)
    (results / second).symlink_to(tmp_path / "nowhere")
    assert str(results / second) in _cli_one_error(capsys, [*STUDY, "--results", str(results)])


def test_a_file_where_a_run_directory_goes_is_refused(tmp_path: Path, capsys):
    store = RunStore(tmp_path)
    planted = store.run_dir("r")
    planted.write_text("a user's notes\n")
    with pytest.raises(OutputError) as error:
        store.reserve("r")
    message = one_line(error)
    assert str(planted) in message and "is a file" in message and "move the file" in message
    assert planted.read_text() == "a user's notes\n"
    with pytest.raises(OutputError):
        store.write_result("r", good_result()[1])
    assert planted.read_text() == "a user's notes\n"
    results = tmp_path / "res"
    results.mkdir()
    first, _ = _study_ids(results)
    (results / first).write_text("x")
    line = _cli_one_error(capsys, [*STUDY, "--results", str(results)])
    assert str(results / first) in line and "is a file" in line


def test_a_lock_that_is_a_directory_is_refused(tmp_path: Path, capsys):
    store = RunStore(tmp_path)
    lock = store.lock_path("r")
    (lock / "inside").mkdir(parents=True)
    with pytest.raises(OutputError) as error:
        store.reserve("r")
    message = one_line(error)
    assert str(lock) in message and "is a directory" in message and "rm -r" in message
    assert (lock / "inside").is_dir()
    results = tmp_path / "res"
    results.mkdir()
    first, _ = _study_ids(results)
    (results / first / "lock").mkdir(parents=True)
    line = _cli_one_error(capsys, [*STUDY, "--results", str(results)])
    assert str(results / first / "lock") in line and "is a directory" in line


def test_a_link_at_the_lock_or_its_guard_is_refused(tmp_path: Path, victim: Path):
    store = RunStore(tmp_path)
    store.run_dir("r").mkdir()
    store.lock_path("r").symlink_to(victim / "important.txt")
    with pytest.raises(OutputError, match="symbolic link"):
        store.reserve("r")
    store.lock_path("r").unlink()
    store.lock_path("r").write_text("")  # an old, unreadable lock: judged by its age
    os.utime(store.lock_path("r"), (0, 0))
    (store.run_dir("r") / "lock.takeover").mkdir()
    with pytest.raises(OutputError, match=r"lock\.takeover is a directory"):
        store.reserve("r")
    assert (victim / "important.txt").read_text() == "precious\n"


# ------------------------------------------------------------------------------------------
# inside a run directory: only a run's own files go, links are unlinked, never followed


def test_clear_removes_only_a_runs_files_and_unlinks_planted_links(tmp_path: Path, victim: Path):
    store = RunStore(tmp_path)
    assert store.reserve("r")
    run_dir = store.run_dir("r")
    (run_dir / "notes.txt").write_text("mine")  # a user's file: not a run's, kept
    (run_dir / "spec.json").write_text("{}")
    (run_dir / "events.rank0.jsonl").write_text(
        json.dumps({"event": "strategy", "traces": ["timeline.json", "../escape.json"]}) + "\n"
    )
    (run_dir / "timeline.json").write_text("[]")  # named by the engine's strategy record
    (run_dir / "rank0.stdout").symlink_to(victim / "important.txt")
    (run_dir / "checkpoint").symlink_to(victim)  # a link where a run makes a directory
    (run_dir / "pythonpath").mkdir()
    (run_dir / "pythonpath" / "dlscale").symlink_to(victim)  # rmtree unlinks, never follows
    (run_dir / ".result.json.abc.tmp").write_text("half")  # an interrupted write
    before = snapshot(victim)
    store.clear("r")
    assert sorted(p.name for p in run_dir.iterdir()) == ["lock", "notes.txt"]
    assert snapshot(victim) == before
    store.release("r")


def test_clear_refuses_a_run_directory_swapped_for_a_link(tmp_path: Path, victim: Path):
    store = RunStore(tmp_path)
    assert store.reserve("r")
    store.run_dir("r").rename(tmp_path / "moved")
    store.run_dir("r").symlink_to(victim)
    before = snapshot(victim)
    with pytest.raises(OutputError, match="symbolic link"):
        store.clear("r")
    store.release("r")  # leaves the link and its target alone
    assert snapshot(victim) == before and store.run_dir("r").is_symlink()


def test_the_worker_path_and_checkpoint_folder_refuse_planted_links(tmp_path: Path, victim):
    from tests.unit.test_checkpoint import TextEngine, _ctx

    before = snapshot(victim)
    (tmp_path / "pythonpath").symlink_to(victim)
    with pytest.raises(OutputError, match="pythonpath"):
        prepare_worker_path(tmp_path, [])
    (tmp_path / "checkpoint").symlink_to(victim)
    with pytest.raises(OutputError, match="checkpoint"):
        from dlscale.runtime.checkpoint import Checkpoints

        Checkpoints(_ctx(tmp_path, 0), TextEngine()).save(1)
    assert snapshot(victim) == before
    with pytest.raises(OutputError, match="does not exist"):
        prepare_worker_path(tmp_path / "removed-run", [])  # not made again
    assert not (tmp_path / "removed-run").exists()


def test_release_leaves_another_process_lock(tmp_path: Path):
    store = RunStore(tmp_path)
    assert store.reserve("r")
    lock = store.lock_path("r")
    other = {"host": "elsewhere", "pid": 1, "start": 1, "time": 0}
    lock.write_text(json.dumps(other))  # ours was removed by hand; another took the point
    store.release("r")
    assert json.loads(lock.read_text()) == other
    assert [p.name for p in store.run_dir("r").iterdir()] == ["lock"]  # no lock temp file


# ------------------------------------------------------------------------------------------
# a full disk: a real tmpfs, filled


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        yield disk


def test_a_full_disk_when_reserving_leaves_no_lock(small_disk: Path):
    store = RunStore(small_disk / "store")
    store.root.mkdir()
    store.run_dir("old").mkdir()  # an existing run directory, and a fresh one below
    filler = fill(small_disk)
    for run_id in ("old", "new"):
        with pytest.raises(OutputError) as error:
            store.reserve(run_id)
        message = one_line(error)
        assert message.startswith("no space left on the device writing ")
        assert str(store.lock_path(run_id)) in message
        assert not store.run_dir(run_id).exists() or not list(store.run_dir(run_id).iterdir())
    filler.unlink()
    assert store.reserve("old")  # at once: no empty lock of a "running" process was left
    store.release("old")


def test_a_full_disk_when_writing_a_result_keeps_the_earlier_one(small_disk: Path):
    store = RunStore(small_disk / "store")
    store.root.mkdir()
    run_id, result = good_result()
    store.write_result(run_id, replace(result, status="failed"))
    earlier = store.result_path(run_id).read_bytes()
    assert store.reserve(run_id)
    fill(small_disk)
    with pytest.raises(OutputError) as error:
        store.write_result(run_id, replace(result, metrics={"pad": "x" * 8192}))
    message = one_line(error)
    assert message.startswith("no space left") and str(store.result_path(run_id)) in message
    store.release(run_id)
    assert store.result_path(run_id).read_bytes() == earlier
    assert sorted(p.name for p in store.run_dir(run_id).iterdir()) == ["result.json"]


def test_a_full_disk_at_the_end_of_a_point_releases_its_lock(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
):
    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls, before=lambda _: fill(small_disk)))
    store = RunStore(small_disk / "store")
    store.root.mkdir()
    config = RunConfig.make(**TINY)
    with pytest.raises(OutputError) as error:
        run_point(config, store, force=False, command=["t"], study="t")
    assert one_line(error).startswith("no space left")
    assert calls == [config.run_id()] and list(store.run_dir(config.run_id()).iterdir()) == []


# ------------------------------------------------------------------------------------------
# the results directory removed while a point runs


@pytest.mark.parametrize("removed", ["results", "run"])
def test_a_results_directory_removed_mid_run_is_said_not_recreated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removed: str
):
    results = tmp_path / "res"
    results.mkdir()
    store = RunStore(results)
    config = RunConfig.make(**TINY)

    def launch(config: RunConfig, run_dir: Path, **_: Any) -> tuple[dict, LaunchOutcome, float]:
        (run_dir / "spec.json").write_text("{}")
        shutil.rmtree(results if removed == "results" else run_dir)
        return {"run_id": run_dir.name}, LaunchOutcome(ok=True, returncodes={0: 0}), 0.0

    monkeypatch.setattr(runner, "launch", launch)
    with pytest.raises(OutputError) as error:
        run_point(config, store, force=False, command=["t"], study="t")
    message = one_line(error)
    gone = results if removed == "results" else results / config.run_id()
    assert f"{gone} was removed" in message and "not recorded" in message
    assert results.exists() == (removed == "run")  # not made again
    assert not (results / config.run_id()).exists()


def test_a_results_directory_removed_between_points_is_not_made_again(tmp_path: Path):
    store = RunStore(tmp_path / "res")  # made the first time the store writes
    run_id, result = good_result()
    store.write_result(run_id, result)
    assert store.reserve("next")
    store.release("next")
    (tmp_path / "res").rename(tmp_path / "moved")  # gone from its path (kept: inode in use)
    for write in (lambda: store.reserve("later"), lambda: store.write_result(run_id, result)):
        with pytest.raises(OutputError) as error:
            write()
        assert f"the results directory {tmp_path / 'res'} was removed" in one_line(error)
    assert not (tmp_path / "res").exists()
    (tmp_path / "other").mkdir()  # made while the first exists: surely another inode
    (tmp_path / "other").rename(tmp_path / "res")  # replaced: the earlier results are gone
    with pytest.raises(OutputError, match="was removed \\(or replaced\\)"):
        store.reserve("later")


# ------------------------------------------------------------------------------------------
# a spec.json whose config is not an object


def _store_with_bad_spec(root: Path, config: Any = "abc") -> Path:
    store = RunStore(root)
    root.mkdir(exist_ok=True)
    run_id, result = good_result()
    store.write_result(run_id, result)
    bad = root / "bad-run"
    bad.mkdir()
    spec = bad / "spec.json"
    spec.write_text(json.dumps({"schema": "dlscale.spec/3", "run_id": "bad-run", "config": config}))
    return spec


@pytest.mark.parametrize("command", [("ls", "runs"), ("report",)])
def test_a_spec_whose_config_is_a_string_is_skipped_with_one_warning(
    tmp_path: Path, command: tuple[str, ...]
):
    spec = _store_with_bad_spec(tmp_path / "res")
    extra = ["--out", str(tmp_path / "report.html")] if command == ("report",) else []
    done = subprocess.run(
        [sys.executable, "-m", "dlscale", *command, "--results", str(tmp_path / "res"), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "warning" in line]
    assert line.startswith("dlscale: warning: skipped ") and str(spec) in line
    assert "its config is a string, not a JSON object" in line


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ("abc", "config is a string"),
        ([1], "config is an array"),
        ({"options": 3}, "config.options is a number"),
        ({"options": {"backend": "x"}}, "config.options.backend is a string"),
    ],
)
def test_run_point_goes_on_past_its_own_bad_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: Any, field: str
):
    calls: list[str] = []
    monkeypatch.setattr(runner, "_launch", _fake_launch(calls))
    warnings: list[str] = []
    store = RunStore(tmp_path, on_warning=warnings.append)
    point = RunConfig.make(**TINY)
    spec = store.run_dir(point.run_id()) / "spec.json"
    spec.parent.mkdir()
    spec.write_text(json.dumps({"schema": "dlscale.spec/3", "config": config}))
    assert runner.submitted_points(store) == []
    outcome = run_point(point, store, force=False, command=["t"], study="t")
    assert outcome.state == "completed" and calls == [point.run_id()]
    (warning,) = warnings
    assert str(spec) in warning and field in warning
