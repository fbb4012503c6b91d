"""Framework facts captured inside a torch worker (rank 0 writes them as an event)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import torch
import torch.distributed as dist


def torch_environment(device: torch.device) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    return {
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if cuda else None,
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda
        else [],
        "device": str(device),
        "gloo_available": dist.is_available() and dist.is_gloo_available(),
        "nccl_available": dist.is_available() and dist.is_nccl_available(),
        **{f"{name}_version": _version(name) for name in RECORDED_LIBRARIES},
    }


RECORDED_LIBRARIES = ("torchvision", "timm")
"""Whose versions the environment records (``None``: not installed): a run of
``torchvision:NAME`` or ``timm:NAME`` says which release built its model."""


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def cuda_device_count() -> int:
    """CUDA devices torch sees (the backends' device probe)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def this_interpreter() -> dict[str, Any]:
    """``dlscale env``'s torch facts: those of the device a run here would use by default."""
    return torch_environment(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
