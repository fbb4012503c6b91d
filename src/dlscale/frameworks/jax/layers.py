"""PyTorch's layers in Flax (Linen), on PyTorch's layouts, for the twins in
:mod:`dlscale.frameworks.jax.models` and :mod:`dlscale.frameworks.jax.imagenet_models`.

Activations are NCHW, convolution kernels OIHW and linear weights (out, in), so a PyTorch state
loads with no transpose. :class:`BatchNorm` is PyTorch's: the batch's mean and biased variance
normalize in training; the running statistics move by ``momentum = 0.1`` toward the batch's
mean and *unbiased* variance (Flax's own BatchNorm keeps the biased one); eval normalizes with
them. The pools are PyTorch's: :func:`max_pool` with its padding (``-inf``) and ``ceil_mode``
(a last window that starts inside the input or its left padding), :func:`adaptive_avg_pool`
with PyTorch's bins (``floor(i H / n)`` to ``ceil((i + 1) H / n)``).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

MOMENTUM = 0.1
"""PyTorch's BatchNorm momentum (the running statistics' step toward the batch's)."""


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
            bias = self.param("bias", nn.initializers.zeros, (self.features,), x.dtype)
            out = out + bias[None, :, None, None]
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

    eps: float = 1e-5

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        channels = x.shape[1]
        weight = self.param("weight", nn.initializers.ones, (channels,), x.dtype)
        bias = self.param("bias", nn.initializers.zeros, (channels,), x.dtype)
        running_mean = self.variable("batch_stats", "running_mean", jnp.zeros, (channels,), x.dtype)
        running_var = self.variable("batch_stats", "running_var", jnp.ones, (channels,), x.dtype)
        if train:
            mean = jnp.mean(x, axis=(0, 2, 3))
            var = jnp.mean(jnp.square(x - mean[None, :, None, None]), axis=(0, 2, 3))
            if not self.is_initializing():
                count = x.size // channels
                unbiased = var * (count / max(count - 1, 1))
                running_mean.value = (1 - MOMENTUM) * running_mean.value + MOMENTUM * mean
                running_var.value = (1 - MOMENTUM) * running_var.value + MOMENTUM * unbiased
        else:
            mean, var = running_mean.value, running_var.value
        scale = weight * jax.lax.rsqrt(var + self.eps)
        centred = x - mean[None, :, None, None]
        return centred * scale[None, :, None, None] + bias[None, :, None, None]


class ConvBN(nn.Module):
    """A convolution without bias, BatchNorm, ReLU (names ``conv`` and ``bn``)."""

    features: int
    kernel: int
    stride: int = 1
    padding: int = 0
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x: Any, train: bool) -> Any:
        x = Conv(self.features, self.kernel, self.stride, self.padding, bias=False, name="conv")(x)
        return nn.relu(BatchNorm(self.eps, name="bn")(x, train))


def _pooled(size: int, kernel: int, stride: int, padding: int, ceil: bool) -> int:
    span = size + 2 * padding - kernel
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + padding:  # PyTorch: the last window must start
        out -= 1  # inside the input or its left padding
    return out


def max_pool(x: Any, kernel: int, stride: int, padding: int = 0, ceil: bool = False) -> Any:
    """``nn.MaxPool2d(kernel, stride, padding, ceil_mode=ceil)`` on NCHW."""
    pads = [(0, 0), (0, 0)]
    for size in x.shape[2:]:
        out = _pooled(size, kernel, stride, padding, ceil)
        right = max(0, (out - 1) * stride + kernel - size - padding)
        pads.append((padding, right))
    window, strides = (1, 1, kernel, kernel), (1, 1, stride, stride)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, pads)


def adaptive_avg_pool(x: Any, size: int) -> Any:
    """``nn.AdaptiveAvgPool2d(size)`` on NCHW, PyTorch's bins (a window per output cell where
    the input does not divide evenly; one reduce_window where it does)."""
    height, width = x.shape[2], x.shape[3]
    if height % size == 0 and width % size == 0:
        kh, kw = height // size, width // size
        window = (1, 1, kh, kw)
        summed = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, window, "VALID")
        return summed / (kh * kw)

    def bins(n: int) -> list[tuple[int, int]]:
        return [(i * n // size, math.ceil((i + 1) * n / size)) for i in range(size)]

    rows = [
        jnp.stack([jnp.mean(x[:, :, h0:h1, w0:w1], axis=(2, 3)) for w0, w1 in bins(width)], -1)
        for h0, h1 in bins(height)
    ]
    return jnp.stack(rows, -2)


def flatten(x: Any) -> Any:
    """``torch.flatten(x, 1)``."""
    return x.reshape(x.shape[0], -1)
