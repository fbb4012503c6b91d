"""The JAX engine's compiled functions: its training step, with and without the gradients'
all-reduce, and the forward alone that the exposed-communication probe times.

The step is PyTorch's: the batch's mean loss through the Flax twin in training mode (the task's:
:mod:`~dlscale.frameworks.jax.tasks`; BatchNorm from the batch's statistics, which it returns
updated), its gradient, and the run's optimizer, PyTorch's rule (:func:`torch_sgd`,
:func:`torch_adamw`), all in one ``jax.jit``. The step's rates (the learning rate of the
schedule's step and what AdamW derives from it and the step's count: :func:`rates`) are an
argument, computed on the host in Python's doubles as PyTorch computes them. Under jax-dp every
function is a ``jax.shard_map`` over the mesh's ``dp`` axis (one CPU device a process): each
device computes its own batch's loss and gradient, with its own BatchNorm statistics (a leading
axis of one row a device), then ``lax.pmean`` averages the gradients (the all-reduce) and every
device applies the same update. The unsynchronized step leaves ``pmean`` out; the forward
computes the step's loss and its statistics, without the gradient or the update (the probe's
``forward_only``).
"""

from __future__ import annotations

import math
from typing import Any

from dlscale.contract.optimizers import ADAMW_BETAS, ADAMW_EPS

AXIS = "dp"
STATE = {"sgd": ("momentum",), "adamw": ("exp_avg", "exp_avg_sq")}
"""Each optimizer's state: trees shaped as the parameters, by PyTorch's state names."""


def rates(cfg: Any, lr: float, step: int) -> tuple[float, ...]:
    """The scalars the update of 0-based ``step`` takes at learning rate ``lr``, as PyTorch
    computes them in Python floats: SGD's ``(lr,)``; AdamW's ``(lr, 1 - lr * weight_decay,
    lr / (1 - beta1^t), sqrt(1 - beta2^t))`` at its ``t = step + 1``."""
    if cfg.optimizer != "adamw":
        return (lr,)
    beta1, beta2 = ADAMW_BETAS
    t = float(step + 1)
    return (lr, 1 - lr * cfg.weight_decay, lr / (1 - beta1**t), math.sqrt(1 - beta2**t))


def torch_sgd(params: Any, momentum: Any, grads: Any, cfg: Any, lr: Any = None) -> tuple[Any, Any]:
    """PyTorch's SGD (``torch.optim.SGD`` with momentum and weight decay, no dampening or
    Nesterov) over parameter trees at ``lr`` (by default the run's ``effective_lr``): the new
    parameters and momentum buffers."""
    import jax

    m, wd = cfg.momentum, cfg.weight_decay
    lr = cfg.effective_lr if lr is None else lr
    if wd:
        grads = jax.tree.map(lambda g, p: g + wd * p, grads, params)
    if m:
        momentum = jax.tree.map(lambda buf, g: m * buf + g, momentum, grads)
        grads = momentum
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), momentum


def _sgd(params: Any, state: dict[str, Any], grads: Any, rate: Any, cfg: Any) -> Any:
    """:func:`torch_sgd` at the step's rates (:func:`rates`), its state ``{"momentum": ...}``."""
    params, momentum = torch_sgd(params, state["momentum"], grads, cfg, rate[0])
    return params, {"momentum": momentum}


def torch_adamw(params: Any, state: dict[str, Any], grads: Any, rate: Any, cfg: Any) -> Any:
    """PyTorch's AdamW (``torch.optim.AdamW``, its single-tensor loop: no AMSGrad) at rates
    ``rate`` (:func:`rates`): the decoupled decay ``p *= 1 - lr wd``, ``m += (1 - b1) (g - m)``,
    ``v = b2 v + (1 - b2) g g``, ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``;
    the new parameters and ``{"exp_avg": m, "exp_avg_sq": v}``."""
    import jax

    beta1, beta2 = ADAMW_BETAS
    decay, step_size, correction = rate[1], rate[2], rate[3]
    if cfg.weight_decay:
        params = jax.tree.map(lambda p: p * decay, params)
    m = jax.tree.map(lambda m, g: m + (1 - beta1) * (g - m), state["exp_avg"], grads)
    v = jax.tree.map(lambda v, g: v * beta2 + (1 - beta2) * g * g, state["exp_avg_sq"], grads)

    def update(p: Any, m: Any, v: Any) -> Any:
        return p - step_size * (m / (jax.numpy.sqrt(v) / correction + ADAMW_EPS))

    return jax.tree.map(update, params, m, v), {"exp_avg": m, "exp_avg_sq": v}


