"""The update rule's settings every framework implements alike: the optimizer (``sgd``,
``adamw``) and the learning-rate schedule, as one function of the step.

``lr_schedule = cosine`` multiplies the learning rate at step ``s`` (0-based, counted over the
whole run: warm-up steps, measured windows or epochs) by :func:`lr_factor`: ``(s + 1) / W``
during the ``W = lr_warmup_steps`` warm-up steps, then ``0.5 * (1 + cos(pi * p))`` where
``p = (s - W) / (S - W)`` goes from 0 to 1 at the run's last step ``S`` (and stays 0 after, for
the exposed-communication probe's steps). Every framework that has the schedule applies this
function, so their rates agree to the bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

ADAMW_BETAS = (0.9, 0.999)
ADAMW_EPS = 1e-8


def training_steps(cfg: RunConfig, steps_per_epoch: int) -> int:
    """Steps the run trains for: warm-up and windows in step mode, every epoch's in epoch mode."""
    if cfg.epochs is not None:
        return cfg.epochs * steps_per_epoch
    return cfg.warmup_steps + cfg.windows * cfg.steps


def lr_factor(cfg: RunConfig, step: int, total: int) -> float:
    """The learning rate's multiplier at 0-based ``step`` of ``total``."""
    if cfg.lr_schedule == "constant":
        return 1.0
    warm = cfg.lr_warmup_steps
    if step < warm:
        return (step + 1) / warm
    span = max(1, total - warm)
    progress = min(1.0, (step - warm) / span)
    return 0.5 * (1.0 + math.cos(math.pi * progress))
