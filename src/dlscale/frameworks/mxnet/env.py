"""MXNet in a dlscale process: its variables set before the import, its facts after.

MXNet reads its settings from the environment when it is imported: ``MXNET_MKLDNN_ENABLED``
(oneDNN kernels on CPU; Horovod's MXNet ops cannot read oneDNN-layout arrays, so horovod-mxnet
turns them off), ``OMP_NUM_THREADS`` (threads inside an operator: the launcher's threads per
process, as ``torch.set_num_threads``) and ``MXNET_CPU_WORKER_NTHREADS`` (operators run at
once by the dependency engine: 1, as TensorFlow's inter-op pool and PyTorch's eager ops). A
ps-lite scheduler or server process also starts serving inside ``import mxnet`` (DMLC_ROLE).
"""

from __future__ import annotations

import os
from typing import Any

from dlscale.contract.errors import UserError

INSTALL = "make mxnet"


def mxnet_variables(*, mkldnn: bool, threads: int) -> dict[str, str]:
    """What a process's MXNet is configured with (read at import)."""
    return {
        "MXNET_MKLDNN_ENABLED": "1" if mkldnn else "0",
        "OMP_NUM_THREADS": str(threads),
        "MXNET_CPU_WORKER_NTHREADS": "1",
        "MXNET_ENGINE_TYPE": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
    }


def import_mxnet(*, mkldnn: bool, threads: int) -> Any:
    """``mxnet``, configured first (:func:`mxnet_variables`); a clear error where it is missing."""
    os.environ.update(mxnet_variables(mkldnn=mkldnn, threads=threads))
    try:
        import mxnet
    except ImportError as error:
        raise UserError(
            f"MXNet is missing or broken in this interpreter ({error}); the MXNet backends run "
            f"in MXNet's own environment: {INSTALL}"
        ) from error
    return mxnet


def mxnet_environment(mx: Any) -> dict[str, Any]:
    """What MXNet says about itself (the run's framework facts)."""
    features = mx.runtime.Features()
    return {
        "mxnet": mx.__version__,
        "mkldnn_built": features.is_enabled("MKLDNN"),
        "mkldnn_enabled": os.environ.get("MXNET_MKLDNN_ENABLED") != "0",
        "dist_kvstore_built": features.is_enabled("DIST_KVSTORE"),
        "gpus": mx.context.num_gpus(),
        "omp_threads": int(os.environ.get("OMP_NUM_THREADS", "0")),
        "engine": os.environ.get("MXNET_ENGINE_TYPE"),
    }
