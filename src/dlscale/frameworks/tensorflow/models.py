"""Keras twins of the registry's PyTorch models: the same layers, shapes and parameter counts.

Each builder returns a functional ``tf.keras.Model`` on NHWC inputs (TensorFlow's CPU kernels want
channels last) whose layers are named after the PyTorch module they mirror (``layer1.0.conv1``), so
:func:`dlscale.frameworks.tensorflow.transfer.load_torch_weights` can copy a PyTorch model's weights
in by name. What PyTorch does and Keras' stock layers do not is done by small layers here, so the
two compute the same function:

* a convolution's ``padding=p`` is an explicit zero padding of ``p`` on each side before a
  ``valid`` convolution (Keras' ``same`` pads a stride-2 convolution on one side only);
* max pooling pads with -inf and follows PyTorch's ``ceil_mode`` rule (:class:`TorchMaxPool`);
* adaptive average pooling uses PyTorch's window bounds (:class:`TorchAdaptiveAvgPool`);
* the option-A shortcut of the CIFAR ResNets subsamples and zero-pads channels
  (:class:`ShortcutA`);
* before a classifier, features are put back in channel-first order, so flattening gives the
  order of ``torch.flatten`` on NCHW and the first dense layer takes PyTorch's weight as is;
* BatchNorm has PyTorch's epsilon and momentum 1 - 0.1 (Keras keeps ``momentum`` of the old
  value, PyTorch ``momentum`` of the new one). PyTorch updates the running variance with the
  unbiased batch variance, Keras with the biased one: training steps agree, the running
  variance (used in evaluation) differs by a factor n/(n-1) of a batch's n values per channel.

Initialisation without a transfer follows each PyTorch model's rule where Keras has it
(Kaiming normal fan-out for the ResNets, a truncated normal for GoogLeNet); elsewhere Keras'
defaults (Glorot uniform, zero biases). Runs that compare engines start from the PyTorch weights.
"""

from __future__ import annotations

import math
from typing import Any

from dlscale.frameworks.tensorflow.env import import_tensorflow

tf = import_tensorflow()
keras: Any = tf.keras
layers: Any = keras.layers
_Layer: Any = layers.Layer

_BN_MOMENTUM = 0.9  # PyTorch's default momentum 0.1, in Keras' convention
_KAIMING_OUT = {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"}


class TorchMaxPool(_Layer):
    """``torch.nn.MaxPool2d(kernel, stride, padding, ceil_mode)`` on NHWC."""

    def __init__(self, kernel: int, stride: int, padding: int = 0, ceil_mode: bool = False, **kw):
        super().__init__(**kw)
        self.kernel, self.stride, self.padding, self.ceil_mode = kernel, stride, padding, ceil_mode

    def _pads(self, size: int) -> tuple[int, int]:
        span = size + 2 * self.padding - self.kernel
        steps = math.ceil(span / self.stride) if self.ceil_mode else span // self.stride
        if self.ceil_mode and steps * self.stride >= size + self.padding:
            steps -= 1  # PyTorch: the last window must start inside the input or left padding
        right = steps * self.stride + self.kernel - size - self.padding
        return self.padding, max(right, 0)

    def call(self, x: Any) -> Any:
        (top, bottom), (left, right) = self._pads(x.shape[1]), self._pads(x.shape[2])
        if top or bottom or left or right:
            x = tf.pad(x, [[0, 0], [top, bottom], [left, right], [0, 0]], constant_values=-math.inf)
        return tf.nn.max_pool2d(x, self.kernel, self.stride, "VALID")

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "kernel": self.kernel,
            "stride": self.stride,
            "padding": self.padding,
            "ceil_mode": self.ceil_mode,
        }


