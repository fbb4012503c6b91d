"""PyTorch's SGD as a Keras optimizer, so that every engine takes the same step.

``torch.optim.SGD(lr, momentum, weight_decay)`` adds the weight decay to the gradient (an L2
penalty, coupled with momentum) and keeps its velocity in units of the gradient:
``g = grad + wd * w; v = momentum * v + g; w -= lr * v`` (its first step sets ``v = g``, which
is the same rule from ``v = 0``). Keras' SGD keeps ``v`` in units of the step
(``v = momentum * v - lr * g``: the same for a constant ``lr``) and its ``weight_decay`` is
decoupled (``w -= lr * wd * w``, outside the momentum), which is another optimizer. This class
is Keras' optimizer interface around PyTorch's rule, so ``apply_gradients`` (and with it the
strategies' gradient all-reduce, Horovod's ``DistributedOptimizer`` and ``model.fit``) drive it
like any Keras optimizer. ``tests/unit/test_keras_twins.py`` checks the same rule, written out,
against ``torch.optim.SGD``.
"""

from __future__ import annotations

from typing import Any

from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


class TorchSGD(tf.keras.optimizers.Optimizer):  # type: ignore[name-defined]
    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        l2: float = 0.0,
        name: str = "TorchSGD",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("jit_compile", False)  # the same kernels as the rest of the step
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self._lr_value = learning_rate
        """The rate as given: Keras keeps it in a float32 variable, whose 0.01 is 2e-8 off
        relatively, which a float64 run (``precision``) must not take for the rate."""
        self.momentum = momentum
        self.l2 = l2

    def build(self, var_list: Any) -> None:
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self.velocities = [
            self.add_variable_from_reference(model_variable=var, variable_name="v")
            for var in var_list
        ]
        self._built = True

    def update_step(self, gradient: Any, variable: Any) -> None:
        # Python numbers become tensors of the variable's dtype directly: tf.cast would make a
        # float32 tensor first (0.01 -> 0.0099999998), 2e-8 off each float64 update
        exact = variable.dtype == tf.float64 and isinstance(self._lr_value, float)
        if exact:
            lr = tf.constant(self._lr_value, variable.dtype)
        else:
            lr = tf.cast(self.learning_rate, variable.dtype)
        g = tf.convert_to_tensor(gradient)
        if self.l2:
            g = g + tf.constant(self.l2, variable.dtype) * variable
        if self.momentum:
            v = self.velocities[self._index_dict[self._var_key(variable)]]
            v.assign(tf.constant(self.momentum, variable.dtype) * v + g)
            g = v
        variable.assign_sub(lr * g)

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        exact = isinstance(self._lr_value, float)  # a copy (Horovod's) gets the rate as given
        config.update(
            learning_rate=self._lr_value
            if exact
            else self._serialize_hyperparameter(self._learning_rate),
            momentum=self.momentum,
            l2=self.l2,
        )
        return config


def torch_sgd(cfg: Any) -> TorchSGD:
    """The optimizer of every TensorFlow backend, from the run's config (as
    ``dlscale.frameworks.torch.loop.sgd``)."""
    return TorchSGD(learning_rate=cfg.effective_lr, momentum=cfg.momentum, l2=cfg.weight_decay)
