"""Model registry: light descriptors here, builders imported only when a model is built.

A model is registered once by name, with a builder per framework (its twins: the same
architecture and parameter count in each engine). ``dlscale ls models`` shows which frameworks
have each model; a backend whose framework has no builder for a model refuses that point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlscale.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What the core knows about a model without importing a framework."""

    name: str
    description: str
    builders: dict[str, str] = field(default_factory=dict)
    """Framework -> ``module:function`` taking ``num_classes`` and returning that framework's
    model (``torch``: a ``torch.nn.Module``)."""
    input_size: int
    """Native input height = width in pixels (32 for CIFAR nets, 224 for ImageNet nets)."""
    default_classes: int
    """Classes used with synthetic data (10 for CIFAR nets, 1000 for ImageNet nets)."""
    has_batchnorm: bool

    def build(self, num_classes: int, framework: str = "torch") -> Any:
        reference = self.builders.get(framework)
        if reference is None:
            raise KeyError(f"model {self.name} has no {framework} builder")
        return load_object(reference)(num_classes)


def register_builder(model: str, framework: str, reference: str) -> None:
    """Add a framework's twin of a registered model (``module:function``)."""
    builders = MODELS.get(model).builders
    if framework in builders:
        raise ValueError(f"model {model} already has a {framework} builder")
    builders[framework] = reference


MODELS: Registry[ModelSpec] = Registry("model")
PARAMS_FILE = "final_params.npz"
"""A run's trained parameters as numpy arrays under PyTorch's state-dict keys and layouts
(TensorFlow and MXNet runs; torch runs save ``final_params.pt``)."""
_KERAS = "dlscale.frameworks.tensorflow.models"
_GLUON = "dlscale.frameworks.mxnet.models"

for _depth in (20, 32, 44, 56, 110):
    MODELS.register(
        f"resnet{_depth}",
        ModelSpec(
            name=f"resnet{_depth}",
            description=f"CIFAR ResNet-{_depth} (He et al. 2016, 6n+2 layers, option-A shortcuts)",
            builders={
                "torch": f"dlscale.frameworks.torch.models.resnet_cifar:resnet{_depth}",
                "tensorflow": f"{_KERAS}:resnet{_depth}",
                "mxnet": f"{_GLUON}:resnet{_depth}",
            },
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
        builders={
            "torch": "dlscale.frameworks.torch.models.resnet_imagenet:resnet50",
            "tensorflow": f"{_KERAS}:resnet50",
            "mxnet": f"{_GLUON}:resnet50",
        },
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
        builders={
            "torch": "dlscale.frameworks.torch.models.alexnet:alexnet",
            "tensorflow": f"{_KERAS}:alexnet",
            "mxnet": f"{_GLUON}:alexnet",
        },
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
        builders={
            "torch": "dlscale.frameworks.torch.models.googlenet:googlenet",
            "tensorflow": f"{_KERAS}:googlenet",
            "mxnet": f"{_GLUON}:googlenet",
        },
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
        builders={
            "torch": "dlscale.frameworks.torch.models.tiny:tiny",
            "tensorflow": f"{_KERAS}:tiny",
            "mxnet": f"{_GLUON}:tiny",
        },
        input_size=32,
        default_classes=10,
        has_batchnorm=False,
    ),
)