UPDATES = {"sgd": _sgd, "adamw": torch_adamw}


class StepFunctions:
    """Builds the jitted functions of one engine: ``model`` (a Flax module), the run's ``cfg``
    (its update rule) and, under jax-dp, the ``mesh`` (else None: one process)."""

    def __init__(self, jax: Any, model: Any, cfg: Any, mesh: Any, task: Any) -> None:
        self.jax, self.model, self.cfg, self.mesh, self.task = jax, model, cfg, mesh, task
        self.update = UPDATES[cfg.optimizer]

    def _loss_fn(self, stats: Any, x: Any, y: Any, key: Any) -> Any:
        """The batch's mean loss of parameters ``p`` and the BatchNorm statistics it leaves."""
        model, task = self.model, self.task

        def loss_fn(p: Any) -> Any:
            variables = {"params": p, "batch_stats": stats} if stats else {"params": p}
            logits, updates = model.apply(
                variables, x, train=True, mutable=["batch_stats"], rngs={"dropout": key}
            )
            return task.loss(logits, y), updates.get("batch_stats", {})

        return loss_fn

    def _replica_inputs(self, stats: Any, key: Any) -> tuple[Any, Any]:
        """This device's statistics (its row) and dropout key (each replica its masks)."""
        if self.mesh is None:
            return stats, key
        jax = self.jax
        stats = jax.tree.map(lambda s: s[0], stats)
        return stats, jax.random.fold_in(key, jax.lax.axis_index(AXIS))

    def step(self, sync: bool) -> Any:
        """The training step ``(params, stats, state, x, y, key, rates) -> (params, stats,
        state, loss)`` (``state``: the optimizer's trees); ``sync``: the gradients averaged
        over the devices first."""
        jax, cfg = self.jax, self.cfg
        distributed = self.mesh is not None

        def step(params: Any, stats: Any, state: Any, x: Any, y: Any, key: Any, rate: Any) -> Any:
            stats, key = self._replica_inputs(stats, key)
            # each device's own gradient: differentiated where the parameters are replicated,
            # shard_map would sum the gradients itself (the transpose of their broadcast)
            own = jax.lax.pcast(params, AXIS, to="varying") if distributed and sync else params
            loss_fn = self._loss_fn(stats, x, y, key)
            (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(own)
            if distributed and sync:
                grads = jax.lax.pmean(grads, AXIS)  # the all-reduce: the mean over devices
            params, state = self.update(params, state, grads, rate, cfg)
            if distributed:
                return params, jax.tree.map(lambda s: s[None], new_stats), state, loss[None]
            return params, new_stats, state, loss

        # unsynchronized, each device's update differs: nothing to check
        return self._compiled(step, outputs=("one", "split", "one", "split"), check=sync)

    def forward(self) -> Any:
        """The step's forward ``(params, stats, x, y, key) -> (loss, stats)``: its loss and
        BatchNorm statistics, no gradient, no update, no communication."""
        distributed = self.mesh is not None
        jax = self.jax

        def forward(params: Any, stats: Any, x: Any, y: Any, key: Any) -> Any:
            stats, key = self._replica_inputs(stats, key)
            loss, new_stats = self._loss_fn(stats, x, y, key)(params)
            if distributed:
                return loss[None], jax.tree.map(lambda s: s[None], new_stats)
            return loss, new_stats

        return self._compiled(
            forward, inputs=("one", "split", "split", "split", "one"), outputs=("split", "split")
        )

    def _compiled(
        self,
        fn: Any,
        *,
        outputs: tuple[str, ...],
        inputs: tuple[str, ...] = ("one", "split", "one", "split", "split", "one", "one"),
        check: bool = True,
    ) -> Any:
        """``fn`` jitted; under jax-dp a shard_map whose arguments and results are replicated
        (``one``) or split over the devices (``split``)."""
        jax = self.jax
        if self.mesh is None:
            return jax.jit(fn)
        from jax.sharding import PartitionSpec as P

        spec = {"one": P(), "split": P(AXIS)}
        mapped = jax.shard_map(
            fn,
            mesh=self.mesh,
            in_specs=tuple(spec[name] for name in inputs),
            out_specs=tuple(spec[name] for name in outputs),
            check_vma=check,
        )
        return jax.jit(mapped)
