"""A bare nanoGPT-style training loop of dlscale's GPT: the reference for the gpt pairs.

The same model and initial weights (dlscale's own torch builder after ``torch.manual_seed``),
AdamW as dlscale makes it (torch.optim.AdamW, betas (0.9, 0.999), eps 1e-8, the given lr and
weight decay on every parameter, as dlscale applies it), the same tokens (each step's batch is
the numpy batch dlscale's ``tokens`` data set makes for this replica and seed, turned into
tensors with ``torch.from_numpy`` as dlscale's torch adapter does), the same threads and step
counts; nothing else: no kernel, no events, no per-step records.

Prints one JSON line: ``throughput_samples_s`` (sequences), ``throughput_tokens_s`` and
``loss_sum`` (the measured steps' losses, summed; rank 0's under DDP) and ``cpu_s_per_step``
(the CPU seconds of the measured steps, of all ranks, per step; threads that spin while
waiting for a descheduled peer count too) and ``minor_faults_per_step`` (rank 0's page
faults: the allocator's figure, docs/benchmarks.md).

``--ddp``: under torchrun, DistributedDataParallel over gloo with DDP's defaults, each rank on
its own replica's tokens (as a dlscale torch-ddp run shards them); rank 0 prints the global
throughput (sequences of all ranks over the slowest rank's time, measured between barriers):

  torchrun --standalone --nproc-per-node 2 benchmarks/bare_gpt.py --ddp --threads 1
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from bare_args import bare_parser

from dlscale.contract.models import MODELS


def main() -> None:
    parser = bare_parser()
    parser.set_defaults(model="gpt-mini", batch=8)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ddp", action="store_true", help="DDP over gloo, under torchrun")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rank, world = 0, 1
    if args.ddp:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    spec = MODELS.get(args.model)
    block, vocab = spec.input_shape()
    torch.manual_seed(args.seed)
    model = spec.build(vocab, "torch", None, {})
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=args.weight_decay,
    )
    batches = _token_batches(args, rank, world, block, vocab)

    def step() -> torch.Tensor:
        x, y = next(batches)
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(args.warmup):
        step()
    if args.ddp:
        dist.barrier()
    losses = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        losses.append(step())
    elapsed = torch.tensor([time.perf_counter() - start])
    cpu = torch.tensor([time.process_time() - cpu_start], dtype=torch.float64)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    if args.ddp:
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        dist.all_reduce(cpu)
    if rank == 0:
        samples = world * args.batch * args.steps / float(elapsed)
        out = {
            "throughput_samples_s": samples,
            "throughput_tokens_s": samples * block,
            "loss_sum": float(torch.stack(losses).double().sum()),
            "cpu_s_per_step": float(cpu) / args.steps,
            "minor_faults_per_step": faults / args.steps,
        }
        print(json.dumps(out), flush=True)
    if args.ddp:
        dist.destroy_process_group()


def _token_batches(
    args: argparse.Namespace, rank: int, world: int, block: int, vocab: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This replica's batches of dlscale's ``tokens`` data set, epoch after epoch."""
    from dlscale.contract.datasets import DATASETS
    from dlscale.contract.run_config import RunConfig

    cfg = RunConfig(
        backend="torch-ddp" if world > 1 else "torch-single",
        model=args.model,
        dataset="tokens",
        batch_size=args.batch,
        workers=world,
        seed=args.seed,
    )
    data = DATASETS.get("tokens").load(
        cfg, shard=rank, shards=world, replicas=1, input_size=block, num_classes=vocab
    )
    epoch = 0
    while True:
        for x, y in data.train_batches(epoch):
            yield torch.from_numpy(x), torch.from_numpy(y)
        epoch += 1


if __name__ == "__main__":
    main()
