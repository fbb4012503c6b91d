"""A bare Horovod training script, written from Horovod's documented PyTorch usage: the
reference for dlscale's horovod-torch overhead.

Run: horovodrun -np 2 -H localhost:2 --gloo python bare_horovod.py --threads 1
(hvd.init, broadcast_parameters and broadcast_optimizer_state from rank 0,
hvd.DistributedOptimizer with named_parameters, synthetic data on the device). Rank 0 prints one
JSON line with the global throughput (images of all ranks over the slowest rank's time).
"""

from __future__ import annotations

import json
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from bare_args import bare_parser

from dlscale.contract.models import MODELS


def main() -> None:
    parser = bare_parser(1)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--fp16", action="store_true", help="fp16 all-reduce compression")
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    spec = MODELS.get(args.model)
    model = spec.build(spec.default_classes)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr * hvd.size(), momentum=0.9, weight_decay=5e-4
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16 else hvd.Compression.none,
    )
    generator = torch.Generator().manual_seed(hvd.rank())
    x = torch.randn(args.batch, 3, spec.input_size, spec.input_size, generator=generator)
    y = torch.randint(0, spec.default_classes, (args.batch,), generator=generator)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    hvd.allreduce(torch.zeros(1), name="barrier-start")
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    elapsed = hvd.allreduce(torch.tensor([time.perf_counter() - start]), op=hvd.Max, name="elapsed")
    if hvd.rank() == 0:
        throughput = hvd.size() * args.batch * args.steps / float(elapsed)
        print(json.dumps({"throughput_img_s": throughput}))
    hvd.shutdown()


if __name__ == "__main__":
    main()
