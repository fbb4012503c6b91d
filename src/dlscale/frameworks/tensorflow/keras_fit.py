"""keras-fit, and the engine of horovod-keras: training by Keras' own ``model.fit`` (legacy
Keras 2).

* ``keras-fit``: ``model.fit`` under ``MultiWorkerMirroredStrategy`` (one process per worker,
  TF_CONFIG as for tf-mwms); the data go in through a ``DatasetCreator``, so each worker feeds
  its own shard at the per-replica batch (Keras would otherwise treat the batch as global,
  shard it again and split it).
* ``horovod-keras`` (:mod:`dlscale.frameworks.horovod.keras_fit`): ``model.fit`` with Horovod's
  ``DistributedOptimizer`` (which all-reduces the gradients Keras computes) and no strategy, on
  this module's :class:`FitEngine`.

Why legacy Keras: Keras 3's ``fit`` failed under MultiWorkerMirroredStrategy here ("unsupported type
(PerReplica) to a Tensor") and Horovod needs ``Variable.ref()``, which Keras 3 variables lack
(frameworks/tensorflow/env.py). A user of current Keras gets the same route by installing tf-keras
and setting ``TF_USE_LEGACY_KERAS=1``.

Measurement: ``fit`` runs whole windows (``times_steps = False``): one ``fit`` call for the
whole run, paused at each window's end (:mod:`dlscale.frameworks.tensorflow.fit_windows`), as a
user's one long ``fit`` runs; ``steps_per_execution`` steps per call of Keras' compiled train
function. So the windows carry no per-step or input times, and no window holds ``fit``'s set-up
(it falls in the warm-up) or its end (after the last window). Each step's loss is read back
from the running mean Keras hands its batch callbacks (``m_i``, the mean of the window's first
i losses: step i's loss is ``i m_i - (i-1) m_(i-1)``); with ``steps_per_execution`` above 1 the
callbacks see every k-th step only, and the window's mean stands for each of its steps (stored
as no per-step losses). The data continue across windows exactly as the custom loops read them
(the same epoch plans, shards and order). The exposed-communication probe runs after training
inside the same ``fit``, one step a window: its synchronized steps are ``fit``'s own, its
unsynchronized ones a train function that skips the gradients' all-reduce
(:func:`~dlscale.frameworks.tensorflow.fit_windows.unsynchronized_train_function`) and its
forward steps one that runs the forward and loss alone (``forward_train_function``), each
swapped in while ``fit`` is paused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.contract.engine import Engine
from dlscale.contract.records import Strategy
from dlscale.frameworks.tensorflow.declare import FitOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow, tensorflow_environment
from dlscale.frameworks.tensorflow.fit_windows import (
    FitWindows,
    forward_train_function,
    step_losses,
    unsynchronized_train_function,
)
from dlscale.frameworks.tensorflow.loop import (
    TFDataFacts,
    build_keras_model,
    evaluate_model,
    load_tf_data,
    make_eval_step,
    save_keras_params,
    trainable_bytes,
)
from dlscale.frameworks.tensorflow.sgd import torch_sgd
from dlscale.frameworks.tensorflow.strategies import MultiWorker
from dlscale.frameworks.tensorflow.tasks import task_of
from dlscale.frameworks.tensorflow.user_model import initial_weights
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.schedule import run_schedule

tf = import_tensorflow()


class FitEngine(TFDataFacts, Engine):
    times_steps = False
    times_forward = True

    def __init__(
        self,
        ctx: WorkerContext,
        dist: Any,
        horovod: Any = None,
        *,
        compression: Any = None,
        fp16: bool = False,
    ) -> None:
        """``horovod``: Horovod's Keras binding, whose ``DistributedOptimizer`` wraps the
        optimizer with ``compression`` (a Horovod compressor that counts what it hands to the
        all-reduce: ``take_sent(world)`` gives the bytes since the last call; ``fp16``: it
        halves them); ``None``: ``dist``'s strategy alone, its bytes modelled."""
        cfg = ctx.config
        options = cfg.typed(FitOptions)
        self.ctx, self.dist, self.horovod = ctx, dist, horovod
        self.data, self.has_eval = load_tf_data(ctx)
        self.steps_per_epoch = self.data.steps_per_epoch
        with dist.scope():
            self.model = build_keras_model(cfg)
            optimizer = torch_sgd(cfg, self.steps_per_epoch)
            if horovod is not None:
                optimizer = horovod.DistributedOptimizer(optimizer, compression=compression)
            self.model.compile(
                optimizer=optimizer,
                loss=task_of(cfg).keras_loss(),
                steps_per_execution=options.steps_per_execution,
            )
        self._eval_step = make_eval_step(self.model, cfg)
        self._steps_per_execution = options.steps_per_execution
        self._fit: FitWindows | None = None  # made at the first window: where the data start
        self._at = 0  # the step of the run that fit's data stream reads next
        self._unsynced: Any = None  # the probe's train functions, made at their first use
        self._forward: Any = None
        self._compression = compression
        gradient = self._gradient_bytes = trainable_bytes(self.model)
        replicas = dist.num_replicas_in_sync if horovod is None else horovod.size()
        scale = 0.5 if horovod is not None and fp16 else 1.0
        self._step_payload = ring_bytes_mean(round(gradient * scale), replicas)
        self._payload = 0.0
        self._callbacks = (
            [horovod.callbacks.BroadcastGlobalVariablesCallback(0)] if horovod is not None else []
        )
        self.window_losses_by_step = options.steps_per_execution == 1
        # Under MultiWorkerMirroredStrategy, fit's logs add up the replicas' mean losses (its
        # reported loss at N workers was N times the loss: measured at 1, 2 and 4 workers
        # against torch-ddp); Horovod's fit logs each rank's own
        self._loss_scale = 1.0 / dist.num_replicas_in_sync if horovod is None else 1.0

    def write_strategy(self, facts: dict[str, Any]) -> None:
        fit = self.ctx.config.typed(FitOptions)
        if self.ctx.rank == self.ctx.layout.training_ranks[0]:
            self.ctx.events.write(
                Strategy(
                    gradient_bytes=self._gradient_bytes,
                    bytes_sent_per_step_model=self._step_payload,
                    traces=facts.pop("traces", []),
                    facts={
                        "steps_per_execution": fit.steps_per_execution,
                        "weights": initial_weights(self.ctx.config),
                        **facts,
                    },
                )
            )

    def batches(self, epoch: int) -> Iterator[Any]:
        """Where each step's batch is in the data (``fit`` reads the batches itself)."""
        return iter([(epoch, index) for index in range(self.steps_per_epoch)])

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        marks = [next(batches) for _ in range(steps)]
        epoch, start = marks[0]
        at = epoch * self.steps_per_epoch + start  # steps into the run: where fit's data are
        if self._fit is None:
            self._fit, self._at = self._start_fit(epoch, start), at
        elif at != self._at:  # the kernel reads the batches in order, never skips
            raise RuntimeError(f"keras-fit window at run step {at}, fit's data at {self._at}")
        self._at += steps
        try:
            means = self._fit.window(steps)
        except tf.errors.OpError as error:
            raise self.data.explain(error, epoch, range(start, start + steps)) from None
        self._payload += steps * self._step_payload
        if self.window_losses_by_step and len(means) == steps:
            return [loss * self._loss_scale for loss in step_losses(means)]
        return [means[-1] * self._loss_scale] * steps

    def _start_fit(self, epoch: int, start: int) -> FitWindows:
        """One ``fit`` over every batch from step ``start`` of ``epoch`` on."""
        pipeline = self.data.train_stream(epoch, start)
        data: Any = pipeline
        if self.horovod is None:
            data = tf.keras.utils.experimental.DatasetCreator(lambda _: pipeline)
        return FitWindows(self.model, data, self._callbacks, self._steps_per_execution)

    def step(self, batch: Any) -> Any:
        """One step through ``fit`` (the exposed-communication probe's, after training: the
        batch is the next of ``fit``'s stream, not ``batch``)."""
        assert self._fit is not None  # the probe runs after the windows
        return self._fit.window(1)[-1] * self._loss_scale

    def forward_only(self, batch: Any) -> None:
        """A step's forward and loss alone through ``fit`` (:func:`forward_train_function`);
        the batch, as in :meth:`step`, is the next of ``fit``'s stream."""
        assert self._fit is not None
        if self._forward is None:
            self._forward = forward_train_function(self.model)
        before = self._fit.train_with(self._forward)
        try:
            self._fit.window(1)
        finally:
            self._fit.train_with(before)

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        return self._unsynchronized()

    @contextlib.contextmanager
    def _unsynchronized(self) -> Iterator[None]:
        """``fit``'s steps without the gradients' all-reduce (paused between steps, it takes
        another train function: :func:`unsynchronized_train_function`)."""
        assert self._fit is not None
        if self._unsynced is None:
            self._unsynced = unsynchronized_train_function(self.model)
        self._fit.train_with(self._unsynced)
        try:
            yield
        finally:
            self._fit.train_with(None)

    def finish(self) -> None:
        if self._fit is not None:
            self._fit.stop()

    def take_bytes_sent(self) -> float | None:
        sent, self._payload = self._payload, 0.0
        if self._compression is not None:
            return float(self._compression.take_sent(self.horovod.size()))
        return sent

    def evaluate(self) -> tuple[int, int, float]:
        return evaluate_model(
            self.data, self._eval_step, self.dist if self.horovod is None else None
        )

    def save_params(self) -> None:
        save_keras_params(self.model, self.ctx)

    def framework_facts(self) -> dict[str, Any]:
        return tensorflow_environment()


def run_mwms(ctx: WorkerContext) -> None:
    strategy = MultiWorker()
    engine = FitEngine(ctx, strategy.setup(ctx))
    engine.write_strategy({"strategy": "MultiWorkerMirroredStrategy", **strategy.describe(ctx)})
    run_schedule(ctx, engine)
