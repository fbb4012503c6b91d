"""torch-fsdp: PyTorch FSDP2 (``fully_shard``), sharded data parallelism; gloo on CPU, NCCL on CUDA.

Each rank keeps 1/N of every parameter, gradient and optimizer state (Zhao et al., VLDB 2023;
FSDP2 shards each parameter on its first dimension as a DTensor). The unit of sharding is a
block: every child of the model that holds parameters (the children of a container such as
``nn.Sequential`` each on their own: a ResNet's residual blocks) is ``fully_shard``-ed, then the
model itself. A unit's parameters are all-gathered just before its forward and, with
``reshard_after_forward`` (the default, ZeRO-3), freed after it and all-gathered again before its
backward; its gradients are reduce-scattered (averaged) after its backward, and the optimizer
steps on the local shard. Without ``reshard_after_forward`` (ZeRO-2) a unit stays gathered from
its forward to its backward: one all-gather a step instead of two, more memory.

The trajectory is DDP's: the same mean gradient, the same SGD, on the same initial weights and
data (``tests/distributed/test_equivalence.py``, per-step losses in ``test_fsdp.py``).

Bytes: counted from what is handed to the collectives, through FSDP2's own hooks for custom
collectives (``set_custom_all_gather``, ``set_custom_reduce_scatter``): each all-gather's output
and each reduce-scatter's input, padding included, scaled by the ring factor (N-1)/N, the bytes a
rank sends in a ring all-gather or reduce-scatter. The model is (N-1)/N x (all-gathers a step
+ 1) x the gradient bytes: 3(N-1)/N with ``reshard_after_forward``, against DDP's 2(N-1)/N.

Not measured: exposed communication (no step exists without the all-gathers, which forward
itself needs; the probe would time a different computation), checkpoints for ``max_restarts``
(sharded state), compression.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
    DefaultAllGather,
    DefaultReduceScatter,
)

from dlscale.contract.algorithms import MESSAGES_FACT, PATTERN_FACT
from dlscale.frameworks.torch.gathered import plain_copy, save_gathered
from dlscale.frameworks.torch.loop import (
    TorchStrategy,
    gradient_bytes,
    init_process_group,
    run_training,
)
from dlscale.frameworks.torch.options import FSDPOptions
from dlscale.runtime.context import WorkerContext

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class _CountedAllGather(DefaultAllGather):
    """FSDP2's default all-gather, counting the bytes of each gathered output."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        async_op: bool = False,
    ) -> Any:
        self.bytes += output_tensor.numel() * output_tensor.element_size()
        return super().__call__(output_tensor, input_tensor, group, async_op)


class _CountedReduceScatter(DefaultReduceScatter):
    """FSDP2's default reduce-scatter, counting the bytes of each unsharded input."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> Any:
        self.bytes += input_tensor.numel() * input_tensor.element_size()
        return super().__call__(output_tensor, input_tensor, group, op, async_op)


def shard_units(
    model: torch.nn.Module, shared: set[int] | None = None
) -> Iterator[torch.nn.Module]:
    """The blocks sharded one by one, in model order: children holding parameters, a
    container's children in its place (a GPT: each transformer block). A child sharing a
    parameter with another (a head tied to the token embedding) is left to the model's own
    unit, which holds both, as torchtitan does."""
    shared = _shared_parameters(model) if shared is None else shared
    for child in model.children():
        if isinstance(child, _CONTAINERS):
            yield from shard_units(child, shared)
        elif any(True for _ in child.parameters()) and not any(
            id(p) in shared for p in child.parameters()
        ):
            yield child


def _shared_parameters(model: torch.nn.Module) -> set[int]:
    """The ids of parameters that more than one module of ``model`` holds."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            holders[id(p)] = holders.get(id(p), 0) + 1
    return {key for key, count in holders.items() if count > 1}


def unit_bytes(model: torch.nn.Module) -> list[int]:
    """The bytes of the parameters each FSDP unit gathers and reduce-scatters on its own (its
    parameters but those of the units inside it), in model order: one all-gather (two with
    ``reshard_after_forward``) and one reduce-scatter each a step."""
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]  # outer before inner
    owner = {id(p): index for index, unit in enumerate(units) for p in unit.parameters()}
    sizes = [0] * len(units)
    for p in model.parameters():  # the innermost unit holding it: the last to claim it
        sizes[owner[id(p)]] += p.numel() * p.element_size()
    return [size for size in sizes if size]


class FSDPStrategy(TorchStrategy):
    def __init__(self) -> None:
        self.world = 1
        self.ctx: WorkerContext | None = None
        self.device = torch.device("cpu")
        self.model: torch.nn.Module | None = None
        self.all_gather = _CountedAllGather()
        self.reduce_scatter = _CountedReduceScatter()
        self._sent = 0

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        self.world, self.ctx, self.device = ctx.processes, ctx, device
        init_process_group(ctx, device)

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        assert self.ctx is not None
        reshard = self.ctx.config.typed(FSDPOptions).reshard_after_forward
        for unit in list(shard_units(model)):
            fully_shard(unit, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=reshard)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_custom_all_gather(self.all_gather)
                module.set_custom_reduce_scatter(self.reduce_scatter)
        self.model = model
        return model

    def take_bytes_sent(self) -> int | None:
        counted = self.all_gather.bytes + self.reduce_scatter.bytes
        sent, self._sent = counted - self._sent, counted
        return sent * (self.world - 1) // self.world

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        reshard = ctx.config.typed(FSDPOptions).reshard_after_forward
        gathers = 2 if reshard else 1
        payload = (gathers + 1) * gradient_bytes(model)
        return {
            "bytes_sent_per_step_model": payload * (self.world - 1) // self.world,
            "algorithm": f"FSDP2: {gathers} all-gather(s) of the parameters and a "
            "reduce-scatter of the gradients a step, modelled as rings: (N-1)/N x each payload",
            "reshard_after_forward": reshard,
            PATTERN_FACT: "fsdp" if reshard else "fsdp-no-reshard",
            "units": sum(isinstance(m, FSDPModule) for m in model.modules()),
            MESSAGES_FACT: unit_bytes(model),
        }

    def eval_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """A plain copy with every parameter gathered (one all-gather each, on every rank, so
        ranks with different numbers of held-out batches cannot wait on each other) and the
        first rank's BatchNorm statistics, which DDP would broadcast."""
        assert self.ctx is not None
        buffers = [name for name, _ in model.named_buffers()]
        return plain_copy(self.ctx, self.device, full_state(model), buffers)

    def saved_parameters(self, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        return None  # gathered on every rank at finish (save_params runs on one rank only)

    def finish(self) -> None:
        """Write the gathered parameters (every rank takes part; the first training rank
        writes), then let every rank finish its collectives before any leaves."""
        ctx, model = self.ctx, self.model
        assert ctx is not None and model is not None
        if ctx.config.save_params:
            names = {name for name, _ in model.named_parameters()}
            save_gathered(ctx, full_state(model), names)
        if dist.is_initialized():
            dist.barrier()

    def teardown(self, completed: bool = True) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer unsharded (``full_tensor``: a collective), detached."""
    return {
        name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
        for name, value in model.state_dict().items()
    }


def run(ctx: WorkerContext) -> None:
    run_training(ctx, FSDPStrategy())
