"""A user's Horovod script (horovod-script): rank 0 serves the Gloo rendezvous that horovodrun
would serve, unless the launcher's tool does, and the other ranks wait until it listens
(:func:`~dlscale.frameworks.horovod.session.serve_or_await_rendezvous`); the script runs as its
framework's script backend runs one, its own ``hvd.init()`` finding its peers: a PyTorch one
as torch-script (:mod:`dlscale.frameworks.torch.script`), one that imports Horovod's
TensorFlow API as tf-script (:mod:`dlscale.frameworks.tensorflow.script`: on legacy Keras 2,
``TF_USE_LEGACY_KERAS=1``, which the plan sets too, :func:`.declare.horovod_script_env`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.contract.models import MODELS
from dlscale.contract.user_models import ScriptModelSpec
from dlscale.frameworks.horovod.declare import uses_horovod_tensorflow
from dlscale.frameworks.horovod.session import serve_or_await_rendezvous

if TYPE_CHECKING:
    from dlscale.runtime.context import WorkerContext


def run(ctx: WorkerContext) -> None:
    spec = MODELS.get(ctx.config.model)
    on_tensorflow = isinstance(spec, ScriptModelSpec) and uses_horovod_tensorflow(Path(spec.path))
    server = serve_or_await_rendezvous(ctx.config.timeout_s)
    try:
        if on_tensorflow:
            from dlscale.frameworks.tensorflow import script as tensorflow_script

            tensorflow_script.run(ctx)
        else:
            from dlscale.frameworks.torch import script as torch_script

            torch_script.run(ctx)
        _shutdown()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _shutdown() -> None:
    """Leave Horovod as the script's exit would have (its ``atexit`` hook, which the worker's
    quick exit skips): mpirun takes a rank that ends without ``MPI_Finalize`` for a failure."""
    for binding in ("horovod.torch", "horovod.tensorflow"):
        hvd = sys.modules.get(binding)
        if hvd is not None and hvd.is_initialized():
            hvd.shutdown()
            return
