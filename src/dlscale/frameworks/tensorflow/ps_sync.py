"""tf-ps ``ps_mode = "sync"``: TensorFlow 1's synchronous parameter server, the 2018 study's.

TensorFlow 2's ParameterServerStrategy has no synchronous mode; TF1's ``SyncReplicasOptimizer``
still runs on TensorFlow 2.21 (deprecated), in a graph and a ``tf.compat.v1.Session``. This
process stays eager for its data (the same tf.data pipeline as every TensorFlow engine) and
builds one graph for training:

* the Keras twin of the model, its variables placed on the ps tasks round-robin
  (``replica_device_setter``), its computation on this worker;
* each step, this worker's batch is fed in, the worker computes its replica's gradient (plus
  weight decay, as ``torch.optim.SGD`` adds it) and pushes it into the ps's accumulators;
  worker 0 (the chief) runs the optimizer's queue runner, which waits for ``workers``
  gradients, applies their mean with PyTorch's SGD rule (TF1's ``MomentumOptimizer`` keeps
  ``v = momentum * v + g; w -= lr * v``, the same rule) and hands every worker a token to
  go on. So a step is DDP's: the mean gradient of the global batch, applied once;
* the initial weights are the PyTorch twin's (``weights = "torch"``), assigned by the chief
  before any worker starts.

Two properties of TF1's optimizer are held here (docs/equivalence.md, the probe):

* it aggregates any ``workers`` gradients of the current step, not one from each worker. The
  chief's "init tokens" would let a worker push two gradients before another pushed one, so
  they are not used: a worker's first push then blocks on its token until every worker has
  pushed. The workers share one token queue, so a fast worker could still take a paused
  worker's token of a later step and push twice to one update: a barrier (``StepBarrier``)
  holds each push until every other worker took its token of the step before. Each token
  carries the global step the worker's next gradient belongs to; every worker checks that its
  tokens count 1, 2, 3... without a gap or a repeat, which proves every update was the mean of
  exactly one gradient from each worker (a repeat would be two of one worker's gradients in
  one update), and a run where that fails ends with an error;
* the chief never ends by itself (its queue runner waits for the next step's gradients): this
  engine stops it after the last step, and the launcher stops the ps tasks.

Per-step times are each worker's own (a step returns once the update it waits for is applied);
no probe without synchronization (a step without the ps is not this algorithm's step), so
exposed communication is not measured. Bytes: the model is a pull of every variable and a push
of every gradient per step (2 x the gradient bytes, as tf-ps async and torch-ps count);
dlscale cannot see gRPC's traffic. BatchNorm's running statistics live on the ps, and each
worker writes its own batch's (the last writer's are kept, as rank 0's are in DDP).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from dlscale.contract.algorithms import PATTERN_FACT
from dlscale.contract.engine import SyncStrategy
from dlscale.contract.errors import UserError
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.frameworks.tensorflow.data import checked_batches
from dlscale.frameworks.tensorflow.declare import TFPSOptions
from dlscale.frameworks.tensorflow.env import import_tensorflow, set_threads, tensorflow_environment
from dlscale.frameworks.tensorflow.loop import (
    TFDataFacts,
    build_keras_model,
    evaluate_model,
    load_tf_data,
    save_keras_params,
    trainable_bytes,
)
from dlscale.frameworks.tensorflow.tasks import task_of
from dlscale.frameworks.tensorflow.transfer import torch_values
from dlscale.frameworks.tensorflow.user_model import initial_weights
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.engine import ModelledSyncEngine
from dlscale.runtime.schedule import run_schedule

tf = import_tensorflow()
v1 = tf.compat.v1

READY_WAIT_S = 600.0
"""How long a worker waits for the chief to set the initial weights (a chief still building
its model on a busy machine, or one that died: the launcher ends the run then)."""


def _threads(ctx: WorkerContext) -> Any:
    return v1.ConfigProto(intra_op_parallelism_threads=ctx.threads, inter_op_parallelism_threads=2)


def start_worker_server(ctx: WorkerContext) -> tuple[Any, Any]:
    """The cluster in TF_CONFIG, and this worker's gRPC server in it, started."""
    cluster = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    server = tf.distribute.Server(
        cluster, job_name="worker", task_index=ctx.process.index, config=_threads(ctx), start=True
    )
    return cluster, server


def worker_session(ctx: WorkerContext, server: Any, graph: Any) -> Any:
    """A session of ``graph`` on this worker's server that sees the ps tasks and this worker,
    not the other workers: it neither waits for them to start nor fails when they end first."""
    config = _threads(ctx)
    config.device_filters.extend(["/job:ps", f"/job:worker/task:{ctx.process.index}"])
    return v1.Session(server.target, graph=graph, config=config)