class TorchAdaptiveAvgPool(_Layer):
    """``torch.nn.AdaptiveAvgPool2d(size)`` on NHWC: window i spans
    [floor(i H / size), ceil((i + 1) H / size))."""

    def __init__(self, size: int, **kw):
        super().__init__(**kw)
        self.size = size

    def call(self, x: Any) -> Any:
        height, width = x.shape[1], x.shape[2]
        if height == self.size and width == self.size:
            return x
        if height % self.size == 0 and width % self.size == 0:
            kernel = (height // self.size, width // self.size)
            return tf.nn.avg_pool2d(x, kernel, kernel, "VALID")
        rows = []
        for i in range(self.size):
            top, bottom = (i * height) // self.size, -((-(i + 1) * height) // self.size)
            cols = []
            for j in range(self.size):
                left, right = (j * width) // self.size, -((-(j + 1) * width) // self.size)
                cols.append(tf.reduce_mean(x[:, top:bottom, left:right, :], axis=[1, 2]))
            rows.append(tf.stack(cols, axis=1))
        return tf.stack(rows, axis=1)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "size": self.size}


class ShortcutA(_Layer):
    """Option-A shortcut (He et al. 2016): subsample by ``stride``, zero-pad ``extra``
    channels, half before and half after (as
    :class:`dlscale.frameworks.torch.models.resnet_cifar.ShortcutA`)."""

    def __init__(self, extra: int, stride: int, **kw):
        super().__init__(**kw)
        self.extra, self.stride = extra, stride

    def call(self, x: Any) -> Any:
        if self.stride != 1:
            x = x[:, :: self.stride, :: self.stride, :]
        before = self.extra // 2
        return tf.pad(x, [[0, 0], [0, 0], [0, 0], [before, self.extra - before]])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "extra": self.extra, "stride": self.stride}


def _conv(
    x: Any,
    name: str,
    filters: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    bias: bool = True,
    init: Any = "glorot_uniform",
) -> Any:
    if padding:
        x = layers.ZeroPadding2D(padding, name=f"{name}.pad")(x)
    return layers.Conv2D(
        filters, kernel, stride, "valid", use_bias=bias, kernel_initializer=init, name=name
    )(x)


def _bn(x: Any, name: str, eps: float = 1e-5) -> Any:
    return layers.BatchNormalization(momentum=_BN_MOMENTUM, epsilon=eps, name=name)(x)


def _flatten_channels_first(x: Any, name: str) -> Any:
    """NHWC -> the order of ``torch.flatten`` on NCHW."""
    return layers.Flatten(name=f"{name}.flatten")(layers.Permute((3, 1, 2), name=name)(x))


def _inputs(size: int) -> Any:
    return keras.Input(shape=(size, size, 3), name="images")


# -- tiny ---------------------------------------------------------------------------------------


def tiny(num_classes: int, input_size: int = 32) -> Any:
    """Twin of :class:`dlscale.frameworks.torch.models.tiny.TinyNet`."""
    inputs = _inputs(input_size)
    x = layers.ReLU()(_conv(inputs, "features.0", 8, 3, padding=1))
    x = TorchMaxPool(2, 2, name="features.2")(x)
    x = layers.ReLU()(_conv(x, "features.3", 16, 3, padding=1))
    x = TorchAdaptiveAvgPool(4, name="features.5")(x)
    x = layers.Dense(num_classes, name="fc")(_flatten_channels_first(x, "to_nchw"))
    return keras.Model(inputs, x, name="tiny")


# -- CIFAR ResNets ------------------------------------------------------------------------------


def _basic_block(x: Any, name: str, in_channels: int, out_channels: int, stride: int) -> Any:
    out = _conv(x, f"{name}.conv1", out_channels, 3, stride, 1, False, _kaiming())
    out = layers.ReLU()(_bn(out, f"{name}.bn1"))
    out = _bn(_conv(out, f"{name}.conv2", out_channels, 3, 1, 1, False, _kaiming()), f"{name}.bn2")
    shortcut = x
    if stride != 1 or in_channels != out_channels:
        shortcut = ShortcutA(out_channels - in_channels, stride, name=f"{name}.shortcut")(x)
    return layers.ReLU()(layers.Add()([out, shortcut]))


