"""The measurement kernel: one framework-free schedule for every engine.

An engine (:class:`~dlscale.contract.engine.Engine`) knows how to take one training step in its
framework; this module owns *when* and *how* steps are timed, so every backend is measured the same
way:

* warm-up steps run first and are never timed;
* the engine synchronizes its device before every clock read (a no-op where ops are eager);
* step mode: ``windows`` windows of ``steps`` steps; epoch mode: one window per epoch (its
  first steps are the warm-up), with an evaluation after each epoch where the data set has
  held-out data;
* each step's time covers fetching the batch (input time) and the forward, backward and
  update; an engine that can only run whole windows (Keras ``fit``) is timed per window;
* around each window, the noise guard's counters (:mod:`dlscale.runtime.load`): the process's
  page faults, and on the first training rank the machine's busy and stolen CPU time and the
  run's own; read outside the timed interval;
* after everything else, the exposed-communication probe, where the engine can skip gradient
  synchronization: synchronized and unsynchronized steps alternate (ABBA pairs), so that both
  see the same machine, and each kind's step times go to their own window (``probe``,
  ``nosync``), each carrying the machine's counters read around the whole probe; where the
  engine can run a forward alone, forward steps join the alternation (``forward``: the share
  of a step that backward and the update take, which the model's overlap needs);
* a run of one process that times a forward alone (a 1-worker point: the compute that
  ``predict --validate`` takes for engines with no step without synchronization) alternates
  its plain step (``nosync``: nothing to synchronize) with forward steps instead, in the
  same ABBA order; it has no ``probe`` window, so its exposed communication stays as it was;
* records go to this process's events file (:mod:`dlscale.contract.records`); the parent takes
  the maximum over ranks (:mod:`dlscale.metrics.aggregate`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dlscale.contract.engine import Engine
from dlscale.contract.records import Eval, Resume, Window
from dlscale.contract.shapes import MAX_QUANTITY
from dlscale.runtime.checkpoint import Checkpoints, attempt, skip
from dlscale.runtime.engine import LoaderOnly, worker_environment
from dlscale.runtime.load import load_fields, probe_load_fields, sample
from dlscale.runtime.utilization import utilization_facts
from dlscale.runtime.watchdog import local_parent

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run_schedule(ctx: WorkerContext, engine: Engine) -> None:
    """Warm-up, measured windows or epochs, evaluation and the no-sync probe, in that order;
    with checkpoints (:mod:`dlscale.runtime.checkpoint`), a restarted process resumes after
    the last saved window."""
    cfg = ctx.config
    if cfg.loader_only:
        engine = LoaderOnly(engine)
    if ctx.rank == ctx.layout.training_ranks[0]:
        facts = engine.framework_facts()
        ctx.events.write(
            worker_environment(
                facts,
                synchronizes=engine.synchronizes,
                data=engine.sample_facts(),
                **utilization_facts(ctx, engine, facts),
            )
        )
    timer = _WindowTimer(ctx, engine)
    wanted = not cfg.loader_only and Checkpoints.wanted(engine, cfg.backend)  # loader: no state
    checkpoints = Checkpoints(ctx, engine) if wanted else None
    saved = checkpoints.begin() if checkpoints else None
    done = saved.windows_done if saved else 0  # windows (epochs) kept from an earlier attempt
    # time to accuracy counts from the first attempt's start of training
    started = time.perf_counter() - (
        time.time() - checkpoints.training_started_at if checkpoints else 0.0
    )

    def resumed() -> None:
        restart = attempt(ctx) if checkpoints is not None else 0
        if checkpoints is not None and (restart or saved is not None):
            ctx.events.write(
                Resume(restart=restart, windows_done=done, lost_s=checkpoints.lost_s(saved))
            )

    def kept(window: int, last: int) -> None:
        if checkpoints is not None and window < last:  # nothing is left to resume after the last
            checkpoints.save(window + 1)

    if cfg.epochs is None:
        batches = _cycle(engine)
        if saved is None:
            timer.untimed(batches, cfg.warmup_steps)
        else:
            skip(batches, cfg.warmup_steps + done * cfg.steps)
        resumed()
        each = cfg.evaluate == "window" and engine.has_eval
        for window in range(done, cfg.windows):
            timer.window(batches, cfg.steps, kind="measure", index=window)
            if each:  # numbered 1.. as epochs are; its time is outside the window's
                _evaluate(ctx, engine, epoch=window + 1, started=started)
            kept(window, cfg.windows - 1)
        if engine.has_eval and not each:
            _evaluate(ctx, engine, epoch=0, started=started)
    else:
        resumed()
        for epoch in range(done, cfg.epochs):
            batches = engine.batches(epoch)
            steps = engine.steps_per_epoch
            if epoch == 0:
                warm = min(cfg.warmup_steps, steps - 1)
                timer.untimed(batches, warm)
                steps -= warm
            timer.window(
                batches,
                steps,
                kind="measure",
                index=epoch,
                epoch=epoch,
                epoch_steps=engine.steps_per_epoch,
            )
            if engine.has_eval:
                _evaluate(ctx, engine, epoch=epoch + 1, started=started)
            kept(epoch, cfg.epochs - 1)
    engine.settle()
    if cfg.save_params and ctx.rank == ctx.layout.training_ranks[0]:
        engine.save_params()
    if engine.synchronizes and cfg.comm_probe_steps > 0 and engine.no_sync() is not None:
        timer.probe(_cycle(engine), cfg.comm_probe_steps)
    elif ctx.processes == cfg.workers == 1 and engine.times_forward and cfg.comm_probe_steps > 0:
        timer.probe(_cycle(engine), cfg.comm_probe_steps, alone=True)
    engine.finish()
    if checkpoints is not None:
        checkpoints.finish()


class _WindowTimer:
    def __init__(self, ctx: WorkerContext, engine: Engine) -> None:
        self.ctx, self.engine = ctx, engine
        self.batch = ctx.config.batch_per_worker * ctx.process.replicas
        # The machine's counters are read by one rank (the first training rank): they are the
        # machine's, not the process's; every rank counts its own page faults.
        first = ctx.rank == ctx.layout.training_ranks[0]
        self.root = local_parent() if first else None

    def untimed(self, batches: Iterator[Any], steps: int) -> None:
        if steps > 0:
            self.engine.train_window(batches, steps)
        self.engine.sync()

    def window(self, batches: Iterator[Any], steps: int, **fields: Any) -> None:
        engine, clock = self.engine, time.perf_counter
        step_ms: list[float] | None = None
        data_ms: list[float] | None = None
        engine.sync()
        engine.take_bytes_sent()  # reset: count only this window's traffic
        engine.device_memory_peaks()  # reset: the window's own peaks
        before = sample(self.root, starts_window=True)
        window_start = clock()
        if engine.times_steps:
            step_ms, data_ms, losses = [], [], []
            for _ in range(steps):
                t0 = clock()
                batch = next(batches)
                engine.sync()
                t1 = clock()
                if (loss := engine.step(batch)) is not None:
                    losses.append(loss)
                engine.sync()
                t2 = clock()
                data_ms.append((t1 - t0) * 1e3)
                step_ms.append((t2 - t0) * 1e3)
        else:
            losses = engine.train_window(batches, steps)
            engine.sync()
        duration = clock() - window_start
        after = sample(self.root)
        values = engine.loss_values(losses) if losses else []
        finite = all(_a_loss(value) for value in values)
        # training diverged: JSON has no NaN, and the timing still holds
        loss_sum = math.fsum(values) if finite else None
        # each step said its own loss
        whole = (engine.times_steps or engine.window_losses_by_step) and len(values) == steps
        step_losses = [v if _a_loss(v) else None for v in values] if whole else None
        self.ctx.events.write(
            Window(
                steps=steps,
                samples=steps * self.batch,
                duration_s=duration,
                step_ms=step_ms,
                data_ms=data_ms,
                loss_sum=loss_sum,
                loss_count=len(losses),
                loss_nonfinite=not finite,
                step_losses=step_losses,
                bytes_sent=engine.take_bytes_sent(),
                **load_fields(before, after),
                **engine.device_memory_peaks(),
                **fields,
            )
        )

    def probe(self, batches: Iterator[Any], pairs: int, *, alone: bool = False) -> None:
        """``pairs`` synchronized and ``pairs`` unsynchronized steps, alternating in ABBA
        order (sync, no-sync, no-sync, sync, ...), after a warm-up step of each kind; where the
        engine can time a forward alone (``times_forward``), a forward step joins each pair
        (sync, no-sync, forward, forward, no-sync, sync, ...), outside synchronization too.
        The replicas may drift apart here, which no longer matters: training is over.
        ``alone``: the only process of its run, whose plain steps (``nosync``) alternate with
        forward steps (``times_forward``), with no context around either."""
        engine, clock = self.engine, time.perf_counter
        if alone:
            kinds = ["nosync", "forward"]
        else:
            kinds = ["probe", "nosync"] + (["forward"] if engine.times_forward else [])
        times: dict[str, list[float]] = {kind: [] for kind in kinds}
        starts: dict[str, list[float]] = {kind: [] for kind in kinds}  # to check the order by
        # the machine's counters around the whole probe: read before the warm-up pair, whose
        # first synchronized step absorbs the delay (the other ranks wait in it), and after
        # the last pair, never between timed steps
        before = sample(self.root)
        probe_start = clock()
        for pair in range(pairs + 1):
            for kind in kinds if pair % 2 == 0 else kinds[::-1]:
                batch = next(batches)
                engine.sync()
                start = clock()
                plain = alone or kind == "probe"
                with contextlib.nullcontext() if plain else _no_sync(engine):
                    if kind == "forward":
                        engine.forward_only(batch)
                    else:
                        engine.step(batch)
                    engine.sync()
                if pair:  # pair 0 warms every kind up
                    times[kind].append((clock() - start) * 1e3)
                    starts[kind].append(start - probe_start)
        load = probe_load_fields(before, sample(self.root), clock() - probe_start)
        for kind in kinds:
            self.ctx.events.write(
                Window(
                    kind=kind,
                    index=0,
                    steps=pairs,
                    samples=pairs * self.batch,
                    duration_s=sum(times[kind]) / 1e3,
                    step_ms=times[kind],
                    step_starts_s=starts[kind],
                    loss_sum=None,
                    loss_count=0,
                    **load,
                )
            )


def _no_sync(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    context = engine.no_sync()
    assert context is not None  # probe() runs only for engines that have one
    return context


def _a_loss(value: float) -> bool:
    """A loss a model that trains can have: finite and within the measured figures' bound (a
    diverged model's 1e32 nats is no figure to store: the run is then said to have diverged)."""
    return math.isfinite(value) and abs(value) <= MAX_QUANTITY


def _cycle(engine: Engine) -> Iterator[Any]:
    for epoch in itertools.count():
        yield from engine.batches(epoch)


def _evaluate(ctx: WorkerContext, engine: Engine, *, epoch: int, started: float) -> None:
    correct, total, loss_sum = engine.evaluate()
    engine.sync()
    # a diverged model: accuracy still counts, loss does not
    finite = _a_loss(loss_sum / total if total else loss_sum)
    ctx.events.write(
        Eval(
            epoch=epoch,
            correct=correct,
            total=total,
            loss_sum=loss_sum if finite else None,
            elapsed_s=time.perf_counter() - started,
        )
    )
