"""A run's result, typed: what ``result.json`` holds, in one declaration the writer, the store,
its migrations and every reader share.

The writer (:func:`dlscale.runner.result_of`) builds a :class:`Result`; the store writes its
:meth:`~Result.document` and reads every stored schema back into one
(:func:`dlscale.store.migrate.result_view`: older schemas are brought to the current one
first); the progress line, ``ls``, ``compare``, ``load_results`` and the report read its
:meth:`~Result.row`, a flat mapping with the scaling figures added beside it. The shapes of
the fields readers compute with are declared on the fields themselves (``metadata["shape"]``),
and :data:`RESULT` is derived from them, so the declaration and the checks cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from dlscale.contract.facts import FrameworkFacts
from dlscale.contract.shapes import FLAG, SECONDS, TEXT, TIMESTAMP, Shape, count

_SEQUENCES = ("command", "layout", "warnings")
"""The fields stored as JSON lists and held as tuples."""
STATUSES = ("completed", "failed")
"""What a stored run's ``status`` is (a reader treats anything but ``completed`` as failed)."""


def _checked(shape: Shape, default: Any = None) -> Any:
    return field(default=default, metadata={"shape": shape})


@dataclass(frozen=True)
class Result:
    """One run's result (schema :data:`~dlscale.contract.files.SCHEMAS` ``result``).

    ``config``, ``metrics`` and ``environment`` stay mappings: their keys are the core keys and
    the options plug-ins declare (:class:`~dlscale.contract.run_config.RunConfig`), the metrics
    of :data:`~dlscale.contract.shapes.METRICS` and the facts of the host and the framework;
    everything else is a typed field."""

    run_id: str
    status: str
    """``completed`` or ``failed`` (:data:`STATUSES`)."""
    config: Mapping[str, Any]
    """As :meth:`RunConfig.to_dict` writes it: the core keys, and ``options`` grouped by
    plug-in kind (``{"backend": {...}, "dataset": {...}, "launcher": {...}}``)."""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    """The run's figures (docs/metrics.md defines each, with its unit)."""
    environment: Mapping[str, Any] = field(default_factory=dict)
    """The parent's host and the first training rank's worker: versions, cores, devices."""
    error: str | None = _checked(TEXT)
    """Why the run failed, in one line; None: it completed."""
    failure: Mapping[str, Any] | None = None
    """How a failed launch ended: ``failed_rank``, ``returncodes``, ``stderr_tail``."""
    study: str | None = _checked(TEXT)
    command: tuple[str, ...] | str | None = None
    """The command line that ran the point, one item per argument (a string: written by
    hand, and quoted as one word where it is shown)."""
    framework: str | None = _checked(TEXT)
    reference: bool | None = _checked(FLAG)
    """The backend is its framework's reference (the baseline speedups divide by)."""
    layout: tuple[Mapping[str, Any], ...] | None = None
    """Each process's role and rank (:meth:`~dlscale.contract.layout.Layout.to_dict`), and the
    ``host`` it ran on (its ``start`` record's; absent for one that never started, and in
    results stored before hosts were recorded)."""
    batch_size_per_worker: int | None = _checked(Shape("count", "images", low=1))
    global_batch_size: int | None = _checked(Shape("count", "images", low=1))
    threads_per_worker: int | None = _checked(count("threads"))
    oversubscribed: bool | None = _checked(FLAG)
    interpreter: str | None = None
    """The Python the workers ran (the framework's own virtual environment's, if any)."""
    warnings: tuple[str, ...] = ()
    started_at: float | None = _checked(TIMESTAMP)
    finished_at: float | None = _checked(TIMESTAMP)
    duration_s: float | None = _checked(SECONDS)

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def settings(self) -> dict[str, Any]:
        """The config flat: core keys and every plug-in's options side by side."""
        flat = {k: v for k, v in self.config.items() if k != "options"}
        for group in self.options.values():
            flat.update(group)
        return flat

    @property
    def options(self) -> dict[str, dict[str, Any]]:
        """The plug-ins' options by kind (``backend``, ``dataset``, ``launcher``)."""
        return {kind: dict(group) for kind, group in (self.config.get("options") or {}).items()}

    @property
    def facts(self) -> FrameworkFacts:
        """The framework's name, the versions its workers had and the GPUs they saw."""
        return FrameworkFacts.of(self.framework or "", self.environment)

    def document(self) -> dict[str, Any]:
        """What ``result.json`` holds (the schema stamp is the writer's)."""
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _SEQUENCES:
            if isinstance(document[name], tuple):
                document[name] = list(document[name])
        return document

    def row(self) -> dict[str, Any]:
        """The mapping tables, figures, scaling and compare read: the document with the config
        flat (:attr:`settings`), ``config_options`` (:attr:`options`) and ``facts``."""
        return {
            **self.document(),
            "config": self.settings,
            "config_options": self.options,
            "facts": self.facts,
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Result:
        """A result from a document of the current schema (:func:`dlscale.store.migrate` brings
        older ones to it); keys no field declares are left out."""
        values = {f.name: document[f.name] for f in fields(cls) if f.name in document}
        for name in _SEQUENCES:
            if isinstance(values.get(name), list):
                values[name] = tuple(values[name])
        if values.get("warnings") is None:
            values.pop("warnings", None)
        for name in ("metrics", "environment"):
            if values.get(name) is None:
                values.pop(name, None)
        return cls(**values)


RESULT: dict[str, Shape] = {f.name: f.metadata["shape"] for f in fields(Result) if f.metadata}
"""The shapes of a result's own fields that readers compute with or print (beside config,
metrics and environment), from :class:`Result`'s declaration."""
