"""Flax (Linen) twins of dlscale's small models: the same layers, shapes and parameter names as
the PyTorch models, so the PyTorch twin's initial weights load into them unchanged.

Linen, not NNX: a Linen module is a pure function of its parameter tree, which is what
``jax.jit`` and ``jax.shard_map`` take, and a tree whose paths spell PyTorch's keys
(:mod:`dlscale.frameworks.jax.transfer`) is all the weight transfer needs. Submodules are named
as PyTorch's keys with ``_`` for ``.`` before an index (``layer1_0`` for ``layer1.0``). The
layers are PyTorch's (:mod:`dlscale.frameworks.jax.layers`).

Here: ``tiny`` and the CIFAR ResNets (20, 32, 44, 56, 110);
:mod:`dlscale.frameworks.jax.imagenet_models` has ResNet-50, AlexNet and GoogLeNet.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from dlscale.frameworks.jax.layers import (
    BatchNorm,
    Conv,
    Linear,
    adaptive_avg_pool,
    flatten,
    max_pool,
)


class TinyNet(nn.Module):
    """conv(3->8) + ReLU + maxpool, conv(8->16) + ReLU + adaptive avg pool 4x4, linear."""

    num_classes: int

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        x = max_pool(nn.relu(Conv(8, 3, padding=1, name="features_0")(x)), 2, 2)
        x = nn.relu(Conv(16, 3, padding=1, name="features_3")(x))
        return Linear(self.num_classes, name="fc")(flatten(adaptive_avg_pool(x, 4)))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and ReLU, plus the option-A identity shortcut
    (subsampled by 2, the new channels zero-padded)."""

    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        out = Conv(self.features, 3, self.stride, 1, bias=False, name="conv1")(x)
        out = nn.relu(BatchNorm(name="bn1")(out, train))
        out = Conv(self.features, 3, 1, 1, bias=False, name="conv2")(out)
        out = BatchNorm(name="bn2")(out, train)
        shortcut = x[:, :, :: self.stride, :: self.stride] if self.stride != 1 else x
        extra = self.features - x.shape[1]
        if extra:
            before = extra // 2
            shortcut = jnp.pad(shortcut, ((0, 0), (before, extra - before), (0, 0), (0, 0)))
        return nn.relu(out + shortcut)


class CifarResNet(nn.Module):
    """ResNet of depth ``6n + 2`` for 32x32 inputs (He et al. 2016, section 4.2)."""

    depth: int
    num_classes: int

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        blocks = (self.depth - 2) // 6
        x = Conv(16, 3, 1, 1, bias=False, name="conv1")(x)
        x = nn.relu(BatchNorm(name="bn1")(x, train))
        for stage, (features, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
            for index in range(blocks):
                first = stride if index == 0 else 1
                x = BasicBlock(features, first, name=f"layer{stage}_{index}")(x, train)
        return Linear(self.num_classes, name="fc")(jnp.mean(x, axis=(2, 3)))


def tiny(num_classes: int) -> nn.Module:
    return TinyNet(num_classes)


def _resnet(depth: int) -> Any:
    def build(num_classes: int) -> nn.Module:
        return CifarResNet(depth, num_classes)

    build.__doc__ = f"The Flax twin of ResNet-{depth} (CIFAR)."
    return build


resnet20 = _resnet(20)
resnet32 = _resnet(32)
resnet44 = _resnet(44)
resnet56 = _resnet(56)
resnet110 = _resnet(110)
