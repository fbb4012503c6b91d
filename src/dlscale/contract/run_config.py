"""The resolved configuration of one measured point (one launch of N workers).

The core keys every run has are fields with a docstring (shown by ``dlscale run --keys``); the
settings of the point's backend, data set and launcher are their own declared options
(:mod:`dlscale.contract.options`), resolved into ``options``. Everything is validated on
construction (:mod:`dlscale.contract.run_checks`); a bad value raises :class:`UserError` naming
the key and what is allowed.

Each key has one kind (field metadata), the one mechanism that says what a key is:

* ``point`` (the default): it changes what is measured; part of the run id and of every match;
* ``label``: it tells identical points apart (``repeat_id``, ``comm_probe_steps``): part of
  the run id, ignored when runs are matched (speedup baseline, compare, plot lines);
* ``operational``: how the run is carried out, not what it measures (``timeout_s``,
  ``python``, ``save_params``): in neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dlscale.contract.backends import BACKENDS
from dlscale.contract.datasets import DATASETS
from dlscale.contract.declared_options import declared_options
from dlscale.contract.errors import UserError
from dlscale.contract.launchers import LAUNCHERS
from dlscale.contract.layout import ProcessLayout
from dlscale.contract.models import MODELS
from dlscale.contract.options import Option, resolve, typed
from dlscale.contract.run_checks import check_core_values, check_dropout, check_engine_fits
from dlscale.contract.text import excerpt
from dlscale.contract.workload import check_task, workload_of

T = TypeVar("T")

POINT, LABEL, OPERATIONAL = "point", "label", "operational"


def _doc(text: str, kind: str = POINT) -> dict[str, str]:
    return {"doc": text, "kind": kind}


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    backend: str = field(default="torch-ddp", metadata=_doc("backend (framework.strategy)"))
    model: str = field(default="resnet44", metadata=_doc("model name (dlscale ls models)"))
    dataset: str = field(default="synthetic", metadata=_doc("data set (dlscale ls datasets)"))
    data_dir: str | None = field(default=None, metadata=_doc("directory of a local data set"))
    workers: int = field(
        default=1, metadata=_doc("data-parallel replicas (worker processes for most backends)")
    )
    batch_size: int = field(
        default=64, metadata=_doc("samples per worker per step (weak) or per step in all (strong)")
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
    windows: int = field(
        default=3,
        metadata=_doc(
            "measurement windows of `steps` steps in one run (step mode; the finer view "
            "inside a run: independent runs are `dlscale run --repeats`)"
        ),
    )
    lr: float = field(
        default=0.1, metadata=_doc("learning rate (SGD or AdamW) for the global batch")
    )
    lr_scaling: str = field(
        default="none", metadata=_doc("none, or linear: multiply lr by workers (weak scaling)")
    )
    momentum: float = field(default=0.9, metadata=_doc("SGD momentum"))
    weight_decay: float = field(
        default=5e-4,
        metadata=_doc("weight decay: SGD's L2 term, AdamW's decoupled decay (torch's definitions)"),
    )
    optimizer: str = field(
        default="sgd",
        metadata=_doc(
            "sgd (momentum, L2 weight decay) or adamw (decoupled weight decay, bias correction; "
            "betas 0.9, 0.999, eps 1e-8), each as torch.optim defines it"
        ),
    )
    lr_schedule: str = field(
        default="constant",
        metadata=_doc(
            "constant, or cosine: linear warm-up over lr_warmup_steps, then cosine decay to 0 "
            "at the run's last step"
        ),
    )
    lr_warmup_steps: int = field(
        default=0, metadata=_doc("steps of linear learning-rate warm-up (lr_schedule = cosine)")
    )
    target_accuracy: float | None = field(
        default=None, metadata=_doc("evaluation accuracy in (0, 1] for time-to-accuracy")
    )
    target_loss: float | None = field(
        default=None, metadata=_doc("held-out loss (per sample or token) for time to that loss")
    )
    evaluate: str = field(
        default="end",
        metadata=_doc(
            "when held-out data is evaluated in step mode: end (after the last window) or "
            "window (after every window; epoch mode evaluates after every epoch)"
        ),
    )
    device: str = field(default="cpu", metadata=_doc("cpu or cuda"))
    seed: int = field(default=0, metadata=_doc("seed for initial weights and data order"))
    threads_per_worker: int | None = field(
        default=None, metadata=_doc("intra-op threads per worker (default: cores / workers)")
    )
    comm_probe_steps: int = field(
        default=5,
        metadata=_doc(
            "steps without gradient sync to measure exposed communication (0: off)", kind=LABEL
        ),
    )
    timeout_s: float = field(
        default=900.0,
        metadata=_doc("a run still going after this many seconds is stopped", kind=OPERATIONAL),
    )
    loader_only: bool = field(
        default=False,
        metadata=_doc(
            "time the input pipeline alone: each step takes a batch and trains nothing "
            "(images/s the loaders deliver)"
        ),
    )
    image_size: int | None = field(
        default=None, metadata=_doc("input height = width (default: the model's native size)")
    )
    dropout: float | None = field(
        default=None,
        metadata=_doc(
            "dropout probability of a model with dropout (alexnet 0.5, googlenet 0.2; none: "
            "the model's own); 0 turns it off, so every framework takes the same steps"
        ),
    )
    precision: str = field(
        default="float32",
        metadata=_doc(
            "floating-point type of the model, its inputs, gradients and collectives: float32, "
            "or float64 to prove two engines take the same steps where float32's rounding "
            "cannot tell (every engine but mxnet-kv, whose servers hold float32)"
        ),
    )
    save_params: bool = field(
        default=False,
        metadata=_doc("rank 0 saves the trained parameters (final_params.*)", kind=OPERATIONAL),
    )
    allocator: str = field(
        default="glibc-tuned",
        metadata=_doc(
            "memory allocator of the workers: system (glibc as is), glibc-tuned (fixed mmap and "
            "trim thresholds), jemalloc or tcmalloc (preloaded; docs/benchmarks.md)"
        ),
    )
    launcher: str = field(
        default="local", metadata=_doc("how workers start (dlscale ls launchers)")
    )
    python: str | None = field(
        default=None,
        metadata=_doc("interpreter for the workers (default: the backend's)", kind=OPERATIONAL),
    )
    resource_guard: bool = field(
        default=True,
        metadata=_doc(
            "refuse a point the machine cannot sensibly run (docs/reliability.md); "
            "false: run it anyway",
            kind=OPERATIONAL,
        ),
    )
    peak_tflops: float | None = field(
        default=None,
        metadata=_doc(
            "dense peak TFLOP/s of one worker's device, MFU's denominator (default: a CPU's "
            "measured matmul peak, a known GPU's datasheet figure)",
            kind=OPERATIONAL,
        ),
    )
    repeat_id: int = field(
        default=0,
        metadata=_doc("label to rerun an identical point as a separate run", kind=LABEL),
    )
    options: dict[str, Any] = field(
        default_factory=dict,
        metadata=_doc("the plug-ins' own settings (dlscale run --keys), resolved on construction"),
    )

    def __post_init__(self) -> None:
        for key, registry in (("backend", BACKENDS), ("model", MODELS), ("dataset", DATASETS),
                              ("launcher", LAUNCHERS)):  # fmt: skip
            object.__setattr__(self, key, registry.canonical(getattr(self, key)))
        backend = BACKENDS.get(self.backend)
        model = MODELS.get(self.model)
        DATASETS.get(self.dataset)
        LAUNCHERS.get(self.launcher)
        check_core_values(self)
        if self.dropout is not None and check_dropout(self, model):
            object.__setattr__(self, "dropout", None)  # what the model does anyway
        if not isinstance(self.options, dict):
            raise UserError(f"options must be a mapping, got {excerpt(self.options)}")
        given = {k: v for k, v in self.options.items() if not _ignorable(k, v, self)}
        object.__setattr__(self, "options", resolve(self._option_owners(), given))
        model.check(self.options)
        workload_of(self)  # the model takes the data set's samples
        check_task(self, backend.framework)
        check_engine_fits(self, backend, model)
        if self.scaling == "strong" and self.batch_size % self.workers:
            raise UserError(
                f"strong scaling splits batch_size={self.batch_size} over {self.workers} workers: "
                "choose a batch size divisible by every worker count"
            )
        if DATASETS.get(self.dataset).needs_data_dir and not self.data_dir:
            raise UserError(f"dataset {self.dataset} needs --data-dir PATH (a local copy)")
        layout = self.layout()  # the backend's roles must fit the config
        if layout.replicas != self.workers:
            raise UserError(
                f"backend {self.backend} laid out {layout.replicas} replicas for "
                f"workers={self.workers}"
            )

    @classmethod
    def make(cls, **settings: Any) -> RunConfig:
        """A config from flat settings: core keys as fields, every other key an option."""
        core = {k: v for k, v in settings.items() if k in _FIELDS and k != "options"}
        options = {**settings.get("options", {})}
        options.update({k: v for k, v in settings.items() if k not in _FIELDS})
        return cls(**core, options=options)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """A config as ``to_dict`` wrote it (options grouped by plug-in kind)."""
        options: dict[str, Any] = {}
        for group in (data.get("options") or {}).values():
            options.update(group)
        return cls(**{k: v for k, v in data.items() if k != "options"}, options=options)

    def _option_owners(self) -> dict[str, tuple[str, tuple[Option, ...]]]:
        return {
            "backend": (self.backend, BACKENDS.get(self.backend).options),
            "dataset": (self.dataset, DATASETS.get(self.dataset).options),
            "launcher": (self.launcher, LAUNCHERS.get(self.launcher).options),
            "model": (self.model, MODELS.get(self.model).options),
        }

    def typed(self, options: type[T]) -> T:
        """This point's values of a plug-in's options dataclass
        (:func:`dlscale.contract.options.typed`), typed where they are used."""
        return typed(options, self.options)

    def grouped_options(self) -> dict[str, dict[str, Any]]:
        """The options by plug-in kind: what a stored config holds."""
        return {
            kind: {o.name: self.options[o.name] for o in declared}
            for kind, (_, declared) in self._option_owners().items()
        }

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
    def framework(self) -> str:
        return BACKENDS.get(self.backend).framework

    def layout(self) -> ProcessLayout:
        """Every process of the run, from the backend's roles."""
        return ProcessLayout.from_roles(BACKENDS.get(self.backend).roles(self))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["options"] = self.grouped_options()
        return data

    def identity(self) -> dict[str, Any]:
        """The keys that make a run what it is (not where or how long we wait for it); a key
        added after results were stored counts only away from its default (:data:`_LATER_KEYS`),
        so earlier points keep their ids, and an option only where it changes the run and away
        from what runs before it did (:attr:`Option.applies`, :attr:`Option.earlier`)."""
        data = self.to_dict()
        for key in keys_of_kind(OPERATIONAL):
            data.pop(key)
        for key, default in _LATER_KEYS.items():
            if data[key] == default:
                data.pop(key)
        source = getattr(MODELS.get(self.model), "source_sha256", None)
        if source is not None:  # the user's own model or script: an edited one is a new point
            data["model_sha256"] = source
        for kind, (_, declared) in self._option_owners().items():
            group = data["options"][kind]
            resolved = dict(group)  # each option judged on every resolved value, none popped
            for option in declared:
                if not option.in_identity(resolved):
                    group.pop(option.name)
        if not data["options"]["model"]:  # a model without options: ids as before models had
            data["options"].pop("model")
        return data

    def run_id(self) -> str:
        """Readable, stable id: the same resolved point always gets the same id."""
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()
        model = re.sub(r"[^A-Za-z0-9_.-]", "_", self.model.rpartition("/")[2])
        return f"{model}-{self.backend}-{self.dataset}-w{self.workers}-{digest[:10]}"


