"""The runs table's columns of MFU and memory (docs/metrics.md, "MFU" and "Peak memory"),
each read through :class:`dlscale.metrics.figures.Figures`. For people, MFU drops out first
when the screen is narrow, and its basis (what peak it is of) is a setting: in the caption
where every row shares it, a column where rows differ (``1 thread``, ``2 threads``)."""

from __future__ import annotations

from typing import Any

from dlscale.metrics.figures import Figures, memory_words, mfu_percent
from dlscale.report import cells
from dlscale.report.column import Column, Row


def _figure(name: str) -> Any:
    return lambda row: getattr(Figures.of(row), name)


def _basis(row: Row) -> str | None:
    figures = Figures.of(row)
    return (
        figures.mfu_basis.removeprefix("of ")
        if figures.mfu is not None and figures.mfu_basis
        else None
    )


def _tflops(name: str) -> Any:
    """A figure of :class:`Figures` in FLOP/s, read in TFLOP/s."""

    def value(row: Row) -> float | None:
        figure = getattr(Figures.of(row), name)
        return None if figure is None else figure / 1e12

    return value


UTILIZATION: tuple[Column, ...] = (
    Column(
        "mfu",
        "MFU",
        _figure("mfu"),
        lambda value, row: mfu_percent(value),
        ".4f",
        numeric=True,
        show="present",
        definition="model FLOPs utilization: training FLOPs per sample x samples/s over the "
        "peak FLOP/s of every worker's device, in percent (-: the FLOPs or the peak are not "
        "known, or it came out above 100%, which the notes name)",
        short="training FLOP/s over the workers' peak (MFU of: which peak)",
        keep=1,
    ),
    Column(
        "peak_basis",
        "MFU of",
        _basis,
        show="varying",
        definition="the peak MFU is of: a CPU's measured matmul peak with the worker's threads, "
        "a GPU's datasheet dense peak, or peak_tflops as set",
        short="the peak MFU is of",
        keep=1,
        missing="",
    ),
    Column(
        "achieved_tflops",
        "TFLOP/s",
        _tflops("achieved_flops_s"),
        machine=".6g",
        show="exports",
        definition="training TFLOP/s of every worker together: train_flops_per_sample x "
        "samples/s / 1e12 (--json: achieved_flops_s, in FLOP/s)",
    ),
    Column(
        "peak_tflops_per_worker",
        "peak TFLOP/s",
        _tflops("peak_flops_per_worker"),
        machine=".6g",
        show="exports",
        definition="the peak of one worker's device in TFLOP/s, MFU's denominator over the "
        "workers (--json: peak_flops_per_worker, in FLOP/s)",
    ),
    Column(
        "train_flops_per_sample",
        "FLOPs/sample",
        cells.metric("train_flops_per_sample"),
        machine=".6g",
        show="exports",
        definition="FLOPs of training on one sample, forward and backward (a multiply-add is "
        "2; docs/metrics.md, FLOPs per sample)",
    ),
    Column(
        "rss_peak_bytes",
        "mem",
        _figure("rss_peak_bytes"),
        lambda value, row: memory_words(value),
        "d",
        numeric=True,
        show="present",
        definition="peak memory: the largest high-water resident set (VmHWM) of any training "
        "process over the measured windows, its libraries and framework included",
        short="peak resident memory of the largest training process",
        keep=2,
    ),
    Column(
        "device_peak_allocated_bytes",
        "GPU mem",
        _figure("device_peak_bytes"),
        lambda value, row: memory_words(value),
        "d",
        numeric=True,
        show="present",
        definition="on a GPU: the most memory the framework's allocator held in tensors on "
        "any worker's device over the measured windows",
        short="peak GPU memory in tensors, largest worker",
        keep=2,
    ),
)
