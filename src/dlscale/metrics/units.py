"""Throughput in the unit a person reads, derived here once (docs/metrics.md, "Throughput and
its unit").

A result stores what was measured: samples per second (``throughput_samples_s`` and the figures
beside it), with the kind of sample (``sample_unit``: ``image``, ``token``) and how many units
one sample is (``units_per_sample``: 1 for an image, the model's ``block_size`` for a sequence
of tokens), both from :func:`dlscale.contract.workload.workload_of`. What tables, lines, figures
and exports show is ``units per second = samples per second x units_per_sample``, labelled
:func:`~dlscale.contract.workload.unit_rate` (``img/s``, ``tok/s``). A result stored before the
unit was counts images, one a sample. Rows of different units shown together (images and tokens
in one study) are shown in samples per second, labelled ``samples/s`` (:func:`common_rate`).
Ratios (speedup, efficiency) are the same in every unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.contract.workload import KINDS, UNIT_RATES, unit_rate

THROUGHPUT = "throughput_samples_s"
"""The stored mean throughput, in samples per second."""
CI95 = "throughput_ci95_samples_s"
WINDOWS = "throughput_windows_samples_s"
RUNS = "throughput_runs_samples_s"
SAMPLES_RATE = "samples/s"
"""The label of samples per second: a table whose rows count different units."""


def sample_unit(metrics: Mapping[str, Any] | None) -> str | None:
    """What one unit of a result's throughput is (``image``, ``token``); ``image`` for a
    result stored before the unit was; None for one this dlscale does not know (its
    throughput is then shown in samples, never under a label it did not make)."""
    unit = (metrics or {}).get("sample_unit")
    if unit is None:
        return "image"
    return unit if isinstance(unit, str) and unit in UNIT_RATES else None


def units_per_sample(metrics: Mapping[str, Any] | None) -> int:
    """Units in one sample of a result (a sequence's tokens); 1 for an image and for a result
    stored before the figure was."""
    units = (metrics or {}).get("units_per_sample")
    if isinstance(units, int) and not isinstance(units, bool) and units >= 1:
        return units
    return 1


@dataclass(frozen=True)
class Rate:
    """How throughputs are shown: in ``unit`` per second, each result's samples per second
    times its ``units_per_sample``; ``unit`` None: in samples per second (rows of several
    units)."""

    unit: str | None = "image"

    @property
    def label(self) -> str:
        """``img/s``, ``tok/s``, ``samples/s``."""
        return unit_rate(self.unit) if self.unit else SAMPLES_RATE

    @property
    def words(self) -> str:
        """The unit in words, plural: ``images``, ``tokens``, ``samples``."""
        return f"{self.unit}s" if self.unit else "samples"

    @property
    def noun(self) -> str:
        """What a sample is: ``images``, ``token sequences``, ``samples (images or token
        sequences)``."""
        nouns = {kind.unit: kind.noun for kind in KINDS.values()}
        if self.unit is None:
            return f"samples ({' or '.join(nouns.values())})"
        return nouns.get(self.unit, f"samples of {self.unit}s")

    def name(self, key: str) -> str:
        """A stored figure's name in this unit, as exports write it:
        ``throughput_samples_s`` -> ``throughput_img_s``, ``throughput_tok_s``."""
        return key.replace("samples_s", f"{self.label.removesuffix('/s')}_s")

    def factor(self, metrics: Mapping[str, Any] | None) -> int:
        """What a result's samples per second are multiplied by to read in this unit."""
        return units_per_sample(metrics) if self.unit else 1

    def of(self, metrics: Mapping[str, Any] | None, key: str = THROUGHPUT) -> float | None:
        """The stored figure ``key`` (samples per second) of a result or point, in this unit;
        None where it has none."""
        value = (metrics or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return value * self.factor(metrics)

    def per_second(self, value: float, metrics: Mapping[str, Any] | None) -> float:
        """A figure in samples per second of the result ``metrics`` describe, in this unit."""
        return value * self.factor(metrics)


IMAGES = Rate("image")
"""Images per second: what every result stored before the unit was counts."""


def rate_of(metrics: Mapping[str, Any] | None) -> Rate:
    """The rate one result or point is read in: its own unit."""
    return Rate(sample_unit(metrics))


def common_rate(rows: Iterable[Mapping[str, Any]]) -> Rate:
    """The rate rows (results, points) shown together are read in: the unit of every row with
    a throughput (:func:`rate_for`); where none has one (every run failed), the unit the rows
    recorded (a failed GPT study's table still says tok/s)."""
    rows = list(rows)
    measured = [r for r in rows if (r.get("metrics") or {}).get(THROUGHPUT) is not None]
    recorded = measured or [r for r in rows if sample_unit(r.get("metrics")) is not None]
    return rate_for(sample_unit(row.get("metrics")) for row in recorded)


def rate_for(units: Iterable[str | None]) -> Rate:
    """The rate figures of these units are shown together in: their one unit, else samples
    per second (``samples/s``) where they count different units; images where there is none."""
    found = set(units)
    if len(found) > 1:
        return Rate(None)
    return Rate(found.pop()) if found else IMAGES


def shown(metrics: Mapping[str, Any] | None, key: str = THROUGHPUT, spec: str = ".1f") -> str:
    """A result's throughput in words, in its own unit: ``240.0 img/s``, ``15360.0 tok/s``
    ("" where it has none)."""
    rate = rate_of(metrics)
    value = rate.of(metrics, key)
    return "" if value is None else f"{value:{spec}} {rate.label}"
