"""The checkpoint pointer of a restartable run (runtime/checkpoint.py), without a framework:
an engine that writes its state as text stands in for torch's (the real one is run by
tests/distributed/test_torchrun.py)."""

from pathlib import Path

import pytest

from dlscale.config import RunConfig
from dlscale.contract.engine import Engine
from dlscale.contract.errors import UserError
from dlscale.contract.events import EventWriter, events_path
from dlscale.contract.records import Start
from dlscale.runtime import checkpoint
from dlscale.runtime.checkpoint import Checkpoints, attempt
from dlscale.runtime.context import WorkerContext


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
def enabled(monkeypatch):
    monkeypatch.setenv(checkpoint.ENABLED_ENV, "1")


def _started(ctx: WorkerContext, times: int) -> WorkerContext:
    for _ in range(times):
        ctx.events.write(Start(pid=1))
    return ctx


def test_only_the_first_rank_saves_and_every_rank_resumes_from_its_latest(tmp_path, enabled):
    first, other = TextEngine(), TextEngine()
    saver = Checkpoints(_started(_ctx(tmp_path, 0), 1), first)
    follower = Checkpoints(_started(_ctx(tmp_path, 1), 1), other)
    assert attempt(saver.ctx) == 0 == attempt(follower.ctx)
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
    restarted = _started(_ctx(tmp_path, 1), 1)  # rank 1's second process: the first restart
    assert attempt(restarted) == 1
    resumed = TextEngine()
    saved = Checkpoints(restarted, resumed).begin()
    assert saved is not None and saved.windows_done == 2 and resumed.value == "after window 1"
    assert Checkpoints(restarted, resumed).lost_s(saved) >= 0


def test_a_damaged_pointer_starts_the_run_again(tmp_path, enabled):
    engine = TextEngine()
    Checkpoints(_ctx(tmp_path, 0), engine).save(1)
    (tmp_path / "checkpoint" / "latest.json").write_text('{"schema": "dlscale.checkpoint/1", ')
    assert Checkpoints(_ctx(tmp_path, 1), TextEngine()).begin() is None


def test_without_a_saved_state_the_time_lost_counts_from_the_first_start(tmp_path, enabled):
    ctx = _started(_ctx(tmp_path, 1), 2)
    lost = Checkpoints(ctx, TextEngine()).lost_s(None)
    assert 0 <= lost < 60 and attempt(ctx) == 1


def test_no_checkpoints_unless_the_launcher_asks_and_the_engine_can(monkeypatch):
    monkeypatch.delenv(checkpoint.ENABLED_ENV, raising=False)
    assert not Checkpoints.wanted(TextEngine())
    assert not Checkpoints.wanted(Engine())
    monkeypatch.setenv(checkpoint.ENABLED_ENV, "1")
    assert Checkpoints.wanted(TextEngine())


def test_an_engine_that_cannot_checkpoint_under_a_resumable_backend_is_said(monkeypatch):
    """The launcher asks for checkpoints only of a backend that declares itself resumable; an
    engine that cannot checkpoint then is a plug-in whose declarations disagree: one line."""
    monkeypatch.setenv(checkpoint.ENABLED_ENV, "1")
    with pytest.raises(UserError, match=r"backend toy declares itself resumable .* but its engine"):
        Checkpoints.wanted(Engine(), "toy")
