"""A Horovod PyTorch training script as Horovod's examples write it (hvd.init, a sampler over
hvd.size(), broadcast of the initial state, DistributedOptimizer), not for dlscale: dlscale's
tests run it unmodified.

    horovodrun -np 2 python horovod_train.py --epochs 2 --batch-size 16
"""

import argparse

import horovod.torch as hvd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    images = torch.randn(512, 3, 32, 32)
    labels = torch.randint(0, 10, (512,))
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        if hvd.rank() == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
