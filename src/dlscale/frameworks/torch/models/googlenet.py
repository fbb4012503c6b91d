"""GoogLeNet (Inception v1) with BatchNorm, without auxiliary classifiers.

C. Szegedy et al., "Going Deeper with Convolutions", CVPR 2015, Table 1: a stem of 7x7/2,
1x1 and 3x3 convolutions with max pools, nine Inception modules (3a-b, 4a-e, 5a-b) of four
parallel branches (1x1; 1x1 -> 3x3; 1x1 -> "5x5"; 3x3 max pool -> 1x1) concatenated along the
channels, then global average pooling, dropout and a linear classifier.

The layout follows torchvision's ``googlenet`` with ``aux_logits=False``: every convolution is
followed by BatchNorm (Ioffe and Szegedy 2015) and ReLU, and the "5x5" branch uses a 3x3
convolution (a known quirk of the reference port, kept for comparable numbers). About 6.62M
parameters at 1000 classes. The pooling is adaptive, so any input of at least 32x32 works.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GoogLeNet", "Inception", "googlenet"]


class ConvBlock(nn.Module):
    """Convolution without bias, BatchNorm, ReLU."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    """Four parallel branches concatenated along the channels (Szegedy et al. 2015, Fig. 2b)."""

    def __init__(
        self,
        in_channels: int,
        ch1x1: int,
        ch3x3red: int,
        ch3x3: int,
        ch5x5red: int,
        ch5x5: int,
        pool_proj: int,
    ) -> None:
        super().__init__()
        self.branch1 = ConvBlock(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(
            ConvBlock(in_channels, ch3x3red, kernel_size=1),
            ConvBlock(ch3x3red, ch3x3, kernel_size=3, padding=1),
        )
        self.branch3 = nn.Sequential(
            ConvBlock(in_channels, ch5x5red, kernel_size=1),
            ConvBlock(ch5x5red, ch5x5, kernel_size=3, padding=1),
        )
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
            ConvBlock(in_channels, pool_proj, kernel_size=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branches = (self.branch1, self.branch2, self.branch3, self.branch4)
        return torch.cat([branch(x) for branch in branches], 1)


class GoogLeNet(nn.Module):
    """Inception v1 (Szegedy et al. 2015, Table 1) with BatchNorm and no auxiliary heads."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            ConvBlock(3, 64, kernel_size=7, stride=2, padding=3),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
            ConvBlock(64, 64, kernel_size=1),
            ConvBlock(64, 192, kernel_size=3, padding=1),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        self.inception3 = nn.Sequential(
            Inception(192, 64, 96, 128, 16, 32, 32),
            Inception(256, 128, 128, 192, 32, 96, 64),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        self.inception4 = nn.Sequential(
            Inception(480, 192, 96, 208, 16, 48, 64),
            Inception(512, 160, 112, 224, 24, 64, 64),
            Inception(512, 128, 128, 256, 24, 64, 64),
            Inception(512, 112, 144, 288, 32, 64, 64),
            Inception(528, 256, 160, 320, 32, 128, 128),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
        )
        self.inception5 = nn.Sequential(
            Inception(832, 256, 160, 320, 32, 128, 128),
            Inception(832, 384, 192, 384, 48, 128, 128),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.trunc_normal_(module.weight, mean=0.0, std=0.01, a=-2, b=2)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inception5(self.inception4(self.inception3(self.stem(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


def googlenet(num_classes: int, dropout: float = 0.2) -> nn.Module:
    """GoogLeNet with BatchNorm, no auxiliary classifiers: about 6.62M parameters at 1000."""
    return GoogLeNet(num_classes, dropout)
