"""Rules an algorithm follows alike in every engine that runs it, declared once.

**The asynchronous update** (``async_update``; docs/metrics.md, "Asynchronous parameter
servers"). A server of an asynchronous parameter server (torch-ps ``ps_mode = "async"``,
mxnet-kv ``kvstore = "dist_async"``, tf-ps) applies each gradient a worker pushes as soon as
it arrives, one optimizer step per push. With ``mean`` (the default) the pushed gradient is
scaled by 1/N (N: the run's workers) before the step, so N pushes move the parameters as far
as one synchronous step of the N workers' mean gradient, and ``lr`` means the same in the
synchronous and the asynchronous mode of an engine. With ``sum`` each push is applied whole, N
times the step per round of pushes: what MXNet's ``dist_async`` and TensorFlow 2's
ParameterServerStrategy do by themselves. Either way only the gradient is scaled: weight decay
and momentum act per update, as for any optimizer stepping once per push.
"""

from __future__ import annotations

from typing import Any

from dlscale.contract.options import setting
from dlscale.contract.text import excerpt

ASYNC_UPDATES = ("mean", "sum")
ASYNC_UPDATE_HELP = (
    "asynchronous servers: mean scales each pushed gradient by 1/workers (N pushes move the "
    "parameters as one synchronous step; lr means the same in both modes); sum applies each "
    "push whole (MXNet's dist_async and TF2's parameter server by themselves)"
)


def async_update_setting(*, applies: tuple[str, Any] | None, earlier: str) -> Any:
    """The ``async_update`` field of an engine's options dataclass. ``applies``: the option
    and value that make the engine asynchronous (``None``: always); ``earlier``: the rule the
    engine applied before the option existed (its stored runs keep their ids)."""
    return setting(
        "mean", ASYNC_UPDATE_HELP, choices=ASYNC_UPDATES, applies=applies, earlier=(earlier,)
    )


def async_gradient_scale(rule: str, workers: int) -> float:
    """What a server multiplies a pushed gradient by before its step under ``rule``."""
    if rule not in ASYNC_UPDATES:
        raise ValueError(
            f"async_update must be one of {', '.join(ASYNC_UPDATES)}; got {excerpt(rule)}"
        )
    return 1.0 / workers if rule == "mean" else 1.0


PATTERN_FACT = "pattern"
"""The strategy fact where an engine names how it synchronizes: one of the performance model's
patterns (:data:`dlscale.perfmodel.patterns.PATTERNS`), a parameter server with its servers
under ``servers``; the run's ``sync_pattern`` and ``sync_servers`` metrics say it
(docs/metrics.md)."""
MESSAGES_FACT = "messages"
"""The strategy fact where an engine lists the payload bytes of each collective (or
parameter-server push and pull) one synchronized step issues, in its order, as the engine
really runs them: jax-dp one gloo all-reduce per operand of its compiled all-reduces, mxnet-kv
one push and pull per parameter, torch-ddp one all-reduce per DDP bucket, torch-fsdp one unit's
all-gathers and reduce-scatter per FSDP unit. The run's
``sync_message_bytes`` metric says it (docs/metrics.md); the model prices each message on
its own (:mod:`dlscale.perfmodel.patterns`)."""
