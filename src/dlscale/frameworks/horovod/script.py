"""A user's Horovod PyTorch script (horovod-script): rank 0 serves the Gloo rendezvous that
horovodrun would serve, unless the launcher's tool does, and the other ranks wait until it
listens (:func:`~dlscale.frameworks.horovod.session.serve_or_await_rendezvous`); the script
runs as torch-script runs it (:mod:`dlscale.frameworks.torch.script`): its own ``hvd.init()``
finds its peers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlscale.frameworks.horovod.session import serve_or_await_rendezvous
from dlscale.frameworks.torch import script

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    server = serve_or_await_rendezvous(ctx.config.timeout_s)
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
