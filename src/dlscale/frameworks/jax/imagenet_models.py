"""Flax (Linen) twins of dlscale's ImageNet models: ResNet-50, AlexNet and GoogLeNet, with the
PyTorch models' layers, shapes and parameter names (see :mod:`dlscale.frameworks.jax.models`).

Dropout (AlexNet's classifier, GoogLeNet's before its classifier) is PyTorch's rule, kept values
scaled by ``1 / (1 - rate)``, with JAX's own masks from the step's ``dropout`` random stream:
no framework draws another's masks, so the equivalence proofs train with ``dropout = 0``.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from dlscale.frameworks.jax.layers import (
    BatchNorm,
    Conv,
    ConvBN,
    Linear,
    adaptive_avg_pool,
    flatten,
    max_pool,
)


def _dropout(rate: float, x: Any, train: bool, name: str) -> Any:
    """Inside a compact module: PyTorch's ``nn.Dropout(rate)`` (nothing in eval or at 0)."""
    if not train or rate == 0.0:
        return x
    return nn.Dropout(rate, deterministic=False, name=name)(x)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (the stride, v1.5), 1x1 expand by 4, each with BatchNorm; a projection
    shortcut (``downsample``: 1x1 convolution + BatchNorm) where the shape changes."""

    width: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        out_channels = self.width * 4
        out = Conv(self.width, 1, bias=False, name="conv1")(x)
        out = nn.relu(BatchNorm(name="bn1")(out, train))
        out = Conv(self.width, 3, self.stride, 1, bias=False, name="conv2")(out)
        out = nn.relu(BatchNorm(name="bn2")(out, train))
        out = BatchNorm(name="bn3")(Conv(out_channels, 1, bias=False, name="conv3")(out), train)
        identity = x
        if self.stride != 1 or x.shape[1] != out_channels:
            identity = Conv(out_channels, 1, self.stride, bias=False, name="downsample_0")(x)
            identity = BatchNorm(name="downsample_1")(identity, train)
        return nn.relu(out + identity)


class ResNet50(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        x = nn.relu(BatchNorm(name="bn1")(Conv(64, 7, 2, 3, bias=False, name="conv1")(x), train))
        x = max_pool(x, 3, 2, 1)
        for stage, (width, blocks, stride) in enumerate(
            ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), start=1
        ):
            for index in range(blocks):
                first = stride if index == 0 else 1
                x = Bottleneck(width, first, name=f"layer{stage}_{index}")(x, train)
        return Linear(self.num_classes, name="fc")(jnp.mean(x, axis=(2, 3)))


class AlexNet(nn.Module):
    """Five convolutions with max pooling, an adaptive 6x6 average pool, three fully connected
    layers with dropout (the one-tower variant, torchvision's layout)."""

    num_classes: int
    dropout: float = 0.5

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        x = max_pool(nn.relu(Conv(64, 11, 4, 2, name="features_0")(x)), 3, 2)
        x = max_pool(nn.relu(Conv(192, 5, 1, 2, name="features_3")(x)), 3, 2)
        x = nn.relu(Conv(384, 3, 1, 1, name="features_6")(x))
        x = nn.relu(Conv(256, 3, 1, 1, name="features_8")(x))
        x = max_pool(nn.relu(Conv(256, 3, 1, 1, name="features_10")(x)), 3, 2)
        x = flatten(adaptive_avg_pool(x, 6))
        x = _dropout(self.dropout, x, train, "classifier_0")
        x = nn.relu(Linear(4096, name="classifier_1")(x))
        x = _dropout(self.dropout, x, train, "classifier_3")
        x = nn.relu(Linear(4096, name="classifier_4")(x))
        return Linear(self.num_classes, name="classifier_6")(x)


GOOGLENET_EPS = 0.001
"""GoogLeNet's BatchNorm epsilon (torchvision's)."""


class Inception(nn.Module):
    """Four branches concatenated along the channels: 1x1; 1x1 -> 3x3; 1x1 -> "5x5" (a 3x3, as
    torchvision's port has it); 3x3 max pool -> 1x1."""

    ch1x1: int
    ch3x3red: int
    ch3x3: int
    ch5x5red: int
    ch5x5: int
    pool_proj: int

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        eps = GOOGLENET_EPS
        one = ConvBN(self.ch1x1, 1, eps=eps, name="branch1")(x, train)
        two = ConvBN(self.ch3x3red, 1, eps=eps, name="branch2_0")(x, train)
        two = ConvBN(self.ch3x3, 3, padding=1, eps=eps, name="branch2_1")(two, train)
        three = ConvBN(self.ch5x5red, 1, eps=eps, name="branch3_0")(x, train)
        three = ConvBN(self.ch5x5, 3, padding=1, eps=eps, name="branch3_1")(three, train)
        four = max_pool(x, 3, 1, 1, ceil=True)
        four = ConvBN(self.pool_proj, 1, eps=eps, name="branch4_1")(four, train)
        return jnp.concatenate([one, two, three, four], axis=1)


class GoogLeNet(nn.Module):
    """Inception v1 with BatchNorm and no auxiliary heads (torchvision's layout)."""

    num_classes: int
    dropout: float = 0.2

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        eps = GOOGLENET_EPS
        x = ConvBN(64, 7, 2, 3, eps=eps, name="stem_0")(x, train)
        x = max_pool(x, 3, 2, ceil=True)
        x = ConvBN(64, 1, eps=eps, name="stem_2")(x, train)
        x = ConvBN(192, 3, padding=1, eps=eps, name="stem_3")(x, train)
        x = max_pool(x, 3, 2, ceil=True)
        x = Inception(64, 96, 128, 16, 32, 32, name="inception3_0")(x, train)
        x = Inception(128, 128, 192, 32, 96, 64, name="inception3_1")(x, train)
        x = max_pool(x, 3, 2, ceil=True)
        for index, widths in enumerate(
            (
                (192, 96, 208, 16, 48, 64),
                (160, 112, 224, 24, 64, 64),
                (128, 128, 256, 24, 64, 64),
                (112, 144, 288, 32, 64, 64),
                (256, 160, 320, 32, 128, 128),
            )
        ):
            x = Inception(*widths, name=f"inception4_{index}")(x, train)
        x = max_pool(x, 2, 2, ceil=True)
        x = Inception(256, 160, 320, 32, 128, 128, name="inception5_0")(x, train)
        x = Inception(384, 192, 384, 48, 128, 128, name="inception5_1")(x, train)
        x = _dropout(self.dropout, jnp.mean(x, axis=(2, 3)), train, "drop")
        return Linear(self.num_classes, name="fc")(x)


def resnet50(num_classes: int) -> nn.Module:
    """The Flax twin of ResNet-50 (v1.5)."""
    return ResNet50(num_classes)


def alexnet(num_classes: int, dropout: float = 0.5) -> nn.Module:
    """The Flax twin of the one-tower AlexNet."""
    return AlexNet(num_classes, dropout)


def googlenet(num_classes: int, dropout: float = 0.2) -> nn.Module:
    """The Flax twin of GoogLeNet with BatchNorm."""
    return GoogLeNet(num_classes, dropout)
