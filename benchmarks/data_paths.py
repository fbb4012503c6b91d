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
docs/benchmarks.md ("Real data against synthetic data").

Usage: python benchmarks/data_paths.py [--rounds 3] [--allocators system,glibc-tuned]
           [--steps 12] [--warmup 3] [--model resnet44] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = ("cifar10", "synthetic")


def child(path: str, args: argparse.Namespace) -> None:
    """One data path in this process; prints one JSON line."""
    import torch
    import torch.nn.functional as F

    from dlscale.backends.torch_loop import build_model, sgd
    from dlscale.config.run_config import RunConfig
    from dlscale.datasets import DATASETS
    from dlscale.datasets.torch_adapter import to_torch
    from dlscale.models import MODELS

    torch.set_num_threads(args.threads)
    cfg = RunConfig.make(
        model=args.model,
        dataset=path,
        data_dir=args.data_dir if path == "cifar10" else None,
        batch_size=64,
        workers=1,
    )
    spec = MODELS.get(cfg.model)
    data = to_torch(
        DATASETS.get(path).load(
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

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:  # TorchEngine.step, eager
        x, y = batch
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x.to(memory_format=torch.contiguous_format)), y).backward()
        optimizer.step()

    batches = data.train_batches(0)
    first = next(batches)
    images = first[0]
    form = {
        "dtype": str(images.dtype).removeprefix("torch."),
        "shape": list(images.shape),
        "contiguous": images.is_contiguous(),
        "channels_last": images.is_contiguous(memory_format=torch.channels_last),
        "mean": round(float(images.mean()), 3),
        "std": round(float(images.std()), 3),
        "labels": str(first[1].dtype).removeprefix("torch."),
    }
    step(first)
    for _ in range(args.warmup - 1):
        step(next(batches))
    times, cpu, faults, system = [], [], [], []
    for _ in range(args.steps):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        step(next(batches))
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
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--data-dir", type=Path, default=None, help="CIFAR-10 binary files")
    parser.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be at least 1")
    if args.child:
        child(args.child, args)
        return 0
    if args.data_dir is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from run_all import _write_cifar10

        args.data_dir = Path(tempfile.mkdtemp(prefix="dlscale-data-paths-")) / "cifar10"
        _write_cifar10(args.data_dir)
    allocators = [a for a in args.allocators.split(",") if a]
    print(
        f"# {args.model}, batch 64, {args.threads} threads, {args.warmup} warm-up + "
        f"{args.steps} measured steps, {args.rounds} rounds, allocators {', '.join(allocators)}"
    )
    runs: dict[tuple[str, str], list[dict]] = {(a, p): [] for a in allocators for p in PATHS}
    for round_index in range(args.rounds):
        order = [(a, p) for a in allocators for p in PATHS]
        for allocator, path in order[:: -1 if round_index % 2 else 1]:
            result = run_child(path, allocator, args)
            runs[allocator, path].append(result)
            print(f"round {round_index} {allocator:12} {path:9} {_line(result)}", flush=True)
    print()
    for (allocator, path), results in runs.items():
        numbers = [key for key, value in results[0].items() if isinstance(value, int | float)]
        median = {key: statistics.median(r[key] for r in results) for key in numbers}
        print(f"{allocator:12} {path:9} median {_line(median)}  batches {results[0]['form']}")
    for allocator in allocators:
        real, synthetic = runs[allocator, "cifar10"], runs[allocator, "synthetic"]
        for what, ratios in (
            ("img/s", [r["img_s"] / s["img_s"] for r, s in zip(real, synthetic, strict=True)]),
            ("1/cpu", [s["cpu_ms"] / r["cpu_ms"] for r, s in zip(real, synthetic, strict=True)]),
        ):
            rounds = ", ".join(f"{v:.3f}" for v in ratios)
            print(
                f"{allocator:12} cifar10 / synthetic ({what}): "
                f"median {statistics.median(ratios):.3f} ({rounds})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
