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

import math
from typing import Any

from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()


class Schedule:
    """The run's learning-rate factor at an optimizer's step, in TensorFlow ops on float64:
    :func:`dlscale.contract.optimizers.lr_factor` (what torch's ``LambdaLR`` multiplies by),
    at the step ``iterations`` counts (the applied steps before this one, as the scheduler
    has stepped after each of them). ``None`` where the rate is constant."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total

    @staticmethod
    def of(warmup: int, total: int | None) -> Schedule | None:
        """An optimizer's schedule from its settings, which its config keeps (so that a copy,
        as Horovod's ``DistributedOptimizer`` makes, keeps it); ``None``: a constant rate."""
        return None if total is None else Schedule(warmup, total)

    def factor(self, iterations: Any) -> Any:
        k = tf.cast(iterations, tf.float64)
        warm = float(self.warmup)
        progress = tf.minimum(
            tf.constant(1.0, tf.float64), (k - warm) / float(max(1, self.total - self.warmup))
        )
        decay = 0.5 * (1.0 + tf.cos(tf.constant(math.pi, tf.float64) * progress))
        if not self.warmup:
            return decay
        return tf.where(k < warm, (k + 1.0) / warm, decay)


def _rate(optimizer: Any, dtype: Any) -> Any:
    """The optimizer's rate at this step in ``dtype``: as given (a float64 run must not take
    Keras' float32 copy of it) times the schedule's factor, computed in float64."""
    if isinstance(optimizer._lr_value, float):
        lr = tf.constant(optimizer._lr_value, tf.float64)
    else:
        lr = tf.cast(optimizer.learning_rate, tf.float64)
    if optimizer.schedule is not None:
        lr = lr * optimizer.schedule.factor(optimizer.iterations)
    return lr if dtype == tf.float64 else tf.cast(lr, dtype)


class TorchSGD(tf.keras.optimizers.Optimizer):  # type: ignore[name-defined]
    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        l2: float = 0.0,
        name: str = "TorchSGD",
        schedule_warmup: int = 0,
        schedule_steps: int | None = None,
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
        self.schedule = Schedule.of(schedule_warmup, schedule_steps)

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
        lr = _rate(self, variable.dtype)
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
            **_schedule_config(self),
        )
        return config


class TorchAdamW(tf.keras.optimizers.Optimizer):  # type: ignore[name-defined]
    """``torch.optim.AdamW(lr, betas, eps, weight_decay)`` (its single-tensor rule, written as
    torch writes it): at step ``t``, ``w *= 1 - lr wd`` (decoupled), ``m = lerp(m, g, 1 -
    b1)``, ``v = b2 v + (1 - b2) g^2``, ``w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 -
    b2^t) + eps)``; the bias corrections in float64, as torch takes them from Python floats.
    The rate, like :class:`TorchSGD`'s, is used as given in a float64 run."""

    def __init__(
        self,
        learning_rate: float = 1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        decay: float = 0.01,
        name: str = "TorchAdamW",
        schedule_warmup: int = 0,
        schedule_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("jit_compile", False)
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self._lr_value = learning_rate
        self.beta_1, self.beta_2, self.epsilon, self.decay = beta_1, beta_2, epsilon, decay
        self.schedule = Schedule.of(schedule_warmup, schedule_steps)

    def build(self, var_list: Any) -> None:
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self.exp_avgs = [
            self.add_variable_from_reference(model_variable=var, variable_name="m")
            for var in var_list
        ]
        self.exp_avg_sqs = [
            self.add_variable_from_reference(model_variable=var, variable_name="v")
            for var in var_list
        ]
        self._built = True

    def update_step(self, gradient: Any, variable: Any) -> None:
        kind = variable.dtype
        lr = _rate(self, tf.float64)
        step = tf.cast(self.iterations + 1, tf.float64)  # counted after this step, as torch's
        bias1 = 1.0 - tf.pow(tf.constant(self.beta_1, tf.float64), step)
        bias2_sqrt = tf.sqrt(1.0 - tf.pow(tf.constant(self.beta_2, tf.float64), step))
        index = self._index_dict[self._var_key(variable)]
        m, v = self.exp_avgs[index], self.exp_avg_sqs[index]
        g = tf.convert_to_tensor(gradient)
        if self.decay:
            variable.assign(variable * tf.cast(1.0 - lr * self.decay, kind))
        m.assign(m + tf.constant(1.0 - self.beta_1, kind) * (g - m))  # lerp, weight < 0.5
        v.assign(v * tf.constant(self.beta_2, kind) + tf.constant(1.0 - self.beta_2, kind) * g * g)
        denom = tf.sqrt(v) / tf.cast(bias2_sqrt, kind) + tf.constant(self.epsilon, kind)
        variable.assign_add(tf.cast(-(lr / bias1), kind) * (m / denom))

    def get_config(self) -> dict[str, Any]:
        config: dict[str, Any] = super().get_config()
        exact = isinstance(self._lr_value, float)
        config.update(
            learning_rate=self._lr_value
            if exact
            else self._serialize_hyperparameter(self._learning_rate),
            beta_1=self.beta_1,
            beta_2=self.beta_2,
            epsilon=self.epsilon,
            decay=self.decay,
            **_schedule_config(self),
        )
        return config


def _schedule_config(optimizer: Any) -> dict[str, Any]:
    schedule = optimizer.schedule
    if schedule is None:
        return {}
    return {"schedule_warmup": schedule.warmup, "schedule_steps": schedule.total}


def torch_sgd(cfg: Any, steps_per_epoch: int = 1) -> Any:
    """The optimizer of every TensorFlow backend, from the run's config (as
    ``dlscale.frameworks.torch.loop.sgd``): the run's ``optimizer``, PyTorch's SGD (momentum,
    L2 weight decay) or its AdamW (:mod:`dlscale.contract.optimizers`), at the run's
    ``lr_schedule`` over its steps (``steps_per_epoch``: the epochs' length, epoch mode)."""
    from dlscale.contract.optimizers import training_steps

    schedule: dict[str, Any] = {}
    if getattr(cfg, "lr_schedule", "constant") == "cosine":
        total = training_steps(cfg, steps_per_epoch)
        schedule = {"schedule_warmup": cfg.lr_warmup_steps, "schedule_steps": total}
    if getattr(cfg, "optimizer", "sgd") == "adamw":
        from dlscale.contract.optimizers import ADAMW_BETAS, ADAMW_EPS

        beta_1, beta_2 = ADAMW_BETAS
        return TorchAdamW(
            learning_rate=cfg.effective_lr,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=ADAMW_EPS,
            decay=cfg.weight_decay,
            **schedule,
        )
    return TorchSGD(
        learning_rate=cfg.effective_lr,
        momentum=cfg.momentum,
        l2=cfg.weight_decay,
        **schedule,
    )
