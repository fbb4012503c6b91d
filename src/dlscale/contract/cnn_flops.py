"""The built-in image models' forward FLOPs, counted from their architecture (no framework).

Each model is written out here as a table of its weighted layers, as its PyTorch builder
(``dlscale/frameworks/torch/models/``) lays them out: kernel, stride, padding and channels of
every convolution, the fully connected layers, and the pools only for the feature-map sizes
they give. What is counted is what PyTorch's ``FlopCounterMode`` counts, so the two can be
checked against each other (tests/unit/test_flops.py):

* a convolution: ``2 * out_h * out_w * k * k * in_ch / groups * out_ch`` (a multiply-add is 2
  FLOPs; the bias is not counted);
* a linear layer: ``2 * in_features * out_features`` (the bias is not counted);
* nothing else: BatchNorm, ReLU, pooling, residual additions, concatenation and dropout are
  left out (a few percent of the total).

One image, square, of ``image_size`` pixels a side; ``num_classes`` outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["CIFAR_DEPTHS", "analytic_forward_flops"]

CIFAR_DEPTHS = (20, 32, 44, 56, 110)
"""The CIFAR ResNets registered (``resnet20`` ... ``resnet110``): depth ``6n + 2``."""

Layer = tuple[str, int, int, int, int, int]
"""A row of a layer table: ``("conv", in_ch, out_ch, kernel, stride, padding)``,
``("pool", 0, 0, kernel, stride, padding)`` (max pool, floor), ``("ceilpool", ...)`` (max
pool, ceil mode), ``("adaptive", 0, 0, side, 0, 0)`` (adaptive pool to ``side x side``)."""


def conv(size: int, c_in: int, c_out: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """FLOPs of a square convolution on a ``size x size`` map (groups = 1, bias not counted)."""
    out = conv_side(size, kernel, stride, padding)
    return 2 * out * out * kernel * kernel * c_in * c_out


def conv_side(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """The output side of a convolution (or a floor-mode pool)."""
    return (size + 2 * padding - kernel) // stride + 1


def ceil_pool_side(size: int, kernel: int, stride: int, padding: int = 0) -> int:
    """The output side of a ceil-mode max pool (PyTorch's rule: the last window must start
    inside the input or its left padding)."""
    out = math.ceil((size + 2 * padding - kernel) / stride) + 1
    if (out - 1) * stride >= size + padding:
        out -= 1
    return out


def linear(n_in: int, n_out: int) -> int:
    """FLOPs of a fully connected layer (bias not counted)."""
    return 2 * n_in * n_out


def walk(table: tuple[Layer, ...], size: int) -> tuple[int, int]:
    """``(FLOPs, output side)`` of a plain stack of convolutions and pools."""
    flops = 0
    for kind, c_in, c_out, kernel, stride, padding in table:
        if kind == "conv":
            flops += conv(size, c_in, c_out, kernel, stride, padding)
            size = conv_side(size, kernel, stride, padding)
        elif kind == "pool":
            size = conv_side(size, kernel, stride, padding)
        elif kind == "ceilpool":
            size = ceil_pool_side(size, kernel, stride, padding)
        elif kind == "adaptive":
            size = kernel
        else:
            raise ValueError(f"unknown layer kind {kind!r}")
    return flops, size


# --- tiny: conv(3->8) + maxpool 2, conv(8->16), adaptive 4x4, linear(256 -> classes)
TINY: tuple[Layer, ...] = (
    ("conv", 3, 8, 3, 1, 1),
    ("pool", 0, 0, 2, 2, 0),
    ("conv", 8, 16, 3, 1, 1),
    ("adaptive", 0, 0, 4, 0, 0),
)


def tiny(num_classes: int, image_size: int) -> int:
    flops, _ = walk(TINY, image_size)
    return flops + linear(16 * 4 * 4, num_classes)


# --- AlexNet, one tower: five convolutions, adaptive 6x6, three fully connected layers
ALEXNET: tuple[Layer, ...] = (
    ("conv", 3, 64, 11, 4, 2),
    ("pool", 0, 0, 3, 2, 0),
    ("conv", 64, 192, 5, 1, 2),
    ("pool", 0, 0, 3, 2, 0),
    ("conv", 192, 384, 3, 1, 1),
    ("conv", 384, 256, 3, 1, 1),
    ("conv", 256, 256, 3, 1, 1),
    ("pool", 0, 0, 3, 2, 0),
    ("adaptive", 0, 0, 6, 0, 0),
)


def alexnet(num_classes: int, image_size: int) -> int:
    flops, _ = walk(ALEXNET, image_size)
    return flops + linear(256 * 6 * 6, 4096) + linear(4096, 4096) + linear(4096, num_classes)


# --- CIFAR ResNet (option-A shortcuts: no convolution on the shortcut)
def cifar_resnet(depth: int, num_classes: int, image_size: int) -> int:
    """3x3 stem (3 -> 16), three stages of ``n = (depth - 2) / 6`` basic blocks (two 3x3
    convolutions) of 16, 32, 64 channels, the first of stages 2 and 3 with stride 2; global
    average pool; linear(64 -> classes)."""
    n = (depth - 2) // 6
    flops, size = conv(image_size, 3, 16, 3, 1, 1), image_size
    c_in = 16
    for c_out, first_stride in ((16, 1), (32, 2), (64, 2)):
        for block in range(n):
            stride = first_stride if block == 0 else 1
            flops += conv(size, c_in, c_out, 3, stride, 1)
            size = conv_side(size, 3, stride, 1)
            flops += conv(size, c_out, c_out, 3, 1, 1)
            c_in = c_out
    return flops + linear(64, num_classes)


# --- ResNet-50 v1.5: bottleneck blocks, stride on the 3x3, option-B (1x1) projections
RESNET50_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
"""``(width, blocks, stride of the first block)``; a block's output is ``4 * width``."""


