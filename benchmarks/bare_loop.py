"""A bare PyTorch training loop: the reference the harness overhead is measured against.

Same model, batch, threads and step counts as a dlscale torch-single run; nothing else.
Prints one JSON line: {"throughput_img_s": ...}.

``--dlscale-data`` (for benchmarks/instructions.py) takes the batch from dlscale's own
synthetic data set instead of ``torch.randn`` (the same numpy-made values, held the same way,
from the same seed as the model's weights), keeps each step's loss as dlscale's kernel does
and adds ``loss_sum`` (the measured steps' losses) to the JSON line: a dlscale torch-single run
with the same seed then computes exactly the same steps, which the equal loss sums show.
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F
from bare_args import bare_parser

from dlscale.contract.models import MODELS


def main() -> None:
    parser = bare_parser()
    parser.add_argument(
        "--dlscale-data",
        action="store_true",
        help="dlscale's synthetic batch (seed 0) and the loss sum in the output (see above)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = MODELS.get(args.model)
    model = spec.build(spec.default_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    if args.dlscale_data:
        x, y = _dlscale_batch(args.model, args.batch, spec.input_size, spec.default_classes)
    else:
        x = torch.randn(args.batch, 3, spec.input_size, spec.input_size)
        y = torch.randint(0, spec.default_classes, (args.batch,))

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    losses = []
    start = time.perf_counter()
    if args.dlscale_data:
        for _ in range(args.steps):
            losses.append(step().detach())
    else:
        for _ in range(args.steps):
            step()
    elapsed = time.perf_counter() - start
    out = {"throughput_img_s": args.steps * args.batch / elapsed}
    if losses:
        out["loss_sum"] = float(torch.stack(losses).double().sum())
    print(json.dumps(out))


def _dlscale_batch(
    model: str, batch: int, input_size: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed batch a dlscale torch-single run on synthetic data feeds (seed 0, CPU)."""
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.run_config import RunConfig
    from dlscale.frameworks.torch.data import to_torch

    cfg = RunConfig(backend="torch-single", model=model, batch_size=batch, workers=1, seed=0)
    data = DATASETS.get("synthetic").load(
        cfg, shard=0, shards=1, replicas=1, input_size=input_size, num_classes=classes
    )
    x, y = next(iter(to_torch(data, "cpu").train_batches(0)))
    return x, y


if __name__ == "__main__":
    main()