def _kaiming() -> Any:
    return keras.initializers.VarianceScaling(**_KAIMING_OUT)


def cifar_resnet(depth: int, num_classes: int, input_size: int = 32) -> Any:
    """Twin of :class:`dlscale.frameworks.torch.models.resnet_cifar.CifarResNet`."""
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 with n >= 1, got {depth}")
    n = (depth - 2) // 6
    inputs = _inputs(input_size)
    x = layers.ReLU()(_bn(_conv(inputs, "conv1", 16, 3, 1, 1, False, _kaiming()), "bn1"))
    in_channels = 16
    for stage, (channels, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        for block in range(n):
            x = _basic_block(
                x, f"layer{stage}.{block}", in_channels, channels, stride if block == 0 else 1
            )
            in_channels = channels
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, layers.Dense(num_classes, name="fc")(x), name=f"resnet{depth}")


def resnet20(num_classes: int, input_size: int = 32) -> Any:
    return cifar_resnet(20, num_classes, input_size)


def resnet32(num_classes: int, input_size: int = 32) -> Any:
    return cifar_resnet(32, num_classes, input_size)


def resnet44(num_classes: int, input_size: int = 32) -> Any:
    return cifar_resnet(44, num_classes, input_size)


def resnet56(num_classes: int, input_size: int = 32) -> Any:
    return cifar_resnet(56, num_classes, input_size)


def resnet110(num_classes: int, input_size: int = 32) -> Any:
    return cifar_resnet(110, num_classes, input_size)


# -- ResNet-50 ----------------------------------------------------------------------------------


def _bottleneck(x: Any, name: str, in_channels: int, width: int, stride: int) -> Any:
    out_channels = width * 4
    out = layers.ReLU()(
        _bn(_conv(x, f"{name}.conv1", width, 1, 1, 0, False, _kaiming()), f"{name}.bn1")
    )
    out = _conv(out, f"{name}.conv2", width, 3, stride, 1, False, _kaiming())
    out = layers.ReLU()(_bn(out, f"{name}.bn2"))
    out = _bn(_conv(out, f"{name}.conv3", out_channels, 1, 1, 0, False, _kaiming()), f"{name}.bn3")
    identity = x
    if stride != 1 or in_channels != out_channels:
        identity = _conv(x, f"{name}.downsample.0", out_channels, 1, stride, 0, False, _kaiming())
        identity = _bn(identity, f"{name}.downsample.1")
    return layers.ReLU()(layers.Add()([out, identity]))


def resnet50(num_classes: int, input_size: int = 224) -> Any:
    """Twin of :class:`dlscale.frameworks.torch.models.resnet_imagenet.ResNet50` (v1.5)."""
    inputs = _inputs(input_size)
    x = layers.ReLU()(_bn(_conv(inputs, "conv1", 64, 7, 2, 3, False, _kaiming()), "bn1"))
    x = TorchMaxPool(3, 2, 1, name="maxpool")(x)
    in_channels = 64
    for stage, (width, blocks, stride) in enumerate(
        ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), start=1
    ):
        for block in range(blocks):
            x = _bottleneck(
                x, f"layer{stage}.{block}", in_channels, width, stride if block == 0 else 1
            )
            in_channels = width * 4
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    return keras.Model(inputs, layers.Dense(num_classes, name="fc")(x), name="resnet50")


# -- AlexNet ------------------------------------------------------------------------------------


