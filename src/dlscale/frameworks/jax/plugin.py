"""JAX's entry in dlscale (the ``dlscale.plugins`` entry point ``jax``): jax-single, jax-dp and
the Flax twins of the models that have one. Importing it imports no framework."""

from __future__ import annotations

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.frameworks import FRAMEWORKS, FrameworkSpec
from dlscale.contract.models import TOKEN_MODELS, register_builder

INSTALL = "pip install 'dlscale[jax]' -c constraints.txt"
SMALL = ("tiny", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
"""Twins in :mod:`dlscale.frameworks.jax.models`."""
IMAGENET = ("resnet50", "alexnet", "googlenet")
"""Twins in :mod:`dlscale.frameworks.jax.imagenet_models`."""
TWINS = SMALL + IMAGENET + TOKEN_MODELS
"""Every model with a Flax twin (the GPTs': :mod:`dlscale.frameworks.jax.gpt`)."""
FLOAT64_TOO = ("float32", "float64")

FRAMEWORKS.register(
    "jax",
    FrameworkSpec(
        name="jax",
        module="jax",
        packages=("jax", "jaxlib", "flax"),
        install=INSTALL,
        builds_models=False,  # no user's own model yet: a point of one is refused before launch
        tasks=("classification", "next-token"),  # dlscale.frameworks.jax.tasks
        optimizers=("sgd", "adamw"),  # dlscale.frameworks.jax.steps
        schedules=("constant", "cosine"),
    ),
)
for _spec in (
    BackendSpec(
        name="jax-single",
        description="JAX training loop (jax.jit, Flax Linen twin), one process (the JAX baseline)",
        framework="jax",
        worker="dlscale.frameworks.jax.loop:run_single",
        max_workers=1,
        reference=True,
        devices=("cpu",),
        install=INSTALL,
        precisions=FLOAT64_TOO,
        resumable=True,
    ),
    BackendSpec(
        name="jax-dp",
        description="JAX data parallel: shard_map over one CPU device per process, gradients "
        "averaged by lax.pmean (an all-reduce over gloo)",
        framework="jax",
        worker="dlscale.frameworks.jax.loop:run_dp",
        collectives="dlscale.frameworks.jax.collectives:run",
        devices=("cpu",),
        install=INSTALL,
        ports=1,
        precisions=FLOAT64_TOO,
        resumable=True,
    ),
):
    BACKENDS.register(_spec.name, _spec)

for _model in SMALL:
    register_builder(_model, "jax", f"dlscale.frameworks.jax.models:{_model}")
for _model in IMAGENET:
    register_builder(_model, "jax", f"dlscale.frameworks.jax.imagenet_models:{_model}")
for _model in TOKEN_MODELS:
    register_builder(_model, "jax", "dlscale.frameworks.jax.gpt:gpt")
