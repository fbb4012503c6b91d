"""PyTorch's entry in dlscale (the ``dlscale.plugins`` entry point ``torch``): the torch.*
backends and the PyTorch builder of every built-in model. Importing it imports no framework."""

from __future__ import annotations

from typing import Any

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.contract.models import TOKEN_MODELS, register_builder
from dlscale.frameworks.torch.cluster import torch_cluster_env
from dlscale.frameworks.torch.library_models import register as register_model_libraries
from dlscale.frameworks.torch.options import (
    DDP_OPTIONS,
    FSDP_OPTIONS,
    PS_OPTIONS,
    RING_OPTIONS,
    TORCH_LOOP_OPTIONS,
    check_ddp,
    check_ps,
    check_ring,
    check_torch_loop,
    ps_roles,
)
from dlscale.frameworks.torch.task_names import TASKS
from dlscale.runtime.script_run import SCRIPT_OPTIONS

INSTALL = "pip install 'dlscale[torch]' -c constraints.txt"
DEVICE_PROBE = "dlscale.frameworks.torch.env:cuda_device_count"

FRAMEWORKS.register(
    "torch",
    FrameworkSpec(
        name="torch",
        module="torch",
        packages=("torch",),
        install=INSTALL,
        facts="dlscale.frameworks.torch.env:this_interpreter",
        profile="dlscale.frameworks.torch.profile:profile",
        initial_state="dlscale.frameworks.torch.weights:initial_state",
        tasks=TASKS,
        optimizers=("sgd", "adamw"),
        schedules=("constant", "cosine"),
    ),
)
FLOAT64_TOO = ("float32", "float64")
"""The engines whose model, inputs, gradients and collectives (torch-ps: its servers and
messages) can all be float64; a script trains as it is written."""

BACKENDS.register(
    "torch-single",
    BackendSpec(
        name="torch-single",
        precisions=FLOAT64_TOO,
        resumable=True,
        description="plain PyTorch model, one process, no wrapper (the 1-worker baseline)",
        framework="torch",
        worker="dlscale.frameworks.torch.single:run",
        max_workers=1,
        reference=True,
        install=INSTALL,
        check=check_torch_loop,
        options=TORCH_LOOP_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
BACKENDS.register(
    "torch-ddp",
    BackendSpec(
        name="torch-ddp",
        precisions=FLOAT64_TOO,
        resumable=True,
        description="PyTorch DistributedDataParallel (gloo on CPU, NCCL on CUDA)",
        framework="torch",
        worker="dlscale.frameworks.torch.ddp:run",
        collectives="dlscale.frameworks.torch.collectives:run",
        install=INSTALL,
        check=check_ddp,
        options=TORCH_LOOP_OPTIONS + DDP_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
BACKENDS.register(
    "torch-fsdp",
    BackendSpec(
        name="torch-fsdp",
        precisions=FLOAT64_TOO,
        description="PyTorch FSDP2 (fully_shard): parameters, gradients and optimizer state "
        "sharded over the workers",
        framework="torch",
        worker="dlscale.frameworks.torch.fsdp:run",
        install=INSTALL,
        check=check_torch_loop,
        options=TORCH_LOOP_OPTIONS + FSDP_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
BACKENDS.register(
    "torch-ring",
    BackendSpec(
        name="torch-ring",
        precisions=FLOAT64_TOO,
        resumable=True,
        description="explicit ring all-reduce on send/recv, tensor fusion (Horovod's algorithm)",
        framework="torch",
        worker="dlscale.frameworks.torch.ring:run",
        collectives="dlscale.frameworks.torch.ring_collectives:run",
        install=INSTALL,
        check=check_ring,
        options=TORCH_LOOP_OPTIONS + RING_OPTIONS,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
BACKENDS.register(
    "torch-ps",
    BackendSpec(
        name="torch-ps",
        precisions=FLOAT64_TOO,
        description="parameter server: num_servers server ranks, sync or async (ps_mode)",
        framework="torch",
        worker="dlscale.frameworks.torch.ps:run",
        collectives="dlscale.frameworks.torch.ps_collectives:run",
        collectives_everywhere=True,
        install=INSTALL,
        check=check_ps,
        options=TORCH_LOOP_OPTIONS + PS_OPTIONS,
        roles=ps_roles,
        cluster_env=torch_cluster_env,
        ports=1,
        device_probe=DEVICE_PROBE,
    ),
)
SCRIPT_COMMON: dict[str, Any] = {
    "framework": "torch",
    "options": SCRIPT_OPTIONS,
    "ports": 1,
    "runs_scripts": True,
    "loader_only": False,
    "device_probe": DEVICE_PROBE,
}
"""What every backend running a user's PyTorch script declares (torch-script, and
horovod-script in Horovod's folder)."""
BACKENDS.register(
    "torch-script",
    BackendSpec(
        name="torch-script",
        description="your own PyTorch training script (DDP or none), unmodified, with "
        "torchrun's variables; measured from its optimizer steps (dlscale run --script)",
        worker="dlscale.frameworks.torch.script:run",
        install=INSTALL,
        cluster_env=torch_cluster_env,
        **SCRIPT_COMMON,
    ),
)

for _depth in (20, 32, 44, 56, 110):
    register_builder(
        f"resnet{_depth}", "torch", f"dlscale.frameworks.torch.models.resnet_cifar:resnet{_depth}"
    )
for _model, _reference in (
    ("resnet50", "resnet_imagenet:resnet50"),
    ("alexnet", "alexnet:alexnet"),
    ("googlenet", "googlenet:googlenet"),
    ("tiny", "tiny:tiny"),
):
    register_builder(_model, "torch", f"dlscale.frameworks.torch.models.{_reference}")
for _model in TOKEN_MODELS:
    register_builder(_model, "torch", "dlscale.frameworks.torch.models.gpt:gpt")
register_model_libraries()
