"""torch-ddp: DistributedDataParallel; gloo on CPU, NCCL on CUDA.

DDP all-reduces gradient buckets of ``bucket_mb`` during the backward pass (Li et al., VLDB
2020); ``no_sync()`` skips that, which is how exposed communication is measured. Gradient
compression goes through DDP communication hooks: fp16/bf16 (cast, all-reduce, cast back) and
PowerSGD (Vogels et al., NeurIPS 2019) with ``powersgd_rank``.

Bytes: dlscale cannot see gloo's or NCCL's wire traffic, so the count kept during the run is
the bytes of every tensor the communication hook hands to ``torch.distributed.all_reduce``,
counted from the tensors themselves (the fp16 or bf16 copy a compression hook sends, PowerSGD's
P and Q factors and the rank-1 tensors it sends uncompressed), scaled by the ring all-reduce
factor 2(N-1)/N; the model computes the same from the parameter sizes (none, fp16, bf16; no
model for PowerSGD, whose factors depend on each bucket's matrix shapes). A hook that did not
compress would show full bytes counted against half modelled.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from dlscale.contract.algorithms import MESSAGES_FACT, PATTERN_FACT
from dlscale.contract.comm_bytes import ring_bytes_mean
from dlscale.frameworks.torch.loop import (
    TorchStrategy,
    gradient_bytes,
    init_process_group,
    run_training,
)
from dlscale.frameworks.torch.options import DDPOptions
from dlscale.runtime.context import WorkerContext

_CAST_HOOKS = {
    "none": (default_hooks.allreduce_hook, 1.0),
    "fp16": (default_hooks.fp16_compress_hook, 0.5),
    "bf16": (default_hooks.bf16_compress_hook, 0.5),
}
"""Each cast hook and the share of the fp32 gradient bytes it sends, by the model."""


class DDPStrategy(TorchStrategy):
    resumable = True

    def __init__(self) -> None:
        self.world = 1
        self.options = DDPOptions()
        self._payload = 0
        self._all_reduce: Callable[..., Any] | None = None
        """torch.distributed.all_reduce as it was before this strategy counted it."""

    def setup(self, ctx: WorkerContext, device: torch.device) -> None:
        self.world, self.options = ctx.processes, ctx.config.typed(DDPOptions)
        init_process_group(ctx, device)

    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        options = self.options
        ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(
            model,
            device_ids=ids,
            bucket_cap_mb=options.bucket_mb,
            gradient_as_bucket_view=options.gradient_as_bucket_view,
            static_graph=options.static_graph,
        )
        if options.compression == "powersgd":
            state = powerSGD_hook.PowerSGDState(
                process_group=None,
                matrix_approximation_rank=options.powersgd_rank,
                start_powerSGD_iter=2,
            )
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        else:
            ddp.register_comm_hook(None, _CAST_HOOKS[options.compression][0])
        self._count_all_reduces()
        return ddp

    def _count_all_reduces(self) -> None:
        """Count the bytes of every tensor handed to ``torch.distributed.all_reduce`` in this
        process (the hooks call it through the module, as their source does), until
        :meth:`teardown`. Within a window only the hooks call it."""
        original = self._all_reduce = dist.all_reduce

        @functools.wraps(original)
        def all_reduce(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self._payload += tensor.nbytes
            return original(tensor, *args, **kwargs)

        dist.all_reduce = all_reduce

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any] | None:
        assert isinstance(model, DistributedDataParallel)
        return model.no_sync()

    def take_bytes_sent(self) -> int | None:
        sent = round(ring_bytes_mean(self._payload, self.world))
        self._payload = 0
        return sent

    def describe(self, ctx: WorkerContext, model: Any = None) -> dict[str, Any]:
        options = ctx.config.typed(DDPOptions)
        if options.compression == "powersgd":  # low-rank factors: no pattern of the model
            return {"compression": "powersgd", "powersgd_rank": options.powersgd_rank}
        payload = gradient_bytes(model) * _CAST_HOOKS[options.compression][1]
        facts: dict[str, Any] = {
            "bytes_sent_per_step_model": round(ring_bytes_mean(round(payload), self.world)),
            "algorithm": "library all-reduce, modelled as a ring: 2(N-1)/N x payload",
            PATTERN_FACT: "ring",
        }
        buckets = _bucket_bytes(model)
        if buckets:
            facts[MESSAGES_FACT] = buckets
        return facts

    def finish(self) -> None:
        """Every rank done with every collective before any leaves, so no rank destroys the
        group while a peer's gloo threads still hold work for it. Only on the normal path:
        after a failure a barrier would wait for a dead peer. (The abort seen at interpreter
        exit even with this barrier, SIGABRT "terminate called without an active exception",
        is avoided by :func:`dlscale.worker._exit`, which skips that clean-up.)"""
        if dist.is_initialized():
            dist.barrier()

    def teardown(self, completed: bool = True) -> None:
        if self._all_reduce is not None:
            dist.all_reduce, self._all_reduce = self._all_reduce, None
        if dist.is_initialized():
            dist.destroy_process_group()


def _bucket_bytes(model: Any) -> list[int]:
    """The bytes of each gradient bucket DDP built (one all-reduce each a step), as DDP's own
    logging data reports them (``bucket_sizes``, in the gradients' dtype, before a
    compression hook's cast); empty where it reports none. DDP may rebuild its buckets once
    after the first step, in the order the gradients arrived: not followed here."""
    logged = getattr(model, "_get_ddp_logging_data", None)
    text = str(logged().get("bucket_sizes", "")) if callable(logged) else ""
    sizes = [int(part) for part in text.replace(",", " ").split() if part.isdigit()]
    return [size for size in sizes if size > 0]


def run(ctx: WorkerContext) -> None:
    run_training(ctx, DDPStrategy())
