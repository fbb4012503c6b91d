"""A plain PyTorch DDP training script, written the way people write them (torchrun-style
environment, DistributedSampler, Adam), not for dlscale: dlscale's tests run it unmodified.

    torchrun --nproc-per-node 2 ddp_train.py --epochs 2 --batch-size 16
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--fail-at-epoch", type=int, default=-1)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0

    torch.manual_seed(0)
    images = torch.randn(args.samples, 3, 32, 32)
    labels = torch.randint(0, 10, (args.samples,))
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset) if distributed else None
    loader = DataLoader(
        dataset, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None
    )

    model = Net().to(device)
    if distributed:
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        if epoch == args.fail_at_epoch:
            raise RuntimeError(f"planted failure at epoch {epoch}")
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")

    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
