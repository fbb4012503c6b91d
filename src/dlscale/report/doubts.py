"""Why a scaled point's comparison with its baseline cannot be trusted, in words (issue 45: a
loaded baseline once made the finding claim "3.64x ... 182% efficient" at 2 workers).

A comparison is doubted, and the finding says so first instead of stating the ratio, when:

* a process of either point waited for a CPU more than the noise guard's limit of a window
  (``waited``: the kernel's run delay, which a worker pinned to a busy core shows and the
  machine's load does not);
* either point's runs disagree so much that its 95% interval is wider than its mean;
* the speedup is above the worker count beyond its interval (more than 100% efficient, which
  the same work split over more processes cannot be by itself);
* the baseline's siblings disagree with it: another 1-worker point of the same framework, with
  the same work and threads, runs more than :data:`SIBLINGS_APART` times faster or slower (a
  DDP process alone does the same work as the plain loop: the baseline was measured wrong).
"""

from __future__ import annotations

from typing import Any

from dlscale.metrics.scaling import baseline_key

Row = dict[str, Any]

SIBLINGS_APART = 1.5
"""How far apart two 1-worker points of one framework and the same work may run before the
baseline is doubted."""


def doubts(row: Row, base: Row | None, rows: list[Row], name: Any) -> list[str]:
    """Why ``row``'s ratio over ``base`` is not to be stated (empty: nothing known against it);
    ``name(row)`` names a point."""
    out = []
    for point in (base, row) if base is not None else (row,):
        metrics = point.get("metrics") or {}
        if metrics.get("waited"):
            out.append(
                f"the processes of {name(point)} waited for a CPU {metrics['run_delay_max']:.0%} "
                "of a window"
            )
        mean, half = metrics.get("throughput_img_s"), metrics.get("throughput_ci95_img_s")
        if mean and half is not None and half >= mean:
            out.append(f"the runs of {name(point)} disagree (±{half:.1f} img/s around {mean:.1f})")
    interval, workers = row.get("speedup_ci95"), row["config"]["workers"]
    if interval and interval[0] > workers:
        out.append(
            f"{row['speedup']:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}] is above {workers} "
            f"workers' {workers}x beyond its interval"
        )
    if base is not None:
        out += _siblings(base, rows, name)
    return out


def _siblings(base: Row, rows: list[Row], name: Any) -> list[str]:
    own = (base.get("metrics") or {}).get("throughput_img_s")
    if not own:
        return []
    key, out = baseline_key(base), []
    for other in rows:
        img_s = (other.get("metrics") or {}).get("throughput_img_s")
        if (
            other is base
            or other["status"] != "completed"
            or other["config"]["workers"] != 1
            or other["config"].get("loader_only")
            or not img_s
            or baseline_key(other) != key
        ):
            continue
        ratio = img_s / own
        if ratio > SIBLINGS_APART or ratio < 1 / SIBLINGS_APART:
            out.append(f"{name(other)} runs {ratio:.2f}x the baseline's img/s")
    return out