def check_token(previous: int, token: int, worker: int) -> int:
    """The global step a worker's next gradient belongs to, after it pushed one tagged
    ``previous``: exactly ``previous + 1`` when every update took one gradient from each
    worker. Anything else is an error naming what happened."""
    if token != previous + 1:
        raise RuntimeError(
            f"the synchronous parameter server mixed gradients: worker {worker} pushed its "
            f"gradient for global step {previous} and was handed step {token}, so an update "
            "took "
            + ("two gradients of one worker" if token == previous else "no gradient of it")
            + ": not a synchronous step of every worker (docs/equivalence.md)"
        )
    return token


class StepBarrier:
    """No worker pushes its gradient for a step before every other worker has taken its token
    of the step before. TF1's workers share one token queue: without this, a worker whose
    process the machine paused between its push and its take (a loaded node) lets a fast
    worker take its token too, and push a second gradient to the same update (a CI run saw it:
    ``check_token`` ended the run). Each worker has a queue on ps task 0; a worker that took
    its token puts one item in each other worker's queue, and a worker's push waits until it
    can take ``workers - 1`` items from its own. Items of one worker cannot be two in a queue:
    its next one comes after the next update, which waits for this worker's push.

    A worker's items go in as its step's ``Session.run`` starts, which is after it took its last
    token (that ``run`` returned): they travel while it computes its gradient, and the push
    waits only for the slowest worker's start. Cost measured (Machine A, tiny on digits, 2
    workers, 3 runs each, alternated): step median 17.6 ms against 17.1 ms without the barrier,
    throughput within noise; 18.4 ms with the items put in after the take instead."""

    def __init__(self, worker: int, workers: int) -> None:
        self.worker, self.workers = worker, workers
        with v1.device("/job:ps/task:0"):
            self.queues = [
                v1.FIFOQueue(
                    max(workers, 2),
                    [tf.int32],
                    shapes=[()],
                    shared_name=f"dlscale_step_barrier_{w}",
                    name=f"dlscale_step_barrier_{w}",
                )
                for w in range(workers)
            ]

    def before_the_push(self, grads: list[Any]) -> list[Any]:
        """The gradients, computed first and pushed only once every other worker took its
        last token."""
        if self.workers == 1:
            return grads
        with v1.device("/job:ps/task:0"):
            others = self.queues[self.worker].dequeue_many(self.workers - 1)
        with tf.control_dependencies([others]):
            return [None if g is None else tf.identity(g) for g in grads]

    def arrived(self) -> Any:
        """This worker took its last token (its first step: it has none to take): one item in
        every other worker's queue."""
        return tf.group(
            *[q.enqueue(self.worker) for w, q in enumerate(self.queues) if w != self.worker]
        )


