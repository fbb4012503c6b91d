"""The resolved configuration of one measured point (one launch of N workers).

Every field has a docstring (shown by ``dlscale run --help-keys``) and is validated on
construction; a bad value raises :class:`UserError` naming the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from dlscale.backends import BACKENDS
from dlscale.datasets import DATASETS
from dlscale.errors import UnsupportedPoint, UserError
from dlscale.launchers import LAUNCHERS
from dlscale.models import MODELS


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    backend: str = field(default="torch-ddp", metadata=_doc("backend (framework.strategy)"))
    model: str = field(default="resnet44", metadata=_doc("model name (dlscale ls models)"))
    dataset: str = field(default="synthetic", metadata=_doc("data set (dlscale ls datasets)"))
    data_dir: str | None = field(default=None, metadata=_doc("directory of a local data set"))
    workers: int = field(default=1, metadata=_doc("number of data-parallel worker processes"))
    batch_size: int = field(
        default=64,
        metadata=_doc("images per worker per step (weak scaling) or per step in all (strong)"),
    )
    scaling: str = field(
        default="weak",
        metadata=_doc(
            "weak: fixed per-worker batch; strong: fixed global batch split over workers"
        ),
    )
    epochs: int | None = field(
        default=None, metadata=_doc("train this many epochs (each epoch is a measurement window)")
    )
    steps: int = field(
        default=10, metadata=_doc("measured steps per window when not training by epochs")
    )
    warmup_steps: int = field(default=3, metadata=_doc("steps run before timing starts"))
    repeats: int = field(
        default=3, metadata=_doc("measurement windows of `steps` steps (step mode; >= 2 for a CI)")
    )
    lr: float = field(default=0.1, metadata=_doc("SGD learning rate for the global batch"))
    lr_scaling: str = field(
        default="none", metadata=_doc("none, or linear: multiply lr by workers (weak scaling)")
    )
    momentum: float = field(default=0.9, metadata=_doc("SGD momentum"))
    weight_decay: float = field(default=5e-4, metadata=_doc("SGD weight decay (L2)"))
    target_accuracy: float | None = field(
        default=None, metadata=_doc("evaluation accuracy in (0, 1] for time-to-accuracy")
    )
    device: str = field(default="cpu", metadata=_doc("cpu or cuda"))
    seed: int = field(default=0, metadata=_doc("seed for initial weights and data order"))
    threads_per_worker: int | None = field(
        default=None, metadata=_doc("intra-op threads per worker (default: cores / workers)")
    )
    comm_probe_steps: int = field(
        default=5,
        metadata=_doc("steps without gradient sync to measure exposed communication (0: off)"),
    )
    timeout_s: float = field(
        default=900.0, metadata=_doc("a run still going after this many seconds is stopped")
    )
    amp: str = field(default="none", metadata=_doc("mixed precision on cuda: none or bf16"))
    channels_last: bool = field(default=False, metadata=_doc("channels_last memory format"))
    compile: bool = field(default=False, metadata=_doc("torch.compile the model"))
    samples_per_epoch: int = field(
        default=50000, metadata=_doc("images per epoch for synthetic data in epoch mode")
    )
    image_size: int | None = field(
        default=None, metadata=_doc("input height = width (default: the model's native size)")
    )
    ps_mode: str = field(
        default="sync", metadata=_doc("torch-ps: sync (wait for all workers) or async")
    )
    num_servers: int = field(
        default=1, metadata=_doc("torch-ps: server ranks; parameters sharded by bytes")
    )
    bucket_mb: float = field(
        default=25.0, metadata=_doc("gradient bucket / fusion buffer size in MB (ddp, ring)")
    )
    compression: str = field(
        default="none", metadata=_doc("gradient compression: none, fp16, bf16, powersgd")
    )
    powersgd_rank: int = field(default=1, metadata=_doc("torch-ddp: PowerSGD matrix rank"))
    gradient_as_bucket_view: bool = field(
        default=False, metadata=_doc("torch-ddp: gradients are views into the buckets")
    )
    static_graph: bool = field(default=False, metadata=_doc("torch-ddp: static_graph=True"))
    save_params: bool = field(
        default=False, metadata=_doc("rank 0 saves the trained parameters (final_params.pt)")
    )
    launcher: str = field(
        default="local", metadata=_doc("how workers start (dlscale ls launchers)")
    )
    python: str | None = field(
        default=None, metadata=_doc("interpreter for the workers (default: the backend's)")
    )
    repeat_id: int = field(
        default=0, metadata=_doc("label to rerun an identical point as a separate run")
    )

    def __post_init__(self) -> None:
        BACKENDS.get(self.backend)
        MODELS.get(self.model)
        DATASETS.get(self.dataset)
        LAUNCHERS.get(self.launcher)
        _check_choice("scaling", self.scaling, ("weak", "strong"))
        _check_choice("device", self.device, ("cpu", "cuda"))
        _check_choice("amp", self.amp, ("none", "bf16"))
        _check_choice("lr_scaling", self.lr_scaling, ("none", "linear"))
        _check_choice("ps_mode", self.ps_mode, ("sync", "async"))
        _check_choice("compression", self.compression, ("none", "fp16", "bf16", "powersgd"))
        if self.bucket_mb <= 0:
            raise UserError(f"bucket_mb must be > 0, got {self.bucket_mb}")
        for name in (
            "workers",
            "batch_size",
            "steps",
            "repeats",
            "samples_per_epoch",
            "num_servers",
            "powersgd_rank",
        ):
            _check_min(name, getattr(self, name), 1)
        for name in ("warmup_steps", "comm_probe_steps", "seed", "repeat_id"):
            _check_min(name, getattr(self, name), 0)
        for name in ("epochs", "threads_per_worker", "image_size"):
            if getattr(self, name) is not None:
                _check_min(name, getattr(self, name), 1)
        if self.lr <= 0:
            raise UserError(f"lr must be > 0, got {self.lr}")
        if self.timeout_s <= 0:
            raise UserError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise UserError(
                f"target_accuracy must be in (0, 1], got {self.target_accuracy} (write 0.9 for 90%)"
            )
        self._check_backend_supports()
        if self.scaling == "strong" and self.batch_size % self.workers:
            raise UserError(
                f"strong scaling splits batch_size={self.batch_size} over {self.workers} workers: "
                "choose a batch size divisible by every worker count"
            )
        dataset = DATASETS.get(self.dataset)
        if dataset.needs_data_dir and not self.data_dir:
            raise UserError(f"dataset {self.dataset} needs --data-dir PATH (a local copy)")

    def _check_backend_supports(self) -> None:
        """Settings the backend cannot run: UnsupportedPoint (a grid skips such points)."""
        backend = BACKENDS.get(self.backend)
        if backend.max_workers is not None and self.workers > backend.max_workers:
            raise UnsupportedPoint(
                f"backend {self.backend} runs at most {backend.max_workers} worker(s), "
                f"got workers={self.workers}; use torch-ddp for more"
            )
        if self.device not in backend.devices:
            raise UnsupportedPoint(f"backend {self.backend} does not run on {self.device}")
        for key in STRATEGY_KEYS:
            if key not in backend.options and getattr(self, key) != _DEFAULTS[key]:
                raise UnsupportedPoint(
                    f"backend {self.backend} does not use {key} "
                    f"(it reads: {', '.join(backend.options) or 'no strategy keys'})"
                )
        if self.compression not in backend.compressions:
            raise UnsupportedPoint(
                f"backend {self.backend} implements compression "
                f"{', '.join(backend.compressions)}; got {self.compression}"
            )

    # Derived values: one definition each, used by workers and aggregation alike.
    @property
    def batch_per_worker(self) -> int:
        return self.batch_size // self.workers if self.scaling == "strong" else self.batch_size

    @property
    def global_batch(self) -> int:
        return self.batch_per_worker * self.workers

    @property
    def effective_lr(self) -> float:
        scale = self.workers if self.lr_scaling == "linear" and self.scaling == "weak" else 1
        return self.lr * scale

    @property
    def processes(self) -> int:
        """Processes to start: the workers, then the backend's extra ranks (e.g. servers)."""
        key = BACKENDS.get(self.backend).extra_processes_key
        return self.workers + (int(getattr(self, key)) if key else 0)

    @property
    def mode(self) -> str:
        return "epochs" if self.epochs is not None else "steps"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def identity(self) -> dict[str, Any]:
        """The fields that make a point what it is (not where or how long we wait for it)."""
        data = self.to_dict()
        for key in _NOT_IDENTITY:
            data.pop(key)
        return data

    def run_id(self) -> str:
        """Readable, stable id: the same resolved point always gets the same id."""
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[
            :10
        ]
        return f"{self.model}-{self.backend}-{self.dataset}-w{self.workers}-{digest}"


_NOT_IDENTITY = ("timeout_s", "python", "save_params")
RUN_LABEL_KEYS = (
    "repeat_id",
    "timeout_s",
    "python",
    "threads_per_worker",
    "comm_probe_steps",
    "save_params",
)
"""Keys that label a run without changing what its throughput measures: ignored when runs are
matched to a speedup baseline, compared across stores, or grouped into plot lines."""
STRATEGY_KEYS = (
    "ps_mode",
    "num_servers",
    "bucket_mb",
    "compression",
    "powersgd_rank",
    "gradient_as_bucket_view",
    "static_graph",
)
"""Keys that only some backends read (BackendSpec.options)."""
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def config_defaults() -> dict[str, Any]:
    return dict(_DEFAULTS)


def fields_doc() -> dict[str, str]:
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(RunConfig)}


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_min(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise UserError(f"{name} must be an integer >= {minimum}, got {value!r}")
