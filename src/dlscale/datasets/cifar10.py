"""CIFAR-10 held in device memory, with the standard augmentation done in batched tensor ops.

The pipeline equals torchvision's ``ToTensor -> RandomCrop(32, padding=4) ->
RandomHorizontalFlip -> Normalize(mean, std)``: the crop and flip run on the uint8 batch (a zero
pixel is 0.0 after ``ToTensor``, so zero padding commutes with the scaling), then the batch is
scaled to [0, 1] and normalized. There is no per-image Python loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from dlscale.datasets import cifar10_files
from dlscale.datasets.base import InMemoryDataset

if TYPE_CHECKING:
    from dlscale.config.run_config import RunConfig

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
PAD = 4
"""Zero padding of the random crop (as in ``RandomCrop(32, padding=4)``)."""
NATIVE_SIZE = 32


def load(
    cfg: RunConfig,
    *,
    device: torch.device,
    rank: int,
    world: int,
    input_size: int,
    num_classes: int,
) -> Cifar10Dataset:
    """Read CIFAR-10 from ``cfg.data_dir`` once and keep it on ``device`` as uint8.

    ``num_classes`` (the model's default) is ignored: CIFAR-10 has 10 classes.
    """
    del num_classes
    x_train, y_train, x_test, y_test = cifar10_files.read(cfg.data_dir)
    return Cifar10Dataset(
        *(torch.from_numpy(a).to(device) for a in (x_train, y_train, x_test, y_test)),
        batch=cfg.batch_per_worker,
        seed=cfg.seed,
        rank=rank,
        world=world,
        input_size=input_size,
    )


class Cifar10Dataset(InMemoryDataset):
    """One rank's view of CIFAR-10: uint8 images and int64 labels already on the device."""

    name = "cifar10"
    num_classes = cifar10_files.NUM_CLASSES

    def train_transform(self, epoch: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """Augment (crop + flip, drawn from a per-epoch, per-rank generator), then normalize."""
        generator = augment_generator(self.seed, epoch, self.rank, self.x_train.device)
        return lambda images: self.eval_transform(augment(images, generator))

    def eval_transform(self, images: torch.Tensor) -> torch.Tensor:
        return resize(normalize(images), self.input_size)


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random 32x32 crop of the 4-pixel zero-padded images and a random horizontal flip (p=0.5).

    ``images`` is ``(B, C, H, W)`` of any dtype (uint8 or float in [0, 1]); the result has the
    same shape and dtype. Offsets and flips are drawn per image from ``generator``, which must
    live on the images' device.
    """
    count, device = images.shape[0], images.device
    offsets = torch.randint(0, 2 * PAD + 1, (2, count), generator=generator, device=device)
    flip = torch.rand(count, generator=generator, device=device) < 0.5
    return crop_flip(images, offsets[0], offsets[1], flip)


def crop_flip(
    images: torch.Tensor,
    top: torch.Tensor,
    left: torch.Tensor,
    flip: torch.Tensor,
    pad: int = PAD,
) -> torch.Tensor:
    """Crop each zero-padded image at (``top[i]``, ``left[i]``), mirrored where ``flip[i]``.

    ``top``/``left`` are in ``0..2*pad`` (``pad, pad`` is the unshifted image). The batch is
    padded once; one ``gather`` takes every window, and the flip is folded into the column
    indices with ``torch.where`` on the per-image mask.
    """
    count, channels, height, width = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))
    padded_width = width + 2 * pad
    rows = top[:, None] + torch.arange(height, device=images.device)  # (B, H)
    cols = left[:, None] + torch.arange(width, device=images.device)  # (B, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    flat = (rows[:, :, None] * padded_width + cols[:, None, :]).reshape(count, 1, height * width)
    windows = padded.reshape(count, channels, -1).gather(2, flat.expand(-1, channels, -1))
    return windows.reshape(count, channels, height, width)


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``(B, 3, H, W)`` -> float32 scaled to [0, 1] and normalized with the CIFAR-10 stats."""
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return images.float().div_(255.0).sub_(mean).div_(std)


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize to ``size`` x ``size`` (antialiased when shrinking); no-op at 32."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    shrink = size < min(images.shape[-2:])
    return F.interpolate(
        images, size=(size, size), mode="bilinear", align_corners=False, antialias=shrink
    )


def augment_generator(seed: int, epoch: int, rank: int, device: torch.device) -> torch.Generator:
    """The augmentation generator of one (seed, epoch, rank), on ``device``."""
    state = np.random.SeedSequence((seed, epoch, rank)).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator(device=device).manual_seed(int(state) >> 1)