class SyncPSEngine(TFDataFacts, ModelledSyncEngine):
    """One worker of the synchronous parameter server: its replica's steps in a TF1 graph."""

    resumable = False

    def __init__(self, ctx: WorkerContext) -> None:
        cfg = ctx.config
        self.ctx, self.worker = ctx, ctx.process.index
        self.strategy = SyncStrategy()  # nothing counted: the bytes are the model's
        cluster, self.server = start_worker_server(ctx)
        self.data, self.has_eval = load_tf_data(ctx)
        self.steps_per_epoch = self.data.steps_per_epoch
        self.graph = tf.Graph()
        with self.graph.as_default():
            self._build(cluster)
        self.session = worker_session(ctx, self.server, self.graph)
        self._queue_runners: list[threading.Thread] = []
        self._stopper = tf.train.Coordinator()  # takes the queue runner's error at close
        self._start()
        gradient = trainable_bytes(self.model)
        options = cfg.typed(TFPSOptions)
        self.declare_payload(
            ctx,
            gradient,
            2.0 * gradient,
            {
                "strategy": "SyncReplicasOptimizer",
                "algorithm": "synchronous parameter server (TF1 SyncReplicasOptimizer): each "
                "update the mean of one gradient from every worker, checked by step tokens",
                "ps_tasks": options.num_ps,
                PATTERN_FACT: "ps-sync",
                "servers": options.num_ps,
                "replicas_to_aggregate": cfg.workers,
                "weights": initial_weights(cfg),
            },
        )

    def _build(self, cluster: Any) -> None:
        cfg = self.ctx.config
        place = v1.train.replica_device_setter(
            worker_device=f"/job:worker/task:{self.worker}", cluster=cluster
        )
        with v1.device(place):
            self.model = build_keras_model(cfg, transfer=False)
            task = task_of(cfg)
            floatx = tf.as_dtype(cfg.precision)
            kind, shape, targets = task.input_spec(self.data.input_shape, cfg.precision)
            self._x = v1.placeholder(kind, shape, name="x")  # as the pipeline made them
            self._y = v1.placeholder(tf.int64, targets, name="y")
            built = {id(op) for op in self.model.updates}  # on the model's own Input
            self._loss = task.loss(self._y, self.model(self._x, training=True))
            # BatchNorm's running statistics, as this step's batch updates them
            bn_updates = [op for op in self.model.updates if id(op) not in built]
            variables = self.model.trainable_variables
            grads = v1.gradients(self._loss, variables)
            if cfg.weight_decay:  # torch.optim.SGD's L2 term, added before the mean
                grads = [g + cfg.weight_decay * v for g, v in zip(grads, variables, strict=True)]
            barrier = StepBarrier(self.worker, cfg.workers)
            grads = barrier.before_the_push(grads)
            # the rate and momentum as tensors of the variables' dtype: TF1's optimizers would
            # make float32 tensors of Python numbers and cast them (0.01 -> 0.0099999998)
            lr = tf.constant(cfg.effective_lr, floatx)
            base = (
                v1.train.MomentumOptimizer(lr, tf.constant(cfg.momentum, floatx))
                if cfg.momentum
                else v1.train.GradientDescentOptimizer(lr)
            )
            self.optimizer = v1.train.SyncReplicasOptimizer(
                base, replicas_to_aggregate=cfg.workers, total_num_replicas=cfg.workers
            )
            step = v1.train.get_or_create_global_step()
            train = self.optimizer.apply_gradients(
                list(zip(grads, variables, strict=True)), global_step=step
            )
            # one op for the statistics: nothing of theirs is fetched back to Python per step
            self._train = [self._loss, train, tf.group(*bn_updates), barrier.arrived()]
            self._eval = list(task.counts(self._y, self.model(self._x, training=False)))
            self._ready = v1.Variable(False, trainable=False, name="dlscale_weights_set")
            self._set_ready = self._ready.assign(True)
            self._init = v1.global_variables_initializer()
            self._local_init = self.optimizer.local_step_init_op
            self._local_step = self.optimizer._local_step
            if self.worker == 0:
                self._chief_runner = self.optimizer.get_chief_queue_runner()
                self._weights = self._weight_feeds()

    def _weight_feeds(self) -> tuple[Any, dict[Any, np.ndarray]]:
        """The ops that set the initial weights, and their feed (the chief runs them)."""
        cfg = self.ctx.config
        if initial_weights(cfg) != "torch":
            return v1.no_op(), {}
        pairs = torch_values(self.model, FRAMEWORKS.get("torch").initial_weights(cfg))
        feeds = {v1.placeholder(v.dtype.base_dtype, v.shape): value for v, value in pairs}
        ops = [v.assign(ph) for (v, _), ph in zip(pairs, feeds, strict=True)]
        return tf.group(*ops), feeds

    def _start(self) -> None:
        """The chief initializes every variable, sets the initial weights and starts the
        queue runner that applies the updates; the other workers wait for the weights."""
        run = self.session.run
        if self.worker == 0:
            run(self._init)
            op, feeds = self._weights
            run(op, feeds)
            run(self._set_ready)
            self._queue_runners = self._chief_runner.create_threads(
                self.session, coord=self._stopper, daemon=True, start=True
            )
        else:
            deadline = time.monotonic() + READY_WAIT_S
            while not self._weights_set():
                if time.monotonic() > deadline:
                    raise UserError(
                        f"tf-ps sync: worker {self.worker} waited {READY_WAIT_S:.0f} s for the "
                        "chief (worker 0) to set the initial weights; see worker 0's log"
                    )
                time.sleep(0.05)
        run(self._local_init)
        self._tag = int(run(self._local_step))

    def _weights_set(self) -> bool:
        try:
            return bool(self.session.run(self._ready))
        except tf.errors.FailedPreconditionError:  # not initialized yet
            return False

    def batches(self, epoch: int) -> Iterator[Any]:
        for x, y in checked_batches(self.data, self.data.train_batches(epoch), epoch):
            yield x.numpy(), y.numpy()

    def step(self, batch: Any) -> Any:
        x, y = batch
        loss, token, *_ = self.session.run(self._train, {self._x: x, self._y: y})
        self._tag = check_token(self._tag, int(token), self.worker)
        self.count_synced_step()
        return float(loss)

    def no_sync(self) -> None:
        return None  # a step without the ps is not this algorithm's step

    def evaluate(self) -> tuple[int, int, float]:
        def eval_step(x: Any, y: Any) -> Any:
            return self.session.run(self._eval, {self._x: x.numpy(), self._y: y.numpy()})

        return evaluate_model(self.data, eval_step)

    def save_params(self) -> None:
        save_keras_params(self.model, self.ctx, read=self.session.run)

    def close(self) -> None:
        """End the chief's queue runner (it waits for gradients that will not come) and the
        session; the ps tasks are the launcher's to stop."""
        self._stopper.request_stop()
        self.session.close()  # cancels the queue runner's pending take
        for thread in self._queue_runners:
            thread.join(timeout=10)

    def framework_facts(self) -> dict[str, Any]:
        return tensorflow_environment()


def run(ctx: WorkerContext) -> None:
    """A worker of the synchronous parameter server (the ps tasks serve: ``ps.serve``)."""
    set_threads(ctx.threads, 1)  # the eager data pipeline's pools
    engine = SyncPSEngine(ctx)
    try:
        run_schedule(ctx, engine)
    finally:
        engine.close()
