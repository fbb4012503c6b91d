"""The measurement kernel: one framework-free schedule for every engine.

An engine (:class:`Engine`) knows how to take one training step in its framework; this module
owns *when* and *how* steps are timed, so every backend is measured the same way:

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
  ``nosync``);
* records go to this process's events file (:mod:`dlscale.metrics.records`); the parent takes
  the maximum over ranks (:mod:`dlscale.metrics.aggregate`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import platform
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.metrics.records import Environment, Eval, Resume, Window
from dlscale.runtime.allocator import loaded_allocator
from dlscale.runtime.checkpoint import Checkpoints, attempt, skip
from dlscale.runtime.load import LoadSample, machine_cores, sample
from dlscale.runtime.watchdog import local_parent

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


class Engine:
    """One process's training in some framework, as the kernel drives it.

    Subclasses implement :meth:`batches` and :meth:`step` (or :meth:`train_window` with
    ``times_steps = False``); the rest has defaults for an engine that lacks the feature.
    """

    times_steps = True
    """False: the engine runs whole windows (:meth:`train_window`); no per-step times."""
    synchronizes = True
    """False: the steps synchronize nothing (one process, no wrapper); exposed communication
    is then 0 by definition, and no probe runs."""
    steps_per_epoch: int = 1
    has_eval: bool = False
    resumable = False
    """True: every replica holds the same training state (synchronous data parallelism), which
    :meth:`checkpoint` writes and :meth:`restore` reads (a restarted run resumes)."""

    def batches(self, epoch: int) -> Iterator[Any]:
        """The training batches of one epoch (exactly ``steps_per_epoch`` of them)."""
        raise NotImplementedError

    def step(self, batch: Any) -> Any:
        """One training step; returns its mean loss (a float or a lazy framework scalar)."""
        raise NotImplementedError

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        """``steps`` steps at once (engines with ``times_steps = False``); their losses."""
        return [self.step(next(batches)) for _ in range(steps)]

    def sync(self) -> None:
        """Wait for the device's queued work (before a clock is read)."""

    def loss_total(self, losses: list[Any]) -> float:
        """The sum of the steps' losses as one float (may be NaN or infinite)."""
        return float(sum(float(loss) for loss in losses))

    def evaluate(self) -> tuple[int, int, float]:
        """``(correct, total, loss_sum)`` over this process's share of the held-out data."""
        return 0, 0, 0.0

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which a step skips gradient synchronization; ``None``: not measurable."""
        return None

    def take_bytes_sent(self) -> float | None:
        """Bytes sent for gradient synchronization since the last call, if counted."""
        return None

    def save_params(self) -> None:
        """Write the trained parameters to the run directory (``save_params``)."""

    def checkpoint(self, path: Path) -> None:
        """Write the replica's training state (parameters, optimizer) to ``path``."""
        raise NotImplementedError(f"{type(self).__name__} cannot checkpoint")

    def restore(self, path: Path) -> None:
        """Load the state :meth:`checkpoint` wrote into this replica."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore")

    def barrier(self) -> None:
        """Wait until every training process got here (after a checkpoint); by default
        nothing (one process)."""

    def finish(self) -> None:
        """After the last step (e.g. tell the servers this worker is done)."""

    def framework_facts(self) -> dict[str, Any]:
        """What the framework says about itself and the device (versions, GPUs)."""
        return {}


class LoaderOnly(Engine):
    """An engine's input pipeline without its training (``loader_only``): every step takes a
    batch from the engine (on its device) and does nothing with it, so a window's images/s is
    the rate at which the loaders deliver; nothing synchronizes, evaluates or checkpoints."""

    synchronizes = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.steps_per_epoch = engine.steps_per_epoch

    def batches(self, epoch: int) -> Iterator[Any]:
        return self.engine.batches(epoch)

    def step(self, batch: Any) -> None:
        return None

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        for _ in range(steps):
            next(batches)
        return []

    def sync(self) -> None:
        self.engine.sync()

    def framework_facts(self) -> dict[str, Any]:
        return self.engine.framework_facts()


class ModelledSyncEngine(Engine):
    """An engine whose steps skip synchronization while :meth:`no_sync` holds (the flag
    ``_sync``) and whose bytes are the algorithm's model per synchronized step
    (``_step_payload``, ``None``: not modelled). TensorFlow's and MXNet's engines are."""

    _sync = True
    _step_payload: float | None = None
    _payload = 0.0

    def declare_payload(
        self,
        ctx: WorkerContext,
        gradient_bytes: int,
        step_payload: float | None,
        facts: dict[str, Any],
    ) -> None:
        """Keep the modelled bytes of a synchronized step; the first training rank writes the
        run's ``Strategy`` record (``facts``' ``traces`` become the record's trace files)."""
        from dlscale.metrics.records import Strategy

        self._step_payload = step_payload
        if ctx.rank == ctx.layout.training_ranks[0]:
            ctx.events.write(
                Strategy(
                    gradient_bytes=gradient_bytes,
                    bytes_sent_per_step_model=step_payload,
                    traces=facts.pop("traces", []),
                    facts=facts,
                )
            )

    def count_synced_step(self) -> None:
        """Add one synchronized step's modelled bytes."""
        if self._step_payload is not None:
            self._payload += self._step_payload

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return self._unsynced() if self.synchronizes else None

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def take_bytes_sent(self) -> float | None:
        if self._step_payload is None:
            return None
        sent, self._payload = self._payload, 0.0
        return sent


