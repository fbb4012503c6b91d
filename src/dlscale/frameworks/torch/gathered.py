"""What a sharded engine (torch-fsdp, the DeepSpeed ZeRO stages) does with its parameters
gathered whole: evaluate a plain copy of the model, and write them at the end. Each engine
gathers in its own way (FSDP2's ``full_tensor``, ZeRO-3's ``GatheredParameters``) on every
rank; what follows is the same."""

from __future__ import annotations

import torch
import torch.distributed as dist

from dlscale.frameworks.torch.loop import build_model, run_dtype
from dlscale.runtime.context import WorkerContext


def plain_copy(
    ctx: WorkerContext, device: torch.device, full: dict[str, torch.Tensor], buffers: list[str]
) -> torch.nn.Module:
    """The model built anew holding ``full`` (every parameter and buffer, gathered), with the
    first rank's ``buffers`` (BatchNorm's statistics), which DDP would broadcast: one
    broadcast each, on every rank."""
    for name in buffers:
        dist.broadcast(full[name], src=0)
    with torch.random.fork_rng(devices=[]):  # building seeds torch: keep training's stream
        plain = build_model(ctx.config)
    plain = plain.to(device, run_dtype(ctx.config))  # the load keeps its dtype
    plain.load_state_dict(full)
    return plain


def save_gathered(ctx: WorkerContext, full: dict[str, torch.Tensor], names: set[str]) -> None:
    """``save_params``: the first training rank writes the parameters named ``names`` of
    ``full`` (gathered on every rank), as the loop writes an unsharded engine's."""
    if ctx.rank == ctx.layout.training_ranks[0]:
        params = {name: value.cpu() for name, value in full.items() if name in names}
        torch.save(params, ctx.run_dir / "final_params.pt")
