"""Gluon twins of the registry's models (MXNet 1.9, NCHW like PyTorch).

Each twin is built from blocks whose attribute names are the PyTorch modules' names, so a
parameter's structural name (``Block._collect_params_with_prefix``: ``layer1.0.conv1.weight``)
is the PyTorch state-dict key, BatchNorm's ``gamma``/``beta`` standing for ``weight``/``bias``
(:mod:`dlscale.frameworks.mxnet.transfer` copies by those names). Layouts are PyTorch's: a
convolution's weight is (out, in, kh, kw), a dense layer's (out, in), and ``Dense`` flattens
NCHW in PyTorch's order. BatchNorm uses PyTorch's epsilon (1e-5) and momentum (Gluon's 0.9
is PyTorch's 0.1). Shapes are given in full (``in_channels``, ``in_units``): no deferred
initialization, so the PyTorch weights can be set before the first forward.

The twins are hybridized by the engine (one symbolic graph per step, MXNet's fast path).
Imported only in the MXNet environment.
"""

from __future__ import annotations

from typing import Any

from mxnet.gluon import HybridBlock, nn

__all__ = [
    "alexnet",
    "googlenet",
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet50",
    "resnet56",
    "resnet110",
    "tiny",
]

BN = {"momentum": 0.9, "epsilon": 1e-5}
"""PyTorch's BatchNorm2d defaults in Gluon's terms."""


class ShortcutA(HybridBlock):
    """Option-A shortcut: subsample by 2 in space and zero-pad the new channels (no weights)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.before = (out_channels - in_channels) // 2
        self.after = out_channels - in_channels - self.before

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        if self.stride != 1:
            x = F.slice(x, begin=(None, None, None, None), end=(None, None, None, None),
                        step=(1, 1, self.stride, self.stride))  # fmt: skip
        if self.before or self.after:
            # zeros shaped like the first channels of x (before, after <= its channels)
            zeros_before = F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=self.before))
            zeros_after = F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=self.after))
            x = F.concat(zeros_before, x, zeros_after, dim=1)
        return x


class BasicBlock(HybridBlock):
    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(out_channels, 3, stride, 1, use_bias=False, in_channels=in_channels)
        self.bn1 = nn.BatchNorm(in_channels=out_channels, **BN)
        self.conv2 = nn.Conv2D(out_channels, 3, 1, 1, use_bias=False, in_channels=out_channels)
        self.bn2 = nn.BatchNorm(in_channels=out_channels, **BN)
        self.shortcut = (
            ShortcutA(in_channels, out_channels, stride)
            if stride != 1 or in_channels != out_channels
            else None
        )

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))


class CifarResNet(HybridBlock):
    """ResNet of depth ``6n + 2`` (:mod:`dlscale.frameworks.torch.models.resnet_cifar`, its PyTorch
    twin)."""

    def __init__(self, depth: int, num_classes: int) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 with n >= 1, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2D(16, 3, 1, 1, use_bias=False, in_channels=3)
        self.bn1 = nn.BatchNorm(in_channels=16, **BN)
        self.layer1 = self._stage(16, 16, n, 1)
        self.layer2 = self._stage(16, 32, n, 2)
        self.layer3 = self._stage(32, 64, n, 2)
        self.fc = nn.Dense(num_classes, in_units=64)

    @staticmethod
    def _stage(in_channels: int, out_channels: int, blocks: int, stride: int) -> Any:
        stage = nn.HybridSequential()
        stage.add(BasicBlock(in_channels, out_channels, stride))
        for _ in range(blocks - 1):
            stage.add(BasicBlock(out_channels, out_channels))
        return stage

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(F.mean(x, axis=(2, 3)))


class TinyNet(HybridBlock):
    """:mod:`dlscale.frameworks.torch.models.tiny`'s twin: conv, ReLU, max pool, conv, ReLU,
    adaptive avg pool 4x4, dense; ``features.0`` and ``features.3`` as in the PyTorch Sequential."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.HybridSequential()
        self.features.add(
            nn.Conv2D(8, 3, padding=1, in_channels=3),
            nn.Activation("relu"),
            nn.MaxPool2D(2),
            nn.Conv2D(16, 3, padding=1, in_channels=8),
            nn.Activation("relu"),
        )
        self.fc = nn.Dense(num_classes, in_units=16 * 4 * 4)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = F.contrib.AdaptiveAvgPooling2D(self.features(x), output_size=4)
        return self.fc(x)


class Bottleneck(HybridBlock):
    """:class:`dlscale.frameworks.torch.models.resnet_imagenet.Bottleneck`: 1x1, 3x3 with the
    stride, 1x1 x4."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2D(width, 1, use_bias=False, in_channels=in_channels)
        self.bn1 = nn.BatchNorm(in_channels=width, **BN)
        self.conv2 = nn.Conv2D(width, 3, stride, 1, use_bias=False, in_channels=width)
        self.bn2 = nn.BatchNorm(in_channels=width, **BN)
        self.conv3 = nn.Conv2D(out_channels, 1, use_bias=False, in_channels=width)
        self.bn3 = nn.BatchNorm(in_channels=out_channels, **BN)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.HybridSequential()
            self.downsample.add(
                nn.Conv2D(out_channels, 1, stride, use_bias=False, in_channels=in_channels),
                nn.BatchNorm(in_channels=out_channels, **BN),
            )

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(HybridBlock):
    """:mod:`dlscale.frameworks.torch.models.resnet_imagenet` (v1.5: the stride on the 3x3)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2D(64, 7, 2, 3, use_bias=False, in_channels=3)
        self.bn1 = nn.BatchNorm(in_channels=64, **BN)
        self.maxpool = nn.MaxPool2D(3, 2, 1)
        in_channels = 64
        stages = []
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = nn.HybridSequential()
            for i in range(blocks):
                stage.add(Bottleneck(in_channels, width, stride if i == 0 else 1))
                in_channels = width * Bottleneck.expansion
            stages.append(stage)
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Dense(num_classes, in_units=in_channels)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.mean(x, axis=(2, 3)))


