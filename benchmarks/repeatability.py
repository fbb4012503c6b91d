"""Do the intervals hold from one study to the next? (issue 9, item 10)

Runs the same study K times (default: the default study, 5 times), each into its own results
directory, and asks for every point and every study k: does study k's 95% interval of the
point's throughput hold the mean of the other K-1 studies' means? Two intervals are checked
from the same runs, side by side:

  before  the interval over the windows of one run (what dlscale reported before repeats):
          each study's first run of the point, ``throughput_ci95_samples_s`` of that run
  after   the interval over the study's independent runs of the point (``--repeats``)

A 95% interval should hold another study's mean most of the time (it is an interval of the
mean, and the other mean has its own spread, so "most" means well above 80%; the goal is 90%).

The same question is asked of the speedup (a point's Fieller interval against the other
studies' mean speedup: the figure a scaling study reports), and of successive studies: do
study k's and study k+1's intervals of a point overlap (two runs of the default study agree
within their intervals)?

Usage: python benchmarks/repeatability.py [--studies 5] [--keep DIR] [-- extra dlscale run
       arguments]
Prints one line per point and study, and the coverages; exits 0 (a measurement, not a gate).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def run_study(results: Path, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "dlscale", "run", "--json", "--results", str(results), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"study failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")


def study_points(results: Path) -> dict[str, dict]:
    """Each point of one study's results directory, as this dlscale combines its runs."""
    from dlscale.metrics.scaling import add_scaling
    from dlscale.store import RunStore

    found = {}
    for point in add_scaling(RunStore(results).results()):
        if point["status"] != "completed":
            continue
        cfg, metrics = point["config"], point["metrics"]
        first = min(point["all_run_rows"], key=lambda r: r["config"].get("repeat_id", 0))
        name = f"{cfg['backend']} x{cfg['workers']} ({point['threads_per_worker']} thr)"
        found[name] = {
            "mean": metrics["throughput_samples_s"],
            "after": metrics["throughput_ci95_samples_s"] if point["interval"] == "runs" else None,
            "before_mean": first["metrics"]["throughput_samples_s"],
            "before": first["metrics"]["throughput_ci95_samples_s"],
            "runs": point["runs"],
            "left_out": len(point["runs_left_out"]),
            "noisy": metrics.get("noisy"),
            "speedup": point.get("speedup"),
            "speedup_ci95": point.get("speedup_ci95"),
        }
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep each study's results under this directory")
    parser.add_argument(
        "--analyze", type=Path, help="run nothing: analyze the studies kept in this directory"
    )
    parser.add_argument("extra", nargs="*", help="arguments for dlscale run (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.analyze or args.keep or Path(tmp)
        if args.analyze is None:
            for k in range(args.studies):
                started = time.monotonic()
                run_study(root / f"study{k}", args.extra)
                print(f"# study {k}: {time.monotonic() - started:.0f} s", flush=True)
        dirs = sorted(root.glob("study*"), key=lambda d: int(d.name.removeprefix("study")))
        points: dict[str, list[dict]] = defaultdict(list)  # name -> one entry per study
        for directory in dirs:
            for name, point in study_points(directory).items():
                points[name].append(point)
    return report(points)


def report(points: dict[str, list[dict]]) -> int:
    held: dict[str, list[bool]] = {"before": [], "after": [], "speedup": [], "successive": []}
    for name, studies in points.items():
        for k, mine in enumerate(studies):
            others = statistics.mean(s["mean"] for j, s in enumerate(studies) if j != k)
            for kind, centre in (("before", mine["before_mean"]), ("after", mine["mean"])):
                half = mine[kind]
                ok = half is not None and abs(centre - others) <= half
                held[kind].append(ok)
            speedups = [s["speedup"] for j, s in enumerate(studies) if j != k and s["speedup"]]
            interval = mine["speedup_ci95"]
            if speedups and mine["speedup"] not in (None, 1.0):  # not the baseline itself
                mean_speedup = statistics.mean(speedups)
                held["speedup"].append(
                    interval is not None and interval[0] <= mean_speedup <= interval[1]
                )
            if k + 1 < len(studies):
                after = studies[k + 1]
                a, b = mine["after"], after["after"]
                held["successive"].append(
                    a is not None and b is not None and abs(mine["mean"] - after["mean"]) <= a + b
                )
            print(
                f"{name:32} study {k}: runs {mine['runs']}, "
                f"{mine['mean']:.1f} ± {mine['after'] or float('nan'):.1f} img/s over runs, "
                f"first run {mine['before_mean']:.1f} ± {mine['before'] or float('nan'):.1f} "
                f"over windows; others' mean {others:.1f}"
                + ("; noisy" if mine["noisy"] else "")
                + (f"; {mine['left_out']} run(s) left out" if mine["left_out"] else "")
            )
    what = {
        "before": "throughput intervals over one run's windows held the other studies' mean",
        "after": "throughput intervals over runs held the other studies' mean",
        "speedup": "speedup intervals held the other studies' mean speedup",
        "successive": "pairs of successive studies' throughput intervals overlapped",
    }
    for kind, hits in held.items():
        print(
            f"{kind:10}: {sum(hits)}/{len(hits)} {what[kind]} "
            f"({100 * sum(hits) / max(len(hits), 1):.0f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
