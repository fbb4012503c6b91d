"""How far the engines are from this machine's limit: MFU (docs/metrics.md, "MFU") of the bare
loops and of dlscale's torch engines, on one peak, measured side by side in one run.

For ResNet-44 (batch 64) and gpt-mini (the gpt pairs' settings of run_all.py), each round runs:

  bare        the bare loop (benchmarks/bare_loop.py, bare_gpt.py), every core as its threads
  single      dlscale torch-single, 1 worker, every core
  ddp x2      dlscale torch-ddp, 2 workers of cores / 2 threads

MFU = training FLOPs per sample (dlscale.contract.flops, the figure every run stores) x
samples/s / (the CPU's measured fp32 matmul peak with the loop's threads x workers). The peaks
are measured afresh first, on the quiet machine (dlscale.runtime.peak, the cache every run
reads), so all three MFUs of a model are of the same peak. Prints each round and the median
MFU of each loop, and the engines' over the bare loop's.

Usage: python benchmarks/mfu.py [--rounds 3] [--only resnet44,gpt-mini]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from run_all import bare_gpt, bare_loop, dlscale, dlscale_gpt

from dlscale.contract.flops import training_flops
from dlscale.contract.models import MODELS
from dlscale.runtime.peak import measured_cpu_peak

LOOPS = ("bare", "single", "ddp x2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="resnet44,gpt-mini")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    half = max(1, cores // 2)
    peaks = {t: measured_cpu_peak(t, fresh=True).peak() for t in sorted({cores, half})}
    for peak in peaks.values():
        print(f"peak: {peak.flops_s / 1e9:.1f} GFLOP/s {peak.basis}", flush=True)
    results = Path(tempfile.mkdtemp(prefix="dlscale-mfu-")) / "results"
    models = [m.strip() for m in args.only.split(",") if m.strip()]
    status = 0
    for model in models:
        flops = training_flops(MODELS.get(model), {})
        if flops is None:
            sys.exit(f"no FLOPs for {model}")
        print(f"{model}: {flops.per_sample / 1e9:.3f} GFLOP per sample ({flops.rule})")
        loops = _loops(model, results, cores, half)
        mfus: dict[str, list[float]] = {name: [] for name in LOOPS}
        for round_ in range(args.rounds):
            shown = []
            for name, (run, workers, threads) in loops.items():
                samples_s = run()
                mfu = flops.per_sample * samples_s / (peaks[threads].flops_s * workers)
                mfus[name].append(mfu)
                shown.append(f"{name} {samples_s:.1f}/s MFU {mfu:.1%}")
            print(f"  round {round_ + 1}: " + "; ".join(shown), flush=True)
        medians = {name: statistics.median(values) for name, values in mfus.items()}
        print(
            "  median MFU: "
            + "; ".join(f"{name} {value:.1%}" for name, value in medians.items())
            + f"; single / bare {medians['single'] / medians['bare']:.3f}"
            + f"; ddp x2 / bare {medians['ddp x2'] / medians['bare']:.3f}",
            flush=True,
        )
        if any(value > 1 for value in medians.values()):
            print(f"  an MFU above 100%: the FLOPs or the peak of {model} are wrong")
            status = 1
    return status


def _loops(
    model: str, results: Path, cores: int, half: int
) -> dict[str, tuple[Callable[[], float], int, int]]:
    """Each loop: how it runs (samples/s), its workers and each worker's threads."""
    if model == "gpt-mini":
        return {
            "bare": (lambda: bare_gpt(1, cores), 1, cores),
            "single": (lambda: dlscale_gpt(results, "torch-single", 1), 1, cores),
            "ddp x2": (lambda: dlscale_gpt(results, "torch-ddp", 2), 2, half),
        }

    def point(backend: str, workers: int) -> Callable[[], float]:
        return lambda: dlscale(
            results, "--backend", backend, "--model", model, "--workers", str(workers)
        )

    return {
        "bare": (lambda: bare_loop(model, cores), 1, cores),
        "single": (point("torch-single", 1), 1, cores),
        "ddp x2": (point("torch-ddp", 2), 2, half),
    }


if __name__ == "__main__":
    sys.exit(main())
