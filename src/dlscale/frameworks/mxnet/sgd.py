"""MXNet's SGD, plus a version counter that shows the staleness of asynchronous updates.

MXNet's ``sgd_mom_update`` (``mom = momentum * mom - lr * (grad + wd * w); w += mom``) is
PyTorch's SGD rule for a constant learning rate (PyTorch keeps ``v = -mom / lr``), which every
dlscale run has; so the MXNet engines use MXNet's own fused optimizer, as MXNet users do, and
the equivalence tests show it takes PyTorch's steps.

Under ``dist_async`` the optimizer runs in the ps-lite servers (Gluon's ``update_on_kvstore``),
one push at a time. A worker pushes, with its gradients, a one-element ``counter`` key holding
the version it read (the counter's value when it last pulled); the server's update of that key
records ``version now - version read`` (the updates by other workers the gradient did not see,
the definition torch-ps records too) and counts one more version. The histogram lives in the
server process (:data:`STALENESS`) and is written to its events once it stops serving.
Imported in MXNet processes only (after :func:`dlscale.frameworks.mxnet.env.import_mxnet`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import mxnet as mx
import numpy as np

STALENESS: Counter[int] = Counter()
"""Staleness -> pushes, in this (server) process."""


@mx.optimizer.register
class CountingSGD(mx.optimizer.SGD):
    """``mx.optimizer.SGD`` whose key ``counter_key`` is a version counter (see the module)."""

    def __init__(self, counter_key: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counter_key = counter_key

    def _is_counter(self, index: Any) -> bool:
        return self.counter_key is not None and index == self.counter_key

    def create_state(self, index: Any, weight: Any) -> Any:
        return None if self._is_counter(index) else super().create_state(index, weight)

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        if self._is_counter(index):
            return None
        return super().create_state_multi_precision(index, weight)

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        self._split(self._rule(weight, super().update), index, weight, grad, state)

    def _update64(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """``sgd_mom_update``'s rule written out in NDArray arithmetic, whose scalars are
        doubles: the fused op takes its lr, momentum and weight decay as float32 (0.01 ->
        0.0099999998), 2e-8 off every float64 update."""
        many = isinstance(index, (list, tuple))
        indices, weights, grads, states = (
            (index, weight, grad, state) if many else ([index], [weight], [grad], [state])
        )
        self._update_count(list(indices))
        for key, w, g, mom in zip(indices, weights, grads, states, strict=True):
            lr, wd = self._get_lr(key), self._get_wd(key)
            step = g * self.rescale_grad + wd * w
            if mom is None:
                w[:] -= lr * step
            else:
                mom[:] = self.momentum * mom - lr * step
                w[:] += mom

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        fused = super().update_multi_precision  # what Gluon's updater calls, whatever the dtype
        self._split(self._rule(weight, fused), index, weight, grad, state)

    def _rule(self, weight: Any, fused: Any) -> Any:
        """The fused op, or for float64 weights (precision = float64) :meth:`_update64`."""
        first = weight[0] if isinstance(weight, (list, tuple)) else weight
        return self._update64 if first.dtype == np.float64 else fused

    def _split(self, update: Any, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """The counter's entries counted here, the rest updated by SGD (MXNet's updater hands
        over lists of keys when it aggregates updates, one key at a time otherwise)."""
        if not isinstance(index, (list, tuple)):
            if self._is_counter(index):
                self._count(weight, grad)
            else:
                update(index, weight, grad, state)
            return
        rest = [i for i, key in enumerate(index) if not self._is_counter(key)]
        for i in range(len(index)):
            if i not in rest:
                self._count(weight[i], grad[i])
        if rest:
            update(*([seq[i] for i in rest] for seq in (index, weight, grad, state)))

    @staticmethod
    def _count(weight: Any, grad: Any) -> None:
        read = round(float(grad.asnumpy()[0]))  # pushed as is: no rescale applied
        now = round(float(weight.asnumpy()[0]))
        STALENESS[now - read] += 1
        weight[:] = now + 1


def make_sgd(cfg: Any, *, counter_key: int | None = None) -> CountingSGD:
    """The optimizer of every MXNet backend, from the run's config (as
    ``dlscale.frameworks.torch.loop.sgd``):
    weight decay on every parameter (PyTorch's), gradients rescaled by the trainer's step."""
    return CountingSGD(
        learning_rate=cfg.effective_lr,
        momentum=cfg.momentum,
        wd=cfg.weight_decay,
        counter_key=counter_key,
    )
