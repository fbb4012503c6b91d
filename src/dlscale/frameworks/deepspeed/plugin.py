"""DeepSpeed's entry in dlscale (the ``dlscale.plugins`` entry point ``deepspeed``): the
deepspeed-zero1, -zero2 and -zero3 backends, each DeepSpeed's ZeRO stage on PyTorch's engine
(this folder imports torch's; torch's never imports this one). Importing it imports no
framework."""

from __future__ import annotations

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.frameworks.deepspeed.options import (
    INSTALL,
    PRECISION_NOTE,
    STAGES,
    ZERO3_OPTIONS,
    ZERO12_OPTIONS,
    backend_name,
    check_zero,
)
from dlscale.frameworks.torch.cluster import torch_cluster_env
from dlscale.frameworks.torch.options import TORCH_LOOP_OPTIONS
from dlscale.frameworks.torch.plugin import DEVICE_PROBE

FRAMEWORKS.register(
    "deepspeed",
    FrameworkSpec(
        name="deepspeed",
        module="deepspeed",
        packages=("deepspeed",),
        install=INSTALL,
        builds_models=False,
    ),
)
_SHARDS = {
    1: "the optimizer state",
    2: "the optimizer state and gradients",
    3: "the parameters, gradients and optimizer state",
}
for _stage in STAGES:
    BACKENDS.register(
        backend_name(_stage),
        BackendSpec(
            name=backend_name(_stage),
            description=f"DeepSpeed ZeRO stage {_stage}: {_SHARDS[_stage]} sharded over the "
            "workers (gloo on CPU, NCCL on CUDA)",
            framework="torch",
            worker=f"dlscale.frameworks.deepspeed.zero:run_zero{_stage}",
            collectives="dlscale.frameworks.torch.collectives:run",
            install=INSTALL,
            requires=("deepspeed",),
            check=check_zero,
            options=TORCH_LOOP_OPTIONS + (ZERO3_OPTIONS if _stage == 3 else ZERO12_OPTIONS),
            precision_note=PRECISION_NOTE,
            cluster_env=torch_cluster_env,
            ports=1,
            device_probe=DEVICE_PROBE,
        ),
    )
