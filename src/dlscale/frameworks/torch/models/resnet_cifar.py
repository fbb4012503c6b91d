"""CIFAR-10 ResNets of He et al. 2016, section 4.2.

K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
section 4.2 ("CIFAR-10 and Analysis"): a 3x3 convolution with 16 filters, then three stages of
``n`` basic blocks (two 3x3 convolutions each) with 16, 32 and 64 filters on 32x32, 16x16 and
8x8 feature maps, then global average pooling and a fully connected layer: ``6n + 2`` weighted
layers. Shortcuts are option A: identity, with stride-2 subsampling and zero-padded extra
channels where the shape changes, so shortcuts add no parameters. Convolutions are initialised
with Kaiming normal (He et al. 2015), as the paper states.

Parameter counts at 10 classes (paper, Table 6): ResNet-20 0.27M, -32 0.46M, -44 0.66M,
-56 0.85M, -110 1.7M.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["CifarResNet", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]


class ShortcutA(nn.Module):
    """Option-A shortcut: subsample by 2 in space and zero-pad the new channels."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.extra = out_channels - in_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.extra:
            before = self.extra // 2
            x = F.pad(x, (0, 0, 0, 0, before, self.extra - before))
        return x


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and ReLU, plus an option-A identity shortcut."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module
        if stride != 1 or in_channels != out_channels:
            self.shortcut = ShortcutA(in_channels, out_channels, stride)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet of depth ``6n + 2`` for 32x32 inputs (He et al. 2016, section 4.2)."""

    def __init__(self, depth: int, num_classes: int = 10) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"CIFAR ResNet depth must be 6n+2 with n >= 1, got {depth}")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, n, stride=1)
        self.layer2 = self._stage(16, 32, n, stride=2)
        self.layer3 = self._stage(32, 64, n, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @staticmethod
    def _stage(in_channels: int, out_channels: int, blocks: int, stride: int) -> nn.Sequential:
        layers = [BasicBlock(in_channels, out_channels, stride)]
        layers += [BasicBlock(out_channels, out_channels) for _ in range(blocks - 1)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def resnet20(num_classes: int) -> nn.Module:
    """ResNet-20 (n = 3), 0.27M parameters at 10 classes."""
    return CifarResNet(20, num_classes)


def resnet32(num_classes: int) -> nn.Module:
    """ResNet-32 (n = 5), 0.46M parameters at 10 classes."""
    return CifarResNet(32, num_classes)


def resnet44(num_classes: int) -> nn.Module:
    """ResNet-44 (n = 7), 0.66M parameters at 10 classes."""
    return CifarResNet(44, num_classes)


def resnet56(num_classes: int) -> nn.Module:
    """ResNet-56 (n = 9), 0.85M parameters at 10 classes."""
    return CifarResNet(56, num_classes)


def resnet110(num_classes: int) -> nn.Module:
    """ResNet-110 (n = 18), 1.7M parameters at 10 classes."""
    return CifarResNet(110, num_classes)
