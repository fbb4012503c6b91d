"""What the measured points say about the input pipeline: its cap per worker and the steps it
holds up (definitions: docs/metrics.md, "Input")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlscale.contract.run_config import NOT_MATCHED_KEYS
from dlscale.metrics.units import rate_of

Row = dict[str, Any]

INPUT_BOUND = 0.10
"""A training point whose steps wait for input at least this share of their time is called
input-bound."""
_NOT_MATCHED = {"loader_only", *NOT_MATCHED_KEYS}
"""A training point and its loader-only twin differ in ``loader_only`` alone: the keys that
never tell points apart (:data:`dlscale.contract.run_config.NOT_MATCHED_KEYS`) are ignored, as
everywhere runs are matched."""


@dataclass(frozen=True)
class InputFinding:
    """One training point beside what its input pipeline delivers alone, if that was measured."""

    label: str
    """``backend xN``."""
    dataset: str
    train_per_worker: float
    """Images (tokens: :mod:`.units`) per second per worker while training."""
    wait_fraction: float | None
    """Share of step time spent waiting for a batch (``input_wait_fraction``)."""
    loader_per_worker: float | None
    """The same, of the same point with ``loader_only``; ``None``: not run."""
    rate: str = "img/s"
    """The unit of both (:func:`dlscale.metrics.units.rate_of`)."""

    def sentence(self) -> str:
        wait = (
            f"{share(self.wait_fraction)} of its step time waits for input"
            if self.wait_fraction is not None
            else "its input wait was not measured"
        )
        text = (
            f"{self.label} on {self.dataset}: trains at {self.train_per_worker:.1f} {self.rate} "
            f"per worker; {wait}"
        )
        if self.loader_per_worker is not None:
            used = self.train_per_worker / self.loader_per_worker
            text += (
                f"; input caps you at {self.loader_per_worker:.1f} {self.rate} per worker "
                f"(training uses {share(used)} of it)"
            )
        if self.wait_fraction is not None and self.wait_fraction >= INPUT_BOUND:
            text += ": input-bound"
        return text


def share(fraction: float) -> str:
    """A fraction as a percentage, with a decimal below 10% (0.2%, not 0%)."""
    return f"{fraction:.1%}" if abs(fraction) < 0.1 else f"{fraction:.0%}"


def _key(row: Row) -> tuple[tuple[str, Any], ...]:
    config = row.get("config") or {}
    groups = (row.get("config_options") or {}).values()
    options = tuple(sorted((k, str(v)) for group in groups for k, v in group.items()))
    return (*sorted((k, str(v)) for k, v in config.items() if k not in _NOT_MATCHED), *options)


def _per_worker(row: Row) -> float | None:
    metrics = row.get("metrics") or {}
    throughput = rate_of(metrics).of(metrics)
    workers = (row.get("config") or {}).get("workers") or 0
    return throughput / workers if throughput is not None and workers > 0 else None


def _generated(dataset: object) -> bool:
    """A data set made in memory (or none, or one this dlscale does not know): no input to
    judge."""
    from dlscale.contract.datasets import DATASETS

    if not isinstance(dataset, str) or dataset not in DATASETS:
        return dataset is None
    return DATASETS.get(dataset).generated


def input_findings(points: list[Row]) -> list[InputFinding]:
    """Every completed training point on data read from disk, with the loader-only point of
    the same settings where there is one (same backend, workers, batch, loader processes...)."""
    done = [p for p in points if p.get("status") == "completed" and _per_worker(p) is not None]
    loaders = {_key(p): p for p in done if (p.get("config") or {}).get("loader_only")}
    findings = []
    for point in done:
        config = point.get("config") or {}
        if config.get("loader_only") or _generated(config.get("dataset")):
            continue
        loader = loaders.get(_key(point))
        train = _per_worker(point)
        assert train is not None
        findings.append(
            InputFinding(
                label=f"{config.get('backend')} x{config.get('workers')}",
                dataset=str(config.get("dataset")),
                train_per_worker=train,
                wait_fraction=(point.get("metrics") or {}).get("input_wait_fraction"),
                loader_per_worker=_per_worker(loader) if loader is not None else None,
                rate=rate_of(point.get("metrics")).label,
            )
        )
    return findings


MOST_LINES = 3
"""More input findings than this are said in one summary line (the table's ``input`` column
holds each point's wait)."""


def input_lines(findings: list[InputFinding]) -> list[str]:
    """What the run says of its input after the table: a sentence per point for a few points,
    else one line naming the input-bound points and the loaders' caps measured."""
    if len(findings) <= MOST_LINES:
        return [finding.sentence() for finding in findings]
    bound = [f.label for f in findings if f.wait_fraction is not None
             and f.wait_fraction >= INPUT_BOUND]  # fmt: skip
    capped = [f for f in findings if f.loader_per_worker is not None]
    text = (
        f"{len(findings)} points read their data from disk (each one's input wait: the table's "
        f"input column); input-bound (>= {INPUT_BOUND:.0%} of a step waits): "
        f"{', '.join(bound) or 'none'}"
    )
    if capped:
        rates = {f.rate for f in capped}
        each = "" if len(rates) == 1 else " {}"  # one unit: said once
        caps = ", ".join(
            f"{f.label} {f.loader_per_worker:.1f}{each.format(f.rate)}" for f in capped
        )
        per = f"{rates.pop()} per worker" if len(rates) == 1 else "per worker"
        text += f"; the loaders alone deliver ({per}): {caps}"
    return [text]
