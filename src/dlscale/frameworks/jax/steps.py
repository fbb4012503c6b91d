"""The JAX engine's compiled functions: its training step, with and without the gradients'
all-reduce, and the forward alone that the exposed-communication probe times.

The step is PyTorch's: the batch's mean cross-entropy through the Flax twin in training mode
(BatchNorm from the batch's statistics, which it returns updated), its gradient, and
:func:`torch_sgd`, all in one ``jax.jit``. Under jax-dp every function is a ``jax.shard_map``
over the mesh's ``dp`` axis (one CPU device a process): each device computes its own batch's
loss and gradient, with its own BatchNorm statistics (a leading axis of one row a device),
then ``lax.pmean`` averages the gradients (the all-reduce) and every device applies the same
update. The unsynchronized step leaves ``pmean`` out; the forward computes the step's loss and
its statistics, without the gradient or the update (the probe's ``forward_only``).
"""

from __future__ import annotations

from typing import Any

AXIS = "dp"


def torch_sgd(params: Any, momentum: Any, grads: Any, cfg: Any) -> tuple[Any, Any]:
    """PyTorch's SGD (``torch.optim.SGD`` with momentum and weight decay, no dampening or
    Nesterov) over parameter trees: the new parameters and momentum buffers."""
    import jax

    lr, m, wd = cfg.effective_lr, cfg.momentum, cfg.weight_decay
    if wd:
        grads = jax.tree.map(lambda g, p: g + wd * p, grads, params)
    if m:
        momentum = jax.tree.map(lambda buf, g: m * buf + g, momentum, grads)
        grads = momentum
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), momentum


class StepFunctions:
    """Builds the jitted functions of one engine: ``model`` (a Flax module), the run's ``cfg``
    (its update rule) and, under jax-dp, the ``mesh`` (else None: one process)."""

    def __init__(self, jax: Any, model: Any, cfg: Any, mesh: Any) -> None:
        self.jax, self.model, self.cfg, self.mesh = jax, model, cfg, mesh

    def _loss_fn(self, stats: Any, x: Any, y: Any, key: Any) -> Any:
        """The batch's mean loss of parameters ``p`` and the BatchNorm statistics it leaves."""
        jax, model = self.jax, self.model
        jnp = jax.numpy

        def loss_fn(p: Any) -> Any:
            variables = {"params": p, "batch_stats": stats} if stats else {"params": p}
            logits, updates = model.apply(
                variables, x, train=True, mutable=["batch_stats"], rngs={"dropout": key}
            )
            logp = jax.nn.log_softmax(logits)
            loss = -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
            return loss, updates.get("batch_stats", {})

        return loss_fn

    def _replica_inputs(self, stats: Any, key: Any) -> tuple[Any, Any]:
        """This device's statistics (its row) and dropout key (each replica its masks)."""
        if self.mesh is None:
            return stats, key
        jax = self.jax
        stats = jax.tree.map(lambda s: s[0], stats)
        return stats, jax.random.fold_in(key, jax.lax.axis_index(AXIS))

    def step(self, sync: bool) -> Any:
        """The training step ``(params, stats, momentum, x, y, key) -> (params, stats,
        momentum, loss)``; ``sync``: the gradients averaged over the devices first."""
        jax, cfg = self.jax, self.cfg
        distributed = self.mesh is not None

        def step(params: Any, stats: Any, momentum: Any, x: Any, y: Any, key: Any) -> Any:
            stats, key = self._replica_inputs(stats, key)
            # each device's own gradient: differentiated where the parameters are replicated,
            # shard_map would sum the gradients itself (the transpose of their broadcast)
            own = jax.lax.pcast(params, AXIS, to="varying") if distributed and sync else params
            loss_fn = self._loss_fn(stats, x, y, key)
            (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(own)
            if distributed and sync:
                grads = jax.lax.pmean(grads, AXIS)  # the all-reduce: the mean over devices
            params, momentum = torch_sgd(params, momentum, grads, cfg)
            if distributed:
                return params, jax.tree.map(lambda s: s[None], new_stats), momentum, loss[None]
            return params, new_stats, momentum, loss

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
        inputs: tuple[str, ...] = ("one", "split", "one", "split", "split", "one"),
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
