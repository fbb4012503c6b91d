"""A worker's context for tests that drive the runtime in this process (no launcher): rank
``rank`` of ``config``'s layout, one thread, its events in ``run_dir``."""

from __future__ import annotations

from pathlib import Path

from dlscale.config import RunConfig
from dlscale.contract.events import EventWriter, events_path
from dlscale.contract.layout import Addresses
from dlscale.runtime.context import WorkerContext

LOCAL = Addresses(hosts=("127.0.0.1",), ports=(1,))
"""An address no test connects to: the runtime only needs one to exist."""


def worker_context(
    run_dir: Path, config: RunConfig, *, rank: int = 0, addresses: Addresses | None = LOCAL
) -> WorkerContext:
    return WorkerContext(
        config=config,
        run_dir=run_dir,
        rank=rank,
        local_rank=rank,
        layout=config.layout(),
        addresses=addresses,
        threads=1,
        events=EventWriter(events_path(run_dir, rank), rank),
    )
