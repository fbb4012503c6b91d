"""AlexNet, one-tower variant.

A. Krizhevsky, "One weird trick for parallelizing convolutional neural networks",
arXiv:1404.5997, 2014: the single-tower AlexNet (64, 192, 384, 256, 256 convolution filters) of
the original two-GPU network of Krizhevsky, Sutskever and Hinton, NIPS 2012, without local
response normalisation. The layout is torchvision's ``alexnet``, with an adaptive 6x6 average
pool before the classifier: 61,100,840 parameters at 1000 classes, about 0.71 G multiply-adds
per 224x224 image.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["AlexNet", "alexnet"]


class AlexNet(nn.Module):
    """Five convolutions with max pooling, then three fully connected layers with dropout."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def alexnet(num_classes: int, dropout: float = 0.5) -> nn.Module:
    """One-tower AlexNet, 61.1M parameters at 1000 classes."""
    return AlexNet(num_classes, dropout)
