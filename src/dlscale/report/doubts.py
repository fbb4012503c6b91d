"""Why a scaled point's comparison with its baseline cannot be trusted, in words (issue 45: a
loaded baseline once made the finding claim "3.64x ... 182% efficient" at 2 workers).

A comparison is doubted, and the finding says so first instead of stating the ratio, when:

* either point's figures come from runs loaded in every window (no clean window was left);
* the process of a one-process point (a baseline) waited for a CPU more than the noise
  guard's limit of a window (``waited``: the kernel's run delay, which a worker pinned to a
  busy core shows). A point of several processes waits for its own processes' threads on a
  machine with as many cores as workers (Horovod's and TensorFlow's threads beside the
  compute), which is its measurement: there it is a note, not a doubt;
* either point's runs disagree so much that its 95% interval is wider than its mean, or the
  speedup's interval reaches below 0;
* the speedup is above the worker count beyond its interval (more than 100% efficient, which
  the same work split over more processes cannot be by itself);
* a sibling of the baseline runs faster than it by more than :data:`SIBLINGS_APART` times:
  another 1-worker point of the same framework, work and threads (an engine's one process does
  the plain loop's work and more, so a faster one says the baseline was measured slow; a slower
  one is that engine's overhead, seen in mahon2020's horovod-keras at 0.42x).

The comparison with the same machine as one worker (every core to one process) is doubted by
the same rules about its reference point (:func:`reference_doubts`), and then not stated.
"""

from __future__ import annotations

from typing import Any

from dlscale.metrics.scaling import baseline_key
from dlscale.metrics.units import CI95, THROUGHPUT, rate_of

Row = dict[str, Any]

SIBLINGS_APART = 1.5
"""How far apart two 1-worker points of one framework and the same work may run before the
baseline is doubted."""


def doubts(row: Row, base: Row | None, rows: list[Row], name: Any) -> list[str]:
    """Why ``row``'s ratio over ``base`` is not to be stated (empty: nothing known against it),
    each reason a few words about "its" (the point's) or "the baseline's" figures;
    ``name(row)`` names a sibling."""
    out: list[str] = []
    disagree = False
    for point, whose in ((base, "the baseline's"), (row, "its")):
        if point is not None:
            said, disagrees = _against(point, whose)
            out += said
            disagree = disagree or disagrees
    interval, workers = row.get("speedup_ci95"), row["config"]["workers"]
    if interval and interval[0] < 0 and not disagree:  # said already by the disagreement
        out.append(f"its speedup's interval reaches below 0 ({interval[0]:.2f})")
    if interval and interval[0] > workers:
        out.append(
            f"{row['speedup']:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}] is above {workers} "
            f"workers' {workers}x beyond its interval"
        )
    if base is not None:
        out += _siblings(base, rows, name)
    return out


def reference_doubts(reference: Row, interval: Any) -> list[str]:
    """Why the comparison with the same machine as one worker (``reference``, the ratio's
    ``interval``) is not to be stated: the reference's own figures, as a baseline's are
    judged, or a ratio whose interval reaches below 0."""
    out, disagree = _against(reference, "its")
    if interval and interval[0] < 0 and not disagree:
        out.append(f"the ratio's interval reaches below 0 ({interval[0]:.2f})")
    return out


def _against(point: Row, whose: str) -> tuple[list[str], bool]:
    """What is known against one point's figures, and whether its runs disagree."""
    out = []
    metrics = point.get("metrics") or {}
    if metrics.get("runs_loaded") and not point.get("runs_left_out"):
        load = metrics.get("outside_load_max") or 0.0
        out.append(f"{whose} runs loaded in every window ({load:.0%} outside load)")
    if metrics.get("waited") and len(point.get("layout") or [None]) == 1:
        waited = metrics["run_delay_max"]
        out.append(f"{whose} process waited for a CPU {waited:.0%} of a window")
    rate = rate_of(metrics)  # said in the point's unit: the comparison is unit-free
    mean, half = rate.of(metrics), rate.of(metrics, CI95)
    disagree = bool(mean and half is not None and half >= mean)
    if disagree:
        out.append(f"{whose} runs disagree (±{half:.1f} {rate.label} around {mean:.1f})")
    return out, disagree


def _siblings(base: Row, rows: list[Row], name: Any) -> list[str]:
    own = (base.get("metrics") or {}).get(THROUGHPUT)
    if not own:
        return []
    key, out = baseline_key(base), []
    for other in rows:
        samples_s = (other.get("metrics") or {}).get(THROUGHPUT)
        if (
            other is base
            or other["status"] != "completed"
            or other["config"]["workers"] != 1
            or other["config"].get("loader_only")
            or not samples_s
            or baseline_key(other) != key
        ):
            continue
        ratio = samples_s / own  # the same work: the same unit and samples
        if ratio > SIBLINGS_APART:
            label = rate_of(base.get("metrics")).label
            out.append(f"{name(other)} runs {ratio:.2f}x the baseline's {label}")
    return out