def alexnet(num_classes: int, input_size: int = 224, dropout: float = 0.5) -> Any:
    """Twin of :class:`dlscale.frameworks.torch.models.alexnet.AlexNet`."""
    inputs = _inputs(input_size)
    x = inputs
    convs = (
        (0, 64, 11, 4, 2),
        (3, 192, 5, 1, 2),
        (6, 384, 3, 1, 1),
        (8, 256, 3, 1, 1),
        (10, 256, 3, 1, 1),
    )
    for index, filters, kernel, stride, padding in convs:
        x = layers.ReLU()(_conv(x, f"features.{index}", filters, kernel, stride, padding))
        if index in (0, 3):
            x = TorchMaxPool(3, 2, name=f"features.{index + 2}")(x)
    x = TorchMaxPool(3, 2, name="features.12")(x)
    x = _flatten_channels_first(TorchAdaptiveAvgPool(6, name="avgpool")(x), "to_nchw")
    x = layers.Dropout(dropout, name="classifier.0")(x)
    x = layers.ReLU()(layers.Dense(4096, name="classifier.1")(x))
    x = layers.Dropout(dropout, name="classifier.3")(x)
    x = layers.ReLU()(layers.Dense(4096, name="classifier.4")(x))
    return keras.Model(inputs, layers.Dense(num_classes, name="classifier.6")(x), name="alexnet")


# -- GoogLeNet ----------------------------------------------------------------------------------


def _trunc_normal() -> Any:
    return keras.initializers.TruncatedNormal(stddev=0.01)


def _conv_block(
    x: Any, name: str, filters: int, kernel: int, stride: int = 1, padding: int = 0
) -> Any:
    x = _conv(x, f"{name}.conv", filters, kernel, stride, padding, False, _trunc_normal())
    return layers.ReLU()(_bn(x, f"{name}.bn", eps=0.001))


def _inception(x: Any, name: str, c1: int, c3r: int, c3: int, c5r: int, c5: int, proj: int) -> Any:
    b1 = _conv_block(x, f"{name}.branch1", c1, 1)
    b2 = _conv_block(_conv_block(x, f"{name}.branch2.0", c3r, 1), f"{name}.branch2.1", c3, 3, 1, 1)
    b3 = _conv_block(_conv_block(x, f"{name}.branch3.0", c5r, 1), f"{name}.branch3.1", c5, 3, 1, 1)
    b4 = TorchMaxPool(3, 1, 1, ceil_mode=True, name=f"{name}.branch4.0")(x)
    b4 = _conv_block(b4, f"{name}.branch4.1", proj, 1)
    return layers.Concatenate(axis=-1, name=f"{name}.cat")([b1, b2, b3, b4])


def googlenet(num_classes: int, input_size: int = 224, dropout: float = 0.2) -> Any:
    """Twin of :class:`dlscale.frameworks.torch.models.googlenet.GoogLeNet`."""
    inputs = _inputs(input_size)
    x = _conv_block(inputs, "stem.0", 64, 7, 2, 3)
    x = TorchMaxPool(3, 2, ceil_mode=True, name="stem.1")(x)
    x = _conv_block(x, "stem.2", 64, 1)
    x = _conv_block(x, "stem.3", 192, 3, 1, 1)
    x = TorchMaxPool(3, 2, ceil_mode=True, name="stem.4")(x)
    x = _inception(x, "inception3.0", 64, 96, 128, 16, 32, 32)
    x = _inception(x, "inception3.1", 128, 128, 192, 32, 96, 64)
    x = TorchMaxPool(3, 2, ceil_mode=True, name="inception3.2")(x)
    for index, shape in enumerate(
        (
            (192, 96, 208, 16, 48, 64),
            (160, 112, 224, 24, 64, 64),
            (128, 128, 256, 24, 64, 64),
            (112, 144, 288, 32, 64, 64),
            (256, 160, 320, 32, 128, 128),
        )
    ):
        x = _inception(x, f"inception4.{index}", *shape)
    x = TorchMaxPool(2, 2, ceil_mode=True, name="inception4.5")(x)
    x = _inception(x, "inception5.0", 256, 160, 320, 32, 128, 128)
    x = _inception(x, "inception5.1", 384, 192, 384, 48, 128, 128)
    x = layers.GlobalAveragePooling2D(name="avgpool")(x)
    x = layers.Dropout(dropout, name="dropout")(x)
    fc = layers.Dense(num_classes, kernel_initializer=_trunc_normal(), name="fc")
    return keras.Model(inputs, fc(x), name="googlenet")
