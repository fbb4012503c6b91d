"""What MFU needs from inside a worker, read once by the first training rank and recorded in
its ``environment`` record: the peak FLOP/s of one worker's device and, for a model nothing
declares FLOPs for, the FLOPs the worker counted (docs/metrics.md, "MFU").

The peak is the node's, so it is read on the node, never on the machine dlscale was started
from: a CPU's is measured by a matrix-multiply microbenchmark with the worker's own thread
count (cached per machine, :mod:`dlscale.runtime.peak`), a GPU's is its datasheet figure found
by its exact name (:mod:`dlscale.contract.gpu_peaks`), and ``peak_tflops`` overrides both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dlscale.contract.facts import gpu_names
from dlscale.contract.gpu_peaks import compute_dtype
from dlscale.runtime.peak import peak_of

if TYPE_CHECKING:
    from dlscale.contract.engine import Engine
    from dlscale.runtime.context import WorkerContext


def utilization_facts(
    ctx: WorkerContext, engine: Engine, framework_facts: dict[str, Any]
) -> dict[str, Any]:
    """The :class:`~dlscale.contract.records.Environment` fields ``peak``, ``peak_missing``
    and ``flops`` of this worker."""
    cfg = ctx.config
    dtype = engine.compute_dtype or compute_dtype(cfg.precision, None)
    try:
        peak, missing = peak_of(
            cfg.device, list(gpu_names(framework_facts)), ctx.threads, dtype, cfg.peak_tflops
        )
    except (ImportError, OSError, RuntimeError, ValueError) as error:  # the run goes on
        peak, missing = None, f"no MFU: the device's peak could not be read here ({error})"
    replicas = ctx.process.replicas
    if peak is not None and peak.source == "measured" and replicas > 1:
        # MirroredStrategy on a CPU: one process's threads train several replicas, and MFU's
        # denominator is one worker's (a replica's) share of them
        peak = replace(
            peak, flops_s=peak.flops_s / replicas, basis=f"{peak.basis}, / {replicas} replicas"
        )
    return {
        "peak": peak.to_dict() if peak is not None else {},
        "peak_missing": missing,
        "flops": engine.model_flops(),
    }
