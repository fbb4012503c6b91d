"""The checks of a point's core values and of its fit with its backend and model, made when
a :class:`~dlscale.contract.run_config.RunConfig` is built: each refusal one line naming the
key, what is allowed and, where one exists, the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import TooManyWorkers, UnsupportedPoint, UserError
from dlscale.contract.gpu_peaks import check_peak_tflops
from dlscale.contract.models import ModelSpec
from dlscale.contract.numbers import finite_number
from dlscale.contract.shapes import MAX_QUANTITY, Shape, number
from dlscale.contract.text import excerpt
from dlscale.contract.user_models import ScriptModelSpec

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

ALLOCATORS = ("system", "glibc-tuned", "jemalloc", "tcmalloc")
"""Values of the ``allocator`` key (what each sets: :mod:`dlscale.runtime.allocator`)."""


PRECISIONS = ("float32", "float64")
OPTIMIZERS = ("sgd", "adamw")
LR_SCHEDULES = ("constant", "cosine")
EVALUATE = ("end", "window")

WHOLE_KEYS = {
    "workers": 1, "batch_size": 1, "steps": 1, "windows": 1,
    "warmup_steps": 0, "comm_probe_steps": 0, "seed": 0, "repeat_id": 0,
    "epochs": 1, "threads_per_worker": 1, "image_size": 1, "lr_warmup_steps": 0,
}  # fmt: skip
"""The core keys that are whole numbers, each with its least value (at most
:data:`~dlscale.contract.shapes.MAX_QUANTITY`): checked when a config is built and when a
stored one is read (:data:`STORED_CONFIG`), so a result no config could have made
(``batch_size = 0.5``) is one damaged file, not a profile that fails every reader."""
OPTIONAL_KEYS = (
    "epochs", "threads_per_worker", "image_size", "target_accuracy", "dropout", "target_loss",
    "peak_tflops",
)  # fmt: skip
"""Core keys that may be unset (``None``)."""
POSITIVE_KEYS = ("lr", "timeout_s")
NON_NEGATIVE_KEYS = ("momentum", "weight_decay")

STORED_CONFIG: dict[str, Shape] = {
    **{name: Shape("count", low=low, nullable=name in OPTIONAL_KEYS or name == "steps")
       for name, low in WHOLE_KEYS.items()},
    **{name: Shape("number", positive=True) for name in POSITIVE_KEYS},
    **{name: number() for name in NON_NEGATIVE_KEYS},
    "target_accuracy": Shape("number", high=1.0, positive=True),
    "dropout": Shape("number", high=1.0),
    "target_loss": Shape("number", positive=True),
    "peak_tflops": Shape("number", positive=True),
}  # fmt: skip
"""What a stored result's core config keys may be (``steps`` unset in epoch runs of earlier
schemas): the bounds of :func:`check_core_values`, which every config was built under."""


def check_core_values(config: RunConfig) -> None:
    """Each core key's type and range (the choices, counts, and finite numbers)."""
    check_choice("scaling", config.scaling, ("weak", "strong"))
    check_choice("device", config.device, ("cpu", "cuda"))
    check_choice("lr_scaling", config.lr_scaling, ("none", "linear"))
    check_choice("allocator", config.allocator, ALLOCATORS)
    check_choice("precision", config.precision, PRECISIONS)
    check_choice("optimizer", config.optimizer, OPTIMIZERS)
    check_choice("lr_schedule", config.lr_schedule, LR_SCHEDULES)
    check_choice("evaluate", config.evaluate, EVALUATE)
    if config.target_loss is not None:
        check_positive("target_loss", config.target_loss)
    if config.target_accuracy is not None:
        check_finite("target_accuracy", config.target_accuracy)
        if not 0 < config.target_accuracy <= 1:
            raise UserError(
                f"target_accuracy must be in (0, 1], got {config.target_accuracy} "
                "(write 0.9 for 90%)"
            )
    if config.peak_tflops is not None:
        check_peak_tflops(config.peak_tflops)
    if config.lr_warmup_steps and config.lr_schedule != "cosine":
        raise UserError(
            f"lr_warmup_steps = {config.lr_warmup_steps} needs lr_schedule = cosine "
            "(constant has no warm-up)"
        )
    for name, low in WHOLE_KEYS.items():
        if name not in OPTIONAL_KEYS or getattr(config, name) is not None:
            check_min(name, getattr(config, name), low)
    for name in POSITIVE_KEYS:
        check_positive(name, getattr(config, name))
    for name in NON_NEGATIVE_KEYS:
        check_finite(name, getattr(config, name), minimum=0.0)


def check_dropout(config: RunConfig, model: ModelSpec) -> bool:
    """A set ``dropout`` fits the model; ``True`` where it is what the model does anyway (the
    config then holds none)."""
    assert config.dropout is not None
    check_finite("dropout", config.dropout, minimum=0.0)
    if config.dropout >= 1:
        raise UserError(f"dropout must be below 1, got {excerpt(config.dropout)} (0.5: half)")
    if model.dropout is None and config.dropout > 0:
        raise UnsupportedPoint(f"model {config.model} has no dropout to set")
    return model.dropout in (None, config.dropout)


