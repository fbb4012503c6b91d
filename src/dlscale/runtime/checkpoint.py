"""Checkpoints that let a restarted run resume (``max_restarts`` of torchrun).

A launcher that restarts failed ranks sets ``DLSCALE_CHECKPOINTS=1``. The kernel
(:mod:`dlscale.runtime.schedule`) then, on the first training rank, saves the
replica's training state after every measured window: the engine writes its state (parameters,
optimizer; :meth:`Engine.checkpoint`), then ``checkpoint/latest.json`` is replaced to point at
it (written after the state, so a rank killed mid-save leaves the previous pointer whole).
Only engines whose replicas hold the same state (synchronous data parallelism:
``BackendSpec.resumable``) take part: one file restores every rank.

A process that finds that pointer belongs to a restarted attempt (the runner empties a point's
directory before it launches it, so a pointer there is this run's) and restores that state on
every training rank,
skips the batches the saved windows consumed (so the data order is the uninterrupted run's),
records a :class:`~dlscale.contract.records.Resume` (the restart, the windows kept, the seconds
lost since the saved state), and goes on with the next window. The windows recorded after the
pointer by the failed attempt are measured again; the aggregate keeps each window's latest
record. A run that completes removes its checkpoints. Which attempt a process belongs to is
counted from its rank's own events (a ``start`` record per process), not from the launcher's
restart counter: torchrun's agents count only their own restarts, and an agent that restarts
its healthy ranks because another node's rank died counts none.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlscale.contract.errors import SchemaError, UserError
from dlscale.contract.events import events_path, read_events
from dlscale.contract.files import make_directory, read_json, write_json_atomic

if TYPE_CHECKING:
    from dlscale.contract.engine import Engine
    from dlscale.runtime.context import WorkerContext

ENABLED_ENV = "DLSCALE_CHECKPOINTS"
POINTER = "latest.json"


@dataclass(frozen=True)
class Saved:
    """What ``latest.json`` says: the windows done, when, and when training first started."""

    windows_done: int
    saved_at: float
    """Seconds since the epoch when the state was written."""
    training_started_at: float
    """Seconds since the epoch when the first attempt began training (time to accuracy)."""
    state: str
    """The state file's name in the checkpoint directory."""


def attempt(ctx: WorkerContext) -> int:
    """Which attempt of the run this process is (0: the first): the processes of its rank
    that started before it, by their ``start`` records."""
    starts = sum(
        1 for r in read_events(events_path(ctx.run_dir, ctx.rank)) if r.get("event") == "start"
    )
    return max(0, starts - 1)


class Checkpoints:
    """The checkpoint directory of one run, as the kernel of one process uses it."""

    def __init__(self, ctx: WorkerContext, engine: Engine) -> None:
        self.ctx, self.engine = ctx, engine
        self.folder = ctx.run_dir / "checkpoint"
        self.saver = ctx.rank == ctx.layout.training_ranks[0]
        self.training_started_at = time.time()

    @staticmethod
    def wanted(engine: Engine, backend: str = "") -> bool:
        """Whether this run keeps checkpoints: the launcher restarts ranks (it asked only
        because the backend declares itself resumable) and the engine can. An engine that
        cannot, under a backend that says it can, is a plug-in's error: said, not ignored."""
        if os.environ.get(ENABLED_ENV) != "1":
            return False
        if not engine.resumable:
            raise UserError(
                f"backend {backend} declares itself resumable (BackendSpec.resumable) but its "
                f"engine {type(engine).__name__} cannot checkpoint (Engine.resumable is false): "
                "a plug-in's declarations disagree; run without max_restarts"
            )
        return True

    def begin(self) -> Saved | None:
        """The state to resume from (restored into the engine), or ``None`` to start afresh
        (the first attempt; or a restart before any window was saved)."""
        saved = self.latest()
        if saved is not None:
            self.engine.restore(self.folder / saved.state)
            self.training_started_at = saved.training_started_at
        return saved

    def latest(self) -> Saved | None:
        path = self.folder / POINTER
        if not path.exists():
            return None
        try:
            data = read_json(path, "checkpoint")
            data.pop("schema")
            return Saved(**data)
        except (SchemaError, TypeError):  # damaged: start again rather than resume wrongly
            return None

    def save(self, windows_done: int) -> None:
        """After window ``windows_done - 1``: the first training rank writes the state, then
        points ``latest.json`` at it and removes the older state; then every rank waits for
        the others (:meth:`Engine.barrier`), so the save's time is in no rank's next window
        (the other ranks' clocks would otherwise start while it writes)."""
        if self.saver:
            make_directory(self.folder, "checkpoint folder")  # never through a planted link
            name = f"state-{windows_done}"
            self.engine.checkpoint(self.folder / name)
            previous = self.latest()
            saved = Saved(windows_done, time.time(), self.training_started_at, name)
            write_json_atomic(self.folder / POINTER, "checkpoint", dict(saved.__dict__))
            if previous is not None and previous.state != name:
                (self.folder / previous.state).unlink(missing_ok=True)
        self.engine.barrier()

    def lost_s(self, saved: Saved | None) -> float:
        """Seconds from the last state kept (its save; without one, this rank's first start)
        to now: the failed attempt's work after it, the restart, and this process's start."""
        if saved is not None:
            return time.time() - saved.saved_at
        starts = [
            float(r["time"])
            for r in read_events(events_path(self.ctx.run_dir, self.ctx.rank))
            if r.get("event") == "start" and isinstance(r.get("time"), int | float)
        ]
        return time.time() - min(starts) if starts else 0.0

    def finish(self) -> None:
        """The run completed: its checkpoints are no longer needed."""
        if self.saver:
            shutil.rmtree(self.folder, ignore_errors=True)


def skip(batches: Iterator[Any], count: int) -> None:
    """Consume ``count`` batches without training on them (the saved windows' share)."""
    next(itertools.islice(batches, count, count), None)
