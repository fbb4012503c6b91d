"""The results as a table: :func:`load_results` (also ``dlscale.load_results``), every run or
point of a results directory as one flat row with its metrics and its scaling."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlscale.contract.facts import FrameworkFacts
from dlscale.contract.plugins import load_plugins
from dlscale.contract.text import excerpt
from dlscale.metrics.figures import Figures
from dlscale.metrics.scaling import SCALING_KEYS, add_scaling
from dlscale.metrics.units import sample_unit, units_per_sample
from dlscale.store.results import DEFAULT_ROOT, RunStore

if TYPE_CHECKING:
    import pandas as pd


def load_results(path: Path | str = DEFAULT_ROOT, *, per: str = "run") -> pd.DataFrame:
    """All results in a results directory as a pandas DataFrame.

    ``per="run"`` (default): one row per run, with its own metrics and its own ratios over its
    point's baseline (docs/metrics.md, "Speedup and efficiency": per run, without intervals);
    ``per="point"``: one row per point, its runs combined (docs/metrics.md, "Runs and
    points"): the throughput is the mean over runs and ``throughput_ci95_samples_s`` its interval
    over runs (``interval`` says ``runs``, or ``windows`` for a point with one run).

    Columns: run_id (a point's: its first run's), status, error, the resolved config keys,
    every metric of docs/metrics.md (``None``/NaN where it does not apply), runs, run_ids,
    runs_left_out (runs loaded in every window, not in the point's figures),
    interval, speedup with speedup_ci95_low/high, efficiency with efficiency_ci95_low/high,
    baseline and baseline_run_ids (the 1-worker point with the same threads per worker),
    machine_speedup (over the whole machine as one worker, when measured), threads_per_worker,
    oversubscribed, framework_version and gpus (the framework's version and the GPUs its
    workers saw, read alike for every framework), throughput_units_s (the throughput in the
    run's unit, ``sample_unit``: images/s, or tokens/s = samples/s x ``units_per_sample``),
    achieved_flops_s, mfu and mfu_missing (docs/metrics.md, "MFU"), and environment columns
    (hostname, cpu_model, torch_version, dlscale_version, git_commit).
    """
    import pandas as pd

    if per not in ("run", "point"):
        raise ValueError(f"per must be 'run' or 'point', got {excerpt(per)}")
    load_plugins()  # a plug-in's stored options and reference flags read like the built-ins

    rows = add_scaling(RunStore(path).results(), per=per)
    return pd.DataFrame([flatten(row) for row in rows])


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """One flat record of a result: config keys, scalar metrics, scaling and environment."""
    config = row["config"]
    metrics = row.get("metrics") or {}
    env = row.get("environment") or {}
    flat: dict[str, Any] = {
        "run_id": row["run_id"],
        "status": row["status"],
        "error": row.get("error"),
        "framework": row.get("framework"),
    }
    flat.update(config)
    flat["batch_size_per_worker"] = row.get("batch_size_per_worker")
    flat["global_batch_size"] = row.get("global_batch_size")
    flat["threads_per_worker"] = row.get("threads_per_worker") or config.get("threads_per_worker")
    flat["oversubscribed"] = row.get("oversubscribed")
    flat.update({k: v for k, v in metrics.items() if not isinstance(v, list | dict)})
    samples = metrics.get("throughput_samples_s")  # in the run's unit (img/s, tok/s)
    units = units_per_sample(metrics)
    flat["sample_unit"] = sample_unit(metrics) or "image"
    flat["units_per_sample"] = units
    flat["throughput_units_s"] = None if samples is None else samples * units
    figures = Figures.of(row)  # docs/metrics.md, "MFU"
    flat["achieved_flops_s"] = figures.achieved_flops_s
    flat["mfu"] = figures.mfu
    flat["mfu_missing"] = figures.mfu_missing
    for key in SCALING_KEYS:
        value = row.get(key)
        if key.endswith("_ci95"):
            flat[f"{key}_low"], flat[f"{key}_high"] = value if value else (None, None)
        else:
            flat[key] = value
    for key in ("runs", "run_ids", "runs_left_out", "interval"):
        flat[key] = row.get(key)
    for key in ("hostname", "cpu_model", "torch_version", "dlscale_version", "git_commit"):
        flat[key] = env.get(key)
    facts: FrameworkFacts = row["facts"]  # the same columns for every framework
    flat["framework_version"] = facts.version
    flat["gpus"] = ", ".join(facts.gpus) or None
    flat["started_at"] = row.get("started_at")
    flat["finished_at"] = row.get("finished_at")
    return flat
