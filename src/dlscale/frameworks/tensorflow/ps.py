"""tf-ps: TensorFlow 2's ParameterServerStrategy, asynchronous as TF2 does it (``ps_mode =
"async"``, the default; ``"sync"`` is TF1's synchronous parameter server:
:mod:`dlscale.frameworks.tensorflow.ps_sync`).

Processes (``declare.ps_roles``): the chief is the coordinator (``ClusterCoordinator``); it
creates the variables (on the ps tasks, round-robin), schedules step functions and records the
windows. Each worker and ps task is a ``tf.distribute.Server`` that serves until the launcher
stops it once the chief has ended (they never exit by themselves).

Asynchronous training: each scheduled function is one replica's step (forward, backward and
PyTorch's SGD applied to the ps variables, the gradient scaled by the run's ``async_update``
rule first: by 1/N for ``mean``, the default, :mod:`dlscale.contract.algorithms`) on whichever
worker is free; no worker waits for another. A kernel step is ``workers`` such functions (one
step of every replica's worth of images), and the kernel times whole windows
(``times_steps = False``): a window schedules its functions and ``join()`` waits for all of
them, which is where TF2's asynchronous training synchronizes too. So there are no per-step
times and no input times, and no probe without synchronization (a step without the ps is not
the same step): exposed communication is not measured for tf-ps.

Loss: each function adds its replica's loss to a variable on the ps; a window's mean loss
stands for each of its steps.

Data: every worker builds its dataset from the function the coordinator sends it
(``create_per_worker_dataset``); the function reads the worker's index
(``experimental_get_current_worker_index``) and takes that replica's shard of each step's plan,
so worker ``i`` gets replica ``i``'s images in the seed's order, as under every other backend.
Which worker runs which step is TF's choice: the order in which updates reach the variables is
not fixed (asynchronous training).

Bytes: the model is a pull and a push of every variable per replica step (2 x the gradient
bytes, as torch-ps counts); dlscale cannot see gRPC's traffic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dlscale.contract.algorithms import PATTERN_FACT, async_gradient_scale
from dlscale.contract.engine import Engine
from dlscale.contract.records import Strategy
from dlscale.frameworks.tensorflow.declare import TFPSOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads, tensorflow_environment
from dlscale.frameworks.tensorflow.loop import (
    TFDataFacts,
    build_keras_model,
    evaluate_model,
    load_tf_data,
    make_eval_step,
    needs_autograph,
    save_keras_params,
    trainable_bytes,
)
from dlscale.frameworks.tensorflow.sgd import torch_sgd
from dlscale.frameworks.tensorflow.tasks import task_of
from dlscale.frameworks.tensorflow.user_model import initial_weights
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.schedule import run_schedule

tf = import_tensorflow()


def _inter_op_threads(ctx: WorkerContext) -> int:
    # TensorFlow's guide gives workers and the coordinator workers + 1 inter-op threads on a
    # machine with fewer cores: scheduled functions block threads while they wait on the ps
    return max(ctx.threads, ctx.config.workers + 1)


def serve(ctx: WorkerContext) -> None:
    """A worker or ps task: a gRPC server of the cluster in TF_CONFIG, until stopped."""
    set_threads(ctx.threads, _inter_op_threads(ctx))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=ctx.threads,
        inter_op_parallelism_threads=_inter_op_threads(ctx),
    )
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=ctx.process.role,
        task_index=ctx.process.index,
        protocol="grpc",
        config=config,
        start=True,
    )
    server.join()


class PSEngine(TFDataFacts, Engine):
    """The coordinator: every replica's steps, scheduled on the workers, timed per window."""

    times_steps = False

    def __init__(self, ctx: WorkerContext) -> None:
        cfg = ctx.config
        self.ctx, self.workers = ctx, cfg.workers
        cluster = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            cluster, task_type="chief", task_id=0, rpc_layer="grpc"
        )
        self.dist = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.dist)
        self.data, self.has_eval = load_tf_data(ctx)  # every replica's shard: the chief's
        self.steps_per_epoch = self.data.steps_per_epoch
        with self.dist.scope():
            self.model = build_keras_model(cfg)
            self.optimizer = torch_sgd(cfg, self.steps_per_epoch)
            self.optimizer.build(self.model.trainable_variables)
            # the steps' losses summed where the variables live: nothing to collect per step
            self._losses = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        self._eval_step = make_eval_step(self.model, cfg)
        self._iterator = iter(self.coordinator.create_per_worker_dataset(self._dataset_fn()))
        self._wait_for_every_workers_iterator()
        self._worker_step = self._make_worker_step()
        gradient = trainable_bytes(self.model)
        ctx.events.write(
            Strategy(
                gradient_bytes=gradient,
                bytes_sent_per_step_model=2 * gradient,
                facts={
                    "strategy": "ParameterServerStrategy",
                    "algorithm": "asynchronous parameter server (TF2 ClusterCoordinator)",
                    "ps_tasks": cfg.typed(TFPSOptions).num_ps,
                    PATTERN_FACT: "ps-async",
                    "servers": cfg.typed(TFPSOptions).num_ps,
                    "async_update": cfg.typed(TFPSOptions).async_update,
                    "variables_per_ps": self._variables_per_ps(),
                    "weights": initial_weights(cfg),
                },
            )
        )

    def _wait_for_every_workers_iterator(self) -> None:
        """Block until every worker has built its dataset's iterator. TF builds them on each
        worker's own coordinator thread, outside ``join()``; a worker still building (a late
        or loaded machine) would leave the first scheduled steps to the others, each training
        on its own replica's next batch instead of the late replica's, and the first window
        would time the building. ``RemoteValueImpl._wait_and_maybe_error`` is private in TF
        2.21 (the public ``get`` would copy the iterator to the chief); an iterator that could
        not be built raises its error here."""
        for remote in self._iterator._values:
            remote._wait_and_maybe_error()

    def _epochs_needed(self) -> int:
        cfg = self.ctx.config
        if cfg.epochs is not None:
            return cfg.epochs
        steps = cfg.warmup_steps + cfg.windows * cfg.steps
        return -(-steps // self.steps_per_epoch)

    def _dataset_fn(self) -> Any:
        data, batch, epochs = self.data, self.ctx.config.batch_per_worker, self._epochs_needed()

        @tf.autograph.experimental.do_not_convert
        def dataset_fn() -> Any:
            replica = tf.distribute.coordinator.experimental_get_current_worker_index()
            pipeline = data.train_batches(0, part=(replica, batch))
            for epoch in range(1, 1 if data.same_every_epoch else epochs):
                pipeline = pipeline.concatenate(data.train_batches(epoch, part=(replica, batch)))
            return pipeline.repeat()  # a fast worker may take more than its share of steps

        return dataset_fn

    def _make_worker_step(self) -> Any:
        dist, model, optimizer = self.dist, self.model, self.optimizer
        cfg = self.ctx.config
        scale = async_gradient_scale(cfg.typed(TFPSOptions).async_update, cfg.workers)
        task = task_of(cfg)

        def replica_step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = task.loss(y, model(x, training=True))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            if scale != 1.0:  # the asynchronous rule (contract/algorithms.py)
                grads = [g * scale for g in grads]
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        losses = self._losses

        @tf.function(autograph=needs_autograph(self.ctx.config))
        def worker_step(iterator: Any) -> None:
            x, y = next(iterator)
            losses.assign_add(tf.cast(dist.run(replica_step, args=(x, y)), tf.float64))

        return worker_step

    def _variables_per_ps(self) -> dict[str, int]:
        placed: dict[str, int] = {}
        for variable in self.model.variables:
            device = variable.device or "?"
            placed[device] = placed.get(device, 0) + 1
        return placed

    def batches(self, epoch: int) -> Iterator[Any]:
        """Placeholders: the workers read their own data (``_dataset_fn``)."""
        return iter(range(self.steps_per_epoch))

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        for _ in range(steps):
            next(batches)
        self._losses.assign(0.0)
        for _ in range(steps * self.workers):  # blocks while TF's queue of closures is full
            self.coordinator.schedule(self._worker_step, args=(self._iterator,))
        self.coordinator.join()
        mean = float(self._losses.numpy()) / (steps * self.workers)
        return [mean] * steps  # each step's mean loss, as the window's mean stands for it

    def evaluate(self) -> tuple[int, int, float]:
        return evaluate_model(self.data, self._eval_step)

    def save_params(self) -> None:
        save_keras_params(self.model, self.ctx)

    def framework_facts(self) -> dict[str, Any]:
        return tensorflow_environment()


def run(ctx: WorkerContext) -> None:
    if not ctx.process.trains:
        serve(ctx)
        return
    if ctx.config.typed(TFPSOptions).ps_mode == "sync":
        from dlscale.frameworks.tensorflow import ps_sync

        ps_sync.run(ctx)
        return
    set_threads(ctx.threads, _inter_op_threads(ctx))
    run_schedule(ctx, PSEngine(ctx))