def worker_environment(framework: dict[str, Any], *, synchronizes: bool = True) -> Environment:
    """The process's own interpreter, package versions and allocator (never the parent's)."""
    from dlscale.backends.frameworks import recorded_packages

    packages = {}
    for name in recorded_packages():
        with contextlib.suppress(metadata.PackageNotFoundError):
            packages[name] = metadata.version(name)
    return Environment(
        python=sys.executable,
        python_version=platform.python_version(),
        packages=packages,
        framework=framework,
        synchronizes=synchronizes,
        allocator=loaded_allocator(),
    )


def run_schedule(ctx: WorkerContext, engine: Engine) -> None:
    """Warm-up, measured windows or epochs, evaluation and the no-sync probe, in that order;
    with checkpoints (:mod:`dlscale.runtime.checkpoint`), a restarted process resumes after
    the last saved window."""
    cfg = ctx.config
    if cfg.loader_only:
        engine = LoaderOnly(engine)
    if ctx.rank == ctx.layout.training_ranks[0]:
        ctx.events.write(
            worker_environment(engine.framework_facts(), synchronizes=engine.synchronizes)
        )
    timer = _WindowTimer(ctx, engine)
    checkpoints = Checkpoints(ctx, engine) if Checkpoints.wanted(engine) else None
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
        for window in range(done, cfg.windows):
            timer.window(batches, cfg.steps, kind="measure", index=window)
            kept(window, cfg.windows - 1)
        if engine.has_eval:
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
    if cfg.save_params and ctx.rank == ctx.layout.training_ranks[0]:
        engine.save_params()
    if engine.synchronizes and cfg.comm_probe_steps > 0 and engine.no_sync() is not None:
        timer.probe(_cycle(engine), cfg.comm_probe_steps)
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
        before = sample(self.root)
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
        loss_sum: float | None = engine.loss_total(losses) if losses else 0.0
        finite = loss_sum is not None and math.isfinite(loss_sum)
        if not finite:
            loss_sum = None  # training diverged; JSON has no NaN, and the timing still holds
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
                bytes_sent=engine.take_bytes_sent(),
                **_load_fields(before, after),
                **fields,
            )
        )

    def probe(self, batches: Iterator[Any], pairs: int) -> None:
        """``pairs`` synchronized and ``pairs`` unsynchronized steps, alternating in ABBA
        order (sync, no-sync, no-sync, sync, ...), after a warm-up step of each kind. The
        replicas may drift apart here, which no longer matters: training is over."""
        engine, clock = self.engine, time.perf_counter
        times: dict[bool, list[float]] = {True: [], False: []}
        losses: dict[bool, list[Any]] = {True: [], False: []}
        order = [True, False]  # synchronized first
        for pair in range(pairs + 1):
            for synced in order if pair % 2 == 0 else order[::-1]:
                batch = next(batches)
                engine.sync()
                start = clock()
                with contextlib.nullcontext() if synced else _no_sync(engine):
                    loss = engine.step(batch)
                    engine.sync()
                if pair:  # pair 0 warms both kinds up
                    times[synced].append((clock() - start) * 1e3)
                    losses[synced].append(loss)
        for synced, kind in ((True, "probe"), (False, "nosync")):
            self.ctx.events.write(
                Window(
                    kind=kind,
                    index=0,
                    steps=pairs,
                    samples=pairs * self.batch,
                    duration_s=sum(times[synced]) / 1e3,
                    step_ms=times[synced],
                    loss_sum=None,
                    loss_count=0,
                )
            )


def _no_sync(engine: Engine) -> contextlib.AbstractContextManager[Any]:
    context = engine.no_sync()
    assert context is not None  # probe() runs only for engines that have one
    return context


def _load_fields(before: LoadSample, after: LoadSample) -> dict[str, Any]:
    """A window's load counters from the samples around it (``None`` where not read)."""
    fields: dict[str, Any] = {"minor_faults": after.minor_faults - before.minor_faults}
    if (
        before.busy_s is not None
        and after.busy_s is not None
        and before.run_s is not None
        and after.run_s is not None
    ):
        fields["machine_busy_s"] = after.busy_s - before.busy_s
        fields["machine_steal_s"] = (after.steal_s or 0.0) - (before.steal_s or 0.0)
        fields["run_cpu_s"] = after.run_s - before.run_s
        fields["machine_cores"] = machine_cores()
    return fields


def _cycle(engine: Engine) -> Iterator[Any]:
    for epoch in itertools.count():
        yield from engine.batches(epoch)


def _evaluate(ctx: WorkerContext, engine: Engine, *, epoch: int, started: float) -> None:
    correct, total, loss_sum = engine.evaluate()
    engine.sync()
    finite = math.isfinite(loss_sum)  # a diverged model: accuracy still counts, loss does not
    ctx.events.write(
        Eval(
            epoch=epoch,
            correct=correct,
            total=total,
            loss_sum=loss_sum if finite else None,
            elapsed_s=time.perf_counter() - started,
        )
    )
