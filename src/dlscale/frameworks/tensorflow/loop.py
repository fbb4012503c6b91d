"""The TensorFlow engine of the measurement kernel: a custom training loop under a strategy.

A backend supplies a :class:`TFStrategy` (which ``tf.distribute`` strategy holds the variables, and
how a step's gradients are synchronized); :class:`TFEngine` is the kernel's
:class:`~dlscale.contract.engine.Engine` for it, so TensorFlow runs are timed exactly as the torch
ones (:mod:`dlscale.runtime.schedule`). The step is the one PyTorch takes: the Keras twin of the
model (:mod:`dlscale.frameworks.tensorflow.models`), started from the PyTorch twin's initial weights
when ``weights = "torch"`` (the default: the same seed gives the same weights as every torch
backend), the mean cross-entropy of the replica's batch, and PyTorch's SGD
(:class:`~dlscale.frameworks.tensorflow.sgd.TorchSGD`). Each replica's loss is divided by the
replicas in sync and the strategy sums the gradients (``apply_gradients`` all-reduces them), so a
step applies the mean gradient over the global batch, as DDP's averaging does.

The no-sync probe (exposed communication) runs the same step with
``skip_gradients_aggregation=True``: forward, backward and the local update, no all-reduce.
Per-step times: the kernel reads its clocks after :meth:`TFEngine.sync`, which waits for the
step's loss (the step's function returns once every op it ran has finished on the CPU).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.contract.datasets import DATASETS
from dlscale.contract.engine import SyncStrategy
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.contract.models import MODELS, PARAMS_FILE
from dlscale.contract.registry import load_object
from dlscale.contract.run_config import RunConfig
from dlscale.frameworks.tensorflow.data import TFDataset, checked_batches, to_tf
from dlscale.frameworks.tensorflow.declare import TFLoopOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads, tensorflow_environment
from dlscale.frameworks.tensorflow.sgd import torch_sgd
from dlscale.frameworks.tensorflow.tasks import task_of
from dlscale.frameworks.tensorflow.transfer import keras_state, load_torch_weights
from dlscale.frameworks.tensorflow.user_model import (
    build_own,
    data_classes,
    initial_weights,
    is_own,
    own_state,
)
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.engine import ModelledSyncEngine
from dlscale.runtime.samples import load_samples, model_outputs
from dlscale.runtime.schedule import run_schedule

tf = import_tensorflow()


class TFStrategy(SyncStrategy):
    """How a TensorFlow process distributes its training (:class:`SyncStrategy`'s words, and
    the hooks below). The default is one replica and no synchronization (tf-single);
    distributed strategies override what differs."""

    aggregates_in_optimizer = True
    """``apply_gradients`` all-reduces the gradients (tf.distribute); False: :meth:`gradients`
    does (Horovod's tape)."""
    distributes_values = False
    """Each batch goes to the strategy's replicas as per-replica values (the tf.distribute
    strategies); False: the batch is the one replica's (default strategy, Horovod)."""
    evaluates_in_replica = False
    """Evaluate inside ``strategy.run``: reading BatchNorm's sync-on-read statistics outside it
    is an all-reduce across workers under MultiWorkerMirroredStrategy, which every worker would
    have to join for every batch."""

    def setup(self, ctx: WorkerContext) -> Any:
        """Thread pools (before TensorFlow's first op), then the ``tf.distribute`` strategy."""
        set_threads(ctx.threads, 1)
        return tf.distribute.get_strategy()

    def gradients(self, tape: Any, loss: Any, variables: list[Any], sync: bool) -> Any:
        return tape.gradient(loss, variables)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        return {"algorithm": "none (one replica)"}


def build_keras_model(cfg: RunConfig, *, transfer: bool = True) -> Any:
    """The Keras twin of ``cfg.model`` at the run's input size and classes, with the PyTorch
    twin's initial weights (``weights = "torch"``; ``transfer = False``: the caller sets them,
    as a TF1 graph does from its session) or Keras' initializers, seeded."""
    spec = MODELS.get(cfg.model)
    if not spec.builtin:
        return build_own(cfg)  # the user's: no PyTorch twin to start from
    tf.keras.utils.set_random_seed(cfg.seed)
    # precision = float64: every layer's variables and computation (Keras casts each layer's
    # floating inputs, the float32 images included, to the layer's dtype), so its gradients
    # and the strategy's all-reduce too; the same initial weights, cast
    floatx, previous = cfg.precision, tf.keras.backend.floatx()
    tf.keras.backend.set_floatx(floatx)
    try:
        if spec.options:  # a model of its own dimensions (a GPT): the run's, its vocabulary
            model = spec.build(model_outputs(cfg), "tensorflow", cfg.dropout, cfg.options)
        else:
            model = load_object(spec.builders["tensorflow"])(
                model_outputs(cfg),
                input_size=cfg.image_size or spec.input_size,
                **spec.dropout_kwargs(cfg.dropout),
            )
    finally:
        tf.keras.backend.set_floatx(previous)
    if transfer and cfg.typed(TFLoopOptions).weights == "torch":
        state = FRAMEWORKS.get("torch").initial_weights(cfg)
        load_torch_weights(model, {key: value.astype(floatx) for key, value in state.items()})
    return model


def load_tf_data(ctx: WorkerContext, *, replicas: int | None = None) -> tuple[TFDataset, bool]:
    """This process's shard of the run's data set as tf.data (``replicas`` of the run's
    replicas from its first one), and whether the data set has held-out data."""
    cfg = ctx.config
    own = None if MODELS.get(cfg.model).builtin else data_classes(cfg)  # the user's: asked
    data = load_samples(ctx, replicas=replicas or None, num_classes=own)
    tf_data = to_tf(data, cfg.precision)
    tf_data.facts = dict(getattr(data, "facts", {}))
    return tf_data, DATASETS.get(cfg.dataset).has_eval and data.has_eval  # e.g. no val/


class TFDataFacts:
    """What every TensorFlow engine's run records about its data (a corpus' source and hash,
    from ``load_tf_data``)."""

    data: TFDataset

    def sample_facts(self) -> dict[str, Any]:
        return dict(self.data.facts)


def trainable_bytes(model: Any) -> int:
    return sum(int(v.shape.num_elements()) * v.dtype.size for v in model.trainable_variables)


def needs_autograph(cfg: RunConfig) -> bool:
    """Whether dlscale's ``tf.function``s over the model are traced with AutoGraph: only for a
    user's own model, whose ``call`` may branch or loop on a tensor. The twins and all around
    them (the strategy, Horovod's tape) branch on Python values only, and AutoGraph's rewrite
    of it all cost seconds of every worker's start for the same graph (docs/architecture.md,
    TensorFlow)."""
    return is_own(cfg)


def make_eval_step(model: Any, cfg: RunConfig) -> Any:
    """``(correct, total, loss_sum)`` of one held-out batch under the point's task (a
    tf.function)."""
    task = task_of(cfg)

    @tf.function(reduce_retracing=True, autograph=needs_autograph(cfg))
    def eval_step(x: Any, y: Any) -> tuple[Any, Any, Any]:
        return task.counts(y, model(x, training=False))

    return eval_step


def evaluate_model(data: TFDataset, eval_step: Any, dist: Any = None) -> tuple[int, int, float]:
    """``(correct, total, loss_sum)`` over this process's held-out batches; with ``dist``, each
    batch inside ``dist.run`` (see ``TFStrategy.evaluates_in_replica``), one replica's result."""
    pipeline = data.eval_batches()
    correct = total = 0
    loss_sum = 0.0
    for x, y in pipeline if pipeline is not None else ():
        if dist is not None:
            result = dist.run(eval_step, args=(x, y))
            hits, count, losses = (dist.experimental_local_results(v)[0] for v in result)
        else:
            hits, count, losses = eval_step(x, y)
        correct, loss_sum = correct + int(hits), loss_sum + float(losses)
        total += int(count)
    return correct, total, loss_sum


def save_keras_params(model: Any, ctx: WorkerContext, read: Any = None) -> None:
    """The trained parameters (BatchNorm's running statistics left out, as PyTorch's
    ``named_parameters``) under PyTorch's keys and layouts; ``read``: how variables become
    arrays (a TF1 session's ``run``; eagerly by default)."""
    own = is_own(ctx.config)
    state = own_state(model, read) if own else keras_state(model, parameters_only=True, read=read)
    np.savez(ctx.run_dir / PARAMS_FILE, **state)  # type: ignore[arg-type]


_LEFT_TO_EXIT: list[Any] = []
"""The engine is never freed, nor its training batches' tf.data iterator: the worker leaves
with ``os._exit`` once its records are written (dlscale.worker), and freeing them after the
last step waited in TensorFlow's native code under tf-mwms: when the other worker had left
first, rank 1 sat there until the coordination service's heartbeat said so, 37 s after its
last step (AlexNet, 2 workers, a loaded machine, 2 of 2 suite runs and 1 of 1 tries with a
CPU hog beside; py-spy: idle at the line that freed the engine, then, with the engine kept, at
the line whose return closed the batches' generator)."""


def run_training(ctx: WorkerContext, strategy: TFStrategy) -> None:
    """A TensorFlow worker process: every process of these backends trains."""
    dist = strategy.setup(ctx)
    completed = False
    try:
        engine = TFEngine(ctx, strategy, dist)
        _LEFT_TO_EXIT.append(engine)
        run_schedule(ctx, engine)
        completed = True
    finally:
        strategy.teardown(completed)


class TFEngine(TFDataFacts, ModelledSyncEngine):
    """One TensorFlow training process: model, optimizer and data under a strategy."""

    strategy: TFStrategy
    times_forward = True

    def __init__(self, ctx: WorkerContext, strategy: TFStrategy, dist: Any) -> None:
        cfg = ctx.config
        self.ctx, self.strategy, self.dist = ctx, strategy, dist
        self._reading: Iterator[Any] | None = None  # the epoch's batches (see batches)
        self.synchronizes = strategy.synchronizes
        self.data, self.has_eval = load_tf_data(ctx)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.local_replicas = ctx.process.replicas
        with dist.scope():
            self.model = build_keras_model(cfg)
            self.optimizer = torch_sgd(cfg, self.steps_per_epoch)
            self.optimizer.build(self.model.trainable_variables)
        self._steps = {sync: self._make_step(sync) for sync in (True, False)}
        self._forward = self._make_forward()
        self._eval_step = make_eval_step(self.model, cfg)
        self._last: Any = None
        gradient = trainable_bytes(self.model)
        facts = {
            "strategy": type(dist).__name__,
            "replicas_in_sync": dist.num_replicas_in_sync,
            "weights": initial_weights(cfg),
        }
        if ctx.rank == ctx.layout.training_ranks[0]:
            facts.update(strategy.describe(ctx))
        payload = strategy.modelled_bytes(gradient, ctx.config.workers)
        self.declare_payload(ctx, gradient, payload, facts)

    def _make_step(self, sync: bool) -> Any:
        dist, model, optimizer, strategy = self.dist, self.model, self.optimizer, self.strategy
        in_sync = dist.num_replicas_in_sync
        skip = not (sync and strategy.aggregates_in_optimizer)
        task = task_of(self.ctx.config)

        def replica_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = task.loss(y, model(x, training=True))
                scaled = loss / in_sync  # summed over the replicas: the global batch's mean
            variables = model.trainable_variables
            grads = strategy.gradients(tape, scaled, variables, sync)
            pairs = zip(grads, variables, strict=True)
            optimizer.apply_gradients(pairs, skip_gradients_aggregation=skip)
            return loss

        @tf.function(autograph=needs_autograph(self.ctx.config))
        def step(batch: Any) -> Any:
            local = dist.experimental_local_results(dist.run(replica_step, args=batch))
            return tf.add_n(list(local)) / len(local)

        return step

    def batches(self, epoch: int) -> Iterator[Any]:
        """This process's batches from its own tf.data pipeline; under a strategy each batch
        handed to the replicas as per-replica values (replica i of this process: its i-th
        ``batch_per_worker`` images). Not through ``distribute_datasets_from_function``: at one
        inter-op thread its iterator slowed every step of a ResNet-44 by ~45% on this machine,
        even steps that did not read it (docs/benchmarks.md, "TensorFlow")."""
        local = checked_batches(self.data, self.data.train_batches(epoch), epoch)
        # held by the engine, which is never freed (_LEFT_TO_EXIT), and read by a for loop, not
        # `yield from`: closing this generator after the last step then frees no tf.data
        # iterator, whose deletion waited on a peer that had left (tf-mwms)
        self._reading = local
        if not self.strategy.distributes_values:
            for batch in local:  # noqa: UP028 (yield from would close it with this generator)
                yield batch
            return
        size, replicas = self.ctx.config.batch_per_worker, self.local_replicas
        for x, y in local:

            def part(context: Any, x: Any = x, y: Any = y) -> tuple[Any, Any]:
                first = context.replica_id_in_sync_group % replicas * size
                return x[first : first + size], y[first : first + size]

            yield self.dist.experimental_distribute_values_from_function(part)

    def _make_forward(self) -> Any:
        """A step's forward and loss alone (traced at its first call: the probe's warm-up)."""
        dist, model, task = self.dist, self.model, task_of(self.ctx.config)

        def replica_forward(x: Any, y: Any) -> Any:
            return task.loss(y, model(x, training=True))

        @tf.function(autograph=needs_autograph(self.ctx.config))
        def forward(batch: Any) -> Any:
            local = dist.experimental_local_results(dist.run(replica_forward, args=batch))
            return tf.add_n(list(local)) / len(local)

        return forward

    def forward_only(self, batch: Any) -> None:
        self._last = self._forward(batch)

    def step(self, batch: Any) -> Any:
        self._last = self._steps[self._sync](batch)
        if self._sync:
            self.count_synced_step()
        return self._last

    def sync(self) -> None:
        """Wait for the last step (its loss is its last output); once per step, not per call."""
        if self._last is not None:
            self._last.numpy()
            self._last = None

    def evaluate(self) -> tuple[int, int, float]:
        in_replica = self.dist if self.strategy.evaluates_in_replica else None
        return evaluate_model(self.data, self._eval_step, in_replica)

    def save_params(self) -> None:
        save_keras_params(self.model, self.ctx)

    def framework_facts(self) -> dict[str, Any]:
        return tensorflow_environment()
