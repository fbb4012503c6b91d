"""The JAX engine of the measurement kernel: jax-single (one process) and jax-dp (data parallel
across processes), one training step for both.

The step is PyTorch's: the Flax twin (:mod:`dlscale.frameworks.jax.models`,
:mod:`~dlscale.frameworks.jax.imagenet_models`, :mod:`~dlscale.frameworks.jax.gpt`) from the
PyTorch twin's initial weights, the task's mean loss (:mod:`~dlscale.frameworks.jax.tasks`:
cross-entropy over an image's classes or over every position's next token), its gradient, and
the run's optimizer as PyTorch defines it (:func:`~.steps.torch_sgd`: weight decay added to the
gradient, ``buf = m * buf + g``, ``p -= lr * buf``; :func:`~.steps.torch_adamw`), at the
learning rate of the run's schedule (:func:`dlscale.contract.optimizers.lr_factor` of the
step's count, every step counted as PyTorch's ``LambdaLR`` counts them), all in one ``jax.jit``
(:mod:`~dlscale.frameworks.jax.steps` builds the compiled functions).
A model with dropout draws its masks from the step's key: the run's seed folded with the step's
index, and under jax-dp with the replica's (each worker its own masks, as under DDP).

jax-dp: every process is one CPU device of a global mesh (``jax.distributed.initialize`` with
the coordinator at rank 0's host and the run's first port). The step is a ``jax.shard_map``
over the mesh's ``dp`` axis: each device computes its own batch's loss and gradient, with its
own BatchNorm statistics as DDP's replicas do (a ``jit`` of the global batch would normalize
over every worker's images: synchronized BatchNorm, another algorithm), then ``lax.pmean``
averages the gradients, which XLA runs as an all-reduce over gloo, and every device applies the
same update. Parameters and the optimizer's state are replicated; BatchNorm's running
statistics carry a leading axis of one row per device. The exposed-communication probe runs
the same step with the ``pmean`` left out (each device then applies its own gradient, as DDP's
``no_sync`` step does), and the step's forward and loss alone (``forward_only``: the backward's
share of a step).

Data: the numpy reference batches of the neutral data set, as MXNet's engine takes them (same
shards, order, crops and flips as every engine: :func:`dlscale.runtime.samples.load_samples`).
Compilation: both steps (and the probe's forward) are compiled before the first window
(``lower().compile()``) and their compile times stored in the run's strategy facts
(``compile_s``), so no window and no warm-up step times the compiler.

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
from dlscale.contract.engine import SyncStrategy
from dlscale.contract.frameworks import FRAMEWORKS
from dlscale.contract.models import MODELS, PARAMS_FILE
from dlscale.contract.optimizers import lr_factor, training_steps
from dlscale.contract.registry import load_object
from dlscale.datasets.arrays import NumpyDataset
from dlscale.frameworks.jax.env import import_jax, jax_environment, start_distributed
from dlscale.frameworks.jax.hlo import all_reduce_messages
from dlscale.frameworks.jax.steps import AXIS, STATE, StepFunctions, rates
from dlscale.frameworks.jax.tasks import integer_dtype, task_of
from dlscale.frameworks.jax.transfer import state_arrays, state_trees
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.engine import ModelledSyncEngine
from dlscale.runtime.samples import load_samples, model_outputs
from dlscale.runtime.schedule import run_schedule


class JaxEngine(ModelledSyncEngine):
    """One JAX training process (jax-single, or one device of jax-dp)."""

    resumable = True  # every replica holds the same parameters and optimizer state
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
        self.task = task_of(cfg)
        self.classes = model_outputs(cfg)
        self.data: NumpyDataset = load_samples(ctx, replicas=1)
        self.steps_per_epoch, self.has_eval = self.data.steps_per_epoch, self.data.has_eval
        self.dtype = cfg.precision
        self.model = spec.build(self.classes, "jax", cfg.dropout, cfg.options)
        rate = spec.dropout if cfg.dropout is None else cfg.dropout
        self.drops = bool(rate)  # a dropout layer that draws masks: a new key every step
        self._taken = 0
        self._updates = 0  # optimizer steps taken: the schedule's and AdamW's count
        self._total = training_steps(cfg, self.steps_per_epoch)
        self._rates: tuple[tuple[float, ...], Any] | None = None  # the last rates, placed
        self._eval: Any = None
        self._forwarded: Any = None  # the last forward's outputs, until sync() waits for them
        self._base_key = jax.random.PRNGKey(cfg.seed)
        # what the data set was made at: an image's side, a sequence's tokens
        self.size = cfg.image_size or spec.input_shape(cfg.options)[0]
        if distributed:
            from jax.sharding import Mesh, NamedSharding
            from jax.sharding import PartitionSpec as P

            self.mesh = Mesh(np.array(jax.devices()), (AXIS,))
            self.replicated = NamedSharding(self.mesh, P())
            self.split = NamedSharding(self.mesh, P(AXIS))
        params, stats = self._initial_variables()
        state = {name: jax.tree.map(np.zeros_like, params) for name in STATE[cfg.optimizer]}
        self._place(params, stats, state)
        self._still = self._replicated(self._base_key)
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

    def _inputs(self, batch: int) -> Any:
        """Inputs of ``batch`` samples as the task takes them (images NCHW, token ids)."""
        return np.zeros(self.task.input_shape(batch, self.size), self.task.input_dtype(self.dtype))

    def _initial_variables(self) -> tuple[Any, Any]:
        """The PyTorch twin's initial weights (the run's seed) in the Flax twin's trees."""
        from dlscale.frameworks.jax.transfer import load_torch_state

        jax = self.jax
        example = self._inputs(1)
        variables = jax.eval_shape(
            lambda: self.model.init(jax.random.PRNGKey(0), example, train=False)
        )
        state = self._torch_state()
        loaded = load_torch_state(variables, state, self.dtype, getattr(self.model, "tied", None))
        return loaded["params"], loaded.get("batch_stats", {})

    def _torch_state(self) -> dict[str, np.ndarray]:
        """The PyTorch twin's initial weights: through the weights cache, except for a model
        of its own options (a GPT's dimensions), which the cache's key does not name (two
        sizes of one GPT would share one entry), built here instead."""
        cfg, torch = self.ctx.config, FRAMEWORKS.get("torch")
        if not MODELS.get(cfg.model).options:
            return torch.initial_weights(cfg)
        assert torch.initial_state is not None
        return dict(load_object(torch.initial_state)(cfg))

    def _place(self, params: Any, stats: Any, state: dict[str, Any]) -> None:
        """The parameters, BatchNorm's statistics and the optimizer's ``state`` (its trees by
        name) on the device (under jax-dp: replicated, the statistics one row a device)."""
        jax = self.jax
        if not self.distributed:
            self.params, self.stats, self.state = jax.device_put((params, stats, state))
            return

        def put(sharding: Any, tree: Any) -> Any:
            return jax.tree.map(
                lambda leaf: jax.make_array_from_process_local_data(sharding, leaf), tree
            )

        self.params = put(self.replicated, params)
        self.state = put(self.replicated, state)
        self.stats = put(self.split, jax.tree.map(lambda leaf: leaf[None], stats))

    def _compile(self) -> dict[str, float]:
        """The steps (and, under synchronization, the probe's forward) compiled ahead of the
        first window; seconds each took."""
        jax, cfg = self.jax, self.ctx.config
        batch = cfg.batch_per_worker * (cfg.workers if self.distributed else 1)
        kwargs = {"sharding": self.split} if self.distributed else {}
        task, size = self.task, self.size
        x = jax.ShapeDtypeStruct(
            task.input_shape(batch, size), np.dtype(task.input_dtype(self.dtype)), **kwargs
        )
        y = jax.ShapeDtypeStruct(
            task.label_shape(batch, size), np.dtype(integer_dtype(self.dtype)), **kwargs
        )
        mesh = self.mesh if self.distributed else None
        functions = StepFunctions(jax, self.model, cfg, mesh, task)
        self._steps: dict[bool, Any] = {}
        seconds = {}
        rate = self._rate()
        for sync in (True, False) if self.synchronizes else (True,):
            started = time.perf_counter()
            lowered = functions.step(sync).lower(
                self.params, self.stats, self.state, x, y, self._still, rate
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
        return self._replicated(self.jax.random.fold_in(self._base_key, self._taken))

    def _replicated(self, value: Any) -> Any:
        """A key or the step's rates, the same on every device."""
        if not self.distributed:
            return value
        return self.jax.make_array_from_process_local_data(self.replicated, np.asarray(value))

    def _rate(self) -> Any:
        """The update's rates at this step (:func:`~.steps.rates`: the schedule's learning
        rate, AdamW's corrections), placed; the same array while they do not change."""
        cfg = self.ctx.config
        lr = cfg.effective_lr * lr_factor(cfg, self._updates, self._total)
        values = rates(cfg, lr, self._updates)
        if self._rates is None or self._rates[0] != values:
            placed = self._replicated(np.asarray(values, self.dtype))
            self._rates = (values, placed)
        return self._rates[1]

    # -- the kernel's words -------------------------------------------------------------

    def _global(self, array: np.ndarray) -> Any:
        if not self.distributed:
            return self.jax.device_put(array)
        return self.jax.make_array_from_process_local_data(self.split, array)

    def batches(self, epoch: int) -> Iterator[Any]:
        for x, y in self.data.train_batches(epoch):
            x, y = self.task.host_batch(x, y, self.dtype)
            yield self._global(x), self._global(y)

    def step(self, batch: Any) -> Any:
        x, y = batch
        compiled = self._steps[self._sync or not self.synchronizes]
        rate = self._rate()
        self.params, self.stats, self.state, loss = compiled(
            self.params, self.stats, self.state, x, y, self._key(), rate
        )
        self._updates += 1
        if self._sync and self.synchronizes:
            self.count_synced_step()
        return loss

    def forward_only(self, batch: Any) -> None:
        """The step's forward and loss (BatchNorm from the batch), no gradient or update: the
        engine's statistics are left as they were."""
        x, y = batch
        self._forwarded = self._forward(self.params, self.stats, x, y, self._still)

    def sync(self) -> None:
        self.jax.block_until_ready((self.params, self.stats, self.state, self._forwarded))
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
            x, y = self.task.host_batch(x, y, self.dtype)
            batch_hits, batch_loss = self._eval(variables, x, y)
            hits, losses = hits + batch_hits, losses + batch_loss
            total += self.task.count(y)
        return int(hits), total, float(losses)

    def _eval_sums(self, variables: Any, x: Any, y: Any) -> Any:
        """The batch's correct predictions and summed loss (the weights are arguments, not
        constants of the compiled function)."""
        return self.task.sums(self.model.apply(variables, x, train=False), y)

    def save_params(self) -> None:
        """The trained parameters under PyTorch's keys (BatchNorm's statistics left out)."""
        from dlscale.frameworks.jax.transfer import torch_state

        state = torch_state(self.jax.device_get(self._local(self.params)))
        np.savez(self.ctx.run_dir / PARAMS_FILE, **state)  # type: ignore[arg-type]

    def _replica(self) -> dict[str, Any]:
        """This replica's training state: its parameters, the optimizer's trees (momentum;
        AdamW's ``exp_avg`` and ``exp_avg_sq``) and BatchNorm statistics."""
        return {
            "params": self._local(self.params),
            **self._local(self.state),
            "batch_stats": self._local(self.stats, stacked=True),
        }

    def checkpoint(self, path: Path) -> None:
        """The parameters, the optimizer's state, this replica's BatchNorm statistics, the
        dropout key's and the optimizer's step counts, as numpy arrays under PyTorch's keys in
        one ``.npz`` (replaced whole).
        Every replica restores them: the training steps are the uninterrupted run's (training
        normalizes by the batch's statistics); under jax-dp the other replicas' running
        statistics become this replica's (what DDP's buffer broadcast does every step)."""
        arrays = state_arrays(self.jax.device_get(self._replica()))
        arrays["steps_taken"] = np.asarray(self._taken)
        arrays["updates"] = np.asarray(self._updates)
        temporary = path.with_name(f".{path.name}.tmp")
        with temporary.open("wb") as out:
            np.savez(out, **arrays)  # type: ignore[arg-type]
        os.replace(temporary, path)

    def restore(self, path: Path) -> None:
        with np.load(path) as saved:
            arrays = {key: saved[key] for key in saved.files}
        self._taken = int(arrays.pop("steps_taken"))
        self._updates = int(arrays.pop("updates", 0))
        trees = state_trees(arrays, self._replica())
        state = {name: trees[name] for name in STATE[self.ctx.config.optimizer]}
        self._place(trees["params"], trees["batch_stats"], state)

    def barrier(self) -> None:
        if self.distributed:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("dlscale checkpoint")

    def framework_facts(self) -> dict[str, Any]:
        return jax_environment(self.jax)

    def sample_facts(self) -> dict[str, Any]:
        return dict(getattr(self.data, "facts", {}))

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
