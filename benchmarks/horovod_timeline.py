"""Where Horovod's time goes in a run: its timeline summed by activity.

Horovod's timeline (``--set horovod_timeline=true``; the run directory's
``horovod-timeline.json``, Chrome trace format, written by rank 0) nests begin/end spans per
tensor: NEGOTIATE_ALLREDUCE (waiting until every rank has the tensor ready), then ALLREDUCE with
its parts (MEMCPY_IN_FUSION_BUFFER, GLOO_ALLREDUCE or MPI_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER).
This prints, per run directory, the wall milliseconds per all-reducing step during which some
tensor was in each activity (tensors fused into one operation share its time), the disjoint
stretches of it per step (about its operations: fused tensors count once) and the spans per
step (one per tensor), beside the run's median step times with and without the all-reduce, so
two settings (compression none/fp16, cycle_ms 1/5/20) can be compared by what Horovod itself
did. The timeline covers every all-reducing step of the run (warm-up, measured and probe).

Usage: python benchmarks/horovod_timeline.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from dlscale.frameworks.horovod.timeline import read_events


def wall_us(spans: list[tuple[float, float]]) -> tuple[float, int]:
    """Microseconds covered by at least one of the spans (tensors fused into one operation
    share its wall time), and the number of disjoint stretches they form (about the number of
    operations, fused tensors counting once)."""
    covered, end, stretches = 0.0, float("-inf"), 0
    for begin, finish in sorted(spans):
        if begin > end:
            stretches += 1
        if finish > end:
            covered += finish - max(begin, end)
            end = finish
    return covered, stretches


def activity_totals(
    events: list[dict],
) -> tuple[dict[str, tuple[float, int]], dict[str, int], int]:
    """Per activity: the wall microseconds during which some tensor was in it and its disjoint
    stretches (:func:`wall_us`), and its span count (one per tensor), each E paired with the B
    it closes on the same tensor (``pid``); and the number of all-reducing steps: the most
    ALLREDUCE spans of any one tensor (each step reduces each gradient once)."""
    open_spans: dict[int, list[tuple[str, float]]] = defaultdict(list)
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    count: dict[str, int] = defaultdict(int)
    per_tensor: dict[int, int] = defaultdict(int)
    for event in events:
        phase, pid = event.get("ph"), event.get("pid")
        if phase == "B":
            open_spans[pid].append((event["name"], float(event["ts"])))
        elif phase == "E" and open_spans[pid]:
            name, begin = open_spans[pid].pop()
            spans[name].append((begin, float(event["ts"])))
            count[name] += 1
            per_tensor[pid] += name == "ALLREDUCE"
    total = {name: wall_us(intervals) for name, intervals in spans.items()}
    return total, count, max(per_tensor.values(), default=0)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for run_dir in map(Path, argv):
        result = json.loads((run_dir / "result.json").read_text())
        config, metrics = result["config"], result["metrics"]
        total, count, steps = activity_totals(read_events(run_dir / "horovod-timeline.json"))
        allreduce_steps = max(steps, 1)
        backend = config["options"]["backend"]
        print(
            f"{run_dir.name}: compression {backend.get('compression')}, "
            f"cycle_ms {backend.get('cycle_ms')}, step p50 {metrics['step_time_p50_ms']:.0f} ms, "
            f"compute-only p50 {metrics['step_time_nosync_p50_ms']:.0f} ms, "
            f"{steps} all-reducing steps"
        )
        for name in sorted(total, key=lambda n: total[n][0], reverse=True):
            wall, stretches = total[name]
            print(
                f"  {name:28s} {wall / 1000 / allreduce_steps:9.1f} ms/step "
                f"{stretches / allreduce_steps:7.1f} stretches/step "
                f"{count[name] / allreduce_steps:7.1f} spans/step"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
