"""The JAX engine of the measurement kernel: jax-single (one process) and jax-dp (data parallel
across processes), one training step for both.

The step is PyTorch's: the Flax twin (:mod:`dlscale.frameworks.jax.models`,
:mod:`~dlscale.frameworks.jax.imagenet_models`) from the PyTorch twin's initial weights, the
batch's mean cross-entropy, its gradient, and :func:`~.steps.torch_sgd` (PyTorch's SGD rule:
weight decay added to the gradient, ``buf = m * buf + g``, ``p -= lr * buf``), all in one
``jax.jit`` (:mod:`~dlscale.frameworks.jax.steps` builds the compiled functions).
A model with dropout draws its masks from the step's key: the run's seed folded with the step's
index, and under jax-dp with the replica's (each worker its own masks, as under DDP).

jax-dp: every process is one CPU device of a global mesh (``jax.distributed.initialize`` with
the coordinator at rank 0's host and the run's first port). The step is a ``jax.shard_map``
over the mesh's ``dp`` axis: each device computes its own batch's loss and gradient, with its
own BatchNorm statistics as DDP's replicas do (a ``jit`` of the global batch would normalize
over every worker's images: synchronized BatchNorm, another algorithm), then ``lax.pmean``
averages the gradients, which XLA runs as an all-reduce over gloo, and every device applies the
same update. Parameters and momentum are replicated; BatchNorm's running statistics carry a
leading axis of one row per device. The exposed-communication probe runs the same step with the
``pmean`` left out (each device then applies its own gradient, as DDP's ``no_sync`` step does),
and the step's forward and loss alone (``forward_only``: the backward's share of a step).

Data: the numpy reference batches of the neutral data set, as MXNet's engine takes them (same
shards, order, crops and flips as every engine). Compilation: both steps (and the probe's
forward) are compiled before the first window (``lower().compile()``) and their compile times
stored in the run's strategy facts (``compile_s``), so no window and no warm-up step times the
compiler.

Bytes: XLA's gloo traffic is not visible; the bytes are the ring all-reduce's model,
``2 (N - 1) / N`` times the gradient's bytes per synchronized step. The messages: one gloo
all-reduce per operand of the compiled step's all-reduces (:mod:`~.hlo`), in the strategy's
facts.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dlscale.contract.algorithms import MESSAGES_FACT, PATTERN_FACT
from dlscale.contract.datasets import DATASETS
from dlscale.contract.engine import SyncStrategy
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.contract.models import MODELS, PARAMS_FILE
from dlscale.contract.registry import load_object
from dlscale.datasets.arrays import NumpyDataset
from dlscale.frameworks.jax.env import import_jax, jax_environment, start_distributed
from dlscale.frameworks.jax.hlo import all_reduce_messages
from dlscale.frameworks.jax.steps import AXIS, StepFunctions
from dlscale.frameworks.jax.transfer import state_arrays, state_trees
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.engine import ModelledSyncEngine
from dlscale.runtime.schedule import run_schedule


class JaxEngine(ModelledSyncEngine):
    """One JAX training process (jax-single, or one device of jax-dp)."""

    resumable = True  # every replica holds the same parameters and momentum
    times_forward = True

    def __init__(self, ctx: WorkerContext, *, distributed: bool) -> None:
        cfg = ctx.config
        self.ctx, self.distributed = ctx, distributed
        self.strategy = SyncStrategy()  # counts nothing: the bytes are the model's
        self.jax = jax = import_jax(
            threads=ctx.threads, local_rank=ctx.local_rank, precision=cfg.precision
        )
        if distributed:
            start_distributed(jax, ctx)
        self.synchronizes = distributed and cfg.workers > 1
        self.times_forward = self.synchronizes  # one process compiles no forward (_compile)
        spec = MODELS.get(cfg.model)
        self.classes = DATASETS.get(cfg.dataset).num_classes or spec.default_classes
        self.data: NumpyDataset = DATASETS.get(cfg.dataset).load(
            cfg,
            shard=ctx.layout.first_replica(ctx.rank),
            shards=cfg.workers,
            replicas=1,
            input_size=cfg.image_size or spec.input_size,
            num_classes=spec.default_classes,
        )
        self.steps_per_epoch, self.has_eval = self.data.steps_per_epoch, self.data.has_eval
        self.dtype = cfg.precision
        self.model = load_object(spec.builders["jax"])(
            self.classes, **spec.dropout_kwargs(cfg.dropout)
        )
        rate = spec.dropout if cfg.dropout is None else cfg.dropout
        self.drops = bool(rate)  # a dropout layer that draws masks: a new key every step
        self._taken = 0
        self._eval: Any = None
        self._forwarded: Any = None  # the last forward's outputs, until sync() waits for them
        self._base_key = jax.random.PRNGKey(cfg.seed)
        self.size = cfg.image_size or spec.input_size  # what the data set was made at
        if distributed:
            from jax.sharding import Mesh, NamedSharding
            from jax.sharding import PartitionSpec as P

            self.mesh = Mesh(np.array(jax.devices()), (AXIS,))
            self.replicated = NamedSharding(self.mesh, P())
            self.split = NamedSharding(self.mesh, P(AXIS))
        params, stats = self._initial_variables()
        momentum = jax.tree.map(np.zeros_like, params)
        self._place(params, stats, momentum)
        self._still = self._placed_key(self._base_key)
        gradient = sum(int(leaf.size) * leaf.dtype.itemsize for leaf in jax.tree.leaves(params))
        workers = cfg.workers
        facts: dict[str, Any] = {
            "algorithm": (
                "all-reduce of the gradients (lax.pmean in a shard_map; XLA's CPU "
                "collectives over gloo), BatchNorm per replica"
                if self.synchronizes
                else "none (one replica)"
            ),
            "weights": "torch",
            "flax_api": "linen",
        }
        if self.synchronizes:
            facts[PATTERN_FACT] = "ring"
        facts["compile_s"] = self._compile()
        if self.synchronizes:  # one gloo all-reduce per gradient array: frameworks/jax/hlo.py
            with contextlib.suppress(ValueError):  # a type it cannot size: no list, no failure
                facts[MESSAGES_FACT] = all_reduce_messages(self._steps[True].as_text())
        payload = 2 * (workers - 1) / workers * gradient if self.synchronizes else None
        self.declare_payload(ctx, gradient, payload, facts)

    # -- set-up -------------------------------------------------------------------------

    def _images(self, batch: int) -> tuple[int, ...]:
        """The shape of ``batch`` of the run's images (NCHW, as every data set makes them)."""
        return (batch, 3, self.size, self.size)

    def _initial_variables(self) -> tuple[Any, Any]:
        """The PyTorch twin's initial weights (the run's seed) in the Flax twin's trees."""
        from dlscale.frameworks.jax.transfer import load_torch_state

        jax = self.jax
        shape = self._images(1)
        variables = jax.eval_shape(
            lambda: self.model.init(jax.random.PRNGKey(0), np.zeros(shape, self.dtype), train=False)
        )
        state = FRAMEWORKS.get("torch").initial_weights(self.ctx.config)
        loaded = load_torch_state(variables, state, self.dtype)
        return loaded["params"], loaded.get("batch_stats", {})

    def _place(self, params: Any, stats: Any, momentum: Any) -> None:
        jax = self.jax
        if not self.distributed:
            self.params, self.stats, self.momentum = jax.device_put((params, stats, momentum))
            return

        def put(sharding: Any, tree: Any) -> Any:
            return jax.tree.map(
                lambda leaf: jax.make_array_from_process_local_data(sharding, leaf), tree
            )

        self.params = put(self.replicated, params)
        self.momentum = put(self.replicated, momentum)
        self.stats = put(self.split, jax.tree.map(lambda leaf: leaf[None], stats))

    def _compile(self) -> dict[str, float]:
        """The steps (and, under synchronization, the probe's forward) compiled ahead of the
        first window; seconds each took."""
        jax, cfg = self.jax, self.ctx.config
        batch = cfg.batch_per_worker * (cfg.workers if self.distributed else 1)
        kwargs = {"sharding": self.split} if self.distributed else {}
        x = jax.ShapeDtypeStruct(self._images(batch), np.dtype(self.dtype), **kwargs)
        y = jax.ShapeDtypeStruct((batch,), np.dtype(self._label_dtype()), **kwargs)
        functions = StepFunctions(jax, self.model, cfg, self.mesh if self.distributed else None)
        self._steps: dict[bool, Any] = {}
        seconds = {}
        for sync in (True, False) if self.synchronizes else (True,):
            started = time.perf_counter()
            lowered = functions.step(sync).lower(
                self.params, self.stats, self.momentum, x, y, self._still
            )
            self._steps[sync] = lowered.compile()
            seconds["step" if sync else "step_without_sync"] = time.perf_counter() - started
        if self.synchronizes:  # the probe times it; one process runs no probe
            started = time.perf_counter()
            lowered = functions.forward().lower(self.params, self.stats, x, y, self._still)
            self._forward = lowered.compile()
            seconds["forward"] = time.perf_counter() - started
        return seconds

    def _key(self) -> Any:
        """The step's dropout key: the seed's folded with the step's index where the model
        draws masks, else the same array every step (no work on the host)."""
        if not self.drops:
            return self._still
        self._taken += 1
        return self._placed_key(self.jax.random.fold_in(self._base_key, self._taken))

    def _placed_key(self, key: Any) -> Any:
        if not self.distributed:
            return key
        return self.jax.make_array_from_process_local_data(self.replicated, np.asarray(key))

    def _label_dtype(self) -> str:
        return "int64" if self.dtype == "float64" else "int32"

    # -- the kernel's words -------------------------------------------------------------

    def _global(self, array: np.ndarray) -> Any:
        if not self.distributed:
            return self.jax.device_put(array)
        return self.jax.make_array_from_process_local_data(self.split, array)

    def batches(self, epoch: int) -> Iterator[Any]:
        labels = self._label_dtype()
        for x, y in self.data.train_batches(epoch):
            yield self._global(np.asarray(x, self.dtype)), self._global(np.asarray(y, labels))

    def step(self, batch: Any) -> Any:
        x, y = batch
        compiled = self._steps[self._sync or not self.synchronizes]
        self.params, self.stats, self.momentum, loss = compiled(
            self.params, self.stats, self.momentum, x, y, self._key()
        )
        if self._sync and self.synchronizes:
            self.count_synced_step()
        return loss

    def forward_only(self, batch: Any) -> None:
        """The step's forward and loss (BatchNorm from the batch), no gradient or update: the
        engine's statistics are left as they were."""
        x, y = batch
        self._forwarded = self._forward(self.params, self.stats, x, y, self._still)

    def sync(self) -> None:
        self.jax.block_until_ready((self.params, self.stats, self.momentum, self._forwarded))
        self._forwarded = None

    def loss_values(self, losses: list[Any]) -> list[float]:
        """This process's own loss of each step (its shard of the global array)."""
        if not self.distributed:
            return [float(loss) for loss in losses]
        return [float(np.asarray(loss.addressable_shards[0].data)[0]) for loss in losses]

    def _local(self, tree: Any, *, stacked: bool = False) -> Any:
        """This process's copy of a global tree (its row of a stacked one)."""
        if not self.distributed:
            return tree
        return self.jax.tree.map(
            lambda a: a.addressable_shards[0].data[0] if stacked else a.addressable_shards[0].data,
            tree,
        )

    def evaluate(self) -> tuple[int, int, float]:
        """This process's share of the held-out set in eval mode (its own BatchNorm
        statistics); the sums stay on the device and are read once, after the last batch."""
        jax = self.jax
        params, stats = self._local(self.params), self._local(self.stats, stacked=True)
        variables = {"params": params, "batch_stats": stats} if stats else {"params": params}
        if self._eval is None:  # compiled once a run (and once more for a shorter last batch)
            self._eval = jax.jit(self._eval_sums)
        hits, losses, total = 0, 0.0, 0
        for x, y in self.data.eval_batches():
            x, y = np.asarray(x, self.dtype), np.asarray(y, self._label_dtype())
            batch_hits, batch_loss = self._eval(variables, x, y)
            hits, losses, total = hits + batch_hits, losses + batch_loss, total + len(y)
        return int(hits), total, float(losses)

    def _eval_sums(self, variables: Any, x: Any, y: Any) -> Any:
        """The batch's correct predictions and summed loss (the weights are arguments, not
        constants of the compiled function)."""
        jax = self.jax
        jnp = jax.numpy
        logits = self.model.apply(variables, x, train=False)
        logp = jax.nn.log_softmax(logits)
        loss = -jnp.sum(jnp.take_along_axis(logp, y[:, None], axis=1))
        return jnp.sum(jnp.argmax(logits, axis=1) == y), loss

    def save_params(self) -> None:
        """The trained parameters under PyTorch's keys (BatchNorm's statistics left out)."""
        from dlscale.frameworks.jax.transfer import torch_state

        state = torch_state(self.jax.device_get(self._local(self.params)))
        np.savez(self.ctx.run_dir / PARAMS_FILE, **state)  # type: ignore[arg-type]

    def _replica(self) -> dict[str, Any]:
        """This replica's training state: its parameters, momentum and BatchNorm statistics."""
        return {
            "params": self._local(self.params),
            "momentum": self._local(self.momentum),
            "batch_stats": self._local(self.stats, stacked=True),
        }

    def checkpoint(self, path: Path) -> None:
        """The parameters, momentum, this replica's BatchNorm statistics and the dropout
        key's step count, as numpy arrays under PyTorch's keys in one ``.npz`` (replaced whole).
        Every replica restores them: the training steps are the uninterrupted run's (training
        normalizes by the batch's statistics); under jax-dp the other replicas' running
        statistics become this replica's (what DDP's buffer broadcast does every step)."""
        arrays = state_arrays(self.jax.device_get(self._replica()))
        arrays["steps_taken"] = np.asarray(self._taken)
        temporary = path.with_name(f".{path.name}.tmp")
        with temporary.open("wb") as out:
            np.savez(out, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path)

    def restore(self, path: Path) -> None:
        with np.load(path) as saved:
            arrays = {key: saved[key] for key in saved.files}
        self._taken = int(arrays.pop("steps_taken"))
        trees = state_trees(arrays, self._replica())
        self._place(trees["params"], trees["batch_stats"], trees["momentum"])

    def barrier(self) -> None:
        if self.distributed:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("dlscale checkpoint")

    def framework_facts(self) -> dict[str, Any]:
        return jax_environment(self.jax)

    def close(self) -> None:
        if self.distributed:
            self.jax.distributed.shutdown()


def _run(ctx: WorkerContext, *, distributed: bool) -> None:
    engine = JaxEngine(ctx, distributed=distributed)
    completed = False
    try:
        run_schedule(ctx, engine)
        completed = True
    finally:
        if completed:
            engine.close()


def run_single(ctx: WorkerContext) -> None:
    _run(ctx, distributed=False)


def run_dp(ctx: WorkerContext) -> None:
    _run(ctx, distributed=True)
