"""The compute profile ``dlscale predict`` finds in a results directory: the study there, read
as it was run, so a prediction of its scale needs no new measurement.

Which run gives the step (:func:`stored_profile`): among the completed points of 2 workers or
more (of ``--model`` and ``--batch`` where given), the newest one's baseline, the 1-worker point
its speedup is taken over (the baseline rule of :mod:`dlscale.metrics.scaling`: same framework,
settings and threads per worker), so the prediction starts from the step the study's own
scaling was measured against; a store with no such point gives its newest 1-worker point (the
framework's reference backend first). A point's figures combine its runs (medians over them).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlscale.cli.tables import console, say
from dlscale.contract.numbers import finite_number
from dlscale.contract.text import excerpt
from dlscale.metrics.noise import OUTSIDE_LOAD_LIMIT


@dataclass(frozen=True)
class StoredProfile:
    """One stored 1-worker point whose step a prediction starts from."""

    model: str
    batch: int
    """Images per worker per step."""
    backend: str
    """The 1-worker point's backend."""
    run_ids: tuple[str, ...]
    metrics: dict[str, Any]
    engine: str | None
    """The backend of the multi-worker point it is the baseline of (``None``: none)."""
    engine_workers: int
    others: tuple[str, ...]
    """The other models with a usable 1-worker point in the store (``--model`` picks one)."""

    @property
    def step_ms(self) -> float:
        return float(self.metrics["step_time_p50_ms"])

    def said(self, results: Path) -> str:
        """Where the step comes from, in words."""
        runs = self.run_ids[0] + (f" and {len(self.run_ids) - 1} more" if self.run_ids[1:] else "")
        of = (
            f"the baseline of {self.engine} x{self.engine_workers}"
            if self.engine
            else "a 1-worker point"
        )
        return f"stored in {results}: {self.backend} x1, {of} (run {runs})"

    def loaded(self) -> str | None:
        return under_load(self.metrics, self.backend)


def under_load(metrics: dict[str, Any], backend: str) -> str | None:
    """One line when every window a 1-worker run's step comes from ran under outside load
    (the noise guard of :mod:`dlscale.metrics.noise` then had no clean window to keep), else
    None."""
    windows, loaded = metrics.get("windows"), metrics.get("windows_loaded")
    if not (isinstance(windows, int) and isinstance(loaded, int) and windows and loaded):
        return None
    if loaded < windows:
        return None
    load = metrics.get("outside_load_max")
    share = f" (up to {load:.0%} of the machine busy outside it)" if finite_number(load) else ""
    return (
        f"the step of {backend} x1 was measured under load in every window{share}, beyond "
        f"the {OUTSIDE_LOAD_LIMIT:.0%} `dlscale run` trusts: it is slower than on a quiet "
        "machine, and every prediction from it too; measure it again on a quiet machine, or "
        "give --compute-ms"
    )


def study_profile(
    args: argparse.Namespace, model: str, batch: int, points: list[dict[str, Any]]
) -> StoredProfile | None:
    """The stored study's profile among ``points`` (:func:`stored_points`), with
    ``args.model``, ``args.batch`` and ``args.framework`` filled in from it where not given
    (else ``model``, ``batch`` and torch); None where nothing stored fits or the step is
    given."""
    stored = None
    if args.compute_ms is None:  # the study's model, at any batch (each is looked up after)
        stored = stored_profile(points, args.model, None, args.framework)
    if args.model is None:
        args.model = stored.model if stored is not None else model
        if stored is not None and stored.others:
            others = ", ".join(stored.others)
            say(console(stderr=True), f"dlscale: predicting {args.model}, the stored study's "
                f"newest; {args.results} also holds {others} (--model picks one)")  # fmt: skip
    if args.batch is None:
        args.batch = str(stored.batch if stored is not None else batch)
    if args.framework is None:
        args.framework = _framework_of(stored.backend) if stored is not None else "torch"
    return stored


def _framework_of(backend: str) -> str:
    from dlscale.contract.backends import BACKENDS

    return BACKENDS.get(backend).framework


def stored_points(results: Path) -> list[dict[str, Any]]:
    """The completed points of ``results`` with their baselines (:func:`add_scaling`), read
    once a command (a damaged file warned about once); none where there is no such
    directory."""
    if not results.is_dir():
        return []
    from dlscale.metrics.scaling import add_scaling
    from dlscale.store.results import RunStore

    return add_scaling([result for result in RunStore(results).results() if result.completed])


def stored_profile(
    every: list[dict[str, Any]], model: str | None, batch: int | None, framework: str | None
) -> StoredProfile | None:
    """The stored profile among the points ``every`` (:func:`stored_points`; the module
    docstring says which), or None where none is a completed 1-worker point of ``model`` at
    ``batch`` of ``framework`` (each where given)."""
    points = [
        p for p in every if _usable(p) and (framework is None or p.get("framework") == framework)
    ]
    singles = [p for p in points if p["config"].get("workers") == 1]
    fitting = [p for p in singles if _fits(p, model, batch)]
    base_of = {tuple(p["run_ids"]): p for p in fitting}
    scaled = [
        p
        for p in points
        if _workers(p) >= 2 and _fits(p, model, batch) and tuple(p.get("baseline_run_ids") or ())
    ]
    scaled = [p for p in scaled if tuple(p["baseline_run_ids"]) in base_of]
    engine: dict[str, Any] | None = None
    if scaled:
        engine = max(scaled, key=_finished)
        base = base_of[tuple(engine["baseline_run_ids"])]
    elif fitting:
        base = max(fitting, key=lambda p: (bool(p.get("reference")), _finished(p)))
    else:
        return None
    chosen = str(base["config"]["model"])
    others = sorted({str(p["config"]["model"]) for p in singles} - {chosen})
    return StoredProfile(
        model=chosen,
        batch=int(base["batch_size_per_worker"]),
        backend=str(base["config"]["backend"]),
        run_ids=tuple(base["run_ids"]),
        metrics=dict(base["metrics"]),
        engine=None if engine is None else str(engine["config"]["backend"]),
        engine_workers=0 if engine is None else _workers(engine),
        others=tuple(excerpt(name) for name in others),
    )


def _usable(point: dict[str, Any]) -> bool:
    """A point a profile can come from: a model, a whole batch per worker and a finite step."""
    step = (point.get("metrics") or {}).get("step_time_p50_ms")
    batch = point.get("batch_size_per_worker")
    return (
        isinstance(point.get("config", {}).get("model"), str)
        and isinstance(batch, int)
        and batch >= 1
        and finite_number(step)
        and step > 0
    )


def _fits(point: dict[str, Any], model: str | None, batch: int | None) -> bool:
    return (model is None or point["config"]["model"] == model) and (
        batch is None or point["batch_size_per_worker"] == batch
    )


def _workers(point: dict[str, Any]) -> int:
    workers = point["config"].get("workers")
    return workers if isinstance(workers, int) else 0


def _finished(point: dict[str, Any]) -> float:
    finished = point.get("finished_at")
    return float(finished) if finite_number(finished) else 0.0