def check_engine_fits(config: RunConfig, backend: BackendSpec, model: ModelSpec) -> None:
    """The point's backend can train its model (or run its script), with its worker count,
    on its device, and time its loader alone when ``loader_only`` asks."""
    if _checks_scripts(config, backend, model):
        pass
    elif backend.framework not in model.builders and not model.builtin:
        others = [
            name
            for name, b in BACKENDS.listed()
            if b.framework in model.builders and not b.runs_scripts
        ]
        raise UnsupportedPoint(
            f"model {config.model} is a {' or '.join(model.builders)} model, which "
            f"{backend.framework}'s backends cannot train: choose --backend from "
            f"{', '.join(others)}"
        )
    elif backend.framework not in model.builders:
        raise UnsupportedPoint(
            f"model {config.model} has no {backend.framework} implementation "
            f"(it has: {', '.join(model.builders)}); backend {config.backend} needs one"
        )
    if backend.max_workers is not None and config.workers > backend.max_workers:
        raise TooManyWorkers(
            f"backend {config.backend} runs at most {backend.max_workers} worker(s), "
            f"got workers={config.workers}"
        )
    if config.device not in backend.devices:
        raise UnsupportedPoint(f"backend {config.backend} does not run on {config.device}")
    if config.precision not in backend.precisions:
        able = [name for name, b in BACKENDS.listed() if config.precision in b.precisions]
        why = f": {backend.precision_note}" if backend.precision_note else ""
        raise UnsupportedPoint(
            f"backend {config.backend} trains in {', '.join(backend.precisions)} only, not "
            f"precision = {config.precision}{why}; {', '.join(able) or 'no backend'} "
            f"can train in {config.precision}"
        )
    if backend.check is not None:
        backend.check(config)
    if config.loader_only and not backend.loader_only:
        raise UnsupportedPoint(
            f"backend {config.backend} reads its own batches inside the framework, so "
            "loader_only cannot time them alone; use its custom-loop twin"
        )


def _checks_scripts(config: RunConfig, backend: BackendSpec, model: ModelSpec) -> bool:
    """Whether the point runs a training script; a script runs only under a script backend,
    on its own data, and a script backend runs nothing else."""
    script = isinstance(model, ScriptModelSpec)
    if backend.runs_scripts != script:
        if script:
            raise UnsupportedPoint(
                f"{config.model} is a training script: run it with a script backend "
                "(dlscale run --script FILE.py; --backend torch-script or horovod-script)"
            )
        raise UnsupportedPoint(
            f"backend {config.backend} runs training scripts (dlscale run --script FILE.py), "
            f"not model {config.model}"
        )
    if script and config.scaling == "strong":
        raise UserError(
            "a training script's batch is its own (batch_size: what one process trains a "
            "step), so it scales weakly only; drop scaling = strong"
        )
    if script != DATASETS.get(config.dataset).script_data:
        raise UserError(
            "a training script reads its own data (dataset own), and only a script does "
            f"(model {config.model}, dataset {config.dataset})"
        )
    return script


def refuse_float64_with(config: RunConfig, setting: str, value: object, none: object) -> None:
    """A plug-in's :attr:`~dlscale.contract.backends.BackendSpec.check` of a setting that
    sends or computes the gradients in fewer bits (``compression = fp16``, ``amp = bf16``):
    refused beside ``precision = float64``, whose proof that two engines take the same steps
    it would void (the run would say float64 and move 16 bits)."""
    if config.precision == "float64" and value != none:
        raise UnsupportedPoint(
            f"precision = float64 and {setting} = {value} cannot go together: "
            f"{setting} would take the gradients below float64's bits; set {setting} = "
            f"{none} for float64, or precision = float32"
        )


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}; got {excerpt(value)}")


def check_min(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {excerpt(value)}")
    if value > MAX_QUANTITY:
        raise UserError(f"{name} must be at most {MAX_QUANTITY:g}, got {excerpt(value)}")


def check_finite(name: str, value: object, minimum: float | None = None) -> None:
    if not finite_number(value, high=MAX_QUANTITY):
        if finite_number(value):
            raise UserError(f"{name} must be at most {MAX_QUANTITY:g}, got {excerpt(value)}")
        raise UserError(f"{name} must be a finite number, got {excerpt(value)}")
    if minimum is not None and value < minimum:
        raise UserError(f"{name} must be >= {minimum:g}, got {excerpt(value)}")


def check_positive(name: str, value: object) -> None:
    check_finite(name, value)
    assert isinstance(value, int | float)
    if value <= 0:
        raise UserError(f"{name} must be > 0, got {excerpt(value)}")
