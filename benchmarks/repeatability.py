"""Do the intervals hold from one study to the next? (issue 9, item 10)

Runs the same study K times (default: the default study, 5 times), each into its own results
directory, and asks for every point and every study k: does study k's 95% interval of the
point's throughput hold the mean of the other K-1 studies' means? Two intervals are checked
from the same runs, side by side:

  before  the interval over the windows of one run (what dlscale reported before repeats):
          each study's first run of the point, ``throughput_ci95_img_s`` of that run
  after   the interval over the study's independent runs of the point (``--repeats``)

A 95% interval should hold another study's mean most of the time (it is an interval of the
mean, and the other mean has its own spread, so "most" means well above 80%; the goal is 90%).

Usage: python benchmarks/repeatability.py [--studies 5] [-- extra dlscale run arguments]
Prints one line per point and study, and the two coverages; exits 0 (a measurement, not a gate).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def run_study(results: Path, extra: list[str]) -> list[dict]:
    cmd = [sys.executable, "-m", "dlscale", "run", "--json", "--results", str(results), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"study failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def point_name(record: dict) -> str:
    return f"{record['backend']} x{record['workers']} ({record['threads_per_worker']} thr)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="arguments for dlscale run (after --)")
    args = parser.parse_args()
    points: dict[str, list[dict]] = defaultdict(list)  # name -> one entry per study
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.studies):
            started = time.monotonic()
            records = run_study(Path(tmp) / f"study{k}", args.extra)
            took = time.monotonic() - started
            runs = [r for r in records if r["kind"] == "run"]
            for point in (r for r in records if r["kind"] == "point"):
                first = next(r for r in runs if r["run_id"] == point["run_ids"][0])
                points[point_name(point)].append(
                    {
                        "mean": point["throughput_img_s"],
                        "after": point["throughput_ci95_img_s"],
                        "before_mean": first["throughput_img_s"],
                        "before": first["throughput_ci95_img_s"],
                        "runs": point["runs"],
                        "noisy": point["noisy"],
                    }
                )
            print(f"# study {k}: {took:.0f} s", flush=True)
    held = {"before": [], "after": []}
    for name, studies in points.items():
        for k, mine in enumerate(studies):
            others = statistics.mean(s["mean"] for j, s in enumerate(studies) if j != k)
            for kind, centre in (("before", mine["before_mean"]), ("after", mine["mean"])):
                half = mine[kind]
                ok = half is not None and abs(centre - others) <= half
                held[kind].append(ok)
            print(
                f"{name:32} study {k}: runs {mine['runs']}, "
                f"{mine['mean']:.1f} ± {mine['after'] or float('nan'):.1f} img/s over runs, "
                f"first run {mine['before_mean']:.1f} ± {mine['before'] or float('nan'):.1f} "
                f"over windows; others' mean {others:.1f}" + ("; noisy" if mine["noisy"] else "")
            )
    for kind in ("before", "after"):
        hits = held[kind]
        print(
            f"{kind:6}: {sum(hits)}/{len(hits)} intervals held the other studies' mean "
            f"({100 * sum(hits) / max(len(hits), 1):.0f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
