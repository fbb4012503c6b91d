"""The engine contract and the synchronization-strategy contract, one vocabulary for every
framework.

An :class:`Engine` is one process's training as the measurement kernel
(:mod:`dlscale.runtime.schedule`) drives it. A :class:`SyncStrategy` is how an engine's replicas
are kept in step (DDP, a ring, a parameter server, Horovod, a ``tf.distribute`` strategy, a
kvstore); each framework's strategy base subclasses it (``TorchStrategy``, ``TFStrategy``,
``MXStrategy``) and adds only the hooks its own loop calls (torch: ``wrap``, ``backward``,
``update``...; TensorFlow: ``gradients``; MXNet: ``trainer``...). The shared words mean the same
everywhere: ``synchronizes``, ``resumable``, ``describe``, ``take_bytes_sent`` (counted),
``modelled_bytes`` (the algorithm's model) and ``teardown``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Engine:
    """One process's training in some framework, as the kernel drives it.

    Subclasses implement :meth:`batches` and :meth:`step` (or :meth:`train_window` with
    ``times_steps = False``); the rest has defaults for an engine that lacks the feature.
    """

    times_steps = True
    """False: the engine runs whole windows (:meth:`train_window`); no per-step times."""
    window_losses_by_step = False
    """With ``times_steps = False``: True when :meth:`train_window` returns each step's own
    loss, False when it can only repeat the window's mean (stored as no per-step losses)."""
    synchronizes = True
    """False: the steps synchronize nothing (one process, no wrapper); exposed communication
    is then 0 by definition, and no probe runs."""
    steps_per_epoch: int = 1
    has_eval: bool = False
    resumable = False
    """True: every replica holds the same training state (synchronous data parallelism), which
    :meth:`checkpoint` writes and :meth:`restore` reads (a restarted run resumes)."""
    times_forward = False
    """True: :meth:`forward_only` runs a step's forward alone, which the probe times beside the
    unsynchronized step (the share of a step that backward and the update take)."""

    compute_dtype: str | None = None
    """The type the model's products run in where it is not the run's ``precision``
    (``bf16`` under torch's autocast): the peak MFU is read against
    (:func:`dlscale.contract.gpu_peaks.compute_dtype`)."""

    def batches(self, epoch: int) -> Iterator[Any]:
        """The training batches of one epoch (exactly ``steps_per_epoch`` of them)."""
        raise NotImplementedError

    def step(self, batch: Any) -> Any:
        """One training step; returns its mean loss (a float or a lazy framework scalar)."""
        raise NotImplementedError

    def forward_only(self, batch: Any) -> None:
        """A training step's forward and loss of ``batch``, as :meth:`step` computes them
        (gradients recorded), without backward or update (engines with ``times_forward``)."""
        raise NotImplementedError

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        """``steps`` steps at once (engines with ``times_steps = False``); their losses."""
        return [self.step(next(batches)) for _ in range(steps)]

    def sync(self) -> None:
        """Wait for the device's queued work (before a clock is read)."""

    def loss_values(self, losses: list[Any]) -> list[float]:
        """Each step's loss (what :meth:`step` returned) as a float, read at once after the
        window (may be NaN or infinite)."""
        return [float(loss) for loss in losses]

    def evaluate(self) -> tuple[int, int, float]:
        """``(correct, total, loss_sum)`` over this process's share of the held-out data."""
        return 0, 0, 0.0

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which a step skips gradient synchronization; ``None``: not measurable."""
        return None

    def take_bytes_sent(self) -> float | None:
        """Bytes sent for gradient synchronization since the last call, if counted."""
        return None

    def settle(self) -> None:
        """After the last training step, on every training process, before the parameters are
        saved and the exposed-communication probe: make this replica hold the final trained
        model where it may lack other replicas' last updates (an asynchronous parameter
        server); by default nothing (every replica holds it already)."""

    def save_params(self) -> None:
        """Write the trained parameters to the run directory (``save_params``)."""

    def checkpoint(self, path: Path) -> None:
        """Write the replica's training state (parameters, optimizer) to ``path``."""
        raise NotImplementedError(f"{type(self).__name__} cannot checkpoint")

    def restore(self, path: Path) -> None:
        """Load the state :meth:`checkpoint` wrote into this replica."""
        raise NotImplementedError(f"{type(self).__name__} cannot restore")

    def barrier(self) -> None:
        """Wait until every training process got here (after a checkpoint); by default
        nothing (one process)."""

    def finish(self) -> None:
        """After the last step (e.g. tell the servers this worker is done)."""

    def framework_facts(self) -> dict[str, Any]:
        """What the framework says about itself and the device (versions, GPUs)."""
        return {}

    def device_memory_peaks(self) -> dict[str, Any]:
        """On a GPU: the allocator's peak bytes since the last call
        (``device_peak_allocated_bytes``, ``device_peak_reserved_bytes`` where it says), the
        peaks then reset; empty on a CPU, whose memory the process's resident set shows."""
        return {}

    def model_flops(self) -> dict[str, Any]:
        """The training FLOPs per sample of a model nothing declares them for (a user's),
        counted in the worker (:meth:`~dlscale.contract.flops.TrainingFlops.to_dict`), or why
        not (``{"missing": ...}``); empty where the model declares them."""
        return {}

    def sample_facts(self) -> dict[str, Any]:
        """What the run records about its data (a corpus' hash and source); by default
        nothing."""
        return {}


class SyncStrategy:
    """How a training process keeps its replicas in step. The defaults are those of one
    replica that synchronizes nothing; a strategy overrides what it does."""

    synchronizes = False
    """Whether a step synchronizes gradients (the engine's ``synchronizes`` follows it)."""
    resumable = False
    """Whether every replica holds the same model and optimizer state, so one checkpoint
    restores each of them (:attr:`Engine.resumable`; the backend declares it too)."""

    def describe(self, ctx: Any, model: Any = None) -> dict[str, Any]:
        """Facts for the run's ``strategy`` record (the algorithm, its settings, a modelled
        byte count such as ``bytes_sent_per_step_model``), given the worker's context and,
        where the framework's loop has one, the wrapped model."""
        return {}

    def take_bytes_sent(self) -> int | None:
        """Bytes this rank sent for gradient synchronization since the last call, counted from
        what was sent; ``None``: the strategy does not count them."""
        return None

    def modelled_bytes(self, gradient_bytes: int, replicas: int) -> float | None:
        """Bytes one replica sends per synchronized step by the algorithm's model, for a
        gradient of ``gradient_bytes`` over ``replicas`` data-parallel replicas (the run's
        workers); ``None``: no model here. A strategy whose model depends on more than the
        gradient's size (torch's: DDP's compression, the ring's fusion buckets, the parameter
        server's shards) gives it in :meth:`describe` as ``bytes_sent_per_step_model``
        instead."""
        return None

    def teardown(self, completed: bool = True) -> None:
        """Leave the collective world, if any (``completed``: every step ran)."""
