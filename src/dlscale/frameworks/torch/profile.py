"""Static cost profile of a registered model: parameters and forward FLOPs per sample.

What is counted, exactly:

* ``params``: the number of trainable parameters (``requires_grad``) of the model built for
  ``num_classes`` classes. BatchNorm running statistics are buffers and are not counted;
  BatchNorm affine weights and biases are.
* ``forward_flops_per_sample``: the FLOPs of one forward pass of one image at
  ``image_size x image_size``, as counted by :class:`torch.utils.flop_counter.FlopCounterMode`.
  That counter covers convolutions and matrix products only (``convolution``, ``mm``,
  ``addmm``, ``bmm``, ``baddbmm`` and attention kernels, so every ``Conv2d`` and ``Linear``),
  and counts one multiply-add as 2 FLOPs: a convolution costs
  ``2 * C_out * H_out * W_out * C_in / groups * k_h * k_w``, a linear layer
  ``2 * in_features * out_features``. Bias additions, BatchNorm, activations (ReLU), pooling,
  residual additions, concatenation, dropout and softmax are NOT counted; they are a few percent
  of the total for the convolutional networks here. Divide by 2 for multiply-accumulates (MACs),
  the unit most papers quote. The backward pass costs about twice the forward.

The model is built on PyTorch's ``meta`` device, and the counter runs on a meta input of batch 1,
so profiling allocates no real memory and computes nothing; if a model cannot run on ``meta``,
the profile falls back to the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlscale.contract.models import MODELS

__all__ = ["ModelProfile", "gradient_bytes", "profile"]

INPUT_CHANNELS = 3


@dataclass(frozen=True)
class ModelProfile:
    """Parameter count and forward cost of one model at one input size."""

    name: str
    params: int
    """Trainable parameters."""
    forward_flops_per_sample: int
    """FLOPs (multiply-add = 2) of conv/linear/matmul in one forward pass of one image."""
    input_shape: tuple[int, int, int]
    """``(C, H, W)`` of one input image."""
    num_classes: int


def profile(
    name: str, num_classes: int | None = None, image_size: int | None = None
) -> ModelProfile:
    """Profile the registered model ``name`` (see the module docstring for what is counted)."""
    spec = MODELS.get(name)
    classes = spec.default_classes if num_classes is None else num_classes
    size = spec.input_size if image_size is None else image_size
    shape = (INPUT_CHANNELS, size, size)
    try:
        params, flops = _measure(spec.build, classes, shape, "meta")
    except (NotImplementedError, RuntimeError):
        params, flops = _measure(spec.build, classes, shape, "cpu")
    return ModelProfile(
        name=spec.name,
        params=params,
        forward_flops_per_sample=flops,
        input_shape=shape,
        num_classes=classes,
    )


def _measure(
    build: Callable[[int], Any], num_classes: int, shape: tuple[int, int, int], device: str
) -> tuple[int, int]:
    """Build on ``device``, count trainable parameters, count FLOPs of a batch-1 forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        model = build(num_classes)
        inputs = torch.zeros((1, *shape))
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(inputs)
    return int(params), int(counter.get_total_flops())


def gradient_bytes(params: int, dtype_bytes: int = 4) -> int:
    """Bytes of one full gradient, the payload of one all-reduce: ``params * dtype_bytes``."""
    if params < 0 or dtype_bytes <= 0:
        raise ValueError(f"need params >= 0 and dtype_bytes > 0, got {params}, {dtype_bytes}")
    return params * dtype_bytes
