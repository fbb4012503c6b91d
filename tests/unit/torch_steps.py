"""PyTorch's side of the twin tests: the losses of a model's SGD steps, as dlscale's torch loops
take them (cross-entropy, momentum, weight decay)."""

from __future__ import annotations

import numpy as np
import torch


def torch_losses(
    model: torch.nn.Module,
    batches: list[tuple[np.ndarray, np.ndarray]],
    lr: float,
    momentum: float,
    weight_decay: float,
) -> list[float]:
    """Each batch's loss, one SGD step after each, in training mode."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    losses = []
    model.train()
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
