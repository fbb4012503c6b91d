"""The facts MFU is derived from, stored with every run (docs/metrics.md, "MFU"): the model's
training FLOPs per sample and the peak FLOP/s of one worker's device, each with its basis, or
one line saying why the run has none. The figure itself is derived at read time
(:mod:`dlscale.metrics.figures`), never stored.

FLOPs per sample come from the model's declaration, the same figure for every framework's
twin (:func:`dlscale.contract.flops.training_flops`), or from the worker that counted a user's
torch model; the peak comes from the first training rank, which read it on its node
(:mod:`dlscale.runtime.utilization`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlscale.contract.flops import TrainingFlops, training_flops
from dlscale.contract.models import MODELS
from dlscale.contract.records import Environment
from dlscale.contract.run_config import RunConfig
from dlscale.contract.shapes import METRICS
from dlscale.contract.text import excerpt
from dlscale.runtime.peak import Peak
from dlscale.runtime.samples import model_outputs
from dlscale.store.validate import without_problems

FLOPS_KEYS = (
    "train_flops_per_sample",
    "train_flops_per_sample_causal",
    "flops_rule",
    "flops_source",
)
PEAK_KEYS = ("peak_flops_per_worker", "peak_basis", "peak_source")


def utilization_metrics(config: RunConfig, worker: Environment | None) -> dict[str, Any]:
    """The run's FLOPs and peak facts (:data:`FLOPS_KEYS`, :data:`PEAK_KEYS`) and
    ``mfu_missing``: why its MFU cannot be stated (``None`` where it can)."""
    out: dict[str, Any] = dict.fromkeys((*FLOPS_KEYS, *PEAK_KEYS, "mfu_missing"))
    flops, no_flops = model_flops(config, worker)
    if flops is not None:
        out.update(
            train_flops_per_sample=float(flops.per_sample),
            train_flops_per_sample_causal=None
            if flops.causal_per_sample is None
            else float(flops.causal_per_sample),
            flops_rule=flops.rule,
            flops_source=flops.source,
        )
    peak, no_peak = worker_peak(worker)
    if peak is not None:
        out.update(peak_flops_per_worker=peak[0], peak_basis=peak[1], peak_source=peak[2])
    out["mfu_missing"] = no_flops or no_peak
    # a fact no reader would accept (a damaged cache's peak, a model counted at 0 FLOPs) is
    # not stored: the run completes without MFU, saying which
    kept = without_problems(out, METRICS)
    for group in (FLOPS_KEYS, PEAK_KEYS):
        bad = [k for k in group if out[k] is not None and kept[k] is None]
        if bad:
            kept.update(dict.fromkeys(group))
            kept["mfu_missing"] = f"no MFU: {bad[0]} = {excerpt(out[bad[0]])} is no figure"
    return kept


def model_flops(
    config: RunConfig, worker: Environment | None
) -> tuple[TrainingFlops | None, str | None]:
    """The training FLOPs per sample of the run's model, or why none are known."""
    if config.loader_only:
        return None, "no MFU: the input pipeline was timed alone (loader_only), nothing trained"
    spec = MODELS.get(config.model)
    if spec.builtin:
        outputs = model_outputs(config)  # the classes or vocabulary it is built with
        options = {**config.options, "image_size": config.image_size}
        if spec.sample == "tokens":
            options["vocab_size"] = outputs
        try:
            flops = training_flops(spec, options, num_classes=outputs)
        except ValueError as error:
            return None, f"no MFU: {error}"
        if flops is not None:
            return flops, None
    counted: Mapping[str, Any] = worker.flops if worker is not None else {}
    found = TrainingFlops.from_dict(counted)
    if found is not None:
        return found, None
    why = counted.get("missing") if isinstance(counted.get("missing"), str) else None
    return None, why or (
        f"no MFU: the FLOPs of model {config.model} are not known (a script's own loop, or a "
        "model no counter could count)"
    )


def worker_peak(worker: Environment | None) -> tuple[tuple[float, str, str] | None, str | None]:
    """``(flops_s, basis, source)`` of one worker's device as its first training rank read
    it, or why there is none."""
    if worker is None:
        return None, "no MFU: no training rank recorded its environment"
    peak = Peak.from_dict(worker.peak)
    if peak is not None:
        return (peak.flops_s, peak.basis, peak.source), None
    if isinstance(worker.peak_missing, str) and worker.peak_missing:
        return None, worker.peak_missing
    return None, "no MFU: the workers recorded no peak (a run stored before dlscale read one)"
