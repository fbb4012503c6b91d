"""CIFAR-10 files against synthetic data in the same training step, side by side, counted.

Each round starts one fresh process per data path (the order flips every round) and, with
several ``--allocators``, per memory allocator. A process does what a torch-single worker does:
the data set's loader (``cifar10`` reads the official binary files, ``synthetic`` draws one
batch), the torch adapter, ``build_model`` and SGD with the run's seed, ``--warmup`` steps, then
``--steps`` measured steps. Per path it reports images per second, the median CPU time of a
step (user + system over every thread: less sensitive than wall time to other processes on a
shared machine, and with ``--threads 1`` free of idle threads spinning), the median minor page
faults and the mean system CPU time of a step (``getrusage``: what the kernel did for the step,
e.g. zero-filling pages the allocator gave back), and the form of the batches (dtype, shape,
contiguity, channels_last, mean and standard deviation). The ratios, real over synthetic, are
taken within each round for throughput and for 1 / CPU time.

The allocator is set as the ``allocator`` key sets it (:func:`dlscale.runtime.allocator.
allocator_env`): ``system`` leaves glibc's dynamic mmap and trim thresholds to the history of
the process, which the loader is part of; ``glibc-tuned`` fixes them. Findings and numbers:
docs/benchmarks.md, "Harness and DDP overhead, real-data path".

``--paired`` runs both paths in one process instead, their steps alternated (A B B A), and
gives the throughput ratio over pairs of steps: the machine's drift between processes, larger
than the effect sought, cancels within a pair.

Usage: python benchmarks/data_paths.py [--rounds 3] [--allocators system,glibc-tuned]
           [--steps 12] [--warmup 3] [--model resnet44] [--data-dir DIR]
           [--paths cifar10,synthetic,...] [--paired]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = ("cifar10", "synthetic", "cifar10-fixed", "synthetic-copy", "synthetic-pool")
"""The two data paths, and variants that take them apart: ``cifar10-fixed`` feeds the first
CIFAR-10 batch at every step (as synthetic data does), ``synthetic-copy`` feeds the synthetic
batch from memory torch allocated (numpy's is aligned differently), ``synthetic-pool`` cycles
through 8 different random batches (values like synthetic data, a new batch every step)."""


def trainer(path: str, args: argparse.Namespace):
    """A torch-single worker's model, optimizer and batches for one of :data:`PATHS`: the
    ``step`` function (taking its batch) and the form of the first batch."""
    import torch
    import torch.nn.functional as F

    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.models import MODELS
    from dlscale.contract.run_config import RunConfig
    from dlscale.frameworks.torch.data import to_torch
    from dlscale.frameworks.torch.loop import build_model, sgd

    torch.set_num_threads(args.threads)
    dataset = path.split("-")[0]
    cfg = RunConfig.make(
        model=args.model,
        dataset=dataset,
        data_dir=args.data_dir if dataset == "cifar10" else None,
        batch_size=64,
        workers=1,
    )
    spec = MODELS.get(cfg.model)
    data = to_torch(
        DATASETS.get(dataset).load(
            cfg,
            shard=0,
            shards=1,
            input_size=spec.input_size,
            num_classes=spec.default_classes,
        ),
        "cpu",
    )
    model = build_model(cfg)
    optimizer = sgd(model.parameters(), cfg)
    batches = _variant(
        path, itertools.chain.from_iterable(map(data.train_batches, itertools.count()))
    )
    first = next(batches)  # its form is printed; it is still the first batch trained on
    batches = itertools.chain([first], batches)

    def step() -> None:  # TorchEngine.step, eager, with the batch taken inside the step
        x, y = next(batches)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x.to(memory_format=torch.contiguous_format)), y).backward()
        optimizer.step()

    images, labels = first
    form = {
        "dtype": str(images.dtype).removeprefix("torch."),
        "shape": list(images.shape),
        "contiguous": images.is_contiguous(),
        "channels_last": images.is_contiguous(memory_format=torch.channels_last),
        "mean": round(float(images.mean()), 3),
        "std": round(float(images.std()), 3),
        "labels": str(labels.dtype).removeprefix("torch."),
    }
    return step, form


def child(path: str, args: argparse.Namespace) -> None:
    """One data path in this process; prints one JSON line."""
    step, form = trainer(path, args)
    for _ in range(args.warmup):
        step()
    times, cpu, faults, system = [], [], [], []
    for _ in range(args.steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step()
        elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        times.append(elapsed)
        cpu.append(_cpu(after) - _cpu(before))
        faults.append(after.ru_minflt - before.ru_minflt)
        system.append(after.ru_stime - before.ru_stime)
    print(
        json.dumps(
            {
                "path": path,
                "img_s": 64 * len(times) / sum(times),
                "step_ms": 1000 * statistics.median(times),
                "cpu_ms": 1000 * statistics.median(cpu),
                "faults_per_step": statistics.median(faults),
                "faults_per_step_max": max(faults),
                "sys_ms_per_step": 1000 * statistics.mean(system),
                "form": form,
            }
        )
    )


def paired(args: argparse.Namespace) -> None:
    """Both data paths in one process, their steps alternated A B B A: the machine's drift from
    one process (or minute) to the next, several times the effect sought, falls on both sides
    of every pair. Prints one JSON line: the mean over pairs of the ratio of step times,
    synthetic over cifar10 (= the throughput ratio cifar10 / synthetic), its 95% interval and
    the page faults per step of each path."""
    from dlscale.metrics.stats import mean_ci95

    steps = {path: trainer(path, args)[0] for path in ("cifar10", "synthetic")}
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    ratios, faults = [], {path: 0 for path in steps}
    for pair in range(args.steps):
        order = ("cifar10", "synthetic") if pair % 2 == 0 else ("synthetic", "cifar10")
        took = {}
        for path in order:
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            steps[path]()
            took[path] = time.perf_counter() - start
            faults[path] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before.ru_minflt
        ratios.append(took["synthetic"] / took["cifar10"])
    mean, half = mean_ci95(ratios)
    per_step = {path: count / args.steps for path, count in faults.items()}
    print(json.dumps({"ratio": mean, "half": half, "pairs": len(ratios), "faults": per_step}))


def _variant(path: str, batches):
    """The batches of one of :data:`PATHS`."""
    import torch

    if path in ("cifar10", "synthetic"):
        return batches
    x, y = next(batches)
    if path == "cifar10-fixed":
        return itertools.repeat((x, y))
    if path == "synthetic-copy":
        return itertools.repeat((x.clone(), y.clone()))
    generator = torch.Generator().manual_seed(0)
    pool = [(torch.randn(x.shape, generator=generator), y) for _ in range(8)]
    return itertools.cycle(pool)


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def run_child(path: str, allocator: str, args: argparse.Namespace) -> dict:
    from dlscale.runtime.allocator import allocator_env

    threads = str(args.threads)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        **allocator_env(allocator),
    }
    command = [sys.executable, __file__, "--child", path, *_forwarded(args)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        sys.exit(f"{path} under {allocator} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _forwarded(args: argparse.Namespace) -> list[str]:
    return [
        *("--model", args.model, "--data-dir", str(args.data_dir)),
        *("--steps", str(args.steps), "--warmup", str(args.warmup)),
        *("--threads", str(args.threads)),
    ]


def _line(result: dict) -> str:
    return (
        f"{result['img_s']:7.1f} img/s  step {result['step_ms']:7.1f} ms  "
        f"cpu {result['cpu_ms']:7.1f} ms  faults/step {result['faults_per_step']:8.0f}  "
        f"sys {result['sys_ms_per_step']:6.1f} ms/step"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--allocators", default="system,glibc-tuned")
    parser.add_argument("--paths", default="cifar10,synthetic", help=f"of {', '.join(PATHS)}")
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--data-dir", type=Path, default=None, help="CIFAR-10 binary files")
    parser.add_argument(
        "--paired", action="store_true", help="both paths in one process, steps alternated"
    )
    parser.add_argument("--child", choices=(*PATHS, "paired"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1")
    if args.child:
        paired(args) if args.child == "paired" else child(args.child, args)
        return 0
    if args.data_dir is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from run_all import _write_cifar10

        args.data_dir = Path(tempfile.mkdtemp(prefix="dlscale-data-paths-")) / "cifar10"
        _write_cifar10(args.data_dir)
    allocators = [a for a in args.allocators.split(",") if a]
    if args.paired:
        print(f"# {args.model}, batch 64, {args.threads} threads, {args.steps} pairs of steps")
        for allocator in allocators:
            r = run_child("paired", allocator, args)
            print(
                f"{allocator:12} paired steps in one process: cifar10 / synthetic throughput "
                f"{r['ratio']:.3f} [{r['ratio'] - r['half']:.3f}, {r['ratio'] + r['half']:.3f}] "
                f"(95% over {r['pairs']} pairs); page faults per step: cifar10 "
                f"{r['faults']['cifar10']:.0f}, synthetic {r['faults']['synthetic']:.0f}"
            )
        return 0
    paths = [p for p in args.paths.split(",") if p]
    if "synthetic" not in paths or not set(paths) <= set(PATHS):
        parser.error(f"--paths: synthetic and any of {', '.join(PATHS)}")
    print(
        f"# {args.model}, batch 64, {args.threads} threads, {args.warmup} warm-up + "
        f"{args.steps} measured steps, {args.rounds} rounds, allocators {', '.join(allocators)}"
    )
    runs: dict[tuple[str, str], list[dict]] = {(a, p): [] for a in allocators for p in paths}
    for round_index in range(args.rounds):
        order = [(a, p) for a in allocators for p in paths]
        for allocator, path in order[:: -1 if round_index % 2 else 1]:
            result = run_child(path, allocator, args)
            runs[allocator, path].append(result)
            print(f"round {round_index} {allocator:12} {path:14} {_line(result)}", flush=True)
    print()
    for (allocator, path), results in runs.items():
        numbers = [key for key, value in results[0].items() if isinstance(value, int | float)]
        median = {key: statistics.median(r[key] for r in results) for key in numbers}
        print(f"{allocator:12} {path:14} median {_line(median)}  batches {results[0]['form']}")
    for allocator in allocators:
        synthetic = runs[allocator, "synthetic"]
        for path in (p for p in paths if p != "synthetic"):
            other = runs[allocator, path]
            for what, ratios in (
                ("img/s", [r["img_s"] / s["img_s"] for r, s in zip(other, synthetic, strict=True)]),
                (
                    "1/cpu",
                    [s["cpu_ms"] / r["cpu_ms"] for r, s in zip(other, synthetic, strict=True)],
                ),
            ):
                rounds = ", ".join(f"{v:.3f}" for v in ratios)
                print(
                    f"{allocator:12} {path} / synthetic ({what}): "
                    f"median {statistics.median(ratios):.3f} ({rounds})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
