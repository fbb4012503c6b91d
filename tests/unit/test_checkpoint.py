"""The checkpoint pointer of a restartable run (runtime/checkpoint.py), without a framework:
an engine that writes its state as text stands in for torch's (the real one is run by
tests/distributed/test_torchrun.py)."""

from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.metrics.events import EventWriter, events_path
from dlscale.metrics.records import Start
from dlscale.runtime import checkpoint
from dlscale.runtime.checkpoint import Checkpoints, restart_count
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.schedule import Engine


class TextEngine(Engine):
    resumable = True

    def __init__(self) -> None:
        self.value = "fresh"

    def checkpoint(self, path: Path) -> None:
        path.write_text(self.value)

    def restore(self, path: Path) -> None:
        self.value = path.read_text()


def _ctx(tmp_path: Path, rank: int) -> WorkerContext:
    config = RunConfig.make(backend="torch-ddp", workers=2, model="tiny")
    return WorkerContext(
        config=config, run_dir=tmp_path, rank=rank, local_rank=rank, layout=config.layout(),
        addresses=None, threads=1, events=EventWriter(events_path(tmp_path, rank), rank),
    )  # fmt: skip


@pytest.fixture
def restarted(monkeypatch):
    monkeypatch.setenv(checkpoint.ENABLED_ENV, "1")
    monkeypatch.setenv(checkpoint.RESTART_VAR_ENV, "TORCHELASTIC_RESTART_COUNT")

    def attempt(n: int) -> None:
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(n))

    return attempt


def test_only_the_first_rank_saves_and_every_rank_resumes_from_its_latest(tmp_path, restarted):
    restarted(0)
    first, other = TextEngine(), TextEngine()
    saver, follower = Checkpoints(_ctx(tmp_path, 0), first), Checkpoints(_ctx(tmp_path, 1), other)
    assert Checkpoints.wanted(first) and saver.begin() is None and follower.begin() is None
    first.value = "after window 0"
    saver.save(1)
    follower.save(1)  # not the saver: writes nothing
    first.value = "after window 1"
    saver.save(2)
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [
        "latest.json",
        "state-2",
    ]  # the older state went once the pointer moved
    restarted(1)
    assert restart_count() == 1
    resumed = TextEngine()
    saved = Checkpoints(_ctx(tmp_path, 1), resumed).begin()
    assert saved is not None and saved.windows_done == 2 and resumed.value == "after window 1"
    assert Checkpoints(_ctx(tmp_path, 1), resumed).lost_s(saved) >= 0


def test_a_damaged_pointer_starts_the_run_again_and_the_first_attempt_clears_old_state(
    tmp_path, restarted
):
    restarted(0)
    engine = TextEngine()
    Checkpoints(_ctx(tmp_path, 0), engine).save(1)
    (tmp_path / "checkpoint" / "latest.json").write_text('{"schema": "dlscale.checkpoint/1", ')
    restarted(1)
    assert Checkpoints(_ctx(tmp_path, 1), TextEngine()).begin() is None
    restarted(0)  # a new run of this directory (--force): nothing of the old one is resumed
    Checkpoints(_ctx(tmp_path, 0), engine).begin()
    assert not (tmp_path / "checkpoint").exists()


def test_without_a_saved_state_the_time_lost_counts_from_the_first_start(tmp_path, restarted):
    restarted(1)
    ctx = _ctx(tmp_path, 1)
    ctx.events.write(Start(pid=1))
    lost = Checkpoints(ctx, TextEngine()).lost_s(None)
    assert 0 <= lost < 60


def test_no_checkpoints_unless_the_launcher_asks_and_the_engine_can(monkeypatch):
    monkeypatch.delenv(checkpoint.ENABLED_ENV, raising=False)
    assert not Checkpoints.wanted(TextEngine())
    monkeypatch.setenv(checkpoint.ENABLED_ENV, "1")
    assert not Checkpoints.wanted(Engine())
    monkeypatch.setenv(checkpoint.RESTART_VAR_ENV, "TORCHELASTIC_RESTART_COUNT")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "x")
    assert restart_count() == 0