def resnet50(num_classes: int, image_size: int) -> int:
    flops, size = walk((("conv", 3, 64, 7, 2, 3), ("pool", 0, 0, 3, 2, 1)), image_size)
    c_in = 64
    for width, blocks, first_stride in RESNET50_STAGES:
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            c_out = 4 * width
            flops += conv(size, c_in, width, 1)  # 1x1 reduce
            if stride != 1 or c_in != c_out:  # 1x1 projection shortcut, on the block's input
                flops += conv(size, c_in, c_out, 1, stride)
            flops += conv(size, width, width, 3, stride, 1)  # 3x3, carrying the stride
            size = conv_side(size, 3, stride, 1)
            flops += conv(size, width, c_out, 1)  # 1x1 expand
            c_in = c_out
    return flops + linear(2048, num_classes)


# --- GoogLeNet with BatchNorm, no auxiliary heads; the "5x5" branch is a 3x3 (torchvision)
GOOGLENET_STEM: tuple[Layer, ...] = (
    ("conv", 3, 64, 7, 2, 3),
    ("ceilpool", 0, 0, 3, 2, 0),
    ("conv", 64, 64, 1, 1, 0),
    ("conv", 64, 192, 3, 1, 1),
    ("ceilpool", 0, 0, 3, 2, 0),
)
INCEPTIONS: tuple[tuple[int, ...], ...] = (
    # in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection  (then the pool after)
    (192, 64, 96, 128, 16, 32, 32),  # 3a
    (256, 128, 128, 192, 32, 96, 64),  # 3b, then max pool 3/2
    (480, 192, 96, 208, 16, 48, 64),  # 4a
    (512, 160, 112, 224, 24, 64, 64),  # 4b
    (512, 128, 128, 256, 24, 64, 64),  # 4c
    (512, 112, 144, 288, 32, 64, 64),  # 4d
    (528, 256, 160, 320, 32, 128, 128),  # 4e, then max pool 2/2
    (832, 256, 160, 320, 32, 128, 128),  # 5a
    (832, 384, 192, 384, 48, 128, 128),  # 5b
)
POOL_AFTER = {1: (3, 2), 6: (2, 2)}
"""Index in :data:`INCEPTIONS` -> the ceil-mode max pool ``(kernel, stride)`` after it."""


def inception(size: int, row: tuple[int, ...]) -> int:
    """FLOPs of one Inception module on ``size x size``: its four branches (the pool branch's
    3x3 stride-1 max pool keeps the size)."""
    c_in, ch1, red3, ch3, red5, ch5, proj = row
    return (
        conv(size, c_in, ch1, 1)
        + conv(size, c_in, red3, 1)
        + conv(size, red3, ch3, 3, 1, 1)
        + conv(size, c_in, red5, 1)
        + conv(size, red5, ch5, 3, 1, 1)
        + conv(size, c_in, proj, 1)
    )


def googlenet(num_classes: int, image_size: int) -> int:
    flops, size = walk(GOOGLENET_STEM, image_size)
    for index, row in enumerate(INCEPTIONS):
        flops += inception(size, row)
        if index in POOL_AFTER:
            kernel, stride = POOL_AFTER[index]
            size = ceil_pool_side(size, kernel, stride)
    return flops + linear(1024, num_classes)


_COUNTERS: dict[str, Callable[[int, int], int]] = {
    "tiny": tiny,
    "alexnet": alexnet,
    "resnet50": resnet50,
    "googlenet": googlenet,
}


def analytic_forward_flops(name: str, num_classes: int, image_size: int) -> int | None:
    """FLOPs of one forward pass of one ``image_size x image_size`` image through the built-in
    model ``name`` with ``num_classes`` outputs, counted from the layer tables above; ``None``
    for a model they do not describe (a plug-in's, a user's, a library's)."""
    if name.startswith("resnet") and name[6:].isdigit() and int(name[6:]) in CIFAR_DEPTHS:
        return cifar_resnet(int(name[6:]), num_classes, image_size)
    counter = _COUNTERS.get(name)
    return None if counter is None else counter(num_classes, image_size)
