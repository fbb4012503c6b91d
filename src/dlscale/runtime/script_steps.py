"""Windows of a training script's steps, from the marks its steps leave (no framework here).

A script's loop is its own, so dlscale cannot time a step from its start; it is told when each
step *ends*: by the framework's hook on every optimizer step (the script backend installs it:
torch's optimizer hooks, a Keras optimizer's ``iterations``, Keras ``fit``'s batches),
or by the script itself through :func:`dlscale.mark_step`, which turns the hook off. **A step's
time** (ms) is the time from the end of the step before it to its end: it covers everything the
loop does once per step (fetching the batch, forward, backward, the gradients' exchange, the
update, the script's own logging), so the first step is never timed.

* the first ``warmup_steps`` steps (at least one) are not timed; then ``windows`` windows of
  ``steps`` steps are, each a ``Window`` record as the kernel writes
  (:mod:`dlscale.runtime.schedule`), with the noise guard's counters around it;
* a window's images are the sum of its steps' samples: ``mark_step(samples)``'s, else the
  run's ``batch_size`` (``dlscale run --script`` takes it from the script's ``--batch-size``);
* once the last window is written the script is stopped (:class:`MeasuredEnough`, raised from
  the step that ended it, on every rank at the same step), unless it is to run to its end.

On a GPU the framework's hook gives a ``synchronize``: the device's queue is drained before
the clock is read at each window's start and end (never at the steps between them, which would
add a host-device sync per step), so a window's time is its steps' work, done.

Where the framework's hook can switch the script's gradient synchronization (torch: DDP), the
exposed-communication probe runs on the steps after the last window (:mod:`.script_probe`).

Input time, losses and bytes sent are not known from outside the loop: they stay ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dlscale.contract.errors import UserError
from dlscale.contract.records import Window
from dlscale.contract.text import excerpt
from dlscale.runtime.load import LoadSample, load_fields, sample
from dlscale.runtime.script_probe import ScriptProbe, SetSync
from dlscale.runtime.watchdog import local_parent

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext

_current: StepRecorder | None = None


class MeasuredEnough(BaseException):
    """Raised from the step that ended the last window: the script has been measured. A
    ``BaseException``, so a script's ``except Exception`` does not swallow it."""


def mark_step(samples: int | None = None) -> None:
    """Say that one training step ended, having trained ``samples`` images on this process
    (``None``: the run's samples per step). Under ``dlscale run --script`` the optimizer steps
    are no longer counted once a script calls this; anywhere else it does nothing."""
    if _current is not None:
        _current.marked(samples)


class StepRecorder:
    """The windows of one training process of a script."""

    def __init__(
        self,
        ctx: WorkerContext,
        samples_per_step: int,
        run_to_end: bool,
        synchronize: Callable[[], None] | None = None,
        set_sync: SetSync | None = None,
    ):
        cfg = ctx.config
        self.ctx = ctx
        first = ctx.rank == ctx.layout.training_ranks[0]
        self.root = local_parent() if first else None
        probes = set_sync is not None and cfg.workers > 1 and cfg.comm_probe_steps > 0
        self.probe = (
            ScriptProbe(ctx, cfg.comm_probe_steps, set_sync, root=self.root)
            if probes and set_sync is not None and not run_to_end
            else None
        )
        """The exposed-communication probe after the windows (:mod:`.script_probe`)."""
        self.probing = False
        self.synchronize = synchronize
        """Waits for the device's queued work (CUDA): called before the clock is read at a
        window's start and end only, so the script's steps gain no host-device sync."""
        self.samples_per_step = samples_per_step
        self.run_to_end = run_to_end
        self.warmup = max(cfg.warmup_steps, 1)
        self.steps, self.windows = cfg.steps, cfg.windows
        self.by_optimizer = True
        self._restart()

    def _restart(self) -> None:
        self.count = 0
        self.written = 0
        self.last = 0.0
        self.step_ms: list[float] = []
        self.samples = 0
        self.before: LoadSample | None = None

    def install(self) -> None:
        global _current
        _current = self

    def uninstall(self) -> None:
        global _current
        _current = None

    def marked(self, samples: int | None) -> None:
        """A step ended by the script's own ``mark_step``: from the first, only these count
        (the optimizer steps counted so far are forgotten, warm-up and all)."""
        if self.by_optimizer:
            self.by_optimizer = False
            self._restart()
        self.step(samples)

    def stepped(self, samples: int | None = None) -> None:
        """A step ended, as the framework's hook saw it (an optimizer's step, a Keras batch),
        with the images its model took where the hook counts them; ignored once the script
        marks its own."""
        if self.by_optimizer:
            self.step(samples)

    def step(self, samples: int | None) -> None:
        if self.probing:
            self._probe_step(samples)
            return
        if self.written == self.windows:
            return  # measured; the script runs on to its end
        self.count += 1
        starts = self.count == self.warmup
        ends = self.count > self.warmup and len(self.step_ms) + 1 == self.steps
        if self.synchronize is not None and (starts or ends):
            self.synchronize()
        now = time.perf_counter()
        if self.count > self.warmup:
            self.step_ms.append((now - self.last) * 1e3)
            self.samples += self._samples(samples)
            if len(self.step_ms) == self.steps:
                self._write(now)
        if self.count >= self.warmup and not self.step_ms:
            self.before = sample(self.root, starts_window=True)  # a window starts here
            now = time.perf_counter()  # the counters are read outside the timed steps
        self.last = now

    def _samples(self, samples: int | None) -> int:
        if samples is None and not self.samples_per_step:  # read from the model's input
            raise UserError(
                "the images of a step are read from what the script feeds its model, and "
                "its model took no training batch in a step (it is called outside the "
                "optimizer's steps, or not as a torch module): give dlscale --batch-size N"
            )
        value = samples if samples is not None else self.samples_per_step
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(
                f"dlscale.mark_step takes a positive number of samples, got {excerpt(value)}"
            )
        return value

    def _write(self, now: float) -> None:
        assert self.before is not None
        after = sample(self.root)
        self.ctx.events.write(
            Window(
                index=self.written,
                steps=len(self.step_ms),
                samples=self.samples,
                duration_s=sum(self.step_ms) / 1e3,
                step_ms=self.step_ms,
                loss_sum=None,
                loss_count=0,
                **load_fields(self.before, after),
            )
        )
        self.written += 1
        self.step_ms, self.samples = [], 0
        if self.written == self.windows and not self.run_to_end:
            if self.probe is not None and self.probe.start():
                self.probing = True  # the probe's steps come next; then the script stops
                return
            raise MeasuredEnough

    def _probe_step(self, samples: int | None) -> None:
        assert self.probe is not None
        if self.synchronize is not None:
            self.synchronize()
        now = time.perf_counter()
        done = self.probe.stepped((now - self.last) * 1e3, self._samples(samples))
        self.last = time.perf_counter()  # switching the next step's kind is not its time
        if done:
            raise MeasuredEnough

    def finish(self, script: str) -> None:
        """After the script ended: one window at least, else a line saying why."""
        if self.written == 0:
            seen = "optimizer steps" if self.by_optimizer else "dlscale.mark_step calls"
            raise UserError(
                f"{script} ended after {self.count} {seen}; measuring needs "
                f"{self.warmup} untimed and {self.steps} timed (warmup_steps, steps): train "
                "longer, or lower --steps and --warmup-steps"
                + (
                    " (a script whose loop steps no torch.optim or Keras optimizer can mark its "
                    "steps with dlscale.mark_step(samples))"
                    if self.count == 0
                    else ""
                )
            )
