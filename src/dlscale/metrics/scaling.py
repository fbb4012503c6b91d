"""Speedup and parallel efficiency of a point against its 1-worker baseline, with intervals.

speedup(N) = throughput(N) / throughput(baseline) and efficiency(N) = speedup(N) / N, taken
over points (runs combined, :mod:`dlscale.metrics.points`), each with a 95% interval by
Fieller's theorem on the two points' samples (:func:`dlscale.metrics.stats.ratio_ci95`).

**The baseline rule** (deterministic; docs/metrics.md): a point's baseline is the 1-worker point
that has

1. the same framework (TensorFlow's speedup is over TensorFlow),
2. every setting equal except the backend, its options, the worker count and run labels, and
3. the same per-worker resources: the threads each process really got (the result's
   ``threads_per_worker``, whether set or defaulted) and the device kind,

and among those the framework's reference backend (torch-single: no wrapper, so a distributed
wrapper's own cost shows as efficiency < 1 at one worker), the one whose options agree with the
point's where both declare them (horovod-mxnet, MKLDNN off, is over mxnet-single with
``mkldnn = false`` where the study has both), else the same backend with the same options.
Where no 1-worker point has the same threads (results of dlscale before the study-wide thread
budget), the one with the most threads is taken by the same preference and the row says so
(``baseline_threads_differ``; tables: "baseline threads differ"). The baseline is named in
every row (``baseline``). Weak scaling keeps the per-worker batch, strong scaling the global
batch: both are ``batch_size`` in the config.

**The whole-machine reference** answers another question: how the point compares with the
same machine used as one worker with every core. It is the 1-worker reference-backend point
with the same settings and the most threads per worker, when that is more than the point's
baseline has (``machine_speedup``, ``machine_baseline``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from dlscale.contract.backends import BACKENDS
from dlscale.contract.declared_options import scale_keys
from dlscale.contract.result import Result
from dlscale.contract.run_config import NOT_MATCHED_KEYS
from dlscale.metrics.points import combine, samples, window_throughputs
from dlscale.metrics.stats import ratio_ci95

Row = dict[str, Any]
_NOT_IN_BASELINE_KEY = ("backend", "workers", "threads_per_worker", *NOT_MATCHED_KEYS)
SCALING_KEYS = (
    "speedup",
    "speedup_ci95",
    "efficiency",
    "efficiency_ci95",
    "baseline",
    "baseline_run_ids",
    "machine_speedup",
    "machine_speedup_ci95",
    "machine_baseline",
    "baseline_threads_differ",
    "tta_speedup",
    "statistical_efficiency",
    "machine_reference",
)
"""What :func:`add_scaling` adds to a row (``None`` where it does not apply)."""


def threads(row: Row) -> Any:
    """The threads each process of the run really had (set, or the launcher's default)."""
    return row.get("threads_per_worker") or row["config"].get("threads_per_worker")


def baseline_key(row: Row) -> tuple[tuple[str, Any], ...]:
    """What a point and its 1-worker baseline share: the framework, every key except the
    backend, its options, the worker count and run labels, and the threads per worker."""
    return (*machine_key(row), ("threads", threads(row)))


def machine_key(row: Row) -> tuple[tuple[str, Any], ...]:
    """:func:`baseline_key` without the threads: the points of the same work on any share of
    the machine (on any number of nodes: a 1-worker point runs on one)."""
    backend_options = set((row.get("config_options") or {}).get("backend", {}))
    skip = {*_NOT_IN_BASELINE_KEY, *backend_options, *scale_keys()}
    key = sorted((k, v) for k, v in row["config"].items() if k not in skip)
    return (("framework", row.get("framework")), *key)


def add_scaling(results: Sequence[Result], *, per: str = "point") -> list[Row]:
    """Points (``per="point"``: runs combined) or runs (``per="run"``: each run's own ratios
    over its point's baseline and whole-machine reference, without intervals; its point's
    ``runs``, ``run_ids``, ``runs_left_out``, ``baseline`` and ``baseline_run_ids``), as rows
    (:meth:`Result.row`) with the scaling fields of :data:`SCALING_KEYS` filled in."""
    points = combine([result.row() for result in results])
    candidates: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    machines: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for point in points:
        if _usable(point) and point["config"]["workers"] == 1:
            candidates[baseline_key(point)].append(point)
            if _is_reference(point):
                machines[machine_key(point)].append(point)
    against: dict[int, tuple[Row | None, Row | None]] = {}  # each point's baseline, machine
    references: list[Row] = []
    for point in points:
        point.update(dict.fromkeys(SCALING_KEYS))
        if not _usable(point):
            continue
        base = _pick_baseline(candidates.get(baseline_key(point), []), point)
        if base is None:  # none with the same threads: the most threads, marked as such
            others = [c for k, cs in candidates.items() if k[:-1] == machine_key(point) for c in cs]
            base = _pick_baseline(sorted(others, key=lambda p: -(threads(p) or 0)), point)
            if base is not None:
                point["baseline_threads_differ"] = True
        if base is not None:
            _fill(point, base)
        machine = max(
            machines.get(machine_key(point), []), key=lambda p: threads(p) or 0, default=None
        )
        if machine is not None and (threads(machine) or 0) > (threads(base or point) or 0):
            ratio, interval = throughput_ratio(point, machine)
            point["machine_speedup"], point["machine_speedup_ci95"] = ratio, interval
            point["machine_baseline"] = describe(machine)
            references.append(machine)  # the row others are measured against
        else:
            machine = None
        against[id(point)] = (base, machine)
    for reference in references:
        reference["machine_reference"] = True
    if per == "point":
        return points
    runs: list[Row] = []
    for point in points:
        shared = {
            k: point[k] for k in (*SCALING_KEYS, "runs", "run_ids", "runs_left_out", "interval")
        }
        base, machine = against.get(id(point), (None, None))
        every = point.get("all_run_rows") or [point]  # a run that did not complete: itself
        runs.extend(_own_ratios({**run, **shared}, base, machine) for run in every)
    return runs


def _own_ratios(run: Row, base: Row | None, machine: Row | None) -> Row:
    """A run's row with its own figures over its point's baseline and whole-machine reference
    (docs/metrics.md, "Speedup and efficiency", per run): its throughput over their means, with
    no interval (one run is one sample); its throughput's interval is over its windows. A run
    that did not complete keeps its point's (empty) fields."""
    if not _usable(run):
        return run
    run["interval"] = "windows"
    throughput = run["metrics"]["throughput_samples_s"]
    if base is not None:
        ratio = throughput / base["metrics"]["throughput_samples_s"]
        workers = run["config"]["workers"]
        run.update(speedup=ratio, speedup_ci95=None, efficiency=ratio / workers)
        run["efficiency_ci95"] = None
        run.update(_accuracy_ratios(run["metrics"], base["metrics"]))
    if machine is not None:
        run["machine_speedup"] = throughput / machine["metrics"]["throughput_samples_s"]
        run["machine_speedup_ci95"] = None
    return run


def describe(point: Row) -> str:
    """How tables name a baseline: backend, workers and threads per worker."""
    cfg = point["config"]
    return f"{cfg['backend']} x{cfg['workers']}, {threads(point)} thr"


def _usable(point: Row) -> bool:
    return point["status"] == "completed" and bool(point["metrics"].get("throughput_samples_s"))


def _fill(point: Row, base: Row) -> None:
    workers = point["config"]["workers"]
    if base is point:  # its own baseline: exactly 1 by definition
        ratio, interval = 1.0, None
    else:
        ratio, interval = throughput_ratio(point, base)
    point["speedup"], point["speedup_ci95"] = ratio, interval
    point["efficiency"] = ratio / workers
    point["efficiency_ci95"] = None if interval is None else [v / workers for v in interval]
    point["baseline"] = describe(base)
    point["baseline_run_ids"] = list(base["run_ids"])
    point.update(_accuracy_ratios(point["metrics"], base["metrics"]))


def _accuracy_ratios(metrics: dict[str, Any], base_metrics: dict[str, Any]) -> Row:
    """``tta_speedup`` and ``statistical_efficiency`` of these metrics over the baseline's
    (``None`` where either side lacks the figure)."""
    out: Row = {"tta_speedup": None, "statistical_efficiency": None}
    if metrics.get("time_to_accuracy_s") and base_metrics.get("time_to_accuracy_s"):
        out["tta_speedup"] = base_metrics["time_to_accuracy_s"] / metrics["time_to_accuracy_s"]
    if metrics.get("epochs_to_accuracy") and base_metrics.get("epochs_to_accuracy"):
        out["statistical_efficiency"] = (
            base_metrics["epochs_to_accuracy"] / metrics["epochs_to_accuracy"]
        )
    return out


def throughput_ratio(point: Row, base: Row) -> tuple[float, list[float] | None]:
    """Throughput ratio of two points and its Fieller interval, over runs when both have two
    or more, else over the windows of each (the interval of a single run's windows)."""
    runs_point, runs_base = point.get("run_rows") or [point], base.get("run_rows") or [base]
    mine, kind_mine = samples(runs_point)
    theirs, kind_theirs = samples(runs_base)
    if kind_mine != kind_theirs:  # one side has a single run: windows against windows
        mine, theirs = window_throughputs(runs_point), window_throughputs(runs_base)
    ratio, interval = ratio_ci95(mine, theirs)
    ratio = point["metrics"]["throughput_samples_s"] / base["metrics"]["throughput_samples_s"]
    return ratio, None if interval is None else list(interval)


def _pick_baseline(options: list[Row], point: Row) -> Row | None:
    options = [o for o in options if _is_reference(o) or _same_strategy(o, point)]
    if not options:
        return None
    mine = _backend_options(point)

    def differing(option: Row) -> int:
        """Options the candidate shares with the point but sets otherwise (a reference run
        with mkldnn=false is horovod-mxnet's baseline, not one with mkldnn=true)."""
        theirs = _backend_options(option)
        return sum(1 for key in mine.keys() & theirs.keys() if mine[key] != theirs[key])

    return min(options, key=lambda option: (0 if _is_reference(option) else 1, differing(option)))


def _is_reference(row: Row) -> bool:
    """Stored with the result (a reader may not have the backend's plug-in loaded); results
    written before it was stored ask the registry."""
    if row.get("reference") is not None:
        return bool(row["reference"])
    backend = row["config"]["backend"]
    return backend in BACKENDS and BACKENDS.get(backend).reference


def _same_strategy(option: Row, row: Row) -> bool:
    return option["config"]["backend"] == row["config"]["backend"] and _backend_options(
        option
    ) == _backend_options(row)


def _backend_options(row: Row) -> dict[str, Any]:
    return dict((row.get("config_options") or {}).get("backend", {}))
