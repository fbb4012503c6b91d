"""Model registry: light descriptors here, builders imported only when a model is built.

A model is registered once by name; each framework adds its builder (its twin: the same architecture
and parameter count in each engine) from its own folder, with :func:`register_builder` (the built-in
models' builders: each ``dlscale.frameworks.*.plugin``). ``dlscale ls models`` shows which
frameworks have each model; a backend whose framework has no builder for a model refuses that point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlscale.contract.options import Option
from dlscale.contract.registry import Registry, load_object


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What the core knows about a model without importing a framework."""

    name: str
    description: str
    builders: dict[str, str] = field(default_factory=dict)
    """Framework -> ``module:function`` taking ``num_classes`` and returning that framework's
    model (``torch``: a ``torch.nn.Module``)."""
    input_size: int
    """Native input height = width in pixels (32 for CIFAR nets, 224 for ImageNet nets); a
    token model's context (tokens per sample), unless its ``block_size`` option says."""
    default_classes: int
    """Classes used with synthetic data (10 for CIFAR nets, 1000 for ImageNet nets); a token
    model's vocabulary, unless its ``vocab_size`` option says."""
    has_batchnorm: bool
    sample: str = "image"
    """The kind of sample it takes (:data:`dlscale.contract.workload.KINDS`): a data set of
    another kind refuses the point."""
    options: tuple[Option, ...] = ()
    """The model's own settings (a GPT's dimensions), passed to every framework's builder as
    keyword arguments."""
    embedding_params: int | None = None
    """Of :attr:`params`, those of the token and position embeddings (a token model)."""
    sizer: str | None = None
    """``module:function(values) -> (params, embedding_params, forward_flops_per_sample)``
    given the model's resolved options: the sizes of a model whose options change them."""
    checker: str | None = None
    """``module:function(values)`` given the model's resolved options: raises
    :class:`~dlscale.contract.errors.UserError` for a combination no option alone can refuse
    (heads that do not divide the width)."""
    dropout: float | None = None
    """The dropout probability the model trains with (``None``: it has no dropout); a run's
    ``dropout`` key sets another, which every framework's builder takes as ``dropout=``."""

    params: int | None = None
    """Trainable parameters at ``default_classes`` (``None``: not declared). Declared as data
    so that ``dlscale ls models`` imports no framework; counted as
    ``dlscale.frameworks.torch.profile`` counts, and recounted against it by
    tests/unit/test_model_sizes.py."""
    forward_flops_per_sample: int | None = None
    """FLOPs (a multiply-add is 2) of one forward pass of one image at ``input_size``, counted
    and checked as :attr:`params` is."""

    builtin: bool = True
    """Registered by dlscale or a plug-in; ``False``: the user's own
    (:mod:`dlscale.contract.user_models`) or a library's
    (:mod:`dlscale.contract.model_libraries`), whose classes are found from its output."""
    requires: tuple[str, ...] = ()
    """Modules the workers' interpreter must import to build it, besides the framework
    (preflight checks them and says :attr:`install`)."""
    install: str = ""
    probe: str | None = None
    """``module:function(model_name) -> str`` run under the workers' interpreter before
    launch: ``""`` where the model can be built there, else why not, in one line."""

    def build(
        self,
        num_classes: int,
        framework: str = "torch",
        dropout: float | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        """The framework's twin for ``num_classes`` outputs (a vocabulary, for a token model),
        with the run's dropout and the model's own ``options`` (a run's resolved options: only
        those the model declares are passed)."""
        reference = self.builders.get(framework)
        if reference is None:
            raise KeyError(f"model {self.name} has no {framework} builder")
        own = {o.name: (options or {}).get(o.name, o.default) for o in self.options}
        own.pop("vocab_size", None)  # the vocabulary is num_classes
        return load_object(reference)(num_classes, **self.dropout_kwargs(dropout), **own)

    def check(self, options: Mapping[str, Any]) -> None:
        """The model's own check of its resolved options (none without a :attr:`checker`)."""
        if self.checker is not None:
            load_object(self.checker)({o.name: options[o.name] for o in self.options})

    def sized(self, options: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
        """``(params, embedding_params, forward_flops_per_sample)`` under a run's options: the
        declared ones, or a token model's counted from its dimensions."""
        if self.sizer is None:
            return self.params, self.embedding_params, self.forward_flops_per_sample
        values = {o.name: options.get(o.name, o.default) for o in self.options}
        return tuple(load_object(self.sizer)(values))

    def input_shape(self, options: Mapping[str, Any] | None = None) -> tuple[int, int]:
        """``(input_size, default_classes)`` under a run's options: a token model's
        ``block_size`` and ``vocab_size`` where it declares them."""
        values = {o.name: (options or {}).get(o.name, o.default) for o in self.options}
        return (
            int(values.get("block_size", self.input_size)),
            int(values.get("vocab_size", self.default_classes)),
        )

    def dropout_kwargs(self, dropout: float | None) -> dict[str, float]:
        """``{"dropout": p}`` for a builder when a run sets another dropout than the model's."""
        return {} if dropout is None or self.dropout is None else {"dropout": dropout}


def register_builder(model: str, framework: str, reference: str) -> None:
    """Add a framework's twin of a registered model (``module:function``)."""
    builders = MODELS.get(model).builders
    if framework in builders:
        raise ValueError(f"model {model} already has a {framework} builder")
    builders[framework] = reference


MODELS: Registry[ModelSpec] = Registry(
    "model",
    resolve="dlscale.contract.user_models:resolve_or_none",
    own="MODULE:FUNCTION, FILE.py:FUNCTION, LIBRARY:NAME as dlscale ls models lists, or "
    "--script FILE.py",
)
"""The built-in models and the plug-ins'; any other name is looked up as the user's own
(``MODULE:FUNCTION``, ``FILE.py:FUNCTION``, a script ``FILE.py``: :mod:`.user_models`)."""
PARAMS_FILE = "final_params.npz"
"""A run's trained parameters as numpy arrays under PyTorch's state-dict keys and layouts
(TensorFlow and MXNet runs; torch runs save ``final_params.pt``)."""

_CIFAR_RESNETS = {  # depth: (params, forward FLOPs per image), as torch counts them
    20: (269_722, 81_102_080),
    32: (464_154, 137_725_184),
    44: (658_586, 194_348_288),
    56: (853_018, 250_971_392),
    110: (1_727_962, 505_775_360),
}
for _depth, (_params, _flops) in _CIFAR_RESNETS.items():
    MODELS.register(
        f"resnet{_depth}",
        ModelSpec(
            name=f"resnet{_depth}",
            description=f"CIFAR ResNet-{_depth} (He et al. 2016, 6n+2 layers, option-A shortcuts)",
            input_size=32,
            default_classes=10,
            has_batchnorm=True,
            params=_params,
            forward_flops_per_sample=_flops,
        ),
    )
MODELS.register(
    "resnet50",
    ModelSpec(
        name="resnet50",
        description="ResNet-50 (He et al. 2016, bottleneck blocks, ImageNet)",
        input_size=224,
        default_classes=1000,
        has_batchnorm=True,
        params=25_557_032,
        forward_flops_per_sample=8_178_368_512,
    ),
)
MODELS.register(
    "alexnet",
    ModelSpec(
        name="alexnet",
        description="AlexNet (Krizhevsky 2014 one-tower variant, ImageNet)",
        input_size=224,
        default_classes=1000,
        has_batchnorm=False,
        dropout=0.5,
        params=61_100_840,
        forward_flops_per_sample=1_428_376_960,
    ),
)
MODELS.register(
    "googlenet",
    ModelSpec(
        name="googlenet",
        description="GoogLeNet / Inception v1 (Szegedy et al. 2015, BatchNorm, no aux heads)",
        input_size=224,
        default_classes=1000,
        has_batchnorm=True,
        dropout=0.2,
        params=6_624_904,
        forward_flops_per_sample=2_996_752_384,
    ),
)
MODELS.register(
    "tiny",
    ModelSpec(
        name="tiny",
        description="Tiny CNN for tests (2 conv + 1 linear, no BatchNorm)",
        input_size=32,
        default_classes=10,
        has_batchnorm=False,
        params=3_962,
        forward_flops_per_sample=1_037_312,
    ),
)

BUILT_IN = (
    *(f"resnet{depth}" for depth in (20, 32, 44, 56, 110)),
    "resnet50",
    "alexnet",
    "googlenet",
    "tiny",
)
"""The models registered above (each built-in framework builds every one of them)."""


def _register_gpts() -> None:
    from dlscale.contract.gpt import SIZES, dimensions, forward_flops, options_of, parameter_counts

    for size, (description, _) in SIZES.items():
        options = options_of(size)
        values = dimensions({}, size)
        params, embeddings = parameter_counts(values, values["vocab_size"])
        MODELS.register(
            size,
            ModelSpec(
                name=size,
                description=description,
                input_size=values["block_size"],
                default_classes=values["vocab_size"],
                has_batchnorm=False,
                dropout=0.0,
                sample="tokens",
                options=options,
                params=params,
                embedding_params=embeddings,
                forward_flops_per_sample=forward_flops(values, values["vocab_size"]),
                checker="dlscale.contract.gpt:check",
                sizer="dlscale.contract.gpt:sizes",
            ),
        )


_register_gpts()
TOKEN_MODELS = ("gpt", "gpt-mini", "gpt-nano", "nanogpt-char", "gpt2-small")
"""The GPTs registered above (:mod:`dlscale.contract.gpt`): twins where a framework has one."""
