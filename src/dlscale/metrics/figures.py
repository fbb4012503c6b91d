"""The figures a person reads of a run or a point, each derived here once from its stored
facts (docs/metrics.md defines each): read through one typed record, :class:`Figures`, by the
tables, the finding, the report, the exports, ``--json``, ``load_results`` and the points
file (throughput in its unit is :mod:`dlscale.metrics.units`'s).

* achieved FLOP/s: training FLOPs per sample x samples/s (every worker's together);
* MFU, model FLOPs utilization: achieved FLOP/s over the peak of every worker's device,
  ``train_flops_per_sample x throughput_samples_s / (peak_flops_per_worker x workers)``, with
  the words of its peak (``peak_basis``); none where a fact is missing (``mfu_missing`` says
  why), and an MFU above 1 is no figure: :attr:`Figures.mfu_impossible`;
* peak memory: the largest high-water resident set of any training rank, and on a GPU the
  allocator's peak.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlscale.metrics.units import THROUGHPUT

Row = Mapping[str, Any]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class Figures:
    """One run's or point's derived figures (``None``: the facts it needs are missing)."""

    achieved_flops_s: float | None
    """Training FLOP/s of every worker together."""
    peak_flops_per_worker: float | None
    """The peak of one worker's device (FLOP/s)."""
    peak_flops_s: float | None
    """The peak of every worker's device together: MFU's denominator."""
    mfu: float | None
    """Model FLOPs utilization, a fraction (0.31 is 31%); ``None`` where it cannot be stated,
    an impossible one (above 1) included."""
    mfu_measured: float | None
    """The ratio as computed, above 1 too: what :attr:`mfu_impossible` names."""
    mfu_basis: str | None
    """What the peak is (``of measured fp32 matmul peak, 1 thread``)."""
    mfu_missing: str | None
    """Why there is no MFU, in one line (``None`` where there is one)."""
    rss_peak_bytes: int | None
    device_peak_bytes: int | None

    @property
    def mfu_impossible(self) -> bool:
        """An MFU above 100%: the FLOPs or the peak are wrong, so no MFU is stated."""
        return self.mfu_measured is not None and self.mfu_measured > 1.0

    @classmethod
    def of(cls, row: Row) -> Figures:
        """The figures of a result or point row (``metrics``, ``config``)."""
        metrics: Mapping[str, Any] = row.get("metrics") or {}
        workers = _number((row.get("config") or {}).get("workers"))
        samples_s = _number(metrics.get(THROUGHPUT))
        flops = _number(metrics.get("train_flops_per_sample"))
        per_worker = _number(metrics.get("peak_flops_per_worker"))
        achieved = None if samples_s is None or flops is None else samples_s * flops
        peak = None if per_worker is None or not workers else per_worker * workers
        measured = None if achieved is None or not peak else achieved / peak
        missing = metrics.get("mfu_missing") if measured is None else None  # a run stored
        # before dlscale stored these facts says nothing
        if measured is not None and measured > 1.0:  # never stated, even here
            fix = (
                "the peak_tflops set is below the device's"
                if metrics.get("peak_source") == "set"
                else "set the device's dense peak with --set peak_tflops=..."
            )
            missing = (
                "no MFU: it came out above 100% of the peak, so the FLOPs per sample or the "
                f"peak are wrong ({fix})"
            )
        return cls(
            achieved_flops_s=achieved,
            peak_flops_per_worker=per_worker,
            peak_flops_s=peak,
            mfu=measured if measured is not None and measured <= 1.0 else None,
            mfu_measured=measured,
            mfu_basis=metrics.get("peak_basis")
            if isinstance(metrics.get("peak_basis"), str)
            else None,
            mfu_missing=missing if isinstance(missing, str) else None,
            rss_peak_bytes=_whole(metrics.get("rss_peak_bytes")),
            device_peak_bytes=_whole(metrics.get("device_peak_allocated_bytes")),
        )


def _whole(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def mfu_percent(mfu: float) -> str:
    """An MFU for people: ``47.0%``, and a tiny one with two digits (``0.016%``), not ``0.0%``."""
    return f"{mfu:.1%}" if mfu >= 0.001 else f"{mfu * 100:.2g}%"


def memory_words(size: float) -> str:
    """Bytes for people, in binary units: ``812 MiB``, ``3.2 GiB``."""
    if size >= 2**30:
        return f"{size / 2**30:.1f} GiB"
    return f"{size / 2**20:.0f} MiB"