_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
_LATER_KEYS: dict[str, Any] = {
    "loader_only": False, "dropout": None, "precision": "float32", "optimizer": "sgd",
    "lr_schedule": "constant", "lr_warmup_steps": 0, "target_loss": None, "evaluate": "end",
}  # fmt: skip
"""Core keys added after results were stored, with the value every earlier run had."""


def keys_of_kind(*kinds: str) -> tuple[str, ...]:
    """Core keys of the given kinds (point, label, operational)."""
    return tuple(name for name, f in _FIELDS.items() if f.metadata["kind"] in kinds)


NOT_MATCHED_KEYS = keys_of_kind(LABEL, OPERATIONAL)
"""Keys ignored when runs are matched to a speedup baseline, compared across stores, or
grouped into plot lines: they label a run without changing what its throughput measures."""


def core_keys() -> tuple[str, ...]:
    return tuple(name for name in _FIELDS if name != "options")


def config_defaults() -> dict[str, Any]:
    return {name: f.default for name, f in _FIELDS.items() if f.default is not dataclasses.MISSING}


def fields_doc() -> dict[str, str]:
    return {name: f.metadata["doc"] for name, f in _FIELDS.items() if name != "options"}


def _ignorable(key: str, value: Any, config: RunConfig) -> bool:
    """A key the point's plug-ins do not declare, set to every declarer's default: a grid
    such as ``backend = ["torch-single", "torch-ddp"]`` with ``compression = "none"`` means
    the default where the key applies and nothing where it does not."""
    owners = dict(config._option_owners())
    if any(key in (o.name for o in opts) for _, opts in owners.values()):
        return False
    declarations = declared_options().get(key, [])
    if not declarations:
        return False
    try:
        return all(option.parse(value) == option.default for _, option in declarations)
    except UserError:
        return False
