"""A bare DDP training script for torchrun: the reference for dlscale's torch-ddp overhead.

Run: torchrun --standalone --nproc-per-node 2 bare_ddp.py --threads 1
Rank 0 prints one JSON line with the global throughput (images of all ranks over the slowest
rank's time, measured between barriers).
"""

from __future__ import annotations

import json
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from bare_args import bare_parser
from torch.nn.parallel import DistributedDataParallel

from dlscale.contract.models import MODELS


def main() -> None:
    parser = bare_parser(1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    spec = MODELS.get(args.model)
    model = DistributedDataParallel(spec.build(spec.default_classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 3, spec.input_size, spec.input_size, generator=generator)
    y = torch.randint(0, spec.default_classes, (args.batch,), generator=generator)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - start])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        throughput = world * args.batch * args.steps / float(elapsed)
        print(json.dumps({"throughput_img_s": throughput}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
