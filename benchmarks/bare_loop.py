"""A bare PyTorch training loop: the reference the harness overhead is measured against.

Same model, batch, threads and step counts as a dlscale torch-single run; nothing else.
Prints one JSON line: {"throughput_img_s": ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from dlscale.models import MODELS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet44")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = MODELS.get(args.model)
    model = spec.build(spec.default_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(args.batch, 3, spec.input_size, spec.input_size)
    y = torch.randint(0, spec.default_classes, (args.batch,))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = time.perf_counter() - start
    print(json.dumps({"throughput_img_s": args.steps * args.batch / elapsed}))


if __name__ == "__main__":
    main()
