"""The same dlscale point under each memory allocator (the ``allocator`` key), interleaved:
every round runs each allocator once, the order reversed every other round, so the machine's
drift falls on all of them alike.

  point  torch-single, resnet44, synthetic, batch 64, 1 worker x 2 threads, 3 windows of 8 steps
         after 3 warm-up steps (benchmarks/run_all.py's)

Per allocator it prints the median throughput, the run-to-run spread (coefficient of variation
of the runs' throughputs, and their min-max) and the median minor page faults per measured step
(when the results carry ``page_faults_per_step``); over all runs, then, when some were flagged
``noisy`` (other processes loaded the machine), over the others. Results: docs/benchmarks.md.

Usage: python benchmarks/allocator.py [--rounds 5] [--allocators system,jemalloc] [--model resnet44]
       python benchmarks/allocator.py --summarize WORK   (the tables of a finished --work WORK)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

from run_all import STEPS, WARMUP, WINDOWS, dlscale

ALLOCATORS = ("system", "glibc-tuned", "jemalloc", "tcmalloc")  # RunConfig's choices


def run_once(work: Path, study: Path, allocator: str, round_index: int) -> dict[str, float]:
    """One run in its own results directory; its throughput and page faults per step."""
    results = work / f"{allocator}-{round_index}"
    dlscale(results, str(study), "--set", f"allocator={allocator}")
    return stored_run(results)


def stored_run(results: Path) -> dict[str, float]:
    (stored,) = results.glob("*/result.json")
    metrics = json.loads(stored.read_text()).get("metrics") or {}
    faults = metrics.get("page_faults_per_step")
    return {
        "throughput_samples_s": float(metrics["throughput_samples_s"]),
        "page_faults_per_step": float(faults) if faults is not None else float("nan"),
        # other processes' load during the run, where the results record it
        "noisy": float(bool(metrics.get("noisy"))),
    }


def summary(runs: list[dict[str, float]]) -> str:
    rates = [run["throughput_samples_s"] for run in runs]
    spread = statistics.stdev(rates) / statistics.mean(rates) if len(rates) > 1 else float("nan")
    faults = [run["page_faults_per_step"] for run in runs]
    faults = [value for value in faults if not math.isnan(value)]
    faults_text = f"{statistics.median(faults):10,.0f}" if faults else f"{'-':>10}"
    return (
        f"{statistics.median(rates):9.1f} {100 * spread:6.1f}% "
        f"{min(rates):8.1f}-{max(rates):<8.1f} {faults_text}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--allocators", default=",".join(ALLOCATORS))
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, help="directory for the runs (default: a new temp)")
    parser.add_argument(
        "--summarize", type=Path, metavar="WORK", help="print the tables of a finished --work"
    )
    args = parser.parse_args()
    allocators = [name for name in args.allocators.split(",") if name]
    if args.summarize:
        print_tables(
            {
                name: [
                    stored_run(args.summarize / f"{name}-{index}") for index in range(args.rounds)
                ]
                for name in allocators
            }
        )
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="dlscale-bench-allocator-"))
    work.mkdir(parents=True, exist_ok=True)
    study = work / "point.toml"
    # A study file pins the point: the default study would add its own grid.
    study.write_text(
        'name = "allocator"\nbackend = "torch-single"\n'
        f'model = "{args.model}"\ndataset = "synthetic"\nworkers = 1\nbatch_size = 64\n'
        f"threads_per_worker = {args.threads}\n"
    )
    print(
        f"# torch-single {args.model} synthetic, batch 64, 1 worker x {args.threads} threads, "
        f"{WINDOWS} windows x {STEPS} steps after {WARMUP} warm-up, {args.rounds} rounds; "
        f"results under {work}",
        flush=True,
    )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in allocators}
    for round_index in range(args.rounds):
        order = allocators if round_index % 2 == 0 else allocators[::-1]
        for name in order:
            run = run_once(work, study, name, round_index)
            runs[name].append(run)
            print(
                f"round {round_index} {name:12} {run['throughput_samples_s']:8.1f} img/s "
                f"{run['page_faults_per_step']:10,.0f} faults/step"
                + ("  (noisy: other load on the machine)" if run["noisy"] else ""),
                flush=True,
            )
    print_tables(runs)
    return 0


def print_tables(runs: dict[str, list[dict[str, float]]]) -> None:
    print_table("all runs", runs)
    quiet = {name: [run for run in done if not run["noisy"]] for name, done in runs.items()}
    if any(len(quiet[name]) != len(done) for name, done in runs.items()):
        # a run during which other processes loaded the machine measures them, not the allocator
        print_table("runs without other load on the machine (noisy = false)", quiet)


def print_table(title: str, runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"# {title}")
    header = f"{'img/s p50':>9} {'CV':>7} {'min-max img/s':^17} {'faults/step':>10}"
    print(f"{'allocator':12} {'runs':>4} {header}")
    for name, done in runs.items():
        print(f"{name:12} {len(done):4} {summary(done) if done else '-'}")


if __name__ == "__main__":
    sys.exit(main())
