"""The MXNet engine of the measurement kernel: a Gluon training loop, and how it synchronizes.

A backend supplies an :class:`MXStrategy` (which ``gluon.Trainer`` updates the parameters: a
plain one, one on a kvstore, Horovod's ``DistributedTrainer`` in
:mod:`dlscale.frameworks.horovod.mxnet_strategy`); :class:`MXEngine` is the
kernel's :class:`~dlscale.contract.engine.Engine` for it, so MXNet runs are timed exactly as
the others (:mod:`dlscale.runtime.schedule`). The step is the one PyTorch takes: the Gluon twin
of the model (:mod:`dlscale.frameworks.mxnet.models`, hybridized), started from the PyTorch twin's
initial weights when ``weights = "torch"`` (the default), the batch's summed cross-entropy
backpropagated and the gradient rescaled by ``trainer.step(n)`` to the mean over the ``n``
samples the update stands for (the global batch where gradients are summed across workers),
and MXNet's SGD (:mod:`dlscale.frameworks.mxnet.sgd`: PyTorch's rule at a constant rate).

Data: the numpy reference batches of the neutral data set (:meth:`ArrayDataset.train_batches`:
the same shards, order, crops and flips as every engine) copied into NDArrays; MXNet's own
image iterators are not used, so MXNet's input time is numpy's.

MXNet runs operators asynchronously; :meth:`MXEngine.sync` waits for every queued one
(``mx.nd.waitall``) before the kernel reads a clock.
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
from dlscale.datasets.arrays import NumpyDataset
from dlscale.frameworks.mxnet.declare import MXLoopOptions
from dlscale.frameworks.mxnet.env import import_mxnet, mxnet_environment
from dlscale.frameworks.mxnet.user_model import build_own, initial_weights, is_own, own_state
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.engine import ModelledSyncEngine
from dlscale.runtime.schedule import run_schedule


class MXStrategy(SyncStrategy):
    """How an MXNet process trains (:class:`SyncStrategy`'s words, and the hooks below): the
    default is one replica and a plain Trainer (mxnet-single); the distributed strategies
    override what differs."""

    def setup(self, ctx: WorkerContext, mx: Any) -> None:
        """After MXNet's import, before the model is built."""

    def trainer(self, params: Any, cfg: Any, mx: Any) -> Any:
        from dlscale.frameworks.mxnet.sgd import make_sgd

        return mx.gluon.Trainer(params, make_sgd(cfg), kvstore=None)

    def samples_per_update(self, ctx: WorkerContext) -> int:
        """What ``trainer.step`` divides the pushed gradient by: the samples it sums."""
        return ctx.config.batch_per_worker

    def after_step(self) -> None:
        """After ``trainer.step`` (the kvstore's staleness counter)."""

    def unsynced_update(self, trainer: Any, samples: int) -> None:
        """The exposed-communication probe's step without synchronization."""
        trainer.step(samples)

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        """The strategy's facts; ``model``: each trainable parameter's bytes, in key order."""
        return {"algorithm": "none (one replica)"}

    def settle(self, trainer: Any) -> None:
        """:meth:`Engine.settle <dlscale.contract.engine.Engine.settle>`: by default nothing."""


def torch_initial_state(cfg: Any) -> dict[str, np.ndarray] | None:
    """The PyTorch twin's initial weights for ``weights = "torch"`` (same seed as every torch
    backend), else ``None``. Taken before Horovod starts: importing torch after
    ``horovod.mxnet``'s ``init`` crashed the process (SIGSEGV) here, importing it before did not."""
    if initial_weights(cfg) != "torch":
        return None
    return FRAMEWORKS.get("torch").initial_weights(cfg)


def build_gluon_model(cfg: Any, mx: Any, initial: dict[str, np.ndarray] | None) -> Any:
    """The Gluon twin of ``cfg.model`` with the ``initial`` weights (PyTorch's keys), else
    Gluon's initializer (Xavier-uniform, seeded), hybridized."""
    from dlscale.frameworks.mxnet.transfer import load_torch_weights

    spec = MODELS.get(cfg.model)
    classes = DATASETS.get(cfg.dataset).num_classes or spec.default_classes
    mx.random.seed(cfg.seed)
    net = load_object(spec.builders["mxnet"])(classes, **spec.dropout_kwargs(cfg.dropout))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    if initial is not None:
        load_torch_weights(net, initial)
    if cfg.precision == "float64":  # the same initial weights, then every parameter float64
        net.cast("float64")
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def load_mx_data(ctx: WorkerContext, classes: int | None = None) -> NumpyDataset:
    """This worker's shard of the run's data set (numpy), made for ``classes`` (by default
    the model's)."""
    cfg = ctx.config
    spec = MODELS.get(cfg.model)
    data: NumpyDataset = DATASETS.get(cfg.dataset).load(
        cfg,
        shard=ctx.layout.first_replica(ctx.rank),
        shards=cfg.workers,
        replicas=1,
        input_size=cfg.image_size or spec.input_size,
        num_classes=spec.default_classes if classes is None else classes,
    )
    return data


def run_training(ctx: WorkerContext, strategy: MXStrategy) -> None:
    """An MXNet training process."""
    cfg = ctx.config
    initial = torch_initial_state(cfg)
    mx = import_mxnet(mkldnn=cfg.typed(MXLoopOptions).mkldnn, threads=ctx.threads)
    strategy.setup(ctx, mx)
    completed = False
    try:
        run_schedule(ctx, MXEngine(ctx, strategy, mx, initial))
        completed = True
    finally:
        strategy.teardown(completed)


class MXEngine(ModelledSyncEngine):
    """One MXNet training process: the Gluon model, its trainer and this worker's data."""

    strategy: MXStrategy
    times_forward = True

    def __init__(
        self,
        ctx: WorkerContext,
        strategy: MXStrategy,
        mx: Any,
        initial: dict[str, np.ndarray] | None,
    ) -> None:
        cfg = ctx.config
        self.ctx, self.strategy, self.mx = ctx, strategy, mx
        self.synchronizes = strategy.synchronizes
        if is_own(cfg):  # the user's block: its classes make the data
            self.net, classes = build_own(cfg, mx)
            self.data = load_mx_data(ctx, classes)
        else:
            self.data = load_mx_data(ctx)
            self.net = build_gluon_model(cfg, mx, initial)
        self.has_eval = self.data.has_eval
        self.steps_per_epoch = self.data.steps_per_epoch
        self.params = self.net.collect_params()
        self.trainer = strategy.trainer(self.params, cfg, mx)
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.samples = strategy.samples_per_update(ctx)
        trainable = [p for p in self.params.values() if p.grad_req != "null"]
        sizes = [int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in trainable]
        gradient = sum(sizes)
        facts = {
            "trainer": type(self.trainer).__name__,
            "optimizer": "mxnet SGD (sgd_mom_update)",
            "weights": initial_weights(cfg),
            "hybridized": isinstance(self.net, mx.gluon.HybridBlock),
        }
        if ctx.rank == ctx.layout.training_ranks[0]:
            facts.update(strategy.describe(ctx, sizes))
        self.declare_payload(
            ctx, gradient, strategy.modelled_bytes(gradient, ctx.config.workers), facts
        )

    def batches(self, epoch: int) -> Iterator[Any]:
        nd, cpu = self.mx.nd, self.mx.cpu()
        kind = self.ctx.config.precision  # the net's float type: inputs and labels in it
        for x, y in self.data.train_batches(epoch):
            yield nd.array(x, ctx=cpu, dtype=kind), nd.array(y, ctx=cpu, dtype=kind)

    def forward_only(self, batch: Any) -> None:
        """:meth:`step`'s forward and loss, recorded, without backward or update."""
        x, y = batch
        with self.mx.autograd.record():
            self.loss(self.net(x), y)

    def step(self, batch: Any) -> Any:
        x, y = batch
        with self.mx.autograd.record():
            losses = self.loss(self.net(x), y)
        losses.backward()
        if self._sync:
            self.trainer.step(self.samples)
            self.strategy.after_step()
            self.count_synced_step()
        else:
            self.strategy.unsynced_update(self.trainer, self.samples)
        return losses.mean()

    def sync(self) -> None:
        self.mx.nd.waitall()

    def loss_values(self, losses: list[Any]) -> list[float]:
        return [float(loss.asscalar()) for loss in losses]

    def evaluate(self) -> tuple[int, int, float]:
        """Sums kept as NDArrays and read once at the end (a read per batch would wait for
        every batch before queuing the next)."""
        nd, cpu = self.mx.nd, self.mx.cpu()
        correct, loss_sum = nd.zeros((1,), dtype="int64"), nd.zeros((1,), dtype="float64")
        total = 0
        for x, y in self.data.eval_batches():
            kind = self.ctx.config.precision
            logits = self.net(nd.array(x, ctx=cpu, dtype=kind))
            labels = nd.array(y, ctx=cpu, dtype=kind)
            loss_sum += self.loss(logits, labels).astype("float64").sum()
            correct += (logits.argmax(axis=1) == labels).astype("int64").sum()
            total += len(y)
        return int(correct.asscalar()), total, float(loss_sum.asscalar())

    def settle(self) -> None:
        self.strategy.settle(self.trainer)

    def save_params(self) -> None:
        """The trained parameters under PyTorch's keys (BatchNorm's statistics left out)."""
        from dlscale.frameworks.mxnet.transfer import gluon_state

        own = is_own(self.ctx.config)
        state = own_state(self.net) if own else gluon_state(self.net, parameters_only=True)
        np.savez(self.ctx.run_dir / PARAMS_FILE, **state)  # type: ignore[arg-type]

    def framework_facts(self) -> dict[str, Any]:
        return mxnet_environment(self.mx)


def run_single(ctx: WorkerContext) -> None:
    run_training(ctx, MXStrategy())
