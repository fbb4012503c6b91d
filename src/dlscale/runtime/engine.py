"""What the kernel (:mod:`dlscale.runtime.schedule`) adds to the engine contract
(:class:`dlscale.contract.engine.Engine`): the loader-only wrapper, the shared modelled-bytes
engine of TensorFlow and MXNet, and the environment record every first training rank writes.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dlscale.contract.engine import Engine, SyncStrategy
from dlscale.contract.records import Environment
from dlscale.runtime.allocator import loaded_allocator

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


class LoaderOnly(Engine):
    """An engine's input pipeline without its training (``loader_only``): every step takes a
    batch from the engine (on its device) and does nothing with it, so a window's images/s is
    the rate at which the loaders deliver; nothing synchronizes, evaluates or checkpoints."""

    synchronizes = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.steps_per_epoch = engine.steps_per_epoch

    def batches(self, epoch: int) -> Iterator[Any]:
        return self.engine.batches(epoch)

    def step(self, batch: Any) -> None:
        return None

    def train_window(self, batches: Iterator[Any], steps: int) -> list[Any]:
        for _ in range(steps):
            next(batches)
        return []

    def sync(self) -> None:
        self.engine.sync()

    def framework_facts(self) -> dict[str, Any]:
        return self.engine.framework_facts()

    def sample_facts(self) -> dict[str, Any]:
        return self.engine.sample_facts()


class ModelledSyncEngine(Engine):
    """An engine whose steps skip synchronization while :meth:`no_sync` holds (the flag
    ``_sync``) and whose bytes are what its ``strategy`` counted from the tensors it sent, where
    it counts them, else the algorithm's model per synchronized step (``_step_payload``,
    ``None``: not modelled). TensorFlow's and MXNet's engines are."""

    strategy: SyncStrategy
    _sync = True
    _step_payload: float | None = None
    _payload = 0.0

    def declare_payload(
        self,
        ctx: WorkerContext,
        gradient_bytes: int,
        step_payload: float | None,
        facts: dict[str, Any],
    ) -> None:
        """Keep the modelled bytes of a synchronized step; the first training rank writes the
        run's ``Strategy`` record (``facts``' ``traces`` become the record's trace files)."""
        from dlscale.contract.records import Strategy

        self._step_payload = step_payload
        if ctx.rank == ctx.layout.training_ranks[0]:
            ctx.events.write(
                Strategy(
                    gradient_bytes=gradient_bytes,
                    bytes_sent_per_step_model=step_payload,
                    traces=facts.pop("traces", []),
                    facts=facts,
                )
            )

    def count_synced_step(self) -> None:
        """Add one synchronized step's modelled bytes."""
        if self._step_payload is not None:
            self._payload += self._step_payload

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return self._unsynced() if self.synchronizes else None

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def take_bytes_sent(self) -> float | None:
        counted = self.strategy.take_bytes_sent()
        modelled, self._payload = self._payload, 0.0  # taken either way: windows start at 0
        if counted is not None:
            return counted
        return None if self._step_payload is None else modelled


def worker_environment(
    framework: dict[str, Any],
    *,
    synchronizes: bool = True,
    data: dict[str, Any] | None = None,
    **facts: Any,
) -> Environment:
    """The process's own interpreter, package versions and allocator (never the parent's);
    ``facts``: more of :class:`Environment`'s fields (the device's peak, a counted model's
    FLOPs: :func:`dlscale.runtime.utilization.utilization_facts`)."""
    from dlscale.runtime.environment import framework_versions

    return Environment(
        python=sys.executable,
        python_version=platform.python_version(),
        packages=framework_versions(),
        framework=framework,
        synchronizes=synchronizes,
        allocator=loaded_allocator(),
        scheduler=scheduler_ids(),
        data=data or {},
        **facts,
    )


SCHEDULER_IDS = {
    "slurm_job_id": "SLURM_JOB_ID",
    "slurm_step_id": "SLURM_STEP_ID",
    "ray_version": "DLSCALE_RAY_VERSION",
    "ray_cluster": "DLSCALE_RAY_CLUSTER",
    "ray_node_id": "DLSCALE_RAY_NODE_ID",
    "ray_resources": "DLSCALE_RAY_RESOURCES",
}
"""The ids a scheduler gives the process in its environment, by the name they are stored as
(the Ray launcher's: the version, the cluster's address or ``local``, rank 0's node and the
resources of each rank's bundle, ``CPU=1``)."""


def scheduler_ids() -> dict[str, str]:
    """The Slurm job and step this process runs in, where Slurm started it; Ray's facts, where
    the Ray launcher did."""
    return {name: os.environ[var] for name, var in SCHEDULER_IDS.items() if os.environ.get(var)}
