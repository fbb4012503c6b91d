"""The input pipeline on a JPEG folder, measured side by side in one invocation.

1. Decoding alone, in this process: Pillow's decode + random resized crop + flip of one
   ImageNet-sized JPEG (ms per image, one core): the cost every loader process pays.
2. Loader only (``--loader-only true``): images/s one training process receives with 1 and 2
   loader processes (``loader_workers``), and their ratio; nothing trains.
3. Training on the JPEG folder against synthetic data, same backend, model, batch and workers:
   img/s of each, their ratio, and the folder run's input wait (the share of step time spent
   waiting for a batch) beside its exposed communication.

The folder is written here first: ``--classes`` x ``--per-class`` JPEGs of 500 x 375 pixels
(ImageNet's most common size; a smooth random field plus grain, quality 90, about 60 KB each).

Usage: python benchmarks/input_pipeline.py [--model resnet50] [--batch 16] [--workers 1,2]
       [--image-size 224]  (tiny at 224: a model too light to hide its input)
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from dlscale.datasets.imagenet import train_image


def natural_jpeg(rng: np.random.Generator, width: int = 500, height: int = 375) -> bytes:
    """A JPEG that compresses like a photograph: smooth colour fields and some grain."""
    coarse = rng.integers(0, 256, (height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8)
    field = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    pixels = np.asarray(field, np.int16) + rng.integers(-12, 13, (height, width, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def write_folder(root: Path, classes: int, per_class: int) -> int:
    rng = np.random.default_rng(0)
    total = 0
    for label in range(classes):
        folder = root / "train" / f"n{label:08d}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            data = natural_jpeg(rng)
            (folder / f"n{label:08d}_{i}.JPEG").write_bytes(data)
            total += len(data)
    return total


def decode_ms(root: Path, size: int, count: int = 60) -> float:
    files = sorted(root.glob("train/*/*.JPEG"))[:count]
    blobs = [f.read_bytes() for f in files]
    start = time.perf_counter()
    for seed, blob in enumerate(blobs):
        train_image(blob, size, seed)
    return (time.perf_counter() - start) * 1e3 / len(blobs)


def run(results: Path, common: list[str], *extra: str) -> list[dict]:
    command = [sys.executable, "-m", "dlscale", "run", *common, *extra, "--json",
               "--results", str(results), "--force"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stderr[-3000:]}")
    points = [r for r in map(json.loads, done.stdout.splitlines()) if r["kind"] == "point"]
    return sorted(points, key=lambda p: p["workers"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--backend", default="torch-ddp")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=224, help="input height = width")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--windows", type=int, default=2)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--per-class", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlscale-input-") as tmp:
        root = Path(tmp) / "imagenet"
        size = write_folder(root, args.classes, args.per_class)
        images = args.classes * args.per_class
        print(f"folder: {images} JPEGs of 500 x 375, {size / images / 1e3:.0f} KB each")
        cost = decode_ms(root, args.image_size)
        print(f"1. decode + crop + flip, one core: {cost:.2f} ms per image")
        base = ["--model", args.model, "--batch-size", str(args.batch), "--steps",
                str(args.steps), "--windows", str(args.windows), "--warmup-steps", "2",
                "--repeats", "1", "--set", "machine_reference=false",
                "--set", f"image_size={args.image_size}"]  # fmt: skip
        data = ["--dataset", "imagenet-subset", "--data-dir", str(root),
                "--set", f"classes={args.classes}",
                "--set", f"images_per_class={args.per_class}"]  # fmt: skip
        results = Path(tmp) / "res"
        side = args.image_size
        print(f"2. loader only ({args.backend} x1, batch {args.batch}, {side} x {side}):")
        rates = {}
        for loaders in (1, 2):
            (point,) = run(results, [*base, *data], "--backend", args.backend,
                           "--workers", "1", "--loader-only", "true",
                           "--set", f"loader_workers={loaders}")  # fmt: skip
            rates[loaders] = point["throughput_samples_s"]
            print(f"   loader_workers={loaders}: {rates[loaders]:.1f} img/s")
        print(f"   2 loaders / 1 loader: {rates[2] / rates[1]:.2f}x")
        print(f"3. training {args.model} ({args.backend}, batch {args.batch} per worker):")
        workers = ["--backend", args.backend, "--workers", args.workers]
        folder = run(results, [*base, *data], *workers)
        synthetic = run(results, base, *workers, "--dataset", "synthetic")
        for disk, fake in zip(folder, synthetic, strict=True):
            comm = disk.get("exposed_comm_fraction")
            print(
                f"   x{disk['workers']}: JPEG folder {disk['throughput_samples_s']:.2f} img/s, "
                f"synthetic {fake['throughput_samples_s']:.2f} img/s, ratio "
                f"{disk['throughput_samples_s'] / fake['throughput_samples_s']:.2f}; input wait "
                f"{disk['input_wait_fraction']:.1%}, exposed comm "
                f"{'-' if comm is None else f'{comm:.1%}'}, step p50 "
                f"{disk['step_time_p50_ms']:.0f} ms (synthetic {fake['step_time_p50_ms']:.0f} ms)"
            )


if __name__ == "__main__":
    main()
