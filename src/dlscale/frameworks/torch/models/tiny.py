"""A tiny convolutional network for fast tests.

Two 3x3 convolutions (3->8, 8->16) with ReLU, a 2x2 max pool between them, an adaptive 4x4
average pool and one linear layer. It has no BatchNorm and no dropout, so its output for one
sample depends on that sample alone, which equivalence tests across batch splits rely on.
Works for any input of at least 8x8 pixels.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TinyNet", "tiny"]


class TinyNet(nn.Module):
    """conv(3->8) + ReLU + maxpool, conv(8->16) + ReLU + adaptive avg pool 4x4, linear."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


def tiny(num_classes: int) -> nn.Module:
    """The tiny test network."""
    return TinyNet(num_classes)
