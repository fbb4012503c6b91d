"""Flax (Linen) twins of dlscale's models: the same layers, shapes and parameter names as the
PyTorch models, so the PyTorch twin's initial weights load into them unchanged.

Linen, not NNX: a Linen module is a pure function of its parameter tree, which is what
``jax.jit`` and ``jax.shard_map`` take, and a tree whose paths spell PyTorch's keys
(:mod:`dlscale.frameworks.jax.transfer`) is all the weight transfer needs.

Layouts are PyTorch's: activations NCHW, convolution kernels OIHW, linear weights (out, in), so
no weight is transposed on the way. BatchNorm is PyTorch's: the batch's mean and biased variance
normalize in training, ``eps = 1e-5``; the running statistics move by ``momentum = 0.1`` toward
the batch's mean and *unbiased* variance (Flax's own BatchNorm keeps the biased one), and eval
normalizes with them. Submodules are named as PyTorch's keys with ``_`` for ``.`` before an
index (``layer1_0`` for ``layer1.0``); :func:`~dlscale.frameworks.jax.transfer.torch_key` maps
them back.

Twins here: ``tiny`` and the CIFAR ResNets (20, 32, 44, 56, 110). The other models (ResNet-50,
AlexNet, GoogLeNet) have none yet: a jax point of those is refused before launch.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

EPS = 1e-5
MOMENTUM = 0.1


class Conv(nn.Module):
    """``torch.nn.Conv2d`` on NCHW: ``weight`` (out, in, k, k), ``bias`` where PyTorch has one."""

    features: int
    kernel: int
    stride: int = 1
    padding: int = 0
    bias: bool = True

    @nn.compact
    def __call__(self, x: Any) -> Any:
        shape = (self.features, x.shape[1], self.kernel, self.kernel)
        weight = self.param("weight", nn.initializers.zeros, shape, x.dtype)
        out = jax.lax.conv_general_dilated(
            x,
            weight,
            window_strides=(self.stride, self.stride),
            padding=[(self.padding, self.padding)] * 2,
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )
        if self.bias:
            out = (
                out
                + self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)[
                    None, :, None, None
                ]
            )
        return out


class Linear(nn.Module):
    """``torch.nn.Linear``: ``weight`` (out, in) and ``bias``."""

    features: int

    @nn.compact
    def __call__(self, x: Any) -> Any:
        weight = self.param("weight", nn.initializers.zeros, (self.features, x.shape[1]), x.dtype)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
        return x @ weight.T + bias


class BatchNorm(nn.Module):
    """``torch.nn.BatchNorm2d`` (see the module's docstring): ``weight``, ``bias``, and the
    ``batch_stats`` ``running_mean`` and ``running_var``."""

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        channels = x.shape[1]
        weight = self.param("weight", nn.initializers.ones, (channels,), x.dtype)
        bias = self.param("bias", nn.initializers.zeros, (channels,), x.dtype)
        mean_var = self.variable("batch_stats", "running_mean", jnp.zeros, (channels,), x.dtype)
        var_var = self.variable("batch_stats", "running_var", jnp.ones, (channels,), x.dtype)
        if train:
            mean = jnp.mean(x, axis=(0, 2, 3))
            var = jnp.mean(jnp.square(x - mean[None, :, None, None]), axis=(0, 2, 3))
            if not self.is_initializing():
                count = x.size // channels
                unbiased = var * (count / max(count - 1, 1))
                mean_var.value = (1 - MOMENTUM) * mean_var.value + MOMENTUM * mean
                var_var.value = (1 - MOMENTUM) * var_var.value + MOMENTUM * unbiased
        else:
            mean, var = mean_var.value, var_var.value
        scale = weight * jax.lax.rsqrt(var + EPS)
        return (x - mean[None, :, None, None]) * scale[None, :, None, None] + bias[
            None, :, None, None
        ]


class TinyNet(nn.Module):
    """conv(3->8) + ReLU + maxpool, conv(8->16) + ReLU + adaptive avg pool 4x4, linear."""

    num_classes: int

    @nn.compact
    def __call__(self, x: Any, train: bool = True) -> Any:
        x = nn.relu(Conv(8, 3, padding=1, name="features_0")(x))
        x = _max_pool2(x)
        x = nn.relu(Conv(16, 3, padding=1, name="features_3")(x))
        x = _adaptive_avg_pool(x, 4)
        return Linear(self.num_classes, name="fc")(x.reshape(x.shape[0], -1))


def _max_pool2(x: Any) -> Any:
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def _adaptive_avg_pool(x: Any, size: int) -> Any:
    """``nn.AdaptiveAvgPool2d(size)`` where the input divides evenly (as the tiny net's does);
    otherwise refused, not approximated."""
    height, width = x.shape[2], x.shape[3]
    if height % size or width % size:
        raise ValueError(f"the jax tiny twin pools {height}x{width} to {size}x{size} evenly only")
    kh, kw = height // size, width // size
    summed = jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 1, kh, kw), (1, 1, kh, kw), "VALID")
    return summed / (kh * kw)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and ReLU, plus the option-A identity shortcut."""

    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        out = Conv(self.features, 3, self.stride, 1, bias=False, name="conv1")(x)
        out = nn.relu(BatchNorm(name="bn1")(out, train))
        out = BatchNorm(name="bn2")(
            Conv(self.features, 3, 1, 1, bias=False, name="conv2")(out), train
        )
        shortcut = x
        if self.stride != 1:
            shortcut = shortcut[:, :, :: self.stride, :: self.stride]
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
        x = nn.relu(BatchNorm(name="bn1")(Conv(16, 3, 1, 1, bias=False, name="conv1")(x), train))
        for stage, (features, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
            for index in range(blocks):
                block = BasicBlock(
                    features, stride if index == 0 else 1, name=f"layer{stage}_{index}"
                )
                x = block(x, train)
        x = jnp.mean(x, axis=(2, 3))
        return Linear(self.num_classes, name="fc")(x)


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

TWINS = ("tiny", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
"""The models with a Flax twin here (registered as the ``jax`` builder)."""