class AlexNet(HybridBlock):
    """:mod:`dlscale.frameworks.torch.models.alexnet` (one tower, adaptive 6x6 average pool,
    dropout)."""

    def __init__(self, num_classes: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.HybridSequential()
        relu = "relu"
        self.features.add(
            nn.Conv2D(64, 11, 4, 2, in_channels=3),
            nn.Activation(relu),
            nn.MaxPool2D(3, 2),
            nn.Conv2D(192, 5, padding=2, in_channels=64),
            nn.Activation(relu),
            nn.MaxPool2D(3, 2),
            nn.Conv2D(384, 3, padding=1, in_channels=192),
            nn.Activation(relu),
            nn.Conv2D(256, 3, padding=1, in_channels=384),
            nn.Activation(relu),
            nn.Conv2D(256, 3, padding=1, in_channels=256),
            nn.Activation(relu),
            nn.MaxPool2D(3, 2),
        )
        self.classifier = nn.HybridSequential()
        self.classifier.add(
            nn.Dropout(dropout),
            nn.Dense(4096, in_units=256 * 6 * 6),
            nn.Activation(relu),
            nn.Dropout(dropout),
            nn.Dense(4096, in_units=4096),
            nn.Activation(relu),
            nn.Dense(num_classes, in_units=4096),
        )

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = F.contrib.AdaptiveAvgPooling2D(self.features(x), output_size=6)
        return self.classifier(x)


class ConvBlock(HybridBlock):
    """Convolution without bias, BatchNorm (epsilon 1e-3), ReLU."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel: int, stride: int = 1, padding: int = 0
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2D(
            out_channels, kernel, stride, padding, use_bias=False, in_channels=in_channels
        )
        self.bn = nn.BatchNorm(in_channels=out_channels, momentum=0.9, epsilon=1e-3)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.relu(self.bn(self.conv(x)))


def _chain(*blocks: Any) -> Any:
    sequence = nn.HybridSequential()
    sequence.add(*blocks)
    return sequence


class Inception(HybridBlock):
    """:class:`dlscale.frameworks.torch.models.googlenet.Inception`: four branches concatenated."""

    def __init__(
        self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, pool_proj: int
    ) -> None:
        super().__init__()
        self.branch1 = ConvBlock(cin, c1, 1)
        self.branch2 = _chain(ConvBlock(cin, c3r, 1), ConvBlock(c3r, c3, 3, padding=1))
        self.branch3 = _chain(ConvBlock(cin, c5r, 1), ConvBlock(c5r, c5, 3, padding=1))
        self.branch4 = _chain(nn.MaxPool2D(3, 1, 1, ceil_mode=True), ConvBlock(cin, pool_proj, 1))

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        branches = (self.branch1, self.branch2, self.branch3, self.branch4)
        return F.concat(*(branch(x) for branch in branches), dim=1)


class GoogLeNet(HybridBlock):
    """:mod:`dlscale.frameworks.torch.models.googlenet` (BatchNorm, no auxiliary heads, dropout
    before fc)."""

    def __init__(self, num_classes: int, dropout: float = 0.2) -> None:
        super().__init__()
        self.stem = _chain(
            ConvBlock(3, 64, 7, 2, 3),
            nn.MaxPool2D(3, 2, ceil_mode=True),
            ConvBlock(64, 64, 1),
            ConvBlock(64, 192, 3, padding=1),
            nn.MaxPool2D(3, 2, ceil_mode=True),
        )
        self.inception3 = _chain(
            Inception(192, 64, 96, 128, 16, 32, 32),
            Inception(256, 128, 128, 192, 32, 96, 64),
            nn.MaxPool2D(3, 2, ceil_mode=True),
        )
        self.inception4 = _chain(
            Inception(480, 192, 96, 208, 16, 48, 64),
            Inception(512, 160, 112, 224, 24, 64, 64),
            Inception(512, 128, 128, 256, 24, 64, 64),
            Inception(512, 112, 144, 288, 32, 64, 64),
            Inception(528, 256, 160, 320, 32, 128, 128),
            nn.MaxPool2D(2, 2, ceil_mode=True),
        )
        self.inception5 = _chain(
            Inception(832, 256, 160, 320, 32, 128, 128),
            Inception(832, 384, 192, 384, 48, 128, 128),
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Dense(num_classes, in_units=1024)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        x = self.inception5(self.inception4(self.inception3(self.stem(x))))
        return self.fc(self.dropout(F.mean(x, axis=(2, 3))))


def alexnet(num_classes: int, dropout: float = 0.5) -> AlexNet:
    return AlexNet(num_classes, dropout)


def googlenet(num_classes: int, dropout: float = 0.2) -> GoogLeNet:
    return GoogLeNet(num_classes, dropout)


def resnet50(num_classes: int) -> ResNet50:
    return ResNet50(num_classes)


def resnet20(num_classes: int) -> CifarResNet:
    return CifarResNet(20, num_classes)


def resnet32(num_classes: int) -> CifarResNet:
    return CifarResNet(32, num_classes)


def resnet44(num_classes: int) -> CifarResNet:
    return CifarResNet(44, num_classes)


def resnet56(num_classes: int) -> CifarResNet:
    return CifarResNet(56, num_classes)


def resnet110(num_classes: int) -> CifarResNet:
    return CifarResNet(110, num_classes)


def tiny(num_classes: int) -> TinyNet:
    return TinyNet(num_classes)
