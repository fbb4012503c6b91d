"""What a point trains on: the kind of sample, the unit its throughput is counted in, and the
task that owns the loss and the evaluation.

A data set declares its sample kind (:attr:`DatasetSpec.sample
<dlscale.contract.datasets.DatasetSpec.sample>`), a model the kind it takes
(:attr:`ModelSpec.sample <dlscale.contract.models.ModelSpec.sample>`); the two must agree. Each
kind has one task (:data:`KINDS`), written once per framework in that framework's folder
(``frameworks/<framework>/tasks.py``), and one unit: a sample of images is one image, a sample
of tokens is a sequence of ``block_size`` tokens with its next-token targets, counted as that
many tokens. Runs store samples per second with the unit and units per sample
(``sample_unit``, ``units_per_sample``); images/s and tokens/s are derived when read
(:func:`unit_rate`). A new sample kind is an entry here, a data set and a task per framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlscale.contract.errors import UnsupportedPoint

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig


@dataclass(frozen=True)
class SampleKind:
    """One kind of sample: its task, the unit of its throughput and how the unit is shown."""

    task: str
    """What is learned from it (``classification``, ``next-token``)."""
    unit: str
    """What one unit of work is (``image``, ``token``)."""
    rate: str
    """The unit's rate as tables show it (``img/s``, ``tok/s``)."""
    evaluation: str
    """What the held-out figures are (said by ``dlscale ls datasets`` and the docs)."""
    noun: str
    """What a sample is, in a sentence (``images``, ``token sequences``)."""


KINDS: dict[str, SampleKind] = {
    "image": SampleKind(
        task="classification",
        unit="image",
        rate="img/s",
        evaluation="top-1 accuracy and cross-entropy over the classes",
        noun="images",
    ),
    "tokens": SampleKind(
        task="next-token",
        unit="token",
        rate="tok/s",
        evaluation="next-token accuracy, held-out loss per token and its perplexity",
        noun="token sequences",
    ),
}
"""Every sample kind, by the name data sets and models declare."""

UNIT_RATES = {kind.unit: kind.rate for kind in KINDS.values()}
"""``image`` -> ``img/s``, ``token`` -> ``tok/s``."""


@dataclass(frozen=True)
class Workload:
    """A point's sample kind and its size in units."""

    kind: str
    units_per_sample: int
    """Tokens per sequence (its ``block_size``); 1 for an image."""

    @property
    def unit(self) -> str:
        return KINDS[self.kind].unit

    @property
    def task(self) -> str:
        return KINDS[self.kind].task


def workload_of(config: RunConfig) -> Workload:
    """The point's workload: its data set's sample kind, which its model must take (else
    :class:`UnsupportedPoint` naming both and the fix)."""
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.models import MODELS

    dataset, model = DATASETS.get(config.dataset), MODELS.get(config.model)
    if dataset.script_data:  # a script reads its own data: counted as it says (images)
        return Workload("image", 1)
    if model.sample != dataset.sample:
        fits = [n for n, d in DATASETS.listed() if d.sample == model.sample and not d.script_data]
        raise UnsupportedPoint(
            f"model {config.model} takes {KINDS[model.sample].noun} and dataset "
            f"{config.dataset} holds {KINDS[dataset.sample].noun}: choose --dataset from "
            f"{', '.join(fits) or 'none'}"
        )
    if dataset.sample == "tokens":
        if config.image_size is not None:  # it would cut the sequences, counted at block_size
            raise UnsupportedPoint(
                f"image_size is the side of an image, and dataset {config.dataset} holds "
                "tokens: a sequence's length is the model's block_size (--set block_size=N)"
            )
        return Workload("tokens", model.input_shape(config.options)[0])
    return Workload(dataset.sample, 1)


def check_task(config: RunConfig, framework: str) -> None:
    """The backend's framework has a loop for the point's task, and its optimizer and
    learning-rate schedule (:class:`UnsupportedPoint` naming what is missing and who has it)."""
    from dlscale.contract.backends import BACKENDS
    from dlscale.contract.frameworks import FRAMEWORKS

    task = workload_of(config).task
    if framework not in FRAMEWORKS:
        return
    spec = FRAMEWORKS.get(framework)
    for key, value, allowed in (
        ("optimizer", config.optimizer, spec.optimizers),
        ("lr_schedule", config.lr_schedule, spec.schedules),
    ):
        if value not in allowed:
            raise UnsupportedPoint(
                f"backend {config.backend} ({framework}) implements {key} = "
                f"{', '.join(allowed)}, not {value} yet; the torch backends have it"
            )
    if task in spec.tasks:
        return
    able = [
        name
        for name, b in BACKENDS.listed()
        if b.framework in FRAMEWORKS
        and task in FRAMEWORKS.get(b.framework).tasks
        and not b.runs_scripts
    ]
    raise UnsupportedPoint(
        f"backend {config.backend} ({framework}) has no {task} task for "
        f"{KINDS[workload_of(config).kind].noun} yet: choose --backend from {', '.join(able)}"
    )


def unit_rate(unit: str | None) -> str:
    """How a throughput in ``unit`` per second is labelled (``img/s`` for results stored
    before the unit was: they are images)."""
    return UNIT_RATES.get(unit or "image", f"{unit}/s")
