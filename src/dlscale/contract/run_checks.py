"""The checks of a point's core values and of its fit with its backend and model, made when
a :class:`~dlscale.contract.run_config.RunConfig` is built: each refusal one line naming the
key, what is allowed and, where one exists, the fix."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dlscale.contract.backends import BACKENDS, BackendSpec
from dlscale.contract.datasets import DATASETS
from dlscale.contract.errors import TooManyWorkers, UnsupportedPoint, UserError
from dlscale.contract.models import ModelSpec
from dlscale.contract.text import excerpt
from dlscale.contract.user_models import ScriptModelSpec

if TYPE_CHECKING:
    from dlscale.contract.run_config import RunConfig

ALLOCATORS = ("system", "glibc-tuned", "jemalloc", "tcmalloc")
"""Values of the ``allocator`` key (what each sets: :mod:`dlscale.runtime.allocator`)."""


PRECISIONS = ("float32", "float64")


def check_core_values(config: RunConfig) -> None:
    """Each core key's type and range (the choices, counts, and finite numbers)."""
    check_choice("scaling", config.scaling, ("weak", "strong"))
    check_choice("device", config.device, ("cpu", "cuda"))
    check_choice("lr_scaling", config.lr_scaling, ("none", "linear"))
    check_choice("allocator", config.allocator, ALLOCATORS)
    check_choice("precision", config.precision, PRECISIONS)
    for name in ("workers", "batch_size", "steps", "windows"):
        check_min(name, getattr(config, name), 1)
    for name in ("warmup_steps", "comm_probe_steps", "seed", "repeat_id"):
        check_min(name, getattr(config, name), 0)
    for name in ("epochs", "threads_per_worker", "image_size"):
        if getattr(config, name) is not None:
            check_min(name, getattr(config, name), 1)
    for name in ("lr", "timeout_s"):
        check_positive(name, getattr(config, name))
    for name in ("momentum", "weight_decay"):
        check_finite(name, getattr(config, name), minimum=0.0)


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


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}; got {excerpt(value)}")


def check_min(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {excerpt(value)}")


def check_finite(name: str, value: object, minimum: float | None = None) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {excerpt(value)}")
    if minimum is not None and value < minimum:
        raise UserError(f"{name} must be >= {minimum:g}, got {excerpt(value)}")


def check_positive(name: str, value: object) -> None:
    check_finite(name, value)
    assert isinstance(value, int | float)
    if value <= 0:
        raise UserError(f"{name} must be > 0, got {excerpt(value)}")
