"""A user's Horovod PyTorch script (horovod-script): rank 0 serves the Gloo rendezvous that
horovodrun would serve (:func:`~dlscale.frameworks.horovod.session.start_rendezvous`), unless
the launcher's tool does, and the script runs as torch-script runs it
(:mod:`dlscale.frameworks.torch.script`): its own ``hvd.init()`` finds its peers."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dlscale.frameworks.horovod.declare import RENDEZVOUS_ENV
from dlscale.frameworks.horovod.session import start_rendezvous
from dlscale.frameworks.torch import script

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    plan = os.environ.get(RENDEZVOUS_ENV)
    server = start_rendezvous(plan, int(os.environ["HOROVOD_SIZE"])) if plan else None
    try:
        script.run(ctx)
        _shutdown()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _shutdown() -> None:
    """Leave Horovod as the script's exit would have (its ``atexit`` hook, which the worker's
    quick exit skips): mpirun takes a rank that ends without ``MPI_Finalize`` for a failure."""
    import sys

    hvd = sys.modules.get("horovod.torch")
    if hvd is not None and hvd.is_initialized():
        hvd.shutdown()
