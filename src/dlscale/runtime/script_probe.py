"""The exposed-communication probe of a training script, after its measured windows.

dlscale's own loop measures exposed communication by running steps with and without gradient
synchronization (:meth:`dlscale.runtime.schedule._Timer.probe`); a script's loop is the
script's, but where the framework can turn its synchronization off from outside (torch: every
``DistributedDataParallel``'s ``require_backward_grad_sync``, which is what ``no_sync()`` sets)
the same ABBA schedule runs on the script's next steps: after one warm-up step of each kind,
``pairs`` synchronized and ``pairs`` unsynchronized steps alternate (sync, no-sync, no-sync,
sync, ...), each timed from the end of the step before it to its own end, the device drained
at every boundary. Every rank counts the same steps, so all of them switch at the same step.
The replicas drift apart in the unsynchronized steps, so the probe runs only where the script
is stopped right after it (not under ``run_to_end``); a script that ends first, or whose
synchronization cannot be switched (no DDP module: a Horovod script, a loop of its own
all-reduces), leaves no probe windows, and its exposed communication reads "not measured".
On the first training rank the machine's counters are read around the whole probe (when it
starts, before its warm-up pair, and after its last step, outside every timed step), and both
windows carry them, as in dlscale's loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dlscale.contract.records import Window
from dlscale.runtime.load import LoadSample, probe_load_fields, sample

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext

SetSync = Callable[[bool], bool]
"""Turns the script's gradient synchronization on or off for the steps that follow; returns
whether it could (``False``: nothing to switch)."""


class ScriptProbe:
    """The probe's steps, fed by the recorder once the measured windows are written."""

    def __init__(
        self, ctx: WorkerContext, pairs: int, set_sync: SetSync, *, root: int | None = None
    ) -> None:
        self.ctx, self.pairs, self.set_sync = ctx, pairs, set_sync
        self.root = root
        """The dlscale parent's pid where this process reads the machine's counters."""
        self.before: tuple[LoadSample, float] | None = None
        self.kinds: list[tuple[bool, bool]] = []
        """``(synchronized, timed)`` of each step still to run; pair 0 warms both up."""
        for pair in range(pairs + 1):
            order = (True, False) if pair % 2 == 0 else (False, True)
            self.kinds += [(synced, pair > 0) for synced in order]
        self.step_ms: dict[bool, list[float]] = {True: [], False: []}
        self.samples: dict[bool, int] = {True: 0, False: 0}

    def start(self) -> bool:
        """Set the first probe step's kind; ``False`` where the script's synchronization
        cannot be switched (then no probe runs)."""
        if not self.kinds or not self.set_sync(self.kinds[0][0]):
            return False
        self.before = (sample(self.root), time.perf_counter())  # inside the warm-up step
        return True

    def _load(self) -> dict[str, Any]:
        if self.before is None:
            return {}
        before, started = self.before
        return probe_load_fields(before, sample(self.root), time.perf_counter() - started)

    def stepped(self, step_ms: float, samples: int) -> bool:
        """One probe step ended after ``step_ms``; the next one's kind is set. ``True`` once
        the last has ended (its windows written, synchronization back on)."""
        synced, timed = self.kinds.pop(0)
        if timed:
            self.step_ms[synced].append(step_ms)
            self.samples[synced] += samples
        if self.kinds:
            self.set_sync(self.kinds[0][0])
            return False
        self.set_sync(True)
        load = self._load()
        for synced, kind in ((True, "probe"), (False, "nosync")):
            self.ctx.events.write(
                Window(
                    kind=kind,
                    index=0,
                    steps=len(self.step_ms[synced]),
                    samples=self.samples[synced],
                    duration_s=sum(self.step_ms[synced]) / 1e3,
                    step_ms=self.step_ms[synced],
                    loss_sum=None,
                    loss_count=0,
                    **load,
                )
            )
        return True
