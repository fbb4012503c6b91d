"""What a torch engine measures beside its steps, for MFU and peak memory (docs/metrics.md):
its CUDA allocator's peaks per window, and the training FLOPs of a user's model, counted once
by the first training rank (a built-in model's are declared, the same for every framework)."""

from __future__ import annotations

from typing import Any

import torch

from dlscale.contract.models import MODELS
from dlscale.contract.run_config import RunConfig
from dlscale.runtime.context import WorkerContext
from dlscale.runtime.samples import model_outputs


class TorchMeasures:
    """Mixed into :class:`~dlscale.frameworks.torch.loop.TorchEngine`."""

    device: torch.device
    ctx: WorkerContext

    def device_memory_peaks(self) -> dict[str, Any]:
        """The CUDA caching allocator's peaks since the last call (bytes in tensors,
        ``allocated_bytes.all.peak``; bytes reserved from the device,
        ``reserved_bytes.all.peak``), which are then reset; nothing on a CPU."""
        if self.device.type != "cuda":
            return {}
        stats = torch.cuda.memory_stats(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return {
            "device_peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
            "device_peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        }

    def model_flops(self) -> dict[str, Any]:
        """A user's (or a library's) model's training FLOPs per sample, counted on a copy
        built anew on PyTorch's meta device (nothing computed, no collective: the replica
        itself may be wrapped by DDP or FSDP), or why they could not be
        (``{"missing": ...}``); nothing for a built-in model, which declares them."""
        return user_model_flops(self.ctx.config)


def compute_dtype(device: torch.device, dtype: torch.dtype, amp: str) -> str | None:
    """The type the model's products run in where it is not the run's ``precision``: ``bf16``
    under autocast; on CUDA in float32, ``tf32`` where torch lets either library use it
    (``torch.backends.cudnn.allow_tf32``, on by default for convolutions;
    ``torch.backends.cuda.matmul.allow_tf32``): the higher of the two peaks, so that an MFU
    never reads high for products that ran on TF32 tensor cores. ``None``: the precision."""
    if amp == "bf16":
        return "bf16"
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
    if device.type == "cuda" and dtype == torch.float32 and tf32:
        return "tf32"
    return None


def user_model_flops(config: RunConfig) -> dict[str, Any]:
    """See :meth:`TorchMeasures.model_flops`."""
    if MODELS.get(config.model).builtin:
        return {}
    from dlscale.frameworks.torch.profile import FlopsNotCounted, count_training_flops

    try:
        counted = count_training_flops(
            config.model,
            config.options,
            image_size=config.image_size,
            num_classes=model_outputs(config),  # the classes it is built with
        )
        return counted.to_dict()
    except FlopsNotCounted as error:
        return {"missing": f"no MFU: {error}"}
