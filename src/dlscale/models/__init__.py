"""Model registry: light descriptors here, PyTorch builders imported only when a model is built."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dlscale.registry import Registry


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What the core knows about a model without importing a framework."""

    name: str
    description: str
    builder: str
    """``module:function`` taking ``num_classes`` and returning a ``torch.nn.Module``."""
    input_size: int
    """Native input height = width in pixels (32 for CIFAR nets, 224 for ImageNet nets)."""
    default_classes: int
    """Classes used with synthetic data (10 for CIFAR nets, 1000 for ImageNet nets)."""
    has_batchnorm: bool

    def build(self, num_classes: int) -> Any:
        module, _, function = self.builder.partition(":")
        return getattr(importlib.import_module(module), function)(num_classes)


MODELS: Registry[ModelSpec] = Registry("model")

for _depth in (20, 32, 44, 56, 110):
    MODELS.register(
        f"resnet{_depth}",
        ModelSpec(
            name=f"resnet{_depth}",
            description=f"CIFAR ResNet-{_depth} (He et al. 2016, 6n+2 layers, option-A shortcuts)",
            builder=f"dlscale.models.resnet_cifar:resnet{_depth}",
            input_size=32,
            default_classes=10,
            has_batchnorm=True,
        ),
    )
MODELS.register(
    "resnet50",
    ModelSpec(
        name="resnet50",
        description="ResNet-50 (He et al. 2016, bottleneck blocks, ImageNet)",
        builder="dlscale.models.resnet_imagenet:resnet50",
        input_size=224,
        default_classes=1000,
        has_batchnorm=True,
    ),
)
MODELS.register(
    "alexnet",
    ModelSpec(
        name="alexnet",
        description="AlexNet (Krizhevsky 2014 one-tower variant, ImageNet)",
        builder="dlscale.models.alexnet:alexnet",
        input_size=224,
        default_classes=1000,
        has_batchnorm=False,
    ),
)
MODELS.register(
    "googlenet",
    ModelSpec(
        name="googlenet",
        description="GoogLeNet / Inception v1 (Szegedy et al. 2015, BatchNorm, no aux heads)",
        builder="dlscale.models.googlenet:googlenet",
        input_size=224,
        default_classes=1000,
        has_batchnorm=True,
    ),
)
MODELS.register(
    "tiny",
    ModelSpec(
        name="tiny",
        description="Tiny CNN for tests (2 conv + 1 linear, no BatchNorm)",
        builder="dlscale.models.tiny:tiny",
        input_size=32,
        default_classes=10,
        has_batchnorm=False,
    ),
)
